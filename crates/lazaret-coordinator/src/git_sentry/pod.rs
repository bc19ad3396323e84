//! The agent branch when the sandbox is a pod (the Kubernetes backend, issue
//! 32). No directory is shared with a pod, so the bundles that cross
//! through the transfer directory and the outbox locally cross over
//! `pods/exec` instead, and everything else is as locally:
//!
//! - In ([`seed`]): the host writes the seed bundle exactly as for a local
//!   start ([`GitLayout::write_seed_bundle`]); one exec takes it as its
//!   stdin into the pod's transfer directory, writes the [`SeedTips`] beside
//!   it, and runs the same seed script ([`GitLayout::seed_script`]).
//! - Out ([`export`]): one exec runs the same export function
//!   ([`GitLayout::export_function`]) and prints the bundle; the host
//!   streams it into its private import directory, capped at
//!   [`MAX_BUNDLE_BYTES`], and imports it through the same quarantine (D13)
//!   as a local export.
//!
//! Invariants: the cluster is as untrusted as the sandbox. What comes back
//! over exec is bundle bytes, an exit code and stderr, and the host uses
//! nothing else: the bundle is checked whole by the quarantine, stderr only
//! ever appears escaped ([`lazaret_core::terminal_text::block`]), and every
//! exec is bounded in time ([`lazaret_core::bounds`]) and in bytes. The host
//! runs git only in its own repository.

use lazaret_kube::cluster::Cluster;

use super::sync::{import_taken_bundle, Export};
use super::{GitLayout, SeedTips, MAX_BUNDLE_BYTES, OUTBOX_IN_CONTAINER, SEED_TIPS, TRANSFER_IN_CONTAINER};
use crate::bail;
use crate::error::{Context, Result};

/// The exit status of the export exec when there is nothing to import (no
/// agent branch inside).
const NO_BRANCH: i32 = 3;
/// The exit status of the export exec when the branch is still at the
/// host's tip.
const UNCHANGED: i32 = 4;

/// Seeds the agent's repository in `pod` from the host: the seed bundle in
/// over exec stdin, then the seed script. Returns the commits it seeded
/// from.
pub async fn seed(cluster: &Cluster, pod: &str, layout: &GitLayout) -> Result<SeedTips> {
    let host = layout.clone();
    let tips = tokio::task::spawn_blocking(move || -> Result<SeedTips> {
        for dir in [&host.transfer, &host.import] {
            crate::private_dirs::ensure_private_dir(dir)?;
        }
        host.write_seed_bundle()
    })
    .await
    .context("seed task failed")??;
    let bundle = layout.seed_bundle();
    let input = tokio::fs::File::open(&bundle).await.with_context(|| format!("cannot open {}", bundle.display()))?;
    let script = format!(
        "set -e\n\
         cat > {TRANSFER_IN_CONTAINER}/seed.bundle.tmp\n\
         mv -f {TRANSFER_IN_CONTAINER}/seed.bundle.tmp {TRANSFER_IN_CONTAINER}/seed.bundle\n\
         printf '%s\\n%s\\n' \"$1\" \"$2\" > {TRANSFER_IN_CONTAINER}/{SEED_TIPS}\n\
         if [ ! -e /workspace/.git ]; then git init --quiet /workspace; fi\n\
         {}",
        layout.seed_script()
    );
    let head = hex(&tips.head)?;
    let branch = tips.branch.as_deref().map(hex).transpose()?.unwrap_or_default();
    let command = ["sh", "-c", script.as_str(), "lazaret-seed", head, branch];
    let mut output = Vec::new();
    let run = cluster.exec_streaming(pod, &command, input, &mut output, 64 << 10);
    let status = tokio::time::timeout(lazaret_core::bounds::SEED, run)
        .await
        .map_err(|_| crate::Error::TimedOut { what: format!("seeding the agent branch in Pod {pod}"), bound: lazaret_core::bounds::SEED })?
        .map_err(crate::Error::from)?;
    if status.code != Some(0) {
        bail!(
            "seeding the agent branch in Pod {pod} failed ({}): {}",
            exit_text(status.code),
            lazaret_core::terminal_text::block(String::from_utf8_lossy(&status.stderr).trim())
        );
    }
    Ok(tips)
}

/// Exports the agent branch from `pod` once: a bundle made inside, streamed
/// out into the host's import directory and imported through the
/// quarantine.
pub async fn export(cluster: &Cluster, pod: &str, layout: &GitLayout) -> Result<Export> {
    let resolving = layout.clone();
    let host_has = tokio::task::spawn_blocking(move || resolving.host.resolve_all(&[&resolving.branch_ref(), "HEAD"]))
        .await
        .context("resolve task failed")??;
    let previous = host_has.first().cloned().flatten();
    let mut commits: Vec<String> = Vec::new();
    for commit in host_has.into_iter().flatten() {
        if !commits.contains(&commit) {
            commits.push(hex(&commit)?.to_owned());
        }
    }
    // No branch inside is not a failure (nothing to import); a branch that
    // cannot be bundled (a full outbox, a broken repository) is. A branch
    // still at the host's tip ($1) is left alone: no bundle is made (git
    // would refuse an empty one, and the fallback bundles the whole
    // history), which makes the poll and each session's end one short exec.
    let script = format!(
        "{}tip=$(git -C /workspace rev-parse --verify --quiet {}) || exit {NO_BRANCH}\n\
         previous=$1; shift\n\
         [ -n \"$previous\" ] && [ \"$tip\" = \"$previous\" ] && exit {UNCHANGED}\n\
         lazaret_export \"$@\" </dev/null >/dev/null || exit 1\n\
         exec cat {OUTBOX_IN_CONTAINER}/agent.bundle\n",
        layout.export_function(),
        layout.branch_ref()
    );
    let previous_word = previous.as_deref().map(hex).transpose()?.unwrap_or_default();
    let mut command = vec!["sh", "-c", script.as_str(), "lazaret-export", previous_word];
    command.extend(commits.iter().map(String::as_str));
    crate::private_dirs::ensure_private_dir(&layout.import)?;
    let target = layout.import.join("agent.bundle");
    let file = tokio::fs::File::create(&target).await.with_context(|| format!("cannot create {}", target.display()))?;
    let mut writer = tokio::io::BufWriter::new(file);
    let run = cluster.exec_streaming(pod, &command, tokio::io::empty(), &mut writer, MAX_BUNDLE_BYTES);
    // As a local export: the agent controls how long it runs.
    let status = match tokio::time::timeout(lazaret_core::bounds::EXPORT, run).await {
        Ok(Ok(status)) => status,
        failed => {
            drop(writer);
            crate::cleanup::remove_file(&target);
            return match failed {
                Ok(Err(error)) => Err(crate::Error::from(error)).context("the agent's bundle was not imported"),
                _ => Err(crate::Error::TimedOut {
                    what: format!("exporting the agent branch from Pod {pod}"),
                    bound: lazaret_core::bounds::EXPORT,
                }),
            };
        }
    };
    drop(writer);
    match status.code {
        Some(0) => {}
        Some(NO_BRANCH) => {
            crate::cleanup::remove_file(&target);
            return Ok(Export::NoBranch);
        }
        Some(UNCHANGED) => {
            crate::cleanup::remove_file(&target);
            return Ok(Export::Unchanged);
        }
        code => {
            crate::cleanup::remove_file(&target);
            bail!(
                "exporting the agent branch from Pod {pod} failed ({}): {}",
                exit_text(code),
                lazaret_core::terminal_text::block(String::from_utf8_lossy(&status.stderr).trim())
            );
        }
    }
    let layout = layout.clone();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&target).with_context(|| format!("cannot open {}", target.display()))?;
        if !super::starts_as_bundle(&file) {
            crate::cleanup::remove_file(&target);
            bail!("what the pod sent as the agent's bundle is not a git bundle; nothing was imported");
        }
        import_taken_bundle(&layout, &target, previous)
    })
    .await
    .context("import task failed")?
}

/// A commit id from the host's git, checked anyway: it becomes a word of a
/// command in the pod.
fn hex(commit: &str) -> Result<&str> {
    if commit.is_empty() || !commit.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        bail!("`{commit}` is not a commit id");
    }
    Ok(commit)
}

fn exit_text(code: Option<i32>) -> String {
    code.map_or_else(|| "no exit status".to_owned(), |code| format!("exit status {code}"))
}
