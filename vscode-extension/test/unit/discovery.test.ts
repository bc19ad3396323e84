import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { discover, profilesFromConfigShow, rejectsWorkspaceFlag, RunResult, scanSockets } from "../../src/discovery";
import { FakeCoordinator, tempDir } from "./fake";

const INFO = { apiVersion: 1, framing: "Content-Length", socketRoot: "/run/u/lazaret", controlSocketPattern: "/run/u/lazaret/<domainHash>/control.sock", domains: [] };

test("editor-info --workspace: folders, profiles and version as the current lazaret prints them", async () => {
  const calls: string[][] = [];
  const folders = [{ workspace: "/p", profile: "default", domainHash: "h1", controlSocket: "/run/u/lazaret/h1/control.sock", running: false }];
  const info = await discover(async (argv) => {
    calls.push(argv);
    return { code: 0, stdout: JSON.stringify({ ...INFO, version: "0.2.0", defaultProfile: "claude", profiles: ["claude", "default"], folders }), stderr: "" };
  }, ["/p", "/q"]);
  assert.deepEqual(calls, [["editor-info", "--json", "--workspace", "/p", "--workspace", "/q"]]);
  assert.equal(info.legacy, false);
  assert.equal(info.version, "0.2.0");
  assert.equal(info.defaultProfile, "claude");
  assert.deepEqual(info.profiles, ["claude", "default"]);
  assert.deepEqual(info.folders, folders);
});

test("an older lazaret that rejects --workspace: editor-info without it, then lazaret domain --json per folder", async () => {
  const root = tempDir();
  const socket = path.join(root, "9cd5e381de38/control.sock");
  const fake = new FakeCoordinator(socket);
  await fake.listen();
  const calls: string[][] = [];
  const run = async (argv: string[]): Promise<RunResult> => {
    calls.push(argv);
    if (argv.includes("--workspace") && argv[0] === "editor-info")
      return { code: 2, stdout: "", stderr: "error: unexpected argument '--workspace' found\n\nUsage: lazaret editor-info --json\n" };
    if (argv[0] === "editor-info") return { code: 0, stdout: JSON.stringify({ ...INFO, socketRoot: root }), stderr: "" };
    const dir = argv[3];
    return { code: 0, stdout: JSON.stringify({ domain_hash: dir === "/a" ? "9cd5e381de38" : "000000000000", profile: "default", workspace: dir, control_socket: dir === "/a" ? socket : path.join(root, "000000000000/control.sock") }), stderr: "" };
  };
  try {
    const info = await discover(run, ["/a", "/b"]);
    assert.equal(info.legacy, true);
    assert.deepEqual(calls.map((c) => c.join(" ")), ["editor-info --json --workspace /a --workspace /b", "editor-info --json", "domain --json --workspace /a", "domain --json --workspace /b"]);
    assert.deepEqual(info.folders.map((f) => [f.workspace, f.domainHash, f.running]), [["/a", "9cd5e381de38", true], ["/b", "000000000000", false]]);
    assert.deepEqual(info.profiles, ["default"]);
    assert.deepEqual(scanSockets(root), [socket], "only live sockets count");
    assert.deepEqual(scanSockets(path.join(root, "missing")), []);
  } finally {
    await fake.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test("other failures are reported, not papered over", async () => {
  await assert.rejects(discover(async () => ({ code: 127, stdout: "", stderr: "spawn lazaret ENOENT" }), ["/a"]), /spawn lazaret ENOENT/);
  await assert.rejects(discover(async () => ({ code: 0, stdout: "not json", stderr: "" }), []), /editor-info failed/);
  assert.equal(rejectsWorkspaceFlag({ code: 78, stdout: "", stderr: "config.toml:1:1: bad" }), false);
});

test("profiles from config show --json", () => {
  assert.deepEqual(profilesFromConfigShow(JSON.stringify({ profile: "default", image: "x" })), ["default"]);
  assert.deepEqual(profilesFromConfigShow(JSON.stringify({ profiles: { claude: {}, codex: {} } })), ["claude", "codex"]);
  assert.deepEqual(profilesFromConfigShow("oops"), []);
});
