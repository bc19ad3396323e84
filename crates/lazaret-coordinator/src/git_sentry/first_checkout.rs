//! A domain's first checkout, prepared on the host (issue 16, item 3).
//!
//! On a domain's first start nothing of the agent exists yet. Instead of git
//! inside the sandbox unpacking the seed bundle and writing every file
//! through gVisor (10.7 s for 10,000 files), the host builds the agent's git
//! directory and checkout in two fresh directories of its own, from the same
//! seed bundle, and renames them into place before the sandbox starts.
//!
//! D1 holds: host git runs only in directories this function has just
//! created, under the private Domain Root, which no sandbox has ever seen.
//! It runs only when the agent's git directory does not exist and the
//! checkout is absent or empty; once the agent's git directory exists it
//! never runs again for the domain, whatever the agent does.
//!
//! Host git runs as the sandbox's git would check out: the agent's config
//! (the mirror) is the repository config, no system or global config or
//! attributes, no `$HOME`, no hooks, no submodule recursion, and no
//! transport: the seed bundle is unbundled, never fetched by its path (which
//! the config's URL rewriting could turn into a proxied or remote URL). A config that would make the
//! checkout run a host command or read a host file the sandbox lacks (a
//! filter driver, an attributes file, an include) leaves the seeding to git
//! inside the sandbox, as before. Files are dated two seconds back before
//! the index records them, so that no entry is "racily clean" and git inside
//! the sandbox accepts the index as it is (with `core.checkStat = minimal`,
//! see `lazaret_core::git_config_mirror`).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::{GitLayout, SeedTips};
use crate::bail;
use crate::cleanup::LogFailure;
use crate::error::{Context, Result};

/// Beside the agent's directories in the Domain Root; never mounted.
const GIT_DIR_TEMPORARY: &str = "first-checkout.git.tmp";
const WORK_TREE_TEMPORARY: &str = "first-checkout.tmp";
/// How far back the checked-out files are dated.
const BACKDATE: Duration = Duration::from_secs(2);

/// Why the host leaves a first checkout to the sandbox, if it does.
#[derive(Debug, PartialEq, Eq)]
pub enum Skip {
    /// The agent's git directory exists: not a first start.
    NotFirst,
    /// The checkout holds files from an earlier life; git inside the
    /// sandbox checks out over them, keeping untracked ones.
    CheckoutNotEmpty,
    /// The agent's config names this key, which would run a host command or
    /// read a host file during the checkout.
    Config(String),
}

/// Prepares the agent's git directory and checkout on the host when this is
/// the domain's first start. `Ok(None)` when it did; `Ok(Some(skip))` when
/// the sandbox seeds instead; `Err` when the host tried and failed, with
/// nothing of the attempt left behind (the caller then lets the sandbox
/// seed).
pub fn prepare(layout: &GitLayout, tips: &SeedTips) -> Result<Option<Skip>> {
    let domain_dir = layout.agent_git_dir.parent().context("the agent's git directory has no parent")?;
    let git_dir = domain_dir.join(GIT_DIR_TEMPORARY);
    let work_tree = domain_dir.join(WORK_TREE_TEMPORARY);
    // What a start that died half-way left (host-only, never mounted).
    remove_leftovers(&git_dir, &work_tree)?;
    if std::fs::symlink_metadata(&layout.agent_git_dir).is_ok() {
        return Ok(Some(Skip::NotFirst));
    }
    match std::fs::read_dir(&layout.checkout).map(|mut entries| entries.next().is_none()) {
        Ok(false) => return Ok(Some(Skip::CheckoutNotEmpty)),
        Ok(true) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", layout.checkout.display())),
    }
    let config =
        std::fs::read_to_string(&layout.config_mirror).with_context(|| format!("cannot read {}", layout.config_mirror.display()))?;
    if let Some(key) = config_key_needing_the_sandbox(&layout.config_mirror)? {
        return Ok(Some(Skip::Config(key)));
    }
    let started = Instant::now();
    let built = build(layout, tips, &config, &git_dir, &work_tree).and_then(|()| move_into_place(layout, &git_dir, &work_tree));
    if let Err(error) = built {
        remove_leftovers(&git_dir, &work_tree).log_failure("removing a first checkout that failed half-way");
        return Err(error);
    }
    tracing::info!(milliseconds = started.elapsed().as_millis() as u64, "first checkout prepared on the host");
    Ok(None)
}

/// The first key of the agent's config that would make a checkout run a
/// host command (a filter driver) or read host files (an attributes file, an
/// include) if host git did it.
fn config_key_needing_the_sandbox(config: &Path) -> Result<Option<String>> {
    let output = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["config", "--no-includes", "--name-only", "--list", "--file"])
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .context("cannot run git config")?;
    if !output.status.success() {
        bail!("git config cannot read {}: {}", config.display(), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).lines().find(|key| needs_the_sandbox(key)).map(str::to_owned))
}

/// Keys as `git config --name-only` prints them (section and name in lower
/// case).
fn needs_the_sandbox(key: &str) -> bool {
    key.starts_with("filter.") || key.starts_with("include.") || key.starts_with("includeif.") || key == "core.attributesfile"
}

fn remove_leftovers(git_dir: &Path, work_tree: &Path) -> Result<()> {
    for path in [git_dir, work_tree] {
        super::remove_planted(path)?;
    }
    Ok(())
}

fn build(layout: &GitLayout, tips: &SeedTips, config: &str, git_dir: &Path, work_tree: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    for dir in [git_dir, work_tree] {
        builder.create(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    super::git_skeleton(git_dir, &layout.branch_ref())?;
    std::fs::write(git_dir.join("config"), config)?;

    let git = |arguments: &[&str]| seed_git(git_dir, work_tree, arguments);
    // The objects come in by unbundling, never by a fetch: a fetch names the
    // bundle by its path, which the repository's `url.<x>.insteadOf` can
    // turn into a URL (git:// ran `core.gitProxy` as the user, issue 33).
    // The refs are set from the tips the bundle was written from.
    let bundle = layout.seed_bundle();
    git(&["bundle", "unbundle", bundle.to_string_lossy().as_ref()])?;
    let branch_ref = layout.branch_ref();
    git(&["update-ref", "refs/lazaret/host-head", &tips.head])?;
    if let Some(branch) = &tips.branch {
        git(&["update-ref", "refs/lazaret/host-branch", branch])?;
    }
    // As the sandbox's seed does: the agent continues from the host's agent
    // branch if there is one, else starts at the host's HEAD.
    git(&["update-ref", &branch_ref, tips.branch.as_deref().unwrap_or(&tips.head)])?;
    git(&["read-tree", "--reset", "-u", "HEAD"])?;
    backdate_files(work_tree)?;
    git(&["update-index", "-q", "--refresh"])?;
    // The config stays the sandbox's business: inside, the mirror is mounted
    // over this file; here it goes back to the empty placeholder.
    std::fs::write(git_dir.join("config"), b"")?;
    Ok(())
}

/// Host git for the first checkout, in the two fresh directories only.
fn seed_git(git_dir: &Path, work_tree: &Path, arguments: &[&str]) -> Result<()> {
    let mut command = Command::new("git");
    command.env_clear();
    for name in ["PATH", "LANG"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .env("GIT_DIR", git_dir)
        .env("GIT_WORK_TREE", work_tree)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        // No transport at all, whatever the config's `protocol.*.allow` say:
        // nothing here may reach a remote or run a proxy (a name no
        // transport has).
        .env("GIT_ALLOW_PROTOCOL", "lazaret-none")
        .env("GIT_PROTOCOL_FROM_USER", "0")
        .env("GIT_COMMITTER_NAME", "Lazaret")
        .env("GIT_COMMITTER_EMAIL", "lazaret@lazaret.invalid")
        .env("GIT_AUTHOR_NAME", "Lazaret")
        .env("GIT_AUTHOR_EMAIL", "lazaret@lazaret.invalid")
        .current_dir(work_tree);
    for setting in super::host_git::HARDENING {
        command.arg("-c").arg(setting);
    }
    // No second git in a submodule's directory (`.gitmodules` may be the
    // agent's, from the host's agent branch).
    for setting in ["submodule.recurse=false", "fetch.recurseSubmodules=false"] {
        command.arg("-c").arg(setting);
    }
    let output =
        command.args(arguments).stdin(Stdio::null()).output().with_context(|| format!("cannot run git {}", arguments.join(" ")))?;
    if !output.status.success() {
        bail!("git {} failed: {}", arguments.join(" "), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

/// Dates every file and symlink under `root` (the fresh work tree; nothing
/// else has written there) [`BACKDATE`] back, not following symlinks.
fn backdate_files(root: &Path) -> Result<()> {
    let when = SystemTime::now().checked_sub(BACKDATE).unwrap_or(SystemTime::UNIX_EPOCH);
    let since_epoch = when.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let time = nix::sys::time::TimeSpec::from_duration(since_epoch);
    let mut stack: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
                continue;
            }
            nix::sys::stat::utimensat(nix::fcntl::AT_FDCWD, &path, &time, &time, nix::sys::stat::UtimensatFlags::NoFollowSymlink)
                .map_err(std::io::Error::from)
                .with_context(|| format!("cannot set the times of {}", path.display()))?;
        }
    }
    Ok(())
}

/// Renames the work tree and then the git directory into place. The git
/// directory comes last: its existence is what makes later starts skip all
/// this.
fn move_into_place(layout: &GitLayout, git_dir: &Path, work_tree: &Path) -> Result<()> {
    match std::fs::remove_dir(&layout.checkout) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot replace the empty {}", layout.checkout.display())),
    }
    std::fs::rename(work_tree, &layout.checkout)
        .with_context(|| format!("cannot move {} to {}", work_tree.display(), layout.checkout.display()))?;
    std::fs::rename(git_dir, &layout.agent_git_dir)
        .with_context(|| format!("cannot move {} to {}", git_dir.display(), layout.agent_git_dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_attribute_files_and_includes_are_left_to_the_sandbox() {
        for key in ["filter.lfs.smudge", "filter.x.process", "include.path", "includeif.gitdir:/x/.path", "core.attributesfile"] {
            assert!(needs_the_sandbox(key), "{key}");
        }
        for key in ["core.autocrlf", "core.eol", "remote.origin.url", "core.checkstat", "user.name"] {
            assert!(!needs_the_sandbox(key), "{key}");
        }
    }
}
