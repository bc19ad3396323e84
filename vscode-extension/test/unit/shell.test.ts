import assert from "node:assert/strict";
import { test } from "node:test";
import { quoteArgv, quoteWord, splitArgv } from "../../src/shell";
import { validateCommandLine } from "../../src/validate";

const CASES: string[][] = [
  ["touch", "approved-marker"],
  ["touch", "requested marker"],
  ["echo", "it's", 'a "quote"', "back\\slash", "$HOME", "`cmd`", "semi;colon", "star*", "new\nline", "tab\there"],
  ["printf", "%s\\n", "", "ünïcode", "-flag=value", "a=b:c,d/e.f_g@h+i%j"],
  ["sh", "-c", "echo 'nested' \"double\" && exit 3"],
];

test("quoting then splitting gives the same argv back", () => {
  for (const argv of CASES) assert.deepEqual(splitArgv(quoteArgv(argv)), { argv }, quoteArgv(argv));
});

test("safe words stay bare, others are single-quoted", () => {
  assert.equal(quoteArgv(["touch", "approved-marker"]), "touch approved-marker");
  assert.equal(quoteArgv(["touch", "requested marker"]), "touch 'requested marker'");
  assert.equal(quoteWord(""), "''");
  assert.equal(quoteWord("it's"), "'it'\\''s'");
});

test("splitting follows sh quoting without expansion", () => {
  assert.deepEqual(splitArgv(`touch 'edited marker' second`), { argv: ["touch", "edited marker", "second"] });
  assert.deepEqual(splitArgv(`a "b \\"c\\" \\$d \\x" e\\ f`), { argv: ["a", 'b "c" $d \\x', "e f"] });
  assert.deepEqual(splitArgv(`  a\t\tb  `), { argv: ["a", "b"] });
  assert.deepEqual(splitArgv(`a''b "" ''`), { argv: ["ab", "", ""] });
  assert.deepEqual(splitArgv("$HOME ~ *"), { argv: ["$HOME", "~", "*"] });
});

test("unfinished quotes are errors, and the edit box says so", () => {
  assert.deepEqual(splitArgv("a 'b"), { error: "unterminated single quote" });
  assert.deepEqual(splitArgv('a "b'), { error: "unterminated double quote" });
  assert.deepEqual(splitArgv("a \\"), { error: "trailing backslash" });
  assert.equal(validateCommandLine("touch 'x"), "Cannot parse: unterminated single quote");
  assert.equal(validateCommandLine("   "), "Empty command");
  assert.equal(validateCommandLine("touch x"), undefined);
});
