//! Timings of Host Escalation from a pod through the relay, for
//! `tests/bench cluster` (never a test: see docs/performance.md). Prints one
//! line per sample: `escalate SECONDS` (one exec that runs
//! `lazaret-escalate -- true` in the pod, asked through the relay of
//! `tests/support/relay.rs` to the real Escalation Socket and auto-approved:
//! what an agent's escalation from a pod waits for) and `exec SECONDS` (the
//! same exec, same input, without the escalation: the baseline).
//!
//! Usage: relay_bench KUBECONFIG NAMESPACE IMAGE ROUNDS (the static
//! `lazaret-escalate` found as `lazaret_coordinator::helper_binaries` finds
//! it, e.g. through `LAZARET_HELPER_DIR`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lazaret_kube::cluster::Cluster;
use lazaret_kube::objects::sandbox;

// Shared with the cluster suite, which uses all of it.
#[allow(dead_code)]
#[path = "../tests/support/relay.rs"]
mod support;

fn fail(message: String) -> ! {
    eprintln!("relay_bench: {message}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [kubeconfig, namespace, image, rounds] = arguments.as_slice() else {
        fail("usage: relay_bench KUBECONFIG NAMESPACE IMAGE ROUNDS".into())
    };
    let rounds: usize = rounds.parse().unwrap_or_else(|_| fail(format!("ROUNDS `{rounds}` is not a number")));
    let cluster = Cluster::connect(&PathBuf::from(kubeconfig), None, namespace).await.unwrap_or_else(|error| fail(error.to_string()));
    let plan = lazaret_test_support::cluster::bench_plan(namespace, image, lazaret_test_support::cluster::random_hex(6));
    cluster.check_runtime_class(&plan.runtime_class).await.unwrap_or_else(|error| fail(error.to_string()));
    cluster.create_sandbox(&sandbox(&plan)).await.unwrap_or_else(|error| fail(error.to_string()));
    let pod = cluster.wait_ready(&plan.domain_hash, Duration::from_secs(300)).await.unwrap_or_else(|error| fail(error.to_string()));
    let root = tempfile::tempdir().unwrap_or_else(|error| fail(error.to_string()));
    let relay = support::Relay::start(&cluster, &pod, &plan.domain_hash, root.path(), &["true".to_owned()]).await;
    let credential = relay.credential();
    let input = format!("{}\n{credential}\n", relay.session_id);
    let baseline = "IFS= read -r id; IFS= read -r credential; exec true";
    for round in 0..rounds + 2 {
        let started = Instant::now();
        let output = support::escalate(&cluster, &pod, &relay.session_id, &credential, &["true"]).await;
        let escalated = started.elapsed();
        if output.code != Some(0) {
            fail(format!("the escalation failed: {}", String::from_utf8_lossy(&output.stderr)));
        }
        let started = Instant::now();
        let output = cluster.exec(&pod, &["sh", "-c", baseline], input.as_bytes()).await.unwrap_or_else(|error| fail(error.to_string()));
        let exec = started.elapsed();
        if output.code != Some(0) {
            fail("the baseline exec failed".into());
        }
        // The first two warm both paths up.
        if round >= 2 {
            println!("escalate {}", escalated.as_secs_f64());
            println!("exec {}", exec.as_secs_f64());
        }
    }
    relay.stop().await;
    cluster.delete_domain(&plan.domain_hash, Duration::from_secs(300)).await.unwrap_or_else(|error| fail(error.to_string()));
}
