// Answering network requests (Allow / Deny for a scope) and revoking rules
// and grants. As ./approvals: a command acts on the tree row it was invoked
// on when that row is a node this tree created (./nodes: a `command:` link or
// a keybinding can pass any argument, which must never answer or revoke
// anything); else the user picks from what is pending. The destination is
// agent text: shown through ./text, never in a notification.
import * as vscode from "vscode";
import type { Ctx } from "./context";
import type { DomainState } from "./domains";
import { ruleRows, SCOPE_CHOICES, scopeFor, scopeText, validateMinutes, type RuleRow } from "./grants";
import type { NetworkItem } from "./queue";
import { networkRequestOf, ruleOf } from "./nodes";
import type { GrantScope, NetworkDecision } from "./protocol";
import { clip, noIcons, notice } from "./text";
import { domainLabel } from "./tree";

/** The argument as a row of this tree; anything else (a string, a look-alike object, a forged handle) is no row: the user is asked. */
function known(ctx: Ctx, arg: unknown, action: string) {
  const node = ctx.registry.known(arg);
  if (arg !== undefined && !node) ctx.log.warn(`${action}: ignored an argument that is not a row of the Lazaret view (a command link or keybinding?): asking instead`);
  return node;
}

async function pickRequest(ctx: Ctx, action: string): Promise<NetworkItem | undefined> {
  const items = ctx.manager.netQueue.list();
  if (!items.length) {
    void vscode.window.showInformationMessage("Lazaret: no pending network requests.");
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    items.map((item) => {
      const d = ctx.manager.domains.get(item.domain);
      return {
        label: noIcons(clip(item.value.destination, 160)),
        description: noIcons(d ? domainLabel(d) : ""),
        detail: noIcons(`${(item.value.recordTypes ?? []).map((t) => clip(t, 10)).join(" ")} · asked ${Number(item.value.repeats) + 1} time(s)`),
        item,
      };
    }),
    { title: `Lazaret: ${action} which network request?`, placeHolder: "Pending network requests (oldest first)", ignoreFocusOut: true },
  );
  return picked?.item;
}

/** The network request a command acts on: the row (a node of this tree), the selection, else one the user picks. */
async function targetRequest(ctx: Ctx, arg: unknown, action: string): Promise<NetworkItem | undefined> {
  const request = networkRequestOf(known(ctx, arg, action));
  if (request) {
    const item = ctx.manager.netQueue.get(request.socket, request.requestId);
    if (item) return item;
    void vscode.window.showInformationMessage("Lazaret: that network request is no longer pending (answered elsewhere, or it expired).");
    return undefined;
  }
  return pickRequest(ctx, action);
}

/** The selected row of the Lazaret view when it is a network request (keybindings inside the view answer the row they are on, whichever kind). */
export function selectedRequest(ctx: Ctx): unknown {
  const view = ctx.treeView;
  const node = view?.visible ? ctx.registry.known(view.selection[0]) : undefined;
  return networkRequestOf(node) ? node : undefined;
}

/** The scope of an answer: the quick pick, and an input box for "For ... minutes". Undefined: cancelled. */
export async function askScope(title: string): Promise<GrantScope | undefined> {
  const picked = await vscode.window.showQuickPick(
    SCOPE_CHOICES.map((c) => ({ label: c.label, detail: c.detail, choice: c.choice })),
    { title, placeHolder: "For how long? (Escape keeps the request pending)", ignoreFocusOut: true },
  );
  if (!picked) return undefined;
  if (picked.choice !== "minutes") return scopeFor(picked.choice);
  const minutes = await vscode.window.showInputBox({
    title,
    prompt: "Minutes (1 to 1440). Escape keeps the request pending.",
    value: "30",
    ignoreFocusOut: true,
    validateInput: validateMinutes,
  });
  return minutes === undefined ? undefined : scopeFor("minutes", minutes);
}

export async function answerNetwork(ctx: Ctx, decision: NetworkDecision, arg: unknown): Promise<void> {
  const verb = decision === "allow" ? "Allow" : "Deny";
  const item = await targetRequest(ctx, arg, `${verb} Network Request`);
  if (!item) return;
  // Quick pick titles render no links, but `$(`: the destination is a plain DNS name, cut and escaped all the same.
  const scope = await askScope(noIcons(`Lazaret: ${decision} ${clip(item.value.destination, 120)}`));
  if (!scope) return;
  const what = `${decision} the network request (${scopeText(scope)})`;
  try {
    const result = await ctx.manager.respondNetwork(item.domain, item.value.requestId, decision, scope);
    if (result === "already-answered") void vscode.window.showWarningMessage(`Lazaret: ${what}: it was already answered elsewhere, or it expired.`);
    else ctx.log.info(`${what}: done`);
  } catch (err) {
    // A modal is plain text; the request was not answered and stays listed.
    void vscode.window.showErrorMessage(`Lazaret: ${what} failed`, { modal: true, detail: `${clip((err as Error).message, 1000)}\n\nThe request is still pending: answer it again.` });
  }
}

async function pickRule(ctx: Ctx): Promise<{ domain: DomainState; row: RuleRow } | undefined> {
  const all = ctx.manager.connected().flatMap((d) => ruleRows(d.rules, Date.now()).map((row) => ({ domain: d, row })));
  if (!all.length) {
    void vscode.window.showInformationMessage("Lazaret: no rule or grant to revoke.");
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    all.map((x) => ({ label: noIcons(x.row.label), description: noIcons(`${domainLabel(x.domain)} · ${x.row.description}`), x })),
    { title: "Lazaret: revoke which rule or grant?", ignoreFocusOut: true },
  );
  return picked?.x;
}

export async function revokeRule(ctx: Ctx, arg: unknown): Promise<void> {
  const rule = ruleOf(known(ctx, arg, "Revoke"));
  let target: { domain: DomainState; row: RuleRow } | undefined;
  if (rule) {
    const d = ctx.manager.domains.get(rule.socket);
    const row = d ? ruleRows(d.rules, Date.now()).find((r) => r.id === rule.ruleId) : undefined;
    if (!d || !row) {
      void vscode.window.showInformationMessage("Lazaret: that rule or grant is gone already (revoked, or it expired).");
      return;
    }
    target = { domain: d, row };
  } else target = await pickRule(ctx);
  if (!target) return;
  const revoke = "Revoke";
  // A modal is plain text (no links, no icons); the names in it are escaped and cut.
  const answer = await vscode.window.showWarningMessage(
    `Revoke ${target.row.what}?`,
    { modal: true, detail: `Domain: ${domainLabel(target.domain)}\n${target.row.kind === "network" ? "What it opened closes at once, established connections included." : "Requests it matched ask again."}` },
    revoke,
  );
  if (answer !== revoke) return;
  try {
    const outcome = await ctx.manager.revokeRule(target.domain.socket, target.row.id);
    if (outcome === "gone") void vscode.window.showInformationMessage("Lazaret: it was gone already (revoked elsewhere, or it expired).");
    else ctx.log.info(`revoked ${target.row.id}`);
  } catch (err) {
    void vscode.window.showErrorMessage(`Lazaret: revoke failed: ${notice((err as Error).message)}`);
  }
}
