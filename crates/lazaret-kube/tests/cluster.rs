//! The backend against a real single-node Kubernetes (issue 32), started by
//! `tests/run cluster` with `scripts/cluster` (containerd, the gVisor shim,
//! the agent-sandbox controller, Cilium's CRDs; no Cilium agent). Built only
//! with the `cluster-tests` feature; each test works in a namespace of its
//! own and tears it down.
//!
//! Environment (set by `tests/run cluster`): what
//! `lazaret_test_support::cluster` reads, and `LAZARET_TEST_ETCDCTL` and
//! `LAZARET_TEST_ETCD_ENDPOINT`, to read every key and value the cluster
//! stored.

use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use lazaret_core::egress::EgressRule;
use lazaret_kube::egress::{cilium_policy, no_egress_policy, CiliumNetworkPolicy};
use lazaret_kube::objects::{sandbox, OperatingMode};
use lazaret_kube::Error;
use lazaret_test_support::cluster::{contains, etcd_dump, random_hex, Scratch, GONE, READY};

#[tokio::test(flavor = "multi_thread")]
async fn a_domain_runs_under_gvisor_and_bytes_cross_exec_exactly() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&[]);
    let pod = scratch.running(&plan).await;
    let dmesg = scratch.shell(&pod, "dmesg", b"").await;
    assert!(dmesg.contains("gVisor"), "the pod's kernel is gVisor's: {dmesg}");
    // What the agent branch's bundles take: bytes in over stdin, out over
    // stdout, unchanged (every byte value, 1 MiB).
    let payload: Vec<u8> = (0..1 << 20).map(|index: u32| (index.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    scratch.shell(&pod, "cat > /workspace/blob", &payload).await;
    let output = scratch.cluster.exec(&pod, &["cat", "/workspace/blob"], b"").await.expect("exec");
    assert!(output.stdout == payload, "{} bytes came back, {} went in", output.stdout.len(), payload.len());
    let failed = scratch.cluster.exec(&pod, &["sh", "-c", "echo to-stderr >&2; exit 3"], b"").await.expect("exec");
    assert_eq!(failed.code, Some(3));
    assert_eq!(failed.stderr, b"to-stderr\n");
    // A command that ends without reading its input ends the exec with its
    // status: the input left over is dropped, not waited on, and the
    // stream the pod then resets is no failure. (Input past what the
    // connection buffers cannot be helped: the kube client reads nothing,
    // the status included, while its send waits; callers bound their execs.
    // 256 KiB did not always fit on a loaded machine: one run in many
    // waited past the minute. 64 KiB is what one frame of the client holds.)
    let unread = vec![b'x'; 64 << 10];
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), scratch.cluster.exec(&pod, &["true"], &unread)).await;
    assert_eq!(ended.expect("the exec ends with its command").expect("exec").code, Some(0));
    // Past its bound, output ends the exec with an error naming it.
    let flood =
        scratch.cluster.exec_streaming(&pod, &["head", "-c", "300000", "/dev/zero"], tokio::io::empty(), tokio::io::sink(), 100_000).await;
    assert!(flood.expect_err("bounded").to_string().contains("printed more than 100000 bytes"));
    // The pod holds what the security model says, as the kubelet ran it.
    let status = scratch.shell(&pod, "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", b"").await;
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    let effective = status.lines().find_map(|line| line.strip_prefix("CapEff:\t")).expect("CapEff");
    let effective = u64::from_str_radix(effective.trim(), 16).expect("hex");
    for (bit, name) in [(6, "SETGID"), (7, "SETUID"), (13, "NET_RAW")] {
        assert_eq!(effective & (1 << bit), 0, "{name} is dropped: {status}");
    }
    let token = scratch.cluster.exec(&pod, &["ls", "/var/run/secrets/kubernetes.io/serviceaccount"], b"").await.expect("exec");
    assert_ne!(token.code, Some(0), "no service-account token is mounted");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    assert_eq!(scratch.cluster.domain_objects(&plan.domain_hash).await.expect("list"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn creating_the_sandbox_is_the_domains_lock() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&[]);
    let object = sandbox(&plan);
    // Two coordinators at once: exactly one gets the domain.
    let (first, second) = tokio::join!(scratch.cluster.create_sandbox(&object), scratch.cluster.create_sandbox(&object));
    let held = [&first, &second].iter().filter(|result| matches!(result, Err(Error::Held { .. }))).count();
    assert!(first.is_ok() != second.is_ok() && held == 1, "one creates, one is told the domain is held: {first:?} / {second:?}");
    let again = scratch.cluster.create_sandbox(&object).await.expect_err("held");
    let message = again.to_string();
    assert!(message.contains(&format!("lazaret-{}", plan.domain_hash)) && message.contains("another coordinator"), "{message}");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    // Released, the domain can be taken again.
    scratch.cluster.create_sandbox(&object).await.expect("create after teardown");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_class_that_is_not_gvisor_is_refused() {
    let scratch = Scratch::new().await;
    let name = format!("lzt-runc-{}", random_hex(4));
    let classes: Api<RuntimeClass> = Api::all(scratch.cluster.client().clone());
    let class = RuntimeClass {
        metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
        handler: "runc".into(),
        ..RuntimeClass::default()
    };
    classes.create(&PostParams::default(), &class).await.expect("create the class");
    let refused = scratch.cluster.check_runtime_class(&name).await.expect_err("runc is refused");
    assert!(matches!(&refused, Error::NotGvisor { handler, .. } if handler == "runc"), "{refused}");
    assert!(refused.to_string().contains(&name), "{refused}");
    let missing = scratch.cluster.check_runtime_class("lzt-no-such-class").await.expect_err("missing");
    assert!(matches!(&missing, Error::NoRuntimeClass(class) if class == "lzt-no-such-class"), "{missing}");
    scratch.cluster.check_runtime_class("gvisor").await.expect("gvisor runs gVisor");
    classes.delete(&name, &DeleteParams::default()).await.expect("delete the class");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_egress_policies_are_accepted_by_the_api_and_match_the_golden_file() {
    let scratch = Scratch::new().await;
    let hash = "0123456789ab";
    let allowlist: Vec<EgressRule> = ["github.com", "*.npmjs.org", "203.0.113.0/24", "10.1.0.0/16", "2001:db8::/32", "github.com"]
        .iter()
        .map(|entry| entry.parse().expect(entry))
        .collect();
    let policy = cilium_policy(hash, &scratch.namespace, &allowlist);
    scratch.cluster.apply_cilium_policy(&policy).await.expect("Cilium's CRD accepts the policy");
    // What the API server stored is what the golden file holds.
    let policies: Api<CiliumNetworkPolicy> = Api::namespaced(scratch.cluster.client().clone(), &scratch.namespace);
    let stored = policies.get(&lazaret_kube::egress::policy_name(hash)).await.expect("get");
    let golden: serde_json::Value = serde_json::from_str(include_str!("golden/cilium-policy.json")).expect("golden");
    assert_eq!(serde_json::to_value(&stored.spec).expect("json"), golden["spec"], "the stored policy is the golden one");
    // The CRD's schema is checked, not just stored: a misspelt field (which
    // an enforcer would never see) is refused under strict validation.
    let mut misspelt = serde_json::to_value(&policy).expect("json");
    misspelt["spec"]["egress"][1]["toFQDN"] = misspelt["spec"]["egress"][1]["toFQDNs"].take();
    let refused = policies
        .patch(&lazaret_kube::egress::policy_name(hash), &PatchParams::apply("lzt").force().validation_strict(), &Patch::Apply(&misspelt))
        .await
        .expect_err("a misspelt field is refused");
    assert!(refused.to_string().contains("toFQDN"), "{refused}");
    // `net allow`/`net deny` re-apply the whole policy: the stored one follows.
    let narrower = cilium_policy(hash, &scratch.namespace, &allowlist[..1]);
    scratch.cluster.apply_cilium_policy(&narrower).await.expect("update");
    let stored = policies.get(&lazaret_kube::egress::policy_name(hash)).await.expect("get");
    assert_eq!(stored.spec, narrower.spec);
    // A profile without egress: a plain NetworkPolicy denying all of it.
    scratch.cluster.apply_network_policy(&no_egress_policy(hash, &scratch.namespace)).await.expect("NetworkPolicy");
    scratch.cluster.delete_domain(hash, GONE).await.expect("teardown");
    assert_eq!(scratch.cluster.domain_objects(hash).await.expect("list"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn persistent_directories_are_seeded_once_and_survive_suspend_and_resume() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&["/root", "/usr/local"]);
    let host = tempfile::tempdir().expect("tempdir");
    let volume = scratch.volume_for(&plan, host.path()).await;
    let pod = scratch.running(&plan).await;
    // Seeded from the image: /usr/local has the image's bin/.
    assert_eq!(scratch.shell(&pod, "ls -A /usr/local", b"").await, "bin\n", "seeded from the image");
    scratch.shell(&pod, "echo kept > /root/kept && rm -r /usr/local/bin && echo 1 > /usr/local/mine", b"").await;
    scratch.cluster.set_operating_mode(&plan.domain_hash, OperatingMode::Suspended).await.expect("suspend");
    scratch.cluster.wait_no_pod(&plan.domain_hash, GONE).await.expect("the pod stops");
    let suspended = scratch.cluster.sandbox(&plan.domain_hash).await.expect("get").expect("the Sandbox stays");
    assert_eq!(suspended.spec.operating_mode, Some(OperatingMode::Suspended));
    scratch.cluster.set_operating_mode(&plan.domain_hash, OperatingMode::Running).await.expect("resume");
    let pod = scratch.cluster.wait_ready(&plan.domain_hash, READY).await.expect("ready again");
    // Kept, and not seeded over: what the agent removed stays removed.
    assert_eq!(scratch.shell(&pod, "cat /root/kept; ls -A /usr/local", b"").await, "kept\nmine\n");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    assert_eq!(scratch.cluster.domain_objects(&plan.domain_hash).await.expect("list"), Vec::<String>::new());
    scratch.delete_volume(&volume).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_sent_over_exec_stdin_is_in_no_api_object() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&[]);
    // A marker put into an API object on purpose: the search must find it,
    // or it proves nothing.
    let marker = format!("lzt-marker-{}", random_hex(8));
    let mut object = sandbox(&plan);
    object.metadata.annotations = Some([("lazaret.dev/test-marker".to_owned(), marker.clone())].into());
    scratch.cluster.check_runtime_class("gvisor").await.expect("gvisor");
    scratch.cluster.create_sandbox(&object).await.expect("create");
    let pod = scratch.cluster.wait_ready(&plan.domain_hash, READY).await.expect("ready");
    let credential = format!("lzt-credential-{}", random_hex(16));
    scratch.shell(&pod, "umask 077; cat > /run/lazaret/credential", credential.as_bytes()).await;
    assert_eq!(scratch.shell(&pod, "cat /run/lazaret/credential", b"").await, credential);
    // Memory-backed: on the node, the volume behind /run/lazaret is a tmpfs.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(scratch.cluster.client().clone(), &scratch.namespace);
    let uid = pods.get(&pod).await.expect("get the pod").metadata.uid.expect("uid");
    let suffix = format!("/pods/{uid}/volumes/kubernetes.io~empty-dir/run");
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    let backing = mounts.lines().find(|line| line.split(' ').nth(1).is_some_and(|path| path.ends_with(&suffix)));
    assert!(backing.is_some_and(|line| line.split(' ').nth(2) == Some("tmpfs")), "the run volume is a tmpfs on the node: {backing:?}");
    let dump = etcd_dump();
    assert!(contains(&dump, &marker), "the search finds what an API object holds ({} bytes searched)", dump.len());
    assert!(!contains(&dump, &credential), "the credential is in etcd");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    assert!(!contains(&etcd_dump(), &credential));
}
