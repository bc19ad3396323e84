// The shared test vectors (tests/vectors/*.json) that the Neovim plugin's unit
// tests run too (tests/nvim/unit/vectors_spec.lua): the pending queue, the
// event sequencer and shell quoting. A missing file, or one without cases,
// fails. Quoting is also checked against real shells: /bin/sh for lines
// without `$'...'`, and every shell here that reads `$'...'` (bash, busybox
// ash, /bin/sh when it does) for the quoted lines.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { PendingEscalation } from "../../src/protocol";
import { PendingQueue } from "../../src/queue";
import { Sequencer } from "../../src/sequencer";
import { quoteArgv, splitArgv } from "../../src/shell";
import { hasUnsafe } from "../../src/text";

const DIR = path.resolve(__dirname, "../../tests/vectors");
const FILES = ["queue", "sequencer", "quoting"];

function load(name: string): any[] {
  const file = path.join(DIR, `${name}.json`);
  const cases = (JSON.parse(fs.readFileSync(file, "utf8")) as { cases?: unknown }).cases;
  assert.ok(Array.isArray(cases) && cases.length > 0, `${file}: no cases`);
  return cases;
}

test("every vector file is there, has cases, and is run here", () => {
  for (const name of FILES) assert.ok(load(name).length > 0, name);
  assert.deepEqual(fs.readdirSync(DIR).filter((f) => f.endsWith(".json")).sort(), FILES.map((f) => `${f}.json`).sort(), "a vector file this test does not run");
});

test("queue vectors", () => {
  for (const c of load("queue")) {
    const q = new PendingQueue();
    c.ops.forEach((op: any, n: number) => {
      const where = `${c.name}: op ${n + 1} (${op.op})`;
      if (op.op === "add") assert.equal(q.add(op.domain, op.escalation as PendingEscalation) !== undefined, op.new, where);
      else if (op.op === "resolve") assert.equal(q.resolve(op.domain, op.id), op.was, where);
      else if (op.op === "resolveMany") for (let i = op.from; i <= op.to; i++) q.resolve(op.domain, `${op.prefix}${i}`);
      else if (op.op === "replace")
        assert.deepEqual(
          q.replace(op.domain, op.list).map((i) => i.value.requestId),
          op.added,
          where,
        );
      else if (op.op === "dropDomain") q.dropDomain(op.domain);
      else if (op.op === "list") assert.deepEqual(q.list(op.domain).map((i) => i.value.requestId), op.ids, where);
      else if (op.op === "size") assert.equal(q.size, op.n, where);
      else if (op.op === "get") {
        assert.deepEqual(q.get(op.domain, op.id)?.value ?? null, op.escalation, where);
        assert.equal(q.has(op.domain, op.id), op.escalation !== null, where);
      } else assert.fail(`${where}: unknown op`);
    });
  }
});

test("sequencer vectors", () => {
  for (const c of load("sequencer")) {
    const s = new Sequencer();
    c.steps.forEach((step: any, n: number) => {
      if (step.reset) s.reset();
      else assert.deepEqual(s.accept(step.event), { apply: step.apply, resync: step.resync }, `${c.name}: step ${n + 1}`);
    });
    if (c.gaps !== undefined) assert.equal(s.gaps, c.gaps, `${c.name}: gaps`);
    if (c.lagged !== undefined) assert.equal(s.lagged, c.lagged, `${c.name}: lagged`);
  }
});

test("quoting vectors", () => {
  for (const c of load("quoting")) {
    if (c.quoted !== undefined) {
      assert.equal(quoteArgv(c.argv), c.quoted, `${c.name}: quote`);
      assert.equal(hasUnsafe(c.quoted), false, `${c.name}: the vector shows an unsafe character`);
      assert.deepEqual(splitArgv(c.quoted), { argv: c.argv }, `${c.name}: split`);
    } else if (c.error !== undefined) assert.deepEqual(splitArgv(c.line), { error: c.error }, c.name);
    else assert.deepEqual(splitArgv(c.line), { argv: c.argv }, c.name);
  }
});

/** The argv a shell makes of `line` (printf prints its format once even with no argument). */
function shellArgv(shell: string[], line: string): string[] {
  const out = spawnSync(shell[0], [...shell.slice(1), `printf '%s\\0' ${line}`], { encoding: "buffer", maxBuffer: 1 << 24 });
  assert.equal(out.status, 0, `${shell.join(" ")}: ${out.stderr}`);
  const words = out.stdout.toString("latin1").split("\0").slice(0, -1);
  return words.map((w) => Buffer.from(w, "latin1").toString("utf8"));
}

const readsAnsiC = (shell: string[]) => spawnSync(shell[0], [...shell.slice(1), "printf %s $'\\x41'"], { encoding: "utf8" }).stdout === "A";
const SHELLS = [["bash", "-c"], ["busybox", "sh", "-c"], ["/bin/sh", "-c"]].filter(readsAnsiC);

const CORPUS = path.resolve(__dirname, "../../tests/hostile/strings.json");
const corpus = JSON.parse(fs.readFileSync(CORPUS, "utf8")) as { marker: string; entries: Array<{ name: string; text: string; repeat?: number }> };
const hostile = corpus.entries.map((e) => ({ name: e.name, text: e.text.repeat(e.repeat ?? 1).split(corpus.marker).join("/tmp/lazaret-unit-marker") }));

test("quoted lines give a real shell exactly the argv; a split line gives the argv bash gives", () => {
  assert.ok(SHELLS.some((s) => s[0] === "bash"), "bash reads $'...'");
  let runs = 0;
  for (const c of load("quoting")) {
    if (c.error !== undefined || c.sh === false) continue;
    const line: string = c.quoted ?? c.line;
    const want = c.argv.length ? c.argv : [""];
    // A split-only case may use bash's own escapes (\e \? \u \c): bash only.
    for (const shell of c.quoted !== undefined ? SHELLS : SHELLS.slice(0, 1)) {
      assert.deepEqual(shellArgv(shell, line), want, `${c.name}: ${shell[0]}`);
      runs++;
    }
    if (!line.includes("$'")) {
      assert.deepEqual(shellArgv(["/bin/sh", "-c"], line), want, `${c.name}: /bin/sh`);
      runs++;
    }
  }
  assert.ok(runs > 50, `${runs} shell runs`);
});

test("every hostile corpus entry as an argv word round-trips through the splitter and real shells", () => {
  for (const { name, text } of hostile) {
    const argv = ["echo", text, "tail"];
    const line = quoteArgv(argv);
    assert.equal(hasUnsafe(line), false, `${name}: an unsafe character shown`);
    assert.deepEqual(splitArgv(line), { argv }, `${name}: split`);
    for (const shell of SHELLS) assert.deepEqual(shellArgv(shell, line), argv, `${name}: ${shell[0]}`);
    if (!line.includes("$'")) assert.deepEqual(shellArgv(["/bin/sh", "-c"], line), argv, `${name}: /bin/sh`);
  }
});

test("a lone surrogate (JSON allows one) shows as its bytes, and the edit box refuses it", () => {
  assert.equal(quoteArgv(["a\ud800b"]), "$'a\\xED\\xA0\\x80b'");
  assert.deepEqual(splitArgv("$'a\\xED\\xA0\\x80b'"), { error: "$'...' escapes that are not UTF-8 text" });
});
