// Network requests and rules as text, and the scope of an answer. Pure (no
// vscode at run time): the unit tests load it. Everything that came from the
// sandbox (a destination, a session id) goes through ./text.
import type { AutoApproveListing, GrantScope, NetworkGrant, PendingNetworkRequest, Rules } from "./protocol";
import { clip, clipName, inert, NAME_LONG, NAME_MAX } from "./text";

/** How long a network answer holds: the quick pick's choices, in order. */
export type ScopeChoice = "session" | "15m" | "1h" | "minutes" | "profile";

export const SCOPE_CHOICES: ReadonlyArray<{ choice: ScopeChoice; label: string; detail: string }> = [
  { choice: "session", label: "This session", detail: "Until this sandbox stops (every session of the domain has ended)" },
  { choice: "15m", label: "For 15 minutes", detail: "Ends on its own after 15 minutes" },
  { choice: "1h", label: "For 1 hour", detail: "Ends on its own after 60 minutes" },
  { choice: "minutes", label: "For ... minutes", detail: "A number of minutes you type (1 to 1440)" },
  { choice: "profile", label: "For the profile (until revoked)", detail: "Kept for this profile and workspace, in force at every start, until revoked (Rules and grants)" },
];

export const MAX_MINUTES = 1440;

/** Why a typed number of minutes is not acceptable, or undefined when it is (1 to 1440, digits only). */
export function validateMinutes(text: string): string | undefined {
  const t = text.trim();
  if (!/^\d{1,5}$/.test(t)) return `a whole number of minutes, 1 to ${MAX_MINUTES}`;
  const n = Number(t);
  return n >= 1 && n <= MAX_MINUTES ? undefined : `1 to ${MAX_MINUTES} minutes`;
}

/** The scope a choice stands for; `minutes` is the typed text for "For ... minutes" (undefined when invalid). */
export function scopeFor(choice: ScopeChoice, minutes?: string): GrantScope | undefined {
  switch (choice) {
    case "session":
      return { type: "session" };
    case "15m":
      return { type: "minutes", minutes: 15 };
    case "1h":
      return { type: "minutes", minutes: 60 };
    case "minutes":
      return minutes !== undefined && validateMinutes(minutes) === undefined ? { type: "minutes", minutes: Number(minutes.trim()) } : undefined;
    case "profile":
      return { type: "profile" };
    default:
      return undefined;
  }
}

/** A scope as words: "this session", "15 minutes", "the profile". */
export function scopeText(scope: GrantScope | null | undefined): string {
  switch (scope?.type) {
    case "session":
      return "this session";
    case "minutes":
      return `${Number(scope.minutes)} minute${scope.minutes === 1 ? "" : "s"}`;
    case "profile":
      return "the profile (until revoked)";
    default:
      return "unknown scope";
  }
}

/** Time left until `expiresAtMs`: "14m 59s", "2h 3m", "expired". */
export function timeLeft(expiresAtMs: number, now: number): string {
  const s = Math.floor((expiresAtMs - now) / 1000);
  if (!Number.isFinite(s) || s <= 0) return "expired";
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

const DEST_MAX = 200;

/** A destination with the one protocol and port it stands for: `10.9.0.7/32 tcp/8081`, or the name alone. Cut as D19 says. */
export function destinationText(destination: string, service: string | null | undefined, max: number = NAME_MAX): string {
  return service ? `${clipName(destination, max)} ${clip(service, 20)}` : clipName(destination, max);
}

/** Whether a request is for an address (it has a service), where `allowEveryPort` is an answer. */
export function isAddressRequest(r: Pick<PendingNetworkRequest, "service">): boolean {
  return typeof r.service === "string" && r.service.length > 0;
}

/** What an `allow` of the request opens: exactly the destination and, for an address, the protocol and port shown. */
export function opensText(r: Pick<PendingNetworkRequest, "destination" | "service">, max: number = NAME_MAX): string {
  return destinationText(r.destination, r.service, max);
}

/** What an `allowEveryPort` answer opens, named as the wider answer it is (addresses only). */
export function everyPortText(r: Pick<PendingNetworkRequest, "destination">, max: number = NAME_MAX): string {
  return `every protocol and port of ${clipName(r.destination, max)} (wider than asked)`;
}

/** A note for tooltips when a name is longer than shown. */
function cutNameNote(name: string, max: number): string[] {
  const n = [...String(name ?? "")].length;
  return clipName(name, max) === inert(name) ? [] : [`(${n} characters: cut in the middle, its end shown whole)`];
}

/** A network request's row: the destination (agent text, inert; a long name cut in the middle) and its service, and what else is known. */
export function requestRow(r: PendingNetworkRequest, now: number): { label: string; description: string; tooltip: string } {
  const types = (r.recordTypes ?? []).map((t) => inert(t)).join(" ") || "?";
  const repeats = Number(r.repeats) || 0;
  const address = isAddressRequest(r);
  return {
    label: opensText(r),
    description: `network · ${types}${repeats ? ` · asked ${repeats} more time${repeats === 1 ? "" : "s"}` : ""}`,
    tooltip: [
      address ? "Network request: the sandbox connected to an address no allow entry covers" : "Network request: the sandbox asked for a name no allow entry covers",
      `destination: ${clipName(r.destination, NAME_LONG)}`,
      ...cutNameNote(r.destination, NAME_LONG),
      ...(address
        ? [`protocol and port: ${inert(r.service)} (Allow opens exactly this; ${everyPortText(r, NAME_LONG)} is a separate choice)`]
        : [`record types: ${types}`]),
      `questions after the first: ${repeats}`,
      `sessions live when asked: ${(r.sessionIds ?? []).map((s) => clip(s, 40)).join(", ") || "(none)"}`,
      `received ${new Date(r.receivedAtMs).toLocaleTimeString()}; goes away unanswered in ${timeLeft(r.expiresAtMs, now)} (${address ? "it stays refused" : "the name stays refused"})`,
      "Allow or Deny it from this row (a scope is asked).",
    ].join("\n"),
  };
}

export interface RuleRow {
  /** The id `rules/revoke` takes. */
  id: string;
  kind: "autoApprove" | "network";
  label: string;
  description: string;
  tooltip: string;
  /** What a Revoke confirmation names. */
  what: string;
}

export function autoApproveRow(a: AutoApproveListing): RuleRow {
  const entry = clip(a.entry, DEST_MAX);
  return {
    id: a.id,
    kind: "autoApprove",
    label: `auto-approve ${entry}`,
    description: clip(a.source, 80),
    tooltip: `Auto-approve rule: ${entry}\nfrom ${clip(a.source, 200)}\nRevoke: for this run of the domain (the configuration file is not changed).`,
    what: `the auto-approve rule "${entry}" (${clip(a.source, 80)}) for this run of the domain`,
  };
}

/** What a grant covers: the name, the address and its one protocol and port, or every port of the address. */
export function grantWhat(g: Pick<NetworkGrant, "destination" | "service" | "everyPort">, max: number = NAME_MAX): string {
  if (g.everyPort) return `${clipName(g.destination, max)} every port`;
  return destinationText(g.destination, g.service, max);
}

export function grantRow(g: NetworkGrant, now: number): RuleRow {
  const dest = grantWhat(g);
  const verdict = g.verdict === "deny" ? "deny" : "allow";
  const left = g.scope?.type === "minutes" && g.expiresAtMs != null ? `${timeLeft(g.expiresAtMs, now)} left` : scopeText(g.scope);
  const hits = Number(g.hits) || 0;
  const covers = g.everyPort
    ? ["covers: every protocol and port of the address (wider than one request)"]
    : g.service
      ? [`covers: ${inert(g.service)} only (this protocol and port of the address)`]
      : [];
  return {
    id: g.id,
    kind: "network",
    label: `${verdict} ${dest}`,
    description: `${left} · ${hits} hit${hits === 1 ? "" : "s"} · by ${inert(g.decidedBy)}`,
    tooltip: [
      `Network ${verdict === "allow" ? "grant" : "remembered refusal"}: ${grantWhat(g, NAME_LONG)}`,
      ...cutNameNote(g.destination, NAME_LONG),
      ...covers,
      `scope: ${scopeText(g.scope)}${g.expiresAtMs != null ? ` (ends ${new Date(g.expiresAtMs).toLocaleTimeString()}, ${timeLeft(g.expiresAtMs, now)} left)` : ""}`,
      `questions since: ${hits}`,
      `decided by ${inert(g.decidedBy)} at ${new Date(g.grantedAtMs).toLocaleTimeString()}`,
    ].join("\n"),
    what: `the network ${verdict === "allow" ? "grant" : "refusal"} "${verdict} ${grantWhat(g, NAME_LONG)}" (${scopeText(g.scope)})`,
  };
}

/** Every rule and grant as rows: network grants first (they change), then the auto-approve rules. */
export function ruleRows(rules: Rules | undefined, now: number): RuleRow[] {
  if (!rules) return [];
  return [...(rules.network ?? []).map((g) => grantRow(g, now)), ...(rules.autoApprove ?? []).map(autoApproveRow)];
}
