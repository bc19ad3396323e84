// Lazaret for VS Code: a thin extension host over the typed coordinator client
// (./client, ./domains). State lives in one Ctx; this file wires it to the
// status bar, the tree, the commands and the review. Agent text reaches no
// surface raw (./text); notifications carry none at all (VS Code renders
// `[x](command:...)` in them as a live link): they point at the view.
import * as vscode from "vscode";
import * as approvals from "./approvals";
import { requestKey } from "./arming";
import { auditDocumentWhat, auditExit, auditJustification } from "./audit";
import { Ctx } from "./context";
import { opensText } from "./grants";
import * as netapprovals from "./netapprovals";
import { requestOf, networkRequestOf } from "./nodes";
import { METHODS, NetworkPolicy } from "./protocol";
import { ContentProvider, mergeBranch, openBranchDiff, pickDomain, SCHEME, WarningDecorations } from "./review";
import { requestDisplay } from "./shell";
import { clip, clipDisplay, clipName, inert, noLinks, notice } from "./text";
import { domainLabel, LazaretTree } from "./tree";

const AUDIT_SCHEME = "lazaret-audit";
let current: Ctx | undefined;

export async function activate(extension: vscode.ExtensionContext): Promise<void> {
  const started = performance.now();
  const ctx = new Ctx(extension);
  current = ctx;
  extension.subscriptions.push(ctx);

  // Status bar: on every window, warning colour when anything waits.
  const status = vscode.window.createStatusBarItem("lazaret.pending", vscode.StatusBarAlignment.Left, 1000);
  status.name = "Lazaret pending escalations";
  status.command = "lazaret.showPending";
  ctx.disposables.push(status);

  const tree = new LazaretTree(ctx.manager, ctx.registry);
  ctx.tree = tree;
  const view = vscode.window.createTreeView("lazaret.tree", { treeDataProvider: tree, showCollapseAll: true });
  ctx.treeView = view;
  ctx.disposables.push(view);

  // The status bar renders `$(icon)` in its text: only our own text goes there.
  // A window that could not ask says so (with the fix), never "0 pending".
  // Escalations and network requests count alike: each is a prompt that waits for a human.
  const renderPending = () => {
    const items = ctx.manager.queue.list();
    const asks = ctx.manager.netQueue.list();
    const n = items.length + asks.length;
    const problems = ctx.manager.problems();
    const waiting = n
      ? [
          ...(items.length ? [`Host escalations waiting for you (answer them in the Lazaret view):`, ...items.map((i) => `• ${clipDisplay(requestDisplay(i.value), 120)}`)] : []),
          ...(asks.length ? [`Network requests waiting for you (answer them in the Lazaret view):`, ...asks.map((i) => `• ${opensText(i.value)}${i.value.service ? "" : ` (${(i.value.recordTypes ?? []).map((t) => inert(t)).join(" ")})`}`)] : []),
        ].join("\n")
      : "";
    if (problems.length) {
      status.text = `$(error) Lazaret: cannot ask${n ? ` · ${n} pending` : ""}`;
      status.tooltip = [
        "Lazaret cannot tell what is pending:",
        ...problems.map((p) => `• ${clip(p.message, 400)}\n  Fix: ${p.fix}`),
        ...(waiting ? ["", waiting] : []),
      ].join("\n");
      status.backgroundColor = new vscode.ThemeColor("statusBarItem.errorBackground");
    } else if (!ctx.manager.discovered) {
      status.text = "$(sync~spin) Lazaret: asking…";
      status.tooltip = "Lazaret: finding the coordinators (lazaret editor-info)";
      status.backgroundColor = undefined;
    } else {
      status.text = `$(shield) Lazaret: ${n} pending`;
      status.tooltip = n ? waiting : "No host escalation or network request is waiting";
      status.backgroundColor = n ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
    }
    status.show();
    view.badge = n ? { value: n, tooltip: `${n} pending request(s)` } : problems.length ? { value: 1, tooltip: "Lazaret cannot ask: see the view" } : undefined;
    void vscode.commands.executeCommand("setContext", "lazaret.pending", n);
  };
  renderPending();

  let treeTimer: NodeJS.Timeout | undefined;
  const refreshTree = (now = false) => {
    if (now) {
      clearTimeout(treeTimer);
      treeTimer = undefined;
      tree.refresh();
      return;
    }
    treeTimer ??= setTimeout(() => {
      treeTimer = undefined;
      tree.refresh();
    }, 100);
  };
  // The arming delay (DECISIONS D20): every pending request in the order the
  // view shows it (domains as sorted there; escalations, then network
  // requests): one new to this window, or at another place than before,
  // cannot be answered for a second.
  const arm = () => {
    const order: string[] = [];
    const domains = [...ctx.manager.domains.values()].sort((a, b) => domainLabel(a).localeCompare(domainLabel(b)));
    for (const d of domains) {
      for (const i of ctx.manager.queue.list(d.socket)) order.push(requestKey("command", d.socket, i.value.requestId));
      for (const i of ctx.manager.netQueue.list(d.socket)) order.push(requestKey("network", d.socket, i.value.requestId));
    }
    ctx.arming.update(order, Date.now());
  };
  // A different request moving onto the selection (the one selected left just before): its delay starts again.
  let selected: string | undefined;
  const selectedKey = (): string | undefined => {
    const node = ctx.registry.known(view.selection[0]);
    const command = requestOf(node);
    if (command) return requestKey("command", command.socket, command.requestId);
    const network = networkRequestOf(node);
    return network ? requestKey("network", network.socket, network.requestId) : undefined;
  };
  ctx.disposables.push(
    view.onDidChangeSelection(() => {
      const now = selectedKey();
      ctx.arming.selectionMoved(selected, now, Date.now());
      selected = now;
    }),
  );

  // Notifications that point at a request: each stays until its request
  // leaves the queue (answered here or anywhere else, expired, its domain
  // gone): a progress notification, ended then.
  const notified: Array<{ pending: () => boolean; end: () => void }> = [];
  const endAnswered = () => {
    for (let i = notified.length - 1; i >= 0; i--) {
      if (!notified[i].pending()) notified.splice(i, 1)[0].end();
    }
  };
  ctx.disposables.push({ dispose: () => notified.splice(0).forEach((n) => n.end()) });
  const notifyUntilAnswered = (message: string, pending: () => boolean) => {
    if (!pending()) return;
    void vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: message, cancellable: false }, () => new Promise<void>((end) => notified.push({ pending, end })));
  };

  ctx.manager.onChange((change) => {
    if (change === "pending") {
      arm();
      renderPending();
      refreshTree(true);
      endAnswered();
    } else refreshTree();
  });
  // A notification only points at the queue, with no agent text at all
  // (notifications render links and icons): the request is shown, and
  // answered, in the tree; the status bar item and the view's badge stay.
  ctx.manager.onNewRequest((item) => {
    const d = ctx.manager.domains.get(item.domain);
    notifyUntilAnswered(
      `Lazaret: the sandbox of ${notice(d ? domainLabel(d) : "a domain", 80)} asks to run a command on the host. Answer it in the Lazaret view (the status bar's Lazaret item shows it).`,
      () => ctx.manager.queue.has(item.domain, item.value.requestId),
    );
  });

  // As for escalations: no agent text (the destination stays in the view).
  ctx.manager.onNewNetworkRequest((item) => {
    const d = ctx.manager.domains.get(item.domain);
    notifyUntilAnswered(
      `Lazaret: the sandbox of ${notice(d ? domainLabel(d) : "a domain", 80)} asks for a network destination no allow entry covers. Answer it in the Lazaret view (the status bar's Lazaret item shows it).`,
      () => ctx.manager.netQueue.has(item.domain, item.value.requestId),
    );
  });
  // Grants for minutes show the time they have left: redrawn while any exists.
  const ticker = setInterval(() => {
    if (ctx.manager.connected().some((d) => d.rules?.network.some((g) => g.expiresAtMs != null))) refreshTree();
  }, 15_000);
  ctx.disposables.push({ dispose: () => clearInterval(ticker) });

  const provider = new ContentProvider(ctx);
  const decorations = new WarningDecorations();
  const requests = new Map<string, string>();
  ctx.disposables.push(
    vscode.workspace.registerTextDocumentContentProvider(SCHEME, provider),
    vscode.workspace.registerTextDocumentContentProvider(AUDIT_SCHEME, { provideTextDocumentContent: (uri) => auditText(ctx, uri) }),
    vscode.workspace.registerTextDocumentContentProvider(approvals.REQUEST_SCHEME, { provideTextDocumentContent: (uri) => requests.get(uri.toString()) ?? "(lazaret: this request document is gone; open it again from the Lazaret view)\n" }),
    vscode.window.registerFileDecorationProvider(decorations),
  );

  // Every command may be run by a `command:` link or a keybinding with any
  // argument: each acts only on a node of the tree (ctx.registry), else asks.
  const command = (id: string, fn: (...args: any[]) => unknown) => ctx.disposables.push(vscode.commands.registerCommand(id, fn));
  command("lazaret.approve", (arg?: unknown) => approvals.approve(ctx, arg));
  command("lazaret.deny", (arg?: unknown) => approvals.deny(ctx, arg));
  command("lazaret.edit", (arg?: unknown) => approvals.edit(ctx, arg));
  command("lazaret.showFullRequest", (arg?: unknown) => approvals.showFullRequest(ctx, requests, arg, true));
  // Ctrl+Alt+A / Ctrl+Alt+D in the view answer the selected row: a network request is allowed or denied for a scope.
  command("lazaret.approveSelected", () => {
    const row = netapprovals.selectedRequest(ctx);
    return row ? netapprovals.answerNetwork(ctx, "allow", row) : approvals.approve(ctx, undefined, true);
  });
  command("lazaret.denySelected", () => {
    const row = netapprovals.selectedRequest(ctx);
    return row ? netapprovals.answerNetwork(ctx, "deny", row) : approvals.deny(ctx, undefined, true);
  });
  command("lazaret.editSelected", () => approvals.edit(ctx, undefined, true));
  command("lazaret.showPending", () => approvals.showPending(ctx));
  command("lazaret.openBranchDiff", (arg?: unknown) => openBranchDiff(ctx, provider, decorations, arg));
  command("lazaret.mergeBranch", (arg?: unknown) => mergeBranch(ctx, provider, decorations, arg));
  command("lazaret.startSession", (arg?: unknown) => startSession(ctx, arg));
  command("lazaret.networkAllow", (arg?: unknown) => network(ctx, "allow", arg));
  command("lazaret.networkDeny", (arg?: unknown) => network(ctx, "deny", arg));
  command("lazaret.showAudit", (arg?: unknown) => showAudit(ctx, arg));
  command("lazaret.allowNetworkRequest", (arg?: unknown) => netapprovals.answerNetwork(ctx, "allow", arg));
  command("lazaret.denyNetworkRequest", (arg?: unknown) => netapprovals.answerNetwork(ctx, "deny", arg));
  command("lazaret.revokeRule", (arg?: unknown) => netapprovals.revokeRule(ctx, arg));
  command("lazaret.refresh", async () => {
    await ctx.manager.rediscover();
    await Promise.all(ctx.manager.connected().map((d) => ctx.manager.resync(d).then(() => ctx.manager.refreshDetails(d), () => undefined)));
  });

  ctx.disposables.push(
    vscode.workspace.onDidChangeWorkspaceFolders(() => void ctx.manager.rediscover()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("lazaret.path")) void ctx.manager.rediscover();
    }),
  );

  ctx.log.info(`activate: UI ready in ${(performance.now() - started).toFixed(1)} ms`);
  void ctx.manager.start().then(() => {
    ctx.log.info(`activate: first discovery done in ${(performance.now() - started).toFixed(1)} ms (lazaret ${ctx.manager.info?.version ?? "(version not reported)"})`);
  });
}

export function deactivate(): void {
  current?.dispose();
  current = undefined;
}

/** The folder of a tree row (its domain's workspace), else the only workspace folder, else the user's pick; never a path from a link. */
async function folderFor(ctx: Ctx, arg: unknown): Promise<string | undefined> {
  const node = ctx.registry.known(arg);
  if (arg !== undefined && !node) ctx.log.warn("Start Agent Session: ignored an argument that is not a row of the Lazaret view");
  if (node?.type === "leaf" && node.folder) return node.folder;
  if (node && node.type === "domain") {
    const d = ctx.manager.domains.get(node.socket);
    const ws = d?.folder?.workspace ?? d?.status?.workspace;
    if (ws) return ws;
  }
  const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file");
  if (folders.length <= 1) return folders[0]?.uri.fsPath;
  const f = await vscode.window.showWorkspaceFolderPick({ placeHolder: "Lazaret: the workspace of the agent session" });
  return f?.uri.fsPath;
}

async function startSession(ctx: Ctx, arg?: unknown): Promise<void> {
  const dir = await folderFor(ctx, arg);
  if (!dir) {
    void vscode.window.showWarningMessage("Lazaret: open a folder (the top level of a git repository) first.");
    return;
  }
  // Without a discovery (it failed, and says so in the view) only the built-in profile is offered.
  const profiles = [...(ctx.manager.info?.profiles ?? ["default"])];
  const defaultProfile = ctx.manager.info?.defaultProfile ?? "default";
  profiles.sort((a, b) => Number(b === defaultProfile) - Number(a === defaultProfile) || a.localeCompare(b));
  const profile =
    profiles.length === 1
      ? profiles[0]
      : (await vscode.window.showQuickPick(profiles.map((p) => ({ label: p, description: p === defaultProfile ? "default" : undefined })), { title: `Lazaret: agent profile for ${inert(dir)}` }))?.label;
  if (!profile) return;
  const terminal = vscode.window.createTerminal({ name: `Lazaret: ${profile}`, shellPath: ctx.binary, shellArgs: ["run", "--profile", profile, "--workspace", dir], cwd: dir });
  terminal.show();
  ctx.log.info(`started: ${ctx.binary} run --profile ${profile} --workspace ${dir}`);
}

async function network(ctx: Ctx, action: "allow" | "deny", arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, action === "allow" ? "Allow Network Destination" : "Deny Network Destination");
  if (!d?.client) return;
  const rule = await vscode.window.showInputBox({
    title: `Lazaret: ${action} a network destination for ${domainLabel(d)}`,
    prompt: "A CIDR, an address or a DNS name (github.com, *.npmjs.org). The change is live.",
    ignoreFocusOut: true,
    validateInput: (v) => (v.trim() && !/\s/.test(v.trim()) ? undefined : "one CIDR, address or name"),
  });
  if (!rule) return;
  const method = action === "allow" ? METHODS.networkAllow : METHODS.networkDeny;
  try {
    const policy: NetworkPolicy = await d.client.request(method, { rule: rule.trim() });
    d.network = policy;
    void vscode.window.showInformationMessage(`Lazaret: ${action} ${noLinks(clipName(rule.trim()))}: now allow [${noLinks(clipDisplay(policy.allow.map((a) => clipName(a)).join(", "), 300))}], deny [${noLinks(clipDisplay(policy.deny.map((a) => clipName(a)).join(", "), 300))}].`);
    void ctx.manager.refreshDetails(d, ["network", "audit"]);
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${method} failed: ${notice((err as Error).message)}`);
  }
}

async function showAudit(ctx: Ctx, arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, "Show Audit Trail");
  if (!d?.status) return;
  const uri = vscode.Uri.from({ scheme: AUDIT_SCHEME, path: `/${d.status.domainHash}/audit.log`, query: new URLSearchParams({ socket: d.socket, t: String(Date.now()) }).toString() });
  const doc = await vscode.workspace.openTextDocument(uri);
  await vscode.window.showTextDocument(doc, { preview: false });
}

async function auditText(ctx: Ctx, uri: vscode.Uri): Promise<string> {
  const socket = new URLSearchParams(uri.query).get("socket") ?? "";
  const d = ctx.manager.domains.get(socket);
  if (!d?.client) return "(lazaret: the domain is not connected)\n";
  const [records, verify] = await Promise.all([
    d.client.request(METHODS.auditList, { limit: 500 }),
    d.client.request(METHODS.auditVerify, {}).catch((e: Error) => ({ intact: false, records: 0, problem: e.message, problemAt: null })),
  ]);
  // Agent text (argv, reasons, justifications) one line each, escaped; very long values cut.
  const lines = [
    `Lazaret audit trail of ${inert(d.status?.workspace)} (${inert(d.status?.profile)}, domain ${inert(d.status?.domainHash)})`,
    `Hash chain: ${verify.intact ? "intact" : `BROKEN at ${inert(String(verify.problemAt))}: ${clip(verify.problem, 500)}`} (${verify.records} records)`,
    "",
  ];
  // Each kind of record with its own fields (./audit), one line each.
  for (const a of records) {
    const when = new Date(a.decidedAtMs ?? a.receivedAtMs).toISOString();
    const exit = auditExit(a);
    const why = auditJustification(a);
    lines.push(
      `#${a.sequence} ${when} ${inert(a.outcome).padEnd(9)} by ${inert(a.decidedBy ?? "-")}: ${auditDocumentWhat(a, 2000)}` +
        `${exit ? ` (${exit})` : ""}${a.reason ? ` reason: ${clip(a.reason, 2000)}` : ""}${why ? ` why: ${clip(why, 2000)}` : ""}`,
    );
  }
  return lines.join("\n") + "\n";
}
