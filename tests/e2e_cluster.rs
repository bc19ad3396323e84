//! `lazaret run` with a profile whose sandbox is a pod on the real test
//! cluster (issue 32), driven as a person uses it: the real CLI in a real
//! terminal (tmux: Enter is CR, Ctrl-C a byte, the window resized), the
//! approval prompt answered with a key, the agent's commit reaching the
//! host's branch while the session runs, a second session joining the same
//! pod, the end of the domain suspending its `Sandbox`, and `lazaret domain
//! rm` leaving nothing on the cluster. Piped sessions keep
//! bytes, streams and the exit status, and the session's credential never
//! reaches etcd. A domain held by another coordinator is refused and left
//! alone; one a killed coordinator of this machine left is taken over. A
//! profile changed between runs reaches its suspended domain whole, and no
//! old allowlist stays in force. What the agent installs in a persistent
//! directory survives the domain; `lazaret state diff` lists it (the pod
//! now, or as the last teardown left it) and `state reset` has the next
//! start seed the image's directory again.
//! Started by `tests/cluster/run` (feature `cluster-tests`; environment as
//! in `lazaret_test_support::cluster`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lazaret_test_support::cluster::{contains, etcd_dump, image, kubeconfig, Scratch, GONE};
use lazaret_test_support::tmux::Tmux;
use lazaret_test_support::*;

/// A value that would break out of naive quoting on its way into the pod
/// (as a TOML basic string; its value is [`TRICKY`]).
const TRICKY_TOML: &str = r#"a b'c\"d $(touch /tmp/pwned) `touch /tmp/pwned` back\\slash =e; exit 9"#;
const TRICKY: &str = r#"a b'c"d $(touch /tmp/pwned) `touch /tmp/pwned` back\slash =e; exit 9"#;

/// A configuration whose default profile runs on the test cluster, in the
/// test's own namespace (no egress: the test cluster enforces none anyway,
/// and nothing here needs it), `echo` auto-approved.
fn cluster_config(env: &TestEnv, scratch: &Scratch) {
    env.write_config(&format!(
        "[escalation]\nenabled = true\nauto_approve = [\"echo *\"]\n\n\
         [profiles.default]\nimage = \"{image}\"\npersistent_dirs = []\nenv = {{ PROJECT_MODE = \"on-the-cluster\", TRICKY = \"{TRICKY_TOML}\" }}\n\
         backend = {{ kubernetes = {{ kubeconfig = \"{kubeconfig}\", namespace = \"{namespace}\", egress = \"none\" }} }}\n",
        image = image(),
        kubeconfig = kubeconfig().display(),
        namespace = scratch.namespace,
    ));
}

fn domain_hash(env: &TestEnv, workspace: &Path) -> String {
    domain_json(env, "default", workspace)["domain_hash"].as_str().expect("hash").to_owned()
}

/// The shell line that runs `lazaret ARGUMENTS` with the test's environment.
fn shell_line(env: &TestEnv, arguments: &str) -> String {
    let path = env.path();
    format!(
        "env XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} {arguments}",
        config = path.join("config").display(),
        data = path.join("data").display(),
        run = path.join("run").display(),
        lazaret = lazaret_bin().display(),
    )
}

/// `lazaret run --workspace WORKSPACE -- ARGV`, run to its end.
fn lazaret_run(env: &TestEnv, workspace: &Path, argv: &[&str]) -> std::process::Output {
    run(env.lazaret().args(["run", "--workspace"]).arg(workspace).arg("--").args(argv))
}

/// Once the domain's last session ended: its coordinator gone, its pod
/// gone, its `Sandbox` suspended; then `lazaret domain rm` leaves nothing
/// of it on the cluster.
async fn ends_suspended_then_removed(env: &TestEnv, scratch: &Scratch, workspace: &Path, hash: &str) {
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(workspace).is_empty()), "the coordinator ends");
    scratch.cluster.wait_no_pod(hash, GONE).await.expect("the pod goes with the domain");
    let kept = scratch.cluster.sandbox(hash).await.expect("get").expect("the Sandbox stays, suspended");
    assert_eq!(kept.spec.operating_mode, Some(lazaret_kube::objects::OperatingMode::Suspended));
    let removed = run(env.lazaret().args(["domain", "rm", "--workspace"]).arg(workspace));
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert!(stdout(&removed).contains(&format!("Sandbox/lazaret-{hash}")), "{}", stdout(&removed));
    assert!(cluster_is_clean(scratch, hash).await, "`lazaret domain rm` leaves nothing of the domain on the cluster");
}

/// A session that keeps the domain up (`sleep 300`), once its command runs in the pod.
fn keep_up(env: &TestEnv, workspace: &Path) -> std::process::Child {
    let mut session = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(workspace)
        .args(["--", "sh", "-c", "echo up; sleep 300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("lazaret run");
    let mut first = [0u8; 3];
    std::io::Read::read_exact(session.stdout.as_mut().expect("stdout"), &mut first).expect("the session starts");
    assert_eq!(&first, b"up\n");
    session
}

/// The credential a session printed as `CRED=...` on the terminal.
fn wait_for_credential(terminal: &Tmux, window: &str) -> String {
    let mut found = String::new();
    let shown = wait_until(Duration::from_secs(30), || {
        let screen = terminal.screen(window);
        found = screen.lines().rev().find_map(|line| line.trim_end().strip_prefix("CRED=")).unwrap_or("").to_owned();
        found.len() > 40
    });
    assert!(shown, "the credential on the screen:\n{}", terminal.screen(window));
    found
}

/// Waits until nothing of the domain is left on the cluster.
async fn cluster_is_clean(scratch: &Scratch, hash: &str) -> bool {
    let deadline = std::time::Instant::now() + GONE;
    while std::time::Instant::now() < deadline {
        if scratch.cluster.domain_objects(hash).await.expect("list").is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_on_a_cluster_behaves_in_a_real_terminal_as_a_local_one() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    cluster_config(&env, &scratch);
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);
    let terminal = Tmux::new(env.path().join("tmux.sock"));
    let window = "lzc";
    let command =
        format!("{}; echo LAZARET-EXIT=$?; sleep 600", shell_line(&env, &format!("run --workspace {} -- sh", workspace.display())));
    terminal.tmux(&["new-session", "-d", "-s", window, "-x", "100", "-y", "30", &command]);
    assert!(terminal.shows_line(window, "#", Duration::from_secs(180)), "the shell's prompt in the pod:\n{}", terminal.screen(window));

    // Typed lines run (Enter is CR), in gVisor, with the profile's env.
    terminal.line(window, "echo ready-$((1+1)) kernel-$(dmesg | grep -c 'Starting gVisor') $PROJECT_MODE");
    assert!(
        terminal.shows_line(window, "ready-2 kernel-1 on-the-cluster", Duration::from_secs(30)),
        "a typed command runs under gVisor:\n{}",
        terminal.screen(window)
    );
    // Ctrl-C stops the foreground job, and the shell goes on.
    assert!(terminal.interrupts_a_job(window), "Ctrl-C is a SIGINT for the foreground job:\n{}", terminal.screen(window));
    // The window's size reaches the pod's terminal.
    terminal.tmux(&["resize-window", "-t", window, "-x", "90", "-y", "25"]);
    let resized = (0..10).any(|_| {
        terminal.line(window, "stty size");
        terminal.shows_line(window, "25 90", Duration::from_secs(3))
    });
    assert!(resized, "the new size in the pod:\n{}", terminal.screen(window));

    // An escalation from the pod: the prompt takes the screen, [A] and Enter run it here.
    let marker = workspace.join("from-the-pod");
    terminal.line(window, &format!("clear; lazaret-escalate -- touch {}; echo escalate-$?", marker.display()));
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(window).contains("Approve & Run")),
        "the prompt:\n{}",
        terminal.screen(window)
    );
    assert!(!marker.exists(), "nothing runs before the answer");
    assert!(terminal.approve(window, "on the host"), "A, then Enter once the prompt names the command:\n{}", terminal.screen(window));
    assert!(terminal.shows_line(window, "escalate-0", Duration::from_secs(30)), "approved:\n{}", terminal.screen(window));
    assert!(marker.exists(), "the approved command ran on the host");
    // Answered elsewhere (`lazaret approve`: the JSON-RPC call the editors
    // make): the command runs, and the prompt leaves the screen.
    let second = workspace.join("approved-elsewhere");
    terminal.line(window, &format!("clear; lazaret-escalate -- touch {}; echo elsewhere-$?", second.display()));
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(window).contains("Approve & Run")),
        "the prompt:\n{}",
        terminal.screen(window)
    );
    let pending = run(env.lazaret().args(["pending", "--json"]));
    let pending: Vec<serde_json::Value> = serde_json::from_slice(&pending.stdout).expect("pending --json");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let request = pending[0]["requestId"].as_str().expect("requestId").to_owned();
    let approved = run(env.lazaret().args(["approve", &request]));
    assert!(approved.status.success(), "{}", stderr(&approved));
    assert!(terminal.shows_line(window, "elsewhere-0", Duration::from_secs(30)), "{}", terminal.screen(window));
    assert!(second.exists(), "the command approved elsewhere ran on the host");
    assert!(!terminal.screen(window).contains("Approve & Run"), "the prompt left the screen:\n{}", terminal.screen(window));
    // Auto-approved: no prompt.
    terminal.line(window, "lazaret-escalate -- echo auto-$((3+4))");
    assert!(terminal.shows_line(window, "auto-7", Duration::from_secs(30)), "{}", terminal.screen(window));

    // The agent's commit reaches the host's branch while the session runs.
    terminal.line(
        window,
        "echo agent > agent.txt && git add agent.txt && git -c user.name=Agent -c user.email=agent@example.invalid commit -qm agent \
         && echo committed-$((1+1))",
    );
    assert!(terminal.shows_line(window, "committed-2", Duration::from_secs(30)), "{}", terminal.screen(window));
    let exported = wait_until(Duration::from_secs(30), || {
        Command::new("git")
            .arg("-C")
            .arg(&workspace)
            .args(["show", "lazaret/agent-default:agent.txt"])
            .output()
            .is_ok_and(|output| output.stdout == b"agent\n")
    });
    assert!(exported, "the agent's commit is on the host's branch during the session");
    assert_eq!(git(&workspace, &["symbolic-ref", "HEAD"]).trim(), "refs/heads/main", "the user's HEAD stays");
    // `lazaret diff` (and the editors' `branch/diff`) sees the pod's
    // uncommitted work beside the committed one.
    terminal.line(window, "echo draft > draft.txt && echo drafted-$((1+1))");
    assert!(terminal.shows_line(window, "drafted-2", Duration::from_secs(30)), "{}", terminal.screen(window));
    let diff = run(env.lazaret().args(["diff", "--json", "--workspace"]).arg(&workspace));
    assert!(diff.status.success(), "{}", stderr(&diff));
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("diff --json");
    assert!(diff["files"].as_array().expect("files").iter().any(|file| file["path"] == "agent.txt"), "{diff}");
    let uncommitted = diff["uncommitted"]["files"].as_array().expect("uncommitted files");
    assert!(uncommitted.iter().any(|file| file["path"] == "draft.txt" && file["status"] == "??"), "{diff}");

    // A second `lazaret run` joins the same pod.
    terminal.line(window, "echo shared-$((6*7)) > /tmp/shared; echo wrote-$((1+1))");
    assert!(terminal.shows_line(window, "wrote-2", Duration::from_secs(30)), "{}", terminal.screen(window));
    let second = lazaret_run(&env, &workspace, &["sh", "-c", "cat /tmp/shared; hostname"]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(stdout(&second), format!("shared-42\nlazaret-{hash}\n"), "the second session runs in the first one's pod");
    assert!(scratch.cluster.sandbox(&hash).await.expect("get").is_some());

    // The session's credential, while the session runs: in no object (all
    // of etcd) and on no command line in the pod.
    terminal.line(window, "clear; printf 'CRED=%s\\n' \"$LAZARET_SESSION_CREDENTIAL\"");
    let credential = wait_for_credential(&terminal, window);
    assert!(!contains(&etcd_dump(), &credential), "the running session's credential is in etcd");
    let command_lines = scratch.shell(&format!("lazaret-{hash}"), "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", b"").await;
    assert!(command_lines.contains("sleep") || command_lines.contains("sh"), "the pod's command lines were read: {command_lines}");
    assert!(!command_lines.contains(&credential), "the credential is on a command line in the pod");
    // Not while it runs.
    let refused = run(env.lazaret().args(["domain", "rm", "--workspace"]).arg(&workspace));
    assert!(!refused.status.success() && stderr(&refused).contains("is running"), "{}", stderr(&refused));
    terminal.line(window, "exit 3");
    assert!(terminal.shows_line(window, "LAZARET-EXIT=3", Duration::from_secs(60)), "the inner status:\n{}", terminal.screen(window));
    ends_suspended_then_removed(&env, &scratch, &workspace, &hash).await;
    // The last export happened; the branch stays on the host.
    assert_eq!(git(&workspace, &["show", "lazaret/agent-default:agent.txt"]), "agent\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_piped_session_keeps_bytes_streams_and_status_and_its_credential_never_reaches_the_cluster() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    cluster_config(&env, &scratch);
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);
    let mut child = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&workspace)
        .args([
            "--",
            "sh",
            "-c",
            "cat; echo to-stderr >&2; printf '%s\\n' \"$LAZARET_SESSION_CREDENTIAL\" \"$(pwd)\" \"$TRICKY\"; \
             if [ -e /tmp/pwned ]; then echo PWNED; fi; exit 5",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lazaret run");
    // Every byte value but the line ends, which `cat` gives back as they are.
    let input: Vec<u8> = (0..=255u8).cycle().take(64 << 10).collect();
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = {
        let input = input.clone();
        std::thread::spawn(move || stdin.write_all(&input))
    };
    let output = child.wait_with_output().expect("wait");
    writer.join().expect("writer").expect("write");
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(output.stdout.starts_with(&input), "stdin crossed to the pod and back unchanged");
    let rest = String::from_utf8_lossy(&output.stdout[input.len()..]).into_owned();
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 3, "{rest}");
    let credential = lines[0];
    assert!(credential.len() > 40, "the session's credential reached its process: {credential}");
    assert_eq!(lines[1], "/workspace");
    assert_eq!(lines[2], TRICKY, "a profile env value crosses into the pod exactly, and runs nothing");
    assert!(stderr(&output).contains("to-stderr"), "stderr is its own stream: {}", stderr(&output));
    assert!(!contains(&output.stdout, "to-stderr"));
    ends_suspended_then_removed(&env, &scratch, &workspace, &hash).await;
    assert!(!contains(&etcd_dump(), credential), "the session's credential is in etcd");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_domain_held_elsewhere_is_refused_and_one_a_killed_coordinator_left_is_taken_over_even_unrecorded() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    cluster_config(&env, &scratch);
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);

    // Another coordinator's Sandbox of the same domain (created here, as
    // another machine would): refused, and left exactly as it was.
    let mut plan = scratch.plan(&[]);
    plan.domain_hash = hash.clone();
    let mut sandbox = lazaret_kube::objects::sandbox(&plan);
    sandbox.metadata.annotations = Some([("lazaret.dev/holder".to_owned(), "another-machine".to_owned())].into());
    let theirs = scratch.cluster.create_sandbox(&sandbox).await.expect("create");
    let refused = lazaret_run(&env, &workspace, &["true"]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(stderr(&refused).contains("another coordinator holds this domain"), "{}", stderr(&refused));
    let still = scratch.cluster.sandbox(&hash).await.expect("get").expect("their Sandbox stays");
    assert_eq!(still.metadata.uid, theirs.metadata.uid, "their Sandbox is not replaced");
    assert!(still.metadata.deletion_timestamp.is_none(), "their Sandbox is not deleted");
    assert_eq!(still.metadata.generation, theirs.metadata.generation, "their Sandbox's spec is not changed");
    assert_eq!(still.spec, theirs.spec);
    let objects = scratch.cluster.domain_objects(&hash).await.expect("list");
    assert!(!objects.iter().any(|object| object.contains("Policy")), "no policy is put beside their Sandbox: {objects:?}");
    // Nor does `lazaret domain rm` delete it (once the refused start's coordinator is gone).
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the refused domain ends");
    let removed = run(env.lazaret().args(["domain", "rm", "--workspace"]).arg(&workspace));
    assert!(!removed.status.success() && stderr(&removed).contains("nothing was deleted"), "{}", stderr(&removed));
    let still = scratch.cluster.sandbox(&hash).await.expect("get").expect("their Sandbox stays");
    assert_eq!(still.metadata.uid, theirs.metadata.uid);
    assert!(still.metadata.deletion_timestamp.is_none(), "their Sandbox is not deleted");
    scratch.cluster.delete_domain(&hash, GONE).await.expect("delete theirs");

    // Ours, left running by a coordinator killed with SIGKILL: the next run
    // takes it over (a new pod of the same Sandbox).
    let mut session = keep_up(&env, &workspace);
    assert!(scratch.cluster.sandbox(&hash).await.expect("get").is_some(), "the domain's Sandbox");
    for pid in coordinator_pids(&workspace) {
        assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill").success());
    }
    let _ = session.kill();
    let _ = session.wait();
    assert!(wait_until(Duration::from_secs(10), || coordinator_pids(&workspace).is_empty()));
    assert!(scratch.cluster.sandbox(&hash).await.expect("get").is_some(), "a killed coordinator leaves its Sandbox");
    let again = lazaret_run(&env, &workspace, &["echo", "again"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(stdout(&again), "again\n");
    // Ours, made by a coordinator killed after the API server created it and
    // before it recorded its UID (the record is removed here, as that kill
    // leaves it): the holder token it carries says it is ours.
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the domain ends");
    let domain_dir = std::path::PathBuf::from(domain_json(&env, "default", &workspace)["domain_dir"].as_str().expect("domain_dir"));
    let ours = scratch.cluster.sandbox(&hash).await.expect("get").expect("our Sandbox");
    let token = ours.metadata.annotations.as_ref().and_then(|annotations| annotations.get("lazaret.dev/holder")).expect("its holder token");
    assert!(!domain_dir.join("cluster-holder").exists(), "the pending token goes once the UID is recorded");
    std::fs::remove_file(domain_dir.join("cluster-sandbox")).expect("the Sandbox's record");
    std::fs::write(domain_dir.join("cluster-holder"), token).expect("the pending token, as the killed coordinator left it");
    let once_more = lazaret_run(&env, &workspace, &["echo", "once more"]);
    assert_eq!(once_more.status.code(), Some(0), "{}", stderr(&once_more));
    assert_eq!(stdout(&once_more), "once more\n");
    let taken = scratch.cluster.sandbox(&hash).await.expect("get").expect("our Sandbox");
    assert_eq!(taken.metadata.uid, ours.metadata.uid, "the same Sandbox, taken over");
    assert_eq!(std::fs::read_to_string(domain_dir.join("cluster-sandbox")).ok(), ours.metadata.uid, "its UID recorded again");
    assert!(!domain_dir.join("cluster-holder").exists());
    ends_suspended_then_removed(&env, &scratch, &workspace, &hash).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn persistent_directories_on_a_cluster_survive_the_domain_and_state_diff_and_reset_see_the_agents_changes() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    env.write_config(&format!(
        "[profiles.default]\nimage = \"{image}\"\npersistent_dirs = [\"/usr/local\"]\n\
         backend = {{ kubernetes = {{ kubeconfig = \"{kubeconfig}\", namespace = \"{namespace}\", storage_class = \"lazaret-test-local\", \
         egress = \"none\" }} }}\n",
        image = image(),
        kubeconfig = kubeconfig().display(),
        namespace = scratch.namespace,
    ));
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);
    // The test cluster has no provisioner: the claim's volume, made by hand.
    let mut plan = scratch.plan(&["/usr/local"]);
    plan.domain_hash = hash.clone();
    plan.state_size = "10Gi".into();
    let host = tempfile::tempdir().expect("tempdir");
    let volume = scratch.volume_for(&plan, host.path()).await;

    let state = |arguments: &[&str]| run(env.lazaret().arg("state").args(arguments).arg("--workspace").arg(&workspace));
    // What the agent did: added a file, deleted one of the image's, made a
    // directory private.
    let changed = "M  /usr/local/bin\nD  /usr/local/bin/stat\nA  /usr/local/tool-marker\n";
    // Then, a second session added one more.
    let changed_later = "M  /usr/local/bin\nD  /usr/local/bin/stat\nA  /usr/local/second\nA  /usr/local/tool-marker\n";
    let first = lazaret_run(
        &env,
        &workspace,
        &["sh", "-c", "ls -A /usr/local; echo installed > /usr/local/tool-marker; rm /usr/local/bin/stat; chmod 700 /usr/local/bin"],
    );
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(stdout(&first), "bin\n", "seeded from the image");
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the first domain ends");
    // The pod is gone; the Sandbox is suspended and its claim kept.
    assert!(scratch.cluster.wait_no_pod(&hash, GONE).await.is_ok());
    let kept = scratch.cluster.sandbox(&hash).await.expect("get").expect("the Sandbox is kept");
    assert_eq!(kept.spec.operating_mode, Some(lazaret_kube::objects::OperatingMode::Suspended));
    // `state diff` with the domain down: as its teardown listed the pod.
    let diff = state(&["diff"]);
    assert_eq!(stdout(&diff), changed, "{}", stderr(&diff));

    // A later session finds what the agent installed, and nothing seeded
    // over it; while the domain runs, `state diff` lists the pod now.
    let mut session = keep_up(&env, &workspace);
    let second =
        lazaret_run(&env, &workspace, &["sh", "-c", "ls -A /usr/local; cat /usr/local/tool-marker; echo more > /usr/local/second"]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(stdout(&second), "bin\ntool-marker\ninstalled\n", "what the agent installed is there, and nothing was seeded over it");
    let diff = state(&["diff"]);
    assert_eq!(stdout(&diff), changed_later, "{}", stderr(&diff));
    let json = state(&["diff", "--json", "--dir", "/usr/local"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("state diff --json");
    assert_eq!(json[1], serde_json::json!({ "dir": "/usr/local", "path": "/usr/local/bin/stat", "kind": "deleted" }));
    let refused = state(&["reset", "--yes"]);
    assert!(!refused.status.success() && stderr(&refused).contains("is running"), "{}", stderr(&refused));
    let _ = session.kill();
    let _ = session.wait();
    for pid in coordinator_pids(&workspace) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the domain ends");
    let diff = state(&["diff"]);
    assert_eq!(stdout(&diff), changed_later, "{}", stderr(&diff));

    // `state reset`: the next start seeds the directory from the image again.
    let reset = state(&["reset", "--yes"]);
    assert!(reset.status.success(), "{}", stderr(&reset));
    assert_eq!(stdout(&state(&["diff"])), "no changes in /usr/local\n");
    let third = lazaret_run(&env, &workspace, &["sh", "-c", "ls -A /usr/local /usr/local/bin; stat -c %a /usr/local/bin"]);
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    assert_eq!(stdout(&third), "/usr/local:\nbin\n\n/usr/local/bin:\nls\nstat\n755\n", "the image's directory again");
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the third domain ends");
    assert_eq!(stdout(&state(&["diff"])), "no changes in /usr/local\n", "listed at the teardown: nothing changed since the seed");
    ends_suspended_then_removed(&env, &scratch, &workspace, &hash).await;
    scratch.delete_volume(&volume).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn net_allow_and_deny_change_the_domains_policy_object_on_the_cluster() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    env.write_config(&format!(
        "[profiles.default]\nimage = \"{image}\"\npersistent_dirs = []\nallow_egress = [\"github.com\"]\n\
         backend = {{ kubernetes = {{ kubeconfig = \"{kubeconfig}\", namespace = \"{namespace}\" }} }}\n",
        image = image(),
        kubeconfig = kubeconfig().display(),
        namespace = scratch.namespace,
    ));
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);
    let expected = |entries: &[&str]| {
        let rules: Vec<lazaret_core::egress::EgressRule> = entries.iter().map(|entry| entry.parse().expect("rule")).collect();
        lazaret_kube::egress::cilium_policy(&hash, &scratch.namespace, &rules).spec
    };
    let mut session = keep_up(&env, &workspace);
    assert_eq!(scratch.stored_cilium_policy(&hash).await.expect("the policy").spec, expected(&["github.com"]), "the profile's allowlist");
    let net = |arguments: &[&str]| run(env.lazaret().arg("net").args(arguments).arg("--workspace").arg(&workspace));

    let allowed = net(&["allow", "*.example.org"]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert_eq!(scratch.stored_cilium_policy(&hash).await.expect("the policy").spec, expected(&["github.com", "*.example.org"]));
    let denied = net(&["deny", "github.com"]);
    assert!(denied.status.success(), "{}", stderr(&denied));
    assert_eq!(scratch.stored_cilium_policy(&hash).await.expect("the policy").spec, expected(&["*.example.org"]));
    // A name inside a wider allow cannot be carved out of a policy object: refused by name, nothing changes.
    let carved = net(&["deny", "api.example.org"]);
    assert!(!carved.status.success() && stderr(&carved).contains("api.example.org"), "{}", stderr(&carved));
    assert_eq!(scratch.stored_cilium_policy(&hash).await.expect("the policy").spec, expected(&["*.example.org"]));
    let shown = net(&["show", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("net show --json");
    assert_eq!(shown["allow"], serde_json::json!(["*.example.org"]));
    // Audited as locally.
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&workspace));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit json");
    let changes: Vec<serde_json::Value> = records
        .iter()
        .filter(|record| record["type"] == "policyChanged")
        .map(|record| serde_json::json!([record["outcome"], record["action"], record["entries"]]))
        .collect();
    for change in
        [serde_json::json!(["networkAllowed", "allow", ["*.example.org"]]), serde_json::json!(["networkDenied", "deny", ["github.com"]])]
    {
        assert!(changes.contains(&change), "{change} in {changes:?}");
    }

    let _ = session.kill();
    let _ = session.wait();
    for pid in coordinator_pids(&workspace) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the domain ends");
    let removed = run(env.lazaret().args(["domain", "rm", "--workspace"]).arg(&workspace));
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert!(cluster_is_clean(&scratch, &hash).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_profile_reaches_its_suspended_domain_and_no_old_allowlist_stays() {
    let scratch = Scratch::new().await;
    let env = TestEnv::new();
    let config = |memory: &str, egress: &str| {
        env.write_config(&format!(
            "[profiles.default]\nimage = \"{image}\"\npersistent_dirs = []\nallow_egress = [{allow}]\nlimits = {{ memory = \"{memory}\" }}\n\
             backend = {{ kubernetes = {{ kubeconfig = \"{kubeconfig}\", namespace = \"{namespace}\", egress = \"{egress}\" }} }}\n",
            image = image(),
            allow = if egress == "cilium" { "\"github.com\"" } else { "" },
            kubeconfig = kubeconfig().display(),
            namespace = scratch.namespace,
        ));
    };
    config("512M", "cilium");
    let workspace = git_repository(&env, "ws");
    let hash = domain_hash(&env, &workspace);
    let first = lazaret_run(&env, &workspace, &["true"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(wait_until(Duration::from_secs(60), || coordinator_pids(&workspace).is_empty()), "the first domain ends");
    assert!(scratch.stored_cilium_policy(&hash).await.is_some(), "the allowlist's policy");
    let template = |sandbox: &lazaret_kube::objects::Sandbox| serde_json::to_string(&sandbox.spec.pod_template).expect("json");
    let before = scratch.cluster.sandbox(&hash).await.expect("get").expect("the suspended Sandbox");
    assert!(template(&before).contains(&(512u64 << 20).to_string()), "{}", template(&before));

    // The profile loses its egress and half its memory; the next run resumes the same Sandbox with both.
    config("256M", "none");
    let second = lazaret_run(&env, &workspace, &["true"]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let after = scratch.cluster.sandbox(&hash).await.expect("get").expect("the Sandbox");
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same Sandbox, resumed");
    assert!(
        template(&after).contains(&(256u64 << 20).to_string()) && !template(&after).contains(&(512u64 << 20).to_string()),
        "the whole pod template follows the profile: {}",
        template(&after)
    );
    assert!(scratch.stored_cilium_policy(&hash).await.is_none(), "the old allowlist's policy is gone (Cilium adds policies up)");
    let objects = scratch.cluster.domain_objects(&hash).await.expect("list");
    assert!(objects.iter().any(|object| object.starts_with("NetworkPolicy/")), "the deny-all policy: {objects:?}");
    ends_suspended_then_removed(&env, &scratch, &workspace, &hash).await;
}
