//! End-to-end tests of Host Escalation: `lazaret-escalate` inside a real
//! gVisor sandbox, the real mTLS Escalation Socket, real host commands, the
//! JSON-RPC approval API, and forged requests from a client the test builds.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use lazaret_test_support::*;

fn escalation_config(env: &TestEnv, auto_approve: &[&str], approval_timeout: u64) {
    let rules: Vec<String> = auto_approve.iter().map(|rule| format!("{rule:?}")).collect();
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\nauto_approve = [{}]\napproval_timeout_seconds = {approval_timeout}\n",
        env.path().join("run/lazaret").display(),
        rules.join(", ")
    ));
}

fn control_socket(env: &TestEnv, repository: &Path) -> PathBuf {
    PathBuf::from(domain_json(env, "default", repository)["control_socket"].as_str().expect("socket"))
}

fn audit(env: &TestEnv, repository: &Path) -> Vec<serde_json::Value> {
    let output = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(repository));
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice::<Vec<serde_json::Value>>(&output.stdout).expect("audit json")
}

#[test]
fn an_auto_approved_command_runs_on_the_host_and_its_output_and_status_come_back() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["touch *", "ls *"], 5);
    let repository = git_repository(&env, "project");
    let output = agent(&env, &repository).output(
        "lazaret-escalate -- touch made-on-host; echo touch=$?; test -e /workspace/made-on-host && echo visible-inside; \
         lazaret-escalate -- ls README.md; echo ls=$?; lazaret-escalate -- ls no-such-file; echo missing=$?",
    );
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(text.contains("touch=0"), "{text}");
    assert!(repository.join("made-on-host").exists(), "the side effect happens on the host");
    assert!(!text.contains("visible-inside"), "and only on the host: {text}");
    assert!(text.contains("README.md\nls=0"), "output comes back: {text}");
    assert!(text.contains("missing=2"), "exit status comes back: {text}");
    assert!(stderr(&output).contains("no-such-file"), "stderr comes back: {}", stderr(&output));
    let records = audit(&env, &repository);
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(records
        .iter()
        .all(|r| r["type"] == "escalation" && r["outcome"] == "auto" && r["decidedBy"] == "policy" && r["verified"] == true));
    assert_eq!(records[0]["executedArgv"][0], "/usr/bin/touch", "resolved on the host's PATH");
    assert_eq!(records[0]["requestedArgv"], serde_json::json!(["touch", "made-on-host"]));
}

/// Attack review finding 7: the command timeout applied only while output
/// was open, so a host command that closed stdout and stderr and kept
/// running was waited for forever. Its whole process group is killed at the
/// deadline.
#[test]
fn a_host_command_that_closes_its_output_is_still_killed_at_the_deadline() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\nauto_approve = [\"lzt-detach\"]\ncommand_timeout_seconds = 2\n",
        env.path().join("run/lazaret").display()
    ));
    let repository = git_repository(&env, "project");
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let pids = env.path().join("pids");
    std::fs::write(
        bin.join("lzt-detach"),
        format!("#!/bin/sh\nexec >/dev/null 2>&1 </dev/null\nsleep 60 &\necho $$ $! > {}\nwait\n", pids.display()),
    )
    .expect("write");
    std::fs::set_permissions(bin.join("lzt-detach"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = "start=$(date +%s); lazaret-escalate -- lzt-detach; echo status=$?; echo took=$(( $(date +%s) - start ))";
    let started = std::time::Instant::now();
    let output = run(env.lazaret().env("PATH", &path).args(["run", "--workspace"]).arg(&repository).args(["--", "sh", "-c", script]));
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(text.contains("status=98"), "the client hears that the command was killed: {text}");
    let took: u64 = text.lines().find_map(|line| line.strip_prefix("took=")).and_then(|value| value.parse().ok()).expect("took");
    assert!(took <= 6, "killed at the 2 s deadline, not after the command's 60 s ({took} s; whole run {:?})", started.elapsed());
    let recorded = std::fs::read_to_string(&pids).expect("the command ran on the host");
    for pid in recorded.split_whitespace() {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ");
        assert!(!alive, "process {pid} of the command's group is gone");
    }
    let records = audit(&env, &repository);
    assert_eq!(records[0]["type"], "escalation", "{records:?}");
    assert_eq!(records[0]["reason"], "killed after 2 s", "{records:?}");
}

/// Attack review finding 9: a client that hung up left its request in
/// `escalation/list` and `lazaret pending` until the approval timeout.
#[test]
fn a_request_whose_client_went_away_leaves_the_pending_queue() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 120);
    let repository = git_repository(&env, "project");
    let pending_count = || {
        let output = run(env.lazaret().args(["pending", "--json"]));
        serde_json::from_slice::<Vec<serde_json::Value>>(&output.stdout).map(|list| list.len()).unwrap_or(usize::MAX)
    };
    let mut session = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&repository)
        // The session outlives the client: the domain (and its queue) stays up.
        .args(["--", "sh", "-c", "lazaret-escalate -- touch never & echo $! > /tmp/lzt-client; sleep 30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(20), || pending_count() == 1), "the request is pending");
    let container = domain_json(&env, "default", &repository)["container_name"].as_str().expect("name").to_owned();
    let kill = std::process::Command::new("podman")
        .args(["exec", &container, "sh", "-c", "kill -9 $(cat /tmp/lzt-client)"])
        .output()
        .expect("podman exec");
    assert!(kill.status.success(), "{}", stderr(&kill));
    let gone_at = std::time::Instant::now();
    assert!(wait_until(Duration::from_secs(2), || pending_count() == 0), "the request leaves the queue when its client goes away");
    eprintln!("withdrawn after {:?}", gone_at.elapsed());
    assert!(session.try_wait().expect("try_wait").is_none(), "the session (and its domain) still runs");
    let _ = session.kill();
    let _ = session.wait();
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let records = audit(&env, &repository);
    assert_eq!(records[0]["type"], "escalation", "{records:?}");
    assert_eq!(records[0]["outcome"], "denied", "{records:?}");
    assert_eq!(records[0]["decidedBy"], "client", "{records:?}");
}

/// Attack review finding 15: 300 requests of about 600 KB took the
/// coordinator to 2 GB and the store to 637 MB, and `lazaret pending` then
/// printed "no pending escalations". Oversized requests are refused before
/// anything waits on them and audited only as a bounded prefix with a digest;
/// a session can keep at most 8 requests waiting for a human.
#[test]
fn oversized_requests_and_a_flood_of_pending_requests_are_refused() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 120);
    let repository = git_repository(&env, "project");
    let pending = || -> Vec<serde_json::Value> {
        let output = run(env.lazaret().args(["pending", "--json"]));
        assert!(output.status.success(), "lazaret pending: {}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("json")
    };
    let script = "big=$(head -c 100000 /dev/zero | tr '\\0' a); lazaret-escalate --justification \"$big\" -- touch big; echo big=$?; \
                  esc=$(head -c 60000 /dev/zero | tr '\\0' '\\001'); lazaret-escalate -- touch \"$esc\"; echo escaped=$?; \
                  for i in 1 2 3 4 5 6 7 8 9 10; do (lazaret-escalate -- touch flood-$i >/dev/null 2>&1; echo flood=$? >> /tmp/flood) & done; \
                  sleep 4; cat /tmp/flood; touch /tmp/done; sleep 30";
    let mut session = agent(&env, &repository).spawn(script);
    let container = domain_json(&env, "default", &repository)["container_name"].as_str().expect("name").to_owned();
    let done = || {
        std::process::Command::new("podman")
            .args(["exec", &container, "test", "-e", "/tmp/done"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(wait_until(Duration::from_secs(40), done), "the flood was sent");
    let waiting = pending();
    assert_eq!(waiting.len(), 8, "at most 8 requests of one session wait for a human: {}", waiting.len());
    let _ = session.kill();
    let output = session.wait_with_output().expect("wait");
    let text = stdout(&output);
    assert!(text.contains("big=99"), "the oversized request is refused at once: {text}");
    assert!(text.contains("escaped=99"), "a request too large to show once escaped is refused at once: {text}");
    assert_eq!(text.matches("flood=99").count(), 2, "the requests beyond the cap are refused: {text}");
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let records = audit(&env, &repository);
    let big =
        records.iter().find(|record| record["reason"].as_str().is_some_and(|reason| reason.contains("justification is"))).expect("audited");
    assert_eq!(big["type"], "escalation", "{big}");
    let kept = big["justification"].as_str().expect("justification");
    assert!(kept.len() < 1200 && kept.contains("[truncated: 100000 bytes, sha256 "), "bounded in the store: {} bytes", kept.len());
    assert!(
        records.iter().any(|record| record["reason"].as_str().is_some_and(|reason| reason.contains("bytes to show"))),
        "the escaped request's refusal is audited"
    );
    let refused =
        records.iter().filter(|record| record["reason"].as_str().is_some_and(|reason| reason.contains("already has 8 requests"))).count();
    assert_eq!(refused, 2, "{records:?}");
}

/// `lazaret pending` never reports "nothing pending" for a domain it could
/// not ask (finding 15): the error is printed and the exit status is 1.
/// A control socket where `lazaret pending` looks for coordinators, for a
/// test to play a coordinator on.
fn fake_control_socket(env: &TestEnv) -> std::os::unix::net::UnixListener {
    let socket_dir = env.path().join("run/lazaret/0123456789ab");
    std::fs::create_dir_all(&socket_dir).expect("mkdir");
    std::fs::set_permissions(env.path().join("run/lazaret"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    std::os::unix::net::UnixListener::bind(socket_dir.join("control.sock")).expect("bind")
}

#[test]
fn pending_reports_a_domain_it_cannot_list() {
    let env = TestEnv::new();
    let listener = fake_control_socket(&env);
    // A coordinator that answers every call with an error, as one whose
    // answer was too big did.
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut writer = stream;
            // Until the client hangs up (an empty buffer is end of stream).
            while reader.fill_buf().is_ok_and(|buffer| !buffer.is_empty()) {
                let request = read_frame(&mut reader);
                let reply =
                    serde_json::json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32008, "message": "Response is too big"}});
                write_frame(&mut writer, &reply);
            }
        }
    });
    for arguments in [&["pending"][..], &["pending", "--json"][..]] {
        let output = run(env.lazaret().args(arguments));
        assert_eq!(output.status.code(), Some(1), "{arguments:?}: {}{}", stdout(&output), stderr(&output));
        assert!(stderr(&output).contains("Response is too big"), "{arguments:?}: {}", stderr(&output));
        assert!(!stdout(&output).contains("no pending escalations"), "{arguments:?}: {}", stdout(&output));
    }
}

/// Issue 26 item 5: a client that could not ask never says "nothing
/// pending". A coordinator that takes the connection and never answers
/// made `lazaret pending` (and `editor-info`, the editors' discovery) wait
/// for an hour; now it is reported within seconds and the exit status says
/// the list is incomplete.
#[test]
fn pending_reports_a_coordinator_that_does_not_answer() {
    let env = TestEnv::new();
    let listener = fake_control_socket(&env);
    // Accepts, reads, never answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let within = |arguments: &[&str]| {
        let mut child = env.lazaret().args(arguments).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
        let started = std::time::Instant::now();
        let ended = wait_until(Duration::from_secs(30), || child.try_wait().ok().flatten().is_some());
        if !ended {
            let _ = child.kill();
        }
        let output = child.wait_with_output().expect("wait");
        assert!(ended, "lazaret {arguments:?} still waited after 30 s");
        (output, started.elapsed())
    };
    for arguments in [&["pending"][..], &["pending", "--json"][..]] {
        let (output, took) = within(arguments);
        assert_eq!(output.status.code(), Some(1), "{arguments:?}: {}{}", stdout(&output), stderr(&output));
        assert!(stderr(&output).contains("did not answer pending_list within 5 s"), "{arguments:?}: {}", stderr(&output));
        assert!(!stdout(&output).contains("nothing is pending"), "{arguments:?}: {}", stdout(&output));
        assert!(took < Duration::from_secs(15), "{arguments:?} took {took:?}");
    }
    let (output, _) = within(&["editor-info", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("editor-info json");
    assert_eq!(info["domains"], serde_json::json!([]), "{info}");
}

/// Attack review finding 14: 3,000 connect/junk/close cycles added 3,000
/// audit records in 1.9 s, and connections held open without a handshake
/// took the coordinator to 17,810 descriptors. Now refusals of
/// unauthenticated connections are recorded once per kind and window and
/// otherwise counted, and at most 64 connections are served at once.
#[test]
fn a_flood_of_unauthenticated_connections_is_capped_and_summarised() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let testhost = static_helper("lazaret-testhost");
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\nauto_approve = [\"true\"]\n\n[profiles.flood]\nimage = \"{DEFAULT_IMAGE}\"\nvolumes = [{{ host = \"{}\", container = \"/opt/testhost\", mode = \"ro\" }}]\n",
        env.path().join("run/lazaret").display(),
        testhost.display()
    ));
    let repository = git_repository(&env, "project");
    let socket = lazaret_protocol::escalation::paths::SOCKET;
    let script =
        format!("/opt/testhost uds-flood {socket} 3000; /opt/testhost uds-hold {socket} 600 6; lazaret-escalate -- true; echo after=$?");
    let mut session = env
        .lazaret()
        .args(["run", "--profile", "flood", "--workspace"])
        .arg(&repository)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // The coordinator's descriptors, sampled while the flood runs.
    let mut most_fds = 0usize;
    let started = std::time::Instant::now();
    while session.try_wait().expect("try_wait").is_none() && started.elapsed() < Duration::from_secs(120) {
        for pid in coordinator_pids(&repository) {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|entries| entries.count()).unwrap_or(0);
            most_fds = most_fds.max(fds);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = session.wait_with_output().expect("wait");
    let text = stdout(&output);
    assert!(text.contains("flooded 3000"), "{text}{}", stderr(&output));
    assert!(text.contains("after=0"), "a real request is still served after the flood: {text}");
    eprintln!("coordinator descriptors at most {most_fds}; {text}");
    assert!(most_fds < 250, "connections held open are capped: the coordinator had {most_fds} descriptors");
    let output = run(env.lazaret().args(["audit", "--json", "--profile", "flood", "--workspace"]).arg(&repository));
    assert!(output.status.success(), "{}", stderr(&output));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).expect("audit json");
    assert!(records.len() < 40, "refusals are summarised, not recorded one by one: {} records", records.len());
    // A refused connection is its own kind, with no request or session id
    // made up for it; a summary counts its connections in a field.
    let refusals: Vec<&serde_json::Value> = records.iter().filter(|record| record["type"] == "connectionRefused").collect();
    assert!(refusals
        .iter()
        .all(|record| record["outcome"] == "rejected" && record.get("requestId").is_none() && record.get("sessionId").is_none()));
    let summarised: u64 = refusals
        .iter()
        .filter(|record| record["reason"].as_str().is_some_and(|reason| reason.contains("more connections refused")))
        .filter_map(|record| record["connections"].as_u64())
        .sum();
    assert!(summarised >= 2000, "the summaries count the refused connections ({summarised}): {records:?}");
}

/// Attack review finding 6: auto-approved host commands had no concurrency
/// cap (ten `cat … /dev/zero` ran side by side). At most 8 run at once; the
/// rest are refused with a clear reason.
#[test]
fn at_most_eight_host_commands_run_at_once() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["sleep 3"], 5);
    let repository = git_repository(&env, "project");
    let script = "for i in 1 2 3 4 5 6 7 8 9 10 11; do (lazaret-escalate -- sleep 3 2>/tmp/err-$i; echo status=$?) & sleep 0.1; done; wait; cat /tmp/err-*";
    let output = agent(&env, &repository).output(script);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert_eq!(text.matches("status=0").count(), 8, "eight run: {text}");
    assert_eq!(text.matches("status=99").count(), 3, "the rest are refused: {text}");
    assert!(text.contains("host commands of this sandbox are already running"), "with the reason: {text}");
}

/// DECISIONS D11, from the attack review: with `cat /etc/hostname` allowed,
/// `cat /etc/hostname ANY-FILE` printed 0600 host files and the host's
/// unredacted `.git/config`. A rule is its exact argv; under a ` *` rule an
/// extra argument that leaves the project goes to the human. Here nobody
/// answers, so those requests time out (98) and nothing is printed.
#[test]
fn auto_approve_rules_are_exact_and_extra_paths_out_of_the_project_go_to_a_human() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["cat /etc/hostname", "head -n 1 *"], 1);
    let repository = git_repository(&env, "project");
    let secret = env.path().join("host-secret");
    std::fs::write(&secret, "TOP-SECRET-MARKER\n").expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let secret = secret.display().to_string();
    let script = format!(
        "lazaret-escalate -- cat /etc/hostname >/dev/null; echo exact=$?; \
         lazaret-escalate -- cat /etc/hostname {secret}; echo extra-file=$?; \
         lazaret-escalate -- cat /etc/hostname .git/config; echo git-config=$?; \
         lazaret-escalate -- head -n 1 README.md; echo in-project=$?; \
         lazaret-escalate -- head -n 1 {secret}; echo absolute=$?; \
         lazaret-escalate -- head -n 1 ../host-secret; echo dotdot=$?; \
         lazaret-escalate -- head -n 1 '~/.bashrc'; echo home=$?"
    );
    let output = agent(&env, &repository).output(&script);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    for expected in ["exact=0", "extra-file=98", "git-config=98", "in-project=0", "absolute=98", "dotdot=98", "home=98"] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    assert!(text.contains("# project"), "the exact and in-project requests ran: {text}");
    assert!(!text.contains("TOP-SECRET-MARKER") && !stderr(&output).contains("TOP-SECRET-MARKER"), "no host file leaked: {text}");
    let records = audit(&env, &repository);
    let outcomes: Vec<&str> = records.iter().filter_map(|record| record["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["auto", "timedOut", "timedOut", "auto", "timedOut", "timedOut", "timedOut"], "{records:?}");
    assert!(records.iter().all(|record| record["type"] == "escalation"), "{records:?}");
}

/// Issue 29: an auto-approve rule revoked with `lazaret rules revoke` stops
/// approving at once (the next request of the same session waits for a
/// human), leaves the listing, is audited, and cannot be revoked twice.
#[test]
fn a_revoked_auto_approve_rule_stops_approving_at_once() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["touch *"], 60);
    let repository = git_repository(&env, "project");
    // Auto-approved requests, one after another, until one is not.
    let child = agent(&env, &repository).spawn(
        "n=0; while :; do lazaret-escalate -- touch loop-marker; rc=$?; [ $rc -ne 0 ] && break; n=$((n+1)); sleep 0.2; done; \
         echo stopped=$rc after=$n",
    );
    assert!(wait_until(Duration::from_secs(60), || repository.join("loop-marker").exists()), "the rule approves at first");
    let rules = || {
        let listed = run(env.lazaret().args(["rules", "--json"]));
        assert!(listed.status.success(), "{}", stderr(&listed));
        let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("rules json");
        listed.as_object().and_then(|domains| domains.values().next()).cloned().expect("one domain")
    };
    let listed = rules();
    assert_eq!(listed["autoApprove"][0]["entry"], "touch *", "{listed}");
    assert_eq!(listed["autoApprove"][0]["id"], "auto-1", "{listed}");
    let config = env.path().join("config/lazaret/config.toml");
    let source = listed["autoApprove"][0]["source"].as_str().unwrap_or("");
    assert!(source.starts_with(&format!("{}:4:", config.display())), "the file and line it is written on: {listed}");

    let revoke = run(env.lazaret().args(["rules", "revoke", "auto-1"]));
    assert!(revoke.status.success(), "{}", stderr(&revoke));
    // The next request waits for a human.
    let pending = || -> Vec<serde_json::Value> {
        let pending = run(env.lazaret().args(["pending", "--json"]));
        assert!(pending.status.success(), "{}", stderr(&pending));
        let items: Vec<serde_json::Value> = serde_json::from_slice(&pending.stdout).expect("pending json");
        items.into_iter().filter(|item| item["kind"] == "command").collect()
    };
    assert!(wait_until(Duration::from_secs(30), || !pending().is_empty()), "the next request goes to a human");
    let waiting = pending();
    assert_eq!(waiting[0]["argv"], serde_json::json!(["touch", "loop-marker"]), "{waiting:?}");
    assert_eq!(rules()["autoApprove"], serde_json::json!([]), "gone from the listing");
    let again = run(env.lazaret().args(["rules", "revoke", "auto-1"]));
    assert!(!again.status.success(), "revoked once only");
    assert!(stderr(&again).contains("auto-1"), "the error names the id: {}", stderr(&again));
    let deny = run(env.lazaret().args(["deny", waiting[0]["requestId"].as_str().expect("id")]));
    assert!(deny.status.success(), "{}", stderr(&deny));
    let output = child.wait_with_output().expect("wait");
    let text = stdout(&output);
    assert!(text.contains("stopped=97"), "the request after the revoke was denied by the human: {text}{}", stderr(&output));

    let records = audit(&env, &repository);
    let outcomes: Vec<&str> = records.iter().filter_map(|record| record["outcome"].as_str()).collect();
    let revoked = outcomes.iter().position(|outcome| *outcome == "networkRevoked").expect("the revoke is audited");
    assert!(revoked > 0 && outcomes[..revoked].iter().all(|outcome| *outcome == "auto"), "{outcomes:?}");
    assert_eq!(outcomes[revoked + 1..], ["denied"], "{outcomes:?}");
    assert_eq!(records[revoked]["type"], "autoApproveRevoked", "{:?}", records[revoked]);
    assert_eq!(records[revoked]["entry"], "touch *", "{:?}", records[revoked]);
    assert_eq!(records[revoked]["ruleId"], "auto-1", "{:?}", records[revoked]);
    assert!(records[revoked].get("requestedArgv").is_none() && records[revoked].get("sessionId").is_none(), "{:?}", records[revoked]);
    assert_eq!(records[revoked]["decidedBy"], "rpc:cli", "{:?}", records[revoked]);
}

#[test]
fn a_request_that_needs_a_human_waits_and_is_approved_denied_or_edited_over_json_rpc() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 60);
    let repository = git_repository(&env, "project");
    let socket = control_socket(&env, &repository);
    let script = "lazaret-escalate --justification 'create the marker' -- touch approved-marker; echo approve=$?; \
                  lazaret-escalate -- touch denied-marker; echo deny=$?; \
                  lazaret-escalate -- touch requested-marker; echo edit=$?";
    let child = agent(&env, &repository).spawn(script);
    assert!(wait_until(Duration::from_secs(15), || socket.exists()));
    let mut rpc = Rpc::connect(&socket);

    let pending = rpc.wait_for_pending();
    assert_eq!(pending["argv"], serde_json::json!(["touch", "approved-marker"]));
    assert_eq!(pending["justification"], "create the marker");
    assert_eq!(pending["cwd"], repository.to_str().expect("utf8"));
    assert!(!repository.join("approved-marker").exists(), "nothing runs before the answer");
    let answer =
        rpc.call("escalation/respond", serde_json::json!({"requestId": pending["requestId"], "decision": "approve", "client": "test"}));
    assert_eq!(answer["result"], true, "{answer}");
    let again = rpc.call("escalation/respond", serde_json::json!({"requestId": pending["requestId"], "decision": "deny"}));
    assert_eq!(again["error"]["code"], 1007, "the first answer wins: {again}");

    let pending = rpc.wait_for_pending();
    assert_eq!(pending["argv"][1], "denied-marker");
    rpc.call("escalation/respond", serde_json::json!({"requestId": pending["requestId"], "decision": "deny", "reason": "not today"}));

    let pending = rpc.wait_for_pending();
    rpc.call(
        "escalation/respond",
        serde_json::json!({"requestId": pending["requestId"], "decision": "edit", "argv": ["touch", "edited-marker"], "client": "test"}),
    );
    let output = child.wait_with_output().expect("wait");
    let text = stdout(&output);
    assert!(text.contains("approve=0") && text.contains("deny=97") && text.contains("edit=0"), "{text}\n{}", stderr(&output));
    assert!(stderr(&output).contains("denied: not today"), "{}", stderr(&output));
    // The client reports an edit (its `Running` frame is sent at once).
    assert!(stderr(&output).contains("the request was edited; running: touch edited-marker"), "{}", stderr(&output));
    assert!(repository.join("approved-marker").exists());
    assert!(!repository.join("denied-marker").exists());
    assert!(repository.join("edited-marker").exists() && !repository.join("requested-marker").exists(), "the edited argv is what runs");
    let records = audit(&env, &repository);
    let outcomes: Vec<(String, String)> = records
        .iter()
        .map(|r| (r["outcome"].as_str().unwrap_or("").to_owned(), r["decidedBy"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("approved".to_owned(), "rpc:test".to_owned()),
            ("denied".to_owned(), "rpc".to_owned()),
            ("edited".to_owned(), "rpc:test".to_owned())
        ]
    );
    assert!(records.iter().all(|record| record["type"] == "escalation"), "{records:?}");
    assert_eq!(records[2]["requestedArgv"], serde_json::json!(["touch", "requested-marker"]), "the audit keeps both argvs");
    assert_eq!(records[2]["executedArgv"][1], "edited-marker", "{:?}", records[2]);
}

#[test]
fn metacharacters_never_auto_run_and_prefix_boundaries_hold() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["touch *", "lzt-tool test *"], 2);
    let repository = git_repository(&env, "project");
    // A host tool that records how it was called.
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::write(bin.join("lzt-tool"), "#!/bin/sh\necho \"$@\" >> ran.log\n").expect("write");
    std::fs::set_permissions(bin.join("lzt-tool"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = "for name in 'a;b' 'a|b' '$(id)' 'a`b' 'x\ny' \"$(printf 'esc\\033[31m')\" \"$(printf 'bidi\\342\\200\\256')\" 'c#d'; do \
                    lazaret-escalate -- touch \"$name\"; echo \"status=$?\"; done; \
                  lazaret-escalate -- lzt-tool test --x; echo prefix=$?; \
                  lazaret-escalate -- lzt-tool testx; echo longer-word=$?; \
                  lazaret-escalate -- lzt-tool; echo shorter=$?";
    let output = run(env.lazaret().env("PATH", &path).args(["run", "--workspace"]).arg(&repository).args(["--", "sh", "-c", script]));
    let text = stdout(&output);
    assert_eq!(text.matches("status=98").count(), 8, "each metacharacter request waits for a human and times out: {text}");
    let created: Vec<String> =
        std::fs::read_dir(&repository).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    for name in ["a;b", "a|b", "$(id)", "a`b", "c#d"] {
        assert!(!created.contains(&name.to_owned()), "{name} must not have been created: {created:?}");
    }
    assert!(text.contains("prefix=0"), "`lzt-tool test --x` matches the rule `lzt-tool test *`: {text}");
    assert!(text.contains("longer-word=98") && text.contains("shorter=98"), "{text}");
    assert_eq!(std::fs::read_to_string(repository.join("ran.log")).expect("ran"), "test --x\n", "only the prefix match ran");
}

/// A TLS client of our own, speaking the escalation protocol from the host
/// side of the socket, to send what `lazaret-escalate` never would.
struct Forger {
    socket: PathBuf,
    tls_dir: PathBuf,
}

impl Forger {
    fn config(&self, client: Option<(String, String)>, ca: rustls::pki_types::CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).expect("root");
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        Arc::new(match client {
            Some((certificate, key)) => builder
                .with_client_auth_cert(
                    vec![rustls::pki_types::CertificateDer::from_pem_slice(certificate.as_bytes()).expect("cert")],
                    rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
                )
                .expect("client auth"),
            None => builder.with_no_client_auth(),
        })
    }

    /// The sandbox's `bundle.pem`: its key, its certificate, the CA.
    fn bundle(&self) -> Option<String> {
        std::fs::read_to_string(self.tls_dir.join("bundle.pem")).ok()
    }

    /// The sandbox's certificate and key, as PEM (the bundle holds one of
    /// each before the CA, and PEM parsing takes the first).
    fn sandbox_credentials(&self) -> Option<(String, String)> {
        let bundle = self.bundle()?;
        Some((bundle.clone(), bundle))
    }

    /// Sends `request` (JSON) and returns the coordinator's frames, or the error.
    fn send(&self, client: Option<(String, String)>, request: &serde_json::Value) -> Result<Vec<serde_json::Value>, String> {
        use rustls::pki_types::pem::PemObject;
        let bundle = self.bundle().expect("bundle.pem");
        let ca = rustls::pki_types::CertificateDer::pem_slice_iter(bundle.as_bytes()).nth(1).expect("the CA").expect("pem");
        let connection = rustls::ClientConnection::new(
            self.config(client, ca),
            rustls::pki_types::ServerName::try_from("lazaret-coordinator").expect("name"),
        )
        .expect("connection");
        let stream = UnixStream::connect(&self.socket).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut tls = rustls::StreamOwned::new(connection, stream);
        let body = request.to_string();
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body.as_bytes());
        tls.write_all(&frame).map_err(|e| e.to_string())?;
        tls.flush().map_err(|e| e.to_string())?;
        let mut frames = Vec::new();
        loop {
            let mut prefix = [0u8; 4];
            if tls.read_exact(&mut prefix).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(prefix) as usize];
            tls.read_exact(&mut body).map_err(|e| e.to_string())?;
            let frame: serde_json::Value = serde_json::from_slice(&body).expect("frame");
            let last = matches!(frame["type"].as_str(), Some("exit" | "denied" | "timedOut" | "refused"));
            frames.push(frame);
            if last {
                break;
            }
        }
        if frames.is_empty() {
            return Err("connection closed without a frame".to_owned());
        }
        Ok(frames)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64
}

fn signed_request(
    credential: &serde_json::Value,
    session_id: &str,
    argv: &[&str],
    nonce: &str,
    key_override: Option<&SigningKey>,
) -> serde_json::Value {
    signed_request_with_id(credential, session_id, &format!("forged-{nonce}"), argv, nonce, key_override)
}

/// A signed request whose client-chosen id is `request_id`.
fn signed_request_with_id(
    credential: &serde_json::Value,
    session_id: &str,
    request_id: &str,
    argv: &[&str],
    nonce: &str,
    key_override: Option<&SigningKey>,
) -> serde_json::Value {
    let secret: [u8; 32] = BASE64.decode(credential["delegatedSecretKey"].as_str().expect("key")).expect("b64").try_into().expect("32");
    let key = key_override.cloned().unwrap_or_else(|| SigningKey::from_bytes(&secret));
    let payload = serde_json::json!({
        "requestId": request_id, "sessionId": session_id, "argv": argv, "nonce": nonce, "timestampMs": now_ms()
    })
    .to_string();
    let signature = BASE64.encode(key.sign(payload.as_bytes()).to_bytes());
    serde_json::json!({
        "payload": payload, "signature": signature,
        "delegation": credential["delegation"], "delegationSignature": credential["delegationSignature"],
    })
}

/// A session that prints its id and credential, then runs `then` (its
/// output follows on the returned lines) and sleeps: the id, the
/// credential and a forging client for its Escalation Socket.
struct ForgingSession {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    session_id: String,
    credential: serde_json::Value,
    forger: Forger,
}

fn forging_session(env: &TestEnv, repository: &Path, then: &str) -> ForgingSession {
    let mut child = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(repository)
        .args(["--", "sh", "-c", &format!("echo $LAZARET_SESSION_ID; echo $LAZARET_SESSION_CREDENTIAL; {then} sleep 60")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let session_id = lines.next().expect("line").expect("id");
    let credential_b64 = lines.next().expect("line").expect("credential");
    let credential: serde_json::Value = serde_json::from_slice(&BASE64.decode(credential_b64.trim()).expect("b64")).expect("json");
    let domain = domain_json(env, "default", repository);
    let forger = Forger {
        socket: PathBuf::from(domain["escalation_socket"].as_str().expect("socket")),
        tls_dir: Path::new(domain["socket_dir"].as_str().expect("socket_dir")).join("tls"),
    };
    ForgingSession { child, lines, session_id, credential, forger }
}

#[test]
fn forged_replayed_and_unauthenticated_requests_are_refused_and_audited() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["touch *"], 5);
    let repository = git_repository(&env, "project");
    let ForgingSession { mut child, mut lines, session_id, credential, forger } = forging_session(
        &env,
        &repository,
        "env -u LAZARET_SESSION_CREDENTIAL lazaret-escalate -- touch no-credential; echo no-credential=$?;",
    );
    assert_eq!(lines.next().expect("line").expect("status"), "no-credential=99", "a process without the credential is refused");
    let creds = forger.sandbox_credentials().expect("the sandbox's TLS credentials");

    // The harness works: a well-formed request with the real credential runs.
    let good = signed_request(&credential, &session_id, &["touch", "forger-ok"], "00000000000000000000000000000001", None);
    let frames = forger.send(Some(creds.clone()), &good).expect("send");
    assert_eq!(frames.last().expect("frame")["type"], "exit", "{frames:?}");
    assert!(repository.join("forger-ok").exists());

    // Replayed: the same bytes again.
    let frames = forger.send(Some(creds.clone()), &good).expect("send");
    assert!(frames.last().expect("frame")["reason"].as_str().unwrap_or("").contains("replayed"), "{frames:?}");
    // Tampered: the argv changed after signing.
    let mut tampered = signed_request(&credential, &session_id, &["touch", "tampered"], "00000000000000000000000000000002", None);
    tampered["payload"] = tampered["payload"].as_str().expect("payload").replace("tampered", "tampered-x").into();
    let frames = forger.send(Some(creds.clone()), &tampered).expect("send");
    assert!(frames.last().expect("frame")["reason"].as_str().unwrap_or("").contains("signature"), "{frames:?}");
    // Signed by a key the session never delegated.
    let stranger = SigningKey::from_bytes(&[42; 32]);
    let forged = signed_request(&credential, &session_id, &["touch", "stranger"], "00000000000000000000000000000003", Some(&stranger));
    let frames = forger.send(Some(creds.clone()), &forged).expect("send");
    assert!(frames.last().expect("frame")["reason"].as_str().unwrap_or("").contains("signature"), "{frames:?}");
    // No client certificate: the handshake fails.
    let fresh = signed_request(&credential, &session_id, &["touch", "no-cert"], "00000000000000000000000000000004", None);
    assert!(forger.send(None, &fresh).is_err(), "no client certificate, no answer");
    // A certificate from another CA with the right identity.
    let other_ca = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca_params, other_ca);
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    let identity = x509_parser::parse_x509_certificate(
        &rustls::pki_types::pem::PemObject::from_pem_slice(creds.0.as_bytes())
            .map(|c: rustls::pki_types::CertificateDer| c.to_vec())
            .expect("der"),
    )
    .ok()
    .and_then(|(_, cert)| cert.subject_alternative_name().ok().flatten().map(|san| format!("{:?}", san.value.general_names)))
    .unwrap_or_default();
    assert!(identity.contains("lazaret://sandbox/default/"), "{identity}");
    params.subject_alt_names = vec![rcgen::SanType::URI("lazaret://sandbox/default/x/y".try_into().expect("uri"))];
    let foreign = params.signed_by(&key, &issuer).expect("sign");
    assert!(forger.send(Some((foreign.pem(), key.serialize_pem())), &fresh).is_err(), "another CA's certificate is refused");
    for name in ["tampered", "tampered-x", "stranger", "no-cert"] {
        assert!(!repository.join(name).exists(), "{name} must not run");
    }
    let _ = child.kill();
    let _ = child.wait();
    // Refusals before authentication are recorded once per kind and window,
    // the rest counted (finding 14); the count is written by teardown at the
    // latest.
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let records = audit(&env, &repository);
    let rejected: Vec<String> =
        records.iter().filter(|r| r["outcome"] == "rejected").map(|r| r["reason"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(rejected.len(), 5, "replay, tamper, stranger, no certificate, then the foreign CA counted: {rejected:#?}");
    assert_eq!(rejected.iter().filter(|reason| reason.starts_with("TLS handshake failed")).count(), 1, "{rejected:#?}");
    assert!(rejected.iter().any(|reason| reason.starts_with("1 more connections refused (TLS handshake failed)")), "{rejected:#?}");
    // The requests that were read are escalations of the session they
    // claimed, unverified; the connections refused before a request are
    // their own kind, counted, with no ids made up for them.
    let kinds: Vec<(&str, bool)> =
        records.iter().filter(|r| r["outcome"] == "rejected").map(|r| (r["type"].as_str().unwrap_or(""), r["verified"] == true)).collect();
    assert_eq!(kinds.iter().filter(|(kind, verified)| *kind == "escalation" && !verified).count(), 3, "{records:#?}");
    let refused: Vec<&serde_json::Value> = records.iter().filter(|r| r["type"] == "connectionRefused").collect();
    assert_eq!(refused.iter().map(|r| r["connections"].as_u64().unwrap_or(0)).collect::<Vec<_>>(), [1, 1], "{refused:#?}");
    assert!(refused.iter().all(|r| r.get("requestId").is_none() && r.get("sessionId").is_none()), "{refused:#?}");
}

/// Attack review (issue 26, finding 7): the coordinator keyed a request by
/// the id its client chose, so a second request reusing a pending id ended
/// both (audited as `timedOut`, "nobody approved within 120 s", which was
/// false), and an agent knew the id a link in an editor had to name. Ids are
/// now minted by the coordinator; the client's is kept as a correlation
/// value only.
#[test]
fn request_ids_are_minted_by_the_coordinator_and_a_reused_client_id_ends_nothing() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 60);
    let repository = git_repository(&env, "project");
    let ForgingSession { mut child, session_id, credential, forger, .. } = forging_session(&env, &repository, "");
    let forger = Arc::new(forger);
    let chosen = "chosen-by-the-agent";
    let senders: Vec<_> = ["first", "second"]
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let request = signed_request_with_id(&credential, &session_id, chosen, &["touch", name], &format!("{:032x}", index + 1), None);
            let forger = forger.clone();
            let creds = forger.sandbox_credentials().expect("the sandbox's TLS credentials");
            std::thread::spawn(move || forger.send(Some(creds), &request))
        })
        .collect();
    let mut pending = Vec::new();
    assert!(
        wait_until(Duration::from_secs(8), || {
            pending = serde_json::from_slice::<Vec<serde_json::Value>>(&run(env.lazaret().args(["pending", "--json"])).stdout)
                .unwrap_or_default();
            pending.len() == 2
        }),
        "both requests wait, each under its own id: {pending:#?}"
    );
    let ids: Vec<String> = pending.iter().map(|p| p["requestId"].as_str().expect("id").to_owned()).collect();
    assert_ne!(ids[0], ids[1]);
    for id in &ids {
        assert_ne!(id, chosen);
        assert!(id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit()), "a minted id: {id}");
    }
    let first = pending.iter().find(|p| p["argv"][1] == "first").expect("first")["requestId"].as_str().expect("id").to_owned();
    let second = pending.iter().find(|p| p["argv"][1] == "second").expect("second")["requestId"].as_str().expect("id").to_owned();
    // The client's id answers nothing.
    let by_chosen = run(env.lazaret().args(["approve", chosen]));
    assert!(!by_chosen.status.success(), "{}", stdout(&by_chosen));
    assert!(run(env.lazaret().args(["approve", &first])).status.success());
    assert!(run(env.lazaret().args(["deny", &second])).status.success());
    let outcomes: Vec<Vec<serde_json::Value>> = senders.into_iter().map(|sender| sender.join().expect("thread").expect("frames")).collect();
    assert_eq!(outcomes[0].last().expect("frame")["type"], "exit", "{outcomes:?}");
    assert_eq!(outcomes[1].last().expect("frame")["type"], "denied", "{outcomes:?}");
    assert_eq!(outcomes[0][0]["requestId"], first.as_str(), "the client hears the minted id: {outcomes:?}");
    assert!(repository.join("first").exists());
    assert!(!repository.join("second").exists());
    let _ = child.kill();
    let _ = child.wait();
    let records = audit(&env, &repository);
    let record = |id: &str| records.iter().find(|r| r["requestId"] == id).cloned().unwrap_or_default();
    assert_eq!(record(&first)["type"], "escalation", "{records:#?}");
    assert_eq!(record(&first)["outcome"], "approved", "{records:#?}");
    assert_eq!(record(&second)["outcome"], "denied", "{records:#?}");
    for id in [&first, &second] {
        assert_eq!(record(id)["clientRequestId"], chosen, "{records:#?}");
    }
    assert!(!records.iter().any(|r| r["outcome"] == "timedOut"), "{records:#?}");
}

#[test]
fn editing_or_truncating_the_stored_audit_trail_is_detected() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &["touch *"], 5);
    let repository = git_repository(&env, "project");
    let output =
        agent(&env, &repository).output("lazaret-escalate -- touch one; lazaret-escalate -- touch two; lazaret-escalate -- touch three");
    assert!(output.status.success(), "{}", stderr(&output));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(30), || domain_is_torn_down(&domain, &repository)));
    let verify = || run(env.lazaret().args(["audit", "verify", "--workspace"]).arg(&repository));
    let intact = verify();
    assert!(intact.status.success() && stdout(&intact).contains("3 records"), "{}", stdout(&intact));
    // Change the store as someone with write access to the file would:
    // layout v5 keeps `<hash>\n<json>` per record.
    let store_path = Path::new(domain["domain_dir"].as_str().expect("dir")).join("state.redb");
    type AuditTable<'t> = redb::Table<'t, u64, &'static [u8]>;
    let change = |edit: &dyn Fn(&mut AuditTable)| {
        let database = redb::Database::create(&store_path).expect("open");
        let write = database.begin_write().expect("write");
        edit(&mut write.open_table(redb::TableDefinition::new("audit_v5")).expect("audit table"));
        write.commit().expect("commit");
    };
    let original = std::cell::RefCell::new(Vec::new());
    change(&|audit| {
        use redb::ReadableTable;
        let bytes = audit.get(2).expect("get").expect("record 2").value().to_vec();
        let newline = bytes.iter().position(|&byte| byte == b'\n').expect("hash line");
        let mut record: serde_json::Value = serde_json::from_slice(&bytes[newline + 1..]).expect("json");
        assert_eq!(record["type"], "escalation", "{record}");
        record["requestedArgv"] = serde_json::json!(["touch", "innocent"]);
        let mut edited = bytes[..=newline].to_vec();
        edited.extend(serde_json::to_vec(&record).expect("json"));
        audit.insert(2, edited.as_slice()).expect("insert");
        *original.borrow_mut() = bytes;
    });
    let edited = verify();
    assert_eq!(edited.status.code(), Some(1), "{}", stdout(&edited));
    assert!(stdout(&edited).contains("BROKEN at record 2"), "{}", stdout(&edited));
    // Put record 2 back, then remove the last record: the chain that is
    // left is intact, and the head kept beside the store says it ended at 3.
    change(&|audit| {
        audit.insert(2, original.borrow().as_slice()).expect("restore");
    });
    assert!(verify().status.success(), "{}", stdout(&verify()));
    change(&|audit| {
        audit.remove(3).expect("remove");
    });
    let truncated = verify();
    assert_eq!(truncated.status.code(), Some(1), "{}", stdout(&truncated));
    assert!(stdout(&truncated).contains("BROKEN at record 3: the last 1 record(s) were removed"), "{}", stdout(&truncated));
}

#[test]
fn the_plain_terminal_clients_list_and_answer_pending_requests_across_domains() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 60);
    let repository = git_repository(&env, "project");
    let child = agent(&env, &repository).spawn("lazaret-escalate -- touch via-cli; echo status=$?");
    let mut pending = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(15), || {
            pending = serde_json::from_slice(&run(env.lazaret().args(["pending", "--json"])).stdout).unwrap_or_default();
            pending.as_array().is_some_and(|list| !list.is_empty())
        }),
        "lazaret pending lists the request"
    );
    let request_id = pending[0]["requestId"].as_str().expect("id").to_owned();
    let info: serde_json::Value =
        serde_json::from_slice(&run(env.lazaret().args(["editor-info", "--json"])).stdout).expect("editor-info json");
    assert_eq!(info["framing"], "Content-Length");
    assert_eq!(info["domains"][0]["domainHash"], pending[0]["domainHash"], "{info}");
    let approve = run(env.lazaret().args(["approve", &request_id[..8]]));
    assert!(approve.status.success(), "{}", stderr(&approve));
    let output = child.wait_with_output().expect("wait");
    assert!(stdout(&output).contains("status=0"), "{}", stdout(&output));
    assert!(repository.join("via-cli").exists());
    assert_eq!(audit(&env, &repository)[0]["decidedBy"], "rpc:cli");
}

/// What the Session Anchor separates, and what it does not (attack review
/// finding 16): a process in the sandbox can read another session's
/// credential from `/proc/<pid>/environ` (the sandbox's processes share a
/// uid) and use it; its requests are then attributed to, and prompted on,
/// that session. Once that session has ended, the stolen credential is
/// refused: it is only good while its session is live.
#[test]
fn a_credential_read_from_another_session_works_only_while_that_session_lives() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    escalation_config(&env, &[], 60);
    let repository = git_repository(&env, "project");
    let socket = control_socket(&env, &repository);
    let mut sleepers = vec![agent(&env, &repository).spawn("sleep 120"), agent(&env, &repository).spawn("sleep 120")];
    assert!(wait_until(Duration::from_secs(30), || socket.exists()));
    let mut rpc = Rpc::connect(&socket);
    assert!(
        wait_until(Duration::from_secs(30), || rpc.call("domain/status", serde_json::json!({}))["result"]["sessions"]
            .as_array()
            .is_some_and(|sessions| sessions.len() == 2)),
        "both sleepers are live sessions"
    );
    // Another session steals a sleeper's credential and keeps a copy in the
    // sandbox's /tmp for later.
    let thief = agent(&env, &repository).spawn(
        "mine=$LAZARET_SESSION_ID; for e in /proc/[0-9]*/environ; do \
           id=$(tr '\\0' '\\n' < $e 2>/dev/null | sed -n 's/^LAZARET_SESSION_ID=//p'); \
           if [ -n \"$id\" ] && [ \"$id\" != \"$mine\" ]; then \
             tr '\\0' '\\n' < $e | sed -n 's/^LAZARET_SESSION_CREDENTIAL=//p' > /tmp/stolen; echo \"$id\" > /tmp/stolen-id; break; fi; \
         done; test -s /tmp/stolen || { echo no-credential-found; exit 3; }; \
         LAZARET_SESSION_ID=$(cat /tmp/stolen-id) LAZARET_SESSION_CREDENTIAL=$(cat /tmp/stolen) lazaret-escalate -- touch stolen-marker; \
         echo stolen=$?",
    );
    let pending = rpc.wait_for_pending();
    let sessions = rpc.call("domain/status", serde_json::json!({}))["result"]["sessions"].clone();
    let victim = sessions
        .as_array()
        .expect("sessions")
        .iter()
        .find(|session| session["sessionId"] == pending["sessionId"])
        .cloned()
        .expect("the request is attributed to a live session");
    assert_eq!(victim["command"], serde_json::json!(["sh", "-c", "sleep 120"]), "to the victim's session, not the thief's: {victim}");
    let answer =
        rpc.call("escalation/respond", serde_json::json!({"requestId": pending["requestId"], "decision": "deny", "reason": "stolen"}));
    assert_eq!(answer["result"], true, "{answer}");
    let output = thief.wait_with_output().expect("thief");
    assert!(
        stdout(&output).contains("stolen=97"),
        "the stolen credential was accepted, and denied by the human: {}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(!repository.join("stolen-marker").exists());

    // The victim's session ends; its credential dies with it.
    let victim_pid = victim["pid"].as_u64().expect("pid") as u32;
    let index = sleepers.iter().position(|child| child.id() == victim_pid).expect("the victim is one of our sleepers");
    let mut victim_child = sleepers.remove(index);
    let _ = victim_child.kill();
    let _ = victim_child.wait();
    assert!(
        wait_until(Duration::from_secs(15), || !rpc.call("domain/status", serde_json::json!({}))["result"]["sessions"]
            .as_array()
            .is_some_and(|sessions| sessions.iter().any(|session| session["pid"] == victim_pid))),
        "the victim's session ended"
    );
    let later = agent(&env, &repository).output("LAZARET_SESSION_ID=$(cat /tmp/stolen-id) LAZARET_SESSION_CREDENTIAL=$(cat /tmp/stolen) lazaret-escalate -- touch late-marker; echo late=$?");
    assert!(stdout(&later).contains("late=99"), "refused once its session is gone: {}{}", stdout(&later), stderr(&later));
    assert!(!repository.join("late-marker").exists());
    for mut sleeper in sleepers {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
}
