// Issue 45 (DECISIONS D19, D20), the pure parts: a long name is cut in the
// middle with its end kept whole (every hostile corpus entry with a `tail`),
// a command in a confirmation keeps its program and its end, the arming
// delay refuses an answer to a request that just arrived or just moved into
// its place, and what an answer to an address request opens is named
// exactly: its protocol and port, or every port as the wider answer.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { Arming, ARMING_MS, requestKey } from "../../src/arming";
import { destinationText, everyPortText, grantRow, grantWhat, isAddressRequest, opensText, requestRow } from "../../src/grants";
import type { NetworkGrant, PendingNetworkRequest } from "../../src/protocol";
import { quoteArgv } from "../../src/shell";
import { clipDisplayMiddle, clipMiddleParts, clipName, inert, middleNote, NAME_LONG, NAME_MAX } from "../../src/text";

const CORPUS = path.resolve(__dirname, "../../tests/hostile/strings.json");
const corpus = JSON.parse(fs.readFileSync(CORPUS, "utf8")) as { entries: Array<{ name: string; text: string; repeat?: number; tail?: string; network?: boolean }> };
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u2065\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

function request(destination: string, service: string | null): PendingNetworkRequest {
  return { requestId: "n1", destination, service, recordTypes: service ? [service] : ["A"], repeats: 0, sessionIds: ["s"], domainHash: "abcdef012345", profile: "default", receivedAtMs: 1, expiresAtMs: 2 };
}

test("the corpus has the long name whose end decides, as a network entry", () => {
  const e = corpus.entries.find((x) => x.name === "long-name-registrable-tail");
  assert.ok(e, "long-name-registrable-tail");
  assert.equal(e.tail, "x.typeahead.test");
  assert.equal(e.network, true);
  assert.equal(e.text.length, 253);
  assert.ok(e.text.endsWith(`.${e.tail}`));
});

test("a long name is cut in the middle as the CLI cuts it: its start (a third), how much was cut, and its end whole (every corpus entry with a tail, every width from 10 to 260)", () => {
  const withTail = corpus.entries.filter((e) => e.tail);
  assert.ok(withTail.length >= 1);
  for (const e of withTail) {
    const text = e.text.repeat(e.repeat ?? 1);
    assert.equal(clipName(text), "api.anthrop…(219 characters cut)…aaaaaa.x.typeahead.test");
    assert.equal(clipName(text).length, NAME_MAX);
    for (let max = 10; max <= 260; max++) {
      const shown = clipName(text, max);
      const parts = /^(.*)…\((\d+) characters cut\)…(.*)$/.exec(shown);
      if (max >= text.length) {
        assert.equal(shown, text);
        continue;
      }
      assert.ok(parts, `${e.name} at ${max}: a middle cut: ${shown}`);
      const [, head, cut, tail] = parts;
      // At least 30 characters of the name are kept (the CLI's and Neovim's minimum): a narrow width costs the mark's room only.
      assert.ok(shown.length <= Math.max(max, 30 + `…(${cut} characters cut)…`.length), `${e.name} at ${max}: ${shown.length} characters`);
      // Within a character or two of the width (the mark's room is reserved for its longest count).
      assert.ok(shown.length >= max - 2 || head.length + tail.length === 30, `${e.name} at ${max}: uses the room it has (${shown.length})`);
      assert.ok(tail.endsWith(e.tail!), `${e.name} at ${max}: the end ${e.tail} is shown: ${shown}`);
      assert.ok(text.startsWith(head) && text.endsWith(tail), `${e.name} at ${max}: a cut of the original`);
      assert.equal(head.length + Number(cut) + tail.length, text.length, `${e.name} at ${max}: says how much was cut`);
      assert.ok(tail.length >= 2 * head.length, `${e.name} at ${max}: the end gets two thirds of the room (${head.length}/${tail.length})`);
      assert.ok(head.startsWith("api.an"), `${e.name} at ${max}: its start is shown: ${shown}`);
    }
    for (const max of [NAME_MAX, NAME_LONG]) assert.ok(clipName(text, max).endsWith(`.${e.tail}`), "the whole last labels at both widths");
  }
  assert.equal(clipName("github.com"), "github.com");
  assert.equal(clipName("10.9.0.7/32"), "10.9.0.7/32");
  assert.equal(middleNote(1234), "…(1,234 characters cut)…");
});

test("every corpus entry as a name: the middle cut is inert, within its width, never splits an escape, and reads back to the original's start and end", () => {
  const unescape = (t: string) =>
    t.replace(/\\(n|t|r|e|\\|x([0-9a-f]{2})|u\{([0-9a-f]+)\})/g, (_, c: string, x?: string, u?: string) =>
      c === "n" ? "\n" : c === "t" ? "\t" : c === "r" ? "\r" : c === "e" ? "\x1b" : c === "\\" ? "\\" : String.fromCodePoint(parseInt((x ?? u)!, 16)),
    );
  for (const e of corpus.entries) {
    const text = e.text.repeat(e.repeat ?? 1);
    for (const max of [NAME_MAX, NAME_LONG]) {
      const cut = clipMiddleParts(text, max);
      assert.equal(clipName(text, max), cut.text);
      assert.ok(cut.text.length <= max, `${e.name} at ${max}`);
      assert.ok(![...cut.text].some((c) => UNSAFE.test(c)), `${e.name} at ${max}: inert`);
      if (!cut.more) {
        assert.equal(cut.text, inert(text));
        continue;
      }
      const note = middleNote(cut.more);
      const at = cut.text.lastIndexOf(note);
      assert.ok(at >= 0, `${e.name} at ${max}: says how much was cut`);
      const [head, tail] = [cut.text.slice(0, at), cut.text.slice(at + note.length)];
      assert.ok(text.startsWith(unescape(head)), `${e.name} at ${max}: the head is the start`);
      assert.ok(text.endsWith(unescape(tail)), `${e.name} at ${max}: the tail is the end`);
      assert.equal([...unescape(head)].length + [...unescape(tail)].length + cut.more, [...text].length, `${e.name} at ${max}: more counts what was left out`);
    }
  }
});

test("a command in a confirmation: the program and its start, how much was cut, and its end (the last words)", () => {
  const display = quoteArgv(["echo", "A".repeat(60_000), "the-end-word"]);
  const shown = clipDisplayMiddle(display, 300);
  assert.ok(shown.length <= 300, `${shown.length}`);
  assert.ok(shown.startsWith("echo AAAA"));
  assert.ok(shown.endsWith("AAAA the-end-word"));
  assert.match(shown, / …\(59,\d{3} characters cut\)… /);
  const hidden = clipDisplayMiddle(quoteArgv(["sh", "-c", `${"true; ".repeat(2000)}rm -rf ~`]), 300);
  assert.ok(hidden.startsWith("sh -c 'true; true;") && hidden.endsWith("true; rm -rf ~'"), hidden);
  assert.equal(clipDisplayMiddle("touch x", 300), "touch x");
  // Escaped already (shell syntax): only what is unsafe is escaped, never the backslashes of the syntax.
  assert.equal(clipDisplayMiddle("printf $'a\\nb'", 300), "printf $'a\\nb'");
  assert.equal(clipDisplayMiddle("x\u202ey", 300), "x\\u{202e}y");
});

test("the arming delay: a new request waits 1 s; a request that moves into another place waits again; others keep theirs", () => {
  assert.equal(ARMING_MS, 1000);
  const a = requestKey("command", "/d1", "a");
  const b = requestKey("command", "/d1", "b");
  const c = requestKey("network", "/d1", "a");
  const arming = new Arming();
  arming.update([a], 10_000);
  assert.equal(arming.remaining(a, 10_000), 1000, "just arrived");
  assert.equal(arming.remaining(a, 10_999), 1);
  assert.equal(arming.remaining(a, 11_000), 0, "armed after a second");
  arming.update([a, b], 11_500);
  assert.equal(arming.remaining(a, 11_500), 0, "a request after it does not move it");
  assert.equal(arming.remaining(b, 11_500), 1000);
  arming.update([a, b, c], 12_600);
  assert.equal(arming.remaining(b, 12_600), 0);
  assert.equal(arming.remaining(c, 12_600), 1000, "a network request with an escalation's id is another request");
  // `a` is answered elsewhere: `b` and `c` move up into its place: each waits again.
  arming.update([b, c], 14_000);
  assert.equal(arming.remaining(b, 14_000), 1000, "moved onto the row `a` had");
  assert.equal(arming.remaining(c, 14_300), 700);
  assert.equal(arming.remaining(b, 15_000), 0);
  // The same order again (a refresh): nothing moves.
  arming.update([b, c], 15_000);
  assert.equal(arming.remaining(b, 15_000), 0);
  // Moved onto the selection: waits again.
  arming.disarm(b, 15_100);
  assert.equal(arming.remaining(b, 15_600), 500);
  // The selection moves from a request that just left onto another: that one waits again; a selection the user moves does not.
  arming.update([b, c], 16_000);
  arming.selectionMoved(b, c, 16_000);
  assert.equal(arming.remaining(c, 16_000), 0, "b is still pending: the user moved the selection");
  arming.update([c], 17_000);
  assert.equal(arming.remaining(c, 17_000), 1000, "c moved up into b's place");
  // d, after c, leaves: c keeps its place; the selection then goes from d to c.
  const d = requestKey("network", "/d2", "d");
  arming.update([c, d], 18_000);
  arming.update([c], 19_100);
  assert.equal(arming.remaining(c, 19_100), 0, "c did not move");
  arming.selectionMoved(d, c, 19_101);
  assert.equal(arming.remaining(c, 19_101), 1000, "the selection left d (gone 1 ms ago) for c");
  arming.update([c, d], 21_000);
  arming.update([c], 22_200);
  arming.selectionMoved(d, c, 23_500);
  assert.equal(arming.remaining(c, 23_500), 0, "d left more than a second ago: a selection the user moves later is theirs");
  // Forgotten once it is not pending; a key never seen starts its delay when asked.
  arming.update([c], 20_000);
  assert.equal(arming.remaining(a, 20_000), 1000);
  assert.equal(arming.remaining(a, 20_400), 600);
  assert.notEqual(requestKey("command", "/d1", "a"), requestKey("command", "/d2", "a"), "keyed by domain too");
});

test("an address request names its protocol and port; allow opens exactly that; every port is named as the wider answer; names have neither", () => {
  const address = request("10.9.0.7/32", "tcp/8081");
  const name = request("grant.test", null);
  assert.equal(isAddressRequest(address), true);
  assert.equal(isAddressRequest(name), false);
  assert.equal(opensText(address), "10.9.0.7/32 tcp/8081");
  assert.equal(opensText(name), "grant.test");
  assert.equal(everyPortText(address), "every protocol and port of 10.9.0.7/32 (wider than asked)");
  const row = requestRow(address, 1);
  assert.equal(row.label, "10.9.0.7/32 tcp/8081");
  assert.equal(row.description, "network · tcp/8081");
  assert.match(row.tooltip, /^Network request: the sandbox connected to an address no allow entry covers$/m);
  assert.match(row.tooltip, /^protocol and port: tcp\/8081 \(Allow opens exactly this; every protocol and port of 10\.9\.0\.7\/32 \(wider than asked\) is a separate choice\)$/m);
  assert.equal(requestRow(name, 1).label, "grant.test");
  assert.doesNotMatch(requestRow(name, 1).tooltip, /protocol and port/);
  // A service is agent text too.
  assert.equal(destinationText("10.9.0.7/32", "tcp/8081\u202e"), "10.9.0.7/32 tcp/8081\\u{202e}");
});

test("a long name's request and grant show its end on the row, in the tooltip and in what a revoke names", () => {
  const long = corpus.entries.find((x) => x.name === "long-name-registrable-tail")!.text;
  const row = requestRow(request(long, null), 1);
  assert.ok(row.label.endsWith(".x.typeahead.test") && row.label.length <= NAME_MAX, row.label);
  const line = row.tooltip.split("\n").find((l) => l.startsWith("destination: "))!;
  assert.ok(line.endsWith(".x.typeahead.test") && line.includes(" characters cut)…"), line);
  assert.match(row.tooltip, /^\(253 characters: cut in the middle, its end shown whole\)$/m);
  const grant: NetworkGrant = { id: "g", destination: long, verdict: "allow", scope: { type: "session" }, decidedBy: "rpc:vscode", grantedAtMs: 1, hits: 0 };
  const g = grantRow(grant, 1);
  assert.ok(g.label.startsWith("allow api.anthrop…(") && g.label.endsWith(".x.typeahead.test"), g.label);
  assert.ok(g.what.includes(".x.typeahead.test\" (this session)"), g.what);
  assert.match(g.tooltip.split("\n")[0], /^Network grant: api\.anthropic\.com\.a+…\(\d+ characters cut\)…a+\.a+\.x\.typeahead\.test$/);
});

test("a grant says what it covers: one protocol and port, every port (everyPort), or the name", () => {
  const base: NetworkGrant = { id: "g", destination: "10.9.0.7/32", verdict: "allow", scope: { type: "minutes", minutes: 15 }, decidedBy: "rpc:vscode", grantedAtMs: 1, expiresAtMs: 900_001, hits: 0 };
  const one = grantRow({ ...base, service: "tcp/8081", everyPort: false }, 1);
  assert.equal(one.label, "allow 10.9.0.7/32 tcp/8081");
  assert.match(one.tooltip, /^covers: tcp\/8081 only \(this protocol and port of the address\)$/m);
  assert.match(one.what, /^the network grant "allow 10\.9\.0\.7\/32 tcp\/8081" \(15 minutes\)$/);
  const every = grantRow({ ...base, service: null, everyPort: true }, 1);
  assert.equal(every.label, "allow 10.9.0.7/32 every port");
  assert.match(every.tooltip, /^covers: every protocol and port of the address \(wider than one request\)$/m);
  assert.match(every.what, /"allow 10\.9\.0\.7\/32 every port"/);
  assert.equal(grantRow({ ...base, verdict: "deny", service: "udp/53" }, 1).label, "deny 10.9.0.7/32 udp/53");
  assert.equal(grantRow({ ...base, destination: "grant.test" }, 1).label, "allow grant.test");
  assert.equal(grantWhat({ destination: "10.9.0.7/32", everyPort: true, service: "tcp/1" }), "10.9.0.7/32 every port", "everyPort wins over a service");
});
