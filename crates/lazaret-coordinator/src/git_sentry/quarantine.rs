//! Importing the agent's bundle without trusting it (DECISIONS D13).
//!
//! Objects land in a quarantine directory under the host's `objects/`
//! (ignored by git, like its own `tmp_objdir-*`), with the host's object
//! store as an alternate. Every object reachable from the new commit that
//! the host's own refs do not reach is repacked and checked by
//! `index-pack --strict` (fsck of each object, `.git` tree entries and
//! `.gitmodules` included, and connectivity) into a second quarantine. Only
//! a pack that passed moves into the host's `objects/pack`, and only then
//! does the ref move, compare-and-swap. A refused bundle leaves nothing in
//! the host repository. The host never uses anything the agent's binaries
//! computed beyond the bundle bytes themselves.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use lazaret_core::git_bundle::BundleHeader;

use super::HostRepository;
use crate::bail;
use crate::error::{Context, Result};

/// Prefix of quarantine directories inside the host's `objects/`.
pub const QUARANTINE_PREFIX: &str = "lazaret-incoming-";
/// A quarantine older than this is a leftover of a killed coordinator.
const STALE_AFTER: Duration = Duration::from_secs(3600);
const NO_COMMIT: &str = "0000000000000000000000000000000000000000";

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// The branch already pointed at the bundle's commit.
    Unchanged,
    Moved {
        commit: String,
    },
}

/// Largest pack of new objects one import may add to the host repository.
pub const MAX_IMPORT_BYTES: u64 = 1 << 30;

/// Checks the bundle at `bundle` and, if every new object passes, moves
/// `branch_ref` of the host repository from `previous` to the bundle's
/// commit. The bundle and the packs made from it are streamed between files
/// and git: the coordinator never holds them in memory.
pub fn import(host: &HostRepository, bundle: &Path, branch_ref: &str, previous: Option<&str>) -> Result<Imported> {
    let mut reader = std::io::BufReader::new(File::open(bundle).with_context(|| format!("cannot open {}", bundle.display()))?);
    let header = BundleHeader::read(&mut reader)?.context("the agent's bundle is refused")?;
    let commit = match header.refs.as_slice() {
        [(commit, name)] if name == branch_ref => commit.clone(),
        refs => {
            let names: Vec<&str> = refs.iter().map(|(_, name)| name.as_str()).collect();
            bail!("the agent's bundle must carry exactly {branch_ref}, it carries {names:?}");
        }
    };
    if previous == Some(commit.as_str()) {
        return Ok(Imported::Unchanged);
    }
    let objects = host.git_common_dir.join("objects");
    remove_stale_quarantines(&objects);
    let quarantine = Quarantine::create(&objects)?;

    // 1. The agent's pack, completed from the host's objects (thin packs).
    let mut pack = reader.into_inner();
    pack.seek(SeekFrom::Start(header.pack_offset as u64))?;
    quarantine.git(host, &quarantine.received, &["index-pack", "--stdin", "--fix-thin"], pack.into())?;
    let kind = quarantine.git(host, &quarantine.received, &["cat-file", "-t", &commit], Stdio::null())?;
    if String::from_utf8_lossy(&kind).trim() != "commit" {
        bail!("the agent's bundle names {commit}, which is not a commit");
    }
    // 2. Everything the new commit reaches that the host's refs do not, as one pack.
    let new_pack = quarantine.pack_new_objects(host, &commit)?;
    let size = new_pack.metadata()?.len();
    if size > MAX_IMPORT_BYTES {
        bail!("the agent's commits add {size} bytes of objects, more than the {MAX_IMPORT_BYTES} one import may add; nothing was imported");
    }
    if pack_object_count(&new_pack)? > 0 {
        // 3. Checked whole: fsck of every object (warnings are errors) and connectivity.
        quarantine
            .git(host, &quarantine.checked, &["index-pack", "--stdin", "--strict"], new_pack.into())
            .context("the agent's commits fail git's object checks")?;
        quarantine.migrate(&objects.join("pack"))?;
    }
    // 4. The ref, only if nobody moved it meanwhile.
    host.git(&["update-ref", "-m", "lazaret: import of the agent branch", branch_ref, &commit, previous.unwrap_or(NO_COMMIT)])?;
    Ok(Imported::Moved { commit })
}

/// The object count in a pack's header (`PACK`, version, count).
fn pack_object_count(pack: &File) -> Result<u32> {
    let mut header = [0u8; 12];
    pack.read_exact_at(&mut header, 0).context("cannot read the pack of new objects")?;
    if &header[..4] != b"PACK" {
        bail!("git pack-objects wrote no pack");
    }
    Ok(u32::from_be_bytes([header[8], header[9], header[10], header[11]]))
}

/// Two object directories under the host's `objects/`: what the agent sent,
/// and what passed the checks. Removed with everything in them on drop.
struct Quarantine {
    root: PathBuf,
    received: PathBuf,
    checked: PathBuf,
    alternate: PathBuf,
}

impl Quarantine {
    fn create(objects: &Path) -> Result<Quarantine> {
        let suffix = lazaret_core::ids::random_hex(8)?;
        let root = objects.join(format!("{QUARANTINE_PREFIX}{suffix}"));
        let received = root.join("received");
        let checked = root.join("checked");
        for dir in [&received, &checked] {
            std::fs::create_dir_all(dir.join("pack")).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(Quarantine { root, received, checked, alternate: objects.to_path_buf() })
    }

    /// Hardened host git with `object_dir` as its object store and the
    /// host's as the alternate; `input` on stdin; stdout back.
    fn git(&self, host: &HostRepository, object_dir: &Path, arguments: &[&str], input: Stdio) -> Result<Vec<u8>> {
        let output = self
            .command(host, object_dir, arguments)
            .stdin(input)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("cannot run git {}", arguments.join(" ")))?;
        if !output.status.success() {
            bail!("git {} failed: {}", arguments.join(" "), String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(output.stdout)
    }

    fn command(&self, host: &HostRepository, object_dir: &Path, arguments: &[&str]) -> Command {
        let mut command: Command = host.command();
        command.env("GIT_OBJECT_DIRECTORY", object_dir).env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &self.alternate).args(arguments);
        command
    }

    /// `rev-list --objects <commit> --not --all | pack-objects --stdout`
    /// into a file of the quarantine, returned open at its start.
    fn pack_new_objects(&self, host: &HostRepository, commit: &str) -> Result<File> {
        let path = self.root.join("new.pack");
        let output = File::options().read(true).write(true).create_new(true).open(&path)?;
        let mut list = self
            .command(host, &self.received, &["rev-list", "--objects", commit, "--not", "--all"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run git rev-list")?;
        let listed = list.stdout.take().context("git rev-list stdout")?;
        let packed = self
            .command(host, &self.received, &["pack-objects", "--stdout", "-q"])
            .stdin(listed)
            .stdout(output.try_clone()?)
            .stderr(Stdio::piped())
            .output()
            .context("cannot run git pack-objects")?;
        let listed = list.wait_with_output()?;
        for (name, status, stderr) in [("rev-list", listed.status, listed.stderr), ("pack-objects", packed.status, packed.stderr)] {
            if !status.success() {
                bail!("git {name} failed: {}", String::from_utf8_lossy(&stderr).trim());
            }
        }
        let mut output = output;
        output.seek(SeekFrom::Start(0))?;
        Ok(output)
    }

    /// Moves the checked pack into the host's `objects/pack`: data first,
    /// the index last, so git never sees an index without its pack.
    fn migrate(&self, host_pack_dir: &Path) -> Result<()> {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(self.checked.join("pack"))?.filter_map(|entry| entry.ok().map(|entry| entry.path())).collect();
        let rank = |path: &Path| match path.extension().and_then(|extension| extension.to_str()) {
            Some("idx") => 2,
            Some("pack") => 0,
            _ => 1,
        };
        files.retain(|path| path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with("pack-")));
        files.sort_by_key(|path| rank(path));
        for file in files {
            let Some(name) = file.file_name() else { continue };
            let target = host_pack_dir.join(name);
            if !target.exists() {
                std::fs::rename(&file, &target)
                    .with_context(|| format!("cannot move {} into {}", file.display(), host_pack_dir.display()))?;
            }
        }
        Ok(())
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        crate::cleanup::remove_dir_all(&self.root);
    }
}

/// Quarantines left by a coordinator that was killed mid-import.
fn remove_stale_quarantines(objects: &Path) {
    let Ok(entries) = std::fs::read_dir(objects) else { return };
    for entry in entries.flatten() {
        let is_quarantine = entry.file_name().to_str().is_some_and(|name| name.starts_with(QUARANTINE_PREFIX));
        let old = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|modified| SystemTime::now().duration_since(modified).unwrap_or_default() > STALE_AFTER);
        if is_quarantine && old {
            crate::cleanup::remove_dir_all(&entry.path());
        }
    }
}
