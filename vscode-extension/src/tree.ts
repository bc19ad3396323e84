// The "Lazaret" view: domain -> sandbox and sessions, pending escalations,
// agent branch, network policy, recent audit records.
import * as path from "node:path";
import * as vscode from "vscode";
import type { Ctx } from "./context";
import type { DomainState } from "./domains";
import type { PendingEscalation } from "./protocol";

export type Node =
  | { type: "domain"; socket: string }
  | { type: "sandbox"; socket: string }
  | { type: "pendingGroup"; socket: string }
  | { type: "escalation"; socket: string; requestId: string }
  | { type: "branch"; socket: string }
  | { type: "network"; socket: string }
  | { type: "dnsGroup"; socket: string }
  | { type: "audit"; socket: string }
  | { type: "leaf"; id: string; label: string; description?: string; tooltip?: string | vscode.MarkdownString; icon?: vscode.ThemeIcon; command?: vscode.Command; contextValue?: string; requestId?: string };

export function shortHash(h?: string | null): string {
  return h ? h.slice(0, 8) : "";
}

export function domainLabel(d: DomainState): string {
  const ws = d.status?.workspace ?? d.folder?.workspace ?? d.socket;
  const profile = d.status?.profile ?? d.folder?.profile;
  return `${path.basename(ws)}${profile ? ` (${profile})` : ""}`;
}

/** The Markdown text of one request: everything the user needs to decide. */
export function escalationMarkdown(e: PendingEscalation): vscode.MarkdownString {
  const md = new vscode.MarkdownString(undefined, true);
  md.appendMarkdown("**Host escalation request**\n\n");
  md.appendCodeblock(e.display || e.argv.join(" "), "sh");
  md.appendMarkdown(`\n- **argv**: \`${JSON.stringify(e.argv).replace(/`/g, "'")}\`\n`);
  md.appendMarkdown(`- **cwd**: \`${e.cwd}\`\n`);
  md.appendText(`- justification (the agent's words): ${e.justification ?? "(none)"}\n`);
  for (const r of e.reasons ?? []) md.appendText(`- not auto-approved: ${r}\n`);
  for (const r of e.riskNotes ?? []) md.appendText(`- ⚠ risk: ${r}\n`);
  md.appendText(`- expires: ${new Date(e.expiresAtMs).toLocaleTimeString()}\n`);
  return md;
}

export class LazaretTree implements vscode.TreeDataProvider<Node> {
  private changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private nodes = new Map<string, Node>();

  constructor(private readonly ctx: Ctx) {}

  refresh(): void {
    this.changed.fire(undefined);
  }

  private intern<N extends Node>(node: N): N {
    const key = nodeId(node);
    const existing = this.nodes.get(key) as N | undefined;
    if (existing && JSON.stringify(existing) === JSON.stringify(node)) return existing;
    this.nodes.set(key, node);
    return node;
  }

  /** The tree node of a pending request (for reveal). */
  escalationNode(socket: string, requestId: string): Node {
    return this.intern({ type: "escalation", socket, requestId });
  }

  getParent(node: Node): Node | undefined {
    switch (node.type) {
      case "domain":
        return undefined;
      case "escalation":
        return this.intern({ type: "pendingGroup", socket: node.socket });
      case "leaf":
        return undefined;
      default:
        return this.intern({ type: "domain", socket: node.socket });
    }
  }

  getChildren(node?: Node): Node[] {
    const m = this.ctx.manager;
    if (!node) {
      if (m.discoveryError) return [this.intern({ type: "leaf", id: "error", label: "lazaret not found or failed", description: m.discoveryError, tooltip: m.discoveryError, icon: new vscode.ThemeIcon("error") })];
      return [...m.domains.values()]
        .filter((d) => d.status || d.folder)
        .sort((a, b) => domainLabel(a).localeCompare(domainLabel(b)))
        .map((d) => this.intern({ type: "domain", socket: d.socket }));
    }
    const d = "socket" in node ? m.domains.get(node.socket) : undefined;
    if (!d) return [];
    const s = (node as { socket: string }).socket;
    switch (node.type) {
      case "domain":
        if (!d.status)
          return [this.intern({ type: "leaf", id: `${s}/start`, label: "Not running", description: "start an agent session", icon: new vscode.ThemeIcon("debug-start"), command: { command: "lazaret.startSession", title: "Start Agent Session", arguments: [d.folder?.workspace] } })];
        return [
          this.intern({ type: "pendingGroup", socket: s }),
          this.intern({ type: "sandbox", socket: s }),
          this.intern({ type: "branch", socket: s }),
          this.intern({ type: "network", socket: s }),
          this.intern({ type: "audit", socket: s }),
        ];
      case "pendingGroup": {
        const items = m.queue.list(s);
        if (!items.length) return [this.intern({ type: "leaf", id: `${s}/nopending`, label: "No pending escalations", icon: new vscode.ThemeIcon("pass") })];
        return items.map((i) => this.intern({ type: "escalation", socket: s, requestId: i.escalation.requestId }));
      }
      case "escalation": {
        const e = m.queue.get(node.requestId)?.escalation;
        if (!e) return [];
        const id = `${s}/${e.requestId}`;
        const rows: Node[] = [
          { type: "leaf", id: `${id}/cwd`, label: `cwd: ${e.cwd}`, icon: new vscode.ThemeIcon("folder"), requestId: e.requestId, contextValue: "escalationDetail" },
          { type: "leaf", id: `${id}/why`, label: `justification: ${e.justification ?? "(none)"}`, tooltip: "The agent's words (untrusted)", icon: new vscode.ThemeIcon("comment"), requestId: e.requestId, contextValue: "escalationDetail" },
          ...(e.reasons ?? []).map((r, i): Node => ({ type: "leaf", id: `${id}/reason${i}`, label: `not auto-approved: ${r}`, icon: new vscode.ThemeIcon("info"), requestId: e.requestId, contextValue: "escalationDetail" })),
          ...(e.riskNotes ?? []).map((r, i): Node => ({ type: "leaf", id: `${id}/risk${i}`, label: `risk: ${r}`, icon: new vscode.ThemeIcon("warning", new vscode.ThemeColor("list.warningForeground")), requestId: e.requestId, contextValue: "escalationDetail" })),
        ];
        return rows.map((r) => this.intern(r));
      }
      case "sandbox":
        return (d.status?.sessions ?? []).map((x) =>
          this.intern({ type: "leaf", id: `${s}/session/${x.sessionId}`, label: (x.command ?? []).join(" ") || "(default shell)", description: `${x.client} · pid ${x.pid} · since ${new Date(x.startedAtMs).toLocaleTimeString()}`, icon: new vscode.ThemeIcon("terminal") }),
        );
      case "branch": {
        const b = d.branch;
        if (!b) return d.branchError ? [this.intern({ type: "leaf", id: `${s}/berr`, label: d.branchError, icon: new vscode.ThemeIcon("error") })] : [];
        const warned = new Set(b.warnings.map((w) => w.path));
        const rows: Node[] = [
          ...b.warnings.map((w): Node => ({ type: "leaf", id: `${s}/warn/${w.path}`, label: `${w.path}: ${w.reason}`, icon: new vscode.ThemeIcon("warning", new vscode.ThemeColor("list.errorForeground")), tooltip: `Opening or building this repository can run this file on the host: ${w.reason}`, command: { command: "lazaret.openBranchDiff", title: "Open Agent Branch Diff", arguments: [s] } })),
          ...b.files.map((f): Node => ({ type: "leaf", id: `${s}/file/${f.path}`, label: `${f.status}  ${f.path}`, description: f.additions == null ? "binary" : `+${f.additions} -${f.deletions}${warned.has(f.path) ? "  ⚠" : ""}`, icon: new vscode.ThemeIcon("diff"), command: { command: "lazaret.openBranchDiff", title: "Open Agent Branch Diff", arguments: [s] } })),
          ...(b.uncommitted?.files ?? []).map((f): Node => ({ type: "leaf", id: `${s}/unc/${f.path}`, label: `${f.status}  ${f.path}`, description: "uncommitted in the sandbox", icon: new vscode.ThemeIcon("edit") })),
        ];
        return rows.map((r) => this.intern(r));
      }
      case "network": {
        const n = d.network;
        const rows: Node[] = [];
        if (!n) rows.push({ type: "leaf", id: `${s}/nonet`, label: d.networkError ?? "unknown", icon: new vscode.ThemeIcon("circle-slash") });
        else {
          for (const a of n.allow) rows.push({ type: "leaf", id: `${s}/allow/${a}`, label: `allow ${a}`, icon: new vscode.ThemeIcon("pass") });
          for (const a of n.deny) rows.push({ type: "leaf", id: `${s}/deny/${a}`, label: `deny ${a}`, icon: new vscode.ThemeIcon("circle-slash") });
          for (const l of n.learned) rows.push({ type: "leaf", id: `${s}/learned/${l.address}`, label: `learned ${l.address}`, description: `${l.names.join(", ")} · ${l.expiresInSeconds} s`, icon: new vscode.ThemeIcon("globe") });
        }
        rows.push({ type: "dnsGroup", socket: s });
        return rows.map((r) => this.intern(r));
      }
      case "dnsGroup":
        return d.dnsRefusals.map((r, i) => this.intern({ type: "leaf", id: `${s}/dns/${i}/${r.atMs}`, label: `${r.name} ${r.recordType}`, description: `${r.reason} · ${new Date(r.atMs).toLocaleTimeString()}`, icon: new vscode.ThemeIcon("circle-slash") }));
      case "audit":
        return [...(d.audit ?? [])].reverse().map((a) =>
          this.intern({ type: "leaf", id: `${s}/audit/${a.sequence}`, label: `${a.outcome}  ${(a.executedArgv ?? a.requestedArgv ?? []).join(" ")}`, description: `${a.decidedBy ?? ""}${a.exitStatus != null ? ` · exit ${a.exitStatus}` : ""}${a.reason ? ` · ${a.reason}` : ""}`, tooltip: JSON.stringify(a, null, 2), icon: new vscode.ThemeIcon("history") }),
        );
      default:
        return [];
    }
  }

  getTreeItem(node: Node): vscode.TreeItem {
    const m = this.ctx.manager;
    const C = vscode.TreeItemCollapsibleState;
    if (node.type === "leaf") {
      const item = new vscode.TreeItem(node.label, C.None);
      item.id = nodeId(node);
      item.description = node.description;
      item.tooltip = node.tooltip ?? node.label;
      item.iconPath = node.icon;
      item.command = node.command;
      item.contextValue = node.contextValue;
      return item;
    }
    const d = m.domains.get(node.socket);
    const item = new vscode.TreeItem("", C.Collapsed);
    item.id = nodeId(node);
    switch (node.type) {
      case "domain": {
        const n = m.queue.list(node.socket).length;
        item.label = d ? domainLabel(d) : node.socket;
        item.description = d?.status ? `${d.status.containerState}${n ? ` · ${n} pending` : ""}` : "not running";
        item.tooltip = `${d?.status?.workspace ?? d?.folder?.workspace ?? ""}\n${node.socket}`;
        item.iconPath = new vscode.ThemeIcon(d?.status ? (n ? "shield" : "vm-running") : "vm-outline", n ? new vscode.ThemeColor("list.warningForeground") : undefined);
        item.collapsibleState = C.Expanded;
        item.contextValue = d?.status ? "domain" : "domainStopped";
        break;
      }
      case "pendingGroup": {
        const n = m.queue.list(node.socket).length;
        item.label = `Pending escalations (${n})`;
        item.iconPath = new vscode.ThemeIcon("bell", n ? new vscode.ThemeColor("list.warningForeground") : undefined);
        item.collapsibleState = C.Expanded;
        item.contextValue = "pendingGroup";
        break;
      }
      case "escalation": {
        const e = m.queue.get(node.requestId)?.escalation;
        item.label = e ? e.display || e.argv.join(" ") : node.requestId;
        item.description = e?.justification ?? "";
        item.tooltip = e ? escalationMarkdown(e) : undefined;
        item.iconPath = new vscode.ThemeIcon("question", new vscode.ThemeColor("list.warningForeground"));
        item.collapsibleState = C.Expanded;
        item.contextValue = "escalation";
        break;
      }
      case "sandbox": {
        const st = d?.status;
        item.label = `Sandbox: ${st?.containerState ?? "?"}`;
        item.description = `${st?.image ?? ""} · ${st?.sessions.length ?? 0} session(s)`;
        item.tooltip = st?.containerError ?? st?.containerName;
        item.iconPath = new vscode.ThemeIcon(st?.containerState === "failed" ? "error" : "server-environment");
        item.collapsibleState = st?.sessions.length ? C.Collapsed : C.None;
        break;
      }
      case "branch": {
        const b = d?.branch;
        item.label = `Agent branch ${b?.branch ?? d?.status?.agentBranch ?? ""}`;
        const ahead = d?.branchInfo;
        item.description = b?.head
          ? `${ahead ? `${ahead.ahead} commit(s) ahead · ${ahead.last} · ` : ""}${b.files.length} file(s)${b.warnings.length ? ` · ⚠ ${b.warnings.length} warning(s)` : ""}`
          : "no agent commit yet";
        item.iconPath = new vscode.ThemeIcon("git-branch", b?.warnings.length ? new vscode.ThemeColor("list.errorForeground") : undefined);
        item.collapsibleState = b && (b.files.length || b.uncommitted?.files.length || b.warnings.length) ? C.Collapsed : C.None;
        item.contextValue = "branch";
        break;
      }
      case "network": {
        const n = d?.network;
        item.label = "Network";
        item.description = n ? `allow ${n.allow.length} · deny ${n.deny.length} · learned ${n.learned.length}` : (d?.networkError ?? "");
        item.iconPath = new vscode.ThemeIcon("globe");
        item.contextValue = "network";
        break;
      }
      case "dnsGroup":
        item.label = "Recent DNS refusals";
        item.description = `${d?.dnsRefusals.length ?? 0}`;
        item.iconPath = new vscode.ThemeIcon("circle-slash");
        item.collapsibleState = d?.dnsRefusals.length ? C.Collapsed : C.None;
        break;
      case "audit":
        item.label = "Recent audit records";
        item.description = `${d?.audit?.length ?? 0}`;
        item.iconPath = new vscode.ThemeIcon("history");
        item.contextValue = "audit";
        break;
    }
    return item;
  }
}

export function nodeId(node: Node): string {
  switch (node.type) {
    case "leaf":
      return `leaf:${node.id}`;
    case "escalation":
      return `escalation:${node.requestId}`;
    default:
      return `${node.type}:${node.socket}`;
  }
}
