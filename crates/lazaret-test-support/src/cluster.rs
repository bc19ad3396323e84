//! The cluster suites' support (feature `cluster`): a namespace of a test's
//! own on the real single-node Kubernetes that `tests/run cluster` starts
//! with `scripts/cluster`, the plan of a domain's `Sandbox` there, and
//! running commands in its pod.
//!
//! Environment (set by `tests/cluster/run`): `LAZARET_TEST_KUBECONFIG`, the
//! cluster's admin kubeconfig; `LAZARET_TEST_CLUSTER_IMAGE`, an image loaded
//! into the cluster (default: Lazaret's default image).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Namespace, ObjectReference, PersistentVolume, PersistentVolumeSpec, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use lazaret_core::limits::Limits;
use lazaret_kube::cluster::Cluster;
use lazaret_kube::objects::{sandbox, state_claim_name, SandboxPlan};

/// How long a test waits for a pod to be ready.
pub const READY: Duration = Duration::from_secs(180);
/// How long a test waits for a domain's objects to be gone.
pub const GONE: Duration = Duration::from_secs(120);

/// The test cluster's admin kubeconfig.
pub fn kubeconfig() -> PathBuf {
    std::env::var_os("LAZARET_TEST_KUBECONFIG")
        .map(PathBuf::from)
        .expect("LAZARET_TEST_KUBECONFIG: the cluster suite runs from `tests/run cluster`, which starts the cluster")
}

/// The image the test cluster was given.
pub fn image() -> String {
    std::env::var("LAZARET_TEST_CLUSTER_IMAGE").unwrap_or_else(|_| crate::DEFAULT_IMAGE.to_owned())
}

/// `bytes` random bytes as hex: names no other test uses.
pub fn random_hex(bytes: usize) -> String {
    lazaret_core::ids::random_hex(bytes).expect("random bytes")
}

/// The plan of a bench's domain `domain_hash` in `namespace`: profile
/// `bench`, the cluster's defaults for limits and storage, no State Anchor.
pub fn bench_plan(namespace: &str, image: &str, domain_hash: String) -> SandboxPlan {
    SandboxPlan {
        domain_hash,
        profile: "bench".into(),
        namespace: namespace.into(),
        image: image.into(),
        image_pull_policy: "Never".into(),
        runtime_class: "gvisor".into(),
        storage_class: None,
        state_size: "1Gi".into(),
        persistent_dirs: Vec::new(),
        seed_epochs: Vec::new(),
        limits: Limits::default(),
    }
}

/// A namespace of the test's own, deleted (with everything in it) on drop.
pub struct Scratch {
    pub cluster: Cluster,
    pub namespace: String,
}

impl Scratch {
    /// A fresh namespace, once its default service account exists.
    pub async fn new() -> Scratch {
        let namespace = format!("lzt-{}", random_hex(4));
        let admin = Cluster::connect(&kubeconfig(), None, "default").await.expect("connect");
        let namespaces: Api<Namespace> = Api::all(admin.client().clone());
        let object = Namespace { metadata: ObjectMeta { name: Some(namespace.clone()), ..ObjectMeta::default() }, ..Namespace::default() };
        namespaces.create(&PostParams::default(), &object).await.expect("create the namespace");
        // Pods wait for the namespace's default service account.
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.client().clone(), &namespace);
        for _ in 0..300 {
            if accounts.get_opt("default").await.expect("get the service account").is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let cluster = Cluster::connect(&kubeconfig(), None, &namespace).await.expect("connect");
        Scratch { cluster, namespace }
    }

    /// The plan of a new domain in this namespace (profile `default`, the
    /// test image, RuntimeClass `gvisor`, 512 MiB and one CPU).
    pub fn plan(&self, persistent_dirs: &[&str]) -> SandboxPlan {
        SandboxPlan {
            domain_hash: random_hex(6),
            profile: "default".into(),
            namespace: self.namespace.clone(),
            image: image(),
            image_pull_policy: "Never".into(),
            runtime_class: "gvisor".into(),
            storage_class: Some("lazaret-test-local".into()),
            state_size: "1Gi".into(),
            persistent_dirs: persistent_dirs.iter().map(|dir| dir.to_string()).collect(),
            seed_epochs: Vec::new(),
            limits: Limits { memory: Some(512 << 20), processes: None, cpus: Some(1.0) },
        }
    }

    /// A host directory as the volume the plan's claim binds to (the test
    /// cluster has no provisioner).
    pub async fn volume_for(&self, plan: &SandboxPlan, host: &std::path::Path) -> String {
        let name = format!("lzt-{}", plan.domain_hash);
        let volume = PersistentVolume {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            spec: Some(PersistentVolumeSpec {
                capacity: Some([("storage".to_owned(), Quantity(plan.state_size.clone()))].into()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                persistent_volume_reclaim_policy: Some("Retain".into()),
                storage_class_name: Some("lazaret-test-local".into()),
                host_path: Some(HostPathVolumeSource { path: host.display().to_string(), type_: Some("Directory".into()) }),
                claim_ref: Some(ObjectReference {
                    namespace: Some(self.namespace.clone()),
                    name: Some(state_claim_name(&plan.domain_hash)),
                    ..ObjectReference::default()
                }),
                ..PersistentVolumeSpec::default()
            }),
            ..PersistentVolume::default()
        };
        let volumes: Api<PersistentVolume> = Api::all(self.cluster.client().clone());
        volumes.create(&PostParams::default(), &volume).await.expect("create the volume");
        name
    }

    pub async fn delete_volume(&self, name: &str) {
        let volumes: Api<PersistentVolume> = Api::all(self.cluster.client().clone());
        volumes.delete(name, &DeleteParams::default()).await.expect("delete the volume");
    }

    /// Creates the plan's sandbox and waits for its pod: its name.
    pub async fn running(&self, plan: &SandboxPlan) -> String {
        self.cluster.check_runtime_class(&plan.runtime_class).await.expect("the runtime class runs gVisor");
        self.cluster.create_sandbox(&sandbox(plan)).await.expect("create the Sandbox");
        self.cluster.wait_ready(&plan.domain_hash, READY).await.expect("the pod is ready")
    }

    /// The domain's `CiliumNetworkPolicy` as the API server stores it.
    pub async fn stored_cilium_policy(&self, domain_hash: &str) -> Option<lazaret_kube::egress::CiliumNetworkPolicy> {
        let policies: Api<lazaret_kube::egress::CiliumNetworkPolicy> = Api::namespaced(self.cluster.client().clone(), &self.namespace);
        policies.get_opt(&lazaret_kube::egress::policy_name(domain_hash)).await.expect("get the policy")
    }

    /// `sh -c script` in the pod, which must exit 0: its stdout.
    pub async fn shell(&self, pod: &str, script: &str, stdin: &[u8]) -> String {
        let output = self.cluster.exec(pod, &["sh", "-c", script], stdin).await.expect("exec");
        assert_eq!(output.code, Some(0), "`{script}`: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("utf-8")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig())
            .args(["delete", "namespace", &self.namespace, "--wait=false", "--ignore-not-found"])
            .output();
    }
}

/// Every key and value the test cluster's etcd holds, as one text
/// (`LAZARET_TEST_ETCDCTL`, `LAZARET_TEST_ETCD_ENDPOINT`): where a secret
/// that reached any object would be.
pub fn etcd_dump() -> Vec<u8> {
    let etcdctl = std::env::var("LAZARET_TEST_ETCDCTL").expect("LAZARET_TEST_ETCDCTL");
    let endpoint = std::env::var("LAZARET_TEST_ETCD_ENDPOINT").expect("LAZARET_TEST_ETCD_ENDPOINT");
    let output =
        Command::new(etcdctl).env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "get", "", "--prefix"]).output().expect("etcdctl");
    assert!(output.status.success(), "etcdctl: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle.as_bytes())
}
