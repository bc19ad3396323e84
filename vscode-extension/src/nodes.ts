// The nodes of the Lazaret view, and which of them a command may act on.
// Pure (no vscode at run time): the unit tests load it.
//
// A command can be invoked with any JSON argument by whoever can make VS Code
// run a `command:` link or a keybinding with `args`: a string
// (`command:lazaret.approve?["<id>"]`), a plain object that looks like a node
// (`{"type":"escalation","requestId":...}`), even a tree item handle
// (`{"$treeViewId":"lazaret.tree","$treeItemHandle":"1/<item id>"}`, which the
// extension host turns into the element the tree handed out). So commands act
// only on node objects this tree created (a WeakSet: identity, not shape), and
// item ids carry a random salt of this window so that a handle cannot be
// guessed. Anything else falls back to a choice the user makes.
import { randomBytes } from "node:crypto";
import type * as vscode from "vscode";

export type Node =
  | { type: "domain"; socket: string }
  | { type: "sandbox"; socket: string }
  | { type: "pendingGroup"; socket: string }
  | { type: "escalation"; socket: string; requestId: string }
  | { type: "netRequestGroup"; socket: string }
  | { type: "netRequest"; socket: string; requestId: string }
  | { type: "rulesGroup"; socket: string }
  | { type: "rule"; socket: string; ruleId: string }
  | { type: "branch"; socket: string }
  | { type: "network"; socket: string }
  | { type: "dnsGroup"; socket: string }
  | { type: "audit"; socket: string }
  | { type: "problem"; socket: string }
  | {
      type: "leaf";
      id: string;
      label: string;
      description?: string;
      tooltip?: string;
      icon?: vscode.ThemeIcon;
      command?: vscode.Command;
      contextValue?: string;
      /** The domain the row belongs to (for commands on it). */
      socket?: string;
      /** The pending request the row is a detail of. */
      requestId?: string;
      /** A workspace folder (the "Not running" row starts a session there). */
      folder?: string;
    };

export class NodeRegistry {
  private readonly issued = new WeakSet<object>();
  /** Random per window: tree item ids (and so their handles) cannot be guessed from outside. */
  readonly salt = randomBytes(12).toString("hex");

  /** Marks a node as handed out by the tree. */
  issue<N extends Node>(node: N): N {
    this.issued.add(node);
    return node;
  }

  /** The argument as a node of this tree, or undefined (a string, a plain object, a forged handle...). */
  known(arg: unknown): Node | undefined {
    return arg !== null && typeof arg === "object" && this.issued.has(arg) ? (arg as Node) : undefined;
  }

  /** A stable, unguessable tree item id for a node. */
  itemId(node: Node): string {
    return `${this.salt}:${nodeKey(node)}`;
  }
}

/** A node's identity within the tree (domain and request id for a request). */
export function nodeKey(node: Node): string {
  switch (node.type) {
    case "leaf":
      return `leaf:${node.id}`;
    case "escalation":
      return `escalation:${node.socket}\0${node.requestId}`;
    case "netRequest":
      return `netRequest:${node.socket}\0${node.requestId}`;
    case "rule":
      return `rule:${node.socket}\0${node.ruleId}`;
    default:
      return `${node.type}:${node.socket}`;
  }
}

/** The pending request a node stands for (its row or one of its detail rows). */
export function requestOf(node: Node | undefined): { socket: string; requestId: string } | undefined {
  if (!node) return undefined;
  if (node.type === "escalation") return { socket: node.socket, requestId: node.requestId };
  if (node.type === "leaf" && node.socket && node.requestId) return { socket: node.socket, requestId: node.requestId };
  return undefined;
}

/** The pending network request a node stands for (never an escalation's row). */
export function networkRequestOf(node: Node | undefined): { socket: string; requestId: string } | undefined {
  return node?.type === "netRequest" ? { socket: node.socket, requestId: node.requestId } : undefined;
}

/** The rule or grant a node stands for. */
export function ruleOf(node: Node | undefined): { socket: string; ruleId: string } | undefined {
  return node?.type === "rule" ? { socket: node.socket, ruleId: node.ruleId } : undefined;
}

/** The domain a node belongs to. */
export function socketOf(node: Node | undefined): string | undefined {
  if (!node) return undefined;
  return node.type === "leaf" ? node.socket : node.socket;
}
