// The domain manager against a fake coordinator on a real Unix socket:
// connect, list, events in sequence, resync after eventsLagged or a gap,
// answers as client vscode, first answer wins, reconnect after a restart.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { DomainManager } from "../../src/domains";
import { METHODS } from "../../src/protocol";
import { escalation, FakeCoordinator, tempDir, until } from "./fake";

const root = tempDir();
const socket = path.join(root, "abcdef012345/control.sock");
let fake: FakeCoordinator;
let manager: DomainManager;
const announced: string[] = [];

before(async () => {
  fake = new FakeCoordinator(socket);
  fake.pending = [escalation("first")];
  await fake.listen();
  manager = new DomainManager({
    run: async () => ({ code: 0, stdout: JSON.stringify({ apiVersion: 1, socketRoot: root, domains: [], folders: [] }), stderr: "" }),
    folders: () => [],
    log: () => undefined,
    pollMs: 50,
  });
  manager.onNewRequest((e) => announced.push(e.requestId));
  await manager.start();
  await until("connected", () => manager.connected().length === 1);
});

after(async () => {
  manager.dispose();
  await fake.close();
  fs.rmSync(root, { recursive: true, force: true });
});

test("connects, subscribes before listing, and queues what is pending", async () => {
  await until("the first request", () => manager.queue.has("first"));
  assert.deepEqual(fake.calls.slice(0, 3).sort(), [METHODS.domainStatus, METHODS.escalationList, "events/subscribe"].sort());
  assert.equal(fake.calls[0], "events/subscribe");
  assert.deepEqual(announced, ["first"]);
  const d = manager.connected()[0];
  await until("details", () => d.audit !== undefined && d.networkError !== undefined);
  assert.equal(d.audit![0].decidedBy, "rpc:cli", "snake_case audit records of an older coordinator are read");
  assert.match(d.networkError!, /no network/);
});

test("escalationPending and escalationResolved events move the queue", async () => {
  fake.pending.push(escalation("second"));
  fake.event({ kind: "escalationPending", escalation: escalation("second") });
  await until("second queued", () => manager.queue.has("second"));
  fake.event({ kind: "escalationResolved", requestId: "second", outcome: "approved", decidedBy: "rpc:cli", argv: ["touch", "second"] });
  await until("second gone", () => !manager.queue.has("second"));
  assert.deepEqual(announced, ["first", "second"]);
});

test("answers go out as client vscode; a second answer is reported as already answered", async () => {
  assert.equal(await manager.respond("first", "deny", { reason: "not today" }), "answered");
  assert.deepEqual(fake.responses.at(-1), { requestId: "first", decision: "deny", client: "vscode", reason: "not today" });
  assert.equal(manager.queue.has("first"), false);
  fake.pending.push(escalation("raced"));
  fake.event({ kind: "escalationPending", escalation: escalation("raced") });
  await until("raced queued", () => manager.queue.has("raced"));
  fake.pending = [];
  assert.equal(await manager.respond("raced", "edit", { argv: ["touch", "x y"] }), "already-answered");
  assert.equal(manager.queue.has("raced"), false);
});

test("eventsLagged triggers a resync that finds what was missed", async () => {
  const d = manager.connected()[0];
  const before = d.resyncs;
  fake.pending = [escalation("missed")];
  fake.event({ kind: "eventsLagged", dropped: 42 });
  await until("resync", () => manager.queue.has("missed"));
  assert.equal(d.resyncs, before + 1);
  assert.equal(d.seq.lagged, 42);
});

test("a gap in seq triggers a resync; a repeated seq is ignored", async () => {
  const d = manager.connected()[0];
  const before = d.resyncs;
  fake.pending = [];
  fake.seq += 5;
  fake.event({ kind: "sessionRegistered", sessionId: "s", pid: 1, sessionCount: 2 });
  await until("resync after gap", () => d.resyncs === before + 1 && !manager.queue.has("missed"));
  fake.event({ kind: "escalationPending", escalation: escalation("dup") }, fake.seq);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(manager.queue.has("dup"), false, "an event with an old seq is dropped");
});

test("a coordinator that goes away drops its requests; a new one on the same path is reconnected", async () => {
  fake.pending = [escalation("before-restart")];
  fake.event({ kind: "escalationPending", escalation: escalation("before-restart") });
  await until("queued", () => manager.queue.has("before-restart"));
  await fake.close();
  await until("dropped", () => manager.queue.size === 0 && manager.connected().length === 0);
  fake = new FakeCoordinator(socket);
  fake.pending = [escalation("after-restart")];
  await fake.listen();
  await until("reconnected", () => manager.queue.has("after-restart"), 5000);
  fake.event({ kind: "escalationPending", escalation: escalation("next") }, 1);
  await until("events of the new subscription (seq from 1) apply", () => manager.queue.has("next"));
});
