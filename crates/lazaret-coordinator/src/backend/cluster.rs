//! A domain whose sandbox is a pod on Kubernetes (a profile's `backend =
//! { kubernetes = ... }`, issue 32): what the coordinator does in place of
//! `podman run`, and undoes at teardown.
//!
//! [`ClusterBackend`] holds what the coordinator knows of it: the
//! profile's cluster, the pod once it runs, the allowlist its policy object
//! is made from, and what the start left for teardown.
//!
//! Start ([`ClusterBackend::start`]), in the background once the control socket
//! serves: the RuntimeClass is checked to run gVisor, the domain's `Sandbox`
//! is created suspended (the cluster-wide lock, with no pod yet: one held
//! by another coordinator is refused and nothing of it touched; one this
//! machine's coordinators made, recorded in the Domain Root, is resumed
//! with the profile's current pod template), the egress policy applied,
//! and only then the `Sandbox` set running; its pod is awaited, the escalation client
//! and its TLS bundle sent in over exec, the relay started
//! (`escalation::relay`, restarted while the domain runs), the agent's
//! repository seeded (`git_sentry::pod`), and the branch then watched from
//! inside the pod, each change exported (`branch_watch_loop`). Sessions
//! exec into the pod themselves (`lazaret pod-exec`).
//!
//! Teardown suspends the `Sandbox` (its pod goes; its claim, the State
//! Anchor, stays) and keeps the record; `lazaret domain rm` ([`remove`])
//! deletes every object of the domain.
//!
//! Invariants: nothing leaves the host but the policy, the `Sandbox` and
//! what goes over exec stdin (bundles, the static client, its TLS bundle;
//! never a credential in an object or on a command line); only a
//! `Sandbox` this machine recorded making is ever changed, suspended or
//! deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lazaret_core::config::{KubernetesBackend, KubernetesEgress, ResolvedProfile};
use lazaret_core::egress::EgressRule;
use lazaret_kube::cluster::Cluster;
use lazaret_kube::objects::{self, OperatingMode, SandboxPlan};
use lazaret_protocol::ContainerState;

use super::{BackendDomain, EgressError, EscalationFiles};
use crate::error::{Context, Result};
use crate::sandbox_exec::PodHandle;
use crate::state_anchor;

/// The Domain Root's record of the `Sandbox` this machine's coordinator
/// created (its UID): a start that finds it still there, under the domain
/// lock, knows it is its own, left by a killed coordinator.
const SANDBOX_RECORD: &str = "cluster-sandbox";
/// The Domain Root's pending holder token: random, written before a
/// creation is tried and removed once [`SANDBOX_RECORD`] is written; the
/// `Sandbox` carries it as [`HOLDER_ANNOTATION`], so one created by a
/// coordinator killed before it wrote the record is still known as this
/// machine's. Nobody sees it before that `Sandbox` exists, so nobody can
/// put it on one of theirs first; it is no secret and guards nothing else.
const HOLDER_RECORD: &str = "cluster-holder";
/// The annotation that carries the holder token.
pub const HOLDER_ANNOTATION: &str = "lazaret.dev/holder";

/// How long the domain's pod may take to be ready.
const POD_READY: Duration = Duration::from_secs(300);
/// How long teardown waits for the domain's objects to be gone.
const DELETE: Duration = Duration::from_secs(120);
/// At most one export a second is started by the branch watcher's word.
const WATCH_EXPORT_GAP: Duration = Duration::from_secs(1);
/// The pause before a branch watcher that ended is started again.
const WATCH_RESTART: Duration = Duration::from_secs(5);
/// How often the branch watcher says it is alive.
const WATCH_HEARTBEAT: Duration = Duration::from_secs(30);
/// The State Anchor's claim.
const STATE_SIZE: &str = "10Gi";
/// Where the escalation client goes in the pod (memory-backed `/run/lazaret`).
const INSTALL_CLIENT: &str =
    "mkdir -p /run/lazaret/bin && cat > /run/lazaret/bin/lazaret-escalate.tmp && chmod 755 /run/lazaret/bin/lazaret-escalate.tmp && \
     mv -f /run/lazaret/bin/lazaret-escalate.tmp /run/lazaret/bin/lazaret-escalate";
const INSTALL_BUNDLE: &str = "mkdir -p /run/lazaret/tls && umask 077 && cat > /run/lazaret/tls/bundle.pem";

/// The kubeconfig a profile names, else `$KUBECONFIG` (its first file),
/// else `~/.kube/config`.
pub fn kubeconfig(backend: &KubernetesBackend) -> Result<PathBuf> {
    if let Some(path) = &backend.kubeconfig {
        return Ok(PathBuf::from(path));
    }
    if let Some(first) =
        std::env::var_os("KUBECONFIG").and_then(|list| std::env::split_paths(&list).find(|path| !path.as_os_str().is_empty()))
    {
        return Ok(first);
    }
    let home = std::env::var_os("HOME").context("neither the profile's kubeconfig, $KUBECONFIG nor $HOME is set")?;
    Ok(Path::new(&home).join(".kube/config"))
}

/// The cluster and namespace of `backend`.
pub async fn connect(backend: &KubernetesBackend) -> Result<Cluster> {
    let path = kubeconfig(backend)?;
    Ok(Cluster::connect(&path, backend.context.as_deref(), &backend.namespace).await?)
}

/// The pod of a domain (the `Sandbox`'s name, which the controller gives its pod).
pub fn pod_name(domain_hash: &str) -> String {
    objects::sandbox_name(domain_hash)
}

/// The `Sandbox` a profile's domain is made from.
pub fn plan(resolved: &ResolvedProfile, backend: &KubernetesBackend) -> SandboxPlan {
    SandboxPlan {
        domain_hash: resolved.domain.domain_hash.clone(),
        profile: resolved.profile.clone(),
        namespace: backend.namespace.clone(),
        image: backend.image.clone().unwrap_or_else(|| resolved.image.clone()),
        image_pull_policy: "IfNotPresent".into(),
        runtime_class: backend.runtime_class.clone(),
        storage_class: backend.storage_class.clone(),
        state_size: STATE_SIZE.into(),
        persistent_dirs: resolved.persistent_dirs.iter().map(|dir| dir.display().to_string()).collect(),
        seed_epochs: Vec::new(),
        limits: resolved.limits,
    }
}

/// A domain's sandbox on a cluster.
pub struct ClusterBackend {
    config: KubernetesBackend,
    /// What the start left for teardown.
    started: Started,
    /// The pod, once it runs: exports and sessions go there.
    pod: std::sync::OnceLock<PodHandle>,
    /// The allowlist the domain's policy object is made from, as `net`
    /// changes it (there is no sidecar).
    egress: tokio::sync::Mutex<ClusterEgress>,
    /// The last refused export: said once, not at every poll.
    last_refusal: tokio::sync::Mutex<Option<String>>,
}

impl ClusterBackend {
    pub fn new(resolved: &ResolvedProfile, config: KubernetesBackend) -> ClusterBackend {
        ClusterBackend {
            config,
            started: Started::default(),
            pod: std::sync::OnceLock::new(),
            egress: tokio::sync::Mutex::new(ClusterEgress::new(resolved)),
            last_refusal: tokio::sync::Mutex::new(None),
        }
    }

    /// The pod, once the sandbox runs.
    pub fn pod(&self) -> Option<&PodHandle> {
        self.pod.get()
    }

    /// How a session joins: the pod, reached as this coordinator reaches it.
    pub fn session_target(&self, resolved: &ResolvedProfile) -> Result<lazaret_protocol::SessionTarget> {
        let path = kubeconfig(&self.config)?;
        let kubeconfig = path.to_str().with_context(|| format!("the kubeconfig path {} is not UTF-8", path.display()))?.to_owned();
        Ok(lazaret_protocol::SessionTarget::Pod {
            kubeconfig,
            context: self.config.context.clone(),
            namespace: self.config.namespace.clone(),
            pod: pod_name(&resolved.domain.domain_hash),
        })
    }

    /// Starts the domain's pod and lets sessions in; or records why it failed.
    pub async fn start(&self, domain: &Arc<impl BackendDomain>, escalation: Option<EscalationFiles>) {
        match start(domain, self, escalation).await {
            Ok(()) => {
                tracing::info!("sandbox running (pod)");
                domain.set_container_state(ContainerState::Running, None);
                crate::memory::release_free_memory();
            }
            Err(error) => {
                tracing::error!(error = %error.chained(), "sandbox failed to start");
                domain.set_container_state(ContainerState::Failed, Some(error.chained()));
            }
        }
    }

    /// One export from the pod ([`crate::git_sentry::pod::export`]: an exec,
    /// which finds out whether anything changed); `None` before the pod
    /// runs, and for a refusal said already (until a different outcome).
    pub async fn export_branch(&self, layout: &crate::git_sentry::GitLayout) -> Option<Result<crate::git_sentry::sync::Export>> {
        let pod = self.pod.get()?;
        let mut last_refusal = self.last_refusal.lock().await;
        let result = crate::git_sentry::pod::export(&pod.cluster, &pod.pod, layout).await;
        let refusal = result.as_ref().err().map(crate::Error::chained);
        if refusal.is_some() && refusal == *last_refusal {
            return None;
        }
        *last_refusal = refusal;
        Some(result)
    }

    /// Applies `request` to the allowlist and the policy object.
    pub async fn egress(
        &self,
        resolved: &ResolvedProfile,
        request: &lazaret_protocol::sidecar::SidecarRequest,
    ) -> std::result::Result<lazaret_protocol::NetworkPolicy, EgressError> {
        change_egress(&self.egress, &self.config, resolved, self.pod.get(), request).await
    }

    /// Teardown's part: the tasks end, and the domain's `Sandbox` (when this
    /// coordinator holds it) is suspended: the pod goes, the claim with the
    /// State Anchor stays, for the next start to resume.
    pub async fn tear_down(&self, resolved: &ResolvedProfile) {
        for task in self.started.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            task.abort();
        }
        let Some(uid) = self.started.held() else { return };
        let hash = &resolved.domain.domain_hash;
        // What the persistent directories hold now, for `state diff` while the
        // domain is down.
        if let (Some(pod), false) = (self.pod.get(), resolved.persistent_dirs.is_empty()) {
            match state_anchor::pod::record_latest(&pod.cluster, &pod.pod, &resolved.domain.domain_dir, &resolved.persistent_dirs).await {
                Ok(()) => tracing::info!("persistent directories listed"),
                Err(error) => {
                    tracing::warn!(error = %error.chained(), "cannot list the persistent directories; `state diff` shows the last listing")
                }
            }
        }
        let suspended = async {
            let cluster = connect(&self.config).await?;
            cluster.set_operating_mode_of(hash, &uid, OperatingMode::Suspended).await?;
            cluster.wait_no_pod(hash, DELETE).await?;
            Ok::<(), crate::Error>(())
        };
        match suspended.await {
            Ok(()) => tracing::info!("the domain's Sandbox is suspended"),
            Err(error) => {
                tracing::error!(error = %error.chained(), "could not suspend the domain's Sandbox; the next start replaces its pod")
            }
        }
    }
}

/// What the start leaves for teardown.
#[derive(Default)]
struct Started {
    /// The UID of the domain's `Sandbox` once this coordinator holds it
    /// (made it, or took over one this machine made): teardown suspends
    /// that one, and no other.
    held: std::sync::Mutex<Option<String>>,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Started {
    fn keep(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(task);
    }

    fn hold(&self, uid: &str) {
        *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(uid.to_owned());
    }

    fn held(&self) -> Option<String> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

async fn start(domain: &Arc<impl BackendDomain>, this: &ClusterBackend, escalation: Option<EscalationFiles>) -> Result<()> {
    let (backend, started) = (&this.config, &this.started);
    let resolved = domain.resolved();
    let hash = &resolved.domain.domain_hash;
    let cluster = connect(backend).await?;
    cluster.check_runtime_class(&backend.runtime_class).await?;
    // The lock first, then the policy: no pod of the domain runs without
    // it, and another coordinator's policy is never overwritten.
    let uid = create(&cluster, resolved, backend, started).await?;
    apply_policy(&cluster, resolved, backend).await?;
    cluster.set_operating_mode_of(hash, &uid, OperatingMode::Running).await?;
    // The pod's image's own command, when this machine has the image (as
    // the test cluster's loaded images are); a shell otherwise.
    let image = backend.image.clone().unwrap_or_else(|| resolved.image.clone());
    let default_command = tokio::spawn(async move { super::sandbox::default_command(&crate::podman::Podman::default(), &image).await });
    let pod = cluster.wait_ready(hash, POD_READY).await?;
    tracing::info!(pod, namespace = %backend.namespace, "pod ready");
    // The static client (the escalation client, and the persistent
    // directories' lister), its bundle and the seed go in side by side.
    let keeps_dirs = !resolved.persistent_dirs.is_empty();
    let client = match &escalation {
        Some(files) => Some(files.client.clone()),
        None if keeps_dirs => static_client(),
        None => None,
    };
    let escalation_ready = async {
        tokio::try_join!(
            async {
                match &client {
                    Some(client) => install(&cluster, &pod, INSTALL_CLIENT, client).await,
                    None => Ok(()),
                }
            },
            async {
                match &escalation {
                    Some(files) => install(&cluster, &pod, INSTALL_BUNDLE, &files.bundle).await,
                    None => Ok(()),
                }
            }
        )?;
        // What the persistent directories hold as seeded, before any
        // session joins (`state diff` compares with it). Without it the
        // domain still runs; `state diff` then says the base is unknown.
        if keeps_dirs && client.is_some() {
            if let Err(error) = record_base(&cluster, &pod, resolved).await {
                tracing::warn!(error = %error.chained(), "cannot list the persistent directories as seeded");
            }
        }
        Ok::<(), crate::Error>(())
    };
    let seeded = async {
        if let Some(layout) = domain.git() {
            crate::git_sentry::pod::seed(&cluster, &pod, layout).await.context("cannot set up the agent's repository in the pod")?;
        }
        Ok::<(), crate::Error>(())
    };
    tokio::try_join!(escalation_ready, seeded)?;
    if let Some(files) = escalation {
        started.keep(tokio::spawn(relay_loop(domain.clone(), cluster.clone(), pod.clone(), files.socket)));
    }
    domain.set_default_command(default_command.await.unwrap_or_else(|_| vec!["/bin/sh".to_owned()]));
    let _ = this.pod.set(PodHandle { cluster: cluster.clone(), pod: pod.clone() });
    if domain.git().is_some() {
        started.keep(tokio::spawn(branch_watch_loop(domain.clone(), cluster, pod)));
    }
    Ok(())
}

/// The branch watcher in the pod: one long-lived exec whose shell reads
/// the agent branch's ref (a loose ref file, else `packed-refs`) with
/// builtins once a second and prints it when it changed, and a `.` line
/// every [`WATCH_HEARTBEAT`] (a watcher whose exec is gone dies at that
/// write, and a host that hears nothing for long starts a new one). A poll
/// by exec costs the cluster an exec each time (kubelet, containerd, runsc:
/// 4 % of a core per idle domain at one every 2 s); this costs one `sleep`
/// a second inside the sandbox.
fn watch_script(branch_ref: &str) -> String {
    let quoted = format!("'{}'", branch_ref.replace('\'', r"'\''"));
    let heartbeat = WATCH_HEARTBEAT.as_secs();
    format!(
        "git_dir=$(git -C /workspace rev-parse --absolute-git-dir 2>/dev/null) || git_dir=/workspace/.git\n\
         ref={quoted}\n\
         last=none\n\
         beat=0\n\
         while :; do\n\
         \x20 tip=\n\
         \x20 if [ -f \"$git_dir/$ref\" ]; then read -r tip < \"$git_dir/$ref\"\n\
         \x20 elif [ -f \"$git_dir/packed-refs\" ]; then\n\
         \x20   while read -r id name; do if [ \"$name\" = \"$ref\" ]; then tip=$id; fi; done < \"$git_dir/packed-refs\"\n\
         \x20 fi\n\
         \x20 if [ \"$tip\" != \"$last\" ]; then echo \"$tip\" || exit 0; last=$tip; fi\n\
         \x20 beat=$((beat + 1))\n\
         \x20 if [ \"$beat\" -ge {heartbeat} ]; then echo . || exit 0; beat=0; fi\n\
         \x20 sleep 1\n\
         done\n"
    )
}

/// Exports the agent branch whenever the watcher in the pod says its ref
/// changed, and keeps the watcher running while the domain does. What the
/// watcher prints is only a nudge (the export itself finds out what
/// changed), read in bounded chunks and acted on at most once a second: a
/// pod cannot make the host export faster than that. A watcher that ends
/// (killed inside, a lost connection) or says nothing for three
/// heartbeats is followed by one export and, after a pause, a new watcher.
async fn branch_watch_loop(domain: Arc<impl BackendDomain>, cluster: Cluster, pod: String) {
    use tokio::io::AsyncReadExt;
    let Some(layout) = domain.git().cloned() else { return };
    let script = watch_script(&layout.branch_ref());
    loop {
        match cluster.exec_attached(&pod, &["sh", "-c", &script]).await {
            Ok(attached) => {
                let (guard, mut stdout) = (attached.guard, attached.stdout);
                drop(attached.stdin);
                let mut chunk = [0u8; 4096];
                while let Ok(Ok(read)) = tokio::time::timeout(WATCH_HEARTBEAT * 3, stdout.read(&mut chunk)).await {
                    if read == 0 {
                        break;
                    }
                    // Heartbeats only: nothing changed.
                    if chunk[..read].iter().all(|byte| matches!(byte, b'.' | b'\n')) {
                        continue;
                    }
                    domain.export_agent_branch().await;
                    crate::memory::release_free_memory();
                    tokio::time::sleep(WATCH_EXPORT_GAP).await;
                }
                drop(guard);
            }
            Err(error) => tracing::warn!(%error, "cannot start the agent branch's watcher"),
        }
        if domain.is_shutting_down() {
            return;
        }
        domain.export_agent_branch().await;
        tokio::time::sleep(WATCH_RESTART).await;
    }
}

/// The domain's egress policy: a `CiliumNetworkPolicy` from the allowlist,
/// or a deny-all `NetworkPolicy`; a policy of the other kind, left by a
/// run before the profile's `egress` changed, is deleted (Cilium adds up
/// the allows of every policy: an old allowlist would stay in force).
async fn apply_policy(cluster: &Cluster, resolved: &ResolvedProfile, backend: &KubernetesBackend) -> Result<()> {
    let hash = &resolved.domain.domain_hash;
    match backend.egress {
        KubernetesEgress::Cilium => {
            cluster.apply_cilium_policy(&lazaret_kube::egress::cilium_policy(hash, &backend.namespace, &resolved.allow_egress)).await?;
            cluster.delete_network_policies(hash).await?;
        }
        KubernetesEgress::None => {
            cluster.apply_network_policy(&lazaret_kube::egress::no_egress_policy(hash, &backend.namespace)).await?;
            cluster.delete_cilium_policies(hash).await?;
        }
    }
    Ok(())
}

/// Creates the domain's `Sandbox`, suspended (no pod). One that exists is
/// another coordinator's (refused, and nothing of its domain is touched),
/// unless this Domain Root recorded creating it: under the domain lock
/// that is this machine's, suspended by the last teardown or left running
/// by a killed coordinator. It is suspended with the profile's current pod
/// template (its claim, the State Anchor, stays) and resumed by the start.
async fn create(cluster: &Cluster, resolved: &ResolvedProfile, backend: &KubernetesBackend, started: &Started) -> Result<String> {
    let hash = &resolved.domain.domain_hash;
    let domain_dir = &resolved.domain.domain_dir;
    let mut plan = plan(resolved, backend);
    plan.seed_epochs = state_anchor::pod::epochs(domain_dir, &resolved.persistent_dirs)?;
    let mut sandbox = objects::sandbox(&plan);
    sandbox.spec.operating_mode = Some(OperatingMode::Suspended);
    sandbox.metadata.annotations = Some([(HOLDER_ANNOTATION.to_owned(), pending_holder_token(domain_dir)?)].into());
    let created = match cluster.create_sandbox(&sandbox).await {
        Err(lazaret_kube::Error::Held { namespace, name }) => {
            let Some(existing) = cluster.sandbox(hash).await? else {
                return Err(lazaret_kube::Error::Held { namespace, name }.into());
            };
            let uid = existing.metadata.uid.clone().unwrap_or_default();
            if !made_here(&existing, domain_dir) {
                return Err(lazaret_kube::Error::Held { namespace, name }.into());
            }
            record_sandbox(domain_dir, &uid)?;
            if existing.spec.volume_claim_templates != sandbox.spec.volume_claim_templates {
                crate::bail!(
                    "the persistent directories of profile `{}` changed since its Sandbox {namespace}/{name} was made, and its volume \
                     claim cannot follow: `lazaret domain rm` (which discards what the agent kept there), then run again",
                    resolved.profile
                );
            }
            tracing::info!(sandbox = name, "resuming the domain's Sandbox");
            cluster.suspend_with_template(existing, &sandbox).await?;
            started.hold(&uid);
            // A killed coordinator's pod ends before one of the current template starts.
            cluster.wait_no_pod(hash, DELETE).await?;
            return Ok(uid);
        }
        other => other?,
    };
    let uid = created.metadata.uid.unwrap_or_default();
    started.hold(&uid);
    record_sandbox(domain_dir, &uid)?;
    Ok(uid)
}

/// Records the UID of the `Sandbox` this machine holds; the pending holder
/// token is then done with.
fn record_sandbox(domain_dir: &Path, uid: &str) -> Result<()> {
    let record = domain_dir.join(SANDBOX_RECORD);
    std::fs::write(&record, uid).with_context(|| format!("cannot record the Sandbox in {}", record.display()))?;
    remove_holder_token(domain_dir)
}

fn remove_holder_token(domain_dir: &Path) -> Result<()> {
    crate::private_dirs::remove_if_present(&domain_dir.join(HOLDER_RECORD))
}

/// The base listing of each persistent directory the pod's seeding
/// container seeded in this pod (`lazaret_coordinator::state_anchor::pod`).
async fn record_base(cluster: &Cluster, pod: &str, resolved: &ResolvedProfile) -> Result<()> {
    let Some(seeded) = cluster.seeded_parts(pod).await? else {
        crate::bail!("the pod's seeding container left no word of what it seeded");
    };
    state_anchor::pod::record_base(cluster, pod, &resolved.domain.domain_dir, &resolved.persistent_dirs, &seeded).await
}

/// The static `lazaret-escalate` (a pod's lister when escalation is off);
/// without it `state diff` cannot list the pod (said in the log).
fn static_client() -> Option<PathBuf> {
    let found = crate::helper_binaries::find("lazaret-escalate")
        .filter(|path| crate::helper_binaries::linkage(path).is_ok_and(|linkage| linkage == crate::helper_binaries::Linkage::Static));
    if found.is_none() {
        tracing::warn!("the static lazaret-escalate binary, which lists the persistent directories in the pod, was not found (build it: scripts/build)");
    }
    found
}

/// Sends `file` into the pod as the stdin of `script`, which must succeed.
async fn install(cluster: &Cluster, pod: &str, script: &str, file: &Path) -> Result<()> {
    let input = tokio::fs::File::open(file).await.with_context(|| format!("cannot open {}", file.display()))?;
    let mut output = Vec::new();
    let command = ["sh", "-c", script];
    let run = cluster.exec_streaming(pod, &command, input, &mut output, 64 << 10);
    let status = tokio::time::timeout(lazaret_core::bounds::SEED, run).await.map_err(|_| crate::Error::TimedOut {
        what: format!("sending {} into Pod {pod}", file.display()),
        bound: lazaret_core::bounds::SEED,
    })??;
    if status.code != Some(0) {
        crate::bail!(
            "sending {} into Pod {pod} failed: {}",
            file.display(),
            lazaret_core::terminal_text::block(String::from_utf8_lossy(&status.stderr).trim())
        );
    }
    Ok(())
}

/// Keeps `lazaret-escalate --relay` running in the pod and its streams
/// connected to the Escalation Socket, starting it again when it ends
/// (a lost connection, a killed relay) while the domain runs.
async fn relay_loop(domain: Arc<impl BackendDomain>, cluster: Cluster, pod: String, socket: PathBuf) {
    loop {
        match cluster.exec_attached(&pod, &["/run/lazaret/bin/lazaret-escalate", "--relay"]).await {
            Ok(attached) => {
                let guard = attached.guard;
                if let Err(error) = crate::escalation::relay::serve(attached.stdout, attached.stdin, socket.clone()).await {
                    tracing::warn!(error = %error.chained(), "the escalation relay ended");
                }
                drop(guard);
            }
            Err(error) => tracing::warn!(error = %error, "cannot start the escalation relay"),
        }
        if domain.is_shutting_down() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The pending holder token: the one a killed coordinator left (its
/// `Sandbox` may carry it), else a new one, written (0600) before use.
fn pending_holder_token(domain_dir: &Path) -> Result<String> {
    let path = domain_dir.join(HOLDER_RECORD);
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
    let token = lazaret_core::ids::random_hex(16).context("cannot make a holder token")?;
    crate::private_dirs::replace_private(&path, token.as_bytes())?;
    Ok(token)
}

/// Whether this machine's coordinators made `existing`: its UID is the one
/// recorded, or it carries the pending holder token (a coordinator killed
/// between the creation and the record).
fn made_here(existing: &objects::Sandbox, domain_dir: &Path) -> bool {
    let uid = existing.metadata.uid.as_deref().unwrap_or_default();
    let recorded = std::fs::read_to_string(domain_dir.join(SANDBOX_RECORD)).ok();
    if !uid.is_empty() && recorded.as_deref().map(str::trim) == Some(uid) {
        return true;
    }
    let token = std::fs::read_to_string(domain_dir.join(HOLDER_RECORD)).ok();
    let carried = existing.metadata.annotations.as_ref().and_then(|annotations| annotations.get(HOLDER_ANNOTATION));
    matches!((token.as_deref().map(str::trim), carried), (Some(token), Some(carried)) if !token.is_empty() && token == carried)
}

/// `lazaret domain rm` of a cluster profile's domain, whose coordinator
/// does not run (the caller holds the domain lock): every object of the
/// domain is deleted (its `Sandbox`, pod, claim and policy) and awaited,
/// and the record goes. A `Sandbox` this machine did not record making is
/// another coordinator's, and is refused. Gives what was deleted.
pub async fn remove(resolved: &ResolvedProfile, backend: &KubernetesBackend) -> Result<Vec<String>> {
    let hash = &resolved.domain.domain_hash;
    let cluster = connect(backend).await?;
    let record = resolved.domain.domain_dir.join(SANDBOX_RECORD);
    let objects = cluster.domain_objects(hash).await?;
    if let Some(existing) = cluster.sandbox(hash).await? {
        let here = made_here(&existing, &resolved.domain.domain_dir);
        let uid = existing.metadata.uid.unwrap_or_default();
        if !here {
            crate::bail!(
                "Sandbox {}/{} was not made by this machine's coordinators (another one holds the domain); nothing was deleted",
                backend.namespace,
                objects::sandbox_name(hash)
            );
        }
        // Only that Sandbox (the API server checks its UID), then what is left.
        cluster.delete_sandbox_of(hash, &uid, DELETE).await?;
    }
    cluster.delete_domain(hash, DELETE).await?;
    crate::cleanup::remove_file(&record);
    remove_holder_token(&resolved.domain.domain_dir)?;
    state_anchor::pod::remove_records(&resolved.domain.domain_dir, &resolved.persistent_dirs)?;
    Ok(objects)
}

/// A cluster domain's egress as `net allow/deny/reload` change it: the
/// allowlist the domain's policy object is made from.
struct ClusterEgress {
    allow: Vec<EgressRule>,
}

impl ClusterEgress {
    fn new(resolved: &ResolvedProfile) -> ClusterEgress {
        ClusterEgress { allow: resolved.allow_egress.clone() }
    }

    /// The allowlist after `request`, or why the cluster cannot do it. A
    /// policy object cannot carve a name out of a wider allow, so a deny
    /// (or revoke) removes an allow entry exactly as written, and is an
    /// error naming the entry otherwise; timed entries, holds and the
    /// sidecar's protections are the local sidecar's.
    fn after(&self, request: &lazaret_protocol::sidecar::SidecarRequest) -> std::result::Result<Vec<EgressRule>, EgressError> {
        use lazaret_protocol::sidecar::SidecarRequest;
        let parse = |entries: &[String]| -> std::result::Result<Vec<EgressRule>, EgressError> {
            entries
                .iter()
                .map(|entry| entry.parse::<EgressRule>().map_err(|reason| EgressError::BadEntry { entry: entry.clone(), reason }))
                .collect()
        };
        let mut allow = self.allow.clone();
        let remove = |allow: &mut Vec<EgressRule>, entries: &[String]| -> std::result::Result<(), EgressError> {
            for entry in parse(entries)? {
                let Some(index) = allow.iter().position(|known| *known == entry) else {
                    return Err(EgressError::NotAnAllowEntry { entry: entry.to_string() });
                };
                allow.remove(index);
            }
            Ok(())
        };
        match request {
            SidecarRequest::Show {} => {}
            SidecarRequest::Allow { for_ms: Some(_), .. } | SidecarRequest::Deny { for_ms: Some(_), .. } => {
                return Err(EgressError::TimedOnCluster)
            }
            SidecarRequest::Allow { entries, .. } => {
                for entry in parse(entries)? {
                    if !allow.contains(&entry) {
                        allow.push(entry);
                    }
                }
            }
            SidecarRequest::Deny { entries, .. } | SidecarRequest::Revoke { entries } => remove(&mut allow, entries)?,
            SidecarRequest::Set { allow: entries, deny, .. } => {
                allow = parse(entries)?;
                remove(&mut allow, deny)?;
            }
            _ => return Err(EgressError::NotOnCluster),
        }
        Ok(allow)
    }

    /// What `net show` says of the allowlist.
    fn policy(&self) -> lazaret_protocol::NetworkPolicy {
        lazaret_protocol::NetworkPolicy {
            allow: self.allow.iter().map(ToString::to_string).collect(),
            deny: Vec::new(),
            learned: Vec::new(),
            upstreams: Vec::new(),
            rules: self.allow.len() as u64,
            private_answers: lazaret_protocol::sidecar::PrivateAnswers::Refuse,
            hold_ms: 0,
            expiring: Vec::new(),
            credentials: Vec::new(),
        }
    }
}

/// Applies `request` to the domain's allowlist and its policy object on
/// the cluster: the new object first, the allowlist only once the API
/// server took it. A profile without egress (`egress = "none"`) takes no
/// allow entry.
async fn change_egress(
    egress: &tokio::sync::Mutex<ClusterEgress>,
    backend: &KubernetesBackend,
    resolved: &ResolvedProfile,
    pod: Option<&PodHandle>,
    request: &lazaret_protocol::sidecar::SidecarRequest,
) -> std::result::Result<lazaret_protocol::NetworkPolicy, EgressError> {
    let mut egress = egress.lock().await;
    let allow = egress.after(request)?;
    if allow != egress.allow {
        if backend.egress == KubernetesEgress::None && !allow.is_empty() {
            return Err(EgressError::NoClusterEgress { profile: resolved.profile.clone() });
        }
        let pod = pod.ok_or(EgressError::PodNotRunning)?;
        let hash = &resolved.domain.domain_hash;
        pod.cluster
            .apply_cilium_policy(&lazaret_kube::egress::cilium_policy(hash, &backend.namespace, &allow))
            .await
            .map_err(EgressError::ClusterRefused)?;
        egress.allow = allow;
    }
    Ok(egress.policy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::sidecar::SidecarRequest;

    fn egress(entries: &[&str]) -> ClusterEgress {
        ClusterEgress { allow: entries.iter().map(|entry| entry.parse().expect("rule")).collect() }
    }

    fn words(rules: &[EgressRule]) -> Vec<String> {
        rules.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn net_changes_become_the_allowlist_of_the_policy_object() {
        let start = egress(&["github.com", "10.0.0.0/8"]);
        let allow = |entries: &[&str]| SidecarRequest::Allow { entries: entries.iter().map(|e| e.to_string()).collect(), for_ms: None };
        let deny = |entries: &[&str]| SidecarRequest::Deny { entries: entries.iter().map(|e| e.to_string()).collect(), for_ms: None };
        assert_eq!(
            words(&start.after(&allow(&["*.example.org", "github.com"])).expect("allow")),
            ["github.com", "10.0.0.0/8", "*.example.org"]
        );
        assert_eq!(words(&start.after(&deny(&["github.com"])).expect("deny")), ["10.0.0.0/8"]);
        let carved = start.after(&deny(&["10.1.0.0/16"])).expect_err("a hole in a wider allow");
        assert!(carved.to_string().contains("10.1.0.0/16"), "{carved}");
        let timed = SidecarRequest::Allow { entries: vec!["example.org".into()], for_ms: Some(1000) };
        assert!(start.after(&timed).is_err());
        assert!(start.after(&allow(&["not a rule!"])).is_err());
        let set = SidecarRequest::Set {
            allow: vec!["a.org".into(), "b.org".into()],
            deny: vec!["b.org".into()],
            private_answers: Default::default(),
        };
        assert_eq!(words(&start.after(&set).expect("set")), ["a.org"]);
        assert_eq!(words(&start.after(&SidecarRequest::Show {}).expect("show")), ["github.com", "10.0.0.0/8"]);
        assert_eq!(start.policy().allow, ["github.com", "10.0.0.0/8"]);
    }
}
