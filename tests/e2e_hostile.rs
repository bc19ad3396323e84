//! The hostile corpus (`tests/hostile/strings.json`, DECISIONS D16) through
//! every terminal surface of the CLI, in a real terminal (tmux): the agent
//! inside a real gVisor sandbox commits files named after every entry,
//! leaves more uncommitted, and asks the host to run commands whose argv and
//! justification are the entries. `lazaret pending`, `diff`, `audit`,
//! `status` and the terminal approval prompt must show all of it as inert
//! text: nothing runs (the marker stays absent), no byte that a terminal
//! acts on reaches it, the window title and clipboard are untouched, and
//! the prompt still answers a plain request afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lazaret_test_support::*;

/// Requests the agent makes, each carrying a share of the corpus.
const REQUESTS: usize = 5;
/// Bytes of argv per request: under the coordinator's 64 KiB.
const ARGV_BUDGET: usize = 60 << 10;
/// Bytes of one justification: under the coordinator's 4 KiB.
const JUSTIFICATION_BUDGET: usize = 4000;

struct Terminal {
    socket: PathBuf,
    dir: PathBuf,
}

impl Terminal {
    fn new(env: &TestEnv) -> Terminal {
        let terminal = Terminal { socket: env.path().join("tmux.sock"), dir: env.path().to_owned() };
        terminal.tmux(&["new-session", "-d", "-s", "lzh", "-x", "160", "-y", "48", "sleep 3600"]);
        // A whole patch of 64 KiB lines stays in the history.
        terminal.tmux(&["set-option", "-g", "history-limit", "200000"]);
        terminal
    }

    fn tmux(&self, arguments: &[&str]) -> String {
        let output = Command::new("tmux").arg("-S").arg(&self.socket).args(arguments).output().expect("tmux");
        stdout(&output)
    }

    fn title(&self, window: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", window, "#{pane_title}"]).trim().to_owned()
    }

    /// Runs `command` (a shell line) in a new window of the real terminal
    /// and returns what it wrote to the terminal, byte for byte, and the
    /// screen's text (history included).
    fn run(&self, window: &str, command: &str) -> (Vec<u8>, String) {
        let go = self.dir.join(format!("go-{window}"));
        let raw = self.dir.join(format!("raw-{window}"));
        let line = format!("while [ ! -e {go} ]; do sleep 0.05; done; {command}; echo LAZARET-EXIT=$?; sleep 3600", go = go.display());
        self.tmux(&["new-window", "-d", "-t", "lzh", "-n", window, &line]);
        let target = format!("lzh:{window}");
        self.tmux(&["pipe-pane", "-o", "-t", &target, &format!("cat > {}", raw.display())]);
        std::fs::write(&go, "").expect("go");
        assert!(
            wait_until(Duration::from_secs(60), || std::fs::read(&raw).is_ok_and(|bytes| contains(&bytes, b"LAZARET-EXIT="))),
            "{command} ended in the terminal"
        );
        let screen = self.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", &target]);
        (std::fs::read(&raw).expect("raw output"), screen)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

/// The corpus in `REQUESTS` shares: argv words (after `printf`) within
/// `ARGV_BUDGET` and the entries joined as a justification within
/// `JUSTIFICATION_BUDGET` (an entry too long for either is cut to fit: its
/// start is what a human would read).
fn requests(corpus: &[Hostile]) -> Vec<(Vec<String>, String)> {
    let share = corpus.len().div_ceil(REQUESTS);
    corpus
        .chunks(share)
        .map(|entries| {
            let per_word = ARGV_BUDGET / entries.len();
            let mut argv = vec!["printf".to_owned(), "%s\\n".to_owned()];
            argv.extend(entries.iter().map(|entry| cut(&entry.text, per_word)));
            let justification = cut(&entries.iter().map(|entry| entry.text.as_str()).collect::<Vec<_>>().join(" | "), JUSTIFICATION_BUDGET);
            (argv, justification)
        })
        .collect()
}

fn cut(text: &str, bytes: usize) -> String {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Writes what the agent needs into the host repository (committed, so the
/// sandbox's checkout has it): each entry's file name and text, each
/// request's NUL-separated argv and its justification, and the script.
fn prepare(repository: &Path, corpus: &[Hostile], requests: &[(Vec<String>, String)]) {
    let dir = repository.join(".hostile");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (index, entry) in corpus.iter().enumerate() {
        std::fs::write(dir.join(format!("{index}.name")), entry.file_name()).expect("write");
        std::fs::write(dir.join(format!("{index}.text")), &entry.text).expect("write");
    }
    for (index, (argv, justification)) in requests.iter().enumerate() {
        std::fs::write(dir.join(format!("request{index}.argv")), argv.join("\0") + "\0").expect("write");
        std::fs::write(dir.join(format!("request{index}.why")), justification).expect("write");
    }
    // File names: `$(cat …; printf x)` keeps trailing newlines.
    let script = format!(
        r#"set -e
cd /workspace
read_file() {{ v=$(cat "$1"; printf x); printf %s "${{v%x}}"; }}
for i in $(seq 0 {last}); do
  name=$(read_file .hostile/$i.name; printf x); name=${{name%x}}
  cp .hostile/$i.text "c$i-$name"
done
git add -A
git commit -q -m "agent: hostile names"
for i in $(seq 0 {last}); do
  name=$(read_file .hostile/$i.name; printf x); name=${{name%x}}
  cp .hostile/$i.text "u$i-$name"
done
echo HOSTILE-READY
"#,
        last = corpus.len() - 1
    );
    std::fs::write(dir.join("commit.sh"), script).expect("write");
    let ask = format!(
        r#"cd /workspace
for k in $(seq 0 {last}); do
  readarray -d '' -t words < .hostile/request$k.argv
  why=$(cat .hostile/request$k.why; printf x)
  lazaret-escalate --justification "${{why%x}}" -- "${{words[@]}}"
  echo "request $k: $?" >> /tmp/answers
done
lazaret-escalate --justification 'a plain request after the hostile ones' -- touch plain-request-ran
echo "plain: $?" >> /tmp/answers
"#,
        last = requests.len() - 1
    );
    std::fs::write(dir.join("ask.sh"), ask).expect("write");
    git(repository, &["add", ".hostile"]);
    git(repository, &["commit", "-q", "-m", "hostile corpus"]);
}

/// A domain's workspace prepared with the corpus, and the marker whose
/// existence means something ran.
struct HostileDomain {
    marker: PathBuf,
    corpus: Vec<Hostile>,
    requests: Vec<(Vec<String>, String)>,
    repository: PathBuf,
}

impl HostileDomain {
    fn prepared(env: &TestEnv) -> HostileDomain {
        config(env);
        let marker = env.path().join("MARKER");
        let corpus = hostile_corpus(&marker);
        let requests = requests(&corpus);
        let repository = git_repository(env, "project");
        prepare(&repository, &corpus, &requests);
        HostileDomain { marker, corpus, requests, repository }
    }
}

fn config(env: &TestEnv) {
    env.write_config(&format!(
        "[escalation]\nenabled = true\nsocket_dir = \"{}\"\napproval_timeout_seconds = 120\n",
        env.path().join("run/lazaret").display()
    ));
}

fn shell_line(env: &TestEnv, arguments: &str) -> String {
    format!(
        "env XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} {arguments}",
        config = env.path().join("config").display(),
        data = env.path().join("data").display(),
        run = env.path().join("run").display(),
        lazaret = lazaret_bin().display(),
    )
}

/// Nothing of `bytes` acts on a terminal, nothing ran, the window title
/// and tmux's clipboard are what they were.
fn assert_inert(terminal: &Terminal, window: &str, what: &str, bytes: &[u8], marker: &Path, title: &str) {
    let hazards = terminal_hazards(bytes);
    assert!(hazards.is_empty(), "{what} wrote what a terminal acts on: {hazards:#?}");
    assert!(!marker.exists(), "{what}: something ran (the marker exists)");
    assert_eq!(terminal.title(&format!("lzh:{window}")), title, "{what} changed the window title");
    assert_eq!(terminal.tmux(&["list-buffers"]).trim(), "", "{what} wrote tmux's clipboard (OSC 52)");
}

#[test]
fn every_cli_listing_shows_the_hostile_corpus_inert() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let HostileDomain { marker, corpus, requests, repository } = HostileDomain::prepared(&env);

    let (mut session, mut lines) =
        spawn_agent_lines(&env, &repository, "bash /workspace/.hostile/commit.sh && (bash /workspace/.hostile/ask.sh &) && sleep 600");
    assert_eq!(lines.next().map(|line| line.expect("line")).as_deref(), Some("HOSTILE-READY"));
    let all_pending =
        || serde_json::from_slice::<Vec<serde_json::Value>>(&run(env.lazaret().args(["pending", "--json"])).stdout).unwrap_or_default();
    assert!(wait_until(Duration::from_secs(30), || all_pending().len() == 1), "the first hostile request waits");
    assert!(
        wait_until(Duration::from_secs(10), || git(&repository, &["for-each-ref", "refs/heads/lazaret/agent-default"]).contains("agent")),
        "the agent branch reached the host"
    );

    let terminal = Terminal::new(&env);
    let title = terminal.title("lzh:0");
    let diff_stat = run(env.lazaret().args(["diff", "--stat", "--json", "--workspace"]).arg(&repository));
    let diff: serde_json::Value = serde_json::from_slice(&diff_stat.stdout).expect("diff json");
    assert_eq!(diff["files"].as_array().map(Vec::len), Some(corpus.len()), "every hostile name was committed: {diff}");
    assert_eq!(diff["uncommitted"]["files"].as_array().map(Vec::len), Some(corpus.len()), "and left uncommitted: {diff}");

    let workspace = repository.display().to_string();
    let surfaces = [
        ("diff", format!("diff --workspace {workspace}")),
        ("diffstat", format!("diff --stat --workspace {workspace}")),
        ("status", format!("status --workspace {workspace}")),
    ];
    for (window, arguments) in &surfaces {
        let (bytes, screen) = terminal.run(window, &shell_line(&env, arguments));
        assert_inert(&terminal, window, arguments, &bytes, &marker, &title);
        assert!(screen.contains("LAZARET-EXIT=0"), "{arguments} failed:\n{screen}");
        if *window == "diff" {
            assert!(screen.contains("\\u{202e}") && screen.contains("\\e]8;;"), "names and lines are shown escaped");
            assert!(screen.contains("committed (") && screen.contains("uncommitted ("), "{screen}");
        }
    }

    // Each hostile request (they come one after the other) is listed, cut
    // and whole, then denied from the CLI; the plain one after them still
    // waits and is approved: the queue stayed usable.
    let mut cuts = 0;
    for index in 0..requests.len() {
        let mut pending = Vec::new();
        assert!(wait_until(Duration::from_secs(30), || {
            pending = all_pending();
            pending.len() == 1
        }));
        assert_eq!(pending[0]["argv"][0], "printf", "request {index}: {:?}", pending[0]["display"]);
        let id = pending[0]["requestId"].as_str().expect("id").to_owned();
        for (window, arguments) in [(format!("pending{index}"), "pending"), (format!("full{index}"), "pending --full")] {
            let (bytes, screen) = terminal.run(&window, &shell_line(&env, arguments));
            assert_inert(&terminal, &window, arguments, &bytes, &marker, &title);
            assert!(screen.contains(&format!("{id}  default (")) && screen.contains("printf"), "{arguments}: the request:\n{screen}");
            if arguments == "pending" && screen.contains("(cut: ") {
                assert!(screen.contains("lazaret pending --full prints it whole"), "the cut is said:\n{screen}");
                cuts += 1;
            }
            if arguments == "pending --full" {
                assert!(!screen.contains("(cut: "), "--full cuts nothing");
            }
        }
        let (bytes, screen) = terminal.run(&format!("deny{index}"), &shell_line(&env, &format!("deny {id}")));
        assert_inert(&terminal, &format!("deny{index}"), "deny", &bytes, &marker, &title);
        assert!(screen.contains("denied: "), "{screen}");
    }
    assert!(cuts >= 1, "the long requests were cut in the listing");
    let mut pending = Vec::new();
    assert!(wait_until(Duration::from_secs(30), || {
        pending = all_pending();
        pending.len() == 1 && pending[0]["argv"][0] == "touch"
    }));
    let approve = run(env.lazaret().args(["approve", pending[0]["requestId"].as_str().expect("id")]));
    assert!(approve.status.success(), "{}", stderr(&approve));
    assert!(wait_until(Duration::from_secs(15), || repository.join("plain-request-ran").exists()), "the plain request ran");

    let (bytes, screen) = terminal.run("audit", &shell_line(&env, &format!("audit --workspace {workspace}")));
    assert_inert(&terminal, "audit", "audit", &bytes, &marker, &title);
    assert!(screen.matches(" denied ").count() >= requests.len(), "{screen}");
    let _ = session.kill();
    let _ = session.wait();
    assert!(!marker.exists(), "nothing ran");
}

#[test]
fn the_terminal_prompt_shows_the_hostile_corpus_inert_and_still_answers() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let HostileDomain { marker, requests, repository, .. } = HostileDomain::prepared(&env);
    let terminal = Terminal::new(&env);
    let title = terminal.title("lzh:0");
    let window = "prompt";
    let line = format!(
        "{} run --workspace {} -- bash -c 'bash /workspace/.hostile/ask.sh & exec sleep 600'; echo LAZARET-EXIT=$?; sleep 3600",
        shell_line(&env, ""),
        repository.display()
    );
    let raw = env.path().join("raw-prompt");
    terminal.tmux(&["new-window", "-d", "-t", "lzh", "-n", window, &line]);
    let target = format!("lzh:{window}");
    terminal.tmux(&["pipe-pane", "-o", "-t", &target, &format!("cat > {}", raw.display())]);
    let screen = || terminal.tmux(&["capture-pane", "-p", "-t", &target]);
    for index in 0..requests.len() {
        assert!(
            wait_until(Duration::from_secs(60), || screen().contains("Approve & Run") && screen().contains("printf")),
            "hostile request {index} is on the prompt:\n{}",
            screen()
        );
        let shown = screen();
        let hazards = terminal_hazards(shown.as_bytes());
        assert!(hazards.is_empty(), "request {index}: the prompt shows raw {hazards:#?}");
        assert!(shown.find("Command").unwrap_or(usize::MAX) < shown.find("Justification").unwrap_or(0), "the command first:\n{shown}");
        assert!(shown.contains("[D] Deny"), "the actions stay on screen:\n{shown}");
        assert_eq!(terminal.title(&target), title, "request {index} changed the window title");
        assert_eq!(terminal.tmux(&["list-buffers"]).trim(), "", "request {index} wrote tmux's clipboard");
        assert!(wait_until(Duration::from_secs(10), || screen().contains("Ready for your answer")), "the prompt arms:\n{}", screen());
        terminal.keys(&target, "d");
        assert!(wait_until(Duration::from_secs(10), || !screen().contains(&shown)), "the prompt moved on after D");
    }
    assert!(
        wait_until(Duration::from_secs(30), || screen().contains("touch plain-request-ran")),
        "the plain request comes after the hostile ones:\n{}",
        screen()
    );
    assert!(wait_until(Duration::from_secs(10), || screen().contains("Ready for your answer")), "the prompt arms:\n{}", screen());
    terminal.keys(&target, "a");
    assert!(wait_until(Duration::from_secs(10), || screen().contains("Run `touch plain-request-ran` on the host")), "{}", screen());
    terminal.keys(&target, "Enter");
    assert!(wait_until(Duration::from_secs(15), || repository.join("plain-request-ran").exists()), "A and Enter still approve");
    assert!(!marker.exists(), "nothing ran");
    let bytes = std::fs::read(&raw).unwrap_or_default();
    // The prompt draws with escape sequences of its own; what the agent
    // wrote must not have set the title or the clipboard through them.
    assert!(!contains(&bytes, b"\x1b]0;") && !contains(&bytes, b"\x1b]2;") && !contains(&bytes, b"\x1b]52;"), "an OSC of the agent");
    assert!(!contains(&bytes, b"\x1b]8;"), "an OSC 8 link of the agent");
    let audit = run(env.lazaret().args(["audit", "--json", "--workspace"]).arg(&repository));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&audit.stdout).expect("audit");
    assert!(records.iter().all(|r| r["type"] == "escalation"), "{records:?}");
    let answered: Vec<(&str, &str)> =
        records.iter().map(|r| (r["outcome"].as_str().unwrap_or(""), r["decidedBy"].as_str().unwrap_or(""))).collect();
    let mut expected = vec![("denied", "rpc:terminal"); requests.len()];
    expected.push(("approved", "rpc:terminal"));
    assert_eq!(answered, expected, "each hostile request was denied at the prompt, the plain one approved");
}

/// Issue 45 finding 6 (D19): a long name is cut in the middle, never at its
/// end, which decides who controls it. Every entry of the corpus marked
/// `network` is asked for by the sandbox as a DNS name (`[network] ask`);
/// the terminal prompt and `lazaret pending` show its `tail`, inert.
#[test]
fn long_names_show_their_end_in_every_cli_surface() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    env.write_config("[network]\nask = true\nask_hold_seconds = 1\n");
    let marker = env.path().join("MARKER");
    let names: Vec<Hostile> = hostile_corpus(&marker).into_iter().filter(|entry| entry.network).collect();
    assert!(!names.is_empty(), "the corpus has names to ask for");
    let repository = git_repository(&env, "project");
    let terminal = Terminal::new(&env);
    let title = terminal.title("lzh:0");
    let lookups: Vec<String> = names.iter().map(|entry| format!("busybox nslookup {} >/dev/null 2>&1;", entry.text)).collect();
    let line = format!(
        "{} run --workspace {} -- sh -c '{} exec sleep 600'; echo LAZARET-EXIT=$?; sleep 3600",
        shell_line(&env, ""),
        repository.display(),
        lookups.join(" ")
    );
    terminal.tmux(&["new-window", "-d", "-t", "lzh", "-n", "names", &line]);
    let screen = || terminal.tmux(&["capture-pane", "-p", "-t", "lzh:names"]);
    for entry in &names {
        let tail = entry.tail.as_deref().expect("a network entry says its tail");
        assert!(
            wait_until(Duration::from_secs(60), || screen().contains("network request") && screen().contains(tail)),
            "{}: the prompt shows the name's end `{tail}`:\n{}",
            entry.name,
            screen()
        );
        assert!(terminal_hazards(screen().as_bytes()).is_empty(), "{}: inert on the prompt", entry.name);
        let (bytes, listing) = terminal.run(&format!("pending-{}", entry.name), &shell_line(&env, "pending"));
        assert_inert(&terminal, &format!("pending-{}", entry.name), "pending", &bytes, &marker, &title);
        let shown = listing.lines().find(|line| line.contains("network: ")).unwrap_or_default();
        assert!(shown.contains(tail), "{}: `lazaret pending` shows `{tail}`:\n{listing}", entry.name);
        assert!(wait_until(Duration::from_secs(10), || screen().contains("Ready for your answer")), "{}", screen());
        terminal.keys("lzh:names", "d");
    }
    assert!(!marker.exists(), "nothing ran");
}

impl Terminal {
    fn keys(&self, target: &str, keys: &str) {
        self.tmux(&["send-keys", "-t", target, keys]);
    }
}
