//! End-to-end tests of the control protocol as an editor speaks it, against
//! a live domain (real coordinator, real gVisor sandbox, real git): methods
//! without params take `[]`, `{}` or nothing; `branch/fileContents` serves
//! both sides of what the agent committed and what it left uncommitted;
//! `state/diff` matches `lazaret state diff`; a subscriber that falls
//! behind is told how much it lost, and sequence numbers have no gaps.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use lazaret_test_support::*;
use serde_json::{json, Value};

fn keep_config(env: &TestEnv) {
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\nauto_approve = [\"echo *\"]\n\n[profiles.keep]\nimage = \"{DEFAULT_IMAGE}\"\npersistent_dirs = [\"/usr\"]\n",
        env.path().join("run/lazaret").display()
    ));
}

fn lazaret_run(env: &TestEnv, repository: &Path) -> std::process::Command {
    let mut command = env.lazaret();
    command.args(["run", "--profile", "keep", "--workspace"]).arg(repository).arg("--");
    command
}

/// Keeps the domain up for the whole test (the first session).
struct Keeper(Child);

impl Drop for Keeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_domain(env: &TestEnv, repository: &Path) -> (Keeper, PathBuf, Value) {
    let domain = domain_json(env, "keep", repository);
    let keeper = lazaret_run(env, repository).args(["sleep", "600"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let socket = PathBuf::from(domain["control_socket"].as_str().expect("socket"));
    let keeper = Keeper(keeper);
    assert!(
        wait_until(Duration::from_secs(60), || {
            socket.exists()
                && UnixStream::connect(&socket).is_ok_and(|_| {
                    let mut rpc = Rpc::connect(&socket);
                    rpc.request("domain/status", None)["result"]["containerState"] == "running"
                })
        }),
        "the domain started"
    );
    (keeper, socket, domain)
}

#[test]
fn methods_for_editors_serve_file_contents_state_changes_and_take_empty_params() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    keep_config(&env);
    let repository = git_repository(&env, "project");
    let (_keeper, socket, domain) = start_domain(&env, &repository);

    // The agent commits a change, a binary file and a file over the text
    // cap, leaves another change uncommitted, and installs a tool in /usr.
    agent(&env, &repository).profile("keep").run(
        "cd /workspace && printf 'pub fn answer() -> u32 { 43 }\\n' > src/lib.rs && printf 'a\\000b' > blob.bin && \
         head -c 2097152 /dev/zero | tr '\\000' x > big.txt && git add -A && git commit -qm 'agent change' && \
         printf '# project, edited\\n' > README.md && echo tool > /usr/local/bin/agent-tool && \
         lazaret-escalate -- echo one && lazaret-escalate -- echo two && lazaret-escalate -- echo three",
    );
    let branch = "refs/heads/lazaret/agent-keep";
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::process::Command::new("git")
                .arg("-C")
                .arg(&repository)
                .args(["show", &format!("{branch}:src/lib.rs")])
                .output()
                .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains("43"))
        }),
        "the agent's commit reached the host"
    );

    let mut rpc = Rpc::connect(&socket);
    // Methods without (required) params: `[]` (what Neovim sends for `{}`),
    // `{}`, and no params at all.
    for method in ["domain/status", "escalation/list", "branch/diff", "audit/list", "audit/verify", "session/list", "state/diff"] {
        for params in [Some(json!([])), Some(json!({})), None] {
            let response = rpc.request(method, params.clone());
            assert!(response.get("result").is_some(), "{method} with params {params:?}: {response}");
        }
    }
    let status = rpc.result("domain/status", json!({}));
    assert_eq!(status["domainHash"], domain["domain_hash"]);

    let diff = rpc.result("branch/diff", json!({"patch": false}));
    let committed: Vec<&str> = diff["files"].as_array().expect("files").iter().filter_map(|file| file["path"].as_str()).collect();
    assert!(committed.contains(&"src/lib.rs") && committed.contains(&"blob.bin"), "{diff}");
    let uncommitted = &diff["uncommitted"]["files"];
    assert!(uncommitted.as_array().expect("uncommitted").iter().any(|file| file["path"] == "README.md"), "{diff}");

    let lib = rpc.result("branch/fileContents", json!({"path": "src/lib.rs"}));
    assert_eq!(lib["base"]["text"], "pub fn answer() -> u32 { 42 }\n", "{lib}");
    assert_eq!(lib["head"]["text"], "pub fn answer() -> u32 { 43 }\n", "{lib}");
    assert_eq!(lib["working"]["text"], "pub fn answer() -> u32 { 43 }\n", "{lib}");
    assert_eq!(lib["baseCommit"], diff["base"]);
    assert_eq!(lib["headCommit"], diff["head"]);

    let readme = rpc.result("branch/fileContents", json!({"path": "README.md"}));
    assert_eq!(readme["base"]["text"], "# project\n");
    assert_eq!(readme["head"]["text"], "# project\n", "not committed: the head is unchanged");
    assert_eq!(readme["working"]["text"], "# project, edited\n", "the uncommitted change is on the working side");

    let blob = rpc.result("branch/fileContents", json!({"path": "blob.bin"}));
    assert_eq!((blob["base"]["exists"].clone(), blob["head"]["exists"].clone()), (json!(false), json!(true)), "{blob}");
    assert_eq!(blob["head"]["binary"], true);
    assert_eq!(blob["head"]["text"], Value::Null);
    assert_eq!(blob["head"]["size"], 3);

    let big = rpc.result("branch/fileContents", json!({"path": "big.txt"}));
    assert_eq!(big["head"]["size"], 2_097_152);
    assert_eq!(big["head"]["truncated"], true);
    assert_eq!(big["head"]["text"].as_str().map(str::len), Some(1 << 20), "cut at MAX_FILE_TEXT");
    assert_eq!(big["working"]["truncated"], true);

    let missing = rpc.result("branch/fileContents", json!({"path": "no/such/file"}));
    for side in ["base", "head", "working"] {
        assert_eq!(missing[side]["exists"], false, "{missing}");
    }
    for bad in ["../outside", "/etc/passwd", "src/../../x", ".git/config", ""] {
        let response = rpc.request("branch/fileContents", Some(json!({"path": bad})));
        assert_eq!(response["error"]["code"], 1004, "{bad:?} is refused: {response}");
    }

    // The audit trail pages backwards by sequence, in RPC and in the CLI.
    let sequences =
        |records: &Value| -> Vec<u64> { records.as_array().expect("records").iter().filter_map(|r| r["sequence"].as_u64()).collect() };
    assert_eq!(sequences(&rpc.result("audit/list", json!({"limit": 2}))), [2, 3]);
    assert_eq!(sequences(&rpc.result("audit/list", json!({"limit": 2, "before": 2}))), [1]);
    assert!(sequences(&rpc.result("audit/list", json!({"before": 1}))).is_empty());
    let output = run(env.lazaret().args(["audit", "--json", "--limit", "3", "--profile", "keep", "--workspace"]).arg(&repository));
    assert!(output.status.success(), "{}", stderr(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(sequences(&printed), [1, 2, 3]);
    assert_eq!(
        printed,
        rpc.result("audit/list", json!({"limit": 3})),
        "`lazaret audit --json` prints the typed records as audit/list answers them"
    );
    let kinds: Vec<(&str, &Value)> = printed
        .as_array()
        .expect("records")
        .iter()
        .map(|record| (record["type"].as_str().unwrap_or(""), &record["requestedArgv"]))
        .collect();
    assert_eq!(
        kinds,
        [("escalation", &json!(["echo", "one"])), ("escalation", &json!(["echo", "two"])), ("escalation", &json!(["echo", "three"]))],
        "{printed}"
    );

    // state/diff is what `lazaret state diff --json` prints.
    let over_rpc = rpc.result("state/diff", json!({}));
    let output = run(env.lazaret().args(["state", "diff", "--json", "--profile", "keep", "--workspace"]).arg(&repository));
    assert!(output.status.success(), "{}", stderr(&output));
    let from_cli: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(over_rpc, from_cli);
    assert!(over_rpc
        .as_array()
        .expect("changes")
        .iter()
        .any(|change| change["path"] == "/usr/local/bin/agent-tool" && change["kind"] == "added"));
    let only_usr = rpc.result("state/diff", json!({"dir": "/usr"}));
    assert_eq!(only_usr, over_rpc);
    let bad_dir = rpc.request("state/diff", Some(json!({"dir": "/etc"})));
    assert_eq!(bad_dir["error"]["code"], 1004, "{bad_dir}");
}

/// Registers and ends `count` sessions on `rpc`: two events each.
fn churn_sessions(rpc: &mut Rpc, count: usize) {
    for index in 0..count {
        let session_id = format!("{:032x}", 0xfeed_0000_u64 + index as u64);
        rpc.result("session/register", json!({"sessionId": session_id, "pid": std::process::id(), "client": "churn"}));
        rpc.result("session/unregister", json!({"sessionId": session_id}));
    }
}

fn subscribe(socket: &Path) -> Rpc {
    let mut rpc = Rpc::connect(socket);
    let subscription = rpc.result("events/subscribe", json!([]));
    assert!(subscription.is_string() || subscription.is_number(), "{subscription}");
    rpc
}

/// Reads `events/event` notifications until `done` says the stream has
/// reached its end; returns their `result`s.
fn read_events(rpc: &mut Rpc, mut done: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    while !done(&events) {
        let message = read_frame(&mut rpc.reader);
        if message["method"] == "events/event" {
            events.push(message["params"]["result"].clone());
        }
    }
    events
}

#[test]
fn a_subscriber_that_falls_behind_is_told_how_many_events_it_lost() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    keep_config(&env);
    let repository = git_repository(&env, "project");
    let (_keeper, socket, _domain) = start_domain(&env, &repository);

    // One subscriber reads along, one does not read at all.
    let mut reader = subscribe(&socket);
    let mut stalled = subscribe(&socket);
    let sessions = 1500;
    let mut churn = Rpc::connect(&socket);
    let started = std::time::Instant::now();
    let expected = 2 * sessions;
    let churner = std::thread::spawn(move || {
        churn_sessions(&mut churn, sessions);
        churn
    });
    let events = read_events(&mut reader, |events| events.len() >= expected);
    let _churn = churner.join().expect("churn");
    eprintln!("{expected} events in {:?}", started.elapsed());

    let numbers: Vec<u64> = events.iter().map(|event| event["seq"].as_u64().expect("seq")).collect();
    assert_eq!(numbers, (1..=expected as u64).collect::<Vec<_>>(), "a subscriber that keeps up sees every number once, in order");
    assert!(events.iter().all(|event| event["kind"] != "eventsLagged"));

    // The stalled one: its numbers have no gaps either, and what it missed
    // is reported, so that delivered plus dropped is everything.
    let mut dropped = 0;
    let mut delivered = 0;
    let stalled_events = read_events(&mut stalled, |events| {
        let lost: u64 =
            events.iter().filter(|event| event["kind"] == "eventsLagged").map(|event| event["dropped"].as_u64().unwrap_or(0)).sum();
        let seen = events.iter().filter(|event| event["kind"] != "eventsLagged").count() as u64;
        dropped = lost;
        delivered = seen;
        lost + seen >= expected as u64
    });
    let numbers: Vec<u64> = stalled_events.iter().map(|event| event["seq"].as_u64().expect("seq")).collect();
    assert_eq!(numbers, (1..=stalled_events.len() as u64).collect::<Vec<_>>(), "no gaps in the numbering");
    assert!(dropped > 0, "the stalled subscriber lost events and was told ({delivered} delivered)");
    assert_eq!(dropped + delivered, expected as u64);
    let lag = stalled_events.iter().find(|event| event["kind"] == "eventsLagged").expect("an eventsLagged event");
    eprintln!("stalled subscriber: {delivered} delivered, {dropped} dropped, first report {lag}");
}
