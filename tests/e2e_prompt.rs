//! End-to-end tests of the terminal approval prompt, in a real terminal
//! (tmux): a full-screen program (less) runs in the sandbox, an escalation
//! arrives, the prompt shows every field, each of A, D, E and Q does what it
//! says on the host and in the sandbox, and the screen comes back.

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
                screen.keys(&["e"]);
                assert!(wait_until(Duration::from_secs(5), || screen.text().contains("Enter: run this instead")), "{}", screen.text());
                for _ in 0.."to-be-edited".len() {
                    screen.keys(&["BSpace"]);
                }
                screen.keys(&["-l", "edited-name"]);
                screen.keys(&["Enter"]);
            }
            other => screen.keys(&[other]),
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
    screen.keys(&["q"]);
    assert!(wait_until(Duration::from_secs(15), || screen.text().contains("LAZARET-EXIT=")), "the CLI ends: {}", screen.text());
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)), "the domain is torn down");
    assert!(!repository.join("aborted").exists());
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit");
    assert_eq!(records.last().map(|r| (r["outcome"].clone(), r["decidedBy"].clone())), Some(("aborted".into(), "rpc:terminal".into())));
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
    assert_eq!(records[0]["decidedBy"], "rpc:vscode");
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
