"""Agent workloads for `tests/bench workloads` (issue 31).

Four jobs an agent does all day, each timed inside the environment that runs
it (so no container start is counted), in three places:

  host      the same commands on this machine, no sandbox;
  runsc     a raw runsc container started with Lazaret's exact flags (read
            from the creation of the Lazaret sandbox below: runtime, runsc
            flags with the dentry cache and file caching, limits, mount
            hints), held up with `sleep`, the work run by `podman exec`;
            the workspace and the persistent directory are bind mounts of
            host directories;
  lazaret   a Lazaret domain of the same image (profile `workloads`), held
            up by one session, the work run by `lazaret run` (a session on
            the agent's checkout; /root is a persistent directory of the
            State Anchor).

The jobs, on one fixture repository (tests/workloads, copied and committed):

  cargo     `cargo build --offline --locked` (debug) of a real crate with
            its dependencies vendored (serde + derive, serde_json, sha2,
            redb, thiserror: 24 crates), from a clean target directory;
  npm       `npm ci --offline` of the VS Code extension's lockfile (310
            packages, 13,000 files) from a copy of a local cache;
  pip       `pip install --no-index` of local wheels (aider-chat 0.86.2 and
            its 108 wheels, pytest) into the persistent directory /root;
  pytest    `python3 -m pytest` of a small project (400 tests), with the
            pytest the pip job installed.

The toolchains come from the host, read-only, at the same paths in every
place: /usr (the default image is made of this host's Debian packages, so
its /usr is a subset of the host's: gcc, libc6-dev, Node 20 and npm, python3
are added without changing what the image has) and the Rust toolchain at
/opt/rust. Inputs (wheels, the npm cache, pip itself) are read-only mounts
under /bench.

Usage: bench_workloads.py LAZARET IMAGE WORKDIR ROUNDS
       (LAZARET_BENCH_WORKLOADS="npm pytest": only those jobs)
Prints one line per job and records figures (bench_figures): lazaret against
runsc (goal 1.1x, what Lazaret adds over gVisor) and runsc against the host
(gVisor's own cost).
"""

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

from bench_figures import figure

REPO = pathlib.Path(__file__).resolve().parent.parent
AIDER_WHEELS = "aider-chat-0.86.2"

# Each job prints `elapsed <microseconds>` after a check that the work was
# done. $W: the workspace, $R: the persistent directory, $T: scratch space,
# $B: the read-only inputs.
JOBS = {
    "cargo": r"""
cd "$W/rust" && rm -rf target
s=$(date +%s%N); cargo build --offline --locked -q; e=$(date +%s%N)
./target/debug/workload src target/index.redb | grep -q '"files":1,' && echo "elapsed $(( (e - s) / 1000 ))"
""",
    "npm": r"""
rm -rf "$T/npm-cache" && cp -a "$B/npm-cache" "$T/npm-cache"
cd "$W/npm" && rm -rf node_modules
s=$(date +%s%N); npm ci --offline --cache "$T/npm-cache" --no-audit --no-fund --loglevel=error >/dev/null; e=$(date +%s%N)
test -f node_modules/typescript/package.json && echo "elapsed $(( (e - s) / 1000 ))"
""",
    "pip": r"""
rm -rf "$R/site"
s=$(date +%s%N)
/usr/bin/python3 "$(ls "$B"/pip/pip-*.whl | head -n 1)/pip" install --target "$R/site" --no-index \
  --find-links "$B/aider-wheels" --find-links "$B/pytest-wheels" aider-chat==0.86.2 pytest==8.3.5 \
  -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore
e=$(date +%s%N)
PYTHONPATH="$R/site" /usr/bin/python3 -c 'import aider, pytest' && echo "elapsed $(( (e - s) / 1000 ))"
""",
    "pytest": r"""
cd "$W/py"
s=$(date +%s%N); PYTHONPATH="$R/site" /usr/bin/python3 -m pytest -q -p no:cacheprovider > "$T/pytest.out" 2>&1; e=$(date +%s%N)
grep -q '^400 passed' "$T/pytest.out" && echo "elapsed $(( (e - s) / 1000 ))"
""",
}
DESCRIPTIONS = {
    "cargo": "cargo build (vendored, offline, 24 crates)",
    "npm": "npm ci --offline (310 packages)",
    "pip": "pip install of local wheels (aider-chat)",
    "pytest": "pytest of a small project (400 tests)",
}


def run(argv, **kwargs):
    return subprocess.run(argv, check=True, **kwargs)


def inputs():
    """The read-only inputs: name under /bench -> host directory."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    venv = pathlib.Path(os.environ.get("LAZARET_NVIM_VENV", "/opt/lazaret-ci/nvim-venv"))
    code_server = pathlib.Path(os.environ.get("LAZARET_VSCODE_CI", "/opt/lazaret-ci/code-server"))
    pip_dir = subprocess.run(
        [str(venv / "bin/python"), "-c", "import ensurepip, pathlib; print(pathlib.Path(ensurepip.__file__).parent / '_bundled')"],
        capture_output=True, text=True,
    ).stdout.strip()
    found = {
        "aider-wheels": cache / "lazaret/agents/wheels" / AIDER_WHEELS,
        "pytest-wheels": venv / "wheels",
        "npm-cache": code_server / "npm-cache",
        "pip": pathlib.Path(pip_dir) if pip_dir else venv / "missing",
    }
    missing = [f"{name} ({path})" for name, path in found.items() if not path.is_dir()]
    if missing:
        sys.exit("bench_workloads: missing inputs: " + ", ".join(missing)
                 + "; scripts/install-deps and scripts/prefetch-agents make them (tests/run bench runs both)")
    return found


def rust_sysroot():
    return subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True).stdout.strip()


def prepare(work):
    """The fixture repository: tests/workloads plus vendored crates and the extension's lockfile."""
    fixture = work / "fixture"
    shutil.copytree(REPO / "tests/workloads", fixture, ignore=shutil.ignore_patterns("target", "__pycache__", "node_modules"))
    rust = fixture / "rust"
    vendor = subprocess.run(["cargo", "vendor", "--offline", "--locked", "--versioned-dirs", "vendor"], cwd=rust, capture_output=True, text=True)
    if vendor.returncode != 0:
        sys.exit(f"bench_workloads: cargo vendor --offline of tests/workloads/rust failed (its crates come from the registry "
                 f"cache the workspace's build fills):\n{vendor.stderr[-2000:]}")
    (rust / ".cargo").mkdir()
    (rust / ".cargo/config.toml").write_text('[source.crates-io]\nreplace-with = "vendored"\n\n[source.vendored]\ndirectory = "vendor"\n')
    (fixture / "npm").mkdir()
    for name in ("package.json", "package-lock.json"):
        shutil.copy(REPO / "vscode-extension" / name, fixture / "npm" / name)
    (fixture / ".gitignore").write_text("target/\nnode_modules/\n__pycache__/\n")
    run(["git", "init", "-q", "-b", "main"], cwd=fixture)
    run(["git", "add", "-A"], cwd=fixture)
    run(["git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "workloads"], cwd=fixture)
    return fixture


def elapsed(output, place, job):
    for line in reversed(output.splitlines()):
        if line.startswith("elapsed "):
            return int(line.split()[1]) / 1e6
    sys.exit(f"bench_workloads: {job} in {place} did not finish its work; output:\n{output[-2000:]}")


# `cc` is an /etc/alternatives link on Debian, which the image has not:
# gcc by name, in every place alike.
COMPILER = {"CC": "gcc", "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER": "gcc"}
SANDBOX_ENV = "export W=/workspace R=/root T=/tmp B=/bench PATH=/opt/rust/bin:/usr/bin:/bin CARGO_HOME=/tmp/cargo HOME=/root " + " ".join(
    f"{key}={value}" for key, value in COMPILER.items()) + "\n"


class Host:
    name = "host"

    def __init__(self, work, fixture, found, sysroot):
        self.env = dict(os.environ, W=str(work / "host-fixture"), R=str(work / "host-root"), T=str(work / "host-tmp"),
                        B=str(work / "host-inputs"), PATH=f"{sysroot}/bin:/usr/bin:/bin", CARGO_HOME=str(work / "host-cargo"),
                        HOME=str(work / "host-root"), **COMPILER)
        shutil.copytree(fixture, self.env["W"], symlinks=True)
        for key in ("R", "T", "B"):
            os.makedirs(self.env[key])
        for name, path in found.items():
            os.symlink(path, pathlib.Path(self.env["B"]) / name)

    def run(self, script):
        return subprocess.run(["sh", "-c", script], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout

    def stop(self):
        pass





def mounts(found, sysroot):
    yield "/usr", "/usr"
    yield os.path.realpath(sysroot), "/opt/rust"
    for name, path in found.items():
        yield os.path.realpath(path), f"/bench/{name}"


def sandbox_flags(container, sources):
    """The runtime flags of Lazaret's running sandbox CONTAINER, as podman
    recorded its creation: runtime, runsc flags, limits, capabilities, and
    gVisor's mount hints for the bind mounts of SOURCES (the same host
    directories the raw container mounts). Mounts without a hint are cached
    (`file-access-mounts=exclusive`) in both, as the agent's checkout is.
    Returns the flags and the `share` hint of its /root (the State Anchor's
    mount of the persistent directory), if it has one."""
    created = json.loads(subprocess.run(["podman", "inspect", "--format", "{{json .Config.CreateCommand}}", container],
                                        capture_output=True, text=True, check=True).stdout)
    kept = ("--runtime=", "--runtime-flag=", "--ulimit=", "--cap-drop=", "--memory=", "--memory-swap=", "--pids-limit=",
            "--security-opt=", "--http-proxy=")
    flags = [a for a in created if a.startswith(kept) or a in ("--init", "--network=none")]
    hints = {}
    for argument in created:
        if argument.startswith("--annotation=dev.gvisor.spec.mount."):
            key, value = argument[len("--annotation=dev.gvisor.spec.mount."):].split("=", 1)
            name, field = key.rsplit(".", 1)
            hints.setdefault(name, {})[field] = value
    for name, hint in sorted(hints.items()):
        if hint.get("source") in sources:
            flags += [f"--annotation=dev.gvisor.spec.mount.{name}.{field}={value}" for field, value in hint.items()]
    root = next((a.split("source=", 1)[1].split(",", 1)[0] for a in created
                 if a.startswith("--mount=type=bind,") and a.endswith(",destination=/root")), None)
    share = next((hint.get("share") for hint in hints.values() if root and hint.get("source") == root), None)
    return flags, share


class Raw:
    name = "runsc"

    def __init__(self, work, fixture, found, sysroot, image, flags, root_share):
        self.container = f"lzb-workloads-{os.getpid()}"
        workspace, root = work / "raw-fixture", work / "raw-root"
        shutil.copytree(fixture, workspace, symlinks=True)
        root.mkdir()
        volumes = [f"--volume={host}:{inside}:ro" for host, inside in mounts(found, sysroot)]
        volumes += [f"--volume={workspace}:/workspace", f"--volume={root}:/root"]
        if root_share:
            # The persistent directory as gVisor sees Lazaret's (its hint).
            flags = flags + [f"--annotation=dev.gvisor.spec.mount.lzbroot.{field}={value}"
                             for field, value in (("source", root), ("type", "bind"), ("share", root_share))]
        run(["podman", "run", "-d", "--name", self.container, *flags, *volumes, image, "sleep", "3600"], stdout=subprocess.DEVNULL)

    def run(self, script):
        return subprocess.run(["podman", "exec", self.container, "sh", "-c", SANDBOX_ENV + script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout

    def stop(self):
        subprocess.run(["podman", "rm", "-f", "-t", "0", self.container], capture_output=True)


class Lazaret:
    name = "lazaret"

    def __init__(self, lazaret, work, fixture, found, sysroot, image):
        self.lazaret, self.workspace = lazaret, work / "lazaret-fixture"
        shutil.copytree(fixture, self.workspace, symlinks=True)
        config = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "lazaret/config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        volumes = ", ".join(f'{{ host = "{host}", container = "{inside}", mode = "ro" }}' for host, inside in mounts(found, sysroot))
        config.write_text(f'[profiles.workloads]\nimage = "{image}"\npersistent_dirs = ["/root"]\nvolumes = [{volumes}]\n')
        self.base = [lazaret, "run", "--profile", "workloads", "--workspace", str(self.workspace), "--"]
        self.holder = subprocess.Popen(self.base + ["sh", "-c", "echo ready; exec sleep 3600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline() if self.holder.stdout else ""
        if line.strip() != "ready":
            self.holder.kill()
            sys.exit(f"bench_workloads: the workloads domain did not start: {self.holder.stderr.read() if self.holder.stderr else ''}")
        domain = json.loads(subprocess.run([lazaret, "domain", "--profile", "workloads", "--workspace", str(self.workspace), "--json"],
                                           capture_output=True, text=True, check=True).stdout)
        self.container = domain["container_name"]

    def run(self, script):
        return subprocess.run(self.base + ["sh", "-c", SANDBOX_ENV + script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout

    def stop(self):
        self.holder.terminate()
        self.holder.wait()
        # The last session gone, the coordinator stops the domain; its State
        # Anchor lives under the bench's XDG_DATA_HOME, removed with it.
        for _ in range(600):
            if not subprocess.run(["podman", "ps", "-q", "--filter", "label=io.lazaret.domain"], capture_output=True, text=True).stdout.strip():
                break
            time.sleep(0.1)


def main():
    lazaret, image, work, rounds = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), int(sys.argv[4])
    jobs = os.environ.get("LAZARET_BENCH_WORKLOADS", " ".join(JOBS)).split()
    unknown = [job for job in jobs if job not in JOBS]
    if unknown or not jobs:
        sys.exit(f"bench_workloads: LAZARET_BENCH_WORKLOADS names {unknown or 'nothing'}; the jobs are {' '.join(JOBS)}")
    work.mkdir(parents=True, exist_ok=True)
    found, sysroot = inputs(), rust_sysroot()
    fixture = prepare(work)
    places = []
    try:
        places.append(Host(work, fixture, found, sysroot))
        ours = Lazaret(lazaret, work, fixture, found, sysroot, image)
        places.append(ours)
        flags, root_share = sandbox_flags(ours.container, {host for host, _ in mounts(found, sysroot)})
        print("raw runsc flags (Lazaret's sandbox's):", " ".join(flags), f"(/root: share={root_share})")
        places.append(Raw(work, fixture, found, sysroot, image, flags, root_share))
        if "pytest" in jobs and "pip" not in jobs:
            # pytest is what the pip job installs.
            for place in places:
                elapsed(place.run(JOBS["pip"]), place.name, "pip")
        times = {(place.name, job): [] for place in places for job in jobs}
        for index in range(rounds):
            # Interleaved, so a slow minute of the machine hits every place.
            # The host runs once: it is the reference for gVisor's own cost,
            # not for the 1.1x goal, which compares the two sandboxes.
            for job in jobs:
                script = JOBS[job]
                for place in places:
                    if place.name == "host" and index > 0:
                        continue
                    times[(place.name, job)].append(elapsed(place.run(script), place.name, job))
    finally:
        for place in places:
            place.stop()
    for job in jobs:
        host, raw, ours = (statistics.median(times[(p, job)]) for p in ("host", "runsc", "lazaret"))
        print(f"{DESCRIPTIONS[job]:<46} lazaret {ours:7.2f} s   raw runsc {raw:7.2f} s   host {host:7.2f} s   "
              f"lazaret/runsc {ours / raw:.2f} (goal 1.1)   runsc/host {raw / host:.2f}")
        figure(f"{DESCRIPTIONS[job]} (goal 1.1x)", ours * 1000, "ms", "raw runsc container, same flags", raw * 1000)
        figure(f"{DESCRIPTIONS[job]}: gVisor's own cost", raw * 1000, "ms", "host", host * 1000)


if __name__ == "__main__":
    main()
