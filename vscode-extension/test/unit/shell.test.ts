// ./shell's cases are the shared vectors (tests/vectors/quoting.json, run by
// vectors.test.ts); here, what the edit box makes of them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { validateCommandLine } from "../../src/validate";

test("unfinished quotes are errors, and the edit box says so", () => {
  assert.equal(validateCommandLine("touch 'x"), "Cannot parse: unterminated single quote");
  assert.equal(validateCommandLine("   "), "Empty command");
  assert.equal(validateCommandLine("touch x"), undefined);
});
