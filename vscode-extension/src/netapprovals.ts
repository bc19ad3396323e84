// Answering network requests (Allow / Deny for a scope) and revoking rules
// and grants. As ./approvals: a command acts on the tree row it was invoked
// on when that row is a node this tree created (./nodes: a `command:` link or
// a keybinding can pass any argument, which must never answer or revoke
// anything); else the user picks from what is pending. An answer within the
// arming delay (./arming) is refused. The scope's quick pick is the second,
// deliberate step: it names exactly what the answer opens (DECISIONS D19: an
// address request's protocol and port; every protocol and port of the
// address only as its own, wider item). The destination is agent text: shown
// through ./text (a long name cut in the middle, its end kept), never in a
// notification.
import * as vscode from "vscode";
import type { Ctx } from "./context";
import type { DomainState } from "./domains";
import { requestKey } from "./arming";
import { everyPortText, isAddressRequest, opensText, ruleRows, SCOPE_CHOICES, scopeFor, scopeText, validateMinutes, type RuleRow } from "./grants";
import type { NetworkItem } from "./queue";
import { networkRequestOf, ruleOf } from "./nodes";
import type { GrantScope, NetworkDecision } from "./protocol";
import { clip, clipName, noIcons, notice } from "./text";
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
        label: noIcons(opensText(item.value)),
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

/**
 * The scope of an answer: the quick pick (each item says what the answer
 * opens or refuses: `what`), and an input box for "For ... minutes". With
 * `wider`, a separate last item of that label (every protocol and port of an
 * address): "wider" when it is picked. Undefined: cancelled.
 */
export async function askScope(title: string, what: string, wider?: string): Promise<GrantScope | "wider" | undefined> {
  type Item = vscode.QuickPickItem & { choice?: (typeof SCOPE_CHOICES)[number]["choice"]; wider?: boolean };
  const items: Item[] = SCOPE_CHOICES.map((c) => ({ label: c.label, detail: noIcons(`${what} · ${c.detail}`), choice: c.choice }));
  if (wider)
    items.push(
      { label: "wider than the request", kind: vscode.QuickPickItemKind.Separator },
      { label: noIcons(wider), detail: "Opens every protocol and port of this address, not only the one the request shows (the scope is asked next)", wider: true },
    );
  const picked = await vscode.window.showQuickPick(items, { title, placeHolder: "For how long? (Escape keeps the request pending)", ignoreFocusOut: true, matchOnDetail: false });
  if (!picked) return undefined;
  if (picked.wider) return "wider";
  if (!picked.choice) return undefined;
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

/**
 * Allow or Deny a network request: the request (row, selection, else a
 * pick), refused within the arming delay; then the scope, in a quick pick
 * that names what opens (or is refused). For an address, Allow opens the
 * protocol and port shown; every protocol and port is the pick's separate,
 * wider item (`allowEveryPort`), whose scope is asked next.
 */
export async function answerNetwork(ctx: Ctx, verb: "allow" | "deny", arg: unknown): Promise<void> {
  const item = await targetRequest(ctx, arg, verb === "allow" ? "Allow Network Request" : "Deny Network Request");
  if (!item) return;
  const r = item.value;
  if (!ctx.armed(requestKey("network", item.domain, r.requestId), `${verb} network request ${clip(r.requestId, 40)}`)) return;
  const opens = opensText(r);
  // Quick pick titles render no links, but `$(`: the destination is escaped and cut all the same.
  let decision: NetworkDecision = verb;
  let scope = await askScope(
    noIcons(`Lazaret: ${verb} ${opens}`),
    verb === "allow" ? `opens ${opens}${isAddressRequest(r) ? " only" : ""}` : `refuses ${opens}`,
    verb === "allow" && isAddressRequest(r) ? everyPortText(r) : undefined,
  );
  if (scope === "wider") {
    decision = "allowEveryPort";
    scope = await askScope(noIcons(`Lazaret: allow ${everyPortText(r)}`), `opens every protocol and port of ${clipName(r.destination)}`);
  }
  if (!scope || scope === "wider") return;
  const what = `${decision} ${decision === "allowEveryPort" ? everyPortText(r) : opens} (${scopeText(scope)})`;
  try {
    const result = await ctx.manager.respondNetwork(item.domain, r.requestId, decision, scope);
    if (result === "already-answered") void vscode.window.showWarningMessage("Lazaret: the network request was already answered elsewhere, or it expired: nothing changed.");
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
