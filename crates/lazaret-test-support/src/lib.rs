//! `lazaret-test-support`: what every end-to-end suite (`tests/e2e_*.rs`)
//! shares, in the way gitoxide keeps its test tools in a crate of their own.
//!
//! - [`TestEnv`]: a throwaway home per test (its own XDG config, data and
//!   runtime directories) and the real `lazaret` binary run in it; domains
//!   a test leaves behind are removed when it is dropped.
//! - [`Subject`]: the same for the rootless test user ([`RootlessUser`]),
//!   so one test runs as root and rootless.
//! - [`agent`]: `lazaret run -- sh -c SCRIPT`, the one way a suite runs an
//!   agent (profile, environment, spawned or run to the end).
//! - real git ([`git`], [`git_repository`]), the control socket ([`Rpc`],
//!   [`read_frame`]), the hostile corpus ([`hostile_corpus`]), polling with
//!   a bound ([`wait_until`]), and [`missing_requirement`], which fails a
//!   test under CI and lets `tests/run` count a skip otherwise.
//! - [`cluster`] (feature `cluster`): a namespace of a test's own on the test
//!   cluster, and a domain's `Sandbox` there (the cluster suites).
//!
//! Helpers panic with the command's output on failure (a test's failure
//! message is the point); [`Agent::run_ok`] returns a [`Result`] for tests
//! that use `?`. The binary under test is found beside the test executable
//! (`target/<profile>/lazaret`, which cargo builds for integration tests).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

mod agent;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod tmux;

pub use agent::{agent, Agent};

/// What a helper that can fail returns: the error names the command and its output.
pub type Result<T = (), E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// The `lazaret` binary under test: `target/<profile>/lazaret`, beside the
/// test executable (`target/<profile>/deps/<test>`).
pub fn lazaret_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    profile_dir.join("lazaret")
}

pub const DEFAULT_IMAGE: &str = "localhost/lazaret-default:1";

/// A throwaway home for one test: its own XDG config, data and runtime dirs.
pub struct TestEnv {
    pub root: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let root = tempfile::Builder::new().prefix("lzt").tempdir_in("/tmp").expect("tempdir");
        for dir in ["config/lazaret", "data", "run"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("mkdir");
        }
        std::fs::set_permissions(root.path().join("run"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        TestEnv { root }
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn config_file(&self) -> PathBuf {
        self.path().join("config/lazaret/config.toml")
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.config_file(), text).expect("write config");
    }

    /// The real `lazaret` binary with this environment.
    pub fn lazaret(&self) -> Command {
        let mut command = Command::new(lazaret_bin());
        command
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env("XDG_DATA_HOME", self.path().join("data"))
            .env("XDG_RUNTIME_DIR", self.path().join("run"))
            .env_remove("LAZARET_LOG");
        command
    }

    pub fn workspace(&self, name: &str) -> PathBuf {
        let dir = self.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir workspace");
        dir
    }
}

impl Default for TestEnv {
    fn default() -> TestEnv {
        TestEnv::new()
    }
}

/// Removes what a test left running of its domains (coordinators, then
/// containers), so that one failed or racing test does not leave a sandbox
/// on the machine for the next run. Tests that check teardown assert it
/// themselves before this runs.
impl Drop for TestEnv {
    fn drop(&mut self) {
        for hash in domain_hashes(self.path()) {
            let containers = domain_containers(&hash);
            if !containers.is_empty() {
                eprintln!("test support: removing {containers:?}, left behind by the test");
                let _ = Command::new("podman").args(["rm", "--force", "--time", "0"]).args(&containers).output();
            }
        }
        kill_coordinators_under(self.path());
    }
}

/// The domains that ran with `home`'s data directory (root's
/// `data/lazaret/domains`, a rootless subject's `data/domains`).
pub fn domain_hashes(home: &Path) -> Vec<String> {
    ["data/lazaret/domains", "data/domains"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(home.join(dir)).ok())
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Ends coordinators still serving a workspace under `home`.
fn kill_coordinators_under(home: &Path) {
    for pid in coordinator_pids(home) {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).output();
    }
}

/// The live sessions a `lazaret status --json` command reports (0 when
/// the domain is not running or the answer is not the expected JSON).
pub fn live_sessions(status: &mut Command) -> usize {
    let output = run(status);
    serde_json::from_slice::<serde_json::Value>(&output.stdout)
        .ok()
        .and_then(|status| status["status"]["sessions"].as_array().map(Vec::len))
        .unwrap_or(0)
}

pub fn run(command: &mut Command) -> Output {
    command.output().expect("spawn")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `target/` of this build, found from the binary under test.
pub fn target_dir() -> PathBuf {
    let exe = lazaret_bin();
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// Where the static helpers are built (`tests/run` builds them first).
pub fn static_helper(name: &str) -> PathBuf {
    target_dir().join("x86_64-unknown-linux-musl/static").join(name)
}

static IMAGE: Once = Once::new();

/// Builds the default image through the CLI (cached after the first build).
pub fn ensure_default_image() {
    IMAGE.call_once(|| {
        let env = TestEnv::new();
        let output = run(env.lazaret().args(["image", "build"]));
        assert!(output.status.success(), "lazaret image build failed: {}", stderr(&output));
    });
}

/// Plain podman with the flags these machines need for a runsc container.
pub fn podman_runsc(arguments: &[&str]) -> Output {
    let (nofile, nproc) = ("--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096");
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--rm",
        "--runtime=runsc",
        "--runtime-flag=ignore-cgroups",
        "--network=none",
        "--runtime-flag=network=none",
        nofile,
        nproc,
    ]);
    command.args(arguments);
    command.output().expect("spawn podman")
}

/// Serializes the tests that start sandboxes: they measure teardown within
/// seconds, which contention on a 2-core machine would make flaky.
pub fn sandbox_guard() -> std::sync::MutexGuard<'static, ()> {
    static GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GUARD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `lazaret domain --json` for a profile and workspace.
pub fn domain_json(env: &TestEnv, profile: &str, workspace: &Path) -> serde_json::Value {
    let output = run(env.lazaret().args(["domain", "--json", "--profile", profile, "--workspace"]).arg(workspace));
    assert!(output.status.success(), "lazaret domain: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("domain json")
}

/// Names of all containers (any state) labelled with the domain hash.
pub fn domain_containers(hash: &str) -> Vec<String> {
    let output = Command::new("podman")
        .args(["ps", "--all", "--filter", &format!("label=io.lazaret.domain={hash}"), "--format", "{{.Names}}"])
        .output()
        .expect("podman ps");
    stdout(&output).lines().map(str::to_owned).filter(|line| !line.is_empty()).collect()
}

/// `lazaret run --workspace <workspace> -- sh -c <script>` in the
/// background, its stdout piped and read line by line.
pub fn spawn_agent_lines(
    env: &TestEnv,
    workspace: &Path,
    script: &str,
) -> (std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) {
    use std::io::BufRead;
    let mut child = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(workspace)
        .args(["--", "sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn lazaret run");
    let lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

/// Pids of live coordinator processes for `workspace` (from /proc).
pub fn coordinator_pids(workspace: &Path) -> Vec<u32> {
    let needle = workspace.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let words: Vec<String> = cmdline.split(|b| *b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
        let is_zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| stat.contains(") Z "));
        if !is_zombie && words.iter().any(|w| w == "coordinator") && words.contains(&needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
/// Every regular file under `root` (symlinks not followed) whose bytes hold
/// `needle`: where a secret was written that should not have been.
pub fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
        if metadata.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|entry| entry.path()));
            }
        } else if metadata.is_file() {
            if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|window| window == needle) {
                    found.push(path);
                }
            }
        }
    }
    found
}

pub fn wait_until(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Everything of a domain is gone: container, control socket, coordinator.
pub fn domain_is_torn_down(domain: &serde_json::Value, workspace: &Path) -> bool {
    torn_down_with(domain, workspace, domain_containers)
}

/// [`domain_is_torn_down`] with the containers listed by `containers`.
fn torn_down_with(domain: &serde_json::Value, workspace: &Path, containers: impl FnOnce(&str) -> Vec<String>) -> bool {
    let hash = domain["domain_hash"].as_str().expect("hash");
    let socket = Path::new(domain["control_socket"].as_str().expect("socket"));
    !socket.exists() && coordinator_pids(workspace).is_empty() && containers(hash).is_empty()
}

/// Runs git (the host's) and returns stdout; panics on failure.
pub fn git(repository: &Path, arguments: &[&str]) -> String {
    let output = Command::new("git").arg("-C").arg(repository).args(arguments).output().expect("git");
    assert!(output.status.success(), "git {arguments:?}: {}", stderr(&output));
    stdout(&output)
}

/// A git repository with one commit, as a user's project would be.
pub fn git_repository(env: &TestEnv, name: &str) -> PathBuf {
    let repository = env.workspace(name);
    git(&repository, &["init", "--quiet", "--initial-branch=main"]);
    git(&repository, &["config", "user.name", "Host User"]);
    git(&repository, &["config", "user.email", "host@example.invalid"]);
    std::fs::write(repository.join("README.md"), "# project\n").expect("write");
    std::fs::create_dir_all(repository.join("src")).expect("mkdir");
    std::fs::write(repository.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n").expect("write");
    git(&repository, &["add", "-A"]);
    git(&repository, &["commit", "--quiet", "-m", "initial"]);
    repository
}

/// An ordinary user prepared by `scripts/setup-rootless-user` (tests/run sets
/// LAZARET_TEST_ROOTLESS_USER when it runs as root), with a copy of the
/// binaries in a directory that user can read (the installed layout).
pub struct RootlessUser {
    pub name: String,
    pub uid: String,
    pub home: String,
    pub bin: tempfile::TempDir,
}

impl RootlessUser {
    pub fn from_environment() -> Option<RootlessUser> {
        let name = std::env::var("LAZARET_TEST_ROOTLESS_USER").ok()?;
        Some(RootlessUser::named(&name))
    }

    /// An existing ordinary user, with Lazaret's binaries copied where it
    /// can run them.
    pub fn named(name: &str) -> RootlessUser {
        let name = name.to_owned();
        let passwd = Command::new("getent").args(["passwd", &name]).output().expect("getent");
        let fields: Vec<String> = stdout(&passwd).trim().split(':').map(str::to_owned).collect();
        let bin = tempfile::Builder::new().prefix("lzt-rootless").tempdir_in("/tmp").expect("tempdir");
        std::fs::set_permissions(bin.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        std::fs::copy(lazaret_bin(), bin.path().join("lazaret")).expect("copy");
        for helper in ["lazaret-escalate", "lazaret-sidecar", "lazaret-testhost"] {
            std::fs::copy(static_helper(helper), bin.path().join(helper)).expect("copy helper");
        }
        assert!(fields.len() > 5, "no such user: {name}");
        RootlessUser { name, uid: fields[2].clone(), home: fields[5].clone(), bin }
    }

    /// The rootless test user, or `None` after [`missing_requirement`]
    /// recorded the skip (outside CI; under CI a missing user fails).
    pub fn required() -> Option<RootlessUser> {
        let user = RootlessUser::from_environment();
        if user.is_none() {
            missing_requirement("LAZARET_TEST_ROOTLESS_USER (tests/run sets it up when run as root)");
        }
        user
    }

    pub fn lazaret(&self) -> String {
        self.bin.path().join("lazaret").display().to_string()
    }

    /// A binary copied next to `lazaret` (the static helpers).
    pub fn helper(&self, name: &str) -> String {
        self.bin.path().join(name).display().to_string()
    }

    /// Runs `script` with `sh -c` as the user, in a clean login-like environment.
    /// `LAZARET_RUNSC`, if the suite sets it, is passed on.
    pub fn run(&self, script: &str) -> Output {
        let runsc = std::env::var("LAZARET_RUNSC").map(|runsc| format!("LAZARET_RUNSC={runsc}"));
        Command::new("runuser")
            .args(["-u", &self.name, "--", "env", "-i"])
            .arg(format!("HOME={}", self.home))
            .arg(format!("USER={}", self.name))
            .arg(format!("XDG_RUNTIME_DIR=/run/user/{}", self.uid))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin")
            .args(runsc)
            .args(["sh", "-c", script])
            .current_dir(&self.home)
            .output()
            .expect("runuser")
    }
}

/// A requirement of the running test that this machine does not meet.
///
/// Under `CI=true`, or when `tests/run` did not ask for skips to be counted
/// (`LAZARET_TEST_SKIP_LOG` unset, as in a bare `cargo test`), the test fails
/// with the reason. Otherwise the skip is appended to that log, which
/// `tests/run` counts (a skipped test is not reported as passed) and prints;
/// the caller then returns.
pub fn missing_requirement(reason: &str) {
    let test = std::thread::current().name().unwrap_or("unnamed test").to_owned();
    let ci = std::env::var("CI").is_ok_and(|value| value == "true");
    match std::env::var_os("LAZARET_TEST_SKIP_LOG") {
        Some(log) if !ci => {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("open the skip log");
            writeln!(file, "{test}: {reason}").expect("write the skip log");
            eprintln!("SKIPPED {test}: needs {reason}");
        }
        _ => panic!(
            "{test} needs {reason}, which this machine lacks (tests/run counts such skips outside CI; under CI=true none is allowed)"
        ),
    }
}

/// Whether this test process runs as root; if not, the skip is recorded
/// (see [`missing_requirement`]).
pub fn require_root(why: &str) -> bool {
    let root = nix_is_root();
    if !root {
        missing_requirement(&format!("root ({why})"));
    }
    root
}

fn nix_is_root() -> bool {
    let output = Command::new("id").arg("-u").output().expect("id");
    stdout(&output).trim() == "0"
}

/// Who runs Lazaret in a test: this process's user (root under `tests/run`)
/// or the rootless test user, each with a throwaway configuration, data
/// directory and workspaces.
pub struct Subject {
    pub env: TestEnv,
    pub user: Option<RootlessUser>,
}

/// A rootless subject's leftovers live in the user's podman: removed here,
/// before the [`TestEnv`] (root's podman) is dropped.
impl Drop for Subject {
    fn drop(&mut self) {
        let Some(user) = &self.user else { return };
        for hash in domain_hashes(self.env.path()) {
            let leftovers = self.containers(&hash);
            if !leftovers.is_empty() {
                eprintln!("test support: removing {leftovers:?} (rootless), left behind by the test");
                let _ = user.run(&format!("podman rm --force --time 0 {}", leftovers.join(" ")));
            }
        }
    }
}

impl Subject {
    pub fn current() -> Subject {
        Subject { env: TestEnv::new(), user: None }
    }

    /// The rootless test user; `None` after the skip was recorded.
    pub fn rootless() -> Option<Subject> {
        let user = RootlessUser::required()?;
        let env = TestEnv::new();
        let subject = Subject { env, user: Some(user) };
        subject.write_config("");
        // The user's podman has its own images: build the default one once,
        // so no test's timing includes that first build.
        // Every test that needs it reports a failed build (not a poisoned once).
        static USER_IMAGE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        let built = USER_IMAGE.get_or_init(|| {
            let output = run(subject.lazaret().args(["image", "build"]));
            if output.status.success() {
                Ok(())
            } else {
                Err(stderr(&output))
            }
        });
        if let Err(message) = built {
            panic!("lazaret image build as the rootless user: {message}");
        }
        Some(subject)
    }

    pub fn label(&self) -> &'static str {
        if self.user.is_some() {
            "rootless"
        } else {
            "root"
        }
    }

    /// The real `lazaret` with this subject's environment. As the rootless
    /// user it is exec'd through `setpriv` (no intermediate process), so the
    /// child's pid is the CLI's own and signals reach it directly. The
    /// user's XDG directories stay the real ones: rootless podman keeps its
    /// storage and reads its `storage.conf` there, and a per-test
    /// `XDG_CONFIG_HOME` made the first podman call initialise the user's
    /// storage with `vfs` on a fresh machine. The test's configuration and
    /// data go through `--config` (with `data_root`) instead.
    pub fn lazaret(&self) -> Command {
        let Some(user) = &self.user else { return self.env.lazaret() };
        let gid = stdout(&Command::new("id").args(["-g", &user.name]).output().expect("id -g")).trim().to_owned();
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid", &user.uid, "--regid", &gid, "--init-groups", "--"])
            .arg(user.lazaret())
            .arg("--config")
            .arg(self.env.config_file())
            .env_clear()
            .env("HOME", &user.home)
            .env("USER", &user.name)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("XDG_RUNTIME_DIR", format!("/run/user/{}", user.uid))
            .current_dir(self.env.path());
        // The runsc a suite runs against (tests/run's second pass on
        // Debian's) holds for the rootless user too.
        if let Some(runsc) = std::env::var_os("LAZARET_RUNSC") {
            command.env("LAZARET_RUNSC", runsc);
        }
        command
    }

    /// A shell command line that runs `lazaret ARGUMENTS` as this subject,
    /// for a terminal (tmux) to run: the same environment as [`Subject::lazaret`].
    pub fn command_line(&self, arguments: &str) -> String {
        let runsc = std::env::var("LAZARET_RUNSC").map(|runsc| format!("LAZARET_RUNSC={runsc} ")).unwrap_or_default();
        match &self.user {
            None => format!(
                "env {runsc}XDG_CONFIG_HOME={} XDG_DATA_HOME={} XDG_RUNTIME_DIR={} {} {arguments}",
                self.env.path().join("config").display(),
                self.env.path().join("data").display(),
                self.env.path().join("run").display(),
                lazaret_bin().display(),
            ),
            Some(user) => {
                let gid = stdout(&Command::new("id").args(["-g", &user.name]).output().expect("id -g")).trim().to_owned();
                format!(
                    "setpriv --reuid {uid} --regid {gid} --init-groups -- env -i HOME={home} USER={name} PATH=/usr/local/bin:/usr/bin:/bin \
                     XDG_RUNTIME_DIR=/run/user/{uid} TERM=$TERM {runsc}{lazaret} --config {config} {arguments}",
                    uid = user.uid,
                    home = user.home,
                    name = user.name,
                    lazaret = user.lazaret(),
                    config = self.env.config_file().display(),
                )
            }
        }
    }

    /// A git repository with one commit, owned by the subject.
    pub fn repository(&self, name: &str) -> PathBuf {
        let repository = git_repository(&self.env, name);
        if let Some(user) = &self.user {
            let chown = Command::new("chown").arg("-R").arg(format!("{}:", user.name)).arg(self.env.path()).status().expect("chown");
            assert!(chown.success());
        }
        repository
    }

    /// Gives the test's home (and the workspaces in it) to the subject, after
    /// the test changed them as root.
    pub fn hand_over(&self) {
        if let Some(user) = &self.user {
            let chown = Command::new("chown").arg("-R").arg(format!("{}:", user.name)).arg(self.env.path()).status().expect("chown");
            assert!(chown.success(), "chown the test home to {}", user.name);
        }
    }

    /// Writes the configuration; as the rootless user with the test's own
    /// `data_root` first (see [`Subject::lazaret`]).
    pub fn write_config(&self, text: &str) {
        match &self.user {
            None => self.env.write_config(text),
            Some(user) => {
                self.env.write_config(&format!("data_root = \"{}\"\n{text}", self.env.path().join("data").display()));
                let chown = Command::new("chown").arg("-R").arg(format!("{}:", user.name)).arg(self.env.path()).status().expect("chown");
                assert!(chown.success(), "chown the test home to {}", user.name);
            }
        }
    }

    /// Live sessions of the domain of `workspace` (default profile), as
    /// `lazaret status --json` reports them; 0 when it is not running.
    pub fn live_sessions(&self, workspace: &Path) -> usize {
        live_sessions(self.lazaret().args(["status", "--json", "--workspace"]).arg(workspace))
    }

    /// `lazaret domain --json` as this subject.
    pub fn domain(&self, profile: &str, workspace: &Path) -> serde_json::Value {
        let output = run(self.lazaret().args(["domain", "--json", "--profile", profile, "--workspace"]).arg(workspace));
        assert!(output.status.success(), "lazaret domain: {}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("domain json")
    }

    /// Containers (any state) of the domain, in this subject's podman.
    pub fn containers(&self, hash: &str) -> Vec<String> {
        let Some(user) = &self.user else { return domain_containers(hash) };
        let output = user.run(&format!("podman ps --all --filter label=io.lazaret.domain={hash} --format '{{{{.Names}}}}'"));
        stdout(&output).lines().map(str::to_owned).filter(|line| !line.is_empty()).collect()
    }

    /// Everything of a domain is gone: container, control socket, coordinator.
    pub fn torn_down(&self, domain: &serde_json::Value, workspace: &Path) -> bool {
        torn_down_with(domain, workspace, |hash| self.containers(hash))
    }
}

/// Reads one JSON-RPC message in the coordinator's framing
/// (`Content-Length: N\r\n\r\n` + N bytes of JSON).
pub fn read_frame(reader: &mut std::io::BufReader<std::os::unix::net::UnixStream>) -> serde_json::Value {
    use std::io::{BufRead, Read};
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length:") {
            length = value.trim().parse().expect("length");
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).expect("body");
    serde_json::from_slice(&body).expect("json")
}

/// Writes one JSON-RPC message in the coordinator's framing.
pub fn write_frame(writer: &mut impl std::io::Write, message: &serde_json::Value) {
    let body = message.to_string();
    write!(writer, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write");
}

/// A raw JSON-RPC connection to a domain's control socket, as an editor has
/// one (the tests speak the wire format themselves, not the typed client).
pub struct Rpc {
    pub reader: std::io::BufReader<std::os::unix::net::UnixStream>,
    writer: std::os::unix::net::UnixStream,
    next_id: u64,
}

impl Rpc {
    pub fn connect(socket: &Path) -> Rpc {
        let stream = std::os::unix::net::UnixStream::connect(socket).expect("connect control socket");
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
        Rpc { writer: stream.try_clone().expect("clone"), reader: std::io::BufReader::new(stream), next_id: 0 }
    }

    /// Sends a request whose `params` member is given literally (`None`: no
    /// `params` at all) and returns the whole response (`result` or
    /// `error`); notifications that arrive meanwhile are skipped.
    pub fn request(&mut self, method: &str, params: Option<serde_json::Value>) -> serde_json::Value {
        self.next_id += 1;
        let mut message = serde_json::json!({"jsonrpc": "2.0", "id": self.next_id, "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        write_frame(&mut self.writer, &message);
        loop {
            let response = read_frame(&mut self.reader);
            if response["id"] == self.next_id {
                return response;
            }
        }
    }

    /// [`Rpc::request`] with params; the whole response.
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.request(method, Some(params))
    }

    /// The `result` of a call that must succeed.
    pub fn result(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// Polls `escalation/list` until a request is pending.
    pub fn wait_for_pending(&mut self) -> serde_json::Value {
        for _ in 0..200 {
            let pending = self.call("escalation/list", serde_json::json!({}));
            if let Some(first) = pending["result"].as_array().and_then(|list| list.first()) {
                return first.clone();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("no pending escalation appeared");
    }
}

/// One entry of the hostile corpus (`tests/hostile/strings.json`, DECISIONS
/// D16): agent-controlled text every client must show inert.
#[derive(Debug, Clone)]
pub struct Hostile {
    pub name: String,
    /// Expanded: repeated as the entry says, `@MARKER@` replaced.
    pub text: String,
    /// What every client must show of a long entry: its end (`tail`).
    pub tail: Option<String>,
    /// The entry is a DNS name the sandbox also asks for (`network`).
    pub network: bool,
}

impl Hostile {
    /// The entry as a file name: `/` replaced by `_`, at most 200 bytes (cut
    /// on a character boundary), never empty.
    pub fn file_name(&self) -> String {
        let mut name = self.text.replace(['/', '\0'], "_");
        let mut end = name.len().min(200);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        if name.is_empty() || name == "." || name == ".." {
            name = format!("empty-{}", self.name);
        }
        name
    }
}

/// The hostile corpus with `@MARKER@` replaced by `marker` (whose existence
/// after a test means something ran that should not have).
pub fn hostile_corpus(marker: &Path) -> Vec<Hostile> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hostile/strings.json");
    let document: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("the hostile corpus")).expect("corpus json");
    let placeholder = document["marker"].as_str().expect("marker placeholder");
    document["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| {
            let times = entry["repeat"].as_u64().unwrap_or(1) as usize;
            let text = entry["text"].as_str().expect("text").repeat(times).replace(placeholder, &marker.display().to_string());
            Hostile {
                name: entry["name"].as_str().expect("name").to_owned(),
                text,
                tail: entry["tail"].as_str().map(str::to_owned),
                network: entry["network"].as_bool().unwrap_or(false),
            }
        })
        .collect()
}

/// What a terminal would act on in `bytes` a program wrote to it: escape
/// and other control characters (a CR only before a LF, as a terminal's
/// own newline translation writes it), C1 controls, bidi and invisible
/// characters. Empty when the output is inert.
pub fn terminal_hazards(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let characters: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    for (index, character) in characters.iter().enumerate() {
        let allowed = matches!(character, '\n' | '\t') || (*character == '\r' && characters.get(index + 1) == Some(&'\n'));
        if !allowed && lazaret_core::terminal_text::is_unsafe(*character) {
            let start = index.saturating_sub(20);
            let context: String = characters[start..(index + 20).min(characters.len())].iter().collect();
            found.push(format!("U+{:04X} in {context:?}", *character as u32));
        }
    }
    found
}
