//! End-to-end tests of the State Anchor: persistent directories on real
//! fuse-overlayfs mounts under real podman + runsc, across sessions, base
//! image rebuilds, teardown, signals and a killed coordinator.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lazaret_test_support::*;

fn profile_config(env: &TestEnv, image: &str, dirs: &[&str]) {
    let dirs: Vec<String> = dirs.iter().map(|dir| format!("{dir:?}")).collect();
    env.write_config(&format!("[profiles.keep]\nimage = \"{image}\"\npersistent_dirs = [{}]\n", dirs.join(", ")));
}

/// An agent of the `keep` profile; `overlay` forces the kind of new upper
/// directories (LAZARET_STATE_OVERLAY).
fn keep_agent<'a>(env: &'a TestEnv, repository: &Path, overlay: Option<&str>) -> Agent<'a> {
    let agent = agent(env, repository).profile("keep");
    match overlay {
        Some(overlay) => agent.env("LAZARET_STATE_OVERLAY", overlay),
        None => agent,
    }
}

fn domain(env: &TestEnv, repository: &Path) -> serde_json::Value {
    domain_json(env, "keep", repository)
}

/// Nothing of the domain is mounted on the host (the overlays, the image).
fn nothing_mounted(domain: &serde_json::Value) -> bool {
    let domain_dir = domain["domain_dir"].as_str().expect("dir");
    !std::fs::read_to_string("/proc/mounts").expect("mounts").contains(domain_dir)
}

fn state_diff(env: &TestEnv, repository: &Path) -> Vec<(String, String)> {
    changes(&run(env.lazaret().args(["state", "diff", "--json", "--profile", "keep", "--workspace"]).arg(repository)))
}

/// The (kind, path) pairs of `lazaret state diff --json` output, sorted.
fn changes(output: &std::process::Output) -> Vec<(String, String)> {
    assert!(output.status.success(), "{}", stderr(output));
    let changes: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).expect("json");
    let mut changes: Vec<(String, String)> = changes
        .iter()
        .map(|change| (change["kind"].as_str().unwrap_or("").to_owned(), change["path"].as_str().unwrap_or("").to_owned()))
        .collect();
    changes.sort();
    changes
}

#[test]
fn files_in_persistent_directories_survive_teardown_and_reset_discards_them() {
    survive_teardown_and_reset(None);
}

/// The fallback: the same on fuse-overlayfs (what a machine without kernel
/// overlayfs in its user namespace gets, and what older upper directories keep).
#[test]
fn files_in_persistent_directories_survive_teardown_and_reset_discards_them_on_fuse_overlayfs() {
    survive_teardown_and_reset(Some("fuse"));
}

fn survive_teardown_and_reset(overlay: Option<&str>) {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    profile_config(&env, DEFAULT_IMAGE, &["/usr"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    keep_agent(&env, &repository, overlay).run("printf '#!/bin/sh\\necho installed-by-agent\\n' > /usr/local/bin/agent-tool; chmod +x /usr/local/bin/agent-tool; rm /usr/bin/yes; echo changed > /usr/share/lzt-note");
    let kind = std::fs::read_to_string(Path::new(domain["domain_dir"].as_str().expect("dir")).join("usr_overlay")).expect("overlay kind");
    assert_eq!(kind.trim(), overlay.unwrap_or("kernel"), "the upper directory records its overlay kind");
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)), "full teardown");
    assert!(nothing_mounted(&domain), "nothing stays mounted after teardown");
    // The kind stays the upper directory's, whatever new ones would get.
    let output = keep_agent(&env, &repository, Some(if overlay == Some("fuse") { "kernel" } else { "fuse" }))
        .run("agent-tool; test -e /usr/bin/yes && echo yes-exists || echo yes-gone; cat /usr/share/lzt-note");
    assert_eq!(stdout(&output), "installed-by-agent\nyes-gone\nchanged\n");
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let changes = state_diff(&env, &repository);
    let expected: Vec<(String, String)> =
        [("added", "/usr/local/bin/agent-tool"), ("added", "/usr/share/lzt-note"), ("deleted", "/usr/bin/yes")]
            .iter()
            .map(|(kind, path)| ((*kind).to_owned(), (*path).to_owned()))
            .collect();
    assert_eq!(changes, expected, "state diff lists exactly what changed");
    let reset = run(env.lazaret().args(["state", "reset", "--yes", "--profile", "keep", "--workspace"]).arg(&repository));
    assert!(reset.status.success(), "{}", stderr(&reset));
    assert!(state_diff(&env, &repository).is_empty());
    let output = agent(&env, &repository)
        .profile("keep")
        .run("test -e /usr/local/bin/agent-tool && echo tool-exists; test -e /usr/bin/yes && echo yes-back");
    assert_eq!(stdout(&output), "yes-back\n", "reset removes the changes");
    assert!(
        wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository) && nothing_mounted(&domain)),
        "nothing stays mounted"
    );
}

#[test]
fn state_reset_is_refused_while_the_domain_runs() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    profile_config(&env, DEFAULT_IMAGE, &["/usr"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    let mut child = env
        .lazaret()
        .args(["run", "--profile", "keep", "--workspace"])
        .arg(&repository)
        .args(["--", "sleep", "5"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || Path::new(domain["control_socket"].as_str().expect("s")).exists()));
    let reset = run(env.lazaret().args(["state", "reset", "--yes", "--profile", "keep", "--workspace"]).arg(&repository));
    assert!(!reset.status.success() && stderr(&reset).contains("is running"), "{}", stderr(&reset));
    let _ = child.wait();
    assert!(
        wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository) && nothing_mounted(&domain)),
        "nothing stays mounted"
    );
}

#[test]
fn a_rebuilt_base_image_shows_through_and_the_agent_keeps_its_files() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let image = format!("localhost/lzt-state-{}:1", std::process::id());
    let context = env.path().join("image");
    std::fs::create_dir_all(&context).expect("mkdir");
    let build = |version: &str| {
        std::fs::write(context.join("version.txt"), format!("{version}\n")).expect("write");
        std::fs::write(context.join("shared.txt"), format!("image {version}\n")).expect("write");
        std::fs::write(context.join("Containerfile"), format!("FROM {DEFAULT_IMAGE}\nCOPY version.txt shared.txt /usr/share/lzt/\n"))
            .expect("write");
        let output = Command::new("podman").args(["build", "--quiet", "-t", &image]).arg(&context).output().expect("podman build");
        assert!(output.status.success(), "podman build: {}", stderr(&output));
    };
    build("v1");
    profile_config(&env, &image, &["/usr"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    agent(&env, &repository)
        .profile("keep")
        .run("cat /usr/share/lzt/version.txt; echo agent > /usr/local/bin/agent-file; echo agent > /usr/share/lzt/shared.txt");
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    build("v2");
    let output =
        agent(&env, &repository).profile("keep").run("cat /usr/share/lzt/version.txt /usr/local/bin/agent-file /usr/share/lzt/shared.txt");
    assert_eq!(stdout(&output), "v2\nagent\nagent\n", "the new image's file, the agent's file, and the agent's version where both changed");
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let changes = state_diff(&env, &repository);
    assert!(
        changes.contains(&("modifiedConflict".to_owned(), "/usr/share/lzt/shared.txt".to_owned())),
        "state diff says both changed: {changes:?}"
    );
    let _ = Command::new("podman").args(["rmi", "--force", &image]).output();
}

#[test]
fn with_etc_persistent_the_runtime_files_stay_the_runtimes() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    profile_config(&env, DEFAULT_IMAGE, &["/etc"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    let probe = "echo \"$(cat /etc/hostname)\"; grep -c lazaret-keep /etc/hosts; grep -E ' /etc/(hosts|hostname|resolv.conf) ' /proc/mounts | wc -l; echo agent-config > /etc/agent.conf";
    let first =
        agent(&env, &repository).profile("keep").run(&format!("{probe}; echo evil > /etc/hostname; echo '6.6.6.6 evil' >> /etc/hosts"));
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let second = agent(&env, &repository).profile("keep").run(&format!("{probe}; cat /etc/agent.conf; grep -c evil /etc/hosts || true"));
    let first_text = stdout(&first);
    assert_eq!(first_text.lines().next(), Some("lazaret-keep"), "the runtime's hostname: {first_text}");
    let second_text = stdout(&second);
    let second_lines: Vec<&str> = second_text.lines().map(str::trim).collect();
    assert_eq!(second_lines[0], "lazaret-keep", "writes to /etc/hostname do not persist: {second_text}");
    assert_eq!(second_lines[1], "1", "the runtime's /etc/hosts: {second_text}");
    assert!(
        second_lines[3] == "agent-config" && second_lines[4] == "0",
        "other /etc files persist, the hosts edit does not: {second_text}"
    );
    let changes = state_diff(&env, &repository);
    assert!(changes.iter().all(|(_, path)| !["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"].contains(&path.as_str())), "{changes:?}");
    assert!(
        wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository) && nothing_mounted(&domain)),
        "nothing stays mounted"
    );
}

#[test]
fn nothing_stays_mounted_after_sigint_or_a_killed_coordinator() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    profile_config(&env, DEFAULT_IMAGE, &["/usr", "/root"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    let start = || {
        env.lazaret()
            .args(["run", "--profile", "keep", "--workspace"])
            .arg(&repository)
            .args(["--", "sleep", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn")
    };
    let mounted = || std::fs::read_to_string("/proc/mounts").expect("mounts").contains(domain["domain_dir"].as_str().expect("dir"));

    let mut cli = start();
    assert!(
        wait_until(Duration::from_secs(15), || mounted() && coordinator_pids(&repository).len() == 1),
        "overlays mounted while running"
    );
    // The session runs (the CLI has registered it) before it is interrupted.
    let sessions = || live_sessions(env.lazaret().args(["status", "--json", "--profile", "keep", "--workspace"]).arg(&repository));
    assert!(wait_until(Duration::from_secs(30), || sessions() == 1), "the session runs");
    Command::new("kill").args(["-INT", &cli.id().to_string()]).status().expect("kill");
    let _ = cli.wait();
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository) && !mounted()), "SIGINT: nothing mounted");

    let mut cli = start();
    assert!(wait_until(Duration::from_secs(15), || mounted() && coordinator_pids(&repository).len() == 1));
    Command::new("kill").args(["-KILL", &coordinator_pids(&repository)[0].to_string()]).status().expect("kill");
    Command::new("kill").args(["-KILL", &cli.id().to_string()]).status().expect("kill");
    let _ = cli.wait();
    let output = agent(&env, &repository).profile("keep").run("echo recovered");
    assert_eq!(stdout(&output), "recovered\n");
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository) && !mounted()), "recovered: nothing mounted");
}

#[test]
fn persistent_directories_work_rootless() {
    let Some(user) = RootlessUser::required() else { return };
    let _guard = sandbox_guard();
    let config = format!("{}/lzt-state-config", user.home);
    let workspace = format!("{}/lzt-state-workspace", user.home);
    let setup = format!(
        "rm -rf {config} {workspace} && mkdir -p {config}/lazaret {workspace} && \
         printf '[profiles.keep]\\nimage = \"{DEFAULT_IMAGE}\"\\npersistent_dirs = [\"/usr\"]\\n' > {config}/lazaret/config.toml && \
         cd {workspace} && git init -q && git -c user.name=u -c user.email=u@x commit -q --allow-empty -m init"
    );
    let output = user.run(&setup);
    assert!(output.status.success(), "{}", stderr(&output));
    let lazaret = format!("{} --config {config}/lazaret/config.toml run --profile keep --workspace {workspace} --", user.lazaret());
    let first = user.run(&format!("{lazaret} sh -c 'echo persisted > /usr/local/bin/rootless-file'"));
    assert!(first.status.success(), "{}{}", stdout(&first), stderr(&first));
    let second = user.run(&format!("{lazaret} cat /usr/local/bin/rootless-file"));
    assert_eq!(stdout(&second), "persisted\n", "{}", stderr(&second));
    let diff =
        user.run(&format!("{} --config {config}/lazaret/config.toml state diff --profile keep --workspace {workspace}", user.lazaret()));
    assert!(stdout(&diff).contains("/usr/local/bin/rootless-file"), "{}{}", stdout(&diff), stderr(&diff));
    // Nothing stays mounted in the user's namespace either.
    let mounted = wait_until(Duration::from_secs(10), || {
        let mounts = user.run("podman unshare cat /proc/self/mountinfo");
        !stdout(&mounts).contains("usr_merged")
    });
    assert!(mounted, "no overlay left in the rootless mount namespace");
}

/// Attack review finding 10: a start that failed after the State Anchor was
/// mounted left the overlays mounted until the next start. Here the Network
/// Sidecar cannot start (its podman network does not exist), after the
/// overlays are up: the start fails with podman's message and nothing of
/// the domain stays mounted.
#[test]
fn a_start_that_fails_after_the_overlays_are_mounted_unmounts_them() {
    if !require_root("to read the host's mount table for the overlays") {
        return;
    }
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    env.write_config(&format!(
        "[network]\npodman_network = \"lzt-no-such-network\"\n\n[profiles.keep]\nimage = \"{DEFAULT_IMAGE}\"\npersistent_dirs = [\"/usr\"]\nallow_egress = [\"10.213.251.0/24\"]\n"
    ));
    let repository = git_repository(&env, "project");
    let domain = domain_json(&env, "keep", &repository);
    let domain_dir = domain["domain_dir"].as_str().expect("dir").to_owned();
    let output = run(env.lazaret().args(["run", "--profile", "keep", "--workspace"]).arg(&repository).args(["--", "true"]));
    assert!(!output.status.success(), "the start fails: {}", stdout(&output));
    assert!(stderr(&output).contains("lzt-no-such-network"), "with podman's message: {}", stderr(&output));
    assert!(Path::new(&domain_dir).join("usr_merged").is_dir(), "the overlays had been mounted before the failure");
    let mounted = || std::fs::read_to_string("/proc/mounts").expect("mounts").contains(&domain_dir);
    assert!(wait_until(Duration::from_secs(10), || !mounted()), "nothing of the domain stays mounted");
    assert!(wait_until(Duration::from_secs(10), || coordinator_pids(&repository).is_empty()), "the coordinator is gone");
}

/// A directory of the image deleted and recreated is opaque (kernel
/// overlayfs: an xattr only), a deleted directory a whiteout, and a file the
/// agent names `.wh.<name>` is an ordinary file of the merged view: `state
/// diff` shows each as the sandbox sees it, and so does the next session.
#[test]
fn a_deleted_and_recreated_directory_and_whiteout_names_are_shown_right() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    profile_config(&env, DEFAULT_IMAGE, &["/usr"]);
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    agent(&env, &repository).profile("keep").run(
        "rm -rf /usr/share/doc && mkdir /usr/share/doc && echo new > /usr/share/doc/only-file; rm -rf /usr/share/man; \
         echo sneaky > /usr/share/.wh.bash-completion; echo sneaky > /usr/local/.wh..wh..opq",
    );
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let output = agent(&env, &repository).profile("keep").run("ls -A /usr/share/doc; test -e /usr/share/man || echo man-gone; test -d /usr/share/bash-completion && echo bash-completion-kept; cat /usr/share/.wh.bash-completion; ls -A /usr/local | wc -l");
    assert_eq!(
        stdout(&output),
        "only-file\nman-gone\nbash-completion-kept\nsneaky\n2\n",
        "the second session sees the first one's changes"
    );
    assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
    let changes = state_diff(&env, &repository);
    let has = |kind: &str, path: &str| changes.contains(&(kind.to_owned(), path.to_owned()));
    assert!(has("modified", "/usr/share/doc") && has("added", "/usr/share/doc/only-file"), "{changes:?}");
    assert!(has("deleted", "/usr/share/man"), "{changes:?}");
    assert!(has("added", "/usr/share/.wh.bash-completion") && has("added", "/usr/local/.wh..wh..opq"), "{changes:?}");
    assert!(!changes.iter().any(|(_, path)| path == "/usr/share/bash-completion" || path == "/usr/local"), "{changes:?}");
}

/// Overlayfs keeps whiteouts, opaque directories, redirects and metacopy in
/// extended attributes and 0:0 character devices of the upper directory,
/// which the agent's writes land in (kernel overlayfs: `trusted.overlay.*` as
/// root, `user.overlay.*` in a user namespace). Whatever of these the agent
/// sets from inside (both names, their escaped forms, and a 0:0 device), the
/// next session still sees the image's files, and `state diff` shows no
/// deletion or opaque directory the agent did not make.
struct OverlayAttack<'a> {
    /// Runs a script as the agent (one session), returns its output.
    agent: &'a dyn Fn(&str) -> String,
    /// `lazaret state diff --json` as (kind, path).
    state_diff: &'a dyn Fn() -> Vec<(String, String)>,
}

impl OverlayAttack<'_> {
    const CENSUS: &'static str =
        "ls -A /usr/share/doc | wc -l; ls -A /usr/share/man | wc -l; head -c 64 /usr/bin/bash | md5sum; ls -A /usr/share/lazaret-redirect";

    fn run(&self) {
        let before = (self.agent)(&format!("mkdir /usr/share/lazaret-redirect; {}", Self::CENSUS));
        let mut attack = String::from("touch /usr/share/doc/agent-file /usr/share/man/agent-file; chmod 755 /usr/bin/bash;");
        for prefix in ["trusted.overlay.", "user.overlay.", "trusted.overlay.overlay.", "user.overlay.overlay."] {
            for (path, name, value) in [
                ("/usr/share/doc", "opaque", "y"),
                ("/usr/share/man", "opaque", "x"),
                ("/usr/share/lazaret-redirect", "redirect", "/usr/share/doc"),
                ("/usr/share/lazaret-redirect", "opaque", "y"),
                ("/usr/bin/bash", "metacopy", ""),
                ("/usr/bin/bash", "redirect", "/usr/bin/dash"),
            ] {
                attack.push_str(&format!(" /opt/testhost setxattr {path} {prefix}{name} {value:?};"));
            }
        }
        attack.push_str(
            " /opt/testhost mknod-whiteout /usr/share/lazaret-redirect/whiteout; /opt/testhost mknod-whiteout /usr/share/doc/agent-device;",
        );
        eprintln!("from inside: {}", (self.agent)(&attack));
        let after = (self.agent)(&format!("rm -f /usr/share/doc/agent-device /usr/share/lazaret-redirect/whiteout; {}", Self::CENSUS));
        let lines: Vec<&str> = before.lines().collect();
        assert_eq!(lines.len(), 3, "{before}");
        // One more entry in doc and in man: the agent's own files.
        let count = |line: &str| line.trim().parse::<u32>().expect("a count") + 1;
        let expected = format!("{}\n{}\n{}\n", count(lines[0]), count(lines[1]), lines[2]);
        assert_eq!(after, expected, "the image's files are all still there, bash is bash, the redirect shows nothing");
        let changes = (self.state_diff)();
        assert!(!changes.iter().any(|(kind, _)| kind == "deleted"), "no deletion the agent did not make: {changes:?}");
        assert!(
            !changes.iter().any(|(kind, path)| kind == "modified" && (path == "/usr/share/doc" || path == "/usr/share/man")),
            "no directory made opaque: {changes:?}"
        );
    }
}

#[test]
fn overlay_attributes_set_from_inside_cannot_hide_or_redirect_image_files() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let testhost = static_helper("lazaret-testhost");
    env.write_config(&format!(
        "[profiles.keep]\nimage = \"{DEFAULT_IMAGE}\"\npersistent_dirs = [\"/usr\"]\nvolumes = [{{ host = \"{}\", container = \"/opt/testhost\", mode = \"ro\" }}]\n",
        testhost.display()
    ));
    let repository = git_repository(&env, "project");
    let domain = domain(&env, &repository);
    let agent = |script: &str| {
        let output = agent(&env, &repository).profile("keep").run(script);
        assert!(wait_until(Duration::from_secs(5), || domain_is_torn_down(&domain, &repository)));
        stdout(&output)
    };
    OverlayAttack { agent: &agent, state_diff: &|| state_diff(&env, &repository) }.run();
    let kind = std::fs::read_to_string(Path::new(domain["domain_dir"].as_str().expect("dir")).join("usr_overlay")).expect("kind");
    assert_eq!(kind, "kernel\n", "the attack was made on kernel overlayfs");
}

#[test]
fn overlay_attributes_set_from_inside_cannot_hide_or_redirect_image_files_rootless() {
    let Some(user) = RootlessUser::required() else { return };
    let _guard = sandbox_guard();
    let config = format!("{}/lzt-state-attack-config", user.home);
    let workspace = format!("{}/lzt-state-attack-workspace", user.home);
    let setup = format!(
        "rm -rf {config} {workspace} && mkdir -p {config}/lazaret {workspace} && \
         printf '[profiles.keep]\\nimage = \"{DEFAULT_IMAGE}\"\\npersistent_dirs = [\"/usr\"]\\nvolumes = [{{ host = \"{}\", container = \"/opt/testhost\", mode = \"ro\" }}]\\n' > {config}/lazaret/config.toml && \
         cd {workspace} && git init -q && git -c user.name=u -c user.email=u@x commit -q --allow-empty -m init",
        user.helper("lazaret-testhost")
    );
    let output = user.run(&setup);
    assert!(output.status.success(), "{}", stderr(&output));
    let lazaret = format!("{} --config {config}/lazaret/config.toml", user.lazaret());
    let scope = format!("--profile keep --workspace {workspace}");
    // The user's Domain Root outlives this test's workspace: start from nothing.
    let reset = user.run(&format!("{lazaret} state reset --yes {scope}"));
    assert!(reset.status.success(), "{}", stderr(&reset));
    let domain = user.run(&format!("{lazaret} domain --json {scope}"));
    let domain: serde_json::Value = serde_json::from_slice(&domain.stdout).expect("domain json");
    let socket = Path::new(domain["control_socket"].as_str().expect("socket")).to_owned();
    let agent = |script: &str| {
        let quoted = format!("'{}'", script.replace('\'', r"'\''"));
        let output = user.run(&format!("{lazaret} run {scope} -- sh -c {quoted}"));
        assert!(output.status.success(), "{script}: {}{}", stdout(&output), stderr(&output));
        let torn_down = || !socket.exists() && coordinator_pids(Path::new(&workspace)).is_empty();
        assert!(wait_until(Duration::from_secs(10), torn_down), "the domain is torn down before the next session");
        stdout(&output)
    };
    let state_diff = || changes(&user.run(&format!("{lazaret} state diff --json {scope}")));
    OverlayAttack { agent: &agent, state_diff: &state_diff }.run();
    let kind = user.run(&format!("cat {}/usr_overlay", domain["domain_dir"].as_str().expect("dir")));
    assert_eq!(stdout(&kind), "kernel\n", "the attack was made on kernel overlayfs (user namespace)");
}
