//! The agent sandbox container: the `podman run` arguments that put it under
//! gVisor on these machines, and its start and removal.

use std::ffi::OsString;

use lazaret_core::config::ResolvedProfile;

use crate::bail;
use crate::error::{Context, Result};
use crate::podman::Podman;

/// Label carrying the domain hash on every container Lazaret starts.
pub const DOMAIN_LABEL: &str = "io.lazaret.domain";

/// A `podman run` invocation: its arguments, and the environment podman
/// needs to fill `--env NAME` (values never appear on a command line).
pub struct RunInvocation {
    pub arguments: Vec<OsString>,
    pub environment: Vec<(String, String)>,
}

/// `workspace_mounts` are the podman arguments that provide `/workspace`
/// (the agent's checkout, see `git_sentry`, or the workspace itself);
/// `command` the sandbox's main process (`sleep infinity` when empty; the
/// agent's repository is seeded by its own, `GitLayout::container_command`);
/// `runsc` is the runtime `crate::runsc::select` chose; `limits` how the
/// profile's resource limits are enforced (`crate::limits::plan`).
pub fn run_arguments(
    resolved: &ResolvedProfile,
    runsc: &std::path::Path,
    workspace_mounts: &[String],
    command: &[String],
    sidecar: Option<&str>,
    limits: &crate::limits::Plan,
) -> Result<RunInvocation> {
    let domain = &resolved.domain;
    let mut arguments: Vec<OsString> = Vec::new();
    let mut push = |argument: String| arguments.push(OsString::from(argument));
    push("run".into());
    push("--detach".into());
    // A container of this name can only be a leftover of a coordinator that
    // was killed: replace it.
    push("--replace".into());
    push(format!("--name={}", domain.container_name));
    push(format!("--label={DOMAIN_LABEL}={}", domain.domain_hash));
    push(format!("--label=io.lazaret.profile={}", resolved.profile));
    push(format!("--hostname=lazaret-{}", resolved.profile));
    for argument in runtime_arguments(runsc, sidecar, limits) {
        push(argument);
    }
    push("--workdir=/workspace".into());
    for mount in workspace_mounts {
        push(mount.clone());
    }
    for volume in &resolved.volumes {
        if !volume.host_exists {
            if volume.host.starts_with(&resolved.data_root) {
                crate::private_dirs::ensure_private_dir(&volume.host)?;
            } else {
                bail!("volume host path {} does not exist; create it or change the profile", volume.host.display());
            }
        }
        push(format!("--volume={}", volume.podman_argument()));
    }
    let mut environment = Vec::new();
    for (name, value) in &resolved.env {
        push(format!("--env={name}"));
        environment.push((name.clone(), value.value.clone()));
    }
    push(resolved.image.clone());
    if command.is_empty() {
        push("sleep".into());
        push("infinity".into());
    } else {
        for argument in command {
            push(argument.clone());
        }
    }
    Ok(RunInvocation { arguments, environment })
}

/// How every agent sandbox runs, whatever its profile: gVisor with the flags
/// these machines need, podman's init (catatonit) as PID 1, no privilege
/// gain, and the resource limits. `lazaret doctor` starts its probe sandbox
/// with exactly these.
pub fn runtime_arguments(runsc: &std::path::Path, sidecar: Option<&str>, limits: &crate::limits::Plan) -> Vec<String> {
    let mut arguments = crate::podman::runsc_arguments(runsc, sidecar, limits);
    arguments.push("--init".into());
    arguments.push("--security-opt=no-new-privileges".into());
    arguments
}

/// The runsc flag that lets the sandbox connect to the one host socket it
/// gets, the Escalation Socket (D10).
pub const HOST_UDS_ARGUMENT: &str = "--runtime-flag=host-uds=open";

/// Starts the sandbox; fails with podman's message.
pub async fn start(
    podman: &Podman,
    resolved: &ResolvedProfile,
    runsc: &std::path::Path,
    workspace_mounts: &[String],
    command: &[String],
    sidecar: Option<&str>,
    limits: &crate::limits::Plan,
) -> Result<()> {
    let invocation = run_arguments(resolved, runsc, workspace_mounts, command, sidecar, limits)?;
    let mut command = tokio::process::Command::from(podman.command());
    command.args(&invocation.arguments).envs(invocation.environment).stdin(std::process::Stdio::null());
    let output = command.output().await.context("cannot run podman")?;
    if !output.status.success() {
        bail!("podman could not start the sandbox: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

/// Removes the container (any state) if it exists.
///
/// A sandbox whose sentry was just killed (by the host OOM killer at the
/// memory limit) can still look running to podman for a moment: `rm
/// --force` then fails to signal it ("container state improper"). Once
/// podman has seen it exit, a retry removes it; so a failure is retried a
/// few times before it is reported.
pub async fn remove(podman: &Podman, name: &str) -> Result<()> {
    const ATTEMPTS: u32 = 6;
    let mut message = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let mut command = tokio::process::Command::from(podman.command());
        command.args(["rm", "--force", "--time=0", "--ignore", name]).stdin(std::process::Stdio::null());
        let output = command.output().await.context("cannot run podman")?;
        if output.status.success() {
            return Ok(());
        }
        message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        tracing::debug!(attempt, %message, "podman rm failed; retrying");
    }
    bail!("podman could not remove {name}: {message}")
}

/// The image's default command (`CMD`), for sessions that name none.
pub async fn default_command(podman: &Podman, image: &str) -> Vec<String> {
    let mut command = tokio::process::Command::from(podman.command());
    command.args(["image", "inspect", "--format", "{{json .Config.Cmd}}", image]).stdin(std::process::Stdio::null());
    let parsed = match command.output().await {
        Ok(output) if output.status.success() => serde_json::from_slice::<Option<Vec<String>>>(&output.stdout).ok().flatten(),
        _ => None,
    };
    parsed.filter(|cmd| !cmd.is_empty()).unwrap_or_else(|| vec!["/bin/sh".to_owned()])
}

/// How long the agent's repository may take to be seeded at start (a first
/// checkout of a large repository included).
pub const SEED_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Waits for the seed that the sandbox's main process runs
/// (`GitLayout::container_command`): its result file, checked every 10 ms;
/// every 2 s also that the sandbox still runs.
pub async fn wait_for_seed(podman: &Podman, container: &str, layout: &crate::git_sentry::GitLayout) -> Result<()> {
    let started = std::time::Instant::now();
    let mut next_check = started + std::time::Duration::from_secs(2);
    loop {
        if layout.seed_result()?.is_some() {
            return Ok(());
        }
        let now = std::time::Instant::now();
        if now.duration_since(started) > SEED_LIMIT {
            bail!("the agent's repository was not set up within {} s", SEED_LIMIT.as_secs());
        }
        if now > next_check {
            let (podman, name) = (podman.clone(), container.to_owned());
            let running = tokio::task::spawn_blocking(move || podman.container_running(&name)).await.unwrap_or(false);
            // The result may have come just before the sandbox ended.
            if !running && layout.seed_result()?.is_none() {
                bail!("the sandbox stopped before the agent's repository was set up");
            }
            next_check = now + std::time::Duration::from_secs(2);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
