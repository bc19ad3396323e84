//! The sandbox backend: everything that differs between a domain whose
//! sandbox is a local gVisor container under podman ([`local`]) and one
//! whose sandbox is a pod on a Kubernetes cluster ([`cluster`]), behind one
//! type, [`SandboxBackend`], built once when the coordinator serves a
//! domain (docs/decisions.md D21).
//!
//! An enum, not a trait: there are exactly two backends, both in this
//! crate; an exhaustive `match` in each method below is what keeps them
//! from drifting apart (a capability does not compile until both arms are
//! written), every method is async and called from the JSON-RPC handlers
//! (a `dyn` trait would box each future), and each variant keeps state of
//! its own type. youki's `AnyCgroupManager` is the model.
//!
//! What lives here: the start and teardown of the sandbox (the local
//! container's `podman run` arguments in [`sandbox`]), running a
//! script inside it ([`SandboxBackend::inside`]), its egress control (the
//! Network Sidecar's control socket, or the policy object), the State
//! Anchor's listing ([`SandboxBackend::state_diff`]), the export of the
//! agent branch, and how a session joins ([`SandboxBackend::session_target`]).
//! The CLI's commands that act on a domain whose coordinator does not run
//! (`state diff`, `state reset`, `domain rm`, the checks before `run`) are
//! the free functions at the end: one implementation each, whatever the
//! backend.
//!
//! Invariants: outside this module (and the configuration), nothing in the
//! coordinator or the CLI matches on the profile's backend; this module
//! sees its domain only through [`BackendDomain`] and never imports the
//! coordinator (`crates/lazaret-core/tests/module_circles.rs`).

pub mod cluster;
pub mod local;
pub mod sandbox;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use lazaret_core::config::{Backend, ResolvedProfile};
use lazaret_core::domain::DomainResources;
use lazaret_protocol::sidecar::{SidecarEvent, SidecarRequest};
use lazaret_protocol::{ContainerState, NetworkPolicy, SessionTarget};

use crate::error::Result;
use crate::git_sentry::sync::Export;
use crate::git_sentry::GitLayout;
use crate::sandbox_exec::Inside;

/// What the sandbox sees at `/workspace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceMode {
    /// The agent's own checkout of `lazaret/agent-<profile>` (git_sentry).
    AgentBranch,
    /// The workspace itself, read-write: only for directories that are not
    /// git repositories, on the user's explicit request.
    Direct,
}

/// What a backend needs of the domain it runs the sandbox of, and no more:
/// the coordinator's `Domain` implements it (as it does `EscalationDomain`),
/// so this module never imports the coordinator that holds it.
pub trait BackendDomain: Send + Sync + 'static {
    /// The domain's resolved profile.
    fn resolved(&self) -> &ResolvedProfile;
    /// The agent branch's layout; `None` for a directly mounted workspace.
    fn git(&self) -> Option<&GitLayout>;
    /// The domain's backend (the one calling).
    fn backend(&self) -> &SandboxBackend;
    /// Whether teardown has begun.
    fn is_shutting_down(&self) -> bool;
    /// Records (and announces) the sandbox's state.
    fn set_container_state(&self, state: ContainerState, message: Option<String>);
    /// The image's default command, once read.
    fn set_default_command(&self, command: Vec<String>);
    /// Exports the agent branch if it changed, and announces the outcome.
    fn export_agent_branch(&self) -> impl Future<Output = ()> + Send;
    /// Loads the network requests' grants kept for the profile and puts
    /// them in force (a domain with a Network Sidecar).
    fn start_network_requests(&self) -> impl Future<Output = Result<()>> + Send;
    /// Ends timed network requests as they run out; never returns.
    fn expire_network_requests(&self) -> impl Future<Output = ()> + Send;
    /// One event of the Network Sidecar.
    fn sidecar_event(&self, event: SidecarEvent) -> impl Future<Output = ()> + Send;
    /// The sidecar stopped for good: the sandbox has no network.
    fn network_failed(&self, message: String);
    /// The sidecar stopped and is being started again.
    fn network_restarting(&self, message: String);
    /// The sidecar answers again: the domain's grants are put back.
    fn network_restored(&self) -> impl Future<Output = Result<()>> + Send;
}

/// The Escalation Socket's side of the sandbox: what goes into it (the
/// static client and its TLS bundle) and the socket it reaches here.
#[derive(Clone)]
pub struct EscalationFiles {
    /// The static `lazaret-escalate`.
    pub client: PathBuf,
    /// The directory of the client's TLS bundle, and the bundle in it.
    pub tls_dir: PathBuf,
    pub bundle: PathBuf,
    /// The domain's Escalation Socket.
    pub socket: PathBuf,
}

/// The domain's sandbox: local, or on a cluster.
// One value per domain, made once and kept in the domain's `Arc`: the
// variants' sizes cost nothing, and boxing them would only add a hop.
#[allow(clippy::large_enum_variant)]
pub enum SandboxBackend {
    Local(local::LocalBackend),
    Cluster(cluster::ClusterBackend),
}

pub use crate::error::EgressError;

/// Why `state diff` failed, by what failed (each has its own error code).
#[derive(Debug)]
pub enum StateDiffFailure {
    /// What the agent's directories were seeded with is not known.
    Base(crate::Error),
    /// The sandbox could not be listed.
    Listing(crate::Error),
    /// What is kept on this machine could not be read.
    Read(crate::Error),
}

impl SandboxBackend {
    /// The backend of `resolved`'s domain with `/workspace` as `mode` says;
    /// a cluster refuses a directly mounted workspace, naming the key.
    pub fn new(resolved: &ResolvedProfile, mode: WorkspaceMode) -> Result<SandboxBackend> {
        Ok(match &resolved.backend {
            Backend::Podman => SandboxBackend::Local(local::LocalBackend::new(resolved)),
            Backend::Kubernetes(config) => {
                if mode == WorkspaceMode::Direct {
                    return Err(lazaret_core::Error::invalid(
                        format!("profiles.{}.backend", resolved.profile),
                        "a workspace cannot be mounted into a pod on a cluster (--mount-workspace): run in a git repository, whose \
                         agent branch the pod gets"
                            .to_owned(),
                        None,
                    )
                    .into());
                }
                SandboxBackend::Cluster(cluster::ClusterBackend::new(resolved, config.clone()))
            }
        })
    }

    /// What the previous sandbox of the domain left (no session of this
    /// domain runs before its coordinator does): a local sandbox's runsc
    /// execs, and the FIFOs of earlier versions.
    pub fn clear_leftovers(&self, resources: &DomainResources) {
        match self {
            SandboxBackend::Local(_) => local::LocalBackend::clear_leftovers(resources),
            SandboxBackend::Cluster(_) => {}
        }
    }

    /// The probes the start needs, begun now to run beside the store's and
    /// workspace's preparation (a local sandbox's runsc).
    pub fn probe(&self, resolved: &ResolvedProfile) -> Option<local::Probe> {
        match self {
            SandboxBackend::Local(_) => Some(local::LocalBackend::probe(resolved)),
            SandboxBackend::Cluster(_) => None,
        }
    }

    /// The probes' outcome and the workspace: what the sandbox will start
    /// with (`workspace_mounts` are a local sandbox's podman arguments).
    pub async fn prepare(&self, probe: Option<local::Probe>, git: Option<&GitLayout>, workspace_mounts: Vec<String>) -> Result<()> {
        match (self, probe) {
            (SandboxBackend::Local(backend), Some(probe)) => backend.prepare(probe, git, workspace_mounts).await,
            (SandboxBackend::Local(_), None) => crate::bail!("the local sandbox's runtime was not probed"),
            (SandboxBackend::Cluster(_), _) => Ok(()),
        }
    }

    /// Before the domain serves: what must exist before its sandbox starts
    /// (a local State Anchor and Network Sidecar; nothing for a pod, whose
    /// cluster holds both).
    pub async fn provision(&self, domain: &Arc<impl BackendDomain>, escalation: Option<&EscalationFiles>) -> Result<()> {
        match self {
            SandboxBackend::Local(backend) => backend.provision(domain, escalation).await,
            SandboxBackend::Cluster(_) => Ok(()),
        }
    }

    /// A start that failed before the domain served undoes what
    /// [`SandboxBackend::provision`] made that outlives the process.
    pub fn abort_start(&self) {
        match self {
            SandboxBackend::Local(backend) => backend.abort_start(),
            SandboxBackend::Cluster(_) => {}
        }
    }

    /// In the background once the domain serves: starts the sandbox and
    /// lets sessions in (the domain's state says `running`), or records
    /// why it failed.
    pub async fn start(&self, domain: &Arc<impl BackendDomain>, escalation: Option<EscalationFiles>) {
        match self {
            SandboxBackend::Local(backend) => backend.start(domain).await,
            SandboxBackend::Cluster(backend) => backend.start(domain, escalation).await,
        }
    }

    /// The start of teardown: no new session can join (a local sandbox's
    /// exec record goes; the execs it started are ended once the sandbox
    /// is gone).
    pub fn close_doors(&self, resources: &DomainResources) {
        match self {
            SandboxBackend::Local(backend) => backend.close_doors(resources),
            SandboxBackend::Cluster(_) => {}
        }
    }

    /// Teardown's part, once the agent branch is exported: the sandbox
    /// goes (a local container, sidecar and State Anchor; a pod, whose
    /// `Sandbox` is suspended and keeps its claim).
    pub async fn tear_down(&self, resolved: &ResolvedProfile) {
        match self {
            SandboxBackend::Local(backend) => backend.tear_down(&resolved.domain).await,
            SandboxBackend::Cluster(backend) => backend.tear_down(resolved).await,
        }
    }

    /// How a session joins the sandbox: the local container, or the pod as
    /// this coordinator reaches it (its kubeconfig, context and namespace).
    pub fn session_target(&self, resolved: &ResolvedProfile) -> Result<SessionTarget> {
        match self {
            SandboxBackend::Local(_) => Ok(SessionTarget::Local { container_name: resolved.domain.container_name.clone() }),
            SandboxBackend::Cluster(backend) => backend.session_target(resolved),
        }
    }

    /// Where scripts that read the sandbox run: the container, or the pod
    /// once it runs (`None` before).
    pub fn inside<'a>(&'a self, resolved: &'a ResolvedProfile) -> Option<Inside<'a>> {
        match self {
            SandboxBackend::Local(_) => Some(Inside::Container(&resolved.domain.container_name)),
            SandboxBackend::Cluster(backend) => backend.pod().map(Inside::Pod),
        }
    }

    /// One request to the egress control: the Network Sidecar's control
    /// socket, or the domain's policy object on the cluster. `network_error`
    /// is why the sandbox has no working network now, if it has none.
    pub async fn egress(
        &self,
        resolved: &ResolvedProfile,
        network_error: Option<String>,
        request: SidecarRequest,
    ) -> std::result::Result<NetworkPolicy, EgressError> {
        match self {
            SandboxBackend::Local(backend) => backend.egress(network_error, request).await,
            SandboxBackend::Cluster(backend) => backend.egress(resolved, &request).await,
        }
    }

    /// Exports the agent branch if it changed since the last export (one
    /// at a time); `None` when there was nothing to do or say (the sandbox
    /// is not running, nothing changed, a refusal already said).
    pub async fn export_branch(&self, layout: &GitLayout, running: bool) -> Option<Result<Export>> {
        match self {
            SandboxBackend::Local(backend) => backend.export_branch(layout, running).await,
            SandboxBackend::Cluster(backend) => backend.export_branch(layout).await,
        }
    }

    /// What the agent changed in the persistent directories `dirs`: the
    /// sandbox's own listing where it can be had now, else what this
    /// machine keeps (the upper directories; a pod's last listing).
    pub async fn state_diff(
        &self,
        resolved: &ResolvedProfile,
        dirs: Vec<PathBuf>,
    ) -> std::result::Result<Vec<crate::state_anchor::StateChange>, StateDiffFailure> {
        if let SandboxBackend::Cluster(backend) = self {
            if let Some(pod) = backend.pod() {
                let bases = crate::state_anchor::pod::bases(&resolved.domain.domain_dir, &dirs).map_err(StateDiffFailure::Base)?;
                return crate::state_anchor::pod::diff_live(&pod.cluster, &pod.pod, &dirs, bases).await.map_err(StateDiffFailure::Listing);
            }
        }
        let resolved = resolved.clone();
        tokio::task::spawn_blocking(move || state_diff_kept(&resolved, &dirs))
            .await
            .map_err(|error| StateDiffFailure::Read(crate::Error::Message(error.to_string())))?
            .map_err(StateDiffFailure::Read)
    }
}

/// `state diff` from what this machine keeps: a local domain's upper
/// directories (whether or not it runs), a cluster domain's last listing
/// of its pod (while its coordinator does not run).
pub fn state_diff_kept(resolved: &ResolvedProfile, dirs: &[PathBuf]) -> Result<Vec<crate::state_anchor::StateChange>> {
    match &resolved.backend {
        Backend::Podman => crate::state_anchor::diff(&resolved.domain.domain_dir, &resolved.image, dirs),
        Backend::Kubernetes(_) => crate::state_anchor::pod::diff_recorded(&resolved.domain.domain_dir, dirs),
    }
}

/// `state reset` of a domain that does not run (the caller holds its
/// lock): the agent's changes in `dirs` go; says what happens next.
pub fn state_reset(resolved: &ResolvedProfile, dirs: &[PathBuf]) -> Result<&'static str> {
    match &resolved.backend {
        Backend::Podman => {
            crate::state_anchor::reset(&resolved.domain.domain_dir, dirs)?;
            Ok("")
        }
        Backend::Kubernetes(_) => {
            // The claim is on the cluster: the next start seeds it again.
            crate::state_anchor::pod::reset(&resolved.domain.domain_dir, dirs)?;
            Ok(": the domain's next start seeds them again from the image")
        }
    }
}

/// What `lazaret domain rm` did.
pub struct Removed {
    /// What was deleted (a cluster's objects).
    pub deleted: Vec<String>,
    /// Where (a cluster's namespace).
    pub place: String,
}

/// `lazaret domain rm` of a domain whose coordinator does not run (the
/// caller holds its lock): a cluster domain's objects are deleted; a local
/// domain leaves nothing anywhere, which is said as an error.
pub async fn remove_domain(resolved: &ResolvedProfile) -> Result<Removed> {
    match &resolved.backend {
        Backend::Podman => crate::bail!(
            "profile `{}` runs its sandbox here (backend \"podman\"): it leaves nothing on a cluster, and a local domain ends with its \
             last session (`lazaret state reset` discards its persistent directories)",
            resolved.profile
        ),
        Backend::Kubernetes(config) => {
            let deleted = cluster::remove(resolved, config).await?;
            Ok(Removed { deleted, place: format!("namespace {}", config.namespace) })
        }
    }
}

/// What `lazaret run` checks and says before it joins or starts the
/// domain: the image it must have on this machine (none for a pod: the
/// cluster pulls it), and warnings about limits nothing enforces.
pub struct Preflight {
    pub local_image: Option<String>,
    pub warnings: Vec<String>,
}

/// The checks of `lazaret run` that need nothing running; a cluster
/// refuses `--mount-workspace`.
pub fn preflight(resolved: &ResolvedProfile, mount_workspace: bool) -> Result<Preflight> {
    match &resolved.backend {
        Backend::Podman => {
            let limits = crate::resource_limits::plan(&resolved.limits, &crate::resource_limits::Host::probe());
            Ok(Preflight { local_image: Some(resolved.image.clone()), warnings: limits.warnings() })
        }
        Backend::Kubernetes(_) => {
            if mount_workspace {
                crate::bail!(
                    "profile `{}` runs its sandbox on a cluster, where no host directory can be mounted: drop --mount-workspace and run \
                     in a git repository, whose agent branch the pod gets",
                    resolved.profile
                );
            }
            let mut warnings = Vec::new();
            if resolved.limits.processes.is_some() {
                warnings.push("limits.processes is not enforced on a cluster (a pod has no such field; docs/cluster.md)".to_owned());
            }
            Ok(Preflight { local_image: None, warnings })
        }
    }
}

/// Before anything is created: the sandbox's place can be reached (a
/// cluster that answers, whose RuntimeClass runs gVisor; a local sandbox
/// has nothing to reach).
pub async fn check_reachable(resolved: &ResolvedProfile) -> Result<()> {
    match &resolved.backend {
        Backend::Podman => Ok(()),
        Backend::Kubernetes(config) => {
            let cluster = cluster::connect(config).await?;
            cluster.check_runtime_class(&config.runtime_class).await?;
            Ok(())
        }
    }
}
