// Reviewing the agent's work: one multi-file diff (`vscode.changes`) of the
// agent branch's base against its head, and a second one of the sandbox's
// uncommitted changes, over read-only `lazaret:` documents served from
// `branch/fileContents`. Files that make hosts run code are shown in a modal
// before the diff and again before a merge.
import * as vscode from "vscode";
import { METHOD_NOT_FOUND, RpcError } from "./client";
import type { Ctx } from "./context";
import type { DomainState } from "./domains";
import { BranchDiff, FileContents, FileVersion, METHODS, PathWarning } from "./protocol";
import { domainLabel, shortHash } from "./tree";

export const SCHEME = "lazaret";
type Side = "base" | "head" | "working";

/** `lazaret:/<path>?<query>`: the path keeps the file name (language), the query names domain, side and commit. */
export function sideUri(socket: string, file: string, side: Side, commit?: string | null): vscode.Uri {
  const query = new URLSearchParams({ socket, side, commit: commit ?? "" }).toString();
  return vscode.Uri.from({ scheme: SCHEME, path: "/" + file, query });
}

export function versionText(v: FileVersion | null | undefined, side: Side): string {
  if (!v) return side === "working" ? "" : "";
  if (!v.exists) return "";
  if (v.binary || v.text == null) return `(binary file, ${v.size} bytes: not shown)\n`;
  return v.truncated ? `${v.text}\n\n(lazaret: truncated, the file has ${v.size} bytes)\n` : v.text;
}

export class ContentProvider implements vscode.TextDocumentContentProvider {
  private cache = new Map<string, Promise<FileContents>>();
  private changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  constructor(private readonly ctx: Ctx) {}

  clear(): void {
    this.cache.clear();
  }

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const q = new URLSearchParams(uri.query);
    const socket = q.get("socket") ?? "";
    const side = (q.get("side") ?? "head") as Side;
    const file = uri.path.replace(/^\//, "");
    const client = this.ctx.manager.domains.get(socket)?.client;
    if (!client) return `(lazaret: the domain of ${socket} is not connected)\n`;
    const key = `${socket}\0${file}\0${q.get("commit")}`;
    let pending = this.cache.get(key);
    if (!pending) {
      pending = client.request(METHODS.branchFileContents, { path: file });
      this.cache.set(key, pending);
      pending.catch(() => this.cache.delete(key));
    }
    try {
      const contents = await pending;
      return versionText(contents[side], side);
    } catch (err) {
      if (err instanceof RpcError && err.code === METHOD_NOT_FOUND)
        return `(lazaret: this coordinator does not serve ${METHODS.branchFileContents}; update lazaret to see file contents)\n`;
      return `(lazaret: ${(err as Error).message})\n`;
    }
  }
}

/** Marks the review's warned files (and the same paths in the workspace) with a red "!". */
export class WarningDecorations implements vscode.FileDecorationProvider {
  private warned = new Map<string, string>();
  private changed = new vscode.EventEmitter<vscode.Uri[] | undefined>();
  readonly onDidChangeFileDecorations = this.changed.event;

  set(workspace: string, warnings: PathWarning[]): void {
    for (const w of warnings) this.warned.set(vscode.Uri.joinPath(vscode.Uri.file(workspace), w.path).toString(), w.reason);
    for (const w of warnings) this.warned.set(`${SCHEME}:/${w.path}`, w.reason);
    this.changed.fire(undefined);
  }

  provideFileDecoration(uri: vscode.Uri): vscode.FileDecoration | undefined {
    const key = uri.scheme === SCHEME ? `${SCHEME}:${uri.path}` : uri.toString();
    const reason = this.warned.get(key);
    return reason ? new vscode.FileDecoration("!", `Runs code on hosts: ${reason}`, new vscode.ThemeColor("list.errorForeground")) : undefined;
  }
}

export async function pickDomain(ctx: Ctx, arg: unknown, purpose: string): Promise<DomainState | undefined> {
  if (typeof arg === "string") {
    const d = ctx.manager.domains.get(arg);
    if (d?.status) return d;
  }
  if (arg && typeof arg === "object" && "socket" in arg) {
    const d = ctx.manager.domains.get((arg as { socket: string }).socket);
    if (d?.status) return d;
  }
  const all = ctx.manager.connected();
  if (!all.length) {
    void vscode.window.showWarningMessage("Lazaret: no running domain. Start an agent session first.");
    return undefined;
  }
  if (all.length === 1) return all[0];
  const picked = await vscode.window.showQuickPick(
    all.map((d) => ({ label: domainLabel(d), description: d.status?.workspace, d })),
    { title: `Lazaret: ${purpose}: which domain?` },
  );
  return picked?.d;
}

function warningLines(b: BranchDiff): string {
  return b.warnings.map((w) => `⚠ ${w.path}: ${w.reason}`).join("\n");
}

export async function openBranchDiff(ctx: Ctx, provider: ContentProvider, decorations: WarningDecorations, arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, "Open Agent Branch Diff");
  if (!d?.client || !d.status) return;
  let b: BranchDiff;
  try {
    b = await d.client.request(METHODS.branchDiff, { patch: false });
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${METHODS.branchDiff} failed: ${(err as Error).message}`);
    return;
  }
  d.branch = b;
  const uncommitted = b.uncommitted?.files ?? [];
  if (!b.files.length && !uncommitted.length) {
    void vscode.window.showInformationMessage(`Lazaret: ${b.branch} has no changes against its base${b.head ? "" : " (no agent commit has reached the host yet)"}.`);
    return;
  }
  const ws = d.status.workspace;
  decorations.set(ws, b.warnings);
  if (b.warnings.length) {
    const open = "Open Review";
    const answer = await vscode.window.showWarningMessage(
      `The agent changed ${b.warnings.length} file(s) that make hosts run code`,
      { modal: true, detail: `${warningLines(b)}\n\nThese run on your machine when you open, build or enter the project after a merge. Review them first.` },
      open,
    );
    if (answer !== open) return;
  }
  provider.clear();
  const fileUri = (p: string) => vscode.Uri.joinPath(vscode.Uri.file(ws), p);
  const warned = new Set(b.warnings.map((w) => w.path));
  const order = [...b.files].sort((x, y) => Number(warned.has(y.path)) - Number(warned.has(x.path)));
  const committed = order.map((f) => [fileUri(f.path), sideUri(d.socket, f.path, "base", b.head), sideUri(d.socket, f.path, "head", b.head)] as const);
  const title = `Agent branch ${b.branch} (${shortHash(b.base)}..${shortHash(b.head)})${b.warnings.length ? ` ⚠ ${b.warnings.map((w) => w.path).join(", ")}` : ""}`;
  // The uncommitted group first, so that the agent branch's review ends up in front.
  if (uncommitted.length) {
    const rows = uncommitted.map((f) => [fileUri(f.path), sideUri(d.socket, f.path, "head", b.head), sideUri(d.socket, f.path, "working", b.head)] as const);
    await openChanges(ctx, `Uncommitted in the sandbox (${domainLabel(d)})`, rows);
  }
  await openChanges(ctx, title, committed);
}

async function openChanges(ctx: Ctx, title: string, rows: ReadonlyArray<readonly [vscode.Uri, vscode.Uri, vscode.Uri]>): Promise<void> {
  if (!rows.length) return;
  try {
    await vscode.commands.executeCommand("vscode.changes", title, rows.map((r) => [...r]));
    // Keep it open: the next group must not replace it as a preview.
    await vscode.commands.executeCommand("workbench.action.keepEditor");
  } catch (err) {
    ctx.log.warn(`vscode.changes unavailable (${(err as Error).message}): one diff per file`);
    for (const [file, left, right] of rows) {
      await vscode.commands.executeCommand("vscode.diff", left, right, `${vscode.workspace.asRelativePath(file)} (${title})`, { preview: false });
    }
  }
}

export async function mergeBranch(ctx: Ctx, arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, "Merge Agent Branch");
  if (!d?.client || !d.status) return;
  let b: BranchDiff;
  try {
    b = await d.client.request(METHODS.branchDiff, { patch: false });
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${METHODS.branchDiff} failed: ${(err as Error).message}`);
    return;
  }
  if (!b.head) {
    void vscode.window.showInformationMessage(`Lazaret: ${b.branch} has no commit on the host yet.`);
    return;
  }
  const ws = d.status.workspace;
  const merge = "Merge";
  const detail = [
    `git merge ${b.branch} (${shortHash(b.head)}) in ${ws}`,
    `${b.files.length} file(s) changed: ${b.files.slice(0, 10).map((f) => f.path).join(", ")}${b.files.length > 10 ? ", …" : ""}`,
    ...(b.warnings.length ? ["", "Files that make hosts run code:", warningLines(b)] : []),
    ...(b.uncommitted?.files.length ? ["", `${b.uncommitted.files.length} uncommitted change(s) in the sandbox are not merged.`] : []),
  ].join("\n");
  const answer = await vscode.window.showWarningMessage(`Merge ${b.branch} into your repository?`, { modal: true, detail }, merge);
  if (answer !== merge) return;
  const res = await ctx.exec("git", ["-C", ws, "merge", "--no-edit", b.branch]);
  ctx.log.info(`git merge ${b.branch}: ${res.code}\n${res.stdout}${res.stderr}`);
  if (res.code === 0) void vscode.window.showInformationMessage(`Lazaret: merged ${b.branch} (${shortHash(b.head)}) into ${ws}.`);
  else void vscode.window.showErrorMessage(`Lazaret: git merge failed (${res.code}): ${(res.stderr || res.stdout).trim()}`, { modal: true });
}
