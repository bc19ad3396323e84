import assert from "node:assert/strict";
import { test } from "node:test";
import { Sequencer } from "../../src/sequencer";

test("in-order events apply without resync", () => {
  const s = new Sequencer();
  for (let seq = 1; seq <= 5; seq++) assert.deepEqual(s.accept({ seq, kind: "sessionRegistered" }), { apply: true, resync: false });
  assert.equal(s.gaps, 0);
});

test("a gap applies the event and asks for a resync; repeats and older ones are dropped", () => {
  const s = new Sequencer();
  s.accept({ seq: 1, kind: "x" });
  assert.deepEqual(s.accept({ seq: 4, kind: "x" }), { apply: true, resync: true });
  assert.deepEqual(s.accept({ seq: 4, kind: "x" }), { apply: false, resync: false });
  assert.deepEqual(s.accept({ seq: 2, kind: "x" }), { apply: false, resync: false });
  assert.deepEqual(s.accept({ seq: 5, kind: "x" }), { apply: true, resync: false });
  assert.equal(s.gaps, 1);
});

test("eventsLagged resyncs and counts the dropped events", () => {
  const s = new Sequencer();
  s.accept({ seq: 1, kind: "x" });
  assert.deepEqual(s.accept({ seq: 2, kind: "eventsLagged", dropped: 42 }), { apply: false, resync: true });
  assert.deepEqual(s.accept({ seq: 3, kind: "x" }), { apply: true, resync: false });
  assert.equal(s.lagged, 42);
});

test("a first event after seq 1 is a gap; reset starts over; events without seq apply", () => {
  const s = new Sequencer();
  assert.deepEqual(s.accept({ seq: 3, kind: "x" }), { apply: true, resync: true });
  s.reset();
  assert.deepEqual(s.accept({ seq: 1, kind: "x" }), { apply: true, resync: false });
  const old = new Sequencer();
  assert.deepEqual(old.accept({ kind: "escalationPending" }), { apply: true, resync: false });
  assert.deepEqual(old.accept({ kind: "eventsLagged", dropped: 1 }), { apply: false, resync: true });
});
