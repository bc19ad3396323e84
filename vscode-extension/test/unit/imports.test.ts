// No import circle among the extension's sources (issue 46; the Rust crates
// and the Neovim plugin hold the same rule: crates/lazaret-core/tests/module_circles.rs,
// tests/nvim/unit/modules_spec.lua). The graph is read from src/ (every .ts
// file, subdirectories too), so modules that are added, split or renamed are
// followed without a list to keep. An edge is a relative specifier (`./x`,
// `../y/z`) of `import ... from`, `export ... from`, a bare `import "./x"`,
// `import("./x")` or `require("./x")`, outside comments; type-only imports
// count (they tie the modules' designs together all the same).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

const SRC = path.resolve(__dirname, "../src");

/** The relative specifiers `text` imports, in order, comments left out. */
function localImports(text: string): string[] {
  // Comments go first (a string holding `//` or `/*` is rare enough in
  // import lines; a specifier is never inside one).
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const forms = [
    /\b(?:import|export)\b[^;]*?\bfrom\s*["'](\.{1,2}\/[^"']+)["']/g,
    /\bimport\s*["'](\.{1,2}\/[^"']+)["']/g,
    /\b(?:import|require)\s*\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g,
  ];
  const found: Array<[number, string]> = [];
  for (const form of forms) {
    for (const match of code.matchAll(form)) found.push([match.index ?? 0, match[1]]);
  }
  return found.sort((a, b) => a[0] - b[0]).map(([, specifier]) => specifier);
}

/** Each module's local imports, by module path under `dir` without `.ts`. */
function imports(dir: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const files = (fs.readdirSync(dir, { recursive: true }) as string[]).filter((f) => f.endsWith(".ts")).sort();
  for (const file of files) {
    const name = file.replace(/\.ts$/, "").split(path.sep).join("/");
    const targets = localImports(fs.readFileSync(path.join(dir, file), "utf8")).map((specifier) => {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(name), specifier)).replace(/\.(ts|js)$/, "");
      return graph.has(target) || fs.existsSync(path.join(dir, `${target}.ts`)) ? target : `${target}/index`;
    });
    graph.set(name, [...new Set(targets)]);
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
  const graph = imports(SRC);
  assert.ok(graph.size > 10, `read ${graph.size} modules from ${SRC}`);
  assert.ok((graph.get("extension") ?? []).length > 3, "imports are read");
  assert.ok((graph.get("netapprovals") ?? []).includes("context"), "type-only imports are read");
  assert.equal(circle(graph)?.join(" -> "), undefined);
});

test("a circle is found", () => {
  const graph = new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", []]]);
  assert.deepEqual(circle(graph), ["a", "b", "c", "a"]);
});

test("every import form is an edge; comments and other modules are not", () => {
  const source = [
    'import { a } from "./a";',
    'import type {\n  B,\n} from "./b";',
    'export * from "./c";',
    'import "./d";',
    'const e = await import("./e");',
    'const f = require("../f");',
    'import * as vscode from "vscode";',
    '// import { g } from "./g";',
    '/* import { h } from "./h"; */',
    'const url = "https://example.invalid"; import { i } from "./i";',
  ].join("\n");
  assert.deepEqual(localImports(source), ["./a", "./b", "./c", "./d", "./e", "../f", "./i"]);
});

test("a circle through a subdirectory and a dynamic import is found", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "imports-"));
  fs.mkdirSync(path.join(dir, "sub"));
  fs.writeFileSync(path.join(dir, "a.ts"), 'import { b } from "./sub/b";\n');
  fs.writeFileSync(path.join(dir, "sub", "b.ts"), 'export const b = () => import("../a");\n');
  fs.writeFileSync(path.join(dir, "c.ts"), 'import { b } from "./sub/b";\n');
  assert.deepEqual(circle(imports(dir)), ["a", "sub/b", "a"]);
  fs.rmSync(dir, { recursive: true });
});
