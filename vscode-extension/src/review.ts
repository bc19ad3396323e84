// Reviewing the agent's work: one multi-file diff (`vscode.changes`) of the
// agent branch's base against its head, and a second one of the sandbox's
// uncommitted changes, over read-only `lazaret:` documents served from
// `branch/fileContents`. Every document's URI names the two commits the
// review shows (`base`, `head`) and the provider fetches exactly those: a
// review titled with commit X never shows a newer head Y (DECISIONS D16).
// Files that make hosts run code are shown in a modal before the diff and
// again before a merge. A merge runs `lazaret merge --expect <commit> --yes`
// for the commit the confirmation named (the one reviewed in this window,
// else the head it showed): if the branch moved, nothing is merged and the
// user is offered the review again. Paths are agent text: shown through
// ./text, and a path with unsafe characters is shown (and named in the
// document URI) escaped; the real path travels in the URI's query.
import * as vscode from "vscode";
import type { Ctx } from "./context";
import type { DomainState } from "./domains";
import { socketOf } from "./nodes";
import { BranchDiff, FileContents, FileVersion, METHODS, PathWarning } from "./protocol";
import { clip, hasUnsafe, inert, noIcons } from "./text";
import { domainLabel, shortHash } from "./tree";

export const SCHEME = "lazaret";
type Side = "base" | "head" | "working";

/** A path as labels show it: unchanged when it holds no unsafe character (so the file name still picks the language), else escaped. */
export function displayPath(file: string): string {
  return hasUnsafe(file) || file.includes("\\") ? inert(file) : file;
}

/**
 * `lazaret:/<shown path>?<query>`: the path keeps the file name (language),
 * the query names the domain, the side, the real path and both commits of
 * the review.
 */
export function sideUri(socket: string, file: string, side: Side, base?: string | null, head?: string | null): vscode.Uri {
  const query = new URLSearchParams({ socket, side, path: file, base: base ?? "", head: head ?? "" }).toString();
  return vscode.Uri.from({ scheme: SCHEME, path: "/" + displayPath(file), query });
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
    const file = q.get("path") ?? uri.path.replace(/^\//, "");
    const baseCommit = q.get("base") || undefined;
    const headCommit = q.get("head") || undefined;
    const client = this.ctx.manager.domains.get(socket)?.client;
    if (!client) return `(lazaret: the domain of ${inert(socket)} is not connected)\n`;
    const key = `${socket}\0${file}\0${baseCommit}\0${headCommit}`;
    let pending = this.cache.get(key);
    if (!pending) {
      // The commits the review names, never the branch's current head.
      pending = client.request(METHODS.branchFileContents, { path: file, baseCommit, headCommit });
      this.cache.set(key, pending);
      pending.catch(() => this.cache.delete(key));
    }
    try {
      const contents = await pending;
      return versionText(contents[side], side);
    } catch (err) {
      return `(lazaret: ${inert((err as Error).message)})\n`;
    }
  }
}

/** Marks the review's warned files (and the same paths in the workspace) with a red "!". */
export class WarningDecorations implements vscode.FileDecorationProvider {
  private warned = new Map<string, string>();
  private changed = new vscode.EventEmitter<vscode.Uri[] | undefined>();
  readonly onDidChangeFileDecorations = this.changed.event;

  set(workspace: string, warnings: PathWarning[]): void {
    for (const w of warnings) this.warned.set(vscode.Uri.joinPath(vscode.Uri.file(workspace), displayPath(w.path)).toString(), inert(w.reason));
    for (const w of warnings) this.warned.set(`${SCHEME}:/${displayPath(w.path)}`, inert(w.reason));
    this.changed.fire(undefined);
  }

  provideFileDecoration(uri: vscode.Uri): vscode.FileDecoration | undefined {
    const key = uri.scheme === SCHEME ? `${SCHEME}:${uri.path}` : uri.toString();
    const reason = this.warned.get(key);
    return reason ? new vscode.FileDecoration("!", `Runs code on hosts: ${reason}`, new vscode.ThemeColor("list.errorForeground")) : undefined;
  }
}

/**
 * The domain a command acts on: the one of the tree row it was invoked on
 * (a node of this tree; a string or object from a `command:` link is not
 * one), the only running one, else the user's pick. Every command that
 * changes something asks again after this (a modal or an input box).
 */
export async function pickDomain(ctx: Ctx, arg: unknown, purpose: string): Promise<DomainState | undefined> {
  const node = ctx.registry.known(arg);
  if (arg !== undefined && !node) ctx.log.warn(`${purpose}: ignored an argument that is not a row of the Lazaret view`);
  const socket = socketOf(node);
  if (socket) {
    const d = ctx.manager.domains.get(socket);
    if (d?.status) return d;
  }
  const all = ctx.manager.connected();
  if (!all.length) {
    void vscode.window.showWarningMessage("Lazaret: no running domain. Start an agent session first.");
    return undefined;
  }
  if (all.length === 1) return all[0];
  const picked = await vscode.window.showQuickPick(
    all.map((d) => ({ label: noIcons(domainLabel(d)), description: noIcons(inert(d.status?.workspace)), d })),
    { title: `Lazaret: ${purpose}: which domain?` },
  );
  return picked?.d;
}

function warningLines(b: BranchDiff): string {
  return b.warnings.map((w) => `⚠ ${clip(w.path, 200)}: ${clip(w.reason, 200)}`).join("\n");
}

export async function openBranchDiff(ctx: Ctx, provider: ContentProvider, decorations: WarningDecorations, arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, "Open Agent Branch Diff");
  if (d) await review(ctx, provider, decorations, d);
}

/** Opens the review of a domain's agent branch at its current head, and remembers the commits it shows. */
export async function review(ctx: Ctx, provider: ContentProvider, decorations: WarningDecorations, d: DomainState): Promise<void> {
  if (!d.client || !d.status) return;
  let b: BranchDiff;
  try {
    b = await d.client.request(METHODS.branchDiff, { patch: false });
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${METHODS.branchDiff} failed`, { modal: true, detail: clip((err as Error).message, 1000) });
    return;
  }
  d.branch = b;
  const uncommitted = b.uncommitted?.files ?? [];
  if (!b.files.length && !uncommitted.length) {
    void vscode.window.showInformationMessage(`Lazaret: the agent branch has no changes against its base${b.head ? "" : " (no agent commit has reached the host yet)"}.`);
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
  if (b.head) d.reviewed = { branch: b.branch, base: b.base ?? null, head: b.head };
  provider.clear();
  const fileUri = (p: string) => vscode.Uri.joinPath(vscode.Uri.file(ws), displayPath(p));
  const warned = new Set(b.warnings.map((w) => w.path));
  const order = [...b.files].sort((x, y) => Number(warned.has(y.path)) - Number(warned.has(x.path)));
  const committed = order.map((f) => [fileUri(f.path), sideUri(d.socket, f.path, "base", b.base, b.head), sideUri(d.socket, f.path, "head", b.base, b.head)] as const);
  // Titles: both commits; tab labels may render `$(icon)`: noIcons.
  const title = noIcons(`Agent branch ${inert(b.branch)} (${shortHash(b.base)}..${shortHash(b.head)})${b.warnings.length ? ` ⚠ ${b.warnings.map((w) => clip(w.path, 80)).join(", ")}` : ""}`);
  // The uncommitted group first, so that the agent branch's review ends up in front.
  if (uncommitted.length) {
    const rows = uncommitted.map((f) => [fileUri(f.path), sideUri(d.socket, f.path, "head", b.base, b.head), sideUri(d.socket, f.path, "working", b.base, b.head)] as const);
    await openChanges(ctx, noIcons(`Uncommitted in the sandbox (${domainLabel(d)}) on ${shortHash(b.head) || "its base"}`), rows);
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

/** Exit status of `lazaret merge` when the branch is no longer at the expected commit. */
export const BRANCH_MOVED = 3;

async function moved(ctx: Ctx, detail: string, reopen: () => Promise<void>): Promise<void> {
  const again = "Reopen Review";
  const answer = await vscode.window.showWarningMessage(
    "Lazaret: the agent branch moved since the review. Nothing was merged.",
    { modal: true, detail: `${detail}\n\nReview the new commits, then merge again.` },
    again,
  );
  if (answer === again) await reopen();
}

export async function mergeBranch(ctx: Ctx, provider: ContentProvider, decorations: WarningDecorations, arg?: unknown): Promise<void> {
  const d = await pickDomain(ctx, arg, "Merge Agent Branch");
  if (!d?.client || !d.status) return;
  const client = d.client;
  ctx.log.info(`Merge Agent Branch: ${inert(d.status.workspace)}: asking ${METHODS.branchDiff}`);
  const reopen = () => review(ctx, provider, decorations, d);
  let now: BranchDiff;
  try {
    now = await client.request(METHODS.branchDiff, { patch: false });
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${METHODS.branchDiff} failed`, { modal: true, detail: clip((err as Error).message, 1000) });
    return;
  }
  if (!now.head) {
    void vscode.window.showInformationMessage("Lazaret: the agent branch has no commit on the host yet.");
    return;
  }
  // The commit reviewed in this window, else the head this confirmation shows.
  const reviewed = d.reviewed?.branch === now.branch ? d.reviewed.head : undefined;
  if (reviewed && reviewed !== now.head) {
    await moved(ctx, `You reviewed ${shortHash(reviewed)}; ${inert(now.branch)} is now at ${shortHash(now.head)}.`, reopen);
    return;
  }
  const sha = reviewed ?? now.head;
  let b: BranchDiff;
  try {
    // D4's warnings of exactly the commit that will be merged.
    b = await client.request(METHODS.branchDiff, { patch: false, head: sha });
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: ${METHODS.branchDiff} of ${shortHash(sha)} failed`, { modal: true, detail: clip((err as Error).message, 1000) });
    return;
  }
  const ws = d.status.workspace;
  const merge = "Merge";
  const look = "Open Review";
  const detail = [
    `Commit ${sha}${reviewed ? " (the one you reviewed)" : " (the branch's head now; not reviewed in this window)"}.`,
    `Runs lazaret merge --expect ${shortHash(sha)}… --yes in ${inert(ws)}: exactly this commit is merged; if the branch moves first, nothing is.`,
    `${b.files.length} file(s) changed since ${shortHash(b.base) || "its base"}: ${b.files.slice(0, 10).map((f) => clip(f.path, 120)).join(", ")}${b.files.length > 10 ? ", …" : ""}`,
    ...(b.warnings.length ? ["", "Files that make hosts run code:", warningLines(b)] : []),
    ...(now.uncommitted?.files.length ? ["", `${now.uncommitted.files.length} uncommitted change(s) in the sandbox are not merged.`] : []),
  ].join("\n");
  const answer = await vscode.window.showWarningMessage(`Merge ${inert(b.branch)} at ${shortHash(sha)} into your repository?`, { modal: true, detail }, ...(reviewed ? [merge] : [merge, look]));
  if (answer === look) return reopen();
  if (answer !== merge) return;
  const res = await ctx.run(["merge", "--workspace", ws, "--profile", d.status.profile, "--expect", sha, "--yes"]);
  ctx.log.info(`lazaret merge --expect ${sha}: exit ${res.code}\n${res.stdout}${res.stderr}`);
  void ctx.manager.refreshDetails(d, ["branch"]);
  if (res.code === 0) void vscode.window.showInformationMessage(`Lazaret: merged the agent branch at ${shortHash(sha)} into your repository.`);
  else if (res.code === BRANCH_MOVED) await moved(ctx, clip(res.stderr.trim(), 1000), reopen);
  else void vscode.window.showErrorMessage(`Lazaret: lazaret merge failed (exit status ${res.code}); nothing was merged`, { modal: true, detail: clip((res.stderr || res.stdout).trim(), 2000) });
}
