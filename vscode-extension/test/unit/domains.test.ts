// The domain manager against a fake coordinator on a real Unix socket:
// connect, list, events in sequence, resync after eventsLagged or a gap,
// answers as client vscode, first answer wins, reconnect after a restart.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { ResponseError } from "vscode-jsonrpc/node";
import type { RunResult } from "../../src/discovery";
import { discoveryProblem, DomainManager } from "../../src/domains";
import { API_VERSION, METHODS } from "../../src/protocol";
import { editorInfo, escalation, FakeCoordinator, tempDir, until } from "./fake";

const root = tempDir();
const socket = path.join(root, "abcdef012345/control.sock");
const S = socket;
let fake: FakeCoordinator;
let manager: DomainManager;
const announced: string[] = [];

before(async () => {
  fake = new FakeCoordinator(socket);
  fake.pending = [escalation("first")];
  await fake.listen();
  manager = new DomainManager({
    run: async () => ({ code: 0, stdout: editorInfo(root), stderr: "" }),
    folders: () => [],
    log: () => undefined,
    pollMs: 50,
  });
  manager.onNewRequest((item) => announced.push(item.value.requestId));
  await manager.start();
  await until("connected", () => manager.connected().length === 1);
});

after(async () => {
  manager.dispose();
  await fake.close();
  fs.rmSync(root, { recursive: true, force: true });
});

test("connects, checks the API version, subscribes before listing, and queues what is pending", async () => {
  await until("the first request", () => manager.queue.has(S, "first"));
  assert.deepEqual(fake.calls.slice(0, 2), [METHODS.domainStatus, "events/subscribe"]);
  assert.deepEqual(fake.calls.slice(2, 4).sort(), [METHODS.domainStatus, METHODS.pendingList].sort());
  assert.deepEqual(announced, ["first"]);
  const d = manager.connected()[0];
  await until("details", () => d.audit !== undefined && d.networkError !== undefined);
  assert.equal(d.audit![0].decidedBy, "rpc:cli");
  // Typed records as the coordinator sends them: each kind with its own fields.
  assert.deepEqual(d.audit!.map((a) => a.type), ["escalation", "dnsRefused"]);
  const dns = d.audit![1];
  assert.ok(dns.type === "dnsRefused" && dns.name === "evil.example" && dns.recordType === "TXT", JSON.stringify(dns));
  assert.match(d.networkError!, /no network/);
});

test("networkFailed and networkRestored bring the status's networkError (issue 33, item 5)", async () => {
  const d = manager.connected()[0];
  fake.networkError = "the Network Sidecar stopped (its event stream ended); it is being started again";
  fake.event({ kind: "networkFailed", message: fake.networkError, restarting: true });
  await until("the failure in the status", () => d.status?.networkError === fake.networkError);
  fake.networkError = undefined;
  fake.event({ kind: "networkRestored", message: "started again" });
  await until("the failure gone", () => d.status !== undefined && d.status.networkError === undefined);
});

test("escalationPending and escalationResolved events move the queue", async () => {
  fake.pending.push(escalation("second"));
  fake.event({ kind: "escalationPending", escalation: escalation("second") });
  await until("second queued", () => manager.queue.has(S, "second"));
  fake.event({ kind: "escalationResolved", requestId: "second", outcome: "approved", decidedBy: "rpc:cli", argv: ["touch", "second"] });
  await until("second gone", () => !manager.queue.has(S, "second"));
  assert.deepEqual(announced, ["first", "second"]);
});

test("answers go out as client vscode; a second answer is reported as already answered", async () => {
  assert.equal(await manager.respond(S, "first", "deny", { reason: "not today" }), "answered");
  assert.deepEqual(fake.responses.at(-1), { requestId: "first", decision: "deny", client: "vscode", reason: "not today" });
  assert.equal(manager.queue.has(S, "first"), false);
  fake.pending.push(escalation("raced"));
  fake.event({ kind: "escalationPending", escalation: escalation("raced") });
  await until("raced queued", () => manager.queue.has(S, "raced"));
  fake.pending = [];
  assert.equal(await manager.respond(S, "raced", "edit", { argv: ["touch", "x y"] }), "already-answered");
  assert.equal(manager.queue.has(S, "raced"), false);
});

test("a failed answer leaves the request pending: in the queue until the coordinator says it was answered (issue 26, item 5)", async () => {
  const pendingCount = () => manager.queue.list().length;
  fake.pending.push(escalation("kept"));
  fake.event({ kind: "escalationPending", escalation: escalation("kept") });
  await until("kept queued", () => manager.queue.has(S, "kept"));
  let changes = 0;
  manager.onChange((c) => (c === "pending" ? changes++ : undefined));
  // An edit to an empty command line: the coordinator refuses it with 1004.
  await assert.rejects(manager.respond(S, "kept", "edit", { argv: [""] }), /no program/);
  assert.equal(manager.queue.has(S, "kept"), true, "still pending after the refused answer");
  assert.equal(pendingCount(), 1);
  // A resync (Refresh) keeps it too: the coordinator still lists it.
  await manager.resync(manager.connected()[0]);
  assert.equal(manager.queue.has(S, "kept"), true);
  // The next answer succeeds and removes it.
  assert.equal(await manager.respond(S, "kept", "approve"), "answered");
  assert.equal(manager.queue.has(S, "kept"), false);
  assert.ok(changes > 0);
});

test("eventsLagged triggers a resync that finds what was missed", async () => {
  const d = manager.connected()[0];
  const before = d.resyncs;
  fake.pending = [escalation("missed")];
  fake.event({ kind: "eventsLagged", dropped: 42 });
  await until("resync", () => manager.queue.has(S, "missed"));
  assert.equal(d.resyncs, before + 1);
  assert.equal(d.seq.lagged, 42);
});

test("a gap in seq triggers a resync; a repeated seq is ignored", async () => {
  const d = manager.connected()[0];
  const before = d.resyncs;
  fake.pending = [];
  fake.seq += 5;
  fake.event({ kind: "sessionRegistered", sessionId: "s", pid: 1, sessionCount: 2 });
  await until("resync after gap", () => d.resyncs === before + 1 && !manager.queue.has(S, "missed"));
  fake.event({ kind: "escalationPending", escalation: escalation("dup") }, fake.seq);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(manager.queue.has(S, "dup"), false, "an event with an old seq is dropped");
});

test("a coordinator that goes away drops its requests; a new one on the same path is reconnected", async () => {
  fake.pending = [escalation("before-restart")];
  fake.event({ kind: "escalationPending", escalation: escalation("before-restart") });
  await until("queued", () => manager.queue.has(S, "before-restart"));
  await fake.close();
  await until("dropped", () => manager.queue.size === 0 && manager.connected().length === 0);
  fake = new FakeCoordinator(socket);
  fake.pending = [escalation("after-restart")];
  await fake.listen();
  await until("reconnected", () => manager.queue.has(S, "after-restart"), 5000);
  fake.event({ kind: "escalationPending", escalation: escalation("next") }, 1);
  await until("events of the new subscription (seq from 1) apply", () => manager.queue.has(S, "next"));
});

test("the same request id from two coordinators is two requests, each listed and answered under its own domain (issue 26, item 7)", async () => {
  // Ids are minted by each coordinator: a second (fake) coordinator can hand out the same one.
  const other = new FakeCoordinator(path.join(root, "0123456789ab/control.sock"), "0123456789ab");
  const S2 = other.socket;
  fake.seq = Math.max(fake.seq, 1); // the restarted fake's event 1 was sent with an explicit seq
  fake.pending = [escalation("shared-id")];
  other.pending = [{ ...escalation("shared-id", "0123456789ab"), argv: ["touch", "from-other"], display: "touch from-other" }];
  fake.event({ kind: "escalationPending", escalation: escalation("shared-id") });
  await until("the first domain's request", () => manager.queue.has(S, "shared-id"));
  await other.listen();
  try {
    await until("both domains' requests", () => manager.queue.has(S2, "shared-id"), 5000);
    assert.equal(manager.queue.list().filter((i) => i.value.requestId === "shared-id").length, 2);
    assert.deepEqual(manager.queue.get(S, "shared-id")?.value.argv, ["touch", "shared-id"]);
    assert.equal(manager.queue.get(S, "shared-id")?.domain, S);
    assert.deepEqual(manager.queue.list(S2).map((i) => i.value.argv), [["touch", "from-other"]]);
    // An answer goes to the coordinator of the request's own domain, and only that one leaves.
    assert.equal(await manager.respond(S2, "shared-id", "deny"), "answered");
    assert.equal(other.responses.length, 1);
    assert.equal(fake.responses.filter((r: any) => r.requestId === "shared-id").length, 0);
    assert.equal(manager.queue.has(S, "shared-id"), true);
    assert.equal(manager.queue.has(S2, "shared-id"), false);
    // A resolution event of one domain does not touch the other's request.
    other.event({ kind: "escalationPending", escalation: escalation("other-2", "0123456789ab") });
    fake.event({ kind: "escalationResolved", requestId: "other-2", outcome: "approved", decidedBy: "rpc:cli" });
    await until("other-2 queued", () => manager.queue.has(S2, "other-2"));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(manager.queue.has(S2, "other-2"), true);
  } finally {
    await other.close();
    await until("other dropped", () => !manager.queue.has(S2, "other-2"), 5000);
  }
});

test("a pending/list error is a problem, never an empty queue; the next list that works clears it (issue 26, item 8)", async () => {
  const d = manager.connected()[0];
  fake.listError = new ResponseError(-32603, "the store is locked");
  await assert.rejects(manager.resync(d));
  assert.match(d.problem ?? "", /pending\/list failed: the store is locked/);
  assert.equal(manager.problems().length, 1);
  assert.match(manager.problems()[0].fix, /Refresh/);
  fake.listError = undefined;
  // The manager retries by itself.
  await until("the problem clears", () => d.problem === undefined, 6000);
  assert.equal(manager.problems().length, 0);
});

test("a coordinator that accepts but never answers is a problem after the timeout (issue 26, item 8)", async () => {
  const hungRoot = tempDir();
  const hung = new FakeCoordinator(path.join(hungRoot, "deadbeef0000/control.sock"), "deadbeef0000");
  hung.silent = true;
  await hung.listen();
  const m = new DomainManager({
    run: async () => ({ code: 0, stdout: editorInfo(hungRoot), stderr: "" }),
    folders: () => [],
    log: () => undefined,
    pollMs: 50,
    askTimeoutMs: 300,
  });
  try {
    await m.start();
    await until("the problem", () => m.problems().length === 1, 5000);
    assert.match(m.problems()[0].message, /does not answer/);
    assert.equal(m.queue.size, 0);
    // Its socket goes away (the coordinator ended): the problem goes with it.
    await hung.close();
    await until("the problem clears", () => m.problems().length === 0, 8000);
  } finally {
    m.dispose();
    fs.rmSync(hungRoot, { recursive: true, force: true });
  }
});

/** What a manager whose discovery got `result` from `binary` knows once started. */
async function afterDiscovery(result: RunResult, binary: string) {
  const m = new DomainManager({ run: async () => result, folders: () => [], log: () => undefined, binary: () => binary });
  try {
    await m.start();
    return { discovered: m.discovered, info: m.info, problems: m.problems() };
  } finally {
    m.dispose();
  }
}

test("a failed discovery (no lazaret binary) is a problem with the fix, never an empty queue (issue 26, item 8)", async () => {
  const { discovered, problems } = await afterDiscovery({ code: 127, stdout: "", stderr: "spawn /nowhere/lazaret ENOENT" }, "/nowhere/lazaret");
  assert.equal(discovered, true);
  assert.equal(problems.length, 1);
  assert.match(problems[0].message, /cannot run the lazaret binary `\/nowhere\/lazaret`/);
  assert.match(problems[0].fix, /lazaret\.path/);
  assert.match(discoveryProblem("lazaret editor-info failed: exit status 2", "lazaret").fix, /editor-info/);
});

test("a coordinator of another API version is listed with the problem and what to update, and never asked for its requests (issue 28, item 5)", async () => {
  const otherRoot = tempDir();
  const newer = new FakeCoordinator(path.join(otherRoot, "feedface0000/control.sock"), "feedface0000");
  newer.apiVersion = API_VERSION + 1;
  newer.pending = [escalation("unsafe", "feedface0000")];
  await newer.listen();
  const m = new DomainManager({ run: async () => ({ code: 0, stdout: editorInfo(otherRoot), stderr: "" }), folders: () => [], log: () => undefined, pollMs: 50 });
  try {
    await m.start();
    await until("the problem", () => m.problems().length === 1, 5000);
    const [p] = m.problems();
    assert.equal(p.socket, newer.socket);
    assert.match(p.message, new RegExp(`coordinator speaks API ${API_VERSION + 1}, this extension speaks API ${API_VERSION}`));
    assert.match(p.fix, /Update the Lazaret extension/);
    // Listed (the view shows the domain with its problem), asked nothing but its version, again and again.
    assert.ok(m.domains.has(newer.socket));
    await new Promise((r) => setTimeout(r, 3500));
    assert.ok(newer.calls.length >= 2, "retried");
    assert.deepEqual([...new Set(newer.calls)], [METHODS.domainStatus]);
    assert.equal(m.queue.size, 0);
    assert.equal(m.connected().length, 0);
    // An older one: the fix names the lazaret that started it.
    newer.apiVersion = API_VERSION - 1;
    await until("the older problem", () => new RegExp(`speaks API ${API_VERSION - 1},`).test(m.problems()[0]?.message ?? ""), 5000);
    assert.match(m.problems()[0].fix, /older lazaret started this coordinator/);
    // Updated to ours (a new build on the same socket): asked as usual, the problem goes.
    newer.apiVersion = API_VERSION;
    await until("asked", () => m.queue.has(newer.socket, "unsafe"), 5000);
    assert.equal(m.problems().length, 0);
  } finally {
    m.dispose();
    await newer.close();
    fs.rmSync(otherRoot, { recursive: true, force: true });
  }
});

test("a lazaret binary of another API version is a discovery problem naming both versions and the fix (issue 28, item 5)", async () => {
  const stdout = JSON.stringify({ ...JSON.parse(editorInfo(root)), apiVersion: API_VERSION + 1 });
  const { discovered, info, problems } = await afterDiscovery({ code: 0, stdout, stderr: "" }, "/opt/new/lazaret");
  assert.equal(discovered, true);
  assert.equal(info, undefined);
  assert.equal(problems.length, 1);
  assert.equal(problems[0].message, `the lazaret binary \`/opt/new/lazaret\` speaks API ${API_VERSION + 1}, this extension speaks API ${API_VERSION}`);
  assert.match(problems[0].fix, /Update the Lazaret extension/);
});
