//! End-to-end tests of the foundation: the real `lazaret` binary on real
//! configuration files, real podman running the default image under runsc,
//! and the static helper binaries as `file` sees them.

use std::path::{Path, PathBuf};
use std::process::Command;

use lazaret_test_support::*;
use sha2::{Digest, Sha256};

fn sha256_prefix(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()[..12].to_owned()
}

#[test]
fn domain_hash_is_sha256_of_profile_and_canonical_workspace_even_through_a_symlink() {
    let env = TestEnv::new();
    let real = env.workspace("real-project");
    let link = env.path().join("link-to-project");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let canonical = std::fs::canonicalize(&real).expect("canonical");
    let expected = sha256_prefix(&format!("claude:{}", canonical.display()));
    for workspace in [&real, &link] {
        let output = run(env.lazaret().args(["domain", "--profile", "claude", "--workspace"]).arg(workspace).arg("--json"));
        assert!(output.status.success(), "{}", stderr(&output));
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(json["domain_hash"], expected.as_str());
        assert_eq!(json["container_name"], format!("lazaret-claude-{expected}").as_str());
        assert_eq!(json["sidecar_name"], format!("lazaret-net-{expected}").as_str());
        let socket_root = env.path().join("run/lazaret");
        assert_eq!(json["lockfile"], socket_root.join(format!("lazaret_coord_{expected}.lock")).to_str().expect("utf8"), "D12");
        let socket_dir = socket_root.join(&expected);
        assert_eq!(json["control_socket"], socket_dir.join("control.sock").to_str().expect("utf8"));
        assert_eq!(json["escalation_socket"], socket_dir.join("escalate.sock").to_str().expect("utf8"));
        assert_eq!(json["domain_dir"], env.path().join("data/lazaret/domains").join(&expected).to_str().expect("utf8"));
    }
}

#[test]
fn bad_configurations_name_the_value_and_its_location_and_create_nothing() {
    let cases: &[(&str, &str, &str, i32)] = &[
        ("unknown key", "[profiles.ab]\nimage = \"i:1\"\nbogus = 1\n", "config.toml:3:1", 78),
        ("bad profile name", "[profiles.\"Bad.Name\"]\nimage = \"i:1\"\n", "Bad.Name", 78),
        ("unknown token", "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x/{nope}\", container = \"/c\" }]\n", "{nope}", 78),
        (
            "dot-dot",
            "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"{profile_dir}/../../etc\", container = \"/c\" }]\n",
            "{profile_dir}/../../etc",
            77,
        ),
        ("unset env", "[profiles.ab]\nimage = \"i:1\"\nenv = { T = \"env:LAZARET_TEST_SURELY_UNSET\" }\n", "LAZARET_TEST_SURELY_UNSET", 78),
        (
            "relative container path",
            "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/opt\", container = \"rel/c\" }]\n",
            "rel/c",
            78,
        ),
        ("invalid CIDR", "[network]\nallow_egress = [\"10.0.0.0/33\"]\n", "10.0.0.0/33", 78),
        (
            "volume over /workspace",
            "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/opt\", container = \"/workspace\" }]\n",
            "/workspace",
            78,
        ),
        ("unknown backend", "[profiles.ab]\nimage = \"i:1\"\nbackend = \"docker\"\n", "`docker` is not a backend", 78),
        (
            "cluster namespace",
            "[profiles.ab]\nimage = \"i:1\"\nbackend = { kubernetes = { namespace = \"Agents_1\" } }\n",
            "`Agents_1` is not a valid name",
            78,
        ),
        (
            "allowlist on a cluster without egress",
            "[profiles.ab]\nimage = \"i:1\"\nallow_egress = [\"github.com\"]\nbackend = { kubernetes = { egress = \"none\" } }\n",
            "`github.com` is allowed, but the profile's cluster has no egress",
            77,
        ),
    ];
    for (what, text, named, status) in cases {
        let env = TestEnv::new();
        env.write_config(text);
        let workspace = env.workspace("ws");
        let before = list_tree(env.path());
        for arguments in [vec!["config", "check"], vec!["config", "show", "--profile", "ab"]] {
            let output = run(env.lazaret().args(&arguments).arg("--workspace").arg(&workspace));
            let message = stderr(&output);
            assert_eq!(output.status.code(), Some(*status), "{what}: {arguments:?}: {message}");
            assert!(message.contains(named), "{what}: message should name `{named}`: {message}");
            if *named != "config.toml:3:1" {
                assert!(message.contains("config.toml:"), "{what}: message should give file:line:column: {message}");
            }
        }
        assert_eq!(list_tree(env.path()), before, "{what}: nothing may be created");
    }
}

#[test]
fn a_cluster_profile_whose_cluster_cannot_be_reached_is_refused_before_anything_starts() {
    let env = TestEnv::new();
    let kubeconfig = env.path().join("absent/kubeconfig");
    env.write_config(&format!(
        "[profiles.ab]\nimage = \"i:1\"\nallow_egress = [\"github.com\"]\n\
         backend = {{ kubernetes = {{ kubeconfig = \"{}\", namespace = \"agents\", runtime_class = \"gvisor\" }} }}\n",
        kubeconfig.display()
    ));
    let workspace = git_repository(&env, "ws");
    let check = run(env.lazaret().args(["config", "check"]).arg("--workspace").arg(&workspace));
    assert!(check.status.success(), "a cluster profile is a valid configuration: {}", stderr(&check));
    let before = list_tree(env.path());
    let output = run(env.lazaret().args(["run", "--profile", "ab", "--workspace"]).arg(&workspace).args(["--", "true"]));
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("kubeconfig") && message.contains(&kubeconfig.display().to_string()), "the file is named: {message}");
    assert_eq!(list_tree(env.path()), before, "nothing may be created");
}

fn list_tree(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            found.push(entry.path().display().to_string());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn config_show_expands_tokens_and_redacts_host_values() {
    let env = TestEnv::new();
    env.write_config(
        "[profiles.claude]\nimage = \"localhost/agent:1\"\nenv = { SECRET = \"env:LAZARET_TEST_SECRET\", CACHE = \"{profile_dir}/c\" }\nvolumes = [{ host = \"{profile_dir}/npm\", container = \"/home/a/.npm\", mode = \"rw\" }]\n",
    );
    let workspace = env.workspace("ws");
    let output = run(env
        .lazaret()
        .args(["config", "show", "--profile", "claude", "--json", "--workspace"])
        .arg(&workspace)
        .env("LAZARET_TEST_SECRET", "hunter2"));
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(!text.contains("hunter2"), "host-pulled values must be redacted: {text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let profile_dir = env.path().join("data/lazaret/claude");
    assert_eq!(json["env"]["CACHE"]["value"], format!("{}/c", profile_dir.display()).as_str());
    assert_eq!(json["env"]["SECRET"]["from_host"], "LAZARET_TEST_SECRET");
    assert_eq!(json["volumes"][0]["host"], format!("{}/npm", profile_dir.display()).as_str());
    assert_eq!(json["volumes"][0]["mode"][0], "rw");
}

#[test]
fn no_configuration_file_gives_the_built_in_default_profile() {
    let env = TestEnv::new();
    let workspace = env.workspace("ws");
    let output = run(env.lazaret().args(["config", "show", "--json", "--workspace"]).arg(&workspace));
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(json["profile"], "default");
    assert_eq!(json["image"], DEFAULT_IMAGE);
    let check = run(env.lazaret().args(["config", "check", "--workspace"]).arg(&workspace));
    assert!(check.status.success(), "{}", stderr(&check));
}

#[test]
fn static_helpers_are_statically_linked_according_to_file() {
    for name in ["lazaret-escalate", "lazaret-sidecar"] {
        let path = static_helper(name);
        assert!(
            path.is_file(),
            "{} missing: tests/run builds it (cargo build --profile static --target x86_64-unknown-linux-musl)",
            path.display()
        );
        let output = Command::new("file").arg("-b").arg(&path).output().expect("file");
        let description = stdout(&output);
        assert!(description.contains("statically linked") || description.contains("static-pie linked"), "{name}: file says {description}");
        assert!(!description.contains("dynamically linked") && !description.contains("interpreter"), "{name}: {description}");
        let version = Command::new(&path).arg("--version").output().expect("run helper");
        assert!(stdout(&version).starts_with(name), "{name} --version: {}", stdout(&version));
    }
}

#[test]
fn doctor_reports_every_check_and_passes_the_runtime() {
    let env = TestEnv::new();
    let output = run(env.lazaret().args(["doctor", "--json"]).env("LAZARET_HELPER_DIR", static_helper("").parent().expect("dir")));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let checks = json["checks"].as_array().expect("checks");
    let status_of = |name: &str| checks.iter().find(|c| c["name"] == name).map(|c| c["status"].as_str().unwrap_or("").to_owned());
    for name in
        ["podman", "runsc", "runc", "fuse-overlayfs", "git", "lazaret-escalate", "lazaret-sidecar", "sandbox start", "sidecar start"]
    {
        assert_eq!(status_of(name).as_deref(), Some("pass"), "{name}: {json}");
    }
    assert!(status_of("runsc features").is_some(), "runsc's version, platform and features are reported: {json}");
    // The newest runsc is chosen: the current one scripts/install-deps builds.
    let runsc = checks.iter().find(|c| c["name"] == "runsc").and_then(|c| c["detail"].as_str()).unwrap_or_default().to_owned();
    if std::env::var_os("LAZARET_RUNSC").is_none() && !runsc.starts_with("/usr/local/lib/lazaret/runsc-") {
        missing_requirement(&format!("the current runsc that scripts/install-deps builds from its Go module (doctor chose {runsc})"));
    }
    for check in checks {
        if check["status"] != "pass" {
            assert!(check["fix"].is_string(), "a non-passing check needs a fix: {check}");
        }
    }
    assert!(output.status.success(), "{json}");
}

/// Doctor starts a real sandbox and a real sidecar-shaped container: a
/// broken runtime fails it with podman's own error and the fix, and the
/// probes leave no container behind.
#[test]
fn doctor_starts_a_real_sandbox_and_names_a_missing_init_binary() {
    // What a machine already had (a killed run's) is not this test's.
    let before = doctor_containers();
    let env = TestEnv::new();
    let helpers = static_helper("");
    let helper_dir = helpers.parent().expect("dir");
    env.write_config("[network]\nallow_egress = [\"10.213.250.0/24\"]\n");
    let output = run(env.lazaret().args(["doctor"]).env("LAZARET_HELPER_DIR", helper_dir));
    assert!(output.status.success(), "{}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains("sidecar start") && stdout(&output).contains("network podman) started"), "{}", stdout(&output));

    // podman pointed at an init binary that does not exist.
    let containers_conf = env.path().join("containers.conf");
    std::fs::write(&containers_conf, "[containers]\ninit_path = \"/nonexistent/catatonit\"\n").expect("write");
    let output = run(env.lazaret().args(["doctor"]).env("LAZARET_HELPER_DIR", helper_dir).env("CONTAINERS_CONF", &containers_conf));
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "doctor fails: {text}");
    let failure = text.lines().skip_while(|line| !line.contains("[FAIL] sandbox start")).take(2).collect::<Vec<_>>().join("\n");
    assert!(failure.contains("/nonexistent/catatonit"), "podman's own error names the init binary: {text}");
    assert!(failure.contains("fix: podman's --init needs catatonit: apt-get install catatonit"), "{text}");
    assert!(text.contains("some checks failed"), "{text}");
    let leftovers: Vec<String> = doctor_containers().into_iter().filter(|name| !before.contains(name)).collect();
    assert!(leftovers.is_empty(), "doctor leaves no container behind: {leftovers:?}");
}

/// The names of doctor's probe containers that podman knows.
fn doctor_containers() -> Vec<String> {
    let listed = Command::new("podman")
        .args(["ps", "--all", "--filter", "name=lazaret-doctor-", "--format", "{{.Names}}"])
        .output()
        .expect("podman");
    assert!(listed.status.success(), "{}", stderr(&listed));
    stdout(&listed).lines().map(str::to_owned).collect()
}

#[test]
fn default_image_runs_under_gvisor() {
    ensure_default_image();
    let output = podman_runsc(&[DEFAULT_IMAGE, "sh", "-c", "dmesg; echo ---; cat /proc/version; echo ---; git --version"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let mut parts = text.split("---\n");
    let dmesg = parts.next().unwrap_or_default();
    let version = parts.next().unwrap_or_default();
    assert!(dmesg.contains("Starting gVisor"), "the guest kernel log should be gVisor's: {dmesg}");
    let host_version = std::fs::read_to_string("/proc/version").expect("host /proc/version");
    assert_ne!(version.trim(), host_version.trim(), "the sandbox must not see the host kernel");
    assert!(text.contains("git version"), "the default image carries git: {text}");
}

#[test]
fn image_build_is_cached() {
    ensure_default_image();
    let env = TestEnv::new();
    let output = run(env.lazaret().args(["image", "build"]));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("up to date"), "second build should be a cache hit: {}", stderr(&output));
}

/// A machine whose processes were all killed while `/run` stayed (a killed
/// session, an image taken of a running machine: how CI machines come to
/// be) leaves rootless podman with a container recorded as running, no
/// pause process, and every command refused. Lazaret names the fix before
/// doing any work, doctor names it and leaves nothing behind, and
/// `scripts/setup-rootless-user` (which `tests/run` calls) repairs it.
/// Reproduced with a throwaway user, so the suite's rootless user is not
/// disturbed.
#[test]
fn rootless_podman_without_its_pause_process_is_named_and_repaired_by_set_up() {
    if !require_root("creating a throwaway user and killing all its processes") {
        return;
    }
    let name = "lazaret-ci-stale";
    let set_up = || {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup-rootless-user");
        let output = run(Command::new(script).arg(name));
        assert!(output.status.success(), "setup-rootless-user {name}: {}", stderr(&output));
        output
    };
    set_up();
    let user = RootlessUser::named(name);

    // A root file system with one program, for runc (no image to pull).
    let root = tempfile::Builder::new().prefix("lzt-stale-root").tempdir_in("/tmp").expect("tempdir");
    std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let libraries = stdout(&run(Command::new("ldd").arg("/usr/bin/sleep")));
    let mut files = vec![PathBuf::from("/usr/bin/sleep")];
    files.extend(libraries.split_whitespace().filter(|word| word.starts_with('/')).map(PathBuf::from));
    for file in &files {
        let target = root.path().join(file.strip_prefix("/").expect("absolute"));
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::copy(file, &target).expect("copy");
    }
    assert!(Command::new("chown").arg("-R").arg(format!("{name}:")).arg(root.path()).status().expect("chown").success());
    let started = user.run(&format!("podman run -d --runtime runc --network none --rootfs {} /usr/bin/sleep 600", root.path().display()));
    assert!(started.status.success(), "a container as {name}: {}", stderr(&started));

    // Every process of the user dies at once; /run/user/UID stays.
    let _ = Command::new("pkill").args(["-KILL", "-u", name]).status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Command::new("pgrep").args(["-u", name]).output().expect("pgrep").status.success() {
        assert!(std::time::Instant::now() < deadline, "{name}'s processes did not die");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Once (a full run's second pass, the machine busy) podman said "cannot
    // set user namespace" here: something briefly answered under the dead
    // pause process's pid, and podman tried to join it. The same user's
    // `podman ps` twenty minutes later gave "invalid internal status". Ask
    // again, bounded.
    let mut broken = user.run("podman ps");
    for _ in 0..10 {
        if stderr(&broken).contains("invalid internal status") {
            break;
        }
        eprintln!("podman ps as {name} before the state settled: {}", stderr(&broken).trim());
        std::thread::sleep(std::time::Duration::from_millis(500));
        broken = user.run("podman ps");
    }
    assert!(!broken.status.success() && stderr(&broken).contains("invalid internal status"), "the state: {}", stderr(&broken));

    // Lazaret stops at its first podman call and names the fix.
    let build = user.run(&format!("{} image build", user.lazaret()));
    let text = stderr(&build);
    assert!(!build.status.success(), "{text}");
    assert!(text.contains("run `podman system migrate` as this user"), "the fix is named: {text}");
    assert!(!text.contains("collecting files"), "no work before podman was asked: {text}");
    let doctor = user.run(&format!("LAZARET_HELPER_DIR={} {} doctor", user.bin.path().display(), user.lazaret()));
    let report = stdout(&doctor);
    assert_eq!(doctor.status.code(), Some(1), "{report}");
    let default_image = report.lines().skip_while(|line| !line.contains("[FAIL] default image")).take(3).collect::<Vec<_>>().join("\n");
    assert!(default_image.contains("fix: rootless podman lost its pause process"), "{report}");
    let probes: Vec<PathBuf> = std::fs::read_dir("/tmp")
        .expect("/tmp")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("lazaret-overlay-probe-"))
        .filter(|entry| entry.metadata().is_ok_and(|meta| std::os::unix::fs::MetadataExt::uid(&meta).to_string() == user.uid))
        .map(|entry| entry.path())
        .collect();
    assert!(probes.is_empty(), "doctor's overlay probe left {probes:?}");

    // Set-up repairs it: podman works again, the container is no longer running.
    let repaired = set_up();
    assert!(stderr(&repaired).contains("podman system migrate"), "{}", stderr(&repaired));
    let listed = user.run("podman ps --all --format '{{.State}}'");
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(!stdout(&listed).contains("running"), "{}", stdout(&listed));
    let removed = user.run("podman rm --all --force");
    assert!(removed.status.success(), "{}", stderr(&removed));
}
