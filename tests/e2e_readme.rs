//! The README's "Usage" walked as a user would (issue 27): every command of
//! its list runs as written (the placeholders filled in) against a demo
//! workspace, with nothing but the README's own configuration keys; where a
//! command needs a running domain, an agent session keeps one up. A line
//! added to the list without a walk here fails the test.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use lazaret_test_support::*;

/// The `sh` block of the README's "Usage" section, one command per line
/// (comments cut).
fn usage_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README");
    let usage = readme.split("## Usage").nth(1).expect("a Usage section");
    let block = usage.split("```sh\n").nth(1).and_then(|rest| rest.split("```").next()).expect("its sh block");
    block.lines().map(|line| line.split(" #").next().unwrap_or("").trim().to_owned()).filter(|line| !line.is_empty()).collect()
}

struct Walk<'a> {
    env: &'a TestEnv,
    workspace: &'a Path,
    /// Usage lines walked so far.
    walked: Vec<String>,
}

impl Walk<'_> {
    /// Runs `lazaret ARGUMENTS` in the workspace, for the Usage line
    /// starting with `line`; `Ok` output or a panic naming the command.
    fn run(&mut self, line: &str, arguments: &[&str]) -> Output {
        self.walked.push(line.to_owned());
        let output = self.env.lazaret().args(arguments).current_dir(self.workspace).stdin(Stdio::null()).output().expect("spawn");
        assert!(output.status.success(), "lazaret {}: {}{}", arguments.join(" "), stdout(&output), stderr(&output));
        output
    }
}

#[test]
fn every_command_of_the_readmes_usage_runs_as_written() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    // Only keys the README's own configuration shows, with its defaults left
    // out; no network is contacted (the allowlist names an unused range).
    env.write_config(
        "[network]\nallow_egress = [\"10.213.199.0/24\"]\n\n[escalation]\nenabled = true\n\n\
         [profiles.demo]\nimage = \"localhost/lazaret-default:1\"\npersistent_dirs = [\"/root\"]\n",
    );
    let workspace = git_repository(&env, "demo");
    let mut walk = Walk { env: &env, workspace: &workspace, walked: Vec::new() };

    walk.run("lazaret image build", &["image", "build"]);
    walk.run("lazaret doctor", &["doctor"]);
    walk.run("lazaret config check", &["config", "check"]);
    walk.run("lazaret config check", &["config", "check", "--workspace", workspace.to_str().expect("utf8")]);
    walk.run("lazaret config show", &["config", "show"]);
    walk.run("lazaret config show", &["config", "show", "--profile", "demo", "--json"]);
    walk.run("lazaret domain", &["domain"]);
    walk.run("lazaret domain", &["domain", "--profile", "demo", "--json"]);
    for shell in ["bash", "zsh", "fish"] {
        walk.run("lazaret completions", &["completions", shell]);
    }

    // An agent that commits, leaves a file in a persistent directory and
    // asks the host three times.
    let agent = "cd /workspace && echo from-the-agent > agent.txt && git add agent.txt && git commit -qm agent && \
                 echo kept > /root/kept.txt && echo ready && \
                 for name in approved denied edited; do lazaret-escalate -- touch $name-by-the-walk; done; sleep 120";
    let mut session = env
        .lazaret()
        .args(["run", "--profile", "demo", "--", "sh", "-c", agent])
        .current_dir(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(session.stdout.take().expect("stdout")));
    assert_eq!(lines.next().map(|line| line.expect("line")).as_deref(), Some("ready"), "the agent session runs");
    walk.run("lazaret run", &["run", "--profile", "demo", "--workspace", workspace.to_str().expect("utf8"), "--", "true"]);
    walk.run("lazaret status", &["status", "--profile", "demo"]);
    walk.run("lazaret status", &["status", "--profile", "demo", "--json"]);
    walk.run("lazaret sessions", &["sessions", "--profile", "demo"]);
    walk.run("lazaret sessions", &["sessions", "--profile", "demo", "--json"]);
    walk.run("lazaret editor-info", &["editor-info", "--json"]);
    assert!(
        wait_until(Duration::from_secs(10), || git(&workspace, &["for-each-ref", "refs/heads/lazaret/agent-demo"]).contains("agent-demo")),
        "the agent branch reached the host"
    );
    walk.run("lazaret diff", &["diff", "--profile", "demo"]);
    walk.run("lazaret diff", &["diff", "--profile", "demo", "--stat"]);
    let diff: serde_json::Value =
        serde_json::from_slice(&walk.run("lazaret diff", &["diff", "--profile", "demo", "--json"]).stdout).expect("json");
    walk.run("lazaret state diff", &["state", "diff", "--profile", "demo"]);
    walk.run("lazaret net show", &["net", "show", "--profile", "demo"]);
    walk.run("lazaret net show", &["net", "allow", "10.213.199.7", "--profile", "demo"]);
    walk.run("lazaret net show", &["net", "deny", "10.213.199.7", "--profile", "demo"]);

    let pending = |walk: &mut Walk<'_>| -> String {
        let mut id = String::new();
        assert!(wait_until(Duration::from_secs(20), || {
            let listed: Vec<serde_json::Value> =
                serde_json::from_slice(&walk.env.lazaret().args(["pending", "--json"]).output().expect("spawn").stdout).unwrap_or_default();
            id = listed.first().and_then(|request| request["requestId"].as_str()).unwrap_or("").to_owned();
            !id.is_empty()
        }));
        walk.run("lazaret pending", &["pending"]);
        walk.run("lazaret pending", &["pending", "--full"]);
        id
    };
    let id = pending(&mut walk);
    walk.run("lazaret pending", &["approve", &id]);
    let id = pending(&mut walk);
    walk.run("lazaret pending", &["deny", &id]);
    let id = pending(&mut walk);
    walk.run("lazaret pending", &["edit", &id, "--", "touch", "edited-instead"]);
    assert!(wait_until(Duration::from_secs(10), || workspace.join("edited-instead").exists()));
    assert!(workspace.join("approved-by-the-walk").exists() && !workspace.join("denied-by-the-walk").exists());
    walk.run("lazaret rules", &["rules"]);
    let rules: serde_json::Value = serde_json::from_slice(&walk.run("lazaret rules", &["rules", "--json"]).stdout).expect("rules json");
    assert!(rules.as_object().is_some_and(|domains| !domains.is_empty()), "the running domain's rules: {rules}");
    walk.run("lazaret audit", &["audit", "--profile", "demo"]);
    walk.run("lazaret audit", &["audit", "--profile", "demo", "--json"]);
    walk.run("lazaret audit", &["audit", "verify", "--profile", "demo"]);

    let head = diff["head"].as_str().expect("the reviewed head").to_owned();
    walk.run("lazaret merge", &["merge", "--profile", "demo", "--expect", &head, "--yes"]);
    assert_eq!(git(&workspace, &["rev-parse", "HEAD"]).trim(), head, "merged the reviewed commit");

    let _ = session.kill();
    let _ = session.wait();
    let domain = domain_json(&env, "demo", &workspace);
    assert!(wait_until(Duration::from_secs(20), || domain_is_torn_down(&domain, &workspace)));
    // Refused while the domain runs; afterwards it asks (here: --yes).
    walk.run("lazaret state diff", &["state", "reset", "--profile", "demo", "--yes"]);

    walk.run("lazaret init", &["init", "--agent", "claude"]);
    // The agent's image needs its packages fetched once (tests/run does, as
    // for e2e_agents); it is built offline from them.
    walk.walked.push("lazaret image build --agent".to_owned());
    let built = env.lazaret().args(["image", "build", "--agent", "claude"]).env("ANTHROPIC_API_KEY", "sk-walk").output().expect("spawn");
    if !built.status.success() && stderr(&built).contains("prefetch") {
        missing_requirement("the agent packages fetched beforehand (scripts/prefetch-agents)");
        return;
    }
    assert!(built.status.success(), "lazaret image build --agent claude: {}", stderr(&built));

    for line in usage_lines() {
        assert!(
            walk.walked.iter().any(|walked| line.starts_with(walked.as_str())),
            "the README's Usage line `{line}` is not walked by this test"
        );
    }
}
