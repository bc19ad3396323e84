//! The two loops that keep the agent's repository and the host in step
//! while a domain runs: the config mirror (host `.git/config`, redacted,
//! rewritten in place within a fraction of a second) and the branch export
//! (each change of the agent branch becomes the host ref within a second).

use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::exporter::{Exporter, Outcome};
use super::GitLayout;
use crate::error::{Context, Result};

const MIRROR_POLL: Duration = Duration::from_millis(150);
/// Ref files of the agent read by the host: at most this many bytes.
const MAX_REF_FILE: u64 = 4 << 20;

/// Writes the agent's view of the host config (redacted, plus the sandbox's
/// own settings: `git_config_mirror::mirror`) into `mirror`, in place (same
/// inode), so the read-only bind mount inside the sandbox sees the new
/// content.
pub fn write_config_mirror(host_config: &Path, mirror: &Path) -> Result<()> {
    let text = std::fs::read_to_string(host_config).with_context(|| format!("cannot read {}", host_config.display()))?;
    let redacted = lazaret_core::git_config_mirror::mirror(&text);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(mirror)
        .with_context(|| format!("cannot open {}", mirror.display()))?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(redacted.as_bytes())?;
    file.set_len(redacted.len() as u64)?;
    file.sync_data()?;
    Ok(())
}

/// Identity of a file's current content, as far as a poll can tell.
fn stat_key(path: &Path) -> Option<(u64, i64, i64, u64, i64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.ino(), metadata.mtime(), metadata.mtime_nsec(), metadata.len(), metadata.ctime_nsec()))
}

/// Rewrites the mirror whenever the host's config changes.
pub async fn mirror_config_loop(layout: GitLayout) {
    let host_config = layout.host.config_path();
    let mut last = stat_key(&host_config);
    loop {
        tokio::time::sleep(MIRROR_POLL).await;
        let current = stat_key(&host_config);
        if current != last {
            last = current;
            match write_config_mirror(&host_config, &layout.config_mirror) {
                Ok(()) => tracing::info!("host git config changed; mirror rewritten"),
                Err(error) => tracing::warn!(%error, "cannot mirror the host git config"),
            }
        }
    }
}

/// Reads an agent-written file without following symlinks or blocking on a
/// FIFO, capped in size. `None` when absent or not a regular file.
pub(super) fn read_agent_file(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK).open(path).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.file_type().is_file() {
        return None;
    }
    let mut contents = Vec::new();
    file.take(MAX_REF_FILE).read_to_end(&mut contents).ok()?;
    Some(contents)
}

/// The ref files' contents: equal fingerprints mean an unchanged branch.
pub type BranchFingerprint = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What the agent's branch points at, as plain file contents (the loose ref
/// and `packed-refs`); the host runs no git in the agent's repository.
pub fn branch_fingerprint(layout: &GitLayout) -> BranchFingerprint {
    let loose = read_agent_file(&layout.agent_git_dir.join(layout.branch_ref()));
    let packed = read_agent_file(&layout.agent_git_dir.join("packed-refs"));
    (loose, packed)
}

/// The outcome of one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Export {
    Unchanged,
    Updated {
        previous: Option<String>,
        commit: String,
    },
    /// No branch inside (deleted) or no bundle could be made.
    NoBranch,
}

/// Exports the agent branch once: bundle inside (through `exporter`), copy
/// out, checked import.
pub async fn export_once(layout: &GitLayout, exporter: &mut Exporter) -> Result<Export> {
    let resolving = layout.clone();
    let host_has = tokio::task::spawn_blocking(move || resolving.host.resolve_all(&[&resolving.branch_ref(), "HEAD"]))
        .await
        .context("resolve task failed")??;
    let host_branch = host_has.first().cloned().flatten();
    // The agent's loose ref (which git prefers to `packed-refs`) already
    // names the host's commit: nothing to export. Every start finds the
    // branch so right after the seed, and skips a bundle, an import and the
    // exporter's start while the first session starts.
    if let Some(host_branch) = &host_branch {
        let loose = read_agent_file(&layout.agent_git_dir.join(layout.branch_ref()));
        if loose.is_some_and(|contents| contents.trim_ascii() == host_branch.as_bytes()) {
            return Ok(Export::Unchanged);
        }
    }
    // Commit ids from the host's own git; checked anyway, as they become words of a shell command.
    let mut commits: Vec<String> = Vec::new();
    for commit in host_has.into_iter().flatten() {
        if commit.bytes().all(|byte| byte.is_ascii_hexdigit()) && !commits.contains(&commit) {
            commits.push(commit);
        }
    }
    let outcome =
        exporter.export(&layout.export_loop_script(), &layout.export_script(&commits), &commits, lazaret_core::bounds::EXPORT).await?;
    if outcome == Outcome::Failed {
        return Ok(Export::NoBranch);
    }
    let layout = layout.clone();
    tokio::task::spawn_blocking(move || import_bundle(&layout, host_branch)).await.context("import task failed")?
}

fn import_bundle(layout: &GitLayout, previous: Option<String>) -> Result<Export> {
    let bundle = layout.take_exported_bundle()?;
    import_taken_bundle(layout, &bundle, previous)
}

/// Imports the agent's bundle at `bundle`, a host-private copy (D13), then
/// removes it: moves the host's agent branch from `previous` if every new
/// object passes the quarantine.
pub(crate) fn import_taken_bundle(layout: &GitLayout, bundle: &std::path::Path, previous: Option<String>) -> Result<Export> {
    let imported = super::quarantine::import(&layout.host, bundle, &layout.branch_ref(), previous.as_deref());
    crate::cleanup::remove_file(bundle);
    match imported? {
        super::quarantine::Imported::Unchanged => Ok(Export::Unchanged),
        super::quarantine::Imported::Moved { commit } => {
            housekeeping_after_import(layout);
            Ok(Export::Updated { previous, commit })
        }
    }
}

/// Runs [`super::HostRepository::housekeeping`] on a thread of its own, one
/// at a time: a repack must not hold up the next export.
fn housekeeping_after_import(layout: &GitLayout) {
    static RUNNING: AtomicBool = AtomicBool::new(false);
    if RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let host = layout.host.clone();
    let spawned = std::thread::Builder::new().name("git-housekeeping".into()).spawn(move || {
        if let Err(error) = host.housekeeping() {
            tracing::warn!(%error, "housekeeping of the host repository failed");
        }
        RUNNING.store(false, Ordering::Release);
    });
    if spawned.is_err() {
        RUNNING.store(false, Ordering::Release);
    }
}
