// Answering escalations: Approve (confirmed in a modal that names the
// command), Deny (optional reason), Edit (the argv as shell syntax in an input
// box, parsed back with the same rules, confirmed the same way before it
// runs), Show Full Request.
//
// Deliberate answers (DECISIONS D20): an answer given within the arming
// delay of the request's arrival in this window, or of the request moving
// onto the row or selection the command acts on, is refused (./arming); an
// approval or an edit runs only after a second step, the modal, which shows
// the command cut in the middle (the program and the start, and the end).
//
// What a command acts on: the tree row it was invoked on, when that row is a
// node this tree created (an identity check, ./nodes: a `command:` link or a
// keybinding can pass any string or object, which must never answer
// anything); the selected row (keybindings inside the view); else the
// request the user picks from a quick pick that shows every pending request
// (palette, keybindings elsewhere, and any argument that is not ours). Never
// an unseen request. All agent text is shown through ./text.
import * as vscode from "vscode";
import { requestKey } from "./arming";
import type { Ctx } from "./context";
import { requestOf } from "./nodes";
import type { EscalationItem } from "./queue";
import { quoteArgv, requestDisplay, splitArgv } from "./shell";
import { clip, clipDisplay, clipDisplayMiddle, clipParts, escapeUnsafe, inert, noIcons, notice } from "./text";
import { domainLabel, LABEL_MAX } from "./tree";
import { validateCommandLine } from "./validate";

export const REQUEST_SCHEME = "lazaret-request";

async function pick(ctx: Ctx, action: string): Promise<EscalationItem | undefined> {
  const items = ctx.manager.queue.list();
  if (!items.length) {
    const problems = ctx.manager.problems();
    if (problems.length) void vscode.window.showErrorMessage(`Lazaret: cannot ask for pending escalations: ${notice(problems[0].message)}. ${problems[0].fix}`);
    else {
      const network = ctx.manager.netQueue.list().length;
      // A network request is answered with Allow/Deny Network Request (or Ctrl+Alt+A/D on its row): say so rather than "nothing pending".
      void vscode.window.showInformationMessage(
        network
          ? `Lazaret: no pending host escalations; ${network} network request${network === 1 ? " is" : "s are"} pending: answer ${network === 1 ? "it" : "them"} in the Lazaret view (Show Pending Escalations selects the first; Ctrl+Alt+A/D there).`
          : "Lazaret: no pending escalations.",
      );
    }
    return undefined;
  }
  // Quick pick labels, descriptions and details render `$(icon)`: noIcons.
  const picked = await vscode.window.showQuickPick(
    items.map((item) => {
      const e = item.value;
      const d = ctx.manager.domains.get(item.domain);
      return {
        label: noIcons(clipDisplay(requestDisplay(e), LABEL_MAX)),
        description: noIcons(d ? domainLabel(d) : inert(e.profile)),
        detail: noIcons(
          [
            `cwd ${clip(e.cwd, 120)}`,
            `why: ${e.justification ? clip(e.justification, 200) : "(none)"}`,
            ...(e.reasons ?? []).map((r) => `not auto-approved: ${clipDisplay(r, 160)}`),
            ...(e.riskNotes ?? []).map((r) => `⚠ ${clipDisplay(r, 160)}`),
          ].join(" · "),
        ),
        item,
      };
    }),
    { title: `Lazaret: ${action} which request?`, placeHolder: "Pending host escalations (oldest first)", matchOnDetail: true, ignoreFocusOut: true },
  );
  return picked?.item;
}

/** The request a command acts on: the row it was invoked on (a node of this tree), the selection, else one the user picks. */
async function target(ctx: Ctx, arg: unknown, action: string, fromSelection: boolean): Promise<EscalationItem | undefined> {
  let node = ctx.registry.known(arg);
  if (arg !== undefined && !node) ctx.log.warn(`${action}: ignored an argument that is not a row of the Lazaret view (a command link or keybinding?): asking instead`);
  if (!node && fromSelection) {
    const view = ctx.treeView;
    node = view?.visible ? ctx.registry.known(view.selection[0]) : undefined;
  }
  const request = requestOf(node);
  if (request) {
    const item = ctx.manager.queue.get(request.socket, request.requestId);
    if (item) return item;
    void vscode.window.showInformationMessage("Lazaret: that request is no longer pending (answered elsewhere, or timed out).");
    return undefined;
  }
  return pick(ctx, action);
}

async function report(ctx: Ctx, outcome: Promise<"answered" | "already-answered">, what: string): Promise<void> {
  try {
    const result = await outcome;
    if (result === "already-answered") void vscode.window.showWarningMessage(`Lazaret: ${what}: the request was already answered elsewhere.`);
    else ctx.log.info(`${what}: done`);
  } catch (err) {
    // A modal is plain text; the request was not answered and stays listed.
    void vscode.window.showErrorMessage(`Lazaret: ${what} failed`, { modal: true, detail: `${clip((err as Error).message, 1000)}\n\nThe request is still pending: answer it again, or deny it.` });
  }
}

/** The command of a request for titles and messages: program first, cut. */
function shortCommand(item: EscalationItem, max = 120): string {
  return clipDisplay(requestDisplay(item.value), max);
}

/** Refuses (and says so) an answer to the request within the arming delay. */
function armed(ctx: Ctx, item: EscalationItem, action: string): boolean {
  return ctx.armed(requestKey("command", item.domain, item.value.requestId), `${action} ${shortCommand(item)}`);
}

/** How much of a command a confirmation shows (cut in the middle beyond it). */
const CONFIRM_MAX = 300;

/**
 * The second step of an approval or an edit: a modal naming the command that
 * would run (plain text, inert, cut in the middle) and its directory, and
 * `extra` (the justification; for an edit, what was asked). The command
 * opens the detail, whose lines wrap even inside a long word (the message
 * line does not: the end of a long command would be off the dialog). True
 * when the user chose `button`.
 */
async function confirmRun(question: string, argv: string[], display: string, cwd: string, button: string, extra: string[]): Promise<boolean> {
  const cut = clipParts(display, CONFIRM_MAX, escapeUnsafe).more > 0;
  const answer = await vscode.window.showWarningMessage(
    question,
    {
      modal: true,
      detail: [
        clipDisplayMiddle(display, CONFIRM_MAX),
        "",
        `In ${clip(cwd, 300)}`,
        `Program: ${clip(argv[0] ?? "", 200)} (${argv.length} word${argv.length === 1 ? "" : "s"}, ${[...display].length.toLocaleString("en-US")} characters as shell words)`,
        ...extra,
        ...(cut ? ["The command is cut in the middle above: Show Full Request (on its row) shows all of it."] : []),
        `Nothing runs unless you choose ${button}.`,
      ].join("\n"),
    },
    button,
  );
  return answer === button;
}

export const RUN_BUTTON = "Run on host";

export async function approve(ctx: Ctx, arg: unknown, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Approve", fromSelection);
  if (!item || !armed(ctx, item, "approve")) return;
  const e = item.value;
  const confirmed = await confirmRun("Run this command on the host?", e.argv, requestDisplay(e), e.cwd, RUN_BUTTON, [
    `Justification (the agent's words): ${e.justification ? clip(e.justification, 300) : "(none)"}`,
    ...(e.riskNotes ?? []).map((r) => `⚠ ${clipDisplay(r, 200)}`),
  ]);
  if (!confirmed) return;
  await report(ctx, ctx.manager.respond(item.domain, e.requestId, "approve"), `approve ${shortCommand(item)}`);
}

export async function deny(ctx: Ctx, arg: unknown, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Deny", fromSelection);
  if (!item || !armed(ctx, item, "deny")) return;
  const reason = await vscode.window.showInputBox({
    title: `Lazaret: deny ${shortCommand(item)}`,
    prompt: "Reason sent back to the agent (optional). Escape keeps the request pending.",
    placeHolder: "reason (optional)",
    ignoreFocusOut: true,
  });
  if (reason === undefined) return;
  await report(ctx, ctx.manager.respond(item.domain, item.value.requestId, "deny", reason.trim() ? { reason: reason.trim() } : {}), `deny ${shortCommand(item)}`);
}

export async function edit(ctx: Ctx, arg: unknown, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Edit", fromSelection);
  if (!item || !armed(ctx, item, "edit")) return;
  const e = item.value;
  // The whole argv, as shell syntax with no raw unsafe character ($'...' for those words): splitArgv reads it back.
  const line = await vscode.window.showInputBox({
    title: `Lazaret: edit the command (runs on the host in ${clip(e.cwd, 120)})`,
    prompt: "POSIX shell quoting ($'\\n' for escapes), no expansion. Escape keeps the request pending.",
    value: quoteArgv(e.argv),
    ignoreFocusOut: true,
    validateInput: validateCommandLine,
  });
  if (line === undefined) return;
  const parsed = splitArgv(line);
  if ("error" in parsed || !parsed.argv.length) return;
  const argv = parsed.argv;
  const run = "Run Edited Command";
  const confirmed = await confirmRun("Run this edited command on the host?", argv, quoteArgv(argv), e.cwd, run, [
    `argv: ${clipDisplay(JSON.stringify(argv), 1000)}`,
    `Requested: ${clipDisplayMiddle(requestDisplay(e), 600)}`,
  ]);
  if (!confirmed) return;
  await report(ctx, ctx.manager.respond(item.domain, e.requestId, "edit", { argv }), `edit to ${clipDisplay(quoteArgv(argv), 120)}`);
}

/** Focuses the view and reveals the oldest pending request. */
export async function showPending(ctx: Ctx): Promise<void> {
  await vscode.commands.executeCommand("lazaret.tree.focus");
  const first = ctx.manager.queue.list()[0];
  const ask = ctx.manager.netQueue.list()[0];
  if (first && ctx.treeView && ctx.tree) {
    await ctx.treeView.reveal(ctx.tree.escalationNode(first.domain, first.value.requestId), { select: true, focus: true, expand: true });
  } else if (ask && ctx.treeView && ctx.tree) {
    await ctx.treeView.reveal(ctx.tree.networkRequestNode(ask.domain, ask.value.requestId), { select: true, focus: true, expand: true });
  }
}

/** Splits escaped text into lines of about `width` characters, never inside an escape. */
function wrapped(text: string, width: number, escape: (ch: string) => string, indent: string): string[] {
  const lines: string[] = [];
  let line = "";
  for (const ch of text) {
    const piece = escape(ch);
    if (line.length + piece.length > width) {
      lines.push(line);
      line = "";
    }
    line += piece;
  }
  lines.push(line);
  return lines.map((l, i) => (i ? indent + l : l));
}

/** The whole request as inert text (for a read-only document). */
export function fullRequestText(item: EscalationItem, domain: string): string {
  const e = item.value;
  const WIDTH = 160;
  const block = (text: string) => wrapped(text, WIDTH, (c) => inert(c), "    ");
  return [
    `Lazaret: host escalation request ${inert(e.requestId)} of ${domain}`,
    "Everything the agent wrote is shown escaped (\\n, \\e, \\x07, \\u{202e}, \\\\ ...); long lines are wrapped at",
    `${WIDTH} characters (continuation lines are indented). Nothing here runs; answer in the Lazaret view.`,
    "",
    `Command (${e.argv.length} word(s), ${e.argv.reduce((n, w) => n + [...w].length, 0)} characters; program first):`,
    ...wrapped(quoteArgv(e.argv), WIDTH, (c) => c, "    "),
    "",
    "The words, one per line:",
    ...e.argv.flatMap((w, i) => block(w).map((l, j) => (j ? l : `[${i}] ${l}`))),
    "",
    `cwd: ${inert(e.cwd)}`,
    "Justification (the agent's words):",
    ...(e.justification ? block(e.justification) : ["(none)"]),
    "",
    ...(e.reasons ?? []).map((r) => `not auto-approved: ${escapeUnsafe(r)}`),
    ...(e.riskNotes ?? []).map((r) => `risk: ${escapeUnsafe(r)}`),
    `received ${new Date(e.receivedAtMs).toISOString()}, denied if nobody answers by ${new Date(e.expiresAtMs).toISOString()}`,
    "",
  ].join("\n");
}

/** Opens the whole request (no cut) in a read-only document. */
export async function showFullRequest(ctx: Ctx, documents: Map<string, string>, arg: unknown, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Show Full Request", fromSelection);
  if (!item) return;
  const d = ctx.manager.domains.get(item.domain);
  const uri = vscode.Uri.from({ scheme: REQUEST_SCHEME, path: `/request-${item.value.requestId.slice(0, 12).replace(/[^0-9A-Za-z]/g, "_")}.txt`, query: `t=${Date.now()}` });
  documents.set(uri.toString(), fullRequestText(item, d ? domainLabel(d) : "its domain"));
  const doc = await vscode.workspace.openTextDocument(uri);
  await vscode.window.showTextDocument(doc, { preview: false });
}
