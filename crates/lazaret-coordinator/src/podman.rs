//! Starting `podman`: every invocation that can goes through
//! [`Podman::command`], so the program (`$LAZARET_PODMAN` or `podman`), the
//! cleared environment and the flags these machines need (DECISIONS D10) are
//! set in one spot. The State Anchor as root and the
//! CLI's PTY session start the same program with [`environment`] themselves.
//! Every host-side podman call is bounded: `crate::bounded_process` runs it
//! and kills the command's process group past its bound from
//! `lazaret_core::bounds`.

use std::process::Command;

use lazaret_core::bounds::PODMAN_QUERY;

use crate::bounded_process::output_bounded_blocking;

/// Podman invoked as the current user (rootless unless we are root).
#[derive(Debug, Clone)]
pub struct Podman {
    program: String,
}

impl Default for Podman {
    fn default() -> Podman {
        Podman { program: std::env::var("LAZARET_PODMAN").unwrap_or_else(|_| "podman".to_owned()) }
    }
}

impl Podman {
    /// Podman as `program` instead of `$LAZARET_PODMAN` or `podman` (tests
    /// use a fake one).
    pub fn with_program(program: impl Into<String>) -> Podman {
        Podman { program: program.into() }
    }

    /// A `podman` command with a clean, explicit environment: podman's own
    /// needs only, never the agent profile's or proxy variables (D10).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.env_clear();
        command.envs(environment());
        command
    }

    pub fn program(&self) -> &str {
        &self.program
    }

    /// The value of `label` on a local image, `None` if the image or label is absent.
    pub fn image_label(&self, image: &str, label: &str) -> Option<String> {
        let format = format!("{{{{index .Labels \"{label}\"}}}}");
        let mut command = self.command();
        command.args(["image", "inspect", "--format", &format, image]);
        let output = output_bounded_blocking(command, PODMAN_QUERY, &format!("podman image inspect {image}")).ok()?;
        if !output.status.success() {
            return None;
        }
        let value = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (!value.is_empty() && value != "<no value>").then_some(value)
    }

    /// Whether the container exists and runs: `false` for one that stopped
    /// or does not exist, an error (with podman's message) when podman
    /// itself fails, so a broken podman is never taken for a dead container.
    pub fn container_running(&self, name: &str) -> crate::Result<bool> {
        let mut command = self.command();
        command.args(["container", "inspect", "--format", "{{.State.Running}}", name]);
        let output = output_bounded_blocking(command, PODMAN_QUERY, &format!("podman container inspect {name}"))?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim() == "true");
        }
        if String::from_utf8_lossy(&output.stderr).to_ascii_lowercase().contains("no such container") {
            return Ok(false);
        }
        crate::bail!("podman container inspect {name} failed: {}", explain(&output.stderr))
    }

    /// Whether a local image exists. Fails (with podman's message and, for
    /// a known state, its fix) when podman itself does not work, so a broken
    /// podman is never taken for a missing image.
    pub fn image_exists(&self, image: &str) -> crate::Result<bool> {
        let mut command = self.command();
        command.args(["image", "exists", image]);
        let output = output_bounded_blocking(command, PODMAN_QUERY, &format!("{} image exists {image}", self.program))?;
        // `podman image exists` exits 1, silently, for "no such image"; but
        // rootless podman that cannot set up its namespace exits 1 too, with
        // an error message.
        let silent = String::from_utf8_lossy(&output.stderr).lines().all(|line| line.trim().is_empty() || line.contains("level=warning"));
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) if silent => Ok(false),
            _ => crate::bail!("`{} image exists {image}` failed: {}", self.program, explain(&output.stderr)),
        }
    }
}

/// Podman's error output, trimmed, with the one fix Lazaret knows for a
/// state podman cannot leave by itself.
pub fn explain(stderr: &[u8]) -> String {
    let message = String::from_utf8_lossy(stderr).trim().to_owned();
    match hint(&message) {
        Some(hint) => format!("{message}\n{hint}"),
        None => message,
    }
}

/// The fix for a podman state that podman's own message leaves unclear.
pub fn hint(message: &str) -> Option<&'static str> {
    // Rootless podman keeps its user namespace alive in a pause process. When
    // every podman process was killed but its runtime directory survived (no
    // reboot, or /run kept across one), it records containers as running
    // whose conmon is gone and refuses every command.
    (message.contains("invalid internal status") && message.contains("pause process")).then_some(
        "rootless podman lost its pause process and still records containers as running whose processes are gone \
         (its processes were killed while its runtime directory stayed); run `podman system migrate` as this user: \
         it marks them stopped, and the next podman command starts a new pause process",
    )
}

/// The only host variables podman gets (D10): what podman itself needs.
pub fn environment() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "TMPDIR",
        "LANG",
    ]
    .into_iter()
    .filter_map(|name| std::env::var_os(name).map(|value| (std::ffi::OsString::from(name), value)))
    .collect()
}

/// `--ulimit` values at or below this host's hard limits: podman's defaults
/// exceed the hard limits of machines such as the CI's (20000 open files) and
/// every start would fail with `setrlimit ...: Operation not permitted`.
/// For the Network Sidecar; a sandbox's `nproc` is its process limit.
pub fn ulimit_arguments() -> Vec<String> {
    vec![nofile_argument(), ulimit_argument("nproc", nix::sys::resource::Resource::RLIMIT_NPROC, 16_384)]
}

/// `--ulimit=nofile=…` at or below this host's hard limit.
pub fn nofile_argument() -> String {
    let value = nofile_limit();
    format!("--ulimit=nofile={value}:{value}")
}

/// The open-file limit a sandbox gets: 65,536 or this host's hard limit if
/// lower. runsc's own processes (sentry, gofer) run with it too, so it is
/// their budget of host file descriptors.
pub fn nofile_limit() -> u64 {
    ulimit_value(nix::sys::resource::Resource::RLIMIT_NOFILE, 65_536)
}

fn ulimit_argument(name: &str, resource: nix::sys::resource::Resource, preferred: u64) -> String {
    let value = ulimit_value(resource, preferred);
    format!("--ulimit={name}={value}:{value}")
}

fn ulimit_value(resource: nix::sys::resource::Resource, preferred: u64) -> u64 {
    let hard = nix::sys::resource::getrlimit(resource).map(|(_, hard)| hard).unwrap_or(1024);
    preferred.min(hard)
}

/// Flags that put a container under gVisor on these machines: the runsc
/// runtime without netstack (D5), no host proxy variables (D10), and the
/// resource limits of `resource_limits` (with `ignore-cgroups` where host cgroups
/// cannot be used, as rootless here: see `crate::resource_limits`).
///
/// `sidecar`: the container whose network namespace the sandbox joins (with
/// runsc's hostinet, D5); without one the sandbox has no network at all.
pub fn runsc_arguments(runsc: &std::path::Path, sidecar: Option<&str>, limits: &crate::resource_limits::Plan) -> Vec<String> {
    let mut arguments: Vec<String> = vec![format!("--runtime={}", runsc.display()), "--http-proxy=false".into()];
    match sidecar {
        Some(name) => arguments.extend([format!("--network=container:{name}"), "--runtime-flag=network=host".to_owned()]),
        None => arguments.extend(["--network=none".to_owned(), "--runtime-flag=network=none".to_owned()]),
    }
    arguments.push(nofile_argument());
    arguments.extend(limits.arguments.iter().cloned());
    arguments
}
