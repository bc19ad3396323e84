"""CPU of an idle domain's coordinator, with and without editor clients
attached, for the bench.

Usage: bench_idle.py LAZARET_BIN WORKSPACE

The caller has set XDG_* and holds a running domain of WORKSPACE (e.g.
`lazaret run --workspace WORKSPACE -- sleep 900`). Four states are
measured in turn, each over the same window ($LAZARET_BENCH_IDLE_SECONDS,
default 60):

  no client         only the holder's session;
  Neovim            a real headless Neovim ($LAZARET_NVIM, else `nvim` on
                    PATH) with editors/nvim on its runtimepath, the way a
                    user runs it: `require('lazaret').setup({})`, the plugin
                    starts at VimEnter, working directory WORKSPACE;
  VS Code           the extension's own client code under node: the
                    DomainManager of vscode-extension/src/domains.ts (with
                    client.ts and discovery.ts), bundled with the
                    extension's esbuild and constructed with the options
                    Ctx gives it in context.ts (default poll interval,
                    WORKSPACE as the only folder);
  Neovim + VS Code  both at once.

A client counts as attached once it says it is connected, subscribed and
listed (a marker file it writes) and the coordinator has one more socket
per client among its descriptors; the window starts after a short settle.
The coordinator's CPU is utime + stime of /proc/PID/stat (all its
threads), as percent of one core; the CPU of the children it reaped in the
window (cutime + cstime) is shown beside it. A client's CPU counts its
reaped children too (`lazaret editor-info`, `git`). The coordinator's pid
is the one it reports (`lazaret status --json`).

Figures go to bench_figures.figure() (PYTHONPATH=tests;
$LAZARET_BENCH_FIGURES, $LAZARET_BENCH_SECTION)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_figures import figure
from bench_memory import read

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN = REPO_ROOT / "editors/nvim"
EXTENSION = REPO_ROOT / "vscode-extension"
TICKS = os.sysconf("SC_CLK_TCK")
GOAL = 0.5  # percent of one core
# How long a client may take to connect, and the pause before a window.
ATTACH_TIMEOUT = 60
SETTLE = 3

# Neovim: after the plugin's own start (VimEnter), a one-off check that
# writes the marker once a domain is connected, subscribed and listed; it
# stops then, so it costs nothing during the window.
NVIM_MARK = """
local path = os.getenv('LAZARET_BENCH_IDLE_MARK')
local timer = vim.uv.new_timer()
timer:start(100, 100, vim.schedule_wrap(function()
  local ok, domains = pcall(require, 'lazaret.domains')
  if not ok or timer:is_closing() then return end
  for _, d in ipairs(domains.connected()) do
    if d.sub and d.listed then
      timer:stop()
      timer:close()
      vim.fn.writefile({ d.path }, path)
      return
    end
  end
end))
"""

# VS Code: the DomainManager as Ctx (vscode-extension/src/context.ts)
# constructs it, minus the vscode API: `run` and `git` are its execFile
# wrapper, `folders` the workspace, `log` escapes every message as the
# Output channel's does. No pollMs: the default, as in the extension.
NODE_MAIN = """
import * as cp from "node:child_process";
import * as fs from "node:fs";
import { DomainManager } from "@EXT@/src/domains";
import { escapeUnsafe } from "@EXT@/src/text";

const binary = process.env.LAZARET_BIN ?? "lazaret";
const workspace = process.env.LAZARET_BENCH_IDLE_WORKSPACE!;
const mark = process.env.LAZARET_BENCH_IDLE_MARK!;

function exec(file: string, argv: string[], cwd?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    cp.execFile(file, argv, { cwd, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === "number" ? (err as { code: number }).code : 127) : 0;
      if (err && code === 127) stderr = stderr || err.message;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

const manager = new DomainManager({
  run: (argv) => exec(binary, argv),
  folders: () => [workspace],
  log: (level, message) => {
    const text = escapeUnsafe(message);
    if (level !== "debug") process.stderr.write(`${level}: ${text}\\n`);
  },
  git: (argv) => exec("git", argv),
  binary: () => binary,
});
let marked = false;
manager.onChange(() => {
  if (marked) return;
  const d = manager.connected().find((s) => s.client?.subscription !== undefined);
  if (!d) return;
  marked = true;
  fs.writeFileSync(mark, `${d.socket}\\n`);
});
for (const signal of ["SIGTERM", "SIGINT"] as const)
  process.on(signal, () => {
    manager.dispose();
    process.exit(0);
  });
void manager.start();
"""


def coordinator_pid(lazaret, workspace, env):
    """The pid WORKSPACE's coordinator reports (`lazaret status --json`), or
    None while it does not answer."""
    result = subprocess.run([lazaret, "status", "--json", "--workspace", workspace], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        return None
    status = json.loads(result.stdout).get("status")
    return status["coordinatorPid"] if status else None


def cpu_ticks(pid):
    """(own, reaped children) CPU of PID in clock ticks: utime + stime,
    cutime + cstime."""
    stat = read(f"/proc/{pid}/stat").decode(errors="replace")
    if ")" not in stat:
        raise RuntimeError(f"process {pid} is gone")
    fields = stat.rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime is field 14.
    utime, stime, cutime, cstime = (int(fields[i]) for i in range(11, 15))
    return utime + stime, cutime + cstime


def sockets(pid):
    count = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    count += 1
            except OSError:
                pass
    except OSError:
        pass
    return count


def wait_until(timeout, condition, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


class Client:
    """One editor client in its own process group."""

    def __init__(self, name, argv, env, cwd, mark, log):
        self.name, self.mark, self.log = name, mark, log
        self.out = open(log, "w")
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=self.out,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def attached(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}): {Path(self.log).read_text()[-2000:]}")
        return os.path.exists(self.mark)

    def stop(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Anything it started and left in its group.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.out.close()


def nvim_client(scratch, lazaret, workspace, env):
    nvim = os.environ.get("LAZARET_NVIM") or shutil.which("nvim")
    if not nvim:
        raise RuntimeError("no Neovim: set LAZARET_NVIM or put nvim on PATH")
    mark = scratch / "nvim.mark"
    lua = scratch / "mark.lua"
    lua.write_text(NVIM_MARK)
    argv = [nvim, "--headless", "--clean", "-n", "--cmd", f"set rtp^={PLUGIN}",
            "-c", "lua require('lazaret').setup({})", "-c", f"luafile {lua}"]
    env = {**env, "LAZARET_BIN": lazaret, "LAZARET_BENCH_IDLE_MARK": str(mark)}
    return Client("Neovim", argv, env, workspace, mark, scratch / "nvim.log")


def node_bundle(scratch):
    """The DomainManager script bundled as the extension's esbuild.mjs
    bundles (node20, cjs, vscode-jsonrpc from its node_modules)."""
    esbuild = EXTENSION / "node_modules/.bin/esbuild"
    if not esbuild.exists():
        raise RuntimeError(f"{esbuild} is missing: run `npm ci` in {EXTENSION}")
    entry = scratch / "idle-client.ts"
    entry.write_text(NODE_MAIN.replace("@EXT@", str(EXTENSION)))
    out = scratch / "idle-client.js"
    result = subprocess.run([str(esbuild), str(entry), "--bundle", "--platform=node", "--target=node20", "--format=cjs",
                             "--log-level=warning", f"--outfile={out}"], cwd=EXTENSION, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"esbuild failed: {result.stderr}")
    return out


def node_client(scratch, bundle, lazaret, workspace, env):
    node = os.environ.get("LAZARET_NODE") or shutil.which("node")
    if not node:
        raise RuntimeError("no node on PATH (or LAZARET_NODE)")
    mark = scratch / "node.mark"
    env = {**env, "LAZARET_BIN": lazaret, "LAZARET_BENCH_IDLE_MARK": str(mark), "LAZARET_BENCH_IDLE_WORKSPACE": workspace}
    return Client("VS Code", [node, str(bundle)], env, workspace, mark, scratch / "node.log")


def measure(pid, clients, seconds):
    """Percent of one core over SECONDS: the coordinator's own and reaped
    children's, and each client's (own + reaped children)."""
    t0 = time.monotonic()
    c0 = cpu_ticks(pid)
    k0 = {c.name: sum(cpu_ticks(c.process.pid)) for c in clients}
    time.sleep(seconds)
    c1 = cpu_ticks(pid)
    k1 = {c.name: sum(cpu_ticks(c.process.pid)) for c in clients}
    elapsed = time.monotonic() - t0
    pct = lambda ticks: 100.0 * ticks / TICKS / elapsed
    return {
        "coordinator": pct(c1[0] - c0[0]),
        "reaped": pct(c1[1] - c0[1]),
        "clients": {name: pct(k1[name] - k0[name]) for name in k0},
    }


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    lazaret = str(Path(argv[0]).resolve())
    workspace = str(Path(argv[1]).resolve())
    seconds = float(os.environ.get("LAZARET_BENCH_IDLE_SECONDS", "60"))
    env = dict(os.environ)
    env.pop("LAZARET_LOG", None)
    domain = json.loads(subprocess.run([lazaret, "domain", "--json", "--workspace", workspace], env=env,
                                       capture_output=True, text=True, check=True).stdout)
    control = domain["control_socket"]
    if not wait_until(60, lambda: os.path.exists(control)):
        sys.exit(f"bench_idle: no control socket at {control}: is a domain of {workspace} running?")
    pid = wait_until(30, lambda: coordinator_pid(lazaret, workspace, env), interval=0.5)
    if not pid:
        sys.exit(f"bench_idle: no coordinator process for {workspace}")
    print(f"coordinator pid {pid}, control socket {control}, window {seconds:.0f} s, CLK_TCK {TICKS}")

    scratch = Path(tempfile.mkdtemp(prefix="lazaret-idle.", dir="/tmp"))
    running = []

    def stop_all():
        for client in running:
            client.stop()
        running.clear()

    def interrupted(*_):
        raise KeyboardInterrupt

    # SIGTERM from the caller: stop the clients as on an interrupt.
    signal.signal(signal.SIGTERM, interrupted)
    results = {}
    try:
        bundle = node_bundle(scratch)
        states = [
            ("no client", []),
            ("Neovim client", ["nvim"]),
            ("VS Code client", ["node"]),
            ("Neovim + VS Code clients", ["nvim", "node"]),
        ]
        time.sleep(SETTLE)
        base_sockets = sockets(pid)
        for state, kinds in states:
            for path in scratch.glob("*.mark"):
                path.unlink()
            for kind in kinds:
                if kind == "nvim":
                    running.append(nvim_client(scratch, lazaret, workspace, env))
                else:
                    running.append(node_client(scratch, bundle, lazaret, workspace, env))
            if running and not wait_until(ATTACH_TIMEOUT, lambda: all(c.attached() for c in running), 0.2):
                raise RuntimeError(f"{state}: not attached within {ATTACH_TIMEOUT} s: "
                                   + "; ".join(f"{c.name}: {Path(c.log).read_text()[-1000:]}" for c in running))
            # The first calls (status, list, details, git) end; then the window.
            time.sleep(SETTLE)
            attached = sockets(pid) - base_sockets
            if attached < len(running):
                raise RuntimeError(f"{state}: the coordinator has {attached} more socket(s), expected {len(running)}")
            result = measure(pid, running, seconds)
            results[state] = result
            clients = "".join(f", {name} {value:.3f}%" for name, value in result["clients"].items())
            print(f"{state:<26} coordinator {result['coordinator']:.3f}% of a core (reaped children {result['reaped']:.3f}%)"
                  f"{clients}; +{attached} socket(s)", flush=True)
            stop_all()
            if not wait_until(15, lambda: sockets(pid) <= base_sockets):
                print(f"warning: the coordinator still has {sockets(pid) - base_sockets} extra socket(s) after {state}")
            time.sleep(1)
    finally:
        stop_all()
        shutil.rmtree(scratch, ignore_errors=True)

    base = results["no client"]["coordinator"]
    for state, result in results.items():
        name = f"idle coordinator CPU, {state} (goal {GOAL}%)"
        if state == "no client":
            figure(name, result["coordinator"], "% of a core")
        else:
            figure(name, result["coordinator"], "% of a core", "no client", base)
    for state, client, process in (("Neovim client", "Neovim", "nvim"), ("VS Code client", "VS Code", "node")):
        if state in results:
            figure(f"idle {client} client CPU ({process} process)", results[state]["clients"][client], "% of a core")
    over = [state for state, result in results.items() if result["coordinator"] > GOAL]
    if over:
        print(f"above the goal of {GOAL}% of a core: {', '.join(over)}")


if __name__ == "__main__":
    main(sys.argv[1:])
