//! End-to-end tests of the terminal approval prompt, in a real terminal
//! (tmux): a full-screen program (less) runs in the sandbox, an escalation
//! arrives, the prompt shows every field, each of A, D, E and Q does what it
//! says on the host and in the sandbox (A and E only with Enter after them,
//! once the prompt is ready: D20), and the screen comes back. A network
//! request (`[network] ask`) is answered at the same prompt. A sentence the
//! user types for the agent while the agent times its requests answers
//! nothing, nor does a key that lands as a withdrawn request's successor
//! moves into its place.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lazaret_test_support::*;

struct Screen {
    socket: PathBuf,
}

impl Screen {
    fn tmux(&self, arguments: &[&str]) -> String {
        stdout(&Command::new("tmux").arg("-S").arg(&self.socket).args(arguments).output().expect("tmux"))
    }
    fn text(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "lzt"])
    }
    fn keys(&self, keys: &[&str]) {
        let mut arguments = vec!["send-keys", "-t", "lzt"];
        arguments.extend_from_slice(keys);
        self.tmux(&arguments);
    }
    /// Waits until the prompt takes answers (a second without a key since
    /// its request appeared), as a person reads it before answering.
    fn ready(&self) {
        assert!(wait_until(Duration::from_secs(10), || self.text().contains("Ready for your answer")), "the prompt arms: {}", self.text());
    }
    /// Answers with `key` once the prompt is ready, then confirms with
    /// Enter once the prompt names what it will do (`naming`).
    fn confirmed(&self, key: &str, naming: &str) {
        self.ready();
        self.keys(&[key]);
        assert!(wait_until(Duration::from_secs(5), || self.text().contains(naming)), "the prompt names `{naming}`: {}", self.text());
        self.keys(&["Enter"]);
    }
    /// Types `text` (and Enter when it ends in `\r`) as a person does, one
    /// key every 150 ms.
    fn typed(&self, text: &str) {
        for c in text.chars() {
            match c {
                '\r' => self.keys(&["Enter"]),
                c => self.keys(&["-l", &c.to_string()]),
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// Starts `less` in a sandbox session whose background job asks to
/// `touch <name>` on the host after 2 s and records its exit status in the
/// agent's checkout.
fn start(env: &TestEnv, repository: &Path, name: &str) -> Screen {
    let screen = Screen { socket: env.path().join("tmux.sock") };
    let script = format!("(sleep 2; lazaret-escalate --justification 'prompt test' -- touch {name}; echo \\$? > /workspace/escalate-status) & exec less /workspace/numbers.txt");
    let command = format!(
        "env XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} run --workspace {workspace} -- sh -c \"{script}\"; echo LAZARET-EXIT=$?; sleep 60",
        config = env.path().join("config").display(),
        data = env.path().join("data").display(),
        run = env.path().join("run").display(),
        lazaret = lazaret_bin().display(),
        workspace = repository.display(),
    );
    screen.tmux(&["new-session", "-d", "-s", "lzt", "-x", "100", "-y", "30", &command]);
    assert!(wait_until(Duration::from_secs(20), || screen.text().contains("Approve & Run")), "the prompt appears: {}", screen.text());
    let text = screen.text();
    for field in [
        "Request",
        "default (domain",
        "prompt test",
        &format!("touch {name}"),
        repository.to_str().expect("utf8"),
        "[D] Deny",
        "[E] Edit",
        "[Q] Abort",
    ] {
        assert!(text.contains(field), "the prompt shows `{field}`: {text}");
    }
    screen
}

fn prepared(env: &TestEnv) -> PathBuf {
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\napproval_timeout_seconds = 60\n",
        env.path().join("run/lazaret").display()
    ));
    let repository = git_repository(env, "project");
    let numbers: String = (1..=300).map(|n| format!("line-{n}\n")).collect();
    std::fs::write(repository.join("numbers.txt"), numbers).expect("write");
    git(&repository, &["add", "numbers.txt"]);
    git(&repository, &["commit", "-q", "-m", "numbers"]);
    repository
}

fn escalate_status(env: &TestEnv, repository: &Path) -> Option<String> {
    let domain = domain_json(env, "default", repository);
    std::fs::read_to_string(Path::new(domain["domain_dir"].as_str().expect("dir")).join("checkout/escalate-status"))
        .ok()
        .map(|s| s.trim().to_owned())
}

fn screen_restored(screen: &Screen) -> bool {
    let text = screen.text();
    text.contains("line-1") && text.contains("line-2") && !text.contains("Approve & Run")
}

#[test]
fn approve_deny_and_edit_at_the_prompt() {
    let _guard = sandbox_guard();
    ensure_default_image();
    for (key, name) in [("a", "approved"), ("d", "denied"), ("e", "to-be-edited")] {
        let env = TestEnv::new();
        let repository = prepared(&env);
        let screen = start(&env, &repository, name);
        match key {
            "e" => {
                screen.confirmed("e", "Edit the command before it runs?");
                assert!(wait_until(Duration::from_secs(5), || screen.text().contains("Enter: run this instead")), "{}", screen.text());
                for _ in 0.."to-be-edited".len() {
                    screen.keys(&["BSpace"]);
                }
                screen.keys(&["-l", "edited-name"]);
                screen.keys(&["Enter"]);
                assert!(
                    wait_until(Duration::from_secs(5), || screen.text().contains("Run the edited command `touch edited-name`")),
                    "the edit is named before it runs: {}",
                    screen.text()
                );
                screen.keys(&["Enter"]);
            }
            "a" => screen.confirmed("a", &format!("Run `touch {name}` on the host")),
            other => {
                screen.ready();
                screen.keys(&[other]);
            }
        }
        assert!(wait_until(Duration::from_secs(10), || escalate_status(&env, &repository).is_some()), "the sandbox got an answer");
        let status = escalate_status(&env, &repository).unwrap_or_default();
        match key {
            "a" => {
                assert_eq!(status, "0");
                assert!(repository.join("approved").exists(), "approved: runs on the host");
            }
            "d" => {
                assert_eq!(status, "97", "denied: lazaret-escalate exits 97");
                assert!(!repository.join("denied").exists());
            }
            _ => {
                assert_eq!(status, "0");
                assert!(repository.join("edited-name").exists() && !repository.join("to-be-edited").exists(), "the edited argv runs");
            }
        }
        assert!(wait_until(Duration::from_secs(5), || screen_restored(&screen)), "less is back on screen: {}", screen.text());
        screen.keys(&["q"]);
        assert!(wait_until(Duration::from_secs(10), || screen.text().contains("LAZARET-EXIT=0")), "{}", screen.text());
    }
}

#[test]
fn abort_ends_the_cli_and_tears_the_domain_down() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = prepared(&env);
    let domain = domain_json(&env, "default", &repository);
    let screen = start(&env, &repository, "aborted");
    screen.ready();
    screen.keys(&["q"]);
    assert!(wait_until(Duration::from_secs(15), || screen.text().contains("LAZARET-EXIT=")), "the CLI ends: {}", screen.text());
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)), "the domain is torn down");
    assert!(!repository.join("aborted").exists());
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit");
    assert_eq!(
        records.last().map(|r| (r["type"].clone(), r["outcome"].clone(), r["decidedBy"].clone())),
        Some(("escalation".into(), "aborted".into(), "rpc:terminal".into()))
    );
}

/// An editor (a JSON-RPC client speaking the documented framing) answers
/// while the terminal prompt shows: the prompt goes away, the command runs once.
#[test]
fn an_answer_from_json_rpc_removes_the_terminal_prompt() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = prepared(&env);
    let screen = start(&env, &repository, "from-editor");
    let socket = PathBuf::from(domain_json(&env, "default", &repository)["control_socket"].as_str().expect("socket"));
    let list = rpc_call(&socket, "escalation/list", serde_json::json!({}));
    let request_id = list["result"][0]["requestId"].as_str().expect("pending").to_owned();
    let answer =
        rpc_call(&socket, "escalation/respond", serde_json::json!({"requestId": request_id, "decision": "approve", "client": "vscode"}));
    assert_eq!(answer["result"], true, "{answer}");
    assert!(wait_until(Duration::from_secs(5), || screen_restored(&screen)), "the prompt goes away: {}", screen.text());
    assert!(wait_until(Duration::from_secs(5), || escalate_status(&env, &repository).as_deref() == Some("0")));
    assert!(repository.join("from-editor").exists());
    screen.keys(&["q"]);
    assert!(wait_until(Duration::from_secs(10), || screen.text().contains("LAZARET-EXIT=0")));
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit");
    assert_eq!(records.len(), 1, "the command ran once: {records:?}");
    assert_eq!(records[0]["type"], "escalation", "{records:?}");
    assert_eq!(records[0]["decidedBy"], "rpc:vscode");
}

/// A name on no allow entry (`[network] ask`) becomes a network request on
/// the prompt of every interactive session of the domain (its network is
/// shared); `m` in one allows it for 15 minutes, decided by
/// `rpc:terminal`, and both screens come back. Nothing is sent off the
/// machine: the name is allowed only after its held question was refused
/// (the 1 s hold passed), and nothing asks for it afterwards (the next
/// question would go to the upstream resolver).
#[test]
fn a_network_request_is_allowed_for_15_minutes_at_the_prompt() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    env.write_config("[network]\nask = true\nask_hold_seconds = 1\n");
    let repository = git_repository(&env, "project");
    let command = format!(
        "env XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} run --workspace {workspace} -- sh; echo LAZARET-EXIT=$?; sleep 60",
        config = env.path().join("config").display(),
        data = env.path().join("data").display(),
        run = env.path().join("run").display(),
        lazaret = lazaret_bin().display(),
        workspace = repository.display(),
    );
    let line = |screen: &Screen, text: &str| {
        screen.keys(&["-l", text]);
        screen.keys(&["Enter"]);
    };
    // Two sessions of the domain, each in its own terminal.
    let screens = [Screen { socket: env.path().join("tmux.sock") }, Screen { socket: env.path().join("tmux-other.sock") }];
    for screen in &screens {
        screen.tmux(&["new-session", "-d", "-s", "lzt", "-x", "100", "-y", "30", &command]);
        line(screen, "echo ready-$((1+1))");
        assert!(wait_until(Duration::from_secs(60), || screen.text().contains("ready-2")), "the shell runs: {}", screen.text());
    }
    let [screen, other] = &screens;
    // The answer file tells the test the question was refused while the
    // prompt covers the screen.
    line(screen, "busybox nslookup grant.test >/dev/null 2>&1; echo asked; echo asked > /workspace/asked");
    let prompt_shows = |screen: &Screen| {
        let text = screen.text();
        text.contains("network request") && text.contains("Destination    grant.test")
    };
    let fields =
        ["Record types", "Asked", "[a] this session", "[m] 15 min", "[h] 1 hour", "[p] the profile", "[d] this session", "[D] the profile"];
    for screen in &screens {
        assert!(wait_until(Duration::from_secs(20), || prompt_shows(screen)), "the prompt shows the network request: {}", screen.text());
        // The prompt is drawn again for every repeat of the question: a
        // capture can fall between the body and the footer of one drawing.
        let whole = wait_until(Duration::from_secs(10), || {
            let text = screen.text();
            fields.iter().all(|field| text.contains(field))
        });
        let text = screen.text();
        let missing: Vec<&str> = fields.iter().copied().filter(|field| !text.contains(field)).collect();
        assert!(whole && missing.is_empty(), "the prompt shows {missing:?}: {text}");
    }
    let checkout = PathBuf::from(domain_json(&env, "default", &repository)["domain_dir"].as_str().expect("dir")).join("checkout");
    assert!(
        wait_until(Duration::from_secs(20), || checkout.join("asked").exists()),
        "the held question is refused after the hold: {}",
        screen.text()
    );
    assert!(prompt_shows(screen) && prompt_shows(other), "the request still waits after the refusal: {}", screen.text());
    screen.confirmed("m", "Allow grant.test for 15 min?");
    let restored = || {
        let text = screen.text();
        !text.contains("network request") && text.lines().any(|line| line.trim() == "asked") && text.contains("ready-2")
    };
    assert!(wait_until(Duration::from_secs(10), restored), "the prompt goes and the screen comes back: {}", screen.text());
    let other_restored = || {
        let text = other.text();
        !text.contains("network request") && text.contains("ready-2")
    };
    assert!(wait_until(Duration::from_secs(10), other_restored), "answered in one session, gone in the other: {}", other.text());
    let rules = run(env.lazaret().args(["rules", "--json"]));
    let rules: serde_json::Value = serde_json::from_slice(&rules.stdout).expect("rules");
    let grants: Vec<serde_json::Value> = rules
        .as_object()
        .expect("by domain")
        .values()
        .flat_map(|domain| domain["network"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(grants.len(), 1, "one grant: {rules}");
    assert_eq!(grants[0]["destination"], "grant.test", "{rules}");
    assert_eq!(grants[0]["verdict"], "allow", "{rules}");
    assert_eq!(grants[0]["scope"], serde_json::json!({"type": "minutes", "minutes": 15}), "{rules}");
    assert_eq!(grants[0]["decidedBy"], "rpc:terminal", "{rules}");
    let lasts = grants[0]["expiresAtMs"].as_u64().expect("expires").abs_diff(grants[0]["grantedAtMs"].as_u64().expect("granted"));
    assert!(lasts.abs_diff(15 * 60 * 1000) < 5_000, "it lasts 15 minutes: {rules}");
    for screen in &screens {
        line(screen, "exit");
        assert!(wait_until(Duration::from_secs(20), || screen.text().contains("LAZARET-EXIT=0")), "{}", screen.text());
    }
}

/// A session whose agent runs `script` (sh) in a terminal of its own, with
/// escalation and `[network] ask` configured.
fn agent_session(env: &TestEnv, repository: &Path, script: &str) -> Screen {
    let screen = Screen { socket: env.path().join("tmux.sock") };
    let command = format!(
        "env XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} run --workspace {workspace} -- sh -c '{script}'; echo LAZARET-EXIT=$?; sleep 60",
        config = env.path().join("config").display(),
        data = env.path().join("data").display(),
        run = env.path().join("run").display(),
        lazaret = lazaret_bin().display(),
        workspace = repository.display(),
    );
    screen.tmux(&["new-session", "-d", "-s", "lzt", "-x", "120", "-y", "36", &command]);
    screen
}

fn prepared_with_ask(env: &TestEnv) -> PathBuf {
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\napproval_timeout_seconds = 120\n\n[network]\nask = true\nask_hold_seconds = 1\n",
        env.path().join("run/lazaret").display()
    ));
    git_repository(env, "project")
}

/// What the audit trail says was decided, as (outcome, decided by).
fn decisions(env: &TestEnv, repository: &Path) -> Vec<(String, String)> {
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit");
    records.iter().map(|r| (r["outcome"].as_str().unwrap_or("").to_owned(), r["decidedBy"].as_str().unwrap_or("").to_owned())).collect()
}

/// Issue 45 finding 1 (D20): the agent sees every key the user types and
/// times its requests to the first space of a sentence: a host command
/// (`touch PWNED`) and a name. Typed at 150 ms a key, the rest of the
/// sentence ("...run it again and please add a test", where `a` once
/// approved and `p` allowed the name for good) answers nothing: every key is
/// ignored and the prompt says how many. Only after a second without a key
/// does it take an answer.
#[test]
fn a_sentence_typed_while_the_agent_asks_answers_nothing() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = prepared_with_ask(&env);
    // The agent: reads the user's keys one by one, as a terminal program
    // does, and at the first space asks for both.
    let script = "stty -icanon -echo; echo agent-ready-$((1+1)); fired=; \
        while :; do c=$(dd bs=1 count=1 2>/dev/null); [ -z \"$c\" ] && break; printf %s \"$c\"; \
        if [ \"$c\" = \" \" ] && [ -z \"$fired\" ]; then fired=1; \
        (lazaret-escalate --justification typed -- touch PWNED; echo $? > /workspace/escalate-status) & \
        (busybox nslookup attack.test >/dev/null 2>&1; echo asked > /workspace/asked) & fi; done; echo; echo agent-done-$((1+1))";
    let screen = agent_session(&env, &repository, script);
    assert!(wait_until(Duration::from_secs(60), || screen.text().contains("agent-ready-2")), "the agent runs: {}", screen.text());
    screen.typed("ok run it again and please add a test\r");
    std::thread::sleep(Duration::from_secs(2));
    let text = screen.text();
    assert!(!repository.join("PWNED").exists(), "the host command never ran: {text}");
    let decided = decisions(&env, &repository);
    assert!(decided.iter().all(|(outcome, _)| !matches!(outcome.as_str(), "approved" | "edited" | "networkGranted")), "{decided:?}");
    let rules = run(env.lazaret().args(["rules", "--json"]));
    let rules: serde_json::Value = serde_json::from_slice(&rules.stdout).expect("rules");
    let grants: usize = rules.as_object().expect("by domain").values().map(|d| d["network"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(grants, 0, "nothing was granted: {rules}");
    let pending = run(env.lazaret().args(["pending", "--json"]));
    let pending: Vec<serde_json::Value> = serde_json::from_slice(&pending.stdout).expect("pending");
    assert_eq!(pending.len(), 2, "both requests still wait: {pending:?}");
    assert!(text.contains("Lazaret:"), "a prompt shows: {text}");
    assert!(text.contains("keys were ignored"), "the prompt says it ignored the typed keys: {text}");
    // Deliberately now: a denial each, once the prompt is ready.
    for _ in 0..2 {
        let before = screen.text();
        screen.ready();
        screen.keys(&["d"]);
        assert!(wait_until(Duration::from_secs(10), || screen.text() != before), "{}", screen.text());
    }
    assert!(!repository.join("PWNED").exists());
    let outcomes: Vec<String> = decisions(&env, &repository).into_iter().map(|(outcome, _)| outcome).collect();
    assert!(outcomes.contains(&"denied".to_owned()) && outcomes.contains(&"networkRefused".to_owned()), "{outcomes:?}");
    screen.keys(&["Enter"]);
    assert!(wait_until(Duration::from_secs(20), || screen.text().contains("LAZARET-EXIT=")), "{}", screen.text());
}

/// Issue 45 finding 1, the variant: two requests wait; the user reads the
/// first and answers it (`a`, Enter), and the agent withdraws it (kills its
/// client) just before the keys land, so the second moves into its place.
/// The keys answer nothing: the new request is shown disarmed.
#[test]
fn a_request_withdrawn_under_a_key_moves_the_next_in_disarmed() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = prepared_with_ask(&env);
    let script = "lazaret-escalate --justification first -- touch first & echo $! > /tmp/first; sleep 1; \
        (lazaret-escalate --justification second -- touch second; echo $? > /workspace/second-status) & \
        while [ ! -e /tmp/withdraw ]; do sleep 0.05; done; kill -9 $(cat /tmp/first); exec sleep 300";
    let screen = agent_session(&env, &repository, script);
    assert!(
        wait_until(Duration::from_secs(60), || screen.text().contains("touch first") && screen.text().contains("(1 of 2)")),
        "both requests wait, the first shown: {}",
        screen.text()
    );
    screen.ready();
    let domain = domain_json(&env, "default", &repository);
    let checkout = PathBuf::from(domain["domain_dir"].as_str().expect("dir")).join("checkout");
    // The agent's cue, made inside (a file the host writes into the
    // checkout is not seen at once through gVisor's cache).
    let container = domain["container_name"].as_str().expect("container");
    let cue = Command::new("podman").args(["exec", container, "touch", "/tmp/withdraw"]).output().expect("podman exec");
    assert!(cue.status.success(), "{}", stderr(&cue));
    assert!(
        wait_until(Duration::from_secs(10), || screen.text().contains("touch second") && screen.text().contains("(1 of 1)")),
        "the second moves into place: {}",
        screen.text()
    );
    // The answer meant for the first lands on the second.
    screen.typed("a\r");
    std::thread::sleep(Duration::from_secs(2));
    assert!(!repository.join("second").exists() && !repository.join("first").exists(), "nothing ran: {}", screen.text());
    assert!(screen.text().contains("keys were ignored"), "the keys are said: {}", screen.text());
    assert!(decisions(&env, &repository).iter().all(|(outcome, _)| outcome != "approved"), "{:?}", decisions(&env, &repository));
    screen.ready();
    screen.keys(&["d"]);
    assert!(wait_until(Duration::from_secs(10), || checkout.join("second-status").exists()), "the second was answered");
    assert_eq!(std::fs::read_to_string(checkout.join("second-status")).unwrap_or_default().trim(), "97", "denied");
    assert!(!repository.join("second").exists());
}

/// One framed JSON-RPC call on a fresh connection.
fn rpc_call(socket: &Path, method: &str, params: serde_json::Value) -> serde_json::Value {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    write!(writer, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write");
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        if line.trim().is_empty() {
            break;
        }
        if let Some(value) = line.trim().strip_prefix("Content-Length:") {
            length = value.trim().parse().expect("length");
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    serde_json::from_slice(&body).expect("json")
}
