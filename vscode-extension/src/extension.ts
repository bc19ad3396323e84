// Lazaret for VS Code: a thin extension host over the typed coordinator client
// (./client, ./domains). State lives in one Ctx; this file wires it to the
// status bar, the tree, the commands and the review.
import * as vscode from "vscode";
import * as approvals from "./approvals";
import { Ctx } from "./context";
import { profilesFromConfigShow } from "./discovery";
import { camelAudit } from "./domains";
import { METHODS, NetworkPolicy } from "./protocol";
import { ContentProvider, mergeBranch, openBranchDiff, pickDomain, SCHEME, WarningDecorations } from "./review";
import { quoteArgv } from "./shell";
import { domainLabel, LazaretTree, Node } from "./tree";

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

  const tree = new LazaretTree(ctx);
  ctx.tree = tree;
  const view = vscode.window.createTreeView("lazaret.tree", { treeDataProvider: tree, showCollapseAll: true });
  ctx.treeView = view;
  ctx.disposables.push(view);

  const renderPending = () => {
    const items = ctx.manager.queue.list();
    const n = items.length;
    status.text = `$(shield) Lazaret: ${n} pending`;
    status.tooltip = n ? `Host escalations waiting for you:\n${items.map((i) => quoteArgv(i.escalation.argv)).join("\n")}` : "No host escalation is waiting";
    status.backgroundColor = n ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
    status.show();
    view.badge = n ? { value: n, tooltip: `${n} pending escalation(s)` } : undefined;
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
  ctx.manager.onChange((change) => {
    if (change === "pending") {
      renderPending();
      refreshTree(true);
    } else refreshTree();
  });
  // A notification only points at the queue; the answer is given in the tree.
  ctx.manager.onNewRequest((e) => {
    const show = "Show Pending";
    void vscode.window.showWarningMessage(`Lazaret: the sandbox asks to run \`${quoteArgv(e.argv)}\` on the host. Answer it in the Lazaret view.`, show).then((a) => {
      if (a === show) void approvals.showPending(ctx);
    });
  });

  const provider = new ContentProvider(ctx);
  const decorations = new WarningDecorations();
  ctx.disposables.push(
    vscode.workspace.registerTextDocumentContentProvider(SCHEME, provider),
    vscode.workspace.registerTextDocumentContentProvider(AUDIT_SCHEME, { provideTextDocumentContent: (uri) => auditText(ctx, uri) }),
    vscode.window.registerFileDecorationProvider(decorations),
  );

  const command = (id: string, fn: (...args: any[]) => unknown) => ctx.disposables.push(vscode.commands.registerCommand(id, fn));
  command("lazaret.approve", (arg?: Node) => approvals.approve(ctx, arg));
  command("lazaret.deny", (arg?: Node) => approvals.deny(ctx, arg));
  command("lazaret.edit", (arg?: Node) => approvals.edit(ctx, arg));
  command("lazaret.approveSelected", () => approvals.approve(ctx, undefined, true));
  command("lazaret.denySelected", () => approvals.deny(ctx, undefined, true));
  command("lazaret.editSelected", () => approvals.edit(ctx, undefined, true));
  command("lazaret.showPending", () => approvals.showPending(ctx));
  command("lazaret.openBranchDiff", (arg?: unknown) => openBranchDiff(ctx, provider, decorations, arg));
  command("lazaret.mergeBranch", (arg?: unknown) => mergeBranch(ctx, arg));
  command("lazaret.startSession", (arg?: unknown) => startSession(ctx, arg));
  command("lazaret.networkAllow", (arg?: unknown) => network(ctx, "allow", arg));
  command("lazaret.networkDeny", (arg?: unknown) => network(ctx, "deny", arg));
  command("lazaret.showAudit", (arg?: unknown) => showAudit(ctx, arg));
  command("lazaret.refresh", async () => {
    await ctx.manager.rediscover();
    await Promise.all(ctx.manager.connected().map((d) => ctx.manager.resync(d).then(() => ctx.manager.refreshDetails(d))));
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

async function folderFor(arg: unknown): Promise<string | undefined> {
  if (typeof arg === "string" && arg.startsWith("/")) return arg;
  const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file");
  if (folders.length <= 1) return folders[0]?.uri.fsPath;
  const f = await vscode.window.showWorkspaceFolderPick({ placeHolder: "Lazaret: the workspace of the agent session" });
  return f?.uri.fsPath;
}

async function startSession(ctx: Ctx, arg?: unknown): Promise<void> {
  const dir = await folderFor(arg);
  if (!dir) {
    void vscode.window.showWarningMessage("Lazaret: open a folder (the top level of a git repository) first.");
    return;
  }
  let profiles = ctx.manager.info?.profiles ?? [];
  if (ctx.manager.info?.legacy || !profiles.length) {
    const shown = await ctx.run(["config", "show", "--json"]);
    profiles = [...new Set([...profiles, ...profilesFromConfigShow(shown.stdout)])];
  }
  if (!profiles.length) profiles = ["default"];
  const defaultProfile = ctx.manager.info?.defaultProfile ?? "default";
  profiles.sort((a, b) => Number(b === defaultProfile) - Number(a === defaultProfile) || a.localeCompare(b));
  const profile =
    profiles.length === 1
      ? profiles[0]
      : (await vscode.window.showQuickPick(profiles.map((p) => ({ label: p, description: p === defaultProfile ? "default" : undefined })), { title: `Lazaret: agent profile for ${dir}` }))?.label;
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
    void vscode.window.showInformationMessage(`Lazaret: ${action} ${rule.trim()}: now allow [${policy.allow.join(", ")}], deny [${policy.deny.join(", ")}].`);
    void ctx.manager.refreshDetails(d, ["network", "audit"]);
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${method} failed: ${(err as Error).message}`);
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
  const lines = [
    `Lazaret audit trail of ${d.status?.workspace} (${d.status?.profile}, domain ${d.status?.domainHash})`,
    `Hash chain: ${verify.intact ? "intact" : `BROKEN at ${verify.problemAt}: ${verify.problem}`} (${verify.records} records)`,
    "",
  ];
  for (const raw of records as unknown as Record<string, unknown>[]) {
    const a = camelAudit(raw);
    const when = new Date(a.decidedAtMs ?? a.receivedAtMs).toISOString();
    const ran = a.executedArgv && JSON.stringify(a.executedArgv) !== JSON.stringify(a.requestedArgv) ? ` -> ${quoteArgv(a.executedArgv)}` : "";
    lines.push(
      `#${a.sequence} ${when} ${a.outcome.padEnd(9)} by ${a.decidedBy ?? "-"}: ${quoteArgv(a.requestedArgv ?? [])}${ran}` +
        `${a.exitStatus != null ? ` (exit ${a.exitStatus})` : ""}${a.reason ? ` reason: ${a.reason}` : ""}${a.justification ? ` why: ${a.justification}` : ""}`,
    );
  }
  return lines.join("\n") + "\n";
}
