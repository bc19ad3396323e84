// Answering escalations: Approve, Deny (optional reason), Edit (shell-quoted
// argv in an input box, parsed back with the same rules, shown before it runs).
// From a tree row (the request the user sees), from the tree selection (the
// keybindings inside the view) or from a quick pick that shows every pending
// request in full (palette and keybindings elsewhere): never an unseen one.
import * as vscode from "vscode";
import type { Ctx } from "./context";
import type { QueueItem } from "./queue";
import { quoteArgv, splitArgv } from "./shell";
import { validateCommandLine } from "./validate";
import type { Node } from "./tree";
import { domainLabel } from "./tree";

type Target = Node | string | undefined;

function requestIdOf(target: Target): string | undefined {
  if (typeof target === "string") return target;
  if (target && target.type === "escalation") return target.requestId;
  if (target && target.type === "leaf") return target.requestId;
  return undefined;
}

async function pick(ctx: Ctx, action: string): Promise<QueueItem | undefined> {
  const items = ctx.manager.queue.list();
  if (!items.length) {
    void vscode.window.showInformationMessage("Lazaret: no pending escalations.");
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    items.map((item) => {
      const e = item.escalation;
      const d = ctx.manager.domains.get(item.domain);
      return {
        label: e.display || quoteArgv(e.argv),
        description: d ? domainLabel(d) : e.profile,
        detail: [
          `cwd ${e.cwd}`,
          `why: ${e.justification ?? "(none)"}`,
          ...(e.reasons ?? []).map((r) => `not auto-approved: ${r}`),
          ...(e.riskNotes ?? []).map((r) => `⚠ ${r}`),
        ].join(" · "),
        item,
      };
    }),
    { title: `Lazaret: ${action} which request?`, placeHolder: "Pending host escalations (oldest first)", matchOnDetail: true, ignoreFocusOut: true },
  );
  return picked?.item;
}

/** The request a command acts on: the row it was invoked on, else one the user picks. */
async function target(ctx: Ctx, arg: Target, action: string, fromSelection: boolean): Promise<QueueItem | undefined> {
  let id = requestIdOf(arg);
  if (!id && fromSelection) {
    const view = ctx.treeView;
    const selected = view?.visible ? (view.selection[0] as Node | undefined) : undefined;
    id = requestIdOf(selected);
  }
  if (id) {
    const item = ctx.manager.queue.get(id);
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
    void vscode.window.showErrorMessage(`Lazaret: ${what} failed: ${(err as Error).message}`, { modal: true });
  }
}

export async function approve(ctx: Ctx, arg: Target, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Approve", fromSelection);
  if (!item) return;
  const e = item.escalation;
  await report(ctx, ctx.manager.respond(e.requestId, "approve"), `approve ${quoteArgv(e.argv)}`);
}

export async function deny(ctx: Ctx, arg: Target, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Deny", fromSelection);
  if (!item) return;
  const e = item.escalation;
  const reason = await vscode.window.showInputBox({
    title: `Lazaret: deny ${quoteArgv(e.argv)}`,
    prompt: "Reason sent back to the agent (optional). Escape keeps the request pending.",
    placeHolder: "reason (optional)",
    ignoreFocusOut: true,
  });
  if (reason === undefined) return;
  await report(ctx, ctx.manager.respond(e.requestId, "deny", reason.trim() ? { reason: reason.trim() } : {}), `deny ${quoteArgv(e.argv)}`);
}

export async function edit(ctx: Ctx, arg: Target, fromSelection = false): Promise<void> {
  const item = await target(ctx, arg, "Edit", fromSelection);
  if (!item) return;
  const e = item.escalation;
  const line = await vscode.window.showInputBox({
    title: `Lazaret: edit the command (runs on the host in ${e.cwd})`,
    prompt: "POSIX shell quoting, no expansion. Escape keeps the request pending.",
    value: quoteArgv(e.argv),
    ignoreFocusOut: true,
    validateInput: validateCommandLine,
  });
  if (line === undefined) return;
  const parsed = splitArgv(line);
  if ("error" in parsed || !parsed.argv.length) return;
  const argv = parsed.argv;
  const run = "Run Edited Command";
  const answer = await vscode.window.showWarningMessage(
    `Run on the host: ${quoteArgv(argv)}`,
    {
      modal: true,
      detail: `In ${e.cwd}\nargv: ${JSON.stringify(argv)}\nRequested: ${quoteArgv(e.argv)}`,
    },
    run,
  );
  if (answer !== run) return;
  await report(ctx, ctx.manager.respond(e.requestId, "edit", { argv }), `edit to ${quoteArgv(argv)}`);
}

/** Focuses the view and reveals the oldest pending request. */
export async function showPending(ctx: Ctx): Promise<void> {
  await vscode.commands.executeCommand("lazaret.tree.focus");
  const first = ctx.manager.queue.list()[0];
  if (first && ctx.treeView && ctx.tree) {
    await ctx.treeView.reveal(ctx.tree.escalationNode(first.domain, first.escalation.requestId), { select: true, focus: true, expand: true });
  }
}
