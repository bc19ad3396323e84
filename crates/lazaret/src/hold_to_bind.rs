//! Hold-to-Bind: the CLI side of
//! joining a domain. The first CLI to take the lockfile (the leader) starts
//! the Session Coordinator if its control socket is not live, waits for the
//! socket to bind (up to 60 s) and registers its session before releasing
//! the lock. The others (followers) block on the lock, release it at once and
//! connect. A domain that is tearing down answers "shutting down", and the
//! CLI starts over.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lazaret_coordinator::coordinator;
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_core::bounds;
use lazaret_core::config::ResolvedProfile;
use lazaret_protocol::{error_code, LazaretApiClient, RegisterResult};
use lazaret_rpc::client::Client;
use lazaret_rpc::Error as RpcError;

const ATTEMPTS: usize = 6;

pub struct Joined {
    /// The typed client of the control connection that owns the session
    /// (closing it ends the session).
    pub client: Client,
    pub registration: RegisterResult,
}

/// What the coordinator must be told to resolve the same domain.
pub struct CoordinatorLaunch<'a> {
    pub config_path: Option<&'a Path>,
    pub resolved: &'a ResolvedProfile,
    pub mode: lazaret_coordinator::WorkspaceMode,
    /// Run before a coordinator is started, never when joining a running
    /// one (the image check, notes about the host's working tree): a second
    /// session pays only for the join.
    pub prepare: &'a (dyn Fn() -> Result<()> + Sync),
}

pub async fn join(launch: &CoordinatorLaunch<'_>, session_id: &str, public_key: &str, command: &[String]) -> Result<Joined> {
    let domain = &launch.resolved.domain;
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let mut lock = DomainLock::open(&domain.lockfile)?;
        let leader = lock.try_lock()?;
        if leader {
            if !socket_is_live(&domain.control_socket).await {
                (launch.prepare)()?;
                let child = spawn_coordinator(launch)?;
                wait_for_socket(&domain.control_socket, child, &domain.domain_dir.join(coordinator::LOG_FILE)).await?;
            }
        } else {
            lock = tokio::task::spawn_blocking(move || {
                let mut lock = lock;
                lock.lock().map(|()| lock)
            })
            .await
            .context("lock task failed")??;
            lock.unlock();
        }
        // The leader registers while still holding the lock, so the
        // coordinator cannot decide to tear down in between.
        let result = register(&domain.control_socket, session_id, public_key, command).await;
        if leader {
            lock.unlock();
        }
        match result {
            Ok(joined) => return Ok(joined),
            Err(error) if is_retryable(&error) => {
                tracing::info!(%error, "domain not joinable yet; retrying");
                last_error = Some(error);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(RpcError::Remote { message, .. }) => bail!("{message}"),
            Err(error) => return Err(error.into()),
        }
    }
    Err(anyhow::anyhow!("could not join the domain after {ATTEMPTS} attempts: {}", last_error.map(|e| e.to_string()).unwrap_or_default()))
}

fn is_retryable(error: &RpcError) -> bool {
    match error {
        RpcError::Connect { .. } | RpcError::Closed => true,
        RpcError::Remote { code, .. } => *code == error_code::SHUTTING_DOWN,
        _ => false,
    }
}

async fn register(socket: &Path, session_id: &str, public_key: &str, command: &[String]) -> Result<Joined, RpcError> {
    // This connection owns the session; `session/register` waits for the
    // sandbox to run, the longest call of all.
    let client = lazaret_rpc::client::connect(socket, bounds::REGISTER_CALL).await?;
    let registration = client.session_register(
        session_id.to_owned(),
        std::process::id(),
        Some(command.to_vec()),
        Some("cli".to_owned()),
        Some(public_key.to_owned()),
    );
    let registration = lazaret_rpc::client::within("session_register", bounds::REGISTER_CALL, registration).await?;
    Ok(Joined { client, registration })
}

/// A socket is live when something accepts on it. A file left by a killed
/// coordinator refuses connections.
pub async fn socket_is_live(path: &Path) -> bool {
    tokio::net::UnixStream::connect(path).await.is_ok()
}

/// Re-executes this binary as the domain's coordinator, detached from our
/// session and terminal with `setsid`, its output going to the domain log.
fn spawn_coordinator(launch: &CoordinatorLaunch<'_>) -> Result<Child> {
    let domain = &launch.resolved.domain;
    lazaret_coordinator::private_dirs::ensure_private_dir(&domain.domain_dir)?;
    let log_path = domain.domain_dir.join(coordinator::LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let executable = std::env::current_exe().context("cannot find the lazaret executable")?;
    let mut command = Command::new(executable);
    if let Some(config) = launch.config_path {
        command.arg("--config").arg(std::path::absolute(config).context("cannot resolve the configuration path")?);
    }
    // Its own directory, not the user's: podman's conmon writes an `oom`
    // file into its working directory when the sandbox hits its memory
    // limit, which landed in the user's current directory.
    command.current_dir(&domain.domain_dir);
    command
        .arg("coordinator")
        .arg("--profile")
        .arg(&launch.resolved.profile)
        .arg("--workspace")
        .arg(&launch.resolved.workspace)
        .args(if launch.mode == lazaret_coordinator::WorkspaceMode::Direct { &["--mount-workspace"][..] } else { &[][..] })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    crate::process::detach_into_new_session(&mut command);
    let child = command.spawn().context("cannot start the Session Coordinator")?;
    tracing::info!(pid = child.id(), "coordinator started");
    Ok(child)
}

async fn wait_for_socket(socket: &Path, mut child: Child, log_path: &Path) -> Result<()> {
    let started = Instant::now();
    loop {
        if socket_is_live(socket).await {
            // Reap the coordinator when it eventually exits, so that it never
            // lingers as a zombie of this CLI.
            std::thread::spawn(move || child.wait());
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("the Session Coordinator exited ({status}) before binding {}:\n{}", socket.display(), log_tail(log_path));
        }
        if started.elapsed() > bounds::COORDINATOR_BIND {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the Session Coordinator did not bind {} within {} s:\n{}",
                socket.display(),
                bounds::COORDINATOR_BIND.as_secs(),
                log_tail(log_path)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}
