//! The coordinator's side of a domain whose sandbox is a pod on the real
//! test cluster (issue 32): the agent branch (`git_sentry::pod`: real git
//! on a real host repository, the bundles over real `pods/exec` into a pod
//! under gVisor, and the host's quarantine, D13, refusing crafted commits
//! as it does locally), and Host Escalation through the in-pod relay
//! (`escalation::relay`: the real static `lazaret-escalate` in the pod,
//! mTLS and signed requests end to end to the real Escalation Socket
//! server, forged requests refused). Started by
//! `tests/run cluster` (feature `cluster-tests`; environment as in
//! `lazaret_test_support::cluster`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lazaret_coordinator::escalation::trust_anchor::TrustAnchor;
use lazaret_coordinator::escalation::Answer;
use lazaret_coordinator::git_sentry::pod;
use lazaret_coordinator::git_sentry::sync::Export;
use lazaret_coordinator::git_sentry::{agent_branch, GitLayout, HostRepository};
use lazaret_protocol::{AuditEvent, DecisionSource, Outcome};
use lazaret_test_support::cluster::{Scratch, GONE};
use lazaret_test_support::git;
use support::Relay;

#[path = "support/relay.rs"]
mod support;

const BRANCH: &str = "refs/heads/lazaret/agent-default";

/// A user's repository with one commit, and the git layout of a domain of
/// profile `default` on it (its Domain Root under `root`).
fn host_repository(root: &Path) -> GitLayout {
    let repository = root.join("project");
    std::fs::create_dir_all(repository.join("src")).expect("mkdir");
    git(&repository, &["init", "--quiet", "--initial-branch=main"]);
    git(&repository, &["config", "user.name", "Host User"]);
    git(&repository, &["config", "user.email", "host@example.invalid"]);
    std::fs::write(repository.join("README.md"), "# project\n").expect("write");
    std::fs::write(repository.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n").expect("write");
    git(&repository, &["add", "-A"]);
    git(&repository, &["commit", "--quiet", "-m", "initial"]);
    let host = HostRepository::discover(&repository).expect("discover").expect("a repository");
    let domain = root.join("domain");
    std::fs::create_dir(&domain).expect("mkdir");
    GitLayout {
        host,
        branch: agent_branch("default"),
        checkout: domain.join("checkout"),
        agent_git_dir: domain.join("agent.git"),
        config_mirror: domain.join("git-config"),
        transfer: domain.join("transfer"),
        outbox: domain.join("outbox"),
        import: domain.join("import"),
    }
}

fn present(repository: &Path, object: &str) -> bool {
    Command::new("git").arg("-C").arg(repository).args(["cat-file", "-e", object]).status().expect("git").success()
}

/// What a refused import may not leave in the host's `objects/`.
fn leftovers(repository: &Path) -> Vec<String> {
    let objects = repository.join(".git/objects");
    std::fs::read_dir(&objects)
        .expect("objects")
        .chain(std::fs::read_dir(objects.join("pack")).expect("pack"))
        .filter_map(|entry| entry.ok().map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .filter(|name| name.starts_with("lazaret-incoming-") || name.starts_with("tmp_"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_commit_reaches_the_host_through_the_quarantine_and_crafted_commits_are_refused() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&[]);
    let pod_name = scratch.running(&plan).await;
    let root = tempfile::tempdir().expect("tempdir");
    let layout = host_repository(root.path());
    let repository = layout.host.workdir.clone();
    let head = git(&repository, &["rev-parse", "HEAD"]).trim().to_owned();

    // In: the pod's repository is seeded from the host's HEAD, on the agent branch.
    let tips = pod::seed(&scratch.cluster, &pod_name, &layout).await.expect("seed");
    assert_eq!(tips.head, head);
    let seeded = scratch.shell(&pod_name, "cd /workspace && git symbolic-ref HEAD && git rev-parse HEAD && cat src/lib.rs", b"").await;
    assert_eq!(seeded, format!("{BRANCH}\n{head}\npub fn answer() -> u32 {{ 42 }}\n"));

    // Out: the agent's commit reaches the host's agent branch.
    let commit = scratch
        .shell(
            &pod_name,
            "cd /workspace && echo 'fn agent() {}' > src/agent.rs && git add src/agent.rs && \
             git -c user.name=Agent -c user.email=agent@example.invalid commit -qm 'agent work' && git rev-parse HEAD",
            b"",
        )
        .await
        .trim()
        .to_owned();
    let exported = pod::export(&scratch.cluster, &pod_name, &layout).await.expect("export");
    assert_eq!(exported, Export::Updated { previous: None, commit: commit.clone() });
    assert_eq!(git(&repository, &["rev-parse", BRANCH]).trim(), commit);
    assert_eq!(git(&repository, &["show", &format!("{BRANCH}:src/agent.rs")]), "fn agent() {}\n");
    assert_eq!(git(&repository, &["rev-parse", "HEAD"]).trim(), head, "the user's HEAD does not move");
    git(&repository, &["fsck", "--strict", "--no-progress"]);
    // Nothing new: the branch stays.
    assert_eq!(pod::export(&scratch.cluster, &pod_name, &layout).await.expect("export"), Export::Unchanged);

    // A tree with a .git entry, crafted with plumbing: refused, as locally.
    let crafted = scratch
        .shell(
            &pod_name,
            "cd /workspace; blob=$(echo '[core] fsmonitor=x' | git hash-object -w --stdin); \
             inner=$(printf '100644 blob %s\\tconfig\\n' $blob | git mktree); \
             tree=$(printf '040000 tree %s\\t.git\\n' $inner | git mktree); \
             commit=$(echo crafted | git commit-tree $tree -p HEAD); git update-ref refs/heads/lazaret/agent-default $commit; echo $commit",
            b"",
        )
        .await
        .trim()
        .to_owned();
    assert_eq!(crafted.len(), 40, "{crafted}");
    let refused = pod::export(&scratch.cluster, &pod_name, &layout).await.expect_err("a .git tree entry is refused");
    assert!(refused.chained().contains("refused") || refused.chained().contains("fsck"), "{}", refused.chained());
    assert_eq!(git(&repository, &["rev-parse", BRANCH]).trim(), commit, "the host branch stays where it was");
    assert!(!present(&repository, &crafted), "the refused commit's objects stay out of the host repository");
    assert_eq!(leftovers(&repository), Vec::<String>::new(), "no quarantine or temporary pack is left");

    // A .gitmodules whose update runs a command is refused the same way.
    let update = scratch
        .shell(
            &pod_name,
            &format!(
                "cd /workspace; git update-ref {BRANCH} {commit}; git reset -q --hard; \
                 printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n\\tupdate = !touch /tmp/lzt-fired\\n' > .gitmodules; \
                 git add .gitmodules; git -c user.name=Agent -c user.email=agent@example.invalid commit -qm 'update command'; git rev-parse HEAD"
            ),
            b"",
        )
        .await
        .trim()
        .to_owned();
    pod::export(&scratch.cluster, &pod_name, &layout).await.expect_err("a .gitmodules update command is refused");
    assert_eq!(git(&repository, &["rev-parse", BRANCH]).trim(), commit);
    assert!(!present(&repository, &update));
    assert_eq!(leftovers(&repository), Vec::<String>::new());

    // What the pod prints instead of a bundle is refused before git reads it.
    scratch.shell(&pod_name, "cd /workspace && git update-ref -d refs/heads/lazaret/agent-default", b"").await;
    assert_eq!(pod::export(&scratch.cluster, &pod_name, &layout).await.expect("export"), Export::NoBranch);
    assert_eq!(git(&repository, &["rev-parse", BRANCH]).trim(), commit, "a deleted branch inside deletes nothing on the host");

    // A restart seeds the agent's repository from the host's agent branch.
    scratch.shell(&pod_name, "rm -rf /workspace/.git /workspace/* /workspace/.gitmodules", b"").await;
    let tips = pod::seed(&scratch.cluster, &pod_name, &layout).await.expect("seed again");
    assert_eq!(tips.branch.as_deref(), Some(commit.as_str()));
    let reseeded = scratch.shell(&pod_name, "cd /workspace && git rev-parse HEAD && cat src/agent.rs", b"").await;
    assert_eq!(reseeded, format!("{commit}\nfn agent() {{}}\n"));

    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    assert_eq!(scratch.cluster.domain_objects(&plan.domain_hash).await.expect("list"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_from_the_pod_crosses_the_relay_end_to_end_and_forged_ones_are_refused() {
    let scratch = Scratch::new().await;
    let plan = scratch.plan(&[]);
    let pod_name = scratch.running(&plan).await;
    let root = tempfile::tempdir().expect("tempdir");
    let marker = |name: &str| root.path().join(name).display().to_string();
    let (approved, human, forged_key, forged_certificate) =
        (marker("approved"), marker("human"), marker("forged-key"), marker("forged-cert"));
    let rules =
        ["echo relayed".to_owned(), format!("touch {approved}"), format!("touch {forged_key}"), format!("touch {forged_certificate}")];
    let relay = Relay::start(&scratch.cluster, &pod_name, &plan.domain_hash, root.path(), &rules).await;
    let escalate = |credential: String, argv: Vec<String>| {
        let (cluster, pod_name, session_id) = (&scratch.cluster, &pod_name, &relay.session_id);
        async move {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            support::escalate(cluster, pod_name, session_id, &credential, &argv).await
        }
    };
    let words = |argv: &[&str]| argv.iter().map(|word| word.to_string()).collect::<Vec<_>>();

    // Auto-approved: runs on the host, its output comes back through the relay.
    let good = relay.credential();
    let output = escalate(good.clone(), words(&["echo", "relayed"])).await;
    assert_eq!((output.code, output.stdout.as_slice()), (Some(0), &b"relayed\n"[..]), "{}", String::from_utf8_lossy(&output.stderr));
    let output = escalate(good.clone(), words(&["touch", &approved])).await;
    assert_eq!(output.code, Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(Path::new(&approved).exists(), "the approved command ran on the host");

    // A human's answer: the request waits in the queue, the approval runs it.
    let answering = async {
        for _ in 0..300 {
            if let Some(pending) = relay.domain.broker.pending().into_iter().next() {
                assert_eq!(pending.argv, vec!["touch".to_owned(), human.clone()]);
                let decided_by = DecisionSource::Rpc { client: Some("test".into()) };
                assert!(relay.domain.broker.answer(&pending.request_id, Answer::Approve { decided_by }));
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the relayed request never reached the queue");
    };
    let (output, ()) = tokio::join!(escalate(good.clone(), words(&["touch", &human])), answering);
    assert_eq!(output.code, Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(Path::new(&human).exists(), "the human-approved command ran on the host");

    // Forged: a credential the session never delegated.
    let stranger = ed25519_dalek::SigningKey::from_bytes(&support::random_bytes());
    let output = escalate(support::credential(&stranger, &relay.session_id), words(&["touch", &forged_key])).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.code, Some(99), "refused: {stderr}");
    assert!(stderr.contains("the delegation is not signed by the session's key"), "refused by the coordinator's check: {stderr}");
    assert!(!Path::new(&forged_key).exists(), "a forged delegation runs nothing on the host");
    // Forged: a client certificate from another CA with the same identity
    // (the client trusts the real coordinator: the coordinator refuses it).
    let other = TrustAnchor::generate().expect("another trust anchor");
    let forged_bundle = support::bundle(&other, &relay.anchor, &relay.identity, &root.path().join("other-tls"));
    scratch.shell(&pod_name, support::INSTALL_BUNDLE, &forged_bundle).await;
    let output = escalate(good.clone(), words(&["touch", &forged_certificate])).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.code, Some(99), "refused: {stderr}");
    assert!(!stderr.contains("cannot connect"), "the relay was up; the handshake refused it: {stderr}");
    assert!(!Path::new(&forged_certificate).exists(), "a certificate of another CA runs nothing on the host");
    // The refusals were the coordinator's: the relay still carries a good request.
    scratch.shell(&pod_name, support::INSTALL_BUNDLE, &relay.good_bundle).await;
    let output = escalate(good.clone(), words(&["echo", "relayed"])).await;
    assert_eq!((output.code, output.stdout.as_slice()), (Some(0), &b"relayed\n"[..]), "{}", String::from_utf8_lossy(&output.stderr));
    let records = relay.domain.records.lock().expect("records").clone();
    assert!(records.iter().any(|record| record.outcome == Outcome::Rejected), "the forged delegation is audited as rejected: {records:?}");
    let ran_nothing_forged = |record: &lazaret_protocol::AuditRecord| match &record.event {
        AuditEvent::Escalation(escalation) => escalation.executed_argv.as_ref().is_none_or(|argv| !argv.contains(&forged_key)),
        AuditEvent::ConnectionRefused { .. } => true,
        other => panic!("only the Escalation Socket's records come through the relay: {other:?}"),
    };
    assert!(records.iter().all(ran_nothing_forged), "{records:?}");

    // The exec ends: the host side ends cleanly, and in the pod the relay
    // loses its stdin, removes the socket and exits.
    relay.stop().await;
    let mut gone = false;
    for _ in 0..300 {
        let check = scratch
            .cluster
            .exec(&pod_name, &["sh", "-c", "test ! -e /run/lazaret/escalate.sock && ! grep -qs -e '-[-]relay' /proc/[0-9]*/cmdline"], b"")
            .await;
        if check.expect("exec").code == Some(0) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the relay in the pod is gone with its exec");
    scratch.cluster.delete_domain(&plan.domain_hash, GONE).await.expect("teardown");
    assert_eq!(scratch.cluster.domain_objects(&plan.domain_hash).await.expect("list"), Vec::<String>::new());
}
