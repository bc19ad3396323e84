// No import circle among the extension's sources (type-only imports count:
// they tie the modules' designs together all the same).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

const SRC = path.resolve(__dirname, "../src");

/** Each module's local imports (`./x`), by module name. */
function imports(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of fs.readdirSync(SRC).filter((f) => f.endsWith(".ts"))) {
    const text = fs.readFileSync(path.join(SRC, file), "utf8");
    const targets = [...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+"\.\/([\w-]+)"/gms)].map((m) => m[1]);
    graph.set(file.replace(/\.ts$/, ""), [...new Set(targets)]);
  }
  return graph;
}

/** The first circle found, as a path of module names, or undefined. */
function circle(graph: Map<string, string[]>): string[] | undefined {
  const state = new Map<string, "open" | "done">();
  const visit = (node: string, trail: string[]): string[] | undefined => {
    if (state.get(node) === "done") return undefined;
    if (state.get(node) === "open") return [...trail.slice(trail.indexOf(node)), node];
    state.set(node, "open");
    for (const next of graph.get(node) ?? []) {
      const found = visit(next, [...trail, node]);
      if (found) return found;
    }
    state.set(node, "done");
    return undefined;
  };
  for (const node of graph.keys()) {
    const found = visit(node, []);
    if (found) return found;
  }
  return undefined;
}

test("the sources import each other without a circle", () => {
  const graph = imports();
  assert.ok(graph.size > 10, `read ${graph.size} modules from ${SRC}`);
  assert.ok((graph.get("extension") ?? []).length > 3, "imports are read");
  assert.equal(circle(graph)?.join(" -> "), undefined);
});

test("a circle is found", () => {
  const graph = new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", []]]);
  assert.deepEqual(circle(graph), ["a", "b", "c", "a"]);
});
