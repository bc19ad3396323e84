// Bundles the extension (dist/extension.js) or, with --tests, each unit test
// (dist-test/*.test.js; they cover the modules that do not import vscode).
import * as esbuild from "esbuild";
import { readdirSync, rmSync } from "node:fs";

const tests = process.argv.includes("--tests");
const common = { bundle: true, platform: "node", target: "node20", format: "cjs", sourcemap: true, logLevel: "warning" };
if (tests) {
  rmSync("dist-test", { recursive: true, force: true });
  const entryPoints = readdirSync("test/unit").filter((f) => f.endsWith(".test.ts")).map((f) => `test/unit/${f}`);
  await esbuild.build({ ...common, entryPoints, outdir: "dist-test" });
} else {
  await esbuild.build({ ...common, entryPoints: ["src/extension.ts"], outfile: "dist/extension.js", external: ["vscode"], minify: true });
}
