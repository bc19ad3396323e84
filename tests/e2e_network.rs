//! End-to-end tests of the Network Sidecar: real podman, runc and runsc.
//! Every destination is a test host this test starts on a podman network
//! created with `--internal`, so nothing can leave the machine even if the
//! policy failed.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// An internal podman network with two listening test hosts (.11 and .12).
struct TestNetwork {
    name: String,
    prefix: String,
}

impl TestNetwork {
    fn create() -> TestNetwork {
        let id = std::process::id();
        let name = format!("lzt-net-{id}");
        let prefix = format!("10.213.{}", 20 + id % 200);
        let output = Command::new("podman")
            .args(["network", "create", "--internal", "--subnet", &format!("{prefix}.0/24"), &name])
            .output()
            .expect("podman");
        assert!(output.status.success(), "network create: {}", stderr(&output));
        for host in [11, 12] {
            let output = Command::new("podman")
                .args([
                    "run",
                    "-d",
                    "--replace",
                    "--name",
                    &format!("{name}-host{host}"),
                    "--runtime=runc",
                    "--ulimit=nofile=4096:4096",
                    "--ulimit=nproc=4096:4096",
                ])
                .args(["--network", &name, "--ip", &format!("{prefix}.{host}"), DEFAULT_IMAGE, "nc", "-lk", "-p", "8080"])
                .output()
                .expect("podman");
            assert!(output.status.success(), "test host: {}", stderr(&output));
        }
        TestNetwork { name, prefix }
    }

    fn host(&self, number: u8) -> String {
        format!("{}.{number}", self.prefix)
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        for host in [11, 12] {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &format!("{}-host{host}", self.name)]).output();
        }
        let _ = Command::new("podman").args(["network", "rm", "-f", &self.name]).output();
    }
}

fn configure(env: &TestEnv, network: &TestNetwork, allow: &[String]) {
    let allow: Vec<String> = allow.iter().map(|rule| format!("{rule:?}")).collect();
    env.write_config(&format!("[network]\npodman_network = \"{}\"\nallow_egress = [{}]\n", network.name, allow.join(", ")));
}

fn agent(env: &TestEnv, repository: &Path, script: &str) -> String {
    let output = run(env.lazaret().args(["run", "--workspace"]).arg(repository).args(["--", "sh", "-c", script]));
    assert!(output.status.success(), "{}{}", stdout(&output), stderr(&output));
    stdout(&output)
}

#[test]
fn only_allowlisted_hosts_are_reachable_and_the_policy_changes_live() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let network = TestNetwork::create();
    let env = TestEnv::new();
    configure(&env, &network, &[format!("{}/32", network.host(11))]);
    let repository = git_repository(&env, "project");
    let (one, two) = (network.host(11), network.host(12));
    let text = agent(&env, &repository, &format!("nc -z -w 2 {one} 8080; echo allowed=$?; nc -z -w 2 {two} 8080; echo other=$?"));
    assert!(text.contains("allowed=0"), "the allowlisted host is reachable: {text}");
    assert!(text.contains("other=1"), "a second host on the same network is not: {text}");

    // Live: a session polls the second host while the policy changes.
    let script =
        format!("for i in $(seq 60); do if nc -z -w 1 {two} 8080 2>/dev/null; then echo reach; else echo block; fi; sleep 0.1; done");
    let session = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&repository)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let socket = Path::new(domain_json(&env, "default", &repository)["control_socket"].as_str().expect("socket")).to_path_buf();
    assert!(wait_until(Duration::from_secs(15), || socket.exists()));
    std::thread::sleep(Duration::from_millis(1000));
    let allowed_at = Instant::now();
    let allow = run(env.lazaret().args(["net", "allow", &two, "--workspace"]).arg(&repository));
    assert!(allow.status.success(), "{}", stderr(&allow));
    assert!(stdout(&allow).contains(&two), "{}", stdout(&allow));
    let reachable = wait_until(Duration::from_secs(1), || {
        Command::new("podman")
            .args([
                "exec",
                domain_json(&env, "default", &repository)["container_name"].as_str().expect("name"),
                "nc",
                "-z",
                "-w",
                "1",
                &two,
                "8080",
            ])
            .output()
            .is_ok_and(|output| output.status.success())
    });
    assert!(reachable, "`lazaret net allow` makes the host reachable within 1 s (took {:?})", allowed_at.elapsed());
    let deny = run(env.lazaret().args(["net", "deny", &format!("{two}/32"), "--workspace"]).arg(&repository));
    assert!(deny.status.success(), "{}", stderr(&deny));
    let output = session.wait_with_output().expect("wait");
    let states: Vec<String> = stdout(&output).lines().map(str::to_owned).collect();
    let first_reach = states.iter().position(|s| s == "reach").expect("reached after allow");
    assert!(states[..first_reach].iter().all(|s| s == "block"), "blocked before the allow");
    assert_eq!(states.last().map(String::as_str), Some("block"), "blocked again after the deny: {states:?}");
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit json");
    let outcomes: Vec<&str> = records.iter().filter_map(|record| record["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["networkAllowed", "networkDenied"], "policy changes are audited: {records:?}");
}

#[test]
fn the_sandbox_cannot_change_routes_open_raw_sockets_or_reach_host_loopback() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let network = TestNetwork::create();
    let env = TestEnv::new();
    configure(&env, &network, &[format!("{}/32", network.host(11))]);
    let repository = git_repository(&env, "project");
    // A service on the host's loopback that must stay out of reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let two = network.host(12);
    let script = format!(
        "busybox ip route add {two}/32 dev eth0 2>&1 && echo route-added; busybox ip rule del prio 20000 2>&1 && echo rule-deleted; \
         busybox ping -c 1 -W 1 {two} >/dev/null 2>&1 && echo ping-ok; \
         nc -z -w 2 127.0.0.1 {port} && echo host-loopback-reached; \
         nc -z -w 2 {two} 8080 && echo still-reached; echo done"
    );
    let text = agent(&env, &repository, &script);
    for forbidden in ["route-added", "rule-deleted", "ping-ok", "host-loopback-reached", "still-reached"] {
        assert!(!text.contains(forbidden), "{forbidden}: {text}");
    }
    assert!(text.contains("done"), "{text}");
    drop(listener);
}

#[test]
fn the_sidecar_is_static_alone_in_its_image_and_holds_only_net_caps() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let network = TestNetwork::create();
    let env = TestEnv::new();
    configure(&env, &network, &[format!("{}/32", network.host(11))]);
    let repository = git_repository(&env, "project");
    let domain = domain_json(&env, "default", &repository);
    let sidecar = domain["sidecar_name"].as_str().expect("name").to_owned();
    let mut session = env.lazaret().args(["run", "--workspace"]).arg(&repository).args(["--", "sleep", "4"]).spawn().expect("spawn");
    assert!(wait_until(Duration::from_secs(15), || Command::new("podman")
        .args(["container", "exists", &sidecar])
        .status()
        .is_ok_and(|s| s.success())));
    let inspect = Command::new("podman")
        .args(["inspect", "--format", "{{.ImageName}} {{.OCIRuntime}} {{.EffectiveCaps}}", &sidecar])
        .output()
        .expect("inspect");
    let description = stdout(&inspect);
    assert!(description.contains("runc"), "{description}");
    assert!(description.contains("CAP_NET_ADMIN") && description.contains("CAP_NET_BIND_SERVICE"), "{description}");
    assert!(!description.contains("CAP_SYS_ADMIN") && !description.contains("CAP_CHOWN"), "only the network capabilities: {description}");
    let image = description.split_whitespace().next().expect("image").to_owned();
    let exported = Command::new("sh")
        .args(["-c", &format!("c=$(podman create {image}) && podman export $c | tar -t; podman rm $c >/dev/null")])
        .output()
        .expect("export");
    let files: Vec<String> = stdout(&exported).lines().filter(|line| !line.ends_with('/')).map(str::to_owned).collect();
    assert_eq!(files, ["lazaret-sidecar"], "the image holds one file");
    let _ = session.wait();
    assert!(
        wait_until(Duration::from_secs(10), || !Command::new("podman")
            .args(["container", "exists", &sidecar])
            .status()
            .is_ok_and(|s| s.success())),
        "the sidecar goes with the sandbox"
    );
}

#[test]
fn an_empty_allowlist_means_no_network_at_all() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let network = TestNetwork::create();
    let env = TestEnv::new();
    configure(&env, &network, &[]);
    let repository = git_repository(&env, "project");
    let text =
        agent(&env, &repository, &format!("nc -z -w 2 {} 8080; echo status=$?; cat /proc/net/dev | grep -c eth || true", network.host(11)));
    assert!(text.contains("status=1"), "{text}");
    let refused = run(env.lazaret().args(["net", "show", "--workspace"]).arg(&repository));
    assert!(!refused.status.success(), "not running: {}", stderr(&refused));
}

#[test]
fn a_domain_that_cannot_start_leaves_nothing_behind() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    env.write_config("[network]\npodman_network = \"lzt-no-such-network\"\nallow_egress = [\"10.213.250.1/32\"]\n");
    let repository = git_repository(&env, "project");
    let domain = domain_json(&env, "default", &repository);
    let output = run(env.lazaret().args(["run", "--workspace"]).arg(&repository).args(["--", "true"]));
    assert!(!output.status.success());
    assert!(stderr(&output).contains("lzt-no-such-network"), "the error names the network: {}", stderr(&output));
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let socket_dir = Path::new(domain["control_socket"].as_str().expect("socket")).parent().expect("dir").to_path_buf();
    assert!(!socket_dir.exists(), "no socket directory left: {}", socket_dir.display());
    let sidecar = domain["sidecar_name"].as_str().expect("name");
    assert!(!Command::new("podman").args(["container", "exists", sidecar]).status().is_ok_and(|s| s.success()), "no sidecar left");
    let uid = stdout(&Command::new("id").arg("-u").output().expect("id")).trim().to_owned();
    let tls = format!("/dev/shm/lazaret-{uid}/{}", domain["domain_hash"].as_str().expect("hash"));
    assert!(!Path::new(&tls).exists(), "no TLS files left in {tls}");
}
