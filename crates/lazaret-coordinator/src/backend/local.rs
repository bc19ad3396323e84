//! The local backend: the domain's sandbox is a gVisor container under
//! podman on this machine, with the State Anchor's overlays mounted into
//! it and, when anything may be reached, the Network Sidecar owning its
//! network namespace.
//!
//! Start: the runsc to use is chosen beside the store and workspace
//! ([`LocalBackend::probe`], [`LocalBackend::prepare`]); then, before the
//! control socket serves, the State Anchor is mounted and the sidecar
//! started ([`LocalBackend::provision`]); then, in the background, the
//! sandbox itself ([`LocalBackend::start`]): `podman run`, the seed of the
//! agent's repository, the record of how sessions exec into it
//! (`exec_target`), and the agent branch's loops. Teardown
//! ([`LocalBackend::tear_down`]) removes the container and the sidecar and
//! unmounts the State Anchor; a start that fails before the domain serves
//! unmounts it too ([`LocalBackend::abort_start`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use lazaret_core::bounds;
use lazaret_core::config::ResolvedProfile;
use lazaret_core::domain::DomainResources;
use lazaret_protocol::sidecar::{CredentialEndpoint, SidecarRequest};
use lazaret_protocol::{ContainerState, NetworkPolicy};

use super::{sandbox, BackendDomain, EgressError, EscalationFiles};
use crate::cleanup::LogFailure;
use crate::error::{Context, Result};
use crate::exec_target::ExecTarget;
use crate::git_sentry::sync::{BranchFingerprint, Export};
use crate::git_sentry::{self, GitLayout};
use crate::podman::Podman;
use crate::state_anchor::StateAnchor;

/// The runsc probes this domain remembers (`runsc::select_remembered`).
pub const RUNSC_PROBES_FILE: &str = "runsc-probes.json";

/// A domain's local sandbox.
pub struct LocalBackend {
    podman: Podman,
    /// What `podman run` is given, gathered by the start's stages.
    launch: Mutex<Launch>,
    /// The State Anchor, once mounted.
    state_anchor: Mutex<Option<Arc<StateAnchor>>>,
    /// The Network Sidecar's control socket, when the domain has one.
    sidecar: OnceLock<PathBuf>,
    /// The policy the sidecar last answered with: what a restarted sidecar
    /// is given back (live changes included).
    policy: Mutex<Option<NetworkPolicy>>,
    /// The sidecar's loops (its watch, its protection, the requests' expiry).
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// One export of the agent branch at a time: the branch as last
    /// exported (or seeded), and the exporter inside the sandbox.
    export: tokio::sync::Mutex<(Option<BranchFingerprint>, git_sentry::exporter::Exporter)>,
    /// The exec record as teardown found it: its execs are ended once the
    /// sandbox is gone.
    recorded: Mutex<Option<ExecTarget>>,
}

/// What the sandbox's start needs beyond the domain.
#[derive(Default)]
struct Launch {
    runsc: Option<crate::runsc::Selected>,
    arguments: Vec<String>,
    sidecar_name: Option<String>,
    caching: Option<sandbox::Caching>,
}

/// The runsc chosen for the sandbox, and what it can do.
pub type Probe = tokio::task::JoinHandle<Result<(crate::runsc::Selected, crate::runsc::Features)>>;

impl LocalBackend {
    pub fn new(resolved: &ResolvedProfile) -> LocalBackend {
        LocalBackend {
            podman: Podman::default(),
            launch: Mutex::new(Launch::default()),
            state_anchor: Mutex::new(None),
            sidecar: OnceLock::new(),
            policy: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            export: tokio::sync::Mutex::new((None, git_sentry::exporter::Exporter::new(&resolved.domain.container_name))),
            recorded: Mutex::new(None),
        }
    }

    /// What sessions of the previous sandbox left (no session of this
    /// domain runs before its coordinator does): runsc execs, and the FIFOs
    /// of earlier versions.
    pub fn clear_leftovers(resources: &DomainResources) {
        if let Some(previous) = ExecTarget::recorded(&resources.domain_dir) {
            previous.end_execs();
        }
        ExecTarget::remove(&resources.domain_dir);
        crate::exec_target::remove_session_fifos(&resources.socket_dir);
    }

    /// Chooses runsc: each candidate is started twice (`--version`,
    /// `flags`) unless the domain remembers them, so this runs beside the
    /// store's and workspace's preparation, not after them.
    pub fn probe(resolved: &ResolvedProfile) -> Probe {
        let configured = resolved.runsc.clone();
        let remembered = resolved.domain.domain_dir.join(RUNSC_PROBES_FILE);
        tokio::task::spawn_blocking(move || crate::runsc::select_remembered(configured.as_deref(), &remembered))
    }

    /// The runsc and file caching the sandbox will start with, and its
    /// workspace mounts.
    pub async fn prepare(&self, probe: Probe, git: Option<&GitLayout>, workspace_mounts: Vec<String>) -> Result<()> {
        let (runsc, features) = probe.await.context("runsc task failed")??;
        tracing::info!(runsc = %runsc.path.display(), version = %runsc.version, why = runsc.why, "sandbox runtime");
        // The agent's checkout and git directory: only the sandbox writes
        // them while it runs, so gVisor may cache them (see `sandbox`).
        let caching = sandbox::Caching::new(
            Some(&features),
            git.map(GitLayout::sandbox_only_sources).unwrap_or_default(),
            crate::podman::nofile_limit(),
        );
        tracing::info!(cached = ?caching.sandbox_only, dentry_cache = ?caching.dentry_cache, "gVisor file caching");
        let mut launch = lock(&self.launch);
        launch.runsc = Some(runsc);
        launch.caching = Some(caching);
        launch.arguments = workspace_mounts;
        Ok(())
    }

    /// Before the domain serves: the State Anchor's overlays, the
    /// Escalation Socket's mounts, and the Network Sidecar (with the
    /// network requests' state and loops).
    pub async fn provision(&self, domain: &Arc<impl BackendDomain>, escalation: Option<&EscalationFiles>) -> Result<()> {
        if let Some(anchor) = self.mount_state_anchor(domain).await? {
            lock(&self.launch).arguments.extend(anchor.podman_arguments());
            // Until the domain serves, a failure unmounts it (finding 10).
            *lock(&self.state_anchor) = Some(anchor);
        }
        if let Some(files) = escalation {
            lock(&self.launch).arguments.extend(escalation_mounts(files));
        }
        let Some(started) = self.start_sidecar(domain).await? else { return Ok(()) };
        let resources = &domain.resolved().domain;
        // Set once per domain: a second start of the same domain value
        // never happens (the start-up pipeline runs once).
        let _ = self.sidecar.set(started.socket.clone());
        if let Err(error) = domain.start_network_requests().await {
            sandbox::remove(&self.podman, &resources.sidecar_name)
                .await
                .log_failure(format_args!("removing the sidecar container {} after a failed start", resources.sidecar_name));
            return Err(error).context("network requests");
        }
        {
            let mut launch = lock(&self.launch);
            launch.sidecar_name = Some(resources.sidecar_name.clone());
            // The sandbox's only resolver is the sidecar's.
            launch.arguments.push(crate::sidecar_container::resolv_conf_argument(&resources.socket_dir.join("sandbox"))?);
        }
        // Addresses and networks the host gains later are protected too.
        let refresh = tokio::spawn(crate::sidecar_container::refresh_protection(
            started.socket.clone(),
            started.fixed.clone(),
            started.protection.clone(),
        ));
        let expiry = {
            let domain = domain.clone();
            tokio::spawn(async move { domain.expire_network_requests().await })
        };
        let watch = tokio::spawn(watch_sidecar(domain.clone(), started, self.podman.clone()));
        lock(&self.tasks).extend([watch, refresh, expiry]);
        Ok(())
    }

    /// A start that failed before the domain served: the State Anchor is
    /// unmounted, not left until the next start (attack review finding 10).
    pub fn abort_start(&self) {
        if let Some(anchor) = lock(&self.state_anchor).take() {
            if let Err(error) = anchor.unmount() {
                tracing::error!(error = %error.chained(), "could not unmount the state anchor of a failed start");
            }
        }
    }

    /// The State Anchor: overlays for the persistent directories, mounted
    /// before the sandbox starts. A leftover container of a killed
    /// coordinator must go first: its runsc gofer still serves the old overlays.
    async fn mount_state_anchor(&self, domain: &Arc<impl BackendDomain>) -> Result<Option<Arc<StateAnchor>>> {
        if domain.resolved().persistent_dirs.is_empty() {
            return Ok(None);
        }
        let resources = &domain.resolved().domain;
        if let Err(error) = sandbox::remove(&self.podman, &resources.container_name).await {
            tracing::warn!(error = %error.chained(), "could not remove a leftover container");
        }
        let (domain_dir, image, dirs) =
            (resources.domain_dir.clone(), domain.resolved().image.clone(), domain.resolved().persistent_dirs.clone());
        let anchor = tokio::task::spawn_blocking(move || StateAnchor::mount(&domain_dir, &image, &dirs))
            .await
            .context("state anchor task failed")??;
        Ok(Some(Arc::new(anchor)))
    }

    /// The Network Sidecar, when anything may be reached at all; with an
    /// empty allowlist the sandbox simply has no network. A failed start
    /// removes what podman made.
    async fn start_sidecar(&self, domain: &Arc<impl BackendDomain>) -> Result<Option<crate::sidecar_container::StartedSidecar>> {
        if domain.resolved().allow_egress.is_empty() && !domain.resolved().ask {
            return Ok(None);
        }
        let resolved = domain.resolved().clone();
        let podman = self.podman.clone();
        let control_dir = resolved.domain.socket_dir.join("sidecar");
        let started = tokio::task::spawn_blocking(move || {
            // The keys first: a missing one stops the start before any container is made.
            let credentials = crate::credentials::fetch(&resolved.credentials)?;
            let image = crate::sidecar_container::ensure_image(&podman)?;
            crate::sidecar_container::start(&podman, &resolved, &image, &control_dir, credentials)
        })
        .await
        .context("sidecar task failed")?;
        if started.is_err() {
            let name = &domain.resolved().domain.sidecar_name;
            sandbox::remove(&self.podman, name)
                .await
                .log_failure(format_args!("removing the sidecar container {name} after a failed start"));
        }
        started.map(Some)
    }

    /// Starts the sandbox (and reads the image's default command
    /// meanwhile), waits for the agent's repository to be seeded, and then
    /// lets sessions in; or records why the sandbox failed.
    pub async fn start(&self, domain: &Arc<impl BackendDomain>) {
        let launch = std::mem::take(&mut *lock(&self.launch));
        let (Some(runsc), Some(caching)) = (launch.runsc, launch.caching) else {
            return domain.set_container_state(ContainerState::Failed, Some("the sandbox's runtime was not chosen".to_owned()));
        };
        let limits = crate::resource_limits::plan(&domain.resolved().limits, &crate::resource_limits::Host::probe());
        tracing::info!(arguments = ?limits.arguments, "resource limits");
        let container_command = domain.git().map(|layout| layout.container_command()).unwrap_or_default();
        let spec = sandbox::SandboxSpec {
            runsc: &runsc.path,
            workspace_mounts: &launch.arguments,
            command: &container_command,
            sidecar: launch.sidecar_name.as_deref(),
            limits: &limits,
            caching: &caching,
        };
        let (default_command, started) = tokio::join!(
            sandbox::default_command(&self.podman, &domain.resolved().image),
            sandbox::start(&self.podman, domain.resolved(), &spec)
        );
        domain.set_default_command(default_command);
        let container = domain.resolved().domain.container_name.clone();
        let seeded = match (&started, domain.git()) {
            (Ok(_), Some(layout)) => sandbox::wait_for_seed(&self.podman, &container, layout)
                .await
                .context("cannot set up the agent's repository inside the sandbox"),
            _ => Ok(()),
        };
        match started.and_then(|id| seeded.map(|()| id)) {
            Ok(id) => self.running(domain, &runsc, &id, &container).await,
            Err(error) => {
                tracing::error!(error = %error.chained(), "sandbox failed to start");
                domain.set_container_state(ContainerState::Failed, Some(error.chained()));
            }
        }
    }

    /// The sandbox runs: record how sessions start (`runsc exec` where
    /// runsc's state is found, else `podman exec`; see `exec_target`), let
    /// them in, and start the agent branch's loops.
    async fn running(&self, domain: &Arc<impl BackendDomain>, runsc: &crate::runsc::Selected, id: &str, container: &str) {
        let target = ExecTarget::locate(&runsc.path, id, container)
            .map(|target| ExecTarget { terminal_signals: runsc.terminal_signals(), ..target });
        match &target {
            Some(target) => {
                if let Err(error) = target.write(&domain.resolved().domain.domain_dir) {
                    tracing::warn!(error = %error.chained(), "sessions use podman exec");
                }
            }
            None => tracing::info!(id, "runsc's state of the sandbox not found; sessions use podman exec"),
        }
        tracing::info!("sandbox running");
        self.mark_branch_seeded(domain.as_ref(), target).await;
        domain.set_container_state(ContainerState::Running, None);
        if let Some(layout) = domain.git().cloned() {
            tokio::spawn(git_sentry::sync::mirror_config_loop(layout.clone()));
            tokio::spawn(export_loop(domain.clone(), layout));
        }
        crate::memory::release_free_memory();
    }

    /// Records the agent branch as it is right after seeding (an unchanged
    /// branch is not exported) and how the exporter inside the sandbox is
    /// run: with `runsc exec` of `target` it starts at the first export,
    /// with `podman exec` now.
    async fn mark_branch_seeded(&self, domain: &impl BackendDomain, target: Option<ExecTarget>) {
        let Some(layout) = domain.git() else { return };
        let mut export = self.export.lock().await;
        export.0 = Some(git_sentry::sync::branch_fingerprint(layout));
        if let Some(target) = target {
            export.1.use_runsc(target, domain.resolved().domain.domain_dir.clone());
        }
        if !export.1.starts_cheaply() {
            export.1.start(&layout.export_loop_script());
        }
    }

    /// Exports the agent branch if it changed since the last export; after
    /// an export (not after a look that found nothing changed) the
    /// allocator's free pages go back (`memory`).
    pub async fn export_branch(&self, layout: &GitLayout, running: bool) -> Option<Result<Export>> {
        if !running {
            return None;
        }
        let mut export = self.export.lock().await;
        let fingerprint = git_sentry::sync::branch_fingerprint(layout);
        if export.0.as_ref() == Some(&fingerprint) {
            return None;
        }
        let result = git_sentry::sync::export_once(layout, &mut export.1).await;
        export.0 = Some(fingerprint);
        drop(export);
        crate::memory::release_free_memory();
        Some(result)
    }

    /// Sends one request to the Network Sidecar (on the blocking pool) and
    /// keeps the policy it answers with.
    pub async fn egress(&self, network_error: Option<String>, request: SidecarRequest) -> std::result::Result<NetworkPolicy, EgressError> {
        let socket = self.sidecar.get().cloned().ok_or(EgressError::NoSidecar)?;
        if let Some(reason) = network_error {
            return Err(EgressError::NoNetwork { reason });
        }
        let policy = tokio::task::spawn_blocking(move || crate::sidecar_container::control(&socket, &request))
            .await?
            .map_err(|error| EgressError::Sidecar(Box::new(error)))?;
        *lock(&self.policy) = Some(policy.clone());
        Ok(policy)
    }

    /// Gives a restarted sidecar back the domain's policy (the last one it
    /// answered with), what it protects and its credential endpoints.
    async fn restore_sidecar(
        &self,
        protection: SidecarRequest,
        credentials: &[CredentialEndpoint],
    ) -> std::result::Result<(), EgressError> {
        let socket = self.sidecar.get().cloned().ok_or(EgressError::NoSidecar)?;
        let policy = lock(&self.policy).clone();
        let mut requests = vec![protection];
        if let Some(policy) = policy {
            // Timed entries (grants) come back afterwards, with the time they have left.
            let timed = |entry: &String| policy.expiring.iter().any(|expiring| &expiring.entry == entry);
            let allow = policy.allow.iter().filter(|entry| !timed(entry)).cloned().collect();
            let deny = policy.deny.iter().filter(|entry| !timed(entry)).cloned().collect();
            requests.push(SidecarRequest::Set { allow, deny, private_answers: policy.private_answers });
            if policy.hold_ms > 0 {
                requests.push(SidecarRequest::Hold { ms: policy.hold_ms });
            }
        }
        if !credentials.is_empty() {
            requests.push(SidecarRequest::Credentials { endpoints: credentials.to_vec() });
        }
        for request in requests {
            let socket = socket.clone();
            tokio::task::spawn_blocking(move || crate::sidecar_container::control(&socket, &request))
                .await?
                .map_err(|error| EgressError::Sidecar(Box::new(error)))?;
        }
        Ok(())
    }

    /// The start of teardown: the exec record goes, so no new session
    /// joins; the execs its sessions started are ended once the sandbox is gone.
    pub fn close_doors(&self, resources: &DomainResources) {
        *lock(&self.recorded) = ExecTarget::recorded(&resources.domain_dir);
        ExecTarget::remove(&resources.domain_dir);
    }

    /// Teardown's part, once no session joins and the branch is exported:
    /// the container (and the execs its sessions left), the sidecar and its
    /// loops, the State Anchor.
    pub async fn tear_down(&self, resources: &DomainResources) {
        remove_container(&self.podman, &resources.container_name, "the sandbox").await;
        let recorded = lock(&self.recorded).take();
        if let Some(recorded) = recorded {
            recorded.end_execs();
        }
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        if self.sidecar.get().is_some() {
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
            remove_container(&self.podman, &resources.sidecar_name, "the Network Sidecar").await;
            crate::cleanup::remove_dir_all(&resources.socket_dir.join("sidecar"));
            crate::cleanup::remove_dir_all(&resources.socket_dir.join("sandbox"));
        }
        let anchor = lock(&self.state_anchor).take();
        if let Some(anchor) = anchor {
            match tokio::task::spawn_blocking(move || anchor.unmount()).await {
                Ok(Ok(())) => tracing::info!("state anchor unmounted"),
                Ok(Err(error)) => tracing::error!(error = %error.chained(), "could not unmount the state anchor"),
                Err(error) => tracing::error!(%error, "state anchor task failed"),
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The Escalation Socket's mounts: the socket is the only host socket the
/// sandbox gets (D10), which runsc must be told to allow (`host-uds=open`).
fn escalation_mounts(files: &EscalationFiles) -> Vec<String> {
    use crate::escalation::trust_anchor;
    vec![
        sandbox::HOST_UDS_ARGUMENT.to_owned(),
        format!("--volume={}:{}:ro", files.tls_dir.display(), trust_anchor::bundle_location().0),
        format!("--volume={}:{}", files.socket.display(), lazaret_protocol::escalation::paths::SOCKET),
        format!("--volume={}:/run/lazaret/bin/lazaret-escalate:ro", files.client.display()),
    ]
}

/// Exports the agent branch whenever its ref files change: woken by inotify
/// on their directories, or by the slow poll behind it (`ref_watch`).
async fn export_loop(domain: Arc<impl BackendDomain>, layout: GitLayout) {
    let mut watch = git_sentry::ref_watch::RefWatch::new(&layout);
    loop {
        domain.export_agent_branch().await;
        watch.changed().await;
    }
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

/// Forwards the Network Sidecar's events to the domain, in order. When the
/// stream ends the sidecar has stopped (issue 33 finding 5: nobody noticed):
/// that is a `networkFailed` event and the domain's status; its supervisor
/// (the container's PID 1) starts it again, and once its control socket
/// answers it gets the domain's policy and protection back
/// (`networkRestored`). If the container itself is gone, so is the
/// network namespace the sandbox shares: the failure stays until the domain
/// starts anew. Aborted at teardown.
async fn watch_sidecar(domain: Arc<impl BackendDomain>, started: crate::sidecar_container::StartedSidecar, podman: Podman) {
    let sidecar = domain.resolved().domain.sidecar_name.clone();
    let mut events = match crate::sidecar_container::SidecarEvents::connect(&started.socket).await {
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
            match crate::sidecar_container::SidecarEvents::connect(&started.socket).await {
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
        let protection = crate::sidecar_container::protection_now(&started.fixed).unwrap_or_else(|| started.protection.clone());
        let restored = match local_of(domain.as_ref()) {
            Some(local) => local.restore_sidecar(protection.request(), &started.credentials).await.map_err(crate::Error::from),
            None => Err(EgressError::NoSidecar.into()),
        };
        if let Err(error) = match restored {
            Ok(()) => domain.network_restored().await,
            Err(error) => Err(error),
        } {
            return domain.network_failed(format!("the Network Sidecar came back but refused the domain's policy: {}", error.chained()));
        }
    }
}

/// The domain's local backend (the sidecar's loops run only for one).
fn local_of(domain: &impl BackendDomain) -> Option<&LocalBackend> {
    match domain.backend() {
        super::SandboxBackend::Local(local) => Some(local),
        super::SandboxBackend::Cluster(_) => None,
    }
}
