"""A throwaway Lazaret home for the Neovim tests: its own XDG config, data and
runtime directories, a git repository as workspace, the real `lazaret`
binary ($LAZARET_BIN, else `lazaret` on PATH) and the real podman + runsc.
The same isolation as tests/support/mod.rs of the Rust suites."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

DEFAULT_IMAGE = "localhost/lazaret-default:1"


def lazaret_bin():
    explicit = os.environ.get("LAZARET_BIN")
    if explicit:
        return str(Path(explicit).resolve())
    found = shutil.which("lazaret")
    if not found:
        raise RuntimeError("no lazaret binary: set LAZARET_BIN or put lazaret on PATH")
    return found


def wait_until(timeout, condition, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            return value
        time.sleep(interval)


class LazaretEnv:
    def __init__(self, approval_timeout=120, auto_approve=()):
        self.root = Path(tempfile.mkdtemp(prefix="lzn", dir="/tmp"))
        for sub in ("config/lazaret", "data", "run"):
            (self.root / sub).mkdir(parents=True)
        os.chmod(self.root / "run", 0o700)
        self.binary = lazaret_bin()
        self.sessions = []
        self.hashes = set()
        self.leftovers = []
        self.socket_dir = self.root / "run/lazaret"
        # Variables of the user's shell for `lazaret run` only (an API key):
        # never given to the editor.
        self.shell = {}
        rules = ", ".join(json.dumps(rule) for rule in auto_approve)
        self.config_file.write_text(
            "[escalation]\nenabled = true\n"
            f"socket_dir = \"{self.socket_dir}\"\n"
            f"auto_approve = [{rules}]\n"
            f"approval_timeout_seconds = {approval_timeout}\n"
        )

    @property
    def config_file(self):
        return self.root / "config/lazaret/config.toml"

    def environ(self):
        env = dict(os.environ)
        env.update(
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_DATA_HOME=str(self.root / "data"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
        )
        env.pop("LAZARET_LOG", None)
        return env

    def shell_environ(self):
        """The environment of `lazaret run`: environ() and the shell's variables."""
        return {**self.environ(), **self.shell}

    def lazaret(self, *args, check=True, timeout=120, cwd=None):
        result = subprocess.run(
            [self.binary, *map(str, args)], env=self.environ(), capture_output=True, text=True,
            timeout=timeout, cwd=cwd or self.root,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"lazaret {args}: {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def ensure_image(self):
        self.lazaret("image", "build", timeout=600)

    def git(self, repo, *args):
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        assert result.returncode == 0, f"git {args}: {result.stderr}"
        return result.stdout

    def repository(self, name="project"):
        repo = self.root / name
        repo.mkdir()
        self.git(repo, "init", "--quiet", "--initial-branch=main")
        self.git(repo, "config", "user.name", "Host User")
        self.git(repo, "config", "user.email", "host@example.invalid")
        (repo / "README.md").write_text("# project\n")
        (repo / "src").mkdir()
        (repo / "src/lib.rs").write_text("pub fn answer() -> u32 { 42 }\n")
        self.git(repo, "add", "-A")
        self.git(repo, "commit", "--quiet", "-m", "initial")
        return repo

    def domain(self, repo, profile="default"):
        return json.loads(self.lazaret("domain", "--json", "--profile", profile, "--workspace", repo).stdout)

    def spawn(self, repo, script):
        """`lazaret run --workspace REPO -- sh -c SCRIPT` in the background."""
        process = subprocess.Popen(
            [self.binary, "run", "--workspace", str(repo), "--", "sh", "-c", script],
            env=self.shell_environ(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=self.root, start_new_session=True,
        )
        self.sessions.append(process)
        return process

    def start_domain(self, repo, script="sleep 600"):
        """A session that keeps the domain up; returns once its command runs
        inside the sandbox (the workspace checkout is in place then)."""
        process = self.spawn(repo, "echo lazaret-ready; " + script)
        domain = self.domain(repo)
        self.hashes.add(domain["domain_hash"])
        line = process.stdout.readline()
        if line.strip() != "lazaret-ready":
            process.wait(timeout=30)
            raise AssertionError(f"the session did not start: {line!r} {process.stderr.read()}")
        return process, Path(domain["control_socket"])

    def container(self, repo):
        return self.domain(repo)["container_name"]

    def exec_in(self, repo, script, detach=False):
        """Runs SCRIPT in the domain's sandbox as another process of it (podman exec)."""
        argv = ["podman", "exec", *(["-d"] if detach else []), self.container(repo), "sh", "-c", script]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def pending(self):
        result = self.lazaret("pending", "--json", check=False)
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            return []

    def audit(self, repo):
        return json.loads(self.lazaret("audit", "--json", "--workspace", repo).stdout)

    def close(self):
        for process in self.sessions:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in self.sessions:
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
        # The domains tear down when their last session ends: wait for the
        # sockets and the containers.
        wait_until(30, lambda: not any(self.socket_dir.glob("*/control.sock")), 0.2)
        wait_until(30, lambda: not self.containers(), 0.2)
        self.leftovers = self.containers()
        shutil.rmtree(self.root, ignore_errors=True)

    def containers(self):
        """Containers (any state) of the domains this environment started."""
        names = []
        for hash_ in sorted(self.hashes | {p.name for p in self.socket_dir.glob("*") if p.is_dir()}):
            output = subprocess.run(
                ["podman", "ps", "--all", "--filter", f"label=io.lazaret.domain={hash_}", "--format", "{{.Names}}"],
                capture_output=True, text=True,
            ).stdout
            names += [line for line in output.splitlines() if line]
        return names


def static_helper(name):
    """A static helper built next to the lazaret binary under test
    (scripts/build puts them in target/x86_64-unknown-linux-musl/static)."""
    path = Path(lazaret_bin()).parent.parent / "x86_64-unknown-linux-musl/static" / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/build")
    return path


class InternalNetwork:
    """A podman network created `--internal` (nothing on it reaches past this
    machine) for a domain's `[network] podman_network`, with test hosts of
    the test's own. Subnets 10.213.240-254 (the Rust suites take 20-219,
    VS Code's 220-239); the next one when podman says a subnet is used."""

    def __init__(self, tag):
        self.hosts = []
        self.name = None
        for i in range(15):
            name = f"lzn-{tag}-{os.getpid()}-{i}"
            prefix = f"10.213.{240 + (os.getpid() + i) % 15}"
            result = subprocess.run(
                ["podman", "network", "create", "--internal", "--disable-dns", "--subnet", f"{prefix}.0/24", name],
                capture_output=True, text=True,
            )
            if result.returncode == 0:
                self.name, self.prefix = name, prefix
                return
            if "already used" not in result.stderr and "exists" not in result.stderr:
                raise AssertionError(f"podman network create {name}: {result.stderr}")
        raise AssertionError("no free subnet in 10.213.240-254 for a test network")

    def address(self, host):
        return f"{self.prefix}.{host}"

    def start_echo(self, host, port):
        """`lazaret-testhost echo PORT` (every byte comes back) at .HOST."""
        self.start_testhost(host, ["echo", str(port)])

    def start_testhost(self, host, args, volumes=()):
        """`lazaret-testhost ARGS...` at .HOST (runc), with the extra
        `--volume` values VOLUMES."""
        name = f"{self.name}-host{host}"
        result = subprocess.run(
            ["podman", "run", "-d", "--replace", "--name", name, "--runtime=runc",
             # runc cannot raise limits past the suite's own (seen: "error setting rlimit type 7").
             "--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096",
             f"--volume={static_helper('lazaret-testhost')}:/testhost:ro", *(f"--volume={v}" for v in volumes),
             "--network", self.name, "--ip", self.address(host), DEFAULT_IMAGE, "/testhost", *map(str, args)],
            capture_output=True, text=True,
        )
        assert result.returncode == 0, f"test host: {result.stderr}"
        self.hosts.append(name)

    def log(self, host):
        """What the test host at .HOST printed so far."""
        result = subprocess.run(["podman", "logs", f"{self.name}-host{host}"], capture_output=True, text=True)
        return result.stdout + result.stderr

    def close(self):
        """Removes the test hosts, then the network once no container is on
        it (a domain tears down after its last session)."""
        for name in self.hosts:
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
        if self.name:
            wait_until(30, lambda: not subprocess.run(
                ["podman", "ps", "-aq", "--filter", f"network={self.name}"], capture_output=True, text=True).stdout.strip(), 0.5)
            subprocess.run(["podman", "network", "rm", "-f", self.name], capture_output=True)
