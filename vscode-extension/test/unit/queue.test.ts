import assert from "node:assert/strict";
import { test } from "node:test";
import type { PendingEscalation } from "../../src/protocol";
import { PendingQueue } from "../../src/queue";

function esc(id: string, receivedAtMs = 1000): PendingEscalation {
  return { requestId: id, argv: ["touch", id], display: `touch ${id}`, cwd: "/w", domainHash: "h", profile: "default", sessionId: "s", reasons: [], riskNotes: [], receivedAtMs, expiresAtMs: receivedAtMs + 300_000 };
}

test("add, then resolve: gone, and never added back by a late list or event", () => {
  const q = new PendingQueue();
  assert.equal(q.add("A", esc("r1")), true);
  assert.equal(q.add("A", esc("r1")), false, "a repeat is not new");
  assert.equal(q.size, 1);
  assert.equal(q.resolve("r1"), true);
  assert.equal(q.resolve("r1"), false);
  assert.equal(q.add("A", esc("r1")), false, "a late escalationPending cannot resurrect it");
  assert.deepEqual(q.replace("A", [esc("r1"), esc("r2")]), ["r2"], "nor can a list that raced with the answer");
  assert.deepEqual(q.list().map((i) => i.escalation.requestId), ["r2"]);
});

test("replace makes the list the domain's queue and leaves other domains alone", () => {
  const q = new PendingQueue();
  q.add("A", esc("a1"));
  q.add("A", esc("a2"));
  q.add("B", esc("b1"));
  assert.deepEqual(q.replace("A", [esc("a2"), esc("a3")]), ["a3"]);
  assert.deepEqual(q.list().map((i) => i.escalation.requestId).sort(), ["a2", "a3", "b1"]);
  assert.deepEqual(q.list("B").map((i) => i.escalation.requestId), ["b1"]);
  q.dropDomain("A");
  assert.deepEqual(q.list().map((i) => i.escalation.requestId), ["b1"]);
  assert.equal(q.add("A", esc("a2")), true, "a dropped (not resolved) request comes back on reconnect");
});

test("oldest first by receivedAtMs, then arrival", () => {
  const q = new PendingQueue();
  q.add("A", esc("late", 3000));
  q.add("A", esc("early", 1000));
  q.add("B", esc("tie1", 2000));
  q.add("A", esc("tie2", 2000));
  assert.deepEqual(q.list().map((i) => i.escalation.requestId), ["early", "tie1", "tie2", "late"]);
});

test("ignores malformed entries and bounds the tombstones", () => {
  const q = new PendingQueue();
  assert.equal(q.add("A", { requestId: 5 } as unknown as PendingEscalation), false);
  assert.deepEqual(q.replace("A", [null as unknown as PendingEscalation]), []);
  for (let i = 0; i < 1100; i++) q.resolve(`x${i}`);
  assert.equal(q.add("A", esc("x0")), true, "the oldest tombstones are forgotten");
  assert.equal(q.add("A", esc("x1099")), false);
});
