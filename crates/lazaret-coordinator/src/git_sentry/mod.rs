//! Git Sentry and the agent branch (DECISIONS D1-D4).
//!
//! The agent never sees the host's `.git`. It works in its own checkout
//! (`<domain_dir>/checkout`, at `/workspace`) with its own git directory
//! (`<domain_dir>/agent.git`, at `/workspace/.git`), inside which:
//! `hooks` is a tmpfs and `config` is a read-only bind mount of a file the
//! coordinator owns and rewrites in place: the host's config, redacted.
//!
//! Data crosses only as git bundles. In: a bundle of the host's `HEAD` (and
//! of an existing agent branch) seeds the agent's repository; git inside the
//! sandbox fetches it. Out: when the agent's branch ref changes, git inside
//! the sandbox writes a bundle of that one branch; the coordinator copies it
//! to a private directory; the host parses its header, unpacks it into a
//! quarantine, checks every new object with its own hardened git and only
//! then moves `refs/heads/lazaret/agent-<profile>` (see `quarantine`, D13).
//! The host never runs git in a directory the agent can write.

pub mod contents;
pub mod diff;
pub mod exporter;
pub mod first_checkout;
pub mod host_git;
pub mod pod;
pub mod quarantine;
pub mod ref_watch;
pub mod sync;

use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use lazaret_core::config::ResolvedProfile;

use crate::bail;
use crate::error::{Context, Result};

pub use host_git::HostRepository;

/// Inside the sandbox: where the seed bundle is (read-only) and where the
/// agent's bundles go (read-write).
pub use lazaret_core::config::{OUTBOX_IN_CONTAINER, TRANSFER_IN_CONTAINER};
/// Largest bundle the host accepts from the sandbox.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;
/// In the outbox: the seed's exit status and its output (see
/// [`GitLayout::container_command`]).
const SEED_STATUS: &str = ".lazaret-seed-status";
/// What the sandbox runs in the background once seeded (see
/// [`GitLayout::container_command`]): one `git status` that fills gVisor's
/// dentry cache with the checkout, takes no lock (`--no-optional-locks`:
/// it never writes the index, so it never collides with the agent's git),
/// starts no `core.fsmonitor` program the agent may have configured, and
/// prints nothing. Started from a subshell that exits at once, so the
/// sandbox's init reaps it.
const WARM_UP: &str = "cd /workspace && exec git -c core.fsmonitor=false --no-optional-locks status --porcelain >/dev/null 2>&1 </dev/null";
const SEED_STATUS_TEMPORARY: &str = ".lazaret-seed-status.tmp";
const SEED_LOG: &str = ".lazaret-seed.log";
/// In the transfer directory: the commits the seed bundle was made for (see
/// [`SeedTips`]).
pub(crate) const SEED_TIPS: &str = "seed.tips";

/// The host commits a start seeds from: its `HEAD` and, if the host has it,
/// the agent branch. Written beside the seed bundle as two lines (the second
/// empty when there is no branch): the host reuses the bundle while they are
/// unchanged, and git inside the sandbox fetches from the bundle only the
/// commits its repository lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedTips {
    pub head: String,
    pub branch: Option<String>,
}

impl SeedTips {
    fn text(&self) -> String {
        format!("{}\n{}\n", self.head, self.branch.as_deref().unwrap_or_default())
    }
}

/// The agent branch of a profile.
pub fn agent_branch(profile: &str) -> String {
    format!("lazaret/agent-{profile}")
}

/// Paths of one domain's git layout, all under the Domain Root.
#[derive(Debug, Clone)]
pub struct GitLayout {
    pub host: HostRepository,
    pub branch: String,
    pub checkout: PathBuf,
    pub agent_git_dir: PathBuf,
    pub config_mirror: PathBuf,
    /// Host-written, mounted read-only: the seed bundle.
    pub transfer: PathBuf,
    /// Agent-writable: bundles written inside the sandbox.
    pub outbox: PathBuf,
    /// Host-private: bundles copied out of the outbox before import.
    pub import: PathBuf,
}

impl GitLayout {
    pub fn new(resolved: &ResolvedProfile, host: HostRepository) -> GitLayout {
        let domain_dir = &resolved.domain.domain_dir;
        GitLayout {
            host,
            branch: agent_branch(&resolved.profile),
            checkout: domain_dir.join("checkout"),
            agent_git_dir: domain_dir.join("agent.git"),
            config_mirror: domain_dir.join("git-config"),
            transfer: domain_dir.join("transfer"),
            outbox: domain_dir.join("outbox"),
            import: domain_dir.join("import"),
        }
    }

    pub fn branch_ref(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }

    pub fn seed_bundle(&self) -> PathBuf {
        self.transfer.join("seed.bundle")
    }

    /// Creates the directories, the config mirror and the seed bundle; on a
    /// domain's first start, the agent's git directory and checkout from
    /// host data (`first_checkout`), else the git directory's skeleton (only
    /// when absent: an existing one is the agent's and is not read). Also
    /// makes sure the mount points inside the agent's directories are what
    /// they must be (a directory `hooks`, a regular file `config`): the agent
    /// may have replaced them with symlinks while the sandbox was running.
    pub fn prepare(&self) -> Result<()> {
        for dir in [&self.transfer, &self.outbox, &self.import] {
            crate::private_dirs::ensure_private_dir(dir)?;
        }
        sync::write_config_mirror(&self.host.config_path(), &self.config_mirror)?;
        let tips = self.write_seed_bundle()?;
        match first_checkout::prepare(self, &tips) {
            Ok(None) | Ok(Some(first_checkout::Skip::NotFirst)) => {}
            Ok(Some(skip)) => tracing::info!(?skip, "the first checkout is left to git inside the sandbox"),
            Err(error) => {
                tracing::warn!(error = %error.chained(), "cannot prepare the first checkout on the host; git inside the sandbox does it")
            }
        }
        crate::private_dirs::ensure_private_dir(&self.checkout)?;
        let absent = std::fs::symlink_metadata(&self.agent_git_dir).is_err();
        crate::private_dirs::ensure_private_dir(&self.agent_git_dir)?;
        if absent {
            git_skeleton(&self.agent_git_dir, &self.branch_ref())?;
        }
        // A FIFO or symlink at HEAD would hang or break the seed's first git.
        let head = head_file(&self.branch_ref());
        replace_unless(&self.agent_git_dir.join("HEAD"), |m| m.file_type().is_file(), |path| std::fs::write(path, &head))?;
        replace_unless(&self.agent_git_dir.join("hooks"), |m| m.file_type().is_dir(), |path| std::fs::create_dir(path))?;
        replace_unless(&self.agent_git_dir.join("config"), |m| m.file_type().is_file(), |path| std::fs::write(path, b""))?;
        replace_unless(&self.checkout.join(".git"), |m| m.file_type().is_dir(), |path| std::fs::create_dir(path))?;
        // A result left by an earlier sandbox must not pass for this one's,
        // and nothing the agent planted there (a directory, a symlink that
        // the status would be renamed into) may stall or fail this start.
        for name in [SEED_STATUS, SEED_STATUS_TEMPORARY, SEED_LOG] {
            remove_planted(&self.outbox.join(name))?;
        }
        Ok(())
    }

    /// The sandbox's main process: runs [`Self::seed_script`] as soon as the
    /// sandbox is up, leaves its exit status and output in the outbox, then
    /// sleeps for the sandbox's life. Seeding this way, instead of through a
    /// `podman exec` once `podman run` returned, saves that exec's cost
    /// (about 185 ms under runsc) on every start. No agent process exists
    /// before the status is written: sessions start only after it.
    ///
    /// Once the seed succeeded, [`WARM_UP`] runs in the background: gVisor's
    /// dentry cache starts empty in every sandbox, so the first `git status`
    /// after a start costs about twice a later one (issue 31: 330-440 ms
    /// against 150-230 ms in 10,000 files); an agent asks for its first a
    /// second or more after its own start, when the warm-up is done.
    pub fn container_command(&self) -> Vec<String> {
        let status = format!("{OUTBOX_IN_CONTAINER}/{SEED_STATUS}");
        let temporary = format!("{OUTBOX_IN_CONTAINER}/{SEED_STATUS_TEMPORARY}");
        let log = format!("{OUTBOX_IN_CONTAINER}/{SEED_LOG}");
        let seed = self.seed_script();
        vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!(
                "(\n{seed}) > {log} 2>&1\nseeded=$?\necho $seeded > {temporary} && mv -f {temporary} {status}\n\
                 if [ \"$seeded\" = 0 ]; then ( {WARM_UP} & ); fi\nexec sleep infinity\n"
            ),
        ]
    }

    /// Whether the seed is done: `Ok(false)` while it runs, `Err` with its
    /// output when it failed. Read as agent-written files (no symlink, no
    /// FIFO, capped).
    pub fn seed_done(&self) -> Result<bool> {
        let Some(status) = sync::read_agent_file(&self.outbox.join(SEED_STATUS)) else { return Ok(false) };
        if String::from_utf8_lossy(&status).trim() == "0" {
            return Ok(true);
        }
        let mut output = sync::read_agent_file(&self.outbox.join(SEED_LOG)).unwrap_or_default();
        output.truncate(4096);
        bail!("{}", lazaret_core::terminal_text::block(String::from_utf8_lossy(&output).trim()))
    }

    /// A bundle of the host's `HEAD` and, if it exists on the host, of the
    /// agent branch, with the [`SeedTips`] it was made for. The bundle of the
    /// previous start is kept while the tips are unchanged (the transfer
    /// directory is the host's; the sandbox sees it read-only): packing a
    /// repository's whole history on every start cost up to a second.
    pub(crate) fn write_seed_bundle(&self) -> Result<SeedTips> {
        let branch_ref = self.branch_ref();
        let mut resolved = self.host.resolve_all(&["HEAD", &branch_ref])?.into_iter();
        let (Some(Some(head)), Some(branch)) = (resolved.next(), resolved.next()) else {
            bail!("the repository {} has no commit yet; commit once, then start the agent", self.host.workdir.display());
        };
        let tips = SeedTips { head, branch };
        let bundle = self.seed_bundle();
        let tips_file = self.transfer.join(SEED_TIPS);
        let unchanged = std::fs::read(&tips_file).is_ok_and(|text| text == tips.text().as_bytes());
        if unchanged && std::fs::symlink_metadata(&bundle).is_ok_and(|metadata| metadata.file_type().is_file()) {
            return Ok(tips);
        }
        remove_planted(&tips_file)?;
        remove_planted(&bundle)?;
        let bundle_text = bundle.to_string_lossy().into_owned();
        let mut arguments = vec!["bundle", "create", "--quiet", bundle_text.as_str(), "HEAD"];
        if tips.branch.is_some() {
            arguments.push(&branch_ref);
        }
        self.host.git(&arguments)?;
        let temporary = self.transfer.join(format!("{SEED_TIPS}.tmp"));
        std::fs::write(&temporary, tips.text()).with_context(|| format!("cannot write {}", temporary.display()))?;
        std::fs::rename(&temporary, &tips_file).with_context(|| format!("cannot write {}", tips_file.display()))?;
        Ok(tips)
    }

    /// The podman arguments that mount the agent's repository (D2).
    pub fn podman_arguments(&self) -> Vec<String> {
        vec![
            format!("--volume={}:/workspace:rw", self.checkout.display()),
            format!("--volume={}:/workspace/.git:rw", self.agent_git_dir.display()),
            "--mount=type=tmpfs,destination=/workspace/.git/hooks,tmpfs-mode=0755".to_owned(),
            format!("--volume={}:/workspace/.git/config:ro", self.config_mirror.display()),
            format!("--volume={}:{TRANSFER_IN_CONTAINER}:ro", self.transfer.display()),
            format!("--volume={}:{OUTBOX_IN_CONTAINER}:rw", self.outbox.display()),
        ]
    }

    /// The host directories that nothing but the sandbox writes while it
    /// runs: the checkout and the agent's git directory (D1; the host writes
    /// them in [`GitLayout::prepare`], before the start, and only reads the
    /// branch's ref files afterwards). gVisor may cache them
    /// (`backend::sandbox`).
    pub fn sandbox_only_sources(&self) -> Vec<PathBuf> {
        vec![self.checkout.clone(), self.agent_git_dir.clone()]
    }

    /// The script git runs inside the sandbox once it is up: fetch from the
    /// seed what the agent's repository lacks, then put the agent branch
    /// where the host says. If the host has the
    /// agent branch, the agent continues from it (kept as is when it is
    /// ahead); if not (first start, or the user deleted it after merging),
    /// the branch starts afresh at the host's `HEAD`. The checkout is reset
    /// when the branch moved.
    pub fn seed_script(&self) -> String {
        let branch_ref = self.branch_ref();
        format!(
            r#"set -e
cd /workspace
# A commondir written in an earlier session would point git elsewhere.
if [ -e .git/commondir ] || [ -L .git/commondir ]; then rm -f .git/commondir; fi
# A sandbox killed in the middle of a git command leaves its lock files; this
# runs before any session, so no git process of this sandbox holds them. And
# a FIFO where git reads a ref would hang every start: refs are files.
find .git -path .git/objects -prune -o \( -type f -name '*.lock' -o \( -path '.git/refs/*' -o -path .git/packed-refs \) ! -type f ! -type d \) \
  -exec rm -f {{}} +
if [ ! -f {TRANSFER_IN_CONTAINER}/{SEED_TIPS} ]; then echo "lazaret: the host's seed has no {SEED_TIPS}" >&2; exit 1; fi
head= branch=
{{ read -r head; read -r branch; }} < {TRANSFER_IN_CONTAINER}/{SEED_TIPS} || true
# One git process tells which of the host's commits this repository has, and
# where the agent branch and the two host refs point (a line with a space is
# a name git does not know).
state=$(printf '%s\n' "$head^{{commit}}" "${{branch:-none}}^{{commit}}" "{branch_ref}" refs/lazaret/host-head refs/lazaret/host-branch |
  git cat-file --batch-check='%(objectname)')
has_head= has_branch= current= was_head= was_branch= line_number=0
while IFS= read -r line; do
  case $line in *" "*) line= ;; esac
  line_number=$((line_number + 1))
  case $line_number in
    1) has_head=$line ;; 2) has_branch=$line ;; 3) current=$line ;; 4) was_head=$line ;; 5) was_branch=$line ;;
  esac
done <<EOF
$state
EOF
# The host's commits come from the seed bundle only when this repository
# lacks them (unpacking a whole history through gVisor costs seconds).
if [ -z "$has_head" ]; then
  git fetch --quiet --no-tags --no-write-fetch-head {TRANSFER_IN_CONTAINER}/seed.bundle "+HEAD:refs/lazaret/host-head" 2>&1
  head=$(git rev-parse refs/lazaret/host-head)
  was_head=$head
fi
if [ -n "$branch" ] && [ -z "$has_branch" ]; then
  branch=
  if git fetch --quiet --no-tags --no-write-fetch-head {TRANSFER_IN_CONTAINER}/seed.bundle "+{branch_ref}:refs/lazaret/host-branch" 2>/dev/null; then
    branch=$(git rev-parse refs/lazaret/host-branch)
    was_branch=$branch
  fi
fi
# If the host has the agent branch, the agent continues from it (kept as it
# is when it is ahead or has diverged); if not, the branch is the host's HEAD.
updates=
if [ "$was_head" != "$head" ]; then updates="${{updates}}update refs/lazaret/host-head $head
"; fi
if [ -n "$branch" ]; then
  target=$branch
  if [ "$was_branch" != "$branch" ]; then updates="${{updates}}update refs/lazaret/host-branch $branch
"; fi
else
  target=$head
  if [ -n "$was_branch" ]; then updates="${{updates}}delete refs/lazaret/host-branch
"; fi
fi
moved=
if [ "$current" != "$target" ]; then
  if [ -z "$branch" ] || [ -z "$current" ] || git merge-base --is-ancestor "$current" "$target"; then
    updates="${{updates}}update {branch_ref} $target
"
    moved=1
  fi
fi
if [ -n "$updates" ]; then printf '%s' "$updates" | git update-ref --stdin; fi
symbolic=
if [ -f .git/HEAD ] && [ ! -L .git/HEAD ]; then IFS= read -r symbolic < .git/HEAD || true; fi
if [ "$symbolic" != "ref: {branch_ref}" ]; then git symbolic-ref HEAD "{branch_ref}"; fi
if [ -n "$moved" ] || [ ! -e .git/index ]; then git reset --quiet --hard; fi
"#
        )
    }

    /// A shell function, `lazaret_export [HOST_COMMIT...]`, that git inside
    /// the sandbox runs to export the agent branch: a bundle of just that
    /// branch, thin against the host's commits; if that fails (the sandbox
    /// lacks one of them, or a killed git left its lock file), thin against
    /// those the sandbox has; whole as the last resort. Replace refs are
    /// ignored, so the bundle carries the real objects. `git bundle create`
    /// writes `<file>.lock` and renames it, so the outbox never holds half a
    /// bundle. The common case costs one `git` and no other process.
    pub(crate) fn export_function(&self) -> String {
        let branch_ref = self.branch_ref();
        let bundle = format!("{OUTBOX_IN_CONTAINER}/agent.bundle");
        format!(
            r#"export GIT_NO_REPLACE_OBJECTS=1 GIT_CONFIG_NOSYSTEM=1
lazaret_export() {{
  cd /workspace || return 1
  for commit in "$@"; do set -- "$@" "^$commit"; shift; done
  git bundle create --quiet {bundle} {branch_ref} "$@" 2>/dev/null && return 0
  rm -f {bundle}.lock
  set -- $(for commit in "$@"; do echo "${{commit#^}}"; done | git cat-file --batch-check='%(objecttype) ^%(objectname)' 2>/dev/null |
    while read -r kind name; do if [ "$kind" = commit ]; then echo "$name"; fi; done)
  git bundle create --quiet {bundle} {branch_ref} "$@" 2>/dev/null || git bundle create --quiet {bundle} {branch_ref}
}}
"#
        )
    }

    /// The export run once by a fresh `podman exec` (see `exporter`).
    pub fn export_script(&self, host_has: &[String]) -> String {
        format!("{}lazaret_export {}\n", self.export_function(), host_has.join(" "))
    }

    /// The exporter's loop (see `exporter`): per request line `ID
    /// [HOST_COMMIT...]`, one export and one answer line, `ID ok` or `ID
    /// failed`. Commands are looked up afresh for each request, as a fresh
    /// shell would.
    pub fn export_loop_script(&self) -> String {
        format!(
            r#"{}while IFS= read -r request; do
  hash -r
  set -- $request
  id=$1
  shift
  if lazaret_export "$@" </dev/null >/dev/null 2>&1; then echo "$id ok"; else echo "$id failed"; fi
done
"#,
            self.export_function()
        )
    }

    /// Copies the agent's bundle out of the agent-writable outbox into the
    /// host-private import directory: a regular file (no symlink, no
    /// directory that git would treat as a repository), size-capped, with a
    /// bundle header.
    pub fn take_exported_bundle(&self) -> Result<PathBuf> {
        let source = self.outbox.join("agent.bundle");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&source)
            .with_context(|| format!("cannot open {}", source.display()))?;
        let metadata = file.metadata()?;
        if !metadata.file_type().is_file() {
            bail!("{} is not a regular file; nothing was imported", source.display());
        }
        if metadata.len() > MAX_BUNDLE_BYTES {
            bail!(
                "the agent's bundle {} is {} bytes, more than the {MAX_BUNDLE_BYTES} the host accepts; nothing was imported",
                source.display(),
                metadata.len()
            );
        }
        if !starts_as_bundle(&file) {
            bail!("{} is not a git bundle", source.display());
        }
        // Copied as a stream, never whole in memory; still capped, as the agent may be appending.
        let target = self.import.join("agent.bundle");
        let mut output = std::fs::File::create(&target).with_context(|| format!("cannot create {}", target.display()))?;
        let copied = std::io::copy(&mut file.take(MAX_BUNDLE_BYTES + 1), &mut output)?;
        if copied > MAX_BUNDLE_BYTES {
            drop(output);
            crate::cleanup::remove_file(&target);
            bail!("the agent's bundle {} grew past {MAX_BUNDLE_BYTES} bytes while it was copied; nothing was imported", source.display());
        }
        Ok(target)
    }
}

/// Whether `file` starts with a git bundle's signature (v2 or v3).
fn starts_as_bundle(file: &std::fs::File) -> bool {
    let mut signature = [0u8; 16];
    file.read_exact_at(&mut signature, 0).is_ok()
        && (signature.starts_with(b"# v2 git bundle\n") || signature.starts_with(b"# v3 git bundle\n"))
}

/// The content of a `HEAD` that names `branch_ref`.
fn head_file(branch_ref: &str) -> String {
    format!("ref: {branch_ref}\n")
}

/// The skeleton of a git directory whose `HEAD` is `branch_ref`, in the
/// existing directory `git_dir`.
fn git_skeleton(git_dir: &Path, branch_ref: &str) -> Result<()> {
    for dir in ["objects", "refs/heads", "refs/tags"] {
        std::fs::create_dir_all(git_dir.join(dir))?;
    }
    std::fs::write(git_dir.join("HEAD"), head_file(branch_ref))?;
    Ok(())
}

/// If `path` is missing or not what `is_expected` accepts (e.g. a symlink
/// the agent planted), removes it without following it and recreates it.
fn replace_unless(
    path: &Path,
    is_expected: impl Fn(&std::fs::Metadata) -> bool,
    create: impl Fn(&Path) -> std::io::Result<()>,
) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if is_expected(&metadata) => return Ok(()),
        Ok(_) => remove_planted(path)?,
        Err(_) => {}
    }
    create(path).with_context(|| format!("cannot create {}", path.display()))
}

/// Removes whatever the agent may have left at `path`: a directory with its
/// tree, anything else (a symlink itself, never its target) as a file;
/// nothing there is fine.
fn remove_planted(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    };
    removed.with_context(|| format!("cannot remove {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_symlinks_are_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("precious"), b"keep").expect("write");
        let hooks = dir.path().join("hooks");
        std::os::unix::fs::symlink(&outside, &hooks).expect("symlink");
        replace_unless(&hooks, |m| m.file_type().is_dir(), |p| std::fs::create_dir(p)).expect("replace");
        assert!(std::fs::symlink_metadata(&hooks).expect("stat").file_type().is_dir());
        assert_eq!(std::fs::read(outside.join("precious")).expect("kept"), b"keep");
    }
}
