import assert from "node:assert/strict";
import { test } from "node:test";
import type { PendingEscalation } from "../../src/protocol";
import { PendingQueue } from "../../src/queue";

function esc(id: string, receivedAtMs = 1000): PendingEscalation {
  return { requestId: id, argv: ["touch", id], display: `touch ${id}`, cwd: "/w", domainHash: "h", profile: "default", sessionId: "s", reasons: [], riskNotes: [], receivedAtMs, expiresAtMs: receivedAtMs + 300_000 };
}
const ids = (q: PendingQueue, domain?: string) => q.list(domain).map((i) => i.escalation.requestId);

test("add, then resolve: gone, and never added back by a late list or event", () => {
  const q = new PendingQueue();
  assert.ok(q.add("A", esc("r1")));
  assert.equal(q.add("A", esc("r1")), undefined, "a repeat is not new");
  assert.equal(q.size, 1);
  assert.equal(q.resolve("A", "r1"), true);
  assert.equal(q.resolve("A", "r1"), false);
  assert.equal(q.add("A", esc("r1")), undefined, "a late escalationPending cannot resurrect it");
  assert.deepEqual(q.replace("A", [esc("r1"), esc("r2")]).map((i) => i.escalation.requestId), ["r2"], "nor can a list that raced with the answer");
  assert.deepEqual(ids(q), ["r2"]);
});

test("the same id in two domains is two requests, each under its own domain (issue 26, item 7)", () => {
  const q = new PendingQueue();
  const a = q.add("A", { ...esc("same"), argv: ["touch", "from-A"] });
  const b = q.add("B", { ...esc("same"), argv: ["touch", "from-B"] });
  assert.ok(a && b, "both are new");
  assert.equal(q.size, 2);
  assert.deepEqual(q.get("A", "same")?.escalation.argv, ["touch", "from-A"]);
  assert.deepEqual(q.get("B", "same")?.escalation.argv, ["touch", "from-B"]);
  assert.deepEqual(ids(q, "A"), ["same"]);
  assert.deepEqual(ids(q, "B"), ["same"]);
  // A refresh of one domain neither moves nor replaces the other's request.
  q.add("B", { ...esc("same"), argv: ["touch", "from-B-again"] });
  assert.deepEqual(q.get("A", "same")?.escalation.argv, ["touch", "from-A"]);
  assert.equal(q.get("A", "same")?.domain, "A");
  // Answering (resolving) one leaves the other pending, and a list of one domain leaves the other alone.
  assert.equal(q.resolve("A", "same"), true);
  assert.equal(q.has("A", "same"), false);
  assert.equal(q.has("B", "same"), true);
  assert.deepEqual(q.replace("A", []), []);
  assert.equal(q.has("B", "same"), true);
  assert.equal(q.add("A", esc("same")), undefined, "resolved in A: not back in A");
  q.dropDomain("A");
  assert.equal(q.has("B", "same"), true);
});

test("replace makes the list the domain's queue and leaves other domains alone", () => {
  const q = new PendingQueue();
  q.add("A", esc("a1"));
  q.add("A", esc("a2"));
  q.add("B", esc("b1"));
  assert.deepEqual(q.replace("A", [esc("a2"), esc("a3")]).map((i) => i.escalation.requestId), ["a3"]);
  assert.deepEqual(ids(q).sort(), ["a2", "a3", "b1"]);
  assert.deepEqual(ids(q, "B"), ["b1"]);
  q.dropDomain("A");
  assert.deepEqual(ids(q), ["b1"]);
  assert.ok(q.add("A", esc("a2")), "a dropped (not resolved) request comes back on reconnect");
});

test("oldest first by receivedAtMs, then arrival", () => {
  const q = new PendingQueue();
  q.add("A", esc("late", 3000));
  q.add("A", esc("early", 1000));
  q.add("B", esc("tie1", 2000));
  q.add("A", esc("tie2", 2000));
  assert.deepEqual(ids(q), ["early", "tie1", "tie2", "late"]);
});

test("ignores malformed entries and bounds the tombstones", () => {
  const q = new PendingQueue();
  assert.equal(q.add("A", { requestId: 5 } as unknown as PendingEscalation), undefined);
  assert.deepEqual(q.replace("A", [null as unknown as PendingEscalation]), []);
  for (let i = 0; i < 1100; i++) q.resolve("A", `x${i}`);
  assert.ok(q.add("A", esc("x0")), "the oldest tombstones are forgotten");
  assert.equal(q.add("A", esc("x1099")), undefined);
  assert.ok(q.add("B", esc("x1099")), "a tombstone is per domain");
});
