// A throwaway Lazaret home for the VS Code tests (the JS port of
// tests/nvim/lzenv.py): its own XDG config, data and runtime directories, a git
// repository as workspace, the real `lazaret` ($LAZARET_BIN, else on PATH),
// real podman + runsc.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as readline from "node:readline";

export function lazaretBin() {
  const explicit = process.env.LAZARET_BIN;
  if (explicit) return fs.realpathSync(explicit);
  const found = spawnSync("sh", ["-c", "command -v lazaret"], { encoding: "utf8" }).stdout.trim();
  if (!found) throw new Error("no lazaret binary: set LAZARET_BIN or put lazaret on PATH");
  return found;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitUntil(timeoutMs, condition, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value || Date.now() > deadline) return value;
    await sleep(intervalMs);
  }
}

/** Reads one line of a child's stdout (the first one not read yet). */
function lineReader(child) {
  const rl = readline.createInterface({ input: child.stdout });
  const lines = [];
  const waiters = [];
  let closed = false;
  rl.on("line", (l) => (waiters.length ? waiters.shift()(l) : lines.push(l)));
  rl.on("close", () => {
    closed = true;
    while (waiters.length) waiters.shift()(null);
  });
  return {
    next: (timeoutMs = 120_000) =>
      lines.length ? Promise.resolve(lines.shift()) : closed ? Promise.resolve(null) : new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error("timed out waiting for a line")), timeoutMs);
        waiters.push((l) => (clearTimeout(t), resolve(l)));
      }),
    rest: () => lines.join("\n"),
  };
}

export class LazaretEnv {
  constructor({ approvalTimeout = 120 } = {}) {
    this.root = fs.mkdtempSync("/tmp/lzv");
    for (const sub of ["config/lazaret", "data", "run"]) fs.mkdirSync(path.join(this.root, sub), { recursive: true });
    fs.chmodSync(path.join(this.root, "run"), 0o700);
    this.binary = lazaretBin();
    this.sessions = [];
    this.socketDir = path.join(this.root, "run/lazaret");
    fs.writeFileSync(
      path.join(this.root, "config/lazaret/config.toml"),
      `[escalation]\nenabled = true\nsocket_dir = "${this.socketDir}"\nauto_approve = []\napproval_timeout_seconds = ${approvalTimeout}\n`,
    );
  }

  environ() {
    const env = { ...process.env, XDG_CONFIG_HOME: path.join(this.root, "config"), XDG_DATA_HOME: path.join(this.root, "data"), XDG_RUNTIME_DIR: path.join(this.root, "run") };
    delete env.LAZARET_LOG;
    return env;
  }

  lazaret(args, { check = true, timeout = 120_000, cwd } = {}) {
    const r = spawnSync(this.binary, args.map(String), { env: this.environ(), encoding: "utf8", timeout, cwd: cwd ?? this.root });
    if (check && r.status !== 0) throw new Error(`lazaret ${args.join(" ")}: ${r.status}\n${r.stdout}\n${r.stderr}`);
    return r;
  }

  ensureImage() {
    this.lazaret(["image", "build"], { timeout: 600_000 });
  }

  git(repo, ...args) {
    return execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" });
  }

  repository(name = "project") {
    const repo = path.join(this.root, name);
    fs.mkdirSync(path.join(repo, "src"), { recursive: true });
    this.git(repo, "init", "--quiet", "--initial-branch=main");
    this.git(repo, "config", "user.name", "Host User");
    this.git(repo, "config", "user.email", "host@example.invalid");
    fs.writeFileSync(path.join(repo, "README.md"), "# project\n");
    fs.writeFileSync(path.join(repo, "src/lib.rs"), "pub fn answer() -> u32 { 42 }\n");
    this.git(repo, "add", "-A");
    this.git(repo, "commit", "--quiet", "-m", "initial");
    return repo;
  }

  domain(repo) {
    return JSON.parse(this.lazaret(["domain", "--json", "--workspace", repo]).stdout);
  }

  /** `lazaret run --workspace REPO -- sh -c SCRIPT` in the background: {child, lines, done}. */
  spawn(repo, script) {
    const child = spawn(this.binary, ["run", "--workspace", repo, "--", "sh", "-c", script], { env: this.environ(), cwd: this.root, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const lines = lineReader(child);
    const done = new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout: lines.rest(), stderr })));
    const session = { child, lines, done, stderr: () => stderr };
    this.sessions.push(session);
    return session;
  }

  /** A session that keeps the domain up; resolves once its command runs in the sandbox. */
  async startDomain(repo) {
    const s = this.spawn(repo, "echo lazaret-ready; sleep 900");
    const line = await s.lines.next(180_000);
    if (line !== "lazaret-ready") throw new Error(`the session did not start: ${line} ${s.stderr()}`);
    return s;
  }

  /** A new session asking the host to run ARGV with lazaret-escalate; resolves with {session, t0} (sandbox clock, ms). */
  async escalate(repo, argv, justification) {
    const words = argv.map((w) => `'${w.replace(/'/g, "'\\''")}'`).join(" ");
    const why = justification ? `--justification '${justification}' ` : "";
    const s = this.spawn(repo, `echo $(( $(date +%s%N) / 1000000 )); lazaret-escalate ${why}-- ${words}; echo status=$?`);
    const line = await s.lines.next();
    if (!/^\d+$/.test(line ?? "")) throw new Error(`no timestamp from the sandbox: ${line} ${s.stderr()}`);
    return { session: s, t0: Number(line) };
  }

  /** Copies BYTES to PATH inside the domain's sandbox (podman exec, stdin). */
  writeIn(repo, file, bytes) {
    const name = this.domain(repo).container_name ?? this.domain(repo).containerName;
    const r = spawnSync("podman", ["exec", "-i", name, "sh", "-c", `mkdir -p "$(dirname '${file}')" && cat > '${file}'`], { input: bytes, timeout: 120_000 });
    if (r.status !== 0) throw new Error(`writing ${file} in the sandbox: ${r.status} ${r.stderr}`);
  }

  /**
   * One session asking the host for several commands at once (each
   * `{argv, justification?}` taken byte for byte: any character but NUL),
   * in the background of one `lazaret run`; resolves once the session runs.
   * Its output has `status<i>=<exit status>` lines when they are answered.
   */
  async escalateMany(repo, requests, tag = "h") {
    const dir = `/tmp/lzv-${tag}`;
    const nul = "\0";
    const lines = ["#!/bin/bash", "echo started"];
    requests.forEach((r, i) => {
      this.writeIn(repo, `${dir}/argv${i}`, Buffer.from(r.argv.join(nul) + nul, "utf8"));
      if (r.justification !== undefined) this.writeIn(repo, `${dir}/just${i}`, Buffer.from(r.justification + nul, "utf8"));
      lines.push(
        `( mapfile -d '' -t a < ${dir}/argv${i}; ` +
          (r.justification !== undefined ? `IFS= read -r -d '' j < ${dir}/just${i}; lazaret-escalate --justification "$j" -- "\${a[@]}"` : `lazaret-escalate -- "\${a[@]}"`) +
          `; echo "status${i}=$?" ) &`,
      );
    });
    lines.push("wait");
    this.writeIn(repo, `${dir}/run.sh`, Buffer.from(lines.join("\n") + "\n"));
    const s = this.spawn(repo, `exec bash ${dir}/run.sh`);
    const line = await s.lines.next();
    if (line !== "started") throw new Error(`the session did not start: ${line} ${s.stderr()}`);
    return s;
  }

  execIn(repo, script) {
    const name = this.domain(repo).container_name ?? this.domain(repo).containerName;
    return spawnSync("podman", ["exec", name, "sh", "-c", script], { encoding: "utf8", timeout: 120_000 });
  }

  pending() {
    const r = this.lazaret(["pending", "--json"], { check: false });
    try {
      return JSON.parse(r.stdout);
    } catch {
      return [];
    }
  }

  audit(repo) {
    return JSON.parse(this.lazaret(["audit", "--json", "--workspace", repo]).stdout);
  }

  async stopSessions() {
    for (const s of this.sessions) {
      if (s.child.exitCode === null) {
        try {
          process.kill(-s.child.pid, "SIGTERM");
        } catch {}
      }
    }
    await Promise.race([Promise.all(this.sessions.map((s) => s.done)), sleep(30_000)]);
    for (const s of this.sessions) if (s.child.exitCode === null) try { process.kill(-s.child.pid, "SIGKILL"); } catch {}
    this.sessions = [];
    await waitUntil(30_000, () => !fs.existsSync(this.socketDir) || !fs.readdirSync(this.socketDir).some((d) => fs.existsSync(path.join(this.socketDir, d, "control.sock"))), 200);
  }

  async close() {
    await this.stopSessions();
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}
