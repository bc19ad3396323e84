//! The Session Coordinator: one background process per domain (the
//! `lazaret` binary re-executed, detached with `setsid`). It owns the
//! sandbox container, the control socket and the state store, serves the
//! JSON-RPC API, counts live sessions and tears everything down when the
//! count reaches zero or on SIGINT/SIGTERM/SIGHUP (NFR-2).

pub mod api;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use api::{Api, Domain};
use lazaret_core::bounds;
use lazaret_core::config::ResolvedProfile;
use lazaret_core::domain::DomainResources;
use lazaret_protocol::{ContainerState, Event, LazaretApiServer};
use lazaret_rpc::server::{self, ConnectionEvent};
use lazaret_store::Store;
use tokio::signal::unix::{signal, SignalKind};

use crate::backend::{BackendDomain, EscalationFiles, SandboxBackend, WorkspaceMode};
use crate::domain_lock::DomainLock;
use crate::error::{Context, Result};
use crate::git_sentry::{GitLayout, HostRepository};

/// File name of the state store inside the Domain Root.
pub const STORE_FILE: &str = "state.redb";

/// The runsc probes this domain remembers (`runsc::select_remembered`).
pub use crate::backend::local::RUNSC_PROBES_FILE;
/// File name of the coordinator's log inside the Domain Root.
pub const LOG_FILE: &str = "coordinator.log";

/// Runs the coordinator of `resolved` until teardown. Blocking.
pub fn run(resolved: ResolvedProfile, mode: WorkspaceMode, reloader: api::EgressReloader) -> Result<u8> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("cannot start the async runtime")?;
    let (status, lock) = runtime.block_on(serve(resolved, mode, reloader))?;
    // Every task (and with them the state store) goes with the runtime; only
    // then is the domain lock released, so that whoever takes it next finds
    // the store closed.
    drop(runtime);
    drop(lock);
    Ok(status)
}

/// Prepares `/workspace` for the sandbox: the git layout, or the direct mount.
fn prepare_workspace(resolved: &ResolvedProfile, mode: WorkspaceMode) -> Result<(Option<GitLayout>, Vec<String>)> {
    match mode {
        WorkspaceMode::Direct => Ok((None, vec![format!("--volume={}:/workspace:rw", resolved.workspace.display())])),
        WorkspaceMode::AgentBranch => {
            let host = HostRepository::discover(&resolved.workspace)?
                .with_context(|| format!("{} is not a git repository", resolved.workspace.display()))?;
            let layout = GitLayout::new(resolved, host);
            layout.prepare()?;
            let mounts = layout.podman_arguments();
            Ok((Some(layout), mounts))
        }
    }
}

async fn serve(resolved: ResolvedProfile, mode: WorkspaceMode, reloader: api::EgressReloader) -> Result<(u8, Option<DomainLock>)> {
    let mut running = start_up(resolved, mode, reloader).await?;
    let reason = wait_for_teardown(&running.domain, &mut running.connection_events).await?;
    Ok((0, tear_down(running, reason).await))
}

/// What a serving coordinator holds until teardown.
struct Running {
    domain: Arc<Domain>,
    connection_events: tokio::sync::mpsc::UnboundedReceiver<ConnectionEvent>,
    start_task: tokio::task::JoinHandle<()>,
    escalation: Option<(Arc<crate::escalation::server::EscalationServer>, tokio::task::JoinHandle<()>)>,
    server_task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Start-up, one pipeline whatever the backend, in named stages: the
/// backend (`backend`), the domain's directories (`domain root`), its store
/// and workspace beside the backend's probes (`open`), the Escalation
/// Socket (`escalation`), what the sandbox needs before the domain serves
/// (`provision`: a local State Anchor and Network Sidecar), the control
/// socket (`control socket`), then in the background the sandbox itself
/// (`sandbox`). Until the control socket is bound, a failure removes what
/// this start created (`StartupCleanup`).
async fn start_up(resolved: ResolvedProfile, mode: WorkspaceMode, reloader: api::EgressReloader) -> Result<Running> {
    let resources = resolved.domain.clone();
    let backend = stage("backend", async { SandboxBackend::new(&resolved, mode) }).await?;
    stage("domain root", async { prepare_domain_root(&resources) }).await?;
    backend.clear_leftovers(&resources);
    let mut startup = StartupCleanup { resources: resources.clone(), domain: None, armed: true };
    let domain = stage("open", open_domain(resolved, mode, backend)).await?;
    startup.domain = Some(domain.clone());

    // A coordinator killed with SIGKILL leaves its socket file and maybe its
    // container behind; the CLI that started us found the socket dead. The
    // container is replaced by `podman run --replace`.
    crate::cleanup::remove_file(&resources.control_socket);

    let escalation = stage("escalation", async {
        if domain.resolved.escalation_enabled {
            prepare_escalation(&domain.resolved).map(Some)
        } else {
            Ok(None)
        }
    })
    .await?;
    stage("provision", domain.backend.provision(&domain, escalation.as_ref().map(|prepared| &prepared.files))).await?;
    domain.set_egress_reloader(reloader);

    let (server_task, connection_events) = stage("control socket", async {
        let listener = bind_private(&resources.control_socket)?;
        tracing::info!(socket = %resources.control_socket.display(), "control socket bound");
        let (connection_events_tx, connection_events) = tokio::sync::mpsc::unbounded_channel();
        let methods = Api(domain.clone()).into_rpc();
        Ok((tokio::spawn(server::serve(listener, methods.into(), server::Config::default(), connection_events_tx)), connection_events))
    })
    .await?;
    startup.disarm();

    // (aborted at teardown; the loops it spawns are ended with the runtime)
    let files = escalation.as_ref().map(|prepared| prepared.files.clone());
    let start_task = {
        let domain = domain.clone();
        tokio::spawn(async move { domain.backend.start(&domain, files).await })
    };
    let escalation = escalation.map(|prepared| {
        let server = prepared.server.clone();
        (server, tokio::spawn(crate::escalation::server::serve(prepared.listener, prepared.server, domain.clone())))
    });
    Ok(Running { domain, connection_events, start_task, escalation, server_task })
}

/// One stage of the start-up: its failure says which stage it was in the log.
async fn stage<T>(name: &'static str, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let result = work.await;
    if let Err(error) = &result {
        tracing::error!(stage = name, error = %error.chained(), "start-up failed");
    }
    result
}

/// The Domain Root and socket directories (private).
fn prepare_domain_root(resources: &DomainResources) -> Result<()> {
    crate::private_dirs::ensure_private_dir(&resources.domain_dir)?;
    if let Some(socket_root) = resources.socket_dir.parent() {
        crate::private_dirs::ensure_private_dir(socket_root)?;
    }
    crate::private_dirs::ensure_private_dir(&resources.socket_dir)?;
    Ok(())
}

/// The domain with its store and workspace, opened beside the backend's
/// probes (a local sandbox's runsc is chosen meanwhile).
async fn open_domain(resolved: ResolvedProfile, mode: WorkspaceMode, backend: SandboxBackend) -> Result<Arc<Domain>> {
    let domain_dir = resolved.domain.domain_dir.clone();
    let probe = backend.probe(&resolved);
    let store_path = domain_dir.join(STORE_FILE);
    let store = tokio::task::spawn_blocking(move || Store::open(&store_path)).await.context("store task failed")??;
    let prepare_resolved = resolved.clone();
    let (git, workspace_mounts) =
        tokio::task::spawn_blocking(move || prepare_workspace(&prepare_resolved, mode)).await.context("workspace task failed")??;
    backend.prepare(probe, git.as_ref(), workspace_mounts).await?;
    Ok(Arc::new(Domain::new(resolved, Arc::new(store), git, backend)))
}

/// The main loop: serves connection events until the domain is idle (its
/// last session gone, or none registered in time), a shutdown is requested,
/// or a signal arrives. Returns why.
async fn wait_for_teardown(
    domain: &Arc<Domain>,
    connection_events: &mut tokio::sync::mpsc::UnboundedReceiver<ConnectionEvent>,
) -> Result<&'static str> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let first_session_deadline = tokio::time::sleep(bounds::FIRST_SESSION);
    tokio::pin!(first_session_deadline);
    Ok(loop {
        tokio::select! {
            Some(event) = connection_events.recv() => {
                if let ConnectionEvent::Closed { conn_id } = event {
                    domain.connection_closed(conn_id).await;
                    crate::memory::release_free_memory();
                }
            }
            _ = domain.idle.notified() => {
                if domain.live_count() == 0 && try_begin_idle_shutdown(domain).await {
                    break "no sessions left";
                }
            }
            _ = &mut first_session_deadline, if !domain.ever_registered() => {
                if domain.live_count() == 0 && try_begin_idle_shutdown(domain).await {
                    break "no session registered";
                }
            }
            _ = domain.shutdown_requested.notified() => break "shutdown requested",
            _ = terminate.recv() => break "SIGTERM",
            _ = interrupt.recv() => break "SIGINT",
            _ = hangup.recv() => break "SIGHUP",
        }
    })
}

/// Teardown: no new session joins; the domain lock is taken (so that no new
/// coordinator starts a container of the same name before ours is gone),
/// the agent's last commits are exported, then the containers, mounts and
/// files go. Every step is bounded and logs its failure, so teardown always
/// ends and hands the lock back for `run` to release.
async fn tear_down(running: Running, reason: &'static str) -> Option<DomainLock> {
    let Running { domain, start_task, escalation, server_task, .. } = running;
    let resources = domain.resolved.domain.clone();
    tracing::info!(reason, "tearing down");
    // No new session joins a sandbox that is going; what its sessions left
    // running is ended once it is gone.
    domain.backend.close_doors(&resources);
    domain.begin_shutdown();
    domain.emit(Event::ShuttingDown { reason: reason.to_owned() });
    let lock = lock_for_teardown(&resources.lockfile).await;
    crate::cleanup::remove_file(&resources.control_socket);
    start_task.abort();
    // The agent's last commits reach the host before the sandbox goes.
    domain.export_agent_branch().await;
    domain.set_container_state(ContainerState::Stopping, None);
    domain.backend.tear_down(&domain.resolved).await;
    if let Some((server, task)) = escalation {
        // Refusals counted in the last, unfinished window are recorded too.
        server.write_remaining_refusals(&*domain).await;
        task.abort();
    }
    crate::cleanup::remove_file(&resources.escalation_socket);
    crate::cleanup::remove_dir_all(&crate::escalation::trust_anchor::credentials_directory(&resources.socket_dir));
    crate::cleanup::remove_dir(&resources.socket_dir);
    server_task.abort();
    tracing::info!("teardown complete");
    lock
}

/// Removes the files of a start that failed before the domain was serving,
/// and what its backend made (a mounted State Anchor).
struct StartupCleanup {
    resources: lazaret_core::domain::DomainResources,
    /// The domain, once opened: its backend undoes its part.
    domain: Option<Arc<Domain>>,
    armed: bool,
}

impl StartupCleanup {
    /// The domain serves: nothing is undone any more.
    fn disarm(&mut self) {
        self.armed = false;
        self.domain = None;
    }
}

impl Drop for StartupCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let resources = &self.resources;
        if let Some(domain) = self.domain.take() {
            domain.backend.abort_start();
        }
        crate::cleanup::remove_file(&resources.escalation_socket);
        crate::cleanup::remove_file(&resources.control_socket);
        crate::cleanup::remove_dir_all(&resources.socket_dir.join("sidecar"));
        crate::cleanup::remove_dir_all(&resources.socket_dir.join("sandbox"));
        crate::cleanup::remove_dir_all(&crate::escalation::trust_anchor::credentials_directory(&resources.socket_dir));
        crate::cleanup::remove_dir(&resources.socket_dir);
    }
}

/// The Escalation Socket and what the sandbox needs to use it.
struct PreparedEscalation {
    listener: tokio::net::UnixListener,
    server: Arc<crate::escalation::server::EscalationServer>,
    /// What the backend gives the sandbox (mounts; a pod gets them over exec).
    files: EscalationFiles,
}

/// Trust Anchor, client credentials in the domain's private socket
/// directory, and the socket.
fn prepare_escalation(resolved: &ResolvedProfile) -> Result<PreparedEscalation> {
    use crate::escalation::trust_anchor::{self, TrustAnchor};
    let helper = crate::helper_binaries::find("lazaret-escalate")
        .filter(|path| crate::helper_binaries::linkage(path).is_ok_and(|linkage| linkage == crate::helper_binaries::Linkage::Static))
        .context("the static lazaret-escalate binary was not found (build it: scripts/build), or set [escalation] enabled = false")?;
    let domain = &resolved.domain;
    let anchor = TrustAnchor::generate()?;
    let sandbox_id = lazaret_core::ids::random_hex(8)?;
    let identity = trust_anchor::sandbox_identity(&resolved.profile, &domain.domain_hash, &sandbox_id);
    let credentials = anchor.client_credentials(&identity)?;
    let tls_dir = trust_anchor::credentials_directory(&domain.socket_dir);
    trust_anchor::write_credentials(&tls_dir, anchor.ca_pem(), &credentials)?;
    crate::cleanup::remove_file(&domain.escalation_socket);
    let listener = bind_private(&domain.escalation_socket)?;
    let server = crate::escalation::server::EscalationServer::new(
        tokio_rustls::TlsAcceptor::from(anchor.server_config()?),
        identity,
        crate::escalation::EscalationSettings::of(resolved),
    );
    let bundle = tls_dir.join(trust_anchor::bundle_location().1);
    let files = EscalationFiles { client: helper, tls_dir, bundle, socket: domain.escalation_socket.clone() };
    Ok(PreparedEscalation { listener, server: Arc::new(server), files })
}

/// Takes the domain lock, then re-checks that no session arrived meanwhile.
/// A CLI leader holds the lock while it registers, so this cannot race it.
async fn try_begin_idle_shutdown(domain: &Arc<Domain>) -> bool {
    let lock = lock_for_teardown(&domain.resolved.domain.lockfile).await;
    let idle = domain.begin_shutdown_if_idle();
    if let Some(mut lock) = lock {
        lock.unlock();
    }
    idle
}

/// The domain lock, waited for up to [`bounds::TEARDOWN_LOCK`].
async fn lock_for_teardown(path: &Path) -> Option<DomainLock> {
    let mut lock = DomainLock::open(path).ok()?;
    let deadline = tokio::time::Instant::now() + bounds::TEARDOWN_LOCK;
    loop {
        if lock.try_lock().unwrap_or(false) {
            return Some(lock);
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("teardown proceeds without the domain lock");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Binds a Unix socket that only its owner can connect to. Its directory is
/// made (or checked to be) ours and 0700 first, so no other user can reach
/// the socket even in the instant before the chmod to 0600. The process
/// umask is never changed: other threads create files meanwhile (attack
/// review finding 12).
fn bind_private(path: &Path) -> Result<tokio::net::UnixListener> {
    let dir = path.parent().with_context(|| format!("{} has no parent directory", path.display()))?;
    crate::private_dirs::ensure_private_dir(dir)?;
    let listener = tokio::net::UnixListener::bind(path).with_context(|| format!("cannot bind the socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The backend sees its domain through [`BackendDomain`] only, as the
/// Escalation Socket does through `EscalationDomain`: neither imports the
/// coordinator.
impl BackendDomain for Domain {
    fn resolved(&self) -> &ResolvedProfile {
        &self.resolved
    }
    fn git(&self) -> Option<&GitLayout> {
        self.git.as_ref()
    }
    fn backend(&self) -> &SandboxBackend {
        &self.backend
    }
    fn is_shutting_down(&self) -> bool {
        Domain::is_shutting_down(self)
    }
    fn set_container_state(&self, state: ContainerState, message: Option<String>) {
        Domain::set_container_state(self, state, message);
    }
    fn set_default_command(&self, command: Vec<String>) {
        Domain::set_default_command(self, command);
    }
    async fn export_agent_branch(&self) {
        Domain::export_agent_branch(self).await;
    }
    async fn start_network_requests(&self) -> Result<()> {
        Domain::start_network_requests(self).await
    }
    async fn expire_network_requests(&self) {
        Domain::expire_network_requests(self).await;
    }
    async fn sidecar_event(&self, event: lazaret_protocol::sidecar::SidecarEvent) {
        Domain::sidecar_event(self, event).await;
    }
    fn network_failed(&self, message: String) {
        Domain::network_failed(self, message);
    }
    fn network_restarting(&self, message: String) {
        Domain::network_restarting(self, message);
    }
    async fn network_restored(&self) -> Result<()> {
        Domain::network_restored(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current_umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status.lines().find(|line| line.starts_with("Umask:")).expect("Umask line");
        u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).expect("octal")
    }

    /// Finding 12: the old `bind_private` set a 0077 umask around `bind`,
    /// for the whole process, while other threads ran. Another thread
    /// watches the umask during many binds and must never see it change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn binding_a_private_socket_leaves_the_process_umask_alone() {
        let before = current_umask();
        let dir = tempfile::tempdir().expect("tempdir");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    seen.insert(current_umask());
                }
                seen
            })
        };
        for index in 0..2000 {
            let path = dir.path().join(format!("s{index}.sock"));
            let _listener = bind_private(&path).expect("bind");
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::remove_file(&path).expect("remove");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = watcher.join().expect("watcher");
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![before], "the umask never changed");
        let dir_mode = std::fs::metadata(dir.path()).expect("stat").permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700, "the socket's directory is private");
    }
}
