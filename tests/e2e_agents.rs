//! End-to-end tests of the agent presets, with real podman and runsc: for
//! Claude Code, Codex and aider, `lazaret init --agent X` writes a profile
//! that `lazaret config check` accepts, `lazaret image build --agent X`
//! builds the image from packages fetched beforehand (scripts/prefetch-agents;
//! the test itself downloads nothing), `lazaret run --profile X -- X
//! --version` prints the agent's version from inside gVisor, the API key
//! stays out of the sandbox (the agent gets a placeholder and the sidecar's
//! credential endpoint as its base URL; no process in it has the key in its
//! environment, and neither container's configuration holds it) and is found
//! nowhere on disk afterwards; and an agent's first-run prompt is answered
//! through Lazaret's terminal.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lazaret_test_support::*;
use sha2::{Digest, Sha256};

struct Agent {
    name: &'static str,
    key: &'static str,
    version_output: &'static str,
    /// `NAME=URL`: the variable that points the agent at the credential endpoint.
    base_url: &'static str,
}

const CLAUDE: Agent = Agent {
    name: "claude",
    key: "ANTHROPIC_API_KEY",
    version_output: "(Claude Code)",
    base_url: "ANTHROPIC_BASE_URL=http://127.0.0.1:17400",
};
const CODEX: Agent =
    Agent { name: "codex", key: "OPENAI_API_KEY", version_output: "codex-cli ", base_url: "OPENAI_BASE_URL=http://127.0.0.1:17400/v1" };
const AIDER: Agent =
    Agent { name: "aider", key: "ANTHROPIC_API_KEY", version_output: "aider ", base_url: "ANTHROPIC_BASE_URL=http://127.0.0.1:17400" };

/// One image build at a time: they are disk- and CPU-heavy.
static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn cache_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME").filter(|dir| Path::new(dir).is_absolute()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"),
    }
    .join("lazaret/agents")
}

/// A value no file on this machine contains before the test.
fn marker() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    format!("lzt-key-{}-{nanos:x}", std::process::id())
}

/// The image's files, through `podman image mount` (root only).
fn image_files_containing(image: &str, needle: &[u8]) -> Vec<PathBuf> {
    let output = Command::new("podman").args(["image", "mount", image]).output().expect("podman image mount");
    assert!(output.status.success(), "podman image mount {image}: {}", stderr(&output));
    let root = PathBuf::from(stdout(&output).trim());
    let found = files_containing(&root, needle);
    let _ = Command::new("podman").args(["image", "unmount", image]).output();
    found
}

fn preset_end_to_end(agent: &Agent) {
    ensure_default_image();
    let env = TestEnv::new();
    let workspace = git_repository(&env, "project");
    let key = marker();

    // init: a profile that loads, names the key by `env:` only in its
    // credential endpoint, gives the sandbox a placeholder, egress by name.
    let output = run(env.lazaret().args(["init", "--agent", agent.name, "--workspace"]).arg(&workspace));
    assert!(output.status.success(), "init: {}", stderr(&output));
    let text = std::fs::read_to_string(env.config_file()).expect("config");
    assert!(text.contains(&format!("value = \"env:{}\"", agent.key)), "{text}");
    assert!(text.contains(&format!("{} = \"lazaret-injected\"", agent.key)), "{text}");
    let again = run(env.lazaret().args(["init", "--agent", agent.name]));
    assert_eq!(again.status.code(), Some(1), "a second init is refused: {}", stderr(&again));
    assert!(stderr(&again).contains("already exists"), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(env.config_file()).expect("config"), text, "a refused init changes nothing");
    let check = run(env.lazaret().args(["config", "check", "--workspace"]).arg(&workspace).env(agent.key, &key));
    assert!(check.status.success(), "config check: {}", stderr(&check));
    let show =
        run(env.lazaret().args(["config", "show", "--json", "--profile", agent.name, "--workspace"]).arg(&workspace).env(agent.key, &key));
    assert!(show.status.success(), "config show: {}", stderr(&show));
    assert!(!stdout(&show).contains(&key), "config show redacts the key");
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
    let egress = shown["allow_egress"].as_array().expect("allow_egress");
    assert!(!egress.is_empty());
    for rule in egress {
        // Parsed by the same rules the sidecar enforces (lazaret-dns for
        // names): every preset entry is a DNS name.
        assert_eq!(rule["kind"], "domain", "{rule}");
        assert!(rule["value"].as_str().is_some_and(|name| name.contains('.')), "{rule}");
    }
    let image = shown["image"].as_str().expect("image").to_owned();
    let version = image.rsplit(':').next().expect("tag").to_owned();

    // image build: from the prefetched packages only.
    let fetched = cache_dir().join(format!("{}-{version}/fetched.json", agent.name));
    if !fetched.exists() {
        missing_requirement(&format!("{} fetched beforehand into {} (scripts/prefetch-agents)", agent.name, fetched.display()));
        return;
    }
    let started = Instant::now();
    let build = {
        let _build = BUILD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        run(env.lazaret().args(["image", "build", "--agent", agent.name]).env(agent.key, &key))
    };
    assert!(build.status.success(), "image build: {}", stderr(&build));
    assert!(
        stdout(&build).contains("agent     ") && stdout(&build).contains(&version),
        "the build names what it installed: {}",
        stdout(&build)
    );
    eprintln!("{}: image build (cached staging) {:.1} s", agent.name, started.elapsed().as_secs_f64());

    let _guard = sandbox_guard();
    // --version from inside gVisor, cold (no domain running yet).
    let started = Instant::now();
    let output = run(env
        .lazaret()
        .args(["run", "--profile", agent.name, "--workspace"])
        .arg(&workspace)
        .args(["--", agent.name, "--version"])
        .env(agent.key, &key));
    let cold = started.elapsed();
    assert!(output.status.success(), "run --version: {}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains(agent.version_output), "version: {}", stdout(&output));
    assert!(stdout(&output).contains(&version), "version {version}: {}", stdout(&output));
    eprintln!("{}: cold `lazaret run -- {} --version` {:.2} s: {}", agent.name, agent.name, cold.as_secs_f64(), stdout(&output).trim());

    // The key stays out of the sandbox: the agent sees the placeholder and
    // the endpoint, and no process's environment holds the key (compared by
    // hash: the value itself is never put on a command line, which the state
    // store records). Neither container's configuration holds it either.
    let expected: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let (base_name, base_value) = agent.base_url.split_once('=').expect("NAME=URL");
    let script = format!(
        "echo key=${key_name} base=${base_name}; \
         for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | sed 's/^[^=]*=//' | sort -u | \
         while read -r value; do printf %s \"$value\" | sha256sum; done; echo done",
        key_name = agent.key
    );
    let session = env
        .lazaret()
        .args(["run", "--profile", agent.name, "--workspace"])
        .arg(&workspace)
        .args(["--", "sh", "-c", &format!("{script}; sleep 60")])
        .env(agent.key, &key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut session = session;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(session.stdout.take().expect("stdout")));
    let mut text = String::new();
    for line in lines.by_ref() {
        let line = line.expect("read");
        text.push_str(&line);
        text.push('\n');
        if line == "done" {
            break;
        }
    }
    let domain = domain_json(&env, agent.name, &workspace);
    let (sandbox, sidecar) = (domain["container_name"].as_str().expect("name"), domain["sidecar_name"].as_str().expect("sidecar"));
    for container in [sandbox, sidecar] {
        let inspect = run(Command::new("podman").args(["inspect", container]));
        assert!(inspect.status.success(), "podman inspect {container}: {}", stderr(&inspect));
        assert!(!stdout(&inspect).contains(&key), "{container}'s configuration holds the key");
    }
    let _ = session.kill();
    let _ = session.wait();
    assert!(
        text.contains(&format!("key=lazaret-injected base={base_value}\n")),
        "the sandbox sees the placeholder and the endpoint: {text}"
    );
    assert!(text.lines().filter(|line| line.ends_with("  -")).count() > 3, "the environments were read: {text}");
    assert!(!text.contains(&expected), "a process in the sandbox has the key in its environment: {text}");

    // ... and nowhere on disk: configuration, data (state store, logs,
    // persistent directories), runtime directory, the image.
    let domain = domain_json(&env, agent.name, &workspace);
    assert!(wait_until(Duration::from_secs(20), || domain_is_torn_down(&domain, &workspace)), "the domain ends");
    let found = files_containing(env.path(), key.as_bytes());
    assert!(found.is_empty(), "the key was written to {found:?}");
    if require_root("podman image mount") {
        let found = image_files_containing(&image, key.as_bytes());
        assert!(found.is_empty(), "the key is in the image: {found:?}");
    }
}

#[test]
fn claude_code_preset_runs_its_version_in_gvisor_and_keeps_the_key_off_disk() {
    preset_end_to_end(&CLAUDE);
}

#[test]
fn codex_preset_runs_its_version_in_gvisor_and_keeps_the_key_off_disk() {
    preset_end_to_end(&CODEX);
}

#[test]
fn aider_preset_runs_its_version_in_gvisor_and_keeps_the_key_off_disk() {
    preset_end_to_end(&AIDER);
}

/// The profile's default command is the agent, in a real terminal (tmux):
/// aider's first-run question is asked and answered through Lazaret's PTY,
/// and the answer lands in the agent's checkout. The preset has `ask =
/// true`: the names aider looks up at start beyond its allowlist (e.g. its
/// model list on raw.githubusercontent.com) come up as network requests on
/// the prompt, and are denied there, as a user who does not want them would.
#[test]
fn the_agent_is_the_default_command_and_its_first_run_prompt_works_in_a_terminal() {
    ensure_default_image();
    let env = TestEnv::new();
    let workspace = git_repository(&env, "project");
    let output = run(env.lazaret().args(["init", "--agent", "aider"]));
    assert!(output.status.success(), "init: {}", stderr(&output));
    let fetched = std::fs::read_dir(cache_dir()).ok().and_then(|entries| {
        entries
            .flatten()
            .find(|entry| entry.file_name().to_string_lossy().starts_with("aider-") && entry.path().join("fetched.json").exists())
    });
    if fetched.is_none() {
        missing_requirement("aider fetched beforehand (scripts/prefetch-agents)");
        return;
    }
    {
        let _build = BUILD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let build = run(env.lazaret().args(["image", "build", "--agent", "aider"]));
        assert!(build.status.success(), "image build: {}", stderr(&build));
    }
    let _guard = sandbox_guard();
    let socket = env.path().join("tmux.sock");
    let tmux = |arguments: &[&str]| stdout(&Command::new("tmux").arg("-S").arg(&socket).args(arguments).output().expect("tmux"));
    let command = format!(
        "env ANTHROPIC_API_KEY={key} XDG_CONFIG_HOME={config} XDG_DATA_HOME={data} XDG_RUNTIME_DIR={run} {lazaret} run --profile aider --workspace {workspace}; echo LAZARET-EXIT=$?; sleep 60",
        key = marker(),
        config = env.path().join("config").display(),
        data = env.path().join("data").display(),
        run = env.path().join("run").display(),
        lazaret = lazaret_bin().display(),
        workspace = workspace.display(),
    );
    tmux(&["new-session", "-d", "-s", "lzt", "-x", "100", "-y", "30", &command]);
    let screen = || tmux(&["capture-pane", "-p", "-t", "lzt"]);
    let asked = wait_until(Duration::from_secs(60), || screen().contains("Add .aider* to .gitignore"));
    assert!(asked, "aider's first-run question appears: {}", screen());
    tmux(&["send-keys", "-t", "lzt", "y", "Enter"]);
    assert!(wait_until(Duration::from_secs(60), || screen().contains("Added .aider* to .gitignore")), "answered: {}", screen());
    let mut denied = Vec::new();
    let started = wait_until(Duration::from_secs(120), || {
        let shown = screen();
        // Answered once the prompt takes answers (D20), as a person reads it first.
        if shown.contains("Lazaret: network request") && shown.contains("Ready for your answer") {
            let name = shown
                .lines()
                .find_map(|line| line.trim_start_matches('│').strip_prefix("Destination"))
                .map(|rest| rest.trim().trim_end_matches('│').trim().to_owned());
            denied.push(name.unwrap_or_default());
            tmux(&["send-keys", "-t", "lzt", "d"]);
            std::thread::sleep(Duration::from_millis(500));
            return false;
        }
        shown.contains("Aider v")
    });
    assert!(started, "aider starts (network requests denied on the way: {denied:?}): {}", screen());
    assert!(
        denied.iter().all(|name| !name.is_empty() && !name.contains("anthropic")),
        "only names off the allowlist were asked: {denied:?}"
    );
    // Leave aider (^D at its prompt, after any further question).
    for _ in 0..5 {
        if screen().contains("LAZARET-EXIT=") {
            break;
        }
        tmux(&["send-keys", "-t", "lzt", "n", "Enter"]);
        std::thread::sleep(Duration::from_secs(2));
        tmux(&["send-keys", "-t", "lzt", "C-d"]);
        wait_until(Duration::from_secs(10), || screen().contains("LAZARET-EXIT="));
    }
    let text = screen();
    tmux(&["kill-server"]);
    assert!(text.contains("LAZARET-EXIT=0"), "aider exits through lazaret: {text}");
    let domain = domain_json(&env, "aider", &workspace);
    assert!(wait_until(Duration::from_secs(20), || domain_is_torn_down(&domain, &workspace)), "the domain ends");
}
