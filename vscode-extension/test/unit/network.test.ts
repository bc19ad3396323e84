// Network requests (`[network] ask`) and rules (issue 29, items 3 and 4):
// the queue's upsert and removal, the scope quick pick's mapping and
// validation, how requests and rules render (agent text inert), and the
// domain manager against a fake coordinator: pending/list, the events,
// network/respond and rules/revoke as client vscode.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { ResponseError } from "vscode-jsonrpc/node";
import { DomainManager } from "../../src/domains";
import { grantRow, requestRow, ruleRows, SCOPE_CHOICES, scopeFor, scopeText, timeLeft, validateMinutes } from "../../src/grants";
import { NetworkQueue } from "../../src/queue";
import { networkRequestOf, NodeRegistry, requestOf, ruleOf } from "../../src/nodes";
import { ERROR_CODE, METHODS, NetworkGrant } from "../../src/protocol";
import { editorInfo, escalation, FakeCoordinator, networkRequest, tempDir, until } from "./fake";

test("the queue: a new request is announced once; the same id again is an upsert (repeats grow), not a second entry", () => {
  const q = new NetworkQueue();
  assert.ok(q.add("/a", networkRequest("r1", "one.test")));
  assert.equal(q.add("/a", networkRequest("r1", "one.test", 3)), undefined, "an upsert is not new");
  assert.equal(q.size, 1);
  assert.equal(q.get("/a", "r1")?.value.repeats, 3);
  // Keyed by (domain, id): the same id in another domain is another request.
  assert.ok(q.add("/b", networkRequest("r1", "other.test")));
  assert.equal(q.list().length, 2);
  assert.deepEqual(q.list("/b").map((i) => i.value.destination), ["other.test"]);
  // Resolved: gone, and never added back by a late event or list.
  assert.equal(q.resolve("/a", "r1"), true);
  assert.equal(q.add("/a", networkRequest("r1", "one.test", 4)), undefined);
  assert.deepEqual(q.replace("/a", [networkRequest("r1", "one.test")]), []);
  assert.equal(q.has("/a", "r1"), false);
  assert.equal(q.has("/b", "r1"), true);
  // A list replaces the domain's requests: new ones returned, missing ones dropped, other domains kept.
  assert.deepEqual(q.replace("/a", [networkRequest("r2"), networkRequest("r3")]).map((i) => i.value.requestId), ["r2", "r3"]);
  assert.deepEqual(q.replace("/a", [networkRequest("r3")]), []);
  assert.deepEqual(q.list("/a").map((i) => i.value.requestId), ["r3"]);
  q.dropDomain("/a");
  assert.deepEqual(q.list().map((i) => i.domain), ["/b"]);
  // Oldest first.
  const old = { ...networkRequest("r0"), receivedAtMs: 1 };
  q.add("/b", old);
  assert.deepEqual(q.list("/b").map((i) => i.value.requestId), ["r0", "r1"]);
});

test("the scope quick pick: each choice maps to its GrantScope; typed minutes are 1..1440 whole numbers", () => {
  assert.deepEqual(SCOPE_CHOICES.map((c) => c.label), ["This session", "For 15 minutes", "For 1 hour", "For ... minutes", "For the profile (until revoked)"]);
  assert.deepEqual(scopeFor("session"), { type: "session" });
  assert.deepEqual(scopeFor("15m"), { type: "minutes", minutes: 15 });
  assert.deepEqual(scopeFor("1h"), { type: "minutes", minutes: 60 });
  assert.deepEqual(scopeFor("profile"), { type: "profile" });
  assert.deepEqual(scopeFor("minutes", " 90 "), { type: "minutes", minutes: 90 });
  assert.deepEqual(scopeFor("minutes", "1"), { type: "minutes", minutes: 1 });
  assert.deepEqual(scopeFor("minutes", "1440"), { type: "minutes", minutes: 1440 });
  for (const bad of ["0", "1441", "", " ", "abc", "1.5", "-5", "1e3", "99999", "10 m", "0x10"]) {
    assert.notEqual(validateMinutes(bad), undefined, `${JSON.stringify(bad)} is refused`);
    assert.equal(scopeFor("minutes", bad), undefined, `${JSON.stringify(bad)} makes no scope`);
  }
  assert.equal(scopeFor("minutes"), undefined);
  assert.equal(validateMinutes("30"), undefined);
  assert.equal(scopeText({ type: "minutes", minutes: 15 }), "15 minutes");
  assert.equal(scopeText({ type: "session" }), "this session");
  assert.match(scopeText({ type: "profile" }), /profile/);
});

test("a request's row: the destination inert, its record types and repeat count", () => {
  const now = Date.now();
  const row = requestRow({ ...networkRequest("r", "grant.test", 2), recordTypes: ["A", "AAAA"] }, now);
  assert.equal(row.label, "grant.test");
  assert.equal(row.description, "network · A AAAA · asked 2 more times");
  assert.match(row.tooltip, /record types: A AAAA/);
  assert.match(row.tooltip, /questions after the first: 2/);
  assert.equal(requestRow(networkRequest("r", "x.test", 0), now).description, "network · A");
  // Sent by the sandbox: never raw (a bidi override, a newline, a codicon and a link stay text).
  const hostile = requestRow(networkRequest("r", "evil\u202e.test\n$(check)[x](command:lazaret.approve)\\"), now);
  // Longer than a row holds: cut in the middle, its end kept (D19).
  assert.equal(hostile.label, "evil…(21 characters cut)…mmand:lazaret.approve)\\\\");
  assert.doesNotMatch(hostile.tooltip.replace(/\n/g, ""), /[\u202e\r]/);
  assert.ok(!hostile.tooltip.split("\n").some((l) => l === "$(check)[x](command:lazaret.approve)\\"), "no line of raw agent text");
});

test("rules render: grants (verdict, destination, scope or time left, hits, who decided) then auto-approve rules (entry, source)", () => {
  const now = 1_000_000_000_000;
  const grant: NetworkGrant = { id: "g1", destination: "grant.test", verdict: "allow", scope: { type: "minutes", minutes: 15 }, decidedBy: "rpc:vscode", grantedAtMs: now - 1000, expiresAtMs: now + 14 * 60_000 + 59_000, hits: 3 };
  const refusal: NetworkGrant = { id: "g2", destination: "no.test", verdict: "deny", scope: { type: "profile" }, decidedBy: "rpc:cli", grantedAtMs: now, hits: 1 };
  const rows = ruleRows({ network: [grant, refusal], autoApprove: [{ id: "a1", entry: "cargo check *", source: "[escalation] auto_approve" }] }, now);
  assert.deepEqual(
    rows.map((r) => [r.id, r.kind, r.label, r.description]),
    [
      ["g1", "network", "allow grant.test", "14m 59s left · 3 hits · by rpc:vscode"],
      ["g2", "network", "deny no.test", "the profile (until revoked) · 1 hit · by rpc:cli"],
      ["a1", "autoApprove", "auto-approve cargo check *", "[escalation] auto_approve"],
    ],
  );
  assert.match(rows[0].what, /network grant "allow grant\.test" \(15 minutes\)/);
  assert.match(rows[2].what, /auto-approve rule "cargo check \*"/);
  assert.equal(grantRow({ ...grant, scope: { type: "session" }, expiresAtMs: null }, now).description, "this session · 3 hits · by rpc:vscode");
  assert.equal(grantRow({ ...grant, destination: "a\u202eb" }, now).label, "allow a\\u{202e}b");
  assert.deepEqual(ruleRows(undefined, now), []);
  assert.equal(timeLeft(now + 2 * 3600_000 + 3 * 60_000, now), "2h 3m");
  assert.equal(timeLeft(now + 5_000, now), "5s");
  assert.equal(timeLeft(now - 1, now), "expired");
});

test("commands act only on rows the tree handed out: a network request row answers no escalation, look-alikes are nothing", () => {
  const r = new NodeRegistry();
  const net = r.issue({ type: "netRequest" as const, socket: "/s", requestId: "n1" });
  const rule = r.issue({ type: "rule" as const, socket: "/s", ruleId: "g1" });
  assert.deepEqual(networkRequestOf(r.known(net)), { socket: "/s", requestId: "n1" });
  assert.equal(requestOf(r.known(net)), undefined, "Approve Escalation does not act on a network request");
  assert.equal(networkRequestOf(r.known(rule)), undefined);
  assert.deepEqual(ruleOf(r.known(rule)), { socket: "/s", ruleId: "g1" });
  for (const forged of ["n1", { type: "netRequest", socket: "/s", requestId: "n1" }, { ...rule }, JSON.parse(JSON.stringify(net))]) {
    assert.equal(networkRequestOf(r.known(forged)), undefined);
    assert.equal(ruleOf(r.known(forged)), undefined);
  }
  assert.notEqual(r.itemId(net), r.itemId({ type: "netRequest", socket: "/t", requestId: "n1" }));
});

// The manager against a fake coordinator.
const root = tempDir();
const S = path.join(root, "abcdef012345/control.sock");
let fake: FakeCoordinator;
let manager: DomainManager;
const announced: string[] = [];

before(async () => {
  fake = new FakeCoordinator(S);
  fake.pending = [escalation("cmd")];
  fake.network = [networkRequest("n-listed", "listed.test")];
  fake.rules = { autoApprove: [{ id: "a1", entry: "cargo check *", source: "[escalation] auto_approve" }], network: [] };
  await fake.listen();
  manager = new DomainManager({ run: async () => ({ code: 0, stdout: editorInfo(root), stderr: "" }), folders: () => [], log: () => undefined, pollMs: 50 });
  manager.onNewNetworkRequest((item) => announced.push(item.value.requestId));
  await manager.start();
  await until("connected", () => manager.connected().length === 1);
});

after(async () => {
  manager.dispose();
  await fake.close();
  fs.rmSync(root, { recursive: true, force: true });
});

test("pending/list on connect: escalations and network requests each in their queue, counted together; rules read", async () => {
  await until("listed", () => manager.netQueue.has(S, "n-listed") && manager.queue.has(S, "cmd"));
  assert.ok(fake.calls.includes(METHODS.pendingList));
  assert.ok(!fake.calls.includes(METHODS.escalationList), "the one list is pending/list");
  assert.equal(manager.pendingCount(), 2);
  assert.equal(manager.pendingCount(S), 2);
  assert.deepEqual(announced, ["n-listed"]);
  const d = manager.connected()[0];
  await until("rules", () => d.rules !== undefined);
  assert.deepEqual(d.rules?.autoApprove.map((a) => a.entry), ["cargo check *"]);
});

test("networkRequestPending upserts (sent again when repeats grow, announced once); networkRequestResolved removes", async () => {
  fake.network.push(networkRequest("n-live", "live.test"));
  fake.event({ kind: "networkRequestPending", request: networkRequest("n-live", "live.test") });
  await until("queued", () => manager.netQueue.has(S, "n-live"));
  fake.event({ kind: "networkRequestPending", request: networkRequest("n-live", "live.test", 4) });
  await until("repeats", () => manager.netQueue.get(S, "n-live")?.value.repeats === 4);
  assert.equal(manager.netQueue.list(S).filter((i) => i.value.requestId === "n-live").length, 1);
  assert.deepEqual(announced, ["n-listed", "n-live"]);
  fake.event({ kind: "networkRequestResolved", requestId: "n-live", outcome: "networkRefused", decidedBy: "timeout", scope: null });
  await until("gone", () => !manager.netQueue.has(S, "n-live"));
  fake.network = fake.network.filter((r) => r.requestId !== "n-live");
});

test("network/respond goes out with the scope as client vscode; answered elsewhere (1010) is reported; another failure keeps it pending", async () => {
  fake.netRespondError = new ResponseError(ERROR_CODE.INVALID_VALUE, "minutes must be 1 to 1440");
  await assert.rejects(manager.respondNetwork(S, "n-listed", "allow", { type: "minutes", minutes: 15 }), /1 to 1440/);
  assert.equal(manager.netQueue.has(S, "n-listed"), true, "still pending after the refused answer");
  fake.netRespondError = undefined;
  assert.equal(await manager.respondNetwork(S, "n-listed", "allow", { type: "minutes", minutes: 15 }), "answered");
  assert.deepEqual(fake.netResponses.at(-1), { requestId: "n-listed", decision: "allow", scope: { type: "minutes", minutes: 15 }, client: "vscode" });
  assert.equal(manager.netQueue.has(S, "n-listed"), false);
  // Answered elsewhere first: the coordinator says 1010, the request leaves.
  fake.event({ kind: "networkRequestPending", request: networkRequest("n-raced", "raced.test") });
  await until("raced queued", () => manager.netQueue.has(S, "n-raced"));
  assert.equal(await manager.respondNetwork(S, "n-raced", "deny", { type: "profile" }), "already-answered");
  assert.equal(manager.netQueue.has(S, "n-raced"), false);
  assert.deepEqual(fake.netResponses.at(-1), { requestId: "n-raced", decision: "deny", scope: { type: "profile" }, client: "vscode" });
  assert.equal(manager.pendingCount(), 1);
});

test("rulesChanged refetches rules/list; rules/revoke goes out as client vscode and refetches; an unknown id (1011) is 'gone'", async () => {
  const d = manager.connected()[0];
  fake.rules = { ...fake.rules, network: [{ id: "g1", destination: "grant.test", verdict: "allow", scope: { type: "minutes", minutes: 15 }, decidedBy: "rpc:vscode", grantedAtMs: Date.now(), expiresAtMs: Date.now() + 900_000, hits: 0 }] };
  fake.event({ kind: "rulesChanged" });
  await until("the grant listed", () => d.rules?.network.length === 1);
  assert.equal(await manager.revokeRule(S, "g1"), "revoked");
  assert.deepEqual(fake.revokes.at(-1), { id: "g1", client: "vscode" });
  assert.equal(d.rules?.network.length, 0, "read again after the revoke");
  assert.equal(await manager.revokeRule(S, "g1"), "gone");
});

test("eventsLagged resyncs the network requests too", async () => {
  fake.network = [networkRequest("n-missed", "missed.test")];
  fake.event({ kind: "eventsLagged", dropped: 7 });
  await until("found after the resync", () => manager.netQueue.has(S, "n-missed"));
});
