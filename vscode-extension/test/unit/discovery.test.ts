import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { discover, ProblemError, RunResult, scanSockets } from "../../src/discovery";
import { API_VERSION } from "../../src/protocol";
import { FakeCoordinator, tempDir } from "./fake";

const INFO = { apiVersion: API_VERSION, framing: "Content-Length", socketRoot: "/run/u/lazaret", controlSocketPattern: "/run/u/lazaret/<domainHash>/control.sock", domains: [] };

test("editor-info --workspace: folders, profiles and version as the current lazaret prints them", async () => {
  const calls: string[][] = [];
  const folders = [{ workspace: "/p", profile: "default", domainHash: "h1", controlSocket: "/run/u/lazaret/h1/control.sock", running: false }];
  const info = await discover(async (argv) => {
    calls.push(argv);
    return { code: 0, stdout: JSON.stringify({ ...INFO, version: "0.2.0", defaultProfile: "claude", profiles: ["claude", "default"], folders }), stderr: "" };
  }, ["/p", "/q"]);
  assert.deepEqual(calls, [["editor-info", "--json", "--workspace", "/p", "--workspace", "/q"]]);
  assert.equal(info.version, "0.2.0");
  assert.equal(info.defaultProfile, "claude");
  assert.deepEqual(info.profiles, ["claude", "default"]);
  assert.deepEqual(info.folders, folders);
});

test("a lazaret of another API version is reported with both versions and what to update; nothing else is asked", async () => {
  for (const [theirs, fix] of [
    [API_VERSION + 1, /Update the Lazaret extension/],
    [API_VERSION - 1, /Update lazaret \(the binary/],
    [undefined, /Update lazaret \(the binary/],
    ["1", /Update lazaret \(the binary/],
  ] as const) {
    const calls: string[][] = [];
    const run = async (argv: string[]): Promise<RunResult> => {
      calls.push(argv);
      return { code: 0, stdout: JSON.stringify({ ...INFO, apiVersion: theirs, folders: [], profiles: ["default"] }), stderr: "" };
    };
    const err = await discover(run, ["/a"], "/opt/lazaret/bin/lazaret").then(
      () => assert.fail(`API ${String(theirs)} was accepted`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ProblemError);
    const said = typeof theirs === "number" ? `API ${theirs}` : "no API version this extension can read";
    assert.equal(err.message, `the lazaret binary \`/opt/lazaret/bin/lazaret\` speaks ${said}, this extension speaks API ${API_VERSION}`);
    assert.match(err.fix, fix);
    assert.equal(calls.length, 1, "no fallback command");
  }
});

test("a lazaret that rejects --workspace is a failure, not a fallback to lazaret domain --json", async () => {
  const calls: string[][] = [];
  const run = async (argv: string[]): Promise<RunResult> => {
    calls.push(argv);
    return { code: 2, stdout: "", stderr: "error: unexpected argument '--workspace' found\n" };
  };
  await assert.rejects(discover(run, ["/a"]), /editor-info failed: error: unexpected argument '--workspace'/);
  assert.deepEqual(calls, [["editor-info", "--json", "--workspace", "/a"]]);
  // An answer of this API version without `folders` is not the contract either.
  await assert.rejects(discover(async () => ({ code: 0, stdout: JSON.stringify({ ...INFO, profiles: [] }), stderr: "" }), ["/a"]), /not the EditorInfo of API/);
});

test("only live sockets count as coordinators", async () => {
  const root = tempDir();
  const socket = path.join(root, "9cd5e381de38/control.sock");
  const fake = new FakeCoordinator(socket);
  await fake.listen();
  try {
    fs.mkdirSync(path.join(root, "000000000000"));
    fs.writeFileSync(path.join(root, "000000000000/control.sock"), "");
    assert.deepEqual(scanSockets(root), [socket]);
    assert.deepEqual(scanSockets(path.join(root, "missing")), []);
  } finally {
    await fake.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test("other failures are reported, not papered over", async () => {
  await assert.rejects(discover(async () => ({ code: 127, stdout: "", stderr: "spawn lazaret ENOENT" }), ["/a"]), /spawn lazaret ENOENT/);
  await assert.rejects(discover(async () => ({ code: 0, stdout: "not json", stderr: "" }), []), /editor-info failed/);
});
