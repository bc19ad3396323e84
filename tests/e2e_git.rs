//! End-to-end tests of Git Sentry and the agent branch (DECISIONS D1-D4):
//! real git on real repositories, an agent acting inside a real gVisor
//! sandbox, and the host checked byte for byte.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazaret_test_support::*;

const BRANCH: &str = "lazaret/agent-default";

fn run_agent(env: &TestEnv, repository: &Path, script: &str) -> std::process::Output {
    run(env.lazaret().args(["run", "--workspace"]).arg(repository).args(["--", "sh", "-c", script]))
}

/// Everything of the host repository that must not change: HEAD, the
/// index bytes, every ref but the agent branch, and the working tree.
fn host_snapshot(repository: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut snapshot = BTreeMap::new();
    let git_dir = repository.join(".git");
    snapshot.insert("HEAD".to_owned(), std::fs::read(git_dir.join("HEAD")).expect("HEAD"));
    snapshot.insert("index".to_owned(), std::fs::read(git_dir.join("index")).expect("index"));
    snapshot.insert("config".to_owned(), std::fs::read(git_dir.join("config")).expect("config"));
    let refs = git(repository, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let refs: Vec<&str> = refs.lines().filter(|line| !line.starts_with(&format!("refs/heads/{BRANCH} "))).collect();
    snapshot.insert("refs".to_owned(), refs.join("\n").into_bytes());
    let hooks: Vec<String> =
        std::fs::read_dir(git_dir.join("hooks")).expect("hooks").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    snapshot.insert("hooks".to_owned(), hooks.join(",").into_bytes());
    let mut stack = vec![repository.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path == git_dir {
                continue;
            }
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                snapshot.insert(path.display().to_string(), std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    snapshot
}

#[test]
fn git_config_is_read_only_inside_and_follows_the_host_within_a_second() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    git(&repository, &["remote", "add", "origin", "https://alice:s3cr3t-token@example.invalid/project.git"]);
    let probe = "cd /workspace; \
        (echo x >> .git/config) 2>&1 | grep -q 'Read-only file system' && echo WRITE=EROFS; \
        rm .git/config 2>&1 | grep -q 'busy' && echo UNLINK=EBUSY; \
        mv .git/config .git/moved 2>&1 | grep -q 'busy' && echo RENAME=EBUSY; \
        mv /workspace/.git /workspace/git-moved 2>&1 | grep -q 'busy' && echo RENAME_GIT_DIR=EBUSY; \
        grep -c s3cr3t .git/config; true";
    // The agent keeps the session open while the host changes its config.
    let script = format!(
        "{probe}; echo READY; for i in $(seq 100); do if grep -q 'round = 3' .git/config; then echo SEEN3; break; fi; sleep 0.05; done; {probe}; grep round .git/config"
    );
    let mut child = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&repository)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut first = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        if line == "READY" {
            break;
        }
        first.push(line);
    }
    assert_eq!(first, ["WRITE=EROFS", "UNLINK=EBUSY", "RENAME=EBUSY", "RENAME_GIT_DIR=EBUSY", "0"], "before host changes");
    // git config replaces .git/config by rename each time.
    let changed_at = Instant::now();
    for round in 1..=3 {
        git(&repository, &["config", "lazaret.round", &round.to_string()]);
    }
    let rest: Vec<String> = lines.map(|line| line.expect("line")).collect();
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(rest.first().map(String::as_str), Some("SEEN3"), "new values visible inside: {rest:?}");
    eprintln!("host change visible inside after at most {:?}", changed_at.elapsed());
    assert_eq!(
        &rest[1..6],
        ["WRITE=EROFS", "UNLINK=EBUSY", "RENAME=EBUSY", "RENAME_GIT_DIR=EBUSY", "0"],
        "after three host rewrites: {rest:?}"
    );
    assert!(rest.last().is_some_and(|line| line.contains("round = 3")), "{rest:?}");
    assert!(git(&repository, &["config", "--get", "remote.origin.url"]).contains("s3cr3t-token"), "the host config itself is untouched");
}

#[test]
/// The commit reaches the host by itself (inotify on the sandbox's refs): the
/// wait here is generous, for a loaded machine; how fast it is (median and
/// p99 of commit to host ref) is `tests/run bench`'s to measure.
fn an_agent_commit_reaches_the_host_ref_and_diffs_exactly() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script =
        "cd /workspace; echo 'pub fn question() {}' >> src/lib.rs; git commit -q -am 'agent: add question'; echo COMMITTED; sleep 3";
    let (mut child, mut lines) = spawn_agent_lines(&env, &repository, script);
    assert_eq!(lines.next().map(|l| l.expect("line")).as_deref(), Some("COMMITTED"));
    let committed = Instant::now();
    let branch_ref = format!("refs/heads/{BRANCH}");
    let arrived = wait_until(Duration::from_secs(30), || {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&repository)
            .args(["rev-parse", "--verify", "--quiet", &branch_ref])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let latency = committed.elapsed();
    assert!(arrived, "the agent branch reached the host within 30 s, while the session still runs");
    eprintln!("commit to host ref: {latency:?}");
    let _ = child.wait();
    let diff = git(&repository, &["diff", &format!("HEAD..{BRANCH}")]);
    assert!(diff.contains("+pub fn question() {}"), "{diff}");
    assert_eq!(git(&repository, &["diff", "--name-only", &format!("HEAD..{BRANCH}")]).trim(), "src/lib.rs");
    assert_eq!(git(&repository, &["log", "-1", "--format=%s", BRANCH]).trim(), "agent: add question");

    // lazaret diff says the same, and a second session continues the branch.
    let json = run(env.lazaret().args(["diff", "--json", "--workspace"]).arg(&repository));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("diff json");
    assert_eq!(json["files"][0]["path"], "src/lib.rs");
    assert_eq!(json["base"], git(&repository, &["rev-parse", "HEAD"]).trim());
    let output = run_agent(&env, &repository, "cd /workspace; git log --format=%s -1");
    assert_eq!(stdout(&output).trim(), "agent: add question", "the next session continues the agent branch");
    // After the user deletes the branch (say, merged it), the agent starts afresh at HEAD.
    git(&repository, &["branch", "-D", BRANCH]);
    let output = run_agent(&env, &repository, "cd /workspace; git log --format=%s -1; cat src/lib.rs");
    assert_eq!(stdout(&output), "initial\npub fn answer() -> u32 { 42 }\n", "{}", stderr(&output));
}

#[test]
fn the_host_repository_is_byte_identical_whatever_the_agent_does() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    git(&repository, &["branch", "feature"]);
    git(&repository, &["tag", "v1"]);
    std::fs::write(repository.join("uncommitted.txt"), "host work in progress\n").expect("write");
    let before = host_snapshot(&repository);
    let script = "cd /workspace; set -x; \
        echo one > one.txt; git add one.txt; git commit -qm one; \
        git checkout -q -b other; echo two > two.txt; git add two.txt; git commit -qm two; \
        git checkout -q lazaret/agent-default; git reset -q --hard HEAD~1; \
        git update-ref -d refs/lazaret/host-head; git tag evil; git update-ref refs/heads/main HEAD; \
        git replace -f $(git rev-parse HEAD) $(git rev-parse HEAD~0); \
        echo 'ref: refs/heads/other' > .git/HEAD; \
        rm -rf /workspace/.git/* /workspace/.git/.[!.]* 2>/dev/null; rm -rf /workspace/.git; \
        echo garbage > /workspace/.git/packed-refs; true";
    let output = run_agent(&env, &repository, script);
    assert!(output.status.success(), "{}", stderr(&output));
    let after = host_snapshot(&repository);
    for (key, value) in &before {
        assert_eq!(after.get(key), Some(value), "host {key} changed");
    }
    assert_eq!(before.len(), after.len(), "no file appeared or vanished on the host");
    let fsck =
        std::process::Command::new("git").arg("-C").arg(&repository).args(["fsck", "--strict", "--no-progress"]).output().expect("fsck");
    assert!(fsck.status.success(), "git fsck: {}", stderr(&fsck));
    let tags = git(&repository, &["tag", "--list"]);
    assert_eq!(tags.trim(), "v1", "no tag from the sandbox");
    assert!(git(&repository, &["for-each-ref", "refs/replace"]).trim().is_empty(), "no replace ref from the sandbox");
}

/// Every way we know of for git metadata to make the host run code, each
/// with a marker payload; none may fire when the host uses git afterwards.
#[test]
fn git_metadata_written_by_the_agent_never_runs_on_the_host() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let markers = tempfile::Builder::new().prefix("lzt-markers").tempdir_in("/tmp").expect("tempdir");
    let marker = markers.path().display().to_string();
    // Inside the sandbox the marker directory does not exist, so the payload
    // fails quietly there and succeeds only if it runs on the host.
    let payload = |name: &str| format!("#!/bin/sh\\ntouch {marker}/{name} 2>/dev/null\\nexit 0\\n");
    let script = format!(
        "cd /workspace; \
         for hook in pre-commit post-commit post-checkout reference-transaction fsmonitor-watchman pre-push post-merge; do printf '{hooks}' > .git/hooks/$hook; chmod +x .git/hooks/$hook; done; \
         mkdir -p .git/modules/sub && printf '[core]\\n\\tfsmonitor = {marker}/fsmonitor.sh\\n\\thooksPath = /tmp\\n' > .git/modules/sub/config; \
         printf '{fsmonitor}' > /workspace/fsmonitor.sh; chmod +x /workspace/fsmonitor.sh; \
         echo 'ok' > file.txt; git add file.txt; git commit -qm 'with hooks'; \
         git replace -f $(git rev-parse HEAD) $(git rev-parse HEAD~1); \
         mkdir -p nested && cd nested && git init -q && echo n > n && git add n && git commit -qm nested && printf '[core]\\n\\tfsmonitor = \"touch {marker}/nested\"\\n' >> .git/config; cd ..; \
         git add nested 2>/dev/null; git commit -qm 'nested repo' || true; \
         printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n' > .gitmodules; \
         printf 'export X=$(touch {marker}/envrc)\\n' > .envrc; \
         git add .gitmodules .envrc; git commit -qm 'gitmodules and envrc'; true",
        hooks = payload("hook"),
        fsmonitor = payload("fsmonitor"),
    );
    let output = run_agent(&env, &repository, &script);
    assert!(output.status.success(), "{}", stderr(&output));
    // A tree with a .git entry, crafted with plumbing: the host must refuse it.
    let crafted = "cd /workspace; blob=$(echo '[core] fsmonitor=x' | git hash-object -w --stdin); \
        inner=$(printf '100644 blob %s\\tconfig\\n' $blob | git mktree); \
        tree=$(printf '040000 tree %s\\t.git\\n' $inner | git mktree); \
        commit=$(echo crafted | git commit-tree $tree -p HEAD); git update-ref refs/heads/lazaret/agent-default $commit; echo $commit; \
        sleep 1; printf '/tmp/evil-common\\n' > .git/commondir";
    let before_crafted = git(&repository, &["rev-parse", BRANCH]).trim().to_owned();
    let crafted_output = run_agent(&env, &repository, crafted);
    let crafted_commit = stdout(&crafted_output).trim().to_owned();
    assert_eq!(crafted_commit.len(), 40, "{}", stderr(&crafted_output));
    let host_branch = git(&repository, &["rev-parse", BRANCH]).trim().to_owned();
    assert_eq!(host_branch, before_crafted, "a commit with a .git tree entry is refused by the host's fsck");
    // D13: the refused import left nothing in the host repository.
    let present = Command::new("git").arg("-C").arg(&repository).args(["cat-file", "-e", &crafted_commit]).output().expect("git");
    assert!(!present.status.success(), "the refused commit's objects stay out of the host repository");
    let objects = repository.join(".git/objects");
    let leftovers: Vec<String> = std::fs::read_dir(&objects)
        .expect("objects")
        .chain(std::fs::read_dir(objects.join("pack")).expect("pack"))
        .filter_map(|entry| entry.ok().map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .filter(|name| name.starts_with("lazaret-incoming-") || name.starts_with("tmp_"))
        .collect();
    assert!(leftovers.is_empty(), "no quarantine or temporary pack is left: {leftovers:?}");
    // A .gitmodules whose update runs a command is refused the same way.
    let update_command = format!(
        "cd /workspace; rm -f .git/commondir; printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n\\tupdate = !touch {marker}/submodule-update\\n' > .gitmodules; \
         git add .gitmodules; git commit -qm 'update command'; git log -1 --format=%H"
    );
    let update_output = run_agent(&env, &repository, &update_command);
    assert!(update_output.status.success(), "the sandbox recovers from the planted commondir: {}", stderr(&update_output));
    assert_eq!(git(&repository, &["rev-parse", BRANCH]).trim(), before_crafted, "{}", stdout(&update_output));

    for arguments in [vec!["status"], vec!["log", "--all", "--oneline"], vec!["diff", "HEAD", BRANCH], vec!["show", BRANCH]] {
        git(&repository, &arguments);
    }
    let diff = run(env.lazaret().args(["diff", "--workspace"]).arg(&repository));
    assert!(diff.status.success(), "{}", stderr(&diff));
    let text = stdout(&diff);
    assert!(
        text.contains("WARNING") && text.contains(".envrc") && text.contains(".gitmodules"),
        "D4 warnings: {text}\nagent session: {}{}",
        stdout(&output),
        stderr(&output)
    );
    let fired: Vec<String> =
        std::fs::read_dir(markers.path()).expect("markers").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(fired.is_empty(), "payloads ran on the host: {fired:?}");
    assert!(!git(&repository, &["log", "--format=%s", BRANCH]).contains("crafted"));
    assert!(
        std::fs::read_dir(repository.join(".git/hooks"))
            .expect("hooks")
            .flatten()
            .all(|e| e.file_name().to_string_lossy().ends_with(".sample")),
        "no hook reached the host"
    );
}

#[test]
fn a_directory_that_is_not_a_repository_needs_an_explicit_choice() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let plain = env.workspace("plain");
    std::fs::write(plain.join("notes.txt"), "hello\n").expect("write");
    let refused = run(env.lazaret().args(["run", "--workspace"]).arg(&plain).args(["--", "true"]));
    assert_eq!(refused.status.code(), Some(1));
    let message = stderr(&refused);
    assert!(message.contains("not a git repository") && message.contains("--mount-workspace") && message.contains("git init"), "{message}");
    let output = run(env.lazaret().args(["run", "--mount-workspace", "--workspace"]).arg(&plain).args([
        "--",
        "sh",
        "-c",
        "cat /workspace/notes.txt; echo agent > /workspace/new.txt",
    ]));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "hello\n");
    assert_eq!(std::fs::read_to_string(plain.join("new.txt")).expect("written through"), "agent\n");
    // A repository is never mounted, even when asked.
    let repository = git_repository(&env, "project");
    let refused = run(env.lazaret().args(["run", "--mount-workspace", "--workspace"]).arg(&repository).args(["--", "true"]));
    assert!(!refused.status.success() && stderr(&refused).contains("never mounts a repository"), "{}", stderr(&refused));
}

#[test]
fn host_uncommitted_changes_are_announced_and_not_given_to_the_agent() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    std::fs::write(repository.join("README.md"), "# host edit in progress\n").expect("write");
    let output = run_agent(&env, &repository, "cat /workspace/README.md");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "# project\n", "the agent starts from HEAD");
    assert!(stderr(&output).contains("1 uncommitted change"), "{}", stderr(&output));
    // The note belongs to the domain's start: a session joining a running
    // domain skips it (and the image check), and pays only for the join.
    let mut holder = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&repository)
        .args(["--", "sh", "-c", "touch /tmp/held; sleep 30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let container = domain_json(&env, "default", &repository)["container_name"].as_str().expect("name").to_owned();
    let held = wait_until(Duration::from_secs(30), || {
        Command::new("podman").args(["exec", &container, "test", "-e", "/tmp/held"]).output().is_ok_and(|o| o.status.success())
    });
    assert!(held, "the first session runs");
    let joined = run_agent(&env, &repository, "cat /workspace/README.md");
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(joined.status.success(), "{}", stderr(&joined));
    assert_eq!(stdout(&joined), "# project\n");
    assert!(!stderr(&joined).contains("uncommitted change"), "{}", stderr(&joined));
}

/// The coordinator's log of a domain.
fn coordinator_log(domain: &serde_json::Value) -> String {
    let dir = Path::new(domain["domain_dir"].as_str().expect("domain_dir"));
    std::fs::read_to_string(dir.join("coordinator.log")).unwrap_or_default()
}

/// Issue 16, item 3: on a domain's first start the host builds the agent's
/// repository and checkout from host data, and git inside the sandbox takes
/// them as they are: the index is not rewritten by the first `git status`
/// (no file is read again), and modes, symlinks and end-of-line attributes
/// are what git inside would have checked out. The agent starts on the
/// host's existing agent branch, not on HEAD.
fn first_checkout_from_host_data(subject: &Subject) {
    let repository = git_repository(&subject.env, "project");
    for directory in 0..20 {
        let dir = repository.join(format!("dir{directory:02}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for file in 0..20 {
            std::fs::write(dir.join(format!("file{file:02}.txt")), format!("{directory} {file}\n")).expect("write");
        }
    }
    std::fs::write(repository.join("run.sh"), "#!/bin/sh\necho hi\n").expect("write");
    std::fs::set_permissions(repository.join("run.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("src/lib.rs", repository.join("link")).expect("symlink");
    std::fs::write(repository.join(".gitattributes"), "*.crlf text eol=crlf\n").expect("write");
    std::fs::write(repository.join("notes.crlf"), "a\nb\n").expect("write");
    git(&repository, &["add", "-A"]);
    git(&repository, &["commit", "--quiet", "-m", "content"]);
    git(&repository, &["branch", BRANCH]);
    let branch_commit = git(&repository, &["rev-parse", BRANCH]).trim().to_owned();
    std::fs::write(repository.join("README.md"), "# the host moved on\n").expect("write");
    git(&repository, &["commit", "--quiet", "-am", "host moves on"]);
    subject.hand_over();

    let script = "cd /workspace; git rev-parse HEAD; git symbolic-ref HEAD; \
        before=$(sha256sum .git/index); git status --porcelain; after=$(sha256sum .git/index); \
        [ \"$before\" = \"$after\" ] && echo INDEX_KEPT; \
        stat -c %a run.sh; readlink link; od -An -c notes.crlf; ls dir07 | wc -l; cat README.md";
    let output = run(subject.lazaret().args(["run", "--workspace"]).arg(&repository).args(["--", "sh", "-c", script]));
    assert!(output.status.success(), "{}: {}", subject.label(), stderr(&output));
    let lines: Vec<String> = stdout(&output).lines().map(|line| line.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(
        lines,
        [
            branch_commit.as_str(),
            "refs/heads/lazaret/agent-default",
            "INDEX_KEPT",
            "755",
            "src/lib.rs",
            "a \\r \\n b \\r \\n",
            "20",
            "# project"
        ],
        "{}",
        subject.label()
    );
    let log = coordinator_log(&subject.domain("default", &repository));
    assert!(log.contains("first checkout prepared on the host"), "{}: {log}", subject.label());
}

#[test]
fn the_first_checkout_is_prepared_on_the_host_and_taken_as_it_is_inside() {
    let _guard = sandbox_guard();
    ensure_default_image();
    first_checkout_from_host_data(&Subject::current());
}

#[test]
fn the_first_checkout_is_prepared_on_the_host_and_taken_as_it_is_inside_rootless() {
    let _guard = sandbox_guard();
    let Some(subject) = Subject::rootless() else { return };
    first_checkout_from_host_data(&subject);
}

/// The host's first checkout runs no command and reads no file for the
/// agent: a filter driver in the repository's config leaves the checkout to
/// git inside the sandbox (where the driver runs, if at all), and the user's
/// global config (here a filter driver in `$XDG_CONFIG_HOME/git/config`) is
/// not read by it.
#[test]
fn the_first_checkout_on_the_host_runs_no_filter_driver() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let marker = env.path().join("filter-ran-on-the-host");
    let filter = format!("touch {}; cat", marker.display());

    let configured = git_repository(&env, "configured");
    std::fs::write(configured.join(".gitattributes"), "*.txt filter=mark\n").expect("write");
    std::fs::write(configured.join("notes.txt"), "plain\n").expect("write");
    git(&configured, &["add", "-A"]);
    git(&configured, &["commit", "--quiet", "-m", "attributes"]);
    git(&configured, &["config", "filter.mark.smudge", &filter]);
    let output = run_agent(&env, &configured, "cat /workspace/notes.txt; git -C /workspace status --porcelain");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "plain\n");
    assert!(!marker.exists(), "the host ran the repository's filter driver");
    let log = coordinator_log(&domain_json(&env, "default", &configured));
    assert!(log.contains("left to git inside the sandbox") && log.contains("filter.mark.smudge"), "{log}");

    std::fs::create_dir_all(env.path().join("config/git")).expect("mkdir");
    std::fs::write(env.path().join("config/git/config"), format!("[filter \"mark\"]\n\tsmudge = {filter}\n")).expect("write");
    let global = git_repository(&env, "global");
    std::fs::write(global.join(".gitattributes"), "*.txt filter=mark\n").expect("write");
    std::fs::write(global.join("notes.txt"), "plain\n").expect("write");
    git(&global, &["add", "-A"]);
    git(&global, &["commit", "--quiet", "-m", "attributes"]);
    let _ = std::fs::remove_file(&marker);
    let output = run_agent(&env, &global, "cat /workspace/notes.txt");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "plain\n");
    assert!(!marker.exists(), "the host ran a filter driver of the user's global config");
    assert!(coordinator_log(&domain_json(&env, "default", &global)).contains("first checkout prepared on the host"));
}

/// Issue 33 finding 1: the host's first checkout fetched the seed bundle
/// by its path with the repository's config in force, so a
/// `url.<x>.insteadOf = <the data root>` in the user's `.git/config` (a
/// repository copied with its `.git`) turned it into a URL: git:// ran
/// `core.gitProxy` as the user, http:// would have connected outside the
/// sandbox's policy. The checkout now unbundles (no transport at all) and
/// host git runs with every transport refused. Each rewriting runs nothing,
/// connects nowhere, and the first checkout is still the host's.
fn first_checkout_follows_no_url_rewriting(subject: &Subject) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let marker = |variant: &str| subject.env.path().join(format!("ran-{variant}"));
    let script = |variant: &str| {
        let path = subject.env.path().join(format!("{variant}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\ntouch {}\n", marker(variant).display())).expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    };
    // (name, the URL the data root is rewritten to, the settings beside it)
    type Variant = (&'static str, String, Vec<(String, String)>);
    let variants: Vec<Variant> = vec![
        ("git-proxy", format!("git://127.0.0.1:{port}/x"), vec![("core.gitProxy".into(), script("git-proxy"))]),
        ("ssh", "ssh://lazaret.invalid/x".into(), vec![("core.sshCommand".into(), script("ssh"))]),
        ("ext", format!("ext::{} %S", script("ext")), vec![("protocol.ext.allow".into(), "always".into())]),
        (
            "http-proxy",
            "http://lazaret.invalid/x".into(),
            vec![("http.proxy".into(), format!("http://127.0.0.1:{port}")), ("protocol.http.allow".into(), "always".into())],
        ),
        (
            "upload-pack",
            "file:///nonexistent/x".into(),
            vec![("uploadpack.packObjectsHook".into(), script("upload-pack")), ("protocol.file.allow".into(), "always".into())],
        ),
    ];
    for (variant, url, settings) in variants {
        let repository = git_repository(&subject.env, variant);
        let domain = subject.domain("default", &repository);
        let domain_dir = domain["domain_dir"].as_str().expect("domain_dir");
        git(&repository, &["config", &format!("url.{url}.insteadOf"), domain_dir]);
        for (key, value) in &settings {
            git(&repository, &["config", key, value]);
        }
        subject.hand_over();
        let output = run(subject.lazaret().args(["run", "--workspace"]).arg(&repository).args(["--", "cat", "/workspace/README.md"]));
        assert!(output.status.success(), "{} {variant}: {}", subject.label(), stderr(&output));
        assert_eq!(stdout(&output), "# project\n", "{} {variant}", subject.label());
        assert!(!marker(variant).exists(), "{} {variant}: host git ran the repository's command", subject.label());
        assert!(listener.accept().is_err(), "{} {variant}: host git connected to {url}", subject.label());
        let log = coordinator_log(&domain);
        assert!(log.contains("first checkout prepared on the host"), "{} {variant}: {log}", subject.label());
    }
}

#[test]
fn the_first_checkout_follows_no_url_rewriting() {
    let _guard = sandbox_guard();
    ensure_default_image();
    first_checkout_follows_no_url_rewriting(&Subject::current());
}

#[test]
fn the_first_checkout_follows_no_url_rewriting_rootless() {
    let _guard = sandbox_guard();
    let Some(subject) = Subject::rootless() else { return };
    first_checkout_follows_no_url_rewriting(&subject);
}

/// Nothing is lost when the agent's git directory is gone but its checkout
/// is not (the user deleted one of them): the host does not build a first
/// checkout over it; git inside checks out and the agent's files stay.
#[test]
fn a_checkout_without_its_git_directory_is_not_replaced() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let first = run_agent(&env, &repository, "echo draft > /workspace/notes.txt");
    assert!(first.status.success(), "{}", stderr(&first));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let domain_dir = Path::new(domain["domain_dir"].as_str().expect("dir"));
    std::fs::remove_dir_all(domain_dir.join("agent.git")).expect("remove the agent's git directory");
    let second = run_agent(&env, &repository, "cd /workspace; cat notes.txt README.md; git status --porcelain");
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stdout(&second), "draft\n# project\n?? notes.txt\n");
    assert!(coordinator_log(&domain).contains("CheckoutNotEmpty"), "{}", coordinator_log(&domain));
}

/// `core.checkStat = minimal` (the mirror's sandbox setting) must not hide
/// an edit: a file rewritten with the same size in the same second as its
/// `git add` is still seen as modified (git's racy-entry check).
#[test]
fn a_same_size_edit_in_the_second_of_its_git_add_is_seen() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script = "cd /workspace; git config --get core.checkStat; \
        for i in 1 2 3 4 5; do echo aaaa > same.txt; git add same.txt; echo bbbb > same.txt; git status --porcelain same.txt; done";
    let output = run_agent(&env, &repository, script);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "minimal\nAM same.txt\nAM same.txt\nAM same.txt\nAM same.txt\nAM same.txt\n");
}

/// A FIFO the agent leaves where git reads `HEAD` or a ref hung the seed's
/// first git until the 600 s seed limit, on every start.
#[test]
fn fifos_planted_at_head_and_refs_do_not_hang_the_next_start() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let plant = "cd /workspace/.git; rm -f HEAD refs/lazaret/host-head packed-refs; \
        mkfifo HEAD refs/lazaret/host-head packed-refs; ls -l HEAD | cut -c1";
    let first = run_agent(&env, &repository, plant);
    assert_eq!(stdout(&first), "p\n", "planted: {}", stderr(&first));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(30), || domain_is_torn_down(&domain, &repository)));
    let started = Instant::now();
    let second = run_agent(&env, &repository, "git -C /workspace rev-parse --abbrev-ref HEAD");
    assert!(second.status.success(), "the next start recovers: {}", stderr(&second));
    assert_eq!(stdout(&second), "lazaret/agent-default\n");
    assert!(started.elapsed() < Duration::from_secs(60), "and does not wait out the seed limit: {:?}", started.elapsed());
}

/// A sandbox killed in the middle of a git command leaves lock files in the
/// agent's repository; the next start must not trip over them.
#[test]
fn stale_git_lock_files_of_a_killed_sandbox_do_not_block_the_next_start() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let first = run_agent(&env, &repository, "git rev-parse --abbrev-ref HEAD");
    assert!(first.status.success(), "{}", stderr(&first));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let git_dir = Path::new(domain["domain_dir"].as_str().expect("dir")).join("agent.git");
    for lock in ["refs/lazaret/host-head.lock", "index.lock", "HEAD.lock"] {
        std::fs::create_dir_all(git_dir.join(lock).parent().expect("parent")).expect("mkdir");
        std::fs::write(git_dir.join(lock), "").expect("stale lock");
    }
    let second = run_agent(&env, &repository, "git rev-parse --abbrev-ref HEAD && git status --short | wc -l");
    assert!(second.status.success(), "the next start recovers: {}", stderr(&second));
    assert_eq!(stdout(&second), "lazaret/agent-default\n0\n");
}

/// Issue 31: once seeded, the sandbox runs one `git --no-optional-locks
/// status` in the background to fill gVisor's dentry cache. The agent's
/// git, started at once, never meets its lock (adds and a commit right after
/// the start all succeed; how many of them saw it running is printed), and
/// it ends without leaving a process or a zombie behind (the sandbox's init
/// reaps it).
#[test]
fn the_git_warm_up_after_a_start_takes_no_lock_and_leaves_no_process() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    // Enough files that the warm-up is still running when the session begins.
    for dir in 0..40 {
        let path = repository.join(format!("dir{dir:02}"));
        std::fs::create_dir_all(&path).expect("mkdir");
        for file in 0..100 {
            std::fs::write(path.join(format!("f{file:03}")), format!("{dir} {file}\n")).expect("write");
        }
    }
    git(&repository, &["add", "-A"]);
    git(&repository, &["commit", "--quiet", "-m", "4,000 files"]);
    let first = run_agent(&env, &repository, "true");
    assert!(first.status.success(), "{}", stderr(&first));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let script = "cd /workspace; seen=0; \
        for i in $(seq 20); do \
          ps -eo args | grep -q '^git -c core.fsmonitor=false --no-optional-locks status' && seen=$((seen + 1)); \
          echo $i >> agent.txt; git add agent.txt || echo ADD-FAILED; \
        done; \
        git -c user.name=a -c user.email=a@example.invalid commit -qm agent || echo COMMIT-FAILED; \
        echo seen=$seen; sleep 5; \
        echo git=$(ps -eo args | grep -c '^git '); echo zombies=$(ps -eo stat | grep -c '^Z')";
    let output = run_agent(&env, &repository, script);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(!text.contains("FAILED"), "the agent's git met a lock: {text}");
    assert!(text.contains("git=0\nzombies=0\n"), "the warm-up left a process: {text}");
    let seen: u32 = text.lines().find_map(|line| line.strip_prefix("seen=")).and_then(|n| n.parse().ok()).expect("seen");
    eprintln!("the warm-up was running during {seen} of the agent's 20 adds");
    let log = run(Command::new("git").arg("-C").arg(&repository).args(["log", "-1", "--format=%s", BRANCH]));
    assert_eq!(stdout(&log), "agent\n", "the agent's commit reached the host");
}

/// The seed reports its result through the agent-writable outbox. What the
/// agent leaves there (a directory where the status goes, a symlink where it
/// is written first, a directory for the log) neither fails nor stalls the
/// next start, and a seed failure's output is the start's error.
#[test]
fn what_the_agent_plants_in_the_outbox_does_not_block_the_next_start() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let outbox = "/run/lazaret/outbox";
    let plant = format!(
        "mkdir -p {outbox}/.lazaret-seed-status/x {outbox}/.lazaret-seed.log; \
         ln -sfn {outbox}/agent.bundle {outbox}/.lazaret-seed-status.tmp; ls -A {outbox}"
    );
    let first = run_agent(&env, &repository, &plant);
    assert!(stdout(&first).contains(".lazaret-seed-status.tmp"), "planted: {}{}", stdout(&first), stderr(&first));
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    let started = std::time::Instant::now();
    let second = run_agent(&env, &repository, "git rev-parse --abbrev-ref HEAD");
    assert!(second.status.success(), "the next start recovers: {}", stderr(&second));
    assert_eq!(stdout(&second), "lazaret/agent-default\n");
    assert!(started.elapsed() < Duration::from_secs(60), "and does not wait out the seed limit: {:?}", started.elapsed());
}

/// Attack review finding 3: a file named `ESC[1A ESC[2K`… erased the D4
/// warning block from `lazaret diff`, and an OSC title sequence in a patch
/// reached the terminal raw. Every agent-controlled string is neutralized,
/// while the sandbox runs (the coordinator's view, with uncommitted files)
/// and after.
#[test]
fn escape_sequences_in_agent_file_names_and_patches_never_reach_the_terminal() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script = "cd /workspace; erase=$(printf 'x\\033[1A\\033[2K\\033[1A\\033[2K\\033[1A\\033[2Ky'); \
                  printf 'ok\\n' > \"$erase\"; printf '\\033]0;pwned\\007title\\n' > osc.txt; echo 'export A=1' > .envrc; \
                  git add -A; git commit -qm 'escapes'; printf 'u\\n' > \"$(printf 'u\\033[2Jv')\"; \
                  touch /tmp/ready; sleep 20";
    let mut session = env
        .lazaret()
        .args(["run", "--workspace"])
        .arg(&repository)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let container = domain_json(&env, "default", &repository)["container_name"].as_str().expect("name").to_owned();
    let ready = wait_until(Duration::from_secs(30), || {
        Command::new("podman").args(["exec", &container, "test", "-e", "/tmp/ready"]).output().is_ok_and(|o| o.status.success())
            && git(&repository, &["for-each-ref", "--format=%(refname)", &format!("refs/heads/{BRANCH}")]).contains(BRANCH)
    });
    assert!(ready, "the agent committed and the branch reached the host");
    let check = |when: &str| {
        let output = run(env.lazaret().args(["diff", "--workspace"]).arg(&repository));
        assert!(output.status.success(), "{when}: {}", stderr(&output));
        let bytes = &output.stdout;
        assert!(
            !bytes.contains(&0x1b) && !bytes.contains(&0x07) && !bytes.contains(&b'\r'),
            "{when}: raw control bytes: {:?}",
            stdout(&output)
        );
        let text = stdout(&output);
        assert!(text.contains("WARNING: the agent changed files that make hosts run code"), "{when}: {text}");
        assert!(text.contains(".envrc"), "{when}: {text}");
        assert!(text.contains("x\\e[1A\\e[2K"), "{when}: the name is shown, escaped: {text}");
        assert!(text.contains("\\e]0;pwned\\x07title"), "{when}: the patch line is shown, escaped: {text}");
        text
    };
    let live = check("while the sandbox runs");
    assert!(live.contains("u\\e[2Jv"), "the uncommitted file is listed, escaped: {live}");
    let _ = session.kill();
    let _ = session.wait();
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(10), || domain_is_torn_down(&domain, &repository)));
    check("after the session");
}

/// Issue 26 finding 3 (DECISIONS D16): both editors ran `git merge <branch
/// name>` after their confirmation, so a commit the agent made while it was
/// up (an `.envrc`) was merged unseen. A review now names its commits
/// (`branch/diff` with `head`, `branch/fileContents` with `baseCommit` and
/// `headCommit`), and `lazaret merge --expect` merges the reviewed commit or
/// nothing.
#[test]
fn a_merge_takes_the_reviewed_commit_and_refuses_a_branch_that_moved() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script = "cd /workspace; echo reviewed > notes.txt; git add notes.txt; git commit -qm reviewed; echo COMMITTED; sleep 60";
    let (mut child, mut lines) = spawn_agent_lines(&env, &repository, script);
    assert_eq!(lines.next().map(|l| l.expect("line")).as_deref(), Some("COMMITTED"));
    let branch_head = || {
        let output = Command::new("git").arg("-C").arg(&repository).args(["rev-parse", "--verify", "--quiet", BRANCH]).output();
        output.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    assert!(wait_until(Duration::from_secs(10), || branch_head().is_some()), "the agent branch reached the host");
    let reviewed = branch_head().expect("head");
    let host_head = git(&repository, &["rev-parse", "HEAD"]).trim().to_owned();
    let domain = domain_json(&env, "default", &repository);
    let mut rpc = Rpc::connect(Path::new(domain["control_socket"].as_str().expect("socket")));
    let shown = rpc.result("branch/diff", serde_json::json!({"patch": false}));
    assert_eq!(shown["head"], reviewed.as_str());

    // The agent commits again while the human reads the review.
    let container = domain["container_name"].as_str().expect("name");
    let sneak = Command::new("podman")
        .args([
            "exec",
            container,
            "sh",
            "-c",
            "cd /workspace && echo 'export SNEAKED=1' > .envrc && git add .envrc && git commit -qm sneak",
        ])
        .output()
        .expect("podman exec");
    assert!(sneak.status.success(), "{}", stderr(&sneak));
    assert!(wait_until(Duration::from_secs(10), || branch_head().is_some_and(|head| head != reviewed)), "the branch moved on the host");
    let moved = branch_head().expect("head");

    // The review, pinned, still shows what it showed.
    let pinned = rpc.result("branch/diff", serde_json::json!({"patch": false, "head": reviewed}));
    assert_eq!(pinned["head"], reviewed.as_str());
    assert_eq!(pinned["files"].as_array().map(Vec::len), Some(1), "{pinned}");
    assert_eq!(pinned["warnings"], serde_json::json!([]), "{pinned}");
    let mut contents = |head: Option<&str>| {
        let mut params = serde_json::json!({"path": ".envrc"});
        if let Some(head) = head {
            params["baseCommit"] = shown["base"].clone();
            params["headCommit"] = head.into();
        }
        rpc.result("branch/fileContents", params)
    };
    let at_review = contents(Some(&reviewed));
    assert_eq!((at_review["headCommit"].as_str(), at_review["head"]["exists"].as_bool()), (Some(reviewed.as_str()), Some(false)));
    let now = contents(None);
    assert_eq!((now["headCommit"].as_str(), now["head"]["exists"].as_bool()), (Some(moved.as_str()), Some(true)));
    let bad = rpc.call("branch/fileContents", serde_json::json!({"path": "notes.txt", "headCommit": &reviewed[..12]}));
    assert_eq!(bad["error"]["code"], 1004, "a short id is refused: {bad}");
    assert!(bad["error"]["message"].as_str().unwrap_or("").contains(&reviewed[..12]), "the message names the value: {bad}");

    // The merge of what was reviewed is refused now, and merges nothing.
    let refused = run(env.lazaret().args(["merge", "--yes", "--expect", &reviewed, "--workspace"]).arg(&repository));
    assert_eq!(refused.status.code(), Some(3), "{}{}", stdout(&refused), stderr(&refused));
    assert!(stderr(&refused).contains("moved since the review"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("1 commit(s) you have not reviewed"), "{}", stderr(&refused));
    let short = run(env.lazaret().args(["merge", "--yes", "--expect", &moved[..12], "--workspace"]).arg(&repository));
    assert_eq!(short.status.code(), Some(1), "{}", stderr(&short));
    assert!(stderr(&short).contains("not a full commit id"), "{}", stderr(&short));
    let unconfirmed = run(env.lazaret().args(["merge", "--expect", &moved, "--workspace"]).arg(&repository).stdin(Stdio::null()));
    assert_eq!(unconfirmed.status.code(), Some(1), "{}", stderr(&unconfirmed));
    assert!(stderr(&unconfirmed).contains("without confirmation"), "{}", stderr(&unconfirmed));
    assert_eq!(git(&repository, &["rev-parse", "HEAD"]).trim(), host_head, "nothing was merged");
    assert!(!repository.join(".envrc").exists() && !repository.join("notes.txt").exists());

    // Reviewed again: the merge names the file that makes hosts run code
    // and takes exactly that commit.
    let merged = run(env.lazaret().args(["merge", "--yes", "--expect", &moved, "--workspace"]).arg(&repository));
    assert!(merged.status.success(), "{}{}", stdout(&merged), stderr(&merged));
    let text = stdout(&merged);
    assert!(text.contains("WARNING: 1 file(s) that make hosts run code") && text.contains("! .envrc"), "{text}");
    assert_eq!(git(&repository, &["rev-parse", "HEAD"]).trim(), moved);
    assert_eq!(std::fs::read_to_string(repository.join("notes.txt")).expect("merged"), "reviewed\n");
    let again = run(env.lazaret().args(["merge", "--yes", "--workspace"]).arg(&repository));
    assert!(again.status.success() && stdout(&again).contains("nothing to merge"), "{}", stdout(&again));
    let _ = child.kill();
    let _ = child.wait();
}

/// Attack review finding 8: the export and the uncommitted diff ran the
/// sandbox's `git` through `podman exec` without a time limit, and the end of
/// a session waits for the export: a `git` that hangs held the session (and
/// teardown) forever. Both are bounded; the domain ends and stays usable.
#[test]
fn a_git_that_hangs_inside_the_sandbox_cannot_hold_the_session_or_teardown() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script = "cd /workspace; mkdir -p /usr/local/bin; printf '#!/bin/sh\\nsleep 3600\\n' > /usr/local/bin/git; \
                  chmod +x /usr/local/bin/git; echo a > a; /usr/bin/git add a; /usr/bin/git commit -qm a; sleep 1";
    let started = Instant::now();
    let output = run_agent(&env, &repository, script);
    let took = started.elapsed();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(took < Duration::from_secs(45), "the session ended although git hangs inside ({took:?})");
    let domain = domain_json(&env, "default", &repository);
    assert!(wait_until(Duration::from_secs(30), || domain_is_torn_down(&domain, &repository)), "teardown finished");
    // The domain stays usable: the next session starts (a fresh container,
    // without the agent's wrapper) and its commit reaches the host.
    let next = run_agent(&env, &repository, "cd /workspace; echo b > b; git add b; git commit -qm b; git log --oneline | wc -l");
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(git(&repository, &["log", "--format=%s", BRANCH]).contains('b'), "the next commit is exported");
}

/// Peak resident memory of a process (`VmHWM`), in KiB.
/// The larger of the process's peak and current resident size, in KiB.
/// Linux updates the peak (`VmHWM`) lazily, so it can read lower than an
/// earlier look at it: callers keep the largest value they saw.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"));
        line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("KiB")
    };
    field("VmHWM:").max(field("VmRSS:"))
}

/// Attack review finding 6: the agent's bundle (up to its size cap) was read
/// whole into the coordinator's memory, copied, and the checked pack held
/// there too. Now it streams between files and git: a 96 MiB commit of
/// incompressible data moves the coordinator's peak memory by a few MiB.
#[test]
fn a_large_export_streams_through_the_coordinator_without_holding_it_in_memory() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    let script = "cd /workspace; head -c 96M /dev/urandom > big.bin; echo READY; sleep 2; \
                  git add big.bin; git -c core.compression=0 commit -qm big; echo COMMITTED; sleep 120";
    let (mut child, mut lines) = spawn_agent_lines(&env, &repository, script);
    assert_eq!(lines.next().map(|l| l.expect("line")).as_deref(), Some("READY"));
    let coordinator = coordinator_pids(&repository)[0];
    let before = peak_rss_kib(coordinator);
    assert_eq!(lines.next().map(|l| l.expect("line")).as_deref(), Some("COMMITTED"));
    let branch_ref = format!("refs/heads/{BRANCH}");
    // Looked at every turn of the wait as well as at its end, so a peak the
    // kernel has not yet folded into VmHWM is still seen.
    let mut after = before;
    let arrived = wait_until(Duration::from_secs(90), || {
        after = after.max(peak_rss_kib(coordinator));
        Command::new("git")
            .arg("-C")
            .arg(&repository)
            .args(["rev-parse", "--verify", "--quiet", &branch_ref])
            .status()
            .is_ok_and(|s| s.success())
    });
    let after = after.max(peak_rss_kib(coordinator));
    let _ = child.kill();
    let _ = child.wait();
    assert!(arrived, "the large commit reaches the host");
    assert_eq!(git(&repository, &["log", "-1", "--format=%s", BRANCH]).trim(), "big");
    let size = git(&repository, &["cat-file", "-s", &format!("{BRANCH}:big.bin")]);
    assert_eq!(size.trim(), (96u64 << 20).to_string());
    eprintln!("coordinator peak RSS {before} KiB before the export, {after} KiB after");
    let grown = after.saturating_sub(before);
    assert!(grown < 32 << 10, "the coordinator's peak memory grew by {grown} KiB importing 96 MiB");
}

/// Attack review finding 6: accepted exports piled packs into the host's
/// `.git` (host git runs with `gc.auto=0`). After each accepted import the
/// coordinator runs `git gc --auto`, as git's own fetch does, under the
/// user's thresholds: with `gc.autoPackLimit=3`, seven exports leave at most
/// three packs, and the branch and the user's refs are intact.
#[test]
fn accepted_exports_do_not_pile_up_packs_in_the_host_repository() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    git(&repository, &["config", "gc.autoPackLimit", "3"]);
    let packs = || {
        std::fs::read_dir(repository.join(".git/objects/pack"))
            .map(|entries| entries.flatten().filter(|entry| entry.path().extension().is_some_and(|ext| ext == "pack")).count())
            .unwrap_or(0)
    };
    let script = "cd /workspace; for n in 1 2 3 4 5 6 7; do echo $n > file$n; git add file$n; git commit -qm c$n; sleep 1.5; done";
    let output = run_agent(&env, &repository, script);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(git(&repository, &["log", "-1", "--format=%s", BRANCH]).trim(), "c7");
    assert_eq!(git(&repository, &["rev-list", "--count", BRANCH]).trim(), "8");
    assert_eq!(git(&repository, &["log", "-1", "--format=%s", "main"]).trim(), "initial");
    assert!(wait_until(Duration::from_secs(20), || packs() <= 3), "{} packs in the host repository", packs());
    let fsck = Command::new("git").arg("-C").arg(&repository).args(["fsck", "--strict", "--no-dangling"]).output().expect("fsck");
    assert!(fsck.status.success(), "{}", stderr(&fsck));
}

/// Issue 16: exports run through one long-lived exporter shell inside the
/// sandbox. The agent can kill it: that only delays the next export (a fresh
/// `podman exec` runs it, and a new exporter is started); every commit still
/// reaches the host while the session runs.
#[test]
fn killing_the_exporter_inside_the_sandbox_only_delays_the_next_export() {
    let _guard = sandbox_guard();
    ensure_default_image();
    let env = TestEnv::new();
    let repository = git_repository(&env, "project");
    // Exact argv element `lazaret-exporter`: the exporter's `$0`, not this script.
    let kill = "n=0; for p in /proc/[0-9]*; do if tr '\\0' '\\n' < $p/cmdline 2>/dev/null | grep -qx lazaret-exporter; \
                then kill -9 ${p#/proc/} && n=$((n+1)); fi; done; echo KILLED $n";
    let script = format!(
        "cd /workspace; for i in 1 2 3; do echo $i > k$i; git add k$i; git commit -qm k$i; echo C$i; sleep 4; {kill}; done; sleep 1"
    );
    let (mut child, mut lines) = spawn_agent_lines(&env, &repository, &script);
    let mut killed = Vec::new();
    for i in 1..=3 {
        assert_eq!(lines.next().map(|l| l.expect("line")), Some(format!("C{i}")));
        let committed = Instant::now();
        let arrived = wait_until(Duration::from_secs(3), || {
            Command::new("git")
                .arg("-C")
                .arg(&repository)
                .args(["log", "-1", "--format=%s", BRANCH])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == format!("k{i}"))
        });
        assert!(arrived, "commit k{i} reaches the host while the session runs");
        eprintln!("k{i}: commit to host ref {:?}", committed.elapsed());
        let line = lines.next().map(|l| l.expect("line")).unwrap_or_default();
        killed.push(line.strip_prefix("KILLED ").and_then(|n| n.parse::<u32>().ok()).expect("KILLED n"));
    }
    let _ = child.wait();
    assert!(killed.iter().all(|&n| n >= 1), "an exporter ran (and was killed) after each export: {killed:?}");
    assert_eq!(git(&repository, &["rev-list", "--count", BRANCH]).trim(), "4");
}
