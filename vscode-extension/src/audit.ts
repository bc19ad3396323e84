// Audit records in words (the tree's recent records, the audit document):
// each kind of record (its `type`) with its own fields, as the CLI's
// `lazaret audit` shows it. Everything but the words written here is
// someone else's text (argv, names, reasons, origins; much of it the
// agent's): it goes through ./text, and a kind this build does not know
// (a later coordinator's) is shown by its envelope, never dropped.
import type { AuditGrant, AuditRecord } from "./protocol";
import { quoteArgv } from "./shell";
import { clip, clipDisplay, clipName, inert } from "./text";

/** A value as received (a number, or anything a coordinator sent instead), inert. */
function value(v: unknown): string {
  return inert(String(v));
}

function leftOut(suppressed: number | null | undefined): string {
  return suppressed ? `  (+${value(suppressed)} not recorded: rate limit)` : "";
}

/** A grant in words: `allow grant.test for 15 min`, `deny 10.9.0.7/32 tcp/8081 for this session`. */
export function grantText(grant: AuditGrant, max: number): string {
  const scope = grant.scope as { type?: unknown; minutes?: unknown } | undefined;
  const scopeText =
    scope?.type === "minutes" ? `${value(scope.minutes)} min` : scope?.type === "profile" ? "the profile" : scope?.type === "session" ? "this session" : value(scope?.type);
  const service = grant.service ? ` ${clip(grant.service, 20)}` : grant.everyPort ? " (every protocol and port)" : "";
  const id = grant.id ? `  grant ${clip(grant.id, 40)}` : "";
  return `${value(grant.verdict)} ${clipName(grant.destination, max)}${service} for ${scopeText}${id}`;
}

/** What a record is about, one line, escaped; `max` bounds each text of someone else's. */
export function auditWhat(a: AuditRecord, max: number): string {
  switch (a.type) {
    case "escalation":
      return clipDisplay(quoteArgv(a.executedArgv ?? a.requestedArgv ?? []), max);
    case "connectionRefused":
      return a.connections === 1
        ? "connection refused before a request (Escalation Socket)"
        : `${value(a.connections)} connections refused before a request (Escalation Socket)`;
    case "dnsRefused":
      return `dns refused  ${clipName(a.name, max)} (${clip(a.recordType, 20)})  ${value(a.refusal)}${leftOut(a.suppressed)}`;
    case "dnsAnswerRefused":
      return `dns answer refused  ${clipName(a.name, max)} (${clip(a.recordType, 20)}) -> ${clip((a.addresses ?? []).join(", "), max)}  ${value(a.refusal)}${leftOut(a.suppressed)}`;
    case "policyChanged": {
      const entries = (a.entries ?? []).length ? clip((a.entries ?? []).join(", "), max) : "(no entries)";
      return `net ${value(a.action)}  ${entries}${a.privateAnswers ? `  private answers: ${value(a.privateAnswers)}` : ""}`;
    }
    case "networkAsked":
      return `network asked  ${clipName(a.destination, max)} (${clip(a.service ?? a.recordType, 20)})  request ${clip(a.requestId, 40)}`;
    case "networkAnswered":
      return `network answered  ${grantText(a.grant, max)}  request ${clip(a.requestId, 40)}`;
    case "networkRequestExpired":
      return `network request expired  ${clipName(a.destination, max)} (${clip((a.recordTypes ?? []).join(", "), 40)})  request ${clip(a.requestId, 40)}`;
    case "networkQueueFull":
      return a.destination
        ? `network queue full  ${clipName(a.destination, max)} (${clip(a.service ?? a.recordType, 20)}) refused without asking`
        : `network queue full  ${value(a.moreRefused ?? 0)} more refused without asking`;
    case "grantExpired":
      return `grant expired  ${grantText(a.grant, max)}`;
    case "grantRevoked":
      return `grant revoked  ${grantText(a.grant, max)}`;
    case "autoApproveRevoked":
      return `auto-approve revoked  ${clip(a.entry, max)}${a.ruleId ? `  rule ${clip(a.ruleId, 40)}` : ""}`;
    case "credentialRejected":
      return `credential rejected  ${clip(a.origin, max)} answered ${value(a.status)}${leftOut(a.suppressed)}`;
    case "credentialWithheld":
      return `credential withheld  ${clip(a.origin, max)} ${clip(a.method, 20)} -> ${value(a.status ?? "-")}, the key in its ${value(a.part)}${leftOut(a.suppressed)}`;
    case "credentialUse":
      return `credential use  session ${clip(a.sessionId, 64)}  ${(a.endpoints ?? [])
        .map(
          (e) =>
            `${clip(e.origin, max)}: 2xx=${value(e.status2xx)} 4xx=${value(e.status4xx)} 5xx=${value(e.status5xx)} rejected=${value(e.rejected)} failed=${value(e.failed)} withheld=${value(e.withheld)}`,
        )
        .join("; ")}`;
    case "legacy":
      return `legacy (layout v4)  ${clipDisplay(quoteArgv(a.executedArgv ?? a.requestedArgv ?? []), max)}`;
    default: {
      const unknown = a as { type?: unknown };
      return `${value(unknown.type)} (a kind of record this extension does not know)`;
    }
  }
}

/** ` · exit N` for an escalation that ran to its end. */
export function auditExit(a: AuditRecord): string {
  return a.type === "escalation" && a.exitStatus != null ? `exit ${value(a.exitStatus)}` : "";
}

/** The agent's words of an escalation (its justification), if any. */
export function auditJustification(a: AuditRecord): string | null | undefined {
  return a.type === "escalation" ? a.justification : undefined;
}

/**
 * What a record is about in the audit document: an escalation as asked and
 * what ran (`touch x -> /usr/bin/touch x`), any other kind as [`auditWhat`].
 */
export function auditDocumentWhat(a: AuditRecord, max: number): string {
  if (a.type !== "escalation") return auditWhat(a, max);
  const ran = a.executedArgv && JSON.stringify(a.executedArgv) !== JSON.stringify(a.requestedArgv) ? ` -> ${clipDisplay(quoteArgv(a.executedArgv), max)}` : "";
  return `${clipDisplay(quoteArgv(a.requestedArgv ?? []), max)}${ran}`;
}
