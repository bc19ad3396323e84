//! Where the mounts live and the commands that reach them: on the host as
//! root, in the mount namespace of podman's pause process (`podman
//! unshare`) rootless. Image mounts, fuse-overlayfs mounts and unmounts,
//! listings, stats and hashes all go through [`Reach`].

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::listing::{fingerprint_of, list_tree_in_process, only_missing_paths, parse_find_output, Entry, Fingerprint};
use super::mounts::{parse_mountinfo, unmount_path, MountPoint};
use super::names::check_mountable;
use super::{ImageMount, FIND_ARGUMENT_BYTES, FIND_FORMAT};
use crate::error::{Context, Result};
use crate::podman::Podman;

/// Rootful podman mounts on the host; rootless podman in the mount namespace
/// of its pause process, reached with `podman unshare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Namespace {
    Host,
    Rootless,
}

/// Runs commands and reads files where the mounts are.
#[derive(Debug, Clone)]
pub(super) struct Reach {
    pub(super) namespace: Namespace,
    pub(super) podman: Podman,
}

impl Reach {
    pub(super) fn current() -> Reach {
        let namespace = if nix::unistd::geteuid().is_root() { Namespace::Host } else { Namespace::Rootless };
        Reach { namespace, podman: Podman::default() }
    }

    /// `program` in the mounts' namespace, with podman's clean environment
    /// and the C locale (error messages are parsed).
    pub(super) fn command(&self, program: &str) -> Command {
        let mut command = match self.namespace {
            Namespace::Host => {
                let mut command = Command::new(program);
                command.env_clear().envs(crate::podman::environment());
                command
            }
            Namespace::Rootless => {
                let mut command = self.podman.command();
                command.arg("unshare").arg(program);
                command
            }
        };
        command.env("LC_ALL", "C").stdin(Stdio::null());
        command
    }

    /// podman itself in the mounts' namespace (`podman image mount` needs it).
    fn podman_command(&self) -> Command {
        self.command(self.podman.program())
    }

    pub(super) fn mount_image(&self, image: &str) -> Result<ImageMount> {
        let mut inspect = self.podman.command();
        inspect.args(["image", "inspect", "--format", "{{.Id}}", "--", image]).env("LC_ALL", "C").stdin(Stdio::null());
        let id = String::from_utf8_lossy(&run(inspect, || format!("podman image inspect {image}"))?).trim().to_owned();
        if id.len() != 64 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            crate::bail!("podman image inspect {image} printed {id:?}, not an image ID");
        }
        let mut mount = self.podman_command();
        mount.args(["image", "mount", &id]);
        let root = String::from_utf8_lossy(&run(mount, || format!("podman image mount {image}"))?).trim().to_owned();
        let image_mount = ImageMount { id, root: PathBuf::from(root) };
        if let Err(error) = check_mountable(&image_mount.root, "the image root") {
            let _ = self.unmount_image(&image_mount.id);
            return Err(error);
        }
        Ok(image_mount)
    }

    /// Releases one `podman image mount` (podman counts them).
    pub(super) fn unmount_image(&self, id: &str) -> Result<()> {
        let mut unmount = self.podman_command();
        unmount.args(["image", "unmount", id]);
        run(unmount, || format!("podman image unmount {id}")).map(drop)
    }

    /// Mounts each overlay, in order, stopping at the first failure. Returns
    /// which are mounted and, on failure, the index that failed and why.
    /// Rootless, all run in one `podman unshare`.
    pub(super) fn mount_overlays(&self, overlays: &[Overlay]) -> (Vec<bool>, Option<(usize, crate::Error)>) {
        let mut mounted = vec![false; overlays.len()];
        match self.namespace {
            Namespace::Host => {
                for (index, overlay) in overlays.iter().enumerate() {
                    let mut command = self.command("fuse-overlayfs");
                    command.arg("-o").arg(overlay.options()).arg(&overlay.merged);
                    match run(command, || "fuse-overlayfs".to_owned()) {
                        Ok(_) => mounted[index] = true,
                        Err(error) => return (mounted, Some((index, error))),
                    }
                }
                (mounted, None)
            }
            Namespace::Rootless => {
                if overlays.is_empty() {
                    return (mounted, None);
                }
                let mut command = self.command("sh");
                command.args(["-c", "while [ $# -ge 2 ]; do fuse-overlayfs -o \"$1\" \"$2\" || exit 1; shift 2; done", "sh"]);
                for overlay in overlays {
                    command.arg(overlay.options()).arg(&overlay.merged);
                }
                let Err(error) = run(command, || "podman unshare fuse-overlayfs".to_owned()) else {
                    return (vec![true; overlays.len()], None);
                };
                match self.mount_table() {
                    Ok(table) => {
                        for (index, overlay) in overlays.iter().enumerate() {
                            mounted[index] = table.iter().any(|mount| mount.path == overlay.merged);
                        }
                        let failed = mounted.iter().position(|&mounted| !mounted).unwrap_or(0);
                        (mounted, Some((failed, error)))
                    }
                    // Unknown: try to unmount all of them.
                    Err(_) => (vec![true; overlays.len()], Some((0, error))),
                }
            }
        }
    }

    /// Unmounts every mount (stacked ones too) at each of `merged`; a path
    /// that is not mounted is fine.
    /// `stacked`: a path may carry more than one mount (recovery).
    pub(super) fn unmount_overlays(&self, merged: &[PathBuf], stacked: bool) -> Result<()> {
        match self.namespace {
            Namespace::Host => {
                for path in merged {
                    // A mount can stay busy for a moment after its container
                    // is removed (runsc's gofer exits asynchronously, or
                    // someone walks the directory): retry for about two
                    // seconds, then detach it lazily so nothing stays mounted.
                    let mut busy_retries = 0;
                    for _ in 0..32 {
                        let flags = if busy_retries >= 20 { nix::libc::MNT_DETACH } else { 0 };
                        match unmount_path(path, flags) {
                            Ok(()) => continue,
                            Err(error) if matches!(error.raw_os_error(), Some(nix::libc::EINVAL | nix::libc::ENOENT)) => break,
                            Err(error) if error.raw_os_error() == Some(nix::libc::EBUSY) => {
                                busy_retries += 1;
                                std::thread::sleep(std::time::Duration::from_millis(100));
                            }
                            Err(error) => return Err(error).with_context(|| format!("cannot unmount {}", path.display())),
                        }
                    }
                }
                Ok(())
            }
            Namespace::Rootless => {
                // fusermount3 first; the mount table only to tell "was not
                // mounted" from a real failure, and to catch stacked mounts.
                let mut pending: Vec<PathBuf> = merged.to_vec();
                for _ in 0..8 {
                    if pending.is_empty() {
                        return Ok(());
                    }
                    let mut command = self.command("sh");
                    command.args(["-c", "rc=0; for m do fusermount3 -u \"$m\" || rc=1; done; exit $rc", "sh"]).args(&pending);
                    let result = run(command, || "podman unshare fusermount3 -u".to_owned());
                    if result.is_ok() && !stacked {
                        return Ok(());
                    }
                    let table = self.mount_table()?;
                    pending.retain(|path| table.iter().any(|mount| &mount.path == path));
                    if let (Err(error), false) = (result, pending.is_empty()) {
                        return Err(error);
                    }
                }
                crate::bail!("overlays stay mounted after repeated fusermount3 -u: {merged:?}")
            }
        }
    }

    /// The mount points of the mounts' namespace.
    pub(super) fn mount_table(&self) -> Result<Vec<MountPoint>> {
        let text = match self.namespace {
            Namespace::Host => std::fs::read("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?,
            Namespace::Rootless => {
                let mut command = self.command("cat");
                command.arg("/proc/self/mountinfo");
                run(command, || "podman unshare cat /proc/self/mountinfo".to_owned())?
            }
        };
        Ok(parse_mountinfo(&text))
    }

    /// Every entry below each of `roots` (which must exist), with paths
    /// relative to its root, sorted by path (a directory before its contents).
    pub(super) fn list_trees(&self, roots: &[PathBuf]) -> Result<Vec<Vec<Entry>>> {
        match self.namespace {
            Namespace::Host => roots.iter().map(|root| list_tree_in_process(root)).collect(),
            Namespace::Rootless => {
                let mut trees: Vec<Vec<Entry>> = roots.iter().map(|_| Vec::new()).collect();
                if roots.is_empty() {
                    return Ok(trees);
                }
                let mut command = self.command("find");
                command.args(roots).args(["-mindepth", "1", "-printf", FIND_FORMAT]);
                let output = command.output().context("cannot run podman unshare find")?;
                if !output.status.success() {
                    crate::bail!("podman unshare find {roots:?}: {}", String::from_utf8_lossy(&output.stderr).trim());
                }
                for (path, fingerprint) in parse_find_output(&output.stdout)? {
                    let Some((index, relative)) =
                        roots.iter().enumerate().find_map(|(index, root)| path.strip_prefix(root).ok().map(|rel| (index, rel.to_owned())))
                    else {
                        crate::bail!("find printed {} outside {roots:?}", path.display());
                    };
                    // find cannot print device numbers; gVisor refuses mknod,
                    // so a character device can only be a whiteout.
                    let whiteout = fingerprint.kind == 'c';
                    trees[index].push(Entry { relative, fingerprint, whiteout });
                }
                for tree in &mut trees {
                    tree.sort_by(|a, b| a.relative.cmp(&b.relative));
                }
                Ok(trees)
            }
        }
    }

    /// lstat of each path: `None` when it does not exist.
    pub(super) fn stat_paths(&self, paths: &[PathBuf]) -> Result<Vec<Option<Fingerprint>>> {
        match self.namespace {
            Namespace::Host => paths
                .iter()
                .map(|path| match std::fs::symlink_metadata(path) {
                    Ok(metadata) => fingerprint_of(path, &metadata).map(|(fingerprint, _)| Some(fingerprint)),
                    Err(error) if matches!(error.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
                    Err(error) => Err(error).with_context(|| format!("cannot stat {}", path.display())),
                })
                .collect(),
            Namespace::Rootless => {
                let mut found: BTreeMap<PathBuf, Fingerprint> = BTreeMap::new();
                for chunk in argument_chunks(paths) {
                    let mut command = self.command("find");
                    command.args(chunk).args(["-maxdepth", "0", "-printf", FIND_FORMAT]);
                    let output = command.output().context("cannot run podman unshare find")?;
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    let acceptable = output.status.success() || (output.status.code() == Some(1) && only_missing_paths(&stderr));
                    if !acceptable {
                        crate::bail!("podman unshare find: {}", stderr.trim());
                    }
                    found.extend(parse_find_output(&output.stdout)?);
                }
                Ok(paths.iter().map(|path| found.get(path).cloned()).collect())
            }
        }
    }

    /// SHA-256 (lowercase hex) of each regular file.
    pub(super) fn hash_files(&self, paths: &[PathBuf]) -> Result<Vec<String>> {
        match self.namespace {
            Namespace::Host => paths
                .iter()
                .map(|path| {
                    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
                    let mut hasher = Sha256::new();
                    std::io::copy(&mut file, &mut hasher).with_context(|| format!("cannot read {}", path.display()))?;
                    Ok(lazaret_core::ids::hex(&hasher.finalize()))
                })
                .collect(),
            Namespace::Rootless => {
                let mut hashes: BTreeMap<PathBuf, String> = BTreeMap::new();
                for chunk in argument_chunks(paths) {
                    let mut command = self.command("sha256sum");
                    command.args(["-z", "--"]).args(chunk);
                    // `HASH  PATH\0` per file: -z also turns off name escaping.
                    for record in run(command, || "podman unshare sha256sum".to_owned())?.split(|&byte| byte == 0) {
                        if record.len() > 66 && record[64..66] == *b"  " {
                            let hash = String::from_utf8_lossy(&record[..64]).into_owned();
                            hashes.insert(PathBuf::from(std::ffi::OsStr::from_bytes(&record[66..])), hash);
                        }
                    }
                }
                paths
                    .iter()
                    .map(|path| hashes.remove(path).ok_or_else(|| crate::format_err!("sha256sum printed no hash for {}", path.display())))
                    .collect()
            }
        }
    }

    /// Removes directory trees (rootless: they may hold files of subordinate uids).
    pub(super) fn remove_trees(&self, trees: &[PathBuf]) -> Result<()> {
        let trees: Vec<&PathBuf> = trees.iter().filter(|path| std::fs::symlink_metadata(path).is_ok()).collect();
        if trees.is_empty() {
            return Ok(());
        }
        match self.namespace {
            Namespace::Host => {
                for tree in trees {
                    std::fs::remove_dir_all(tree).with_context(|| format!("cannot remove {}", tree.display()))?;
                }
                Ok(())
            }
            Namespace::Rootless => {
                let mut command = self.command("rm");
                command.args(["-rf", "--"]).args(&trees);
                run(command, || "podman unshare rm -rf".to_owned()).map(drop)
            }
        }
    }
}

/// One fuse-overlayfs mount to make.
#[derive(Debug, Clone)]
pub(super) struct Overlay {
    pub(super) lower: PathBuf,
    pub(super) upper: PathBuf,
    pub(super) work: PathBuf,
    pub(super) merged: PathBuf,
}

impl Overlay {
    /// fuse-overlayfs' `-o` (paths checked by [`check_mountable`]).
    pub(super) fn options(&self) -> std::ffi::OsString {
        let mut options = std::ffi::OsString::from("lowerdir=");
        options.push(&self.lower);
        options.push(",upperdir=");
        options.push(&self.upper);
        options.push(",workdir=");
        options.push(&self.work);
        options
    }
}

/// Runs `command`; its stdout, or an error with `what` and its stderr.
pub(super) fn run(mut command: Command, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let output = command.output().with_context(|| format!("cannot run {}", command.get_program().to_string_lossy()))?;
    if !output.status.success() {
        crate::bail!("{} failed ({}): {}", what(), output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(output.stdout)
}

/// `paths` in runs of at most [`FIND_ARGUMENT_BYTES`] (at least one each).
fn argument_chunks(paths: &[PathBuf]) -> Vec<&[PathBuf]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < paths.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < paths.len() && (end == start || bytes + paths[end].as_os_str().len() < FIND_ARGUMENT_BYTES) {
            bytes += paths[end].as_os_str().len() + 1;
            end += 1;
        }
        chunks.push(&paths[start..end]);
        start = end;
    }
    chunks
}
