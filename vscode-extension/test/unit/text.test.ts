// ./text against every entry of the hostile corpus (tests/hostile/strings.json):
// nothing unsafe survives, nothing renders as a link or a codicon where VS
// Code would read one, escapes decode back to the original, cuts keep the
// start and say how much was cut, and the shell syntax of an argv shows
// nothing unsafe (its round trip: vectors.test.ts).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { quoteArgv, requestDisplay } from "../../src/shell";
import { clip, clipDisplay, cutNote, escapeUnsafe, hasUnsafe, inert, isUnsafe, noIcons, noLinks, notice } from "../../src/text";

const CORPUS = path.resolve(__dirname, "../../tests/hostile/strings.json");
const corpus = JSON.parse(fs.readFileSync(CORPUS, "utf8")) as { marker: string; entries: Array<{ name: string; text: string; repeat?: number }> };
const MARKER = "/tmp/lazaret-unit-marker";
const entries = corpus.entries.map((e) => ({ name: e.name, text: e.text.repeat(e.repeat ?? 1).split(corpus.marker).join(MARKER) }));

// The brief's unsafe set (and U+2065, default-ignorable, as the Neovim plugin's), written out independently of src/text.ts.
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u2065\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;
// VS Code's own patterns (vs/base/common/linkedText.ts, iconLabels.ts).
const LINK = /\[([^\]]+)\]\(((?:https?:\/\/|command:|file:)[^\)\s]+)(?: (["'])(.+?)(\3))?\)/gi;
const ICON = /(\\)?\$\((\w[\w-]*)(~\w+)?\)/g;

/** Reads inert's escapes back (for the round trip). */
function unescape(text: string): string {
  return text.replace(/\\(n|t|r|e|\\|x([0-9a-f]{2})|u\{([0-9a-f]+)\})/g, (_, c: string, x?: string, u?: string) =>
    c === "n" ? "\n" : c === "t" ? "\t" : c === "r" ? "\r" : c === "e" ? "\x1b" : c === "\\" ? "\\" : String.fromCodePoint(parseInt((x ?? u)!, 16)),
  );
}

const unsafeIn = (s: string) => [...s].filter((c) => UNSAFE.test(c)).map((c) => `U+${c.codePointAt(0)!.toString(16)}`);

test("the corpus is there and expanded (34 entries, 64 KiB line)", () => {
  assert.ok(entries.length >= 34, `${entries.length} entries`);
  assert.equal(entries.find((e) => e.name === "long-line")?.text.length, 65536);
  assert.ok(entries.some((e) => e.text.includes(MARKER)));
});

test("isUnsafe agrees with the brief's set on every code point of the BMP and the planes used", () => {
  for (let code = 0; code <= 0x10ffff; code++) {
    if (code > 0xffff && !(code >= 0x1d100 && code <= 0x1d1ff) && !(code >= 0xe0000 && code <= 0xe01ff)) continue;
    if (code >= 0xd800 && code <= 0xdfff) continue;
    assert.equal(isUnsafe(code), UNSAFE.test(String.fromCodePoint(code)), `U+${code.toString(16)}`);
  }
});

test("every entry: inert, clip and escapeUnsafe leave no unsafe character; inert reads back to the original", () => {
  for (const { name, text } of entries) {
    const shown = inert(text);
    assert.deepEqual(unsafeIn(shown), [], `${name}: inert`);
    assert.equal(unescape(shown), text, `${name}: inert is reversible`);
    assert.ok(!shown.includes("\n") && !shown.includes("\r"), `${name}: one line`);
    assert.deepEqual(unsafeIn(clip(text, 200)), [], `${name}: clip`);
    assert.deepEqual(unsafeIn(escapeUnsafe(text)), [], `${name}: escapeUnsafe`);
    assert.equal(hasUnsafe(shown), false, name);
  }
});

test("every entry: no link and no codicon survive notice/noLinks; no codicon survives noIcons", () => {
  for (const { name, text } of entries) {
    for (const [what, out] of [["notice", notice(text, 100_000)], ["noLinks", noLinks(inert(text))]] as const) {
      LINK.lastIndex = 0;
      assert.equal(LINK.exec(out), null, `${name}: a link in ${what}: ${out.slice(0, 200)}`);
    }
    for (const out of [noIcons(inert(text)), notice(text, 100_000)]) {
      for (const m of out.matchAll(ICON)) assert.ok(m[1], `${name}: an unescaped codicon ${m[0]}`);
    }
  }
  // The corpus's own link and codicon entries were links and codicons before.
  const link = entries.find((e) => e.name === "markdown-command-link")!.text;
  LINK.lastIndex = 0;
  assert.ok(LINK.exec(link), "the corpus link is a link to VS Code");
  assert.ok([...entries.find((e) => e.name === "codicon")!.text.matchAll(ICON)].some((m) => !m[1]));
});

test("every entry as an argv word: quoteArgv and requestDisplay show no unsafe character", () => {
  for (const { name, text } of entries) {
    const line = quoteArgv(["echo", text, "tail"]);
    assert.deepEqual(unsafeIn(line), [], `${name}: quoteArgv`);
    assert.ok(line.startsWith("echo "), `${name}: the program first`);
    assert.deepEqual(unsafeIn(requestDisplay({ argv: ["echo", text] })), [], name);
    assert.deepEqual(unsafeIn(requestDisplay({ display: text })), [], name);
    assert.deepEqual(unsafeIn(clipDisplay(line, 150)), [], name);
  }
});

test("escape spelling as the CLI's", () => {
  assert.equal(inert("a\nb\tc\rd\x1be\\f"), "a\\nb\\tc\\rd\\ee\\\\f");
  assert.equal(inert("x\u202ey"), "x\\u{202e}y");
  assert.equal(inert("\x07\x85\u00a0"), "\\x07\\x85\\xa0");
  assert.equal(inert("\u{e0041}"), "\\u{e0041}");
  assert.equal(inert("plain ünïcode 😀"), "plain ünïcode 😀");
  assert.equal(noIcons("$(check) ok"), "\\$(check) ok");
  assert.equal(noLinks("[x](command:a)"), "[x]\\(command:a)");
});

test("a cut keeps the start, never splits an escape, and says how much was cut", () => {
  const long = "A".repeat(65536);
  const shown = clip(long, 100);
  assert.ok(shown.startsWith("A".repeat(100)));
  assert.ok(shown.endsWith(cutNote(65436)), shown);
  assert.match(shown, /\(cut: 65,436 more characters\)$/);
  assert.equal(clip("short", 100), "short");
  const bidi = clip("\u202e".repeat(50), 20);
  assert.ok(bidi.startsWith("\\u{202e}\\u{202e}"), bidi);
  assert.match(bidi, /^(\\u\{202e\})+ … \(cut: 48 more characters\)$/, bidi);
  const words = quoteArgv(["rm", ...Array(4096).fill("-rf"), "/"]);
  const d = clipDisplay(words, 160);
  assert.ok(d.startsWith("rm -rf -rf"), "the program and the start of the argv first");
  assert.match(d, /cut: [\d,]+ more characters/);
});
