// The "Lazaret" view: domain -> sandbox and sessions, pending escalations,
// agent branch, network policy, recent audit records; and, first, why this
// window could not ask (never shown as an empty queue).
//
// Everything from the sandbox (argv, justification, paths, commit subjects,
// DNS names, audit values) goes through ./text: escaped, cut with a note (a
// name or an address in the middle, its end kept: DECISIONS D19),
// and tooltips are plain strings (no Markdown, no HTML, no icons). Every node
// handed out is registered (./nodes), so that commands act only on rows this
// tree created.
import * as path from "node:path";
import * as vscode from "vscode";
import { auditExit, auditWhat } from "./audit";
import type { DomainManager, DomainState } from "./domains";
import { grantRow, requestRow, ruleRows } from "./grants";
import { Node, NodeRegistry, nodeKey } from "./nodes";
import type { PendingEscalation } from "./protocol";
import { quoteArgv, requestDisplay } from "./shell";
import { clip, clipDisplay, clipName, clipParts, inert, NAME_LONG } from "./text";

export type { Node } from "./nodes";

/** How much of a request the tree shows before it says "cut" (the full text: Show Full Request). */
export const LABEL_MAX = 160;
const DESCRIPTION_MAX = 100;
const DETAIL_MAX = 240;
const TOOLTIP_MAX = 1200;

export function shortHash(h?: string | null): string {
  return h ? h.slice(0, 12) : "";
}

export function domainLabel(d: DomainState): string {
  const ws = d.status?.workspace ?? d.folder?.workspace;
  if (!ws) return `domain ${inert(path.basename(path.dirname(d.socket)))}`;
  const profile = d.status?.profile ?? d.folder?.profile;
  return inert(`${path.basename(ws)}${profile ? ` (${profile})` : ""}`);
}

/** Characters of a request the tree row and its details cannot show (0: none; Show Full Request shows them). */
export function requestCut(e: PendingEscalation): number {
  return clipParts(requestDisplay(e), LABEL_MAX, (c) => c).more + clipParts(e.justification ?? "", DETAIL_MAX).more + clipParts(e.cwd, DETAIL_MAX).more;
}

export function requestIsCut(e: PendingEscalation): boolean {
  return requestCut(e) > 0;
}

/** More requests than this in one domain are listed collapsed (one row each). */
const EXPANDED_UP_TO = 3;

/** One request as a plain-text tooltip: everything the user needs to decide, inert. */
export function escalationTooltip(e: PendingEscalation): string {
  return [
    "Host escalation request",
    `command: ${clipDisplay(requestDisplay(e), TOOLTIP_MAX)}`,
    `cwd: ${clip(e.cwd, DETAIL_MAX)}`,
    `justification (the agent's words): ${e.justification ? clip(e.justification, TOOLTIP_MAX) : "(none)"}`,
    ...(e.reasons ?? []).map((r) => `not auto-approved: ${clipDisplay(r, DETAIL_MAX)}`),
    ...(e.riskNotes ?? []).map((r) => `⚠ risk: ${clipDisplay(r, DETAIL_MAX)}`),
    `expires: ${new Date(e.expiresAtMs).toLocaleTimeString()}`,
    ...(requestIsCut(e) ? ["Cut here: Show Full Request shows all of it."] : []),
  ].join("\n");
}

export class LazaretTree implements vscode.TreeDataProvider<Node> {
  private changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private nodes = new Map<string, Node>();

  constructor(
    private readonly manager: DomainManager,
    readonly registry: NodeRegistry,
  ) {}

  refresh(): void {
    this.changed.fire(undefined);
  }

  private intern<N extends Node>(node: N): N {
    const key = nodeKey(node);
    const existing = this.nodes.get(key) as N | undefined;
    if (existing && JSON.stringify(existing) === JSON.stringify(node)) return existing;
    this.nodes.set(key, node);
    return this.registry.issue(node);
  }

  /** The tree node of a pending request (for reveal). */
  escalationNode(socket: string, requestId: string): Node {
    return this.intern({ type: "escalation", socket, requestId });
  }

  /** The tree node of a pending network request (for reveal). */
  networkRequestNode(socket: string, requestId: string): Node {
    return this.intern({ type: "netRequest", socket, requestId });
  }

  getParent(node: Node): Node | undefined {
    switch (node.type) {
      case "domain":
        return undefined;
      case "escalation":
        return this.intern({ type: "pendingGroup", socket: node.socket });
      case "netRequest":
        return this.intern({ type: "netRequestGroup", socket: node.socket });
      case "rule":
        return this.intern({ type: "rulesGroup", socket: node.socket });
      case "leaf":
        return undefined;
      default:
        return this.intern({ type: "domain", socket: node.socket });
    }
  }

  getChildren(node?: Node): Node[] {
    const m = this.manager;
    if (!node) {
      const rows: Node[] = [];
      if (m.discoveryError) {
        const p = m.problems()[0];
        rows.push({
          type: "leaf",
          id: "discovery",
          label: "Lazaret cannot ask: pending requests are unknown",
          description: clip(p.message, DETAIL_MAX),
          tooltip: `${clip(p.message, TOOLTIP_MAX)}\n\n${p.fix}\n\nClick to open the setting.`,
          icon: new vscode.ThemeIcon("error", new vscode.ThemeColor("list.errorForeground")),
          command: { command: "workbench.action.openSettings", title: "Open the lazaret.path setting", arguments: ["lazaret.path"] },
          contextValue: "problem",
        });
      } else if (!m.discovered) {
        rows.push({ type: "leaf", id: "asking", label: "Asking lazaret…", icon: new vscode.ThemeIcon("sync~spin") });
      }
      rows.push(
        ...[...m.domains.values()]
          .filter((d) => d.status || d.folder || d.problem)
          .sort((a, b) => domainLabel(a).localeCompare(domainLabel(b)))
          .map((d): Node => ({ type: "domain", socket: d.socket })),
      );
      return rows.map((r) => this.intern(r));
    }
    const d = "socket" in node && node.socket ? m.domains.get(node.socket) : undefined;
    if (!d) return [];
    const s = d.socket;
    const leaf = (n: Omit<Extract<Node, { type: "leaf" }>, "type" | "socket">): Node => ({ type: "leaf", socket: s, ...n });
    switch (node.type) {
      case "domain": {
        const rows: Node[] = [];
        if (d.problem) rows.push({ type: "problem", socket: s });
        if (!d.status) {
          if (!d.problem) rows.push(leaf({ id: `${s}/start`, label: "Not running", description: "start an agent session", icon: new vscode.ThemeIcon("debug-start"), command: { command: "lazaret.startSession", title: "Start Agent Session" }, folder: d.folder?.workspace }));
          return rows.map((r) => this.intern(r));
        }
        rows.push({ type: "pendingGroup", socket: s });
        // Network requests (`[network] ask`) right under the escalations, whenever any waits.
        if (m.netQueue.list(s).length) rows.push({ type: "netRequestGroup", socket: s });
        rows.push({ type: "sandbox", socket: s }, { type: "branch", socket: s }, { type: "network", socket: s }, { type: "rulesGroup", socket: s }, { type: "audit", socket: s });
        return rows.map((r) => this.intern(r));
      }
      case "pendingGroup": {
        const items = m.queue.list(s);
        if (!items.length) {
          // Only a domain that was asked and answered has "no pending escalations".
          return [this.intern(d.problem ? leaf({ id: `${s}/unknown`, label: "Pending escalations unknown: this coordinator could not be asked", icon: new vscode.ThemeIcon("error") }) : leaf({ id: `${s}/nopending`, label: "No pending escalations", icon: new vscode.ThemeIcon("pass") }))];
        }
        return items.map((i) => this.intern({ type: "escalation", socket: s, requestId: i.value.requestId }));
      }
      case "escalation": {
        const e = m.queue.get(s, node.requestId)?.value;
        if (!e) return [];
        const id = `${s}/${e.requestId}`;
        const detail = { requestId: e.requestId, contextValue: "escalationDetail" };
        const rows: Node[] = [
          leaf({ id: `${id}/cwd`, label: `cwd: ${clip(e.cwd, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("folder"), ...detail }),
          leaf({ id: `${id}/why`, label: `justification: ${e.justification ? clip(e.justification, DETAIL_MAX) : "(none)"}`, tooltip: "The agent's words (untrusted)", icon: new vscode.ThemeIcon("comment"), ...detail }),
          ...(e.reasons ?? []).map((r, i) => leaf({ id: `${id}/reason${i}`, label: `not auto-approved: ${clipDisplay(r, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("info"), ...detail })),
          ...(e.riskNotes ?? []).map((r, i) => leaf({ id: `${id}/risk${i}`, label: `risk: ${clipDisplay(r, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("warning", new vscode.ThemeColor("list.warningForeground")), ...detail })),
        ];
        const cut = requestCut(e);
        if (cut)
          rows.push(leaf({ id: `${id}/full`, label: `Show Full Request (cut here: ${cut.toLocaleString("en-US")} more characters)`, description: "the command or justification is longer than shown", icon: new vscode.ThemeIcon("go-to-file"), command: { command: "lazaret.showFullRequest", title: "Show Full Request" }, ...detail }));
        return rows.map((r) => this.intern(r));
      }
      case "netRequestGroup":
        return m.netQueue.list(s).map((i) => this.intern({ type: "netRequest", socket: s, requestId: i.value.requestId }));
      case "rulesGroup": {
        const rows = d.rulesError ? [leaf({ id: `${s}/ruleserr`, label: `Cannot read the rules: ${clip(d.rulesError, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("error") })] : [];
        const listed = ruleRows(d.rules, Date.now());
        if (!listed.length && !d.rulesError) rows.push(leaf({ id: `${s}/norules`, label: d.rules ? "No auto-approve rule and no network grant" : "Not read yet", icon: new vscode.ThemeIcon("info") }));
        return [...rows.map((r) => this.intern(r)), ...listed.map((r) => this.intern({ type: "rule", socket: s, ruleId: r.id }))];
      }
      case "netRequest":
      case "rule":
      case "problem":
        return [];
      case "sandbox":
        return (d.status?.sessions ?? []).map((x) =>
          this.intern(leaf({ id: `${s}/session/${x.sessionId}`, label: x.command?.length ? clipDisplay(quoteArgv(x.command), LABEL_MAX) : "(default shell)", description: `${inert(x.client)} · pid ${x.pid} · since ${new Date(x.startedAtMs).toLocaleTimeString()}`, icon: new vscode.ThemeIcon("terminal") })),
        );
      case "branch": {
        const b = d.branch;
        if (!b) return d.branchError ? [this.intern(leaf({ id: `${s}/berr`, label: clip(d.branchError, DETAIL_MAX), icon: new vscode.ThemeIcon("error") }))] : [];
        const warned = new Set(b.warnings.map((w) => w.path));
        const review = { command: "lazaret.openBranchDiff", title: "Open Agent Branch Diff" };
        const rows: Node[] = [
          ...b.warnings.map((w) => leaf({ id: `${s}/warn/${w.path}`, label: `${clip(w.path, DETAIL_MAX)}: ${clip(w.reason, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("warning", new vscode.ThemeColor("list.errorForeground")), tooltip: `Opening or building this repository can run this file on the host: ${clip(w.reason, DETAIL_MAX)}`, command: review })),
          ...b.files.map((f) => leaf({ id: `${s}/file/${f.path}`, label: `${inert(f.status)}  ${clip(f.path, DETAIL_MAX)}`, description: f.additions == null ? "binary" : `+${f.additions} -${f.deletions}${warned.has(f.path) ? "  ⚠" : ""}`, icon: new vscode.ThemeIcon("diff"), command: review })),
          ...(b.uncommitted?.files ?? []).map((f) => leaf({ id: `${s}/unc/${f.path}`, label: `${inert(f.status)}  ${clip(f.path, DETAIL_MAX)}`, description: "uncommitted in the sandbox", icon: new vscode.ThemeIcon("edit") })),
        ];
        return rows.map((r) => this.intern(r));
      }
      case "network": {
        const n = d.network;
        const rows: Node[] = [];
        const failed = d.status?.networkError;
        if (failed) rows.push(leaf({ id: `${s}/netfailed`, label: `No network: ${clip(failed, DETAIL_MAX)}`, icon: new vscode.ThemeIcon("error", new vscode.ThemeColor("list.errorForeground")) }));
        else if (!n) rows.push(leaf({ id: `${s}/nonet`, label: clip(d.networkError ?? "unknown", DETAIL_MAX), icon: new vscode.ThemeIcon("circle-slash") }));
        else {
          for (const a of n.allow) rows.push(leaf({ id: `${s}/allow/${a}`, label: `allow ${clipName(a)}`, tooltip: `allow ${clipName(a, NAME_LONG)}`, icon: new vscode.ThemeIcon("pass") }));
          for (const a of n.deny) rows.push(leaf({ id: `${s}/deny/${a}`, label: `deny ${clipName(a)}`, tooltip: `deny ${clipName(a, NAME_LONG)}`, icon: new vscode.ThemeIcon("circle-slash") }));
          for (const l of n.learned) rows.push(leaf({ id: `${s}/learned/${l.address}`, label: `learned ${clipName(l.address)}`, description: `${clipDisplay(l.names.map((n) => clipName(n)).join(", "), DETAIL_MAX)} · ${l.expiresInSeconds} s`, tooltip: `learned ${clipName(l.address, NAME_LONG)} from ${clipDisplay(l.names.map((n) => clipName(n, NAME_LONG)).join(", "), TOOLTIP_MAX)}`, icon: new vscode.ThemeIcon("globe") }));
          // Credential endpoints: the sidecar adds the key (which never leaves it) for the origin.
          for (const c of n.credentials ?? []) {
            const answered = c.status1xx + c.status2xx + c.status3xx + c.status4xx + c.status5xx;
            const origin = clip(c.origin, DETAIL_MAX);
            const header = clip(c.header, 60);
            rows.push(
              leaf({
                id: `${s}/key/${c.port}`,
                label: `key for ${origin}`,
                description: `127.0.0.1:${c.port} · ${answered} request${answered === 1 ? "" : "s"} · ${c.rejected} refused`,
                tooltip:
                  `The sandbox sends requests for ${origin} to http://127.0.0.1:${c.port}; the Network Sidecar adds the ${header} header and forwards them to ${origin} only. The key stays in the sidecar.\n\n` +
                  `Answered: ${answered} (1xx ${c.status1xx} · 2xx ${c.status2xx} · 3xx ${c.status3xx} · 4xx ${c.status4xx} · 5xx ${c.status5xx})\n` +
                  `Refused keys (401/403): ${c.rejected}\nFailed in the sidecar: ${c.failed}\nBytes sent ${c.bytesSent} · received ${c.bytesReceived}`,
                icon: new vscode.ThemeIcon("key"),
              }),
            );
          }
        }
        rows.push({ type: "dnsGroup", socket: s });
        return rows.map((r) => this.intern(r));
      }
      case "dnsGroup":
        return d.dnsRefusals.map((r, i) => this.intern(leaf({ id: `${s}/dns/${i}/${r.atMs}`, label: `${clipName(r.name)} ${clip(r.recordType, 20)}`, tooltip: `${clipName(r.name, NAME_LONG)} ${clip(r.recordType, 20)}: ${clip(r.reason, DETAIL_MAX)}`, description: `${clip(r.reason, DETAIL_MAX)} · ${new Date(r.atMs).toLocaleTimeString()}`, icon: new vscode.ThemeIcon("circle-slash") })));
      case "audit":
        // Each kind with its own fields (./audit); the tooltip lists them all.
        return [...(d.audit ?? [])].reverse().map((a) => {
          const exit = auditExit(a);
          return this.intern(
            leaf({
              id: `${s}/audit/${a.sequence}`,
              label: `${inert(a.outcome)}  ${auditWhat(a, LABEL_MAX)}`,
              description: `${inert(a.decidedBy ?? "")}${exit ? ` · ${exit}` : ""}${a.reason ? ` · ${clip(a.reason, DESCRIPTION_MAX)}` : ""}`,
              tooltip: Object.entries(a)
                .map(
                  ([k, v]) =>
                    `${inert(k)}: ${
                      typeof v === "string"
                        ? clip(v, DETAIL_MAX)
                        : Array.isArray(v) && v.every((w) => typeof w === "string")
                          ? clipDisplay(quoteArgv(v), DETAIL_MAX)
                          : clip(JSON.stringify(v), DETAIL_MAX)
                    }`,
                )
                .join("\n"),
              icon: new vscode.ThemeIcon("history"),
            }),
          );
        });
      default:
        return [];
    }
  }

  getTreeItem(node: Node): vscode.TreeItem {
    const m = this.manager;
    const C = vscode.TreeItemCollapsibleState;
    if (node.type === "leaf") {
      const item = new vscode.TreeItem(node.label, C.None);
      item.id = this.registry.itemId(node);
      item.description = node.description;
      item.tooltip = node.tooltip ?? node.label;
      item.iconPath = node.icon;
      // The row itself is the argument: commands accept only nodes of this tree.
      if (node.command) item.command = { ...node.command, arguments: node.command.arguments ?? [node] };
      item.contextValue = node.contextValue;
      return item;
    }
    const d = m.domains.get(node.socket);
    const item = new vscode.TreeItem("", C.Collapsed);
    item.id = this.registry.itemId(node);
    switch (node.type) {
      case "domain": {
        const n = m.pendingCount(node.socket);
        item.label = d ? domainLabel(d) : "domain";
        item.description = d?.problem ? `cannot ask${n ? ` · ${n} pending (last known)` : ""}` : d?.status ? `${inert(d.status.containerState)}${n ? ` · ${n} pending` : ""}` : "not running";
        item.tooltip = `${inert(d?.status?.workspace ?? d?.folder?.workspace ?? "")}\n${inert(node.socket)}`;
        item.iconPath = new vscode.ThemeIcon(d?.problem ? "error" : d?.status ? (n ? "shield" : "vm-running") : "vm-outline", d?.problem ? new vscode.ThemeColor("list.errorForeground") : n ? new vscode.ThemeColor("list.warningForeground") : undefined);
        item.collapsibleState = C.Expanded;
        item.contextValue = d?.status ? "domain" : "domainStopped";
        break;
      }
      case "problem": {
        item.label = "Cannot ask this coordinator: pending requests unknown";
        item.description = clip(d?.problem ?? "", DETAIL_MAX);
        const fix = m.problems().find((p) => p.socket === node.socket)?.fix ?? "";
        item.tooltip = `${clip(d?.problem ?? "", TOOLTIP_MAX)}\n\n${fix}`;
        item.iconPath = new vscode.ThemeIcon("error", new vscode.ThemeColor("list.errorForeground"));
        item.collapsibleState = C.None;
        item.contextValue = "problem";
        break;
      }
      case "pendingGroup": {
        const n = m.queue.list(node.socket).length;
        item.label = d?.problem ? `Pending escalations (unknown${n ? `, ${n} last known` : ""})` : `Pending escalations (${n})`;
        item.iconPath = new vscode.ThemeIcon("bell", n || d?.problem ? new vscode.ThemeColor("list.warningForeground") : undefined);
        item.collapsibleState = C.Expanded;
        item.contextValue = "pendingGroup";
        break;
      }
      case "escalation": {
        const e = m.queue.get(node.socket, node.requestId)?.value;
        item.label = e ? clipDisplay(requestDisplay(e), LABEL_MAX) : inert(node.requestId);
        item.description = e?.justification ? clip(e.justification, DESCRIPTION_MAX) : "";
        item.tooltip = e ? escalationTooltip(e) : undefined;
        item.iconPath = new vscode.ThemeIcon("question", new vscode.ThemeColor("list.warningForeground"));
        item.collapsibleState = m.queue.list(node.socket).length > EXPANDED_UP_TO ? C.Collapsed : C.Expanded;
        item.contextValue = "escalation";
        break;
      }
      case "netRequestGroup": {
        const n = m.netQueue.list(node.socket).length;
        item.label = `Pending network requests (${n})`;
        item.iconPath = new vscode.ThemeIcon("bell", n ? new vscode.ThemeColor("list.warningForeground") : undefined);
        item.collapsibleState = C.Expanded;
        item.contextValue = "netRequestGroup";
        break;
      }
      case "netRequest": {
        const r = m.netQueue.get(node.socket, node.requestId)?.value;
        const row = r ? requestRow(r, Date.now()) : undefined;
        item.label = row?.label ?? inert(node.requestId);
        item.description = row?.description ?? "";
        item.tooltip = row?.tooltip;
        item.iconPath = new vscode.ThemeIcon("globe", new vscode.ThemeColor("list.warningForeground"));
        item.collapsibleState = C.None;
        item.contextValue = "networkRequest";
        break;
      }
      case "rulesGroup": {
        const rules = d?.rules;
        item.label = "Rules and grants";
        item.description = rules ? `${rules.network.length} network · ${rules.autoApprove.length} auto-approve` : d?.rulesError ? "cannot read" : "";
        item.iconPath = new vscode.ThemeIcon("law");
        item.collapsibleState = rules?.network.length ? C.Expanded : C.Collapsed;
        item.contextValue = "rulesGroup";
        break;
      }
      case "rule": {
        const rules = d?.rules;
        const grant = rules?.network.find((g) => g.id === node.ruleId);
        const row = grant ? grantRow(grant, Date.now()) : ruleRows(rules, Date.now()).find((r) => r.id === node.ruleId);
        item.label = row?.label ?? inert(node.ruleId);
        item.description = row?.description ?? "";
        item.tooltip = row?.tooltip;
        item.iconPath = new vscode.ThemeIcon(row?.kind === "autoApprove" ? "check-all" : grant?.verdict === "deny" ? "circle-slash" : "pass");
        item.collapsibleState = C.None;
        item.contextValue = row?.kind === "autoApprove" ? "ruleAutoApprove" : "ruleNetwork";
        break;
      }
      case "sandbox": {
        const st = d?.status;
        item.label = `Sandbox: ${inert(st?.containerState ?? "?")}`;
        item.description = `${inert(st?.image ?? "")} · ${st?.sessions.length ?? 0} session(s)`;
        item.tooltip = st?.containerError ? clip(st.containerError, TOOLTIP_MAX) : inert(st?.containerName ?? "");
        item.iconPath = new vscode.ThemeIcon(st?.containerState === "failed" ? "error" : "server-environment");
        item.collapsibleState = st?.sessions.length ? C.Collapsed : C.None;
        break;
      }
      case "branch": {
        const b = d?.branch;
        item.label = `Agent branch ${inert(b?.branch ?? d?.status?.agentBranch ?? "")}`;
        const ahead = d?.branchInfo;
        item.description = b?.head
          ? `${ahead ? `${ahead.ahead} commit(s) ahead · ${clip(ahead.last, 60)} · ` : ""}${b.files.length} file(s)${b.warnings.length ? ` · ⚠ ${b.warnings.length} warning(s)` : ""}`
          : "no agent commit yet";
        item.tooltip = b?.head ? `head ${inert(b.head)}\nbase ${inert(b.base ?? "-")}${ahead ? `\nlast commit: ${clip(ahead.last, DETAIL_MAX)}` : ""}` : undefined;
        item.iconPath = new vscode.ThemeIcon("git-branch", b?.warnings.length ? new vscode.ThemeColor("list.errorForeground") : undefined);
        item.collapsibleState = b && (b.files.length || b.uncommitted?.files.length || b.warnings.length) ? C.Collapsed : C.None;
        item.contextValue = "branch";
        break;
      }
      case "network": {
        const n = d?.network;
        const failed = d?.status?.networkError;
        item.label = "Network";
        // The Network Sidecar stopped: the sandbox is without network.
        item.description = failed
          ? `NONE: ${clip(failed, DETAIL_MAX)}`
          : n
            ? `allow ${n.allow.length} · deny ${n.deny.length} · learned ${n.learned.length}${n.credentials?.length ? ` · keys ${n.credentials.length}` : ""}`
            : clip(d?.networkError ?? "", DETAIL_MAX);
        item.iconPath = failed ? new vscode.ThemeIcon("error", new vscode.ThemeColor("list.errorForeground")) : new vscode.ThemeIcon("globe");
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
        item.description = d?.auditError ? `${d?.audit?.length ?? 0} · cannot read: ${clip(d.auditError, DETAIL_MAX)}` : `${d?.audit?.length ?? 0}`;
        item.iconPath = new vscode.ThemeIcon("history");
        item.contextValue = "audit";
        break;
    }
    return item;
  }
}
