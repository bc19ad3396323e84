// Audit records in words (./audit): every kind of record reads with its own
// fields, someone else's text in it is inert whatever it holds (the hostile
// corpus), and a kind this build does not know is shown by its type, not
// dropped or thrown on.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { auditDocumentWhat, auditExit, auditJustification, auditWhat } from "../../src/audit";
import type { AuditGrant, AuditRecord } from "../../src/protocol";
import { hasUnsafe } from "../../src/text";

const envelope = { sequence: 7, previousHash: "p", hash: "h", decidedBy: "networkSidecar", receivedAtMs: 1, reason: "why" } as const;
const grant: AuditGrant = { id: "grant-3f9a1e2f44d0", destination: "10.9.0.7/32", service: "tcp/8081", everyPort: false, verdict: "allow", scope: { type: "minutes", minutes: 15 } };

/** One record of every kind (the mapped type fails to compile when a kind is missing). */
function samples(text: string): { [K in AuditRecord["type"]]: AuditRecord & { type: K } } {
  return {
    escalation: { ...envelope, type: "escalation", outcome: "edited", requestId: "r", sessionId: "s", verified: true, justification: text, requestedArgv: ["touch", text], executedArgv: ["/usr/bin/touch", "b"], exitStatus: 0 },
    connectionRefused: { ...envelope, type: "connectionRefused", outcome: "rejected", connections: 3 },
    dnsRefused: { ...envelope, type: "dnsRefused", outcome: "dnsRefused", name: `${text}.example`, recordType: "TXT", refusal: "recordType", suppressed: 2 },
    dnsAnswerRefused: { ...envelope, type: "dnsAnswerRefused", outcome: "dnsAnswerRefused", name: text, recordType: "A", addresses: ["10.0.0.1"], refusal: "privateAddress" },
    policyChanged: { ...envelope, type: "policyChanged", outcome: "networkReloaded", action: "reload", entries: ["github.com", text], privateAnswers: "refuse" },
    networkAsked: { ...envelope, type: "networkAsked", outcome: "networkAsked", requestId: "net-1", destination: text, recordType: "AAAA" },
    networkAnswered: { ...envelope, type: "networkAnswered", outcome: "networkGranted", requestId: "net-1", grant: { ...grant, destination: text } },
    networkRequestExpired: { ...envelope, type: "networkRequestExpired", outcome: "networkExpired", requestId: "net-2", destination: text, recordTypes: ["A", "AAAA"] },
    networkQueueFull: { ...envelope, type: "networkQueueFull", outcome: "networkQueueFull", destination: text, recordType: "A" },
    grantExpired: { ...envelope, type: "grantExpired", outcome: "networkExpired", grant },
    grantRevoked: { ...envelope, type: "grantRevoked", outcome: "networkRevoked", grant: { ...grant, id: null, service: null, everyPort: true, scope: { type: "profile" } } },
    autoApproveRevoked: { ...envelope, type: "autoApproveRevoked", outcome: "networkRevoked", entry: `${text} *`, ruleId: "auto-1" },
    credentialRejected: { ...envelope, type: "credentialRejected", outcome: "credentialRejected", origin: "https://api.example", status: 401 },
    credentialWithheld: { ...envelope, type: "credentialWithheld", outcome: "credentialWithheld", origin: "https://api.example", method: text, status: null, part: "body" },
    credentialUse: {
      ...envelope,
      type: "credentialUse",
      outcome: "credentialUse",
      sessionId: "f742a361d8ba74a012b08f5c71c0ced8",
      endpoints: [{ origin: "https://api.example", status1xx: 0, status2xx: 5, status3xx: 0, status4xx: 1, status5xx: 0, rejected: 1, failed: 0, bytesSent: 3, bytesReceived: 4, withheld: 0 }],
    },
    legacy: { ...envelope, type: "legacy", outcome: "networkAllowed", requestId: "network-1-1", sessionId: "-", verified: true, requestedArgv: ["net", text] },
  };
}

test("each kind of record reads as words with its own fields", () => {
  const words = Object.fromEntries(Object.entries(samples("x")).map(([kind, record]) => [kind, auditWhat(record, 160)]));
  assert.equal(words.escalation, "/usr/bin/touch b");
  assert.equal(words.connectionRefused, "3 connections refused before a request (Escalation Socket)");
  assert.equal(words.dnsRefused, "dns refused  x.example (TXT)  recordType  (+2 not recorded: rate limit)");
  assert.equal(words.dnsAnswerRefused, "dns answer refused  x (A) -> 10.0.0.1  privateAddress");
  assert.equal(words.policyChanged, "net reload  github.com, x  private answers: refuse");
  assert.equal(words.networkAsked, "network asked  x (AAAA)  request net-1");
  assert.equal(words.networkAnswered, "network answered  allow x tcp/8081 for 15 min  grant grant-3f9a1e2f44d0  request net-1");
  assert.equal(words.networkRequestExpired, "network request expired  x (A, AAAA)  request net-2");
  assert.equal(words.networkQueueFull, "network queue full  x (A) refused without asking");
  assert.equal(words.grantExpired, "grant expired  allow 10.9.0.7/32 tcp/8081 for 15 min  grant grant-3f9a1e2f44d0");
  assert.equal(words.grantRevoked, "grant revoked  allow 10.9.0.7/32 (every protocol and port) for the profile");
  assert.equal(words.autoApproveRevoked, "auto-approve revoked  x *  rule auto-1");
  assert.equal(words.credentialRejected, "credential rejected  https://api.example answered 401");
  assert.equal(words.credentialWithheld, "credential withheld  https://api.example x -> -, the key in its body");
  assert.match(words.credentialUse, /^credential use  session f742a361d8ba74a012b08f5c71c0ced8  https:\/\/api\.example: 2xx=5 4xx=1 5xx=0 rejected=1/);
  assert.equal(words.legacy, "legacy (layout v4)  net x");
  const all = samples("x");
  assert.equal(auditDocumentWhat(all.escalation, 2000), "touch x -> /usr/bin/touch b", "the document shows the request and what ran");
  assert.equal(auditExit(all.escalation), "exit 0");
  assert.equal(auditExit(all.dnsRefused), "");
  assert.equal(auditJustification(all.escalation), "x");
  assert.equal(auditJustification(all.networkAsked), undefined);
});

test("the hostile corpus stays inert in every kind of record", () => {
  const corpus = JSON.parse(fs.readFileSync(path.resolve(__dirname, "../../tests/hostile/strings.json"), "utf8")) as { entries: Array<{ text: string; repeat?: number }> };
  for (const entry of corpus.entries) {
    const text = entry.text.repeat(entry.repeat ?? 1);
    for (const record of Object.values(samples(text))) {
      for (const shown of [auditWhat(record, 160), auditDocumentWhat(record, 2000)]) {
        assert.ok(!hasUnsafe(shown), `${record.type}: ${JSON.stringify(shown).slice(0, 200)}`);
        assert.ok(shown.length < 3000, `${record.type}: ${shown.length} characters`);
      }
    }
  }
});

test("a kind this build does not know is shown by its type", () => {
  const later = { ...envelope, type: "checkpoint\u001b[2J", outcome: "auto" } as unknown as AuditRecord;
  assert.equal(auditWhat(later, 160), "checkpoint\\e[2J (a kind of record this extension does not know)");
  assert.equal(auditExit(later), "");
});
