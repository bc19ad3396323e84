//! The Session Coordinator: one background process per domain (the
//! `lazaret` binary re-executed, detached with `setsid`). It owns the
//! sandbox container, the control socket and the state store, serves the
//! JSON-RPC API, counts live sessions and tears everything down when the
//! count reaches zero or on SIGINT/SIGTERM/SIGHUP (NFR-2).

pub mod api;
pub mod cluster;
pub mod sandbox;

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

use crate::domain_lock::DomainLock;
use crate::error::{Context, Result};
use crate::exec_target::ExecTarget;
use crate::git_sentry::{self, GitLayout, HostRepository};
use crate::podman::Podman;

/// File name of the state store inside the Domain Root.
pub const STORE_FILE: &str = "state.redb";

/// The runsc probes this domain remembers (`runsc::select_remembered`).
pub const RUNSC_PROBES_FILE: &str = "runsc-probes.json";
/// File name of the coordinator's log inside the Domain Root.
pub const LOG_FILE: &str = "coordinator.log";

/// What the sandbox sees at `/workspace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceMode {
    /// The agent's own checkout of `lazaret/agent-<profile>` (git_sentry).
    AgentBranch,
    /// The workspace itself, read-write: only for directories that are not
    /// git repositories, on the user's explicit request.
    Direct,
}

/// Forwards the Network Sidecar's events to the domain, in order. When the
/// stream ends the sidecar has stopped (issue 33 finding 5: nobody noticed):
/// that is a `networkFailed` event and the domain's status; its supervisor
/// (the container's PID 1) starts it again, and once its control socket
/// answers it gets the domain's policy and protection back
/// (`networkRestored`). If the container itself is gone, so is the
/// network namespace the sandbox shares: the failure stays until the domain
/// starts anew. Aborted at teardown.
async fn watch_sidecar(domain: Arc<Domain>, started: crate::network::StartedSidecar, podman: Podman) {
    let sidecar = domain.resolved.domain.sidecar_name.clone();
    let mut events = match crate::network::SidecarEvents::connect(&started.socket).await {
        Ok(events) => events,
        Err(error) => return domain.network_failed(format!("cannot watch the Network Sidecar: {}", error.chained())),
    };
    loop {
        let ended = async {
            while let Some(event) = events.next().await? {
                domain.sidecar_event(event).await;
            }
            Ok::<(), crate::Error>(())
        };
        let why = match ended.await {
            Ok(()) => "its event stream ended".to_owned(),
            Err(error) => error.chained(),
        };
        let name = sidecar.clone();
        let podman_for_check = podman.clone();
        // A podman that cannot say counts as alive: the restart below has its
        // own deadline, and says so if the sidecar does not come back.
        let alive = match tokio::task::spawn_blocking(move || podman_for_check.container_running(&name)).await {
            Ok(Ok(alive)) => alive,
            Ok(Err(error)) => {
                tracing::warn!(error = %error.chained(), "cannot tell whether the Network Sidecar's container runs");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "cannot tell whether the Network Sidecar's container runs");
                true
            }
        };
        if !alive {
            return domain.network_failed(format!(
                "the Network Sidecar {sidecar} is gone ({why}), and with it the sandbox's network: start the domain anew"
            ));
        }
        domain.network_restarting(format!("the Network Sidecar stopped ({why}); it is being started again"));
        let deadline = std::time::Instant::now() + bounds::SIDECAR_RETURN;
        events = loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            match crate::network::SidecarEvents::connect(&started.socket).await {
                Ok(events) => break events,
                Err(_) if std::time::Instant::now() < deadline => continue,
                Err(error) => {
                    return domain.network_failed(format!(
                        "the Network Sidecar did not come back within {} s: {}",
                        bounds::SIDECAR_RETURN.as_secs(),
                        error.chained()
                    ))
                }
            }
        };
        let protection = crate::network::protection_now(&started.fixed).unwrap_or_else(|| started.protection.clone());
        if let Err(error) = domain.network_restored(protection.request(), &started.credentials).await {
            return domain.network_failed(format!("the Network Sidecar came back but refused the domain's policy: {error}"));
        }
    }
}

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
    let mut running = match resolved.backend.clone() {
        lazaret_core::config::Backend::Podman => start_up(resolved, mode, reloader).await?,
        lazaret_core::config::Backend::Kubernetes(backend) => start_up_on_cluster(resolved, mode, backend, reloader).await?,
    };
    let reason = wait_for_teardown(&running.domain, &mut running.connection_events).await?;
    Ok((0, tear_down(running, reason).await))
}

/// What a serving coordinator holds until teardown.
struct Running {
    domain: Arc<Domain>,
    podman: Podman,
    resources: DomainResources,
    connection_events: tokio::sync::mpsc::UnboundedReceiver<ConnectionEvent>,
    state_anchor: Option<Arc<crate::state_anchor::StateAnchor>>,
    /// The sidecar's watch and protection refresh, when there is a sidecar.
    sidecar_tasks: Option<[tokio::task::JoinHandle<()>; 3]>,
    start_task: tokio::task::JoinHandle<()>,
    escalation: Option<(Arc<crate::escalation::server::EscalationServer>, tokio::task::JoinHandle<()>)>,
    server_task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// A sandbox on a cluster: its backend and what its start left.
    cluster: Option<(lazaret_core::config::KubernetesBackend, Arc<cluster::Started>)>,
}

/// What the sandbox's start needs beyond the domain.
struct SandboxLaunch {
    runsc: crate::runsc::Selected,
    arguments: Vec<String>,
    sidecar_name: Option<String>,
    caching: sandbox::Caching,
}

/// Start-up: the domain's directories and store, the State Anchor, the
/// Network Sidecar, the control socket, then (in the background) the
/// sandbox and the Escalation Socket. Until the control socket is bound, a
/// failure removes what this start created (`StartupCleanup`).
async fn start_up(resolved: ResolvedProfile, mode: WorkspaceMode, reloader: api::EgressReloader) -> Result<Running> {
    let resources = resolved.domain.clone();
    prepare_domain_root(&resources)?;
    let mut startup = StartupCleanup { resources: resources.clone(), armed: true, state_anchor: None };
    let (domain, mut launch) = open_domain(resolved, mode).await?;
    let podman = Podman::default();

    // A coordinator killed with SIGKILL leaves its socket file and maybe its
    // container behind; the CLI that started us found the socket dead. The
    // container is replaced by `podman run --replace`.
    let _ = std::fs::remove_file(&resources.control_socket);

    let escalation = if domain.resolved.escalation_enabled { Some(prepare_escalation(&domain.resolved)?) } else { None };
    let state_anchor = mount_state_anchor(&domain, &podman).await?;
    if let Some(anchor) = &state_anchor {
        launch.arguments.extend(anchor.podman_arguments());
        // Until the domain serves, a failure unmounts it (finding 10).
        startup.state_anchor = Some(anchor.clone());
    }
    if let Some(prepared) = &escalation {
        launch.arguments.extend(prepared.podman_arguments.iter().cloned());
    }
    let sidecar_tasks = match start_sidecar(&domain, &podman).await? {
        Some(started) => {
            domain.set_sidecar_control(Some(started.socket.clone()));
            if let Err(error) = domain.start_network_requests().await {
                let _ = sandbox::remove(&podman, &resources.sidecar_name).await;
                return Err(crate::Error::Message(format!("network requests: {error}")));
            }
            launch.sidecar_name = Some(resources.sidecar_name.clone());
            // The sandbox's only resolver is the sidecar's.
            launch.arguments.push(crate::network::resolv_conf_argument(&resources.socket_dir.join("sandbox"))?);
            // Addresses and networks the host gains later are protected too.
            let refresh =
                tokio::spawn(crate::network::refresh_protection(started.socket.clone(), started.fixed.clone(), started.protection.clone()));
            // Refused DNS questions (and answered ones) from the sidecar's stream.
            let expiry = {
                let domain = domain.clone();
                tokio::spawn(async move { domain.expire_network_requests().await })
            };
            Some([tokio::spawn(watch_sidecar(domain.clone(), started, podman.clone())), refresh, expiry])
        }
        None => {
            domain.set_sidecar_control(None);
            None
        }
    };
    domain.set_egress_reloader(reloader);

    let listener = bind_private(&resources.control_socket)?;
    tracing::info!(socket = %resources.control_socket.display(), "control socket bound");
    let (connection_events_tx, connection_events) = tokio::sync::mpsc::unbounded_channel();
    let methods = Api(domain.clone()).into_rpc();
    let server_task = tokio::spawn(server::serve(listener, methods.into(), server::Config::default(), connection_events_tx));
    startup.armed = false;

    // (aborted at teardown; the loops it spawns are ended with the runtime)
    let start_task = tokio::spawn(start_sandbox(domain.clone(), podman.clone(), launch));
    let escalation = escalation.map(|prepared| {
        let server = prepared.server.clone();
        (server, tokio::spawn(crate::escalation::server::serve(prepared.listener, prepared.server, domain.clone())))
    });
    Ok(Running {
        domain,
        podman,
        resources,
        connection_events,
        state_anchor,
        sidecar_tasks,
        start_task,
        escalation,
        server_task,
        cluster: None,
    })
}

/// Start-up of a domain whose sandbox is a pod ([`cluster`]): the domain's
/// directories and store, the agent branch's host side, the Escalation
/// Socket, the control socket, then (in the background) the pod. Nothing
/// runs here but git and the coordinator: no State Anchor, no sidecar (the
/// cluster enforces the egress policy).
async fn start_up_on_cluster(
    resolved: ResolvedProfile,
    mode: WorkspaceMode,
    backend: lazaret_core::config::KubernetesBackend,
    reloader: api::EgressReloader,
) -> Result<Running> {
    if mode == WorkspaceMode::Direct {
        return Err(lazaret_core::Error::invalid(
            format!("profiles.{}.backend", resolved.profile),
            "a workspace cannot be mounted into a pod on a cluster (--mount-workspace): run in a git repository, whose agent branch \
             the pod gets"
                .to_owned(),
            None,
        )
        .into());
    }
    let resources = resolved.domain.clone();
    prepare_domain_root(&resources)?;
    let mut startup = StartupCleanup { resources: resources.clone(), armed: true, state_anchor: None };
    let store_path = resources.domain_dir.join(STORE_FILE);
    let store = tokio::task::spawn_blocking(move || Store::open(&store_path)).await.context("store task failed")??;
    let prepare_resolved = resolved.clone();
    let (git, _) =
        tokio::task::spawn_blocking(move || prepare_workspace(&prepare_resolved, mode)).await.context("workspace task failed")??;
    let domain = Arc::new(Domain::new(resolved, Arc::new(store), git));
    let _ = std::fs::remove_file(&resources.control_socket);
    let escalation = if domain.resolved.escalation_enabled { Some(prepare_escalation(&domain.resolved)?) } else { None };
    // `net reload` re-reads the allowlist into the policy object.
    domain.set_egress_reloader(reloader);
    let listener = bind_private(&resources.control_socket)?;
    tracing::info!(socket = %resources.control_socket.display(), namespace = %backend.namespace, "control socket bound");
    let (connection_events_tx, connection_events) = tokio::sync::mpsc::unbounded_channel();
    let methods = Api(domain.clone()).into_rpc();
    let server_task = tokio::spawn(server::serve(listener, methods.into(), server::Config::default(), connection_events_tx));
    startup.armed = false;

    let started = Arc::new(cluster::Started::default());
    let files = escalation.as_ref().map(|prepared| cluster::EscalationFiles {
        client: prepared.client.clone(),
        bundle: prepared.bundle.clone(),
        socket: resources.escalation_socket.clone(),
    });
    let start_task = tokio::spawn(cluster::start_sandbox(domain.clone(), backend.clone(), files, started.clone()));
    let escalation = escalation.map(|prepared| {
        let server = prepared.server.clone();
        (server, tokio::spawn(crate::escalation::server::serve(prepared.listener, prepared.server, domain.clone())))
    });
    Ok(Running {
        domain,
        podman: Podman::default(),
        resources,
        connection_events,
        state_anchor: None,
        sidecar_tasks: None,
        start_task,
        escalation,
        server_task,
        cluster: Some((backend, started)),
    })
}

/// The Domain Root and socket directories (private), and what sessions of
/// the previous sandbox left (no session of this domain runs before its
/// coordinator does): runsc execs, and the FIFOs of earlier versions.
fn prepare_domain_root(resources: &DomainResources) -> Result<()> {
    crate::private_dirs::ensure_private_dir(&resources.domain_dir)?;
    if let Some(socket_root) = resources.socket_dir.parent() {
        crate::private_dirs::ensure_private_dir(socket_root)?;
    }
    crate::private_dirs::ensure_private_dir(&resources.socket_dir)?;
    if let Some(previous) = ExecTarget::recorded(&resources.domain_dir) {
        previous.end_execs();
    }
    ExecTarget::remove(&resources.domain_dir);
    crate::exec_target::remove_session_fifos(&resources.socket_dir);
    Ok(())
}

/// The domain with its store and workspace, and the runsc and file caching
/// the sandbox will start with.
async fn open_domain(resolved: ResolvedProfile, mode: WorkspaceMode) -> Result<(Arc<Domain>, SandboxLaunch)> {
    let domain_dir = resolved.domain.domain_dir.clone();
    // Choosing runsc starts each candidate twice (`--version`, `flags`)
    // unless the domain remembers them: beside the store and workspace
    // preparation, not after them.
    let configured_runsc = resolved.runsc.clone();
    let remembered = domain_dir.join(RUNSC_PROBES_FILE);
    let runsc = tokio::task::spawn_blocking(move || crate::runsc::select_remembered(configured_runsc.as_deref(), &remembered));
    let store_path = domain_dir.join(STORE_FILE);
    let store = tokio::task::spawn_blocking(move || Store::open(&store_path)).await.context("store task failed")??;
    let prepare_resolved = resolved.clone();
    let (git, workspace_mounts) =
        tokio::task::spawn_blocking(move || prepare_workspace(&prepare_resolved, mode)).await.context("workspace task failed")??;
    let (runsc, runsc_features) = runsc.await.context("runsc task failed")??;
    tracing::info!(runsc = %runsc.path.display(), version = %runsc.version, why = runsc.why, "sandbox runtime");
    // The agent's checkout and git directory: only the sandbox writes them
    // while it runs, so gVisor may cache them (see `sandbox`).
    let caching = sandbox::Caching::new(
        Some(&runsc_features),
        git.as_ref().map(GitLayout::sandbox_only_sources).unwrap_or_default(),
        crate::podman::nofile_limit(),
    );
    tracing::info!(cached = ?caching.sandbox_only, dentry_cache = ?caching.dentry_cache, "gVisor file caching");
    let domain = Arc::new(Domain::new(resolved, Arc::new(store), git));
    Ok((domain, SandboxLaunch { runsc, arguments: workspace_mounts, sidecar_name: None, caching }))
}

/// The State Anchor: overlays for the persistent directories, mounted
/// before the sandbox starts. A leftover container of a killed coordinator
/// must go first: its runsc gofer still serves the old overlays.
async fn mount_state_anchor(domain: &Arc<Domain>, podman: &Podman) -> Result<Option<Arc<crate::state_anchor::StateAnchor>>> {
    if domain.resolved.persistent_dirs.is_empty() {
        return Ok(None);
    }
    let resources = &domain.resolved.domain;
    if let Err(error) = sandbox::remove(podman, &resources.container_name).await {
        tracing::warn!(error = %error.chained(), "could not remove a leftover container");
    }
    let (domain_dir, image, dirs) = (resources.domain_dir.clone(), domain.resolved.image.clone(), domain.resolved.persistent_dirs.clone());
    let anchor = tokio::task::spawn_blocking(move || crate::state_anchor::StateAnchor::mount(&domain_dir, &image, &dirs))
        .await
        .context("state anchor task failed")??;
    Ok(Some(Arc::new(anchor)))
}

/// The Network Sidecar, when anything may be reached at all; with an empty
/// allowlist the sandbox simply has no network. A failed start removes
/// what podman made.
async fn start_sidecar(domain: &Arc<Domain>, podman: &Podman) -> Result<Option<crate::network::StartedSidecar>> {
    if domain.resolved.allow_egress.is_empty() && !domain.resolved.ask {
        return Ok(None);
    }
    let resolved = domain.resolved.clone();
    let podman_for_sidecar = podman.clone();
    let control_dir = resolved.domain.socket_dir.join("sidecar");
    let started = tokio::task::spawn_blocking(move || {
        // The keys first: a missing one stops the start before any container is made.
        let credentials = crate::credentials::fetch(&resolved.credentials)?;
        let image = crate::network::ensure_image(&podman_for_sidecar)?;
        crate::network::start(&podman_for_sidecar, &resolved, &image, &control_dir, credentials)
    })
    .await
    .context("sidecar task failed")?;
    if started.is_err() {
        let _ = sandbox::remove(podman, &domain.resolved.domain.sidecar_name).await;
    }
    started.map(Some)
}

/// Starts the sandbox (and reads the image's default command meanwhile),
/// waits for the agent's repository to be seeded, and then lets sessions
/// in; or records why the sandbox failed.
async fn start_sandbox(domain: Arc<Domain>, podman: Podman, launch: SandboxLaunch) {
    let limits = crate::limits::plan(&domain.resolved.limits, &crate::limits::Host::probe());
    tracing::info!(arguments = ?limits.arguments, "resource limits");
    let container_command = domain.git.as_ref().map(|layout| layout.container_command()).unwrap_or_default();
    let spec = sandbox::SandboxSpec {
        runsc: &launch.runsc.path,
        workspace_mounts: &launch.arguments,
        command: &container_command,
        sidecar: launch.sidecar_name.as_deref(),
        limits: &limits,
        caching: &launch.caching,
    };
    let (default_command, started) =
        tokio::join!(sandbox::default_command(&podman, &domain.resolved.image), sandbox::start(&podman, &domain.resolved, &spec));
    domain.set_default_command(default_command);
    let container = domain.resolved.domain.container_name.clone();
    let seeded = match (&started, &domain.git) {
        (Ok(_), Some(layout)) => {
            sandbox::wait_for_seed(&podman, &container, layout).await.context("cannot set up the agent's repository inside the sandbox")
        }
        _ => Ok(()),
    };
    match started.and_then(|id| seeded.map(|()| id)) {
        Ok(id) => sandbox_running(&domain, &launch.runsc, &id, &container).await,
        Err(error) => {
            tracing::error!(error = %error.chained(), "sandbox failed to start");
            domain.set_container_state(ContainerState::Failed, Some(error.chained()));
        }
    }
}

/// The sandbox runs: record how sessions start (`runsc exec` where runsc's
/// state is found, else `podman exec`; see `exec_target`), let them in, and
/// start the agent branch's loops.
async fn sandbox_running(domain: &Arc<Domain>, runsc: &crate::runsc::Selected, id: &str, container: &str) {
    let target =
        ExecTarget::locate(&runsc.path, id, container).map(|target| ExecTarget { terminal_signals: runsc.terminal_signals(), ..target });
    match &target {
        Some(target) => {
            if let Err(error) = target.write(&domain.resolved.domain.domain_dir) {
                tracing::warn!(error = %error.chained(), "sessions use podman exec");
            }
        }
        None => tracing::info!(id, "runsc's state of the sandbox not found; sessions use podman exec"),
    }
    tracing::info!("sandbox running");
    domain.mark_branch_seeded(target).await;
    domain.set_container_state(ContainerState::Running, None);
    if let Some(layout) = domain.git.clone() {
        tokio::spawn(git_sentry::sync::mirror_config_loop(layout.clone()));
        tokio::spawn(export_loop(domain.clone(), layout));
    }
    crate::memory::release_free_memory();
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
    let Running { domain, podman, resources, state_anchor, sidecar_tasks, start_task, escalation, server_task, cluster, .. } = running;
    tracing::info!(reason, "tearing down");
    // No new session joins a sandbox that is going; what its sessions left
    // running is ended once it is gone.
    let recorded = ExecTarget::recorded(&resources.domain_dir);
    ExecTarget::remove(&resources.domain_dir);
    domain.begin_shutdown();
    domain.emit(Event::ShuttingDown { reason: reason.to_owned() });
    let lock = lock_for_teardown(&resources.lockfile).await;
    let _ = std::fs::remove_file(&resources.control_socket);
    start_task.abort();
    // The agent's last commits reach the host before the sandbox goes.
    domain.export_agent_branch().await;
    domain.set_container_state(ContainerState::Stopping, None);
    match &cluster {
        Some((backend, started)) => cluster::tear_down(&domain, backend, started).await,
        None => remove_container(&podman, &resources.container_name, "the sandbox").await,
    }
    if let Some(recorded) = recorded {
        recorded.end_execs();
    }
    if let Some(tasks) = sidecar_tasks {
        tasks.iter().for_each(tokio::task::JoinHandle::abort);
        remove_container(&podman, &resources.sidecar_name, "the Network Sidecar").await;
        let _ = std::fs::remove_dir_all(resources.socket_dir.join("sidecar"));
        let _ = std::fs::remove_dir_all(resources.socket_dir.join("sandbox"));
    }
    if let Some(anchor) = state_anchor {
        match tokio::task::spawn_blocking(move || anchor.unmount()).await {
            Ok(Ok(())) => tracing::info!("state anchor unmounted"),
            Ok(Err(error)) => tracing::error!(error = %error.chained(), "could not unmount the state anchor"),
            Err(error) => tracing::error!(%error, "state anchor task failed"),
        }
    }
    if let Some((server, task)) = escalation {
        // Refusals counted in the last, unfinished window are recorded too.
        server.write_remaining_refusals(&*domain).await;
        task.abort();
    }
    let _ = std::fs::remove_file(&resources.escalation_socket);
    let _ = std::fs::remove_dir_all(crate::escalation::trust_anchor::credentials_directory(&resources.socket_dir));
    let _ = std::fs::remove_dir(&resources.socket_dir);
    server_task.abort();
    tracing::info!("teardown complete");
    lock
}

/// Removes a container at teardown; a failure (podman's message, or its
/// bound passed: the error names the container and the bound) is logged and
/// teardown goes on. What stays is replaced by the next start's `podman run
/// --replace`.
async fn remove_container(podman: &Podman, name: &str, what: &str) {
    if let Err(error) = sandbox::remove(podman, name).await {
        tracing::error!(error = %error.chained(), container = name, "could not remove {what}; the next start replaces it");
    }
}

/// Removes the files of a start that failed before the domain was serving.
struct StartupCleanup {
    resources: lazaret_core::domain::DomainResources,
    armed: bool,
    /// Mounted before a later step failed: unmounted, not left until the
    /// next start (attack review finding 10).
    state_anchor: Option<Arc<crate::state_anchor::StateAnchor>>,
}

impl Drop for StartupCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(anchor) = self.state_anchor.take() {
            if let Err(error) = anchor.unmount() {
                tracing::error!(error = %error.chained(), "could not unmount the state anchor of a failed start");
            }
        }
        let resources = &self.resources;
        let _ = std::fs::remove_file(&resources.escalation_socket);
        let _ = std::fs::remove_file(&resources.control_socket);
        let _ = std::fs::remove_dir_all(resources.socket_dir.join("sidecar"));
        let _ = std::fs::remove_dir_all(resources.socket_dir.join("sandbox"));
        let _ = std::fs::remove_dir_all(crate::escalation::trust_anchor::credentials_directory(&resources.socket_dir));
        let _ = std::fs::remove_dir(&resources.socket_dir);
    }
}

/// The Escalation Socket and what the sandbox needs to use it.
struct PreparedEscalation {
    listener: tokio::net::UnixListener,
    server: Arc<crate::escalation::server::EscalationServer>,
    podman_arguments: Vec<String>,
    /// The static client, and its TLS bundle here (a pod gets both over exec).
    client: std::path::PathBuf,
    bundle: std::path::PathBuf,
}

/// Trust Anchor, client credentials in the domain's private socket directory, the
/// socket, and the mounts: the socket is the only host socket the sandbox
/// gets (D10), which runsc must be told to allow (`host-uds=open`).
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
    let _ = std::fs::remove_file(&domain.escalation_socket);
    let listener = bind_private(&domain.escalation_socket)?;
    let server = crate::escalation::server::EscalationServer::new(
        tokio_rustls::TlsAcceptor::from(anchor.server_config()?),
        identity,
        crate::escalation::EscalationSettings::of(resolved),
    );
    let podman_arguments = vec![
        sandbox::HOST_UDS_ARGUMENT.to_owned(),
        format!("--volume={}:{}:ro", tls_dir.display(), trust_anchor::bundle_location().0),
        format!("--volume={}:{}", domain.escalation_socket.display(), lazaret_protocol::escalation::paths::SOCKET),
        format!("--volume={}:/run/lazaret/bin/lazaret-escalate:ro", helper.display()),
    ];
    let bundle = tls_dir.join(trust_anchor::bundle_location().1);
    Ok(PreparedEscalation { listener, server: Arc::new(server), podman_arguments, client: helper, bundle })
}

/// Exports the agent branch whenever its ref files change: woken by inotify
/// on their directories, or by the slow poll behind it (`ref_watch`).
async fn export_loop(domain: Arc<Domain>, layout: GitLayout) {
    let mut watch = git_sentry::ref_watch::RefWatch::new(&layout);
    loop {
        domain.export_agent_branch().await;
        crate::memory::release_free_memory();
        watch.changed().await;
    }
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
