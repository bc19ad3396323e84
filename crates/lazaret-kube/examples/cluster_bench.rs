//! Timings of the backend on a real cluster, for `tests/bench cluster`
//! (never a test: see docs/performance.md). Prints one line per sample:
//! `cold SECONDS` (the domain's `Sandbox` created, its RuntimeClass checked,
//! until `true` ran in its pod: what a first `lazaret run` of a domain waits
//! for) and `join SECONDS` (`true` exec'd in the running pod: what a
//! session joining the domain waits for), and with `scale N`
//! `scale-create`, `scale-scheduled`, `scale-ready` and `scale-teardown
//! SECONDS` for N domains
//! created at once (pods on kwok's fake nodes: the tolerations and node
//! selector are the bench's, never the backend's).
//!
//! Usage: cluster_bench KUBECONFIG NAMESPACE IMAGE ROUNDS [scale N]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Toleration};
use kube::api::{Api, ListParams};
use lazaret_kube::cluster::Cluster;
use lazaret_kube::objects::{sandbox, SandboxPlan};

fn plan(namespace: &str, image: &str, hash: String) -> SandboxPlan {
    lazaret_test_support::cluster::bench_plan(namespace, image, hash)
}

fn fail(message: String) -> ! {
    eprintln!("cluster_bench: {message}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [kubeconfig, namespace, image, rounds, rest @ ..] = arguments.as_slice() else {
        fail("usage: cluster_bench KUBECONFIG NAMESPACE IMAGE ROUNDS [scale N]".into())
    };
    let rounds: usize = rounds.parse().unwrap_or_else(|_| fail(format!("ROUNDS `{rounds}` is not a number")));
    let cluster = Cluster::connect(&PathBuf::from(kubeconfig), None, namespace).await.unwrap_or_else(|error| fail(error.to_string()));
    let timeout = Duration::from_secs(300);
    if let [word, count] = rest {
        if word != "scale" {
            fail(format!("unknown mode `{word}`"));
        }
        let count: usize = count.parse().unwrap_or_else(|_| fail(format!("N `{count}` is not a number")));
        scale(&cluster, namespace, image, count, timeout).await;
        return;
    }
    for round in 0..rounds {
        let plan = plan(namespace, image, format!("b{round:011x}"));
        let start = Instant::now();
        cluster.check_runtime_class(&plan.runtime_class).await.unwrap_or_else(|error| fail(error.to_string()));
        cluster.create_sandbox(&sandbox(&plan)).await.unwrap_or_else(|error| fail(error.to_string()));
        let pod = cluster.wait_ready(&plan.domain_hash, timeout).await.unwrap_or_else(|error| fail(error.to_string()));
        let output = cluster.exec(&pod, &["true"], b"").await.unwrap_or_else(|error| fail(error.to_string()));
        if output.code != Some(0) {
            fail(format!("true exited with {:?}", output.code));
        }
        println!("cold {:.6}", start.elapsed().as_secs_f64());
        // Joins: the first one after the start is left out (warm-up).
        for join in 0..=2 {
            let start = Instant::now();
            let output = cluster.exec(&pod, &["true"], b"").await.unwrap_or_else(|error| fail(error.to_string()));
            if output.code != Some(0) {
                fail(format!("true exited with {:?}", output.code));
            }
            if join > 0 {
                println!("join {:.6}", start.elapsed().as_secs_f64());
            }
        }
        cluster.delete_domain(&plan.domain_hash, timeout).await.unwrap_or_else(|error| fail(error.to_string()));
    }
}

/// `count` domains created at once on kwok's fake nodes, until each
/// `Sandbox`'s pod reports ready, then torn down.
async fn scale(cluster: &Cluster, namespace: &str, image: &str, count: usize, timeout: Duration) {
    let hashes: Vec<String> = (0..count).map(|index| format!("s{index:011x}")).collect();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for hash in &hashes {
        let mut object = sandbox(&plan(namespace, image, hash.clone()));
        let pod = &mut object.spec.pod_template.spec;
        pod.node_selector = Some([("type".to_owned(), "kwok".to_owned())].into());
        pod.tolerations = Some(vec![Toleration {
            key: Some("kwok.x-k8s.io/node".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]);
        let cluster = cluster.clone();
        tasks.spawn(async move { cluster.create_sandbox(&object).await.map(|_| ()) });
    }
    settle(&mut tasks).await;
    println!("scale-create {:.6}", start.elapsed().as_secs_f64());
    // The control plane's part (API server, agent-sandbox controller,
    // scheduler): every Sandbox has a pod bound to a node. Readiness after
    // that is the simulator's (kwok's) pace, not the cluster's.
    let pods: Api<Pod> = Api::namespaced(cluster.client().clone(), namespace);
    loop {
        let list = pods.list(&ListParams::default()).await.unwrap_or_else(|error| fail(error.to_string()));
        let bound = list.items.iter().filter(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some())).count();
        if bound >= count {
            break;
        }
        if start.elapsed() > timeout {
            fail(format!("{bound} of {count} pods bound after {}s", timeout.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("scale-scheduled {:.6}", start.elapsed().as_secs_f64());
    for hash in &hashes {
        let (cluster, hash) = (cluster.clone(), hash.clone());
        tasks.spawn(async move { cluster.wait_ready(&hash, timeout).await.map(|_| ()) });
    }
    settle(&mut tasks).await;
    println!("scale-ready {:.6}", start.elapsed().as_secs_f64());
    let start = Instant::now();
    for hash in &hashes {
        let (cluster, hash) = (cluster.clone(), hash.clone());
        tasks.spawn(async move { cluster.delete_domain(&hash, timeout).await });
    }
    settle(&mut tasks).await;
    println!("scale-teardown {:.6}", start.elapsed().as_secs_f64());
}

/// Waits for every task; the first failure ends the bench.
async fn settle(tasks: &mut tokio::task::JoinSet<lazaret_kube::Result<()>>) {
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => fail(error.to_string()),
            Err(error) => fail(error.to_string()),
        }
    }
}
