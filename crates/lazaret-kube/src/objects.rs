//! The objects a domain becomes on a cluster: one agent-sandbox `Sandbox`
//! (`agents.x-k8s.io/v1beta1`) per domain, named and labelled from the
//! domain hash, whose pod runs under the profile's gVisor RuntimeClass with
//! nothing it does not need (no service-account token, no service links,
//! no privilege gain, SETUID/SETGID/NET_RAW dropped, the profile's limits),
//! and whose volume claim is the State Anchor.
//!
//! Invariants: pure (no I/O), so the objects are golden-tested; no secret
//! and no environment of the profile is ever written here (API objects end
//! up in etcd); every object carries [`DOMAIN_LABEL`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSecurityContext,
    PodSpec, ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use lazaret_core::config::{OUTBOX_IN_CONTAINER, TRANSFER_IN_CONTAINER};
use lazaret_core::limits::Limits;
use serde::{Deserialize, Serialize};

/// The label every object of a domain carries: its domain hash.
pub const DOMAIN_LABEL: &str = "lazaret.dev/domain";
/// The profile's name, on the pod.
pub const PROFILE_LABEL: &str = "lazaret.dev/profile";
/// `app.kubernetes.io/managed-by`: `lazaret`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The agent's container in the pod.
pub const AGENT_CONTAINER: &str = "agent";
/// Where the State Anchor's claim is mounted in the seeding init container.
const STATE_MOUNT: &str = "/lazaret-state";
/// The memory-backed directory for what a session brings over exec stdin
/// (its credential, TLS material, the escalation relay's socket).
pub const RUN_DIR: &str = lazaret_core::config::IN_CONTAINER_ROOT;
/// The size limit of the agent's outbox: twice the largest bundle the host
/// accepts, so that git can write a new bundle beside the old one.
const OUTBOX_SIZE: &str = "2Gi";

/// How the seeding init container's termination message starts; the
/// indices of the parts it seeded follow, separated by spaces.
pub const SEEDED_PREFIX: &str = "lazaret-seeded";
/// The seeding init container.
pub const SEED_CONTAINER: &str = "seed";

/// The parts a seeding container's termination `message` says it seeded
/// in this pod; `None` for a message it cannot have written.
pub fn seeded_parts(message: &str) -> Option<Vec<usize>> {
    let mut words = message.trim_end_matches('\n').split(' ');
    if words.next()? != SEEDED_PREFIX {
        return None;
    }
    words.map(|word| word.parse().ok()).collect()
}

/// `Sandbox.spec.operatingMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatingMode {
    Running,
    Suspended,
}

/// An agent-sandbox `Sandbox` (`agents.x-k8s.io/v1beta1`), the fields
/// Lazaret writes or reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: SandboxSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SandboxStatus>,
}

/// `Sandbox.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    pub pod_template: PodTemplate,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<ClaimTemplate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_mode: Option<OperatingMode>,
}

/// `Sandbox.spec.podTemplate`: only labels and annotations of its metadata
/// are used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodTemplate {
    pub metadata: PodMetadata,
    pub spec: PodSpec,
}

/// Labels and annotations of a template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `Sandbox.spec.volumeClaimTemplates[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimTemplate {
    pub metadata: ClaimMetadata,
    pub spec: PersistentVolumeClaimSpec,
}

/// A claim template's name and labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimMetadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `Sandbox.status`, the fields Lazaret reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub pod_ips: Vec<String>,
    #[serde(default)]
    pub node_name: Option<String>,
}

impl Sandbox {
    /// Whether the controller reports the `Ready` condition true.
    pub fn is_ready(&self) -> bool {
        self.condition("Ready")
    }

    /// Whether the condition `kind` is reported true.
    pub fn condition(&self, kind: &str) -> bool {
        self.status
            .as_ref()
            .is_some_and(|status| status.conditions.iter().any(|condition| condition.type_ == kind && condition.status == "True"))
    }
}

namespaced_resource!(Sandbox, "agents.x-k8s.io", "v1beta1", "Sandbox", "sandboxes");

/// Everything a domain's `Sandbox` is made from: the domain, its profile's
/// image, persistent directories and limits, and the profile's
/// `backend.kubernetes` table.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPlan {
    pub domain_hash: String,
    pub profile: String,
    pub namespace: String,
    pub image: String,
    /// `Never` on a cluster whose images are loaded by hand (the test
    /// cluster), `IfNotPresent` otherwise.
    pub image_pull_policy: String,
    pub runtime_class: String,
    /// `None`: the cluster's default StorageClass.
    pub storage_class: Option<String>,
    /// The State Anchor's claim, as a quantity (`10Gi`).
    pub state_size: String,
    /// Absolute paths in the sandbox kept across restarts, each seeded from
    /// the image once.
    pub persistent_dirs: Vec<String>,
    /// Each persistent directory's seed epoch (missing: 0). The seeding init
    /// container seeds a directory again, from the image, when its epoch is
    /// not the one it last seeded: `lazaret state reset` raises it.
    pub seed_epochs: Vec<u64>,
    pub limits: Limits,
}

/// `lazaret-<hash>`: a DNS label, the same for every coordinator of the
/// domain (so that creating it is the lock).
pub fn sandbox_name(domain_hash: &str) -> String {
    format!("lazaret-{domain_hash}")
}

/// The labels of every object of the domain.
pub fn domain_labels(domain_hash: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(DOMAIN_LABEL.to_owned(), domain_hash.to_owned()), (MANAGED_BY_LABEL.to_owned(), "lazaret".to_owned())])
}

/// The domain's `Sandbox`, running.
pub fn sandbox(plan: &SandboxPlan) -> Sandbox {
    let labels = domain_labels(&plan.domain_hash);
    let mut pod_labels = labels.clone();
    pod_labels.insert(PROFILE_LABEL.to_owned(), plan.profile.clone());
    let mut mounts = vec![
        VolumeMount { name: "workspace".into(), mount_path: "/workspace".into(), ..VolumeMount::default() },
        VolumeMount { name: "run".into(), mount_path: RUN_DIR.into(), ..VolumeMount::default() },
        VolumeMount { name: "transfer".into(), mount_path: TRANSFER_IN_CONTAINER.into(), ..VolumeMount::default() },
        VolumeMount { name: "outbox".into(), mount_path: OUTBOX_IN_CONTAINER.into(), ..VolumeMount::default() },
    ];
    for (index, dir) in plan.persistent_dirs.iter().enumerate() {
        mounts.push(VolumeMount {
            name: "state".into(),
            mount_path: dir.clone(),
            sub_path: Some(state_subdir(index)),
            ..VolumeMount::default()
        });
    }
    let keeps_dirs = !plan.persistent_dirs.is_empty();
    let mut volumes = vec![
        Volume { name: "workspace".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
        // Memory-backed: what comes over exec stdin never reaches a disk.
        Volume {
            name: "run".into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), size_limit: Some(Quantity("16Mi".into())) }),
            ..Volume::default()
        },
        // The agent branch's bundles (`lazaret_coordinator::git_sentry::pod`):
        // on the node's disk, as a repository's history may not fit in memory.
        // The outbox, which the agent fills, is capped; the transfer
        // directory only holds what the host sent.
        Volume { name: "transfer".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
        Volume {
            name: "outbox".into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: None, size_limit: Some(Quantity(OUTBOX_SIZE.into())) }),
            ..Volume::default()
        },
    ];
    if keeps_dirs {
        volumes.push(Volume {
            name: "state".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: state_claim_name(&plan.domain_hash),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    let agent = Container {
        name: AGENT_CONTAINER.into(),
        image: Some(plan.image.clone()),
        image_pull_policy: Some(plan.image_pull_policy.clone()),
        command: Some(vec!["sleep".into(), "infinity".into()]),
        working_dir: Some("/workspace".into()),
        security_context: Some(container_security()),
        resources: resources(&plan.limits),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let spec = PodSpec {
        runtime_class_name: Some(plan.runtime_class.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        termination_grace_period_seconds: Some(2),
        security_context: Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
            ..PodSecurityContext::default()
        }),
        init_containers: keeps_dirs.then(|| vec![seed_container(plan)]),
        containers: vec![agent],
        volumes: Some(volumes),
        ..PodSpec::default()
    };
    Sandbox {
        api_version: "agents.x-k8s.io/v1beta1".into(),
        kind: "Sandbox".into(),
        metadata: ObjectMeta {
            name: Some(sandbox_name(&plan.domain_hash)),
            namespace: Some(plan.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: SandboxSpec {
            pod_template: PodTemplate { metadata: PodMetadata { labels: pod_labels }, spec },
            // The State Anchor: a claim only for a profile that keeps
            // directories (a claim binds a volume, which takes a provisioner).
            volume_claim_templates: if keeps_dirs { vec![state_claim(plan, labels)] } else { Vec::new() },
            operating_mode: Some(OperatingMode::Running),
        },
        status: None,
    }
}

/// The State Anchor's claim template, named `state`.
fn state_claim(plan: &SandboxPlan, labels: BTreeMap<String, String>) -> ClaimTemplate {
    ClaimTemplate {
        metadata: ClaimMetadata { name: "state".into(), labels },
        spec: PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: plan.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(plan.state_size.clone()))])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        },
    }
}

/// The claim agent-sandbox makes from the `state` template:
/// `<template>-<sandbox>`.
pub fn state_claim_name(domain_hash: &str) -> String {
    format!("state-{}", sandbox_name(domain_hash))
}

/// Where the persistent directories' parts live in the State Anchor.
const STATE_DIRS: &str = "dirs";

/// The State Anchor's directory for the `index`th persistent directory.
fn state_subdir(index: usize) -> String {
    format!("{STATE_DIRS}/{index}")
}

/// No privilege gain, and the capabilities an agent never needs dropped.
fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities { add: None, drop: Some(vec!["SETUID".into(), "SETGID".into(), "NET_RAW".into()]) }),
        ..SecurityContext::default()
    }
}

/// The profile's limits as requests = limits (so the pod is `Guaranteed`);
/// `processes` has no pod-level field (the kubelet's `podPidsLimit` is the
/// node's), see docs/cluster.md.
fn resources(limits: &Limits) -> Option<ResourceRequirements> {
    let mut quantities = BTreeMap::new();
    if let Some(cpus) = limits.cpus {
        quantities.insert("cpu".to_owned(), Quantity(format!("{}m", (cpus * 1000.0).round() as u64)));
    }
    if let Some(memory) = limits.memory {
        quantities.insert("memory".to_owned(), Quantity(memory.to_string()));
    }
    (!quantities.is_empty()).then(|| ResourceRequirements {
        limits: Some(quantities.clone()),
        requests: Some(quantities),
        ..ResourceRequirements::default()
    })
}

/// Seeds each persistent directory's part of the State Anchor from the
/// image, once per seed epoch: a part whose marker names its current epoch
/// and directory is left as the agent left it; any other (new, reset since,
/// or a part that now stands for another directory) is emptied and copied
/// from the image. The paths and epochs are arguments, never part of the
/// script; the markers lie beside the parts, outside what the agent's
/// container mounts. The indices it seeded go to the termination message
/// ([`SEEDED_PREFIX`], read by [`seeded_parts`]).
fn seed_container(plan: &SandboxPlan) -> Container {
    // $1 is where the State Anchor's directory parts are (STATE_MOUNT /
    // STATE_DIRS, as `state_subdir` names them), then each directory and
    // its epoch.
    const SCRIPT: &str = r#"set -eu
parts=$1
shift
index=0
seeded=
while [ "$#" -ge 2 ]; do
  dir=$1
  epoch=$2
  shift 2
  part=$parts/$index
  want="$epoch $dir"
  have=
  if [ -f "$part.seeded" ]; then
    have=$(cat "$part.seeded")
    # An empty marker is of before epochs: epoch 0 of its directory.
    if [ -z "$have" ]; then have="0 $dir"; fi
  fi
  if [ "$have" != "$want" ]; then
    rm -rf "$part.seeded"
    rm -rf "$part"
    mkdir -p "$part"
    if [ -d "$dir" ]; then cp -a "$dir/." "$part/"; fi
    printf '%s\n' "$want" > "$part.seeded"
    seeded="$seeded $index"
  fi
  index=$((index + 1))
done
printf 'lazaret-seeded%s\n' "$seeded" > /dev/termination-log || true
"#;
    let mut command =
        vec!["sh".to_owned(), "-c".to_owned(), SCRIPT.to_owned(), "lazaret-seed".to_owned(), format!("{STATE_MOUNT}/{STATE_DIRS}")];
    for (index, dir) in plan.persistent_dirs.iter().enumerate() {
        command.push(dir.clone());
        command.push(plan.seed_epochs.get(index).copied().unwrap_or(0).to_string());
    }
    Container {
        name: SEED_CONTAINER.into(),
        image: Some(plan.image.clone()),
        image_pull_policy: Some(plan.image_pull_policy.clone()),
        command: Some(command),
        security_context: Some(container_security()),
        resources: resources(&plan.limits),
        volume_mounts: Some(vec![VolumeMount { name: "state".into(), mount_path: STATE_MOUNT.into(), ..VolumeMount::default() }]),
        ..Container::default()
    }
}
