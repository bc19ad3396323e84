//! The State Anchor (design document "State Anchor", issue 8): each of a
//! profile's `persistent_dirs` is a fuse-overlayfs mount on the host whose
//! lower directory is that directory in the image's own root (`podman image
//! mount`) and whose upper and work directories live in the Domain Root. The
//! merged directory is bind-mounted read-write over the same path in the
//! sandbox, so what the agent writes there survives teardown, and a rebuilt
//! image shows through wherever the agent did not write.
//!
//! Files in the Domain Root, for a persistent directory named `<name>` (see
//! [`dir_name`]):
//! - `<name>_changes`: the upper directory, i.e. everything the agent changed.
//!   Its root takes the mode and owner of the image's directory (it is what
//!   the sandbox sees as that directory; 0700 would lock non-root users out).
//! - `<name>_work` (0700): fuse-overlayfs' work directory.
//! - `<name>_merged` (0700): the mount point.
//! - `<name>_base.json`: for each path in `<name>_changes`, the image's
//!   version of that path (kind, size, mtime, mode, owner, link target) when
//!   the agent's change was first recorded: at `unmount` (or `recover`),
//!   from the image root of the session that made it, before that image is
//!   unmounted. `diff` compares it with the current image: a difference is
//!   "M!"/"D!" (both changed; the agent's version wins).
//! - `state_anchor.json`: what is mounted now (image ID, image root, dirs);
//!   present from `mount` until `unmount`, so `recover` can finish the job of
//!   a coordinator killed with SIGKILL.
//! - `state_anchor_empty`: an empty lower directory for a persistent
//!   directory that the image does not have.
//!
//! Rootless, the image mount and every fuse-overlayfs mount live in the mount
//! namespace of podman's per-user pause process: every command that mounts,
//! unmounts or reads them runs under `podman unshare`, and reading the
//! image's files and the upper directories (which may hold files owned by
//! subordinate uids) uses GNU `find -printf` there. As root everything runs on
//! the host and is read in-process.
//!
//! Whiteouts: fuse-overlayfs 1.10 deletes with a character device 0/0 in the
//! upper directory, root and rootless alike (the kernel allows that mknod in a
//! user namespace), and falls back to an empty `.wh.<name>` file where mknod
//! is refused. A directory deleted and recreated is opaque: the
//! `trusted.overlay.opaque` (root) or `user.fuseoverlayfs.opaque` xattr plus
//! an empty `.wh..wh..opq` file, which it always creates. gVisor refuses
//! mknod of device nodes inside the sandbox (EPERM), so every character
//! device in an upper directory is fuse-overlayfs' own whiteout.
//!
//! `/etc`: podman bind-mounts its `/etc/hosts`, `/etc/hostname` (and, with a
//! network, `/etc/resolv.conf`) over a bind-mounted `/etc` too, under runsc,
//! root and rootless; the mount points it creates land in the upper directory
//! as empty files. `mount` and `unmount` delete those three paths from the
//! upper directory, so they never carry over from one session to the next
//! (with `--network=none` podman provides no resolv.conf, and none from an
//! earlier session appears), and `diff` never lists them.
//!
//! gVisor file access: these are ordinary bind mounts, so runsc serves them
//! with `--file-access-mounts=shared` (its default; the flag is global):
//! gVisor revalidates its dentry cache against the host on each access.
//! Nothing writes to a merged directory from the host while the sandbox runs,
//! so `exclusive` would be correct for the overlays, but the same flag
//! governs the workspace bind mount, whose host-side changes must be seen;
//! and measured here, `exclusive` did not make unpacking 10,000 files into an
//! overlaid `/usr` measurably faster (the cost is gVisor's, not revalidation).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fmt;
use std::fs::Metadata;
use std::io::ErrorKind;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Context, Result};
use crate::podman::Podman;
use crate::{bail, format_err};

/// Suffix of the upper directory.
pub const CHANGES_SUFFIX: &str = "_changes";
/// Suffix of the fuse-overlayfs work directory.
pub const WORK_SUFFIX: &str = "_work";
/// Suffix of the mount point.
pub const MERGED_SUFFIX: &str = "_merged";
/// Suffix of the base manifest (see the module comment).
pub const BASE_SUFFIX: &str = "_base.json";
/// What is mounted now; removed by `unmount` and `recover`.
pub const STATE_FILE: &str = "state_anchor.json";
/// Lower directory for a persistent directory the image lacks.
const EMPTY_LOWER: &str = "state_anchor_empty";
/// Files the container runtime provides; never persisted, never listed.
pub const RUNTIME_FILES: [&str; 3] = ["/etc/resolv.conf", "/etc/hosts", "/etc/hostname"];

/// `NAME_MAX` of Linux file systems.
const NAME_MAX: usize = 255;
/// fuse-overlayfs' marker of an opaque directory.
const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// Prefix of fuse-overlayfs' and OCI's file-style whiteouts.
const WHITEOUT_PREFIX: &str = ".wh.";
/// GNU find record: kind, size, mtime, mode, uid, gid, link target, path.
const FIND_FORMAT: &str = "%y\\0%s\\0%T@\\0%m\\0%U\\0%G\\0%l\\0%p\\0";
const FIND_FIELDS: usize = 8;
/// Bytes of path arguments per `find` or `sha256sum` invocation.
const FIND_ARGUMENT_BYTES: usize = 64 * 1024;

// ---------------------------------------------------------------------------
// Names

/// The file name stem of a persistent directory inside the Domain Root.
///
/// The path is normalized (`.` segments and trailing slashes dropped); its
/// segments are joined with `_`; within a segment ASCII letters, digits, `.`
/// and `-` stay and every other byte, `_` included, becomes `%XX`
/// (uppercase hex). So `/usr` is `usr`, `/home/agent` is `home_agent`,
/// `/home_agent` is `home%5Fagent`. The encoding is injective: a `_` always
/// separates segments and `%` is always followed by two hex digits. A name that
/// would make `<name>_base.json` longer than `NAME_MAX` becomes `%%` and the
/// SHA-256 of the normalized path in hex (a shape no short name can have).
/// Every file of a directory is `<name>` plus one of the fixed suffixes, none
/// of which is a suffix of another, so files of different directories never
/// collide.
pub fn dir_name(container_path: &Path) -> Result<String> {
    let segments = normalized_segments(container_path)?;
    let mut name = String::new();
    for (index, segment) in segments.iter().enumerate() {
        if index > 0 {
            name.push('_');
        }
        for &byte in *segment {
            if byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-' {
                name.push(char::from(byte));
            } else {
                push_percent(&mut name, byte);
            }
        }
    }
    if name.len() + BASE_SUFFIX.len() > NAME_MAX {
        let mut hasher = Sha256::new();
        for segment in &segments {
            hasher.update(b"/");
            hasher.update(segment);
        }
        name = format!("%%{}", lazaret_core::ids::hex(&hasher.finalize()));
    }
    Ok(name)
}

/// The segments of an absolute container path; `..` and `/` are refused.
fn normalized_segments(container_path: &Path) -> Result<Vec<&[u8]>> {
    if !container_path.is_absolute() {
        bail!("persistent directory {} is not an absolute path", container_path.display());
    }
    let mut segments = Vec::new();
    for component in container_path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(segment) => segments.push(segment.as_bytes()),
            Component::ParentDir | Component::Prefix(_) => {
                bail!("persistent directory {} contains `..`", container_path.display())
            }
        }
    }
    if segments.is_empty() {
        bail!("`/` cannot be a persistent directory");
    }
    Ok(segments)
}

fn push_percent(text: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    text.push('%');
    text.push(char::from(HEX[usize::from(byte >> 4)]));
    text.push(char::from(HEX[usize::from(byte & 0xf)]));
}

/// Bytes as printable ASCII: `%XX` for `%`, space, control and non-ASCII
/// bytes. Keys and link targets of the base manifest (paths need not be UTF-8).
fn escape_bytes(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &byte in bytes {
        if (0x21..=0x7e).contains(&byte) && byte != b'%' {
            text.push(char::from(byte));
        } else {
            push_percent(&mut text, byte);
        }
    }
    text
}

/// fuse-overlayfs splits `-o` on `,` and its layer lists on `:`, libfuse
/// treats `\` as an escape and a leading `//` as a plugin; podman splits
/// `--mount` on `,`. Such paths are refused rather than escaped.
fn check_mountable(path: &Path, what: &str) -> Result<()> {
    let bytes = path.as_os_str().as_bytes();
    if let Some(byte) = bytes.iter().find(|byte| matches!(byte, b',' | b':' | b'\\' | b'\n')) {
        bail!("{what} {} contains {:?}, which fuse-overlayfs and podman mount options cannot carry", path.display(), char::from(*byte));
    }
    if !path.is_absolute() || bytes.starts_with(b"//") {
        bail!("{what} {} must be an absolute path starting with a single `/`", path.display());
    }
    Ok(())
}

fn changes_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{CHANGES_SUFFIX}"))
}

fn work_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{WORK_SUFFIX}"))
}

fn merged_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{MERGED_SUFFIX}"))
}

fn base_manifest_path(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{BASE_SUFFIX}"))
}

/// (container path, name) of each persistent directory; duplicates refused.
fn plan(persistent_dirs: &[PathBuf]) -> Result<Vec<(PathBuf, String)>> {
    let mut seen = BTreeSet::new();
    let mut planned = Vec::new();
    for dir in persistent_dirs {
        let name = dir_name(dir)?;
        if !seen.insert(name.clone()) {
            bail!("persistent directory {} is listed twice", dir.display());
        }
        planned.push((dir.clone(), name));
    }
    Ok(planned)
}

// ---------------------------------------------------------------------------
// Where mounts live, and the commands that reach them

/// Rootful podman mounts on the host; rootless podman in the mount namespace
/// of its pause process, reached with `podman unshare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Host,
    Rootless,
}

/// Runs commands and reads files where the mounts are.
#[derive(Debug, Clone)]
struct Reach {
    namespace: Namespace,
    podman: Podman,
}

impl Reach {
    fn current() -> Reach {
        let namespace = if nix::unistd::geteuid().is_root() { Namespace::Host } else { Namespace::Rootless };
        Reach { namespace, podman: Podman::default() }
    }

    /// `program` in the mounts' namespace, with podman's clean environment
    /// and the C locale (error messages are parsed).
    fn command(&self, program: &str) -> Command {
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

    fn mount_image(&self, image: &str) -> Result<ImageMount> {
        let mut inspect = self.podman.command();
        inspect.args(["image", "inspect", "--format", "{{.Id}}", "--", image]).env("LC_ALL", "C").stdin(Stdio::null());
        let id = String::from_utf8_lossy(&run(inspect, || format!("podman image inspect {image}"))?).trim().to_owned();
        if id.len() != 64 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            bail!("podman image inspect {image} printed {id:?}, not an image ID");
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
    fn unmount_image(&self, id: &str) -> Result<()> {
        let mut unmount = self.podman_command();
        unmount.args(["image", "unmount", id]);
        run(unmount, || format!("podman image unmount {id}")).map(drop)
    }

    /// Mounts each overlay, in order, stopping at the first failure. Returns
    /// which are mounted and, on failure, the index that failed and why.
    /// Rootless, all run in one `podman unshare`.
    fn mount_overlays(&self, overlays: &[Overlay]) -> (Vec<bool>, Option<(usize, crate::Error)>) {
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
    fn unmount_overlays(&self, merged: &[PathBuf], stacked: bool) -> Result<()> {
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
                bail!("overlays stay mounted after repeated fusermount3 -u: {merged:?}")
            }
        }
    }

    /// The mount points of the mounts' namespace.
    fn mount_table(&self) -> Result<Vec<MountPoint>> {
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
    fn list_trees(&self, roots: &[PathBuf]) -> Result<Vec<Vec<Entry>>> {
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
                    bail!("podman unshare find {roots:?}: {}", String::from_utf8_lossy(&output.stderr).trim());
                }
                for (path, fingerprint) in parse_find_output(&output.stdout)? {
                    let Some((index, relative)) =
                        roots.iter().enumerate().find_map(|(index, root)| path.strip_prefix(root).ok().map(|rel| (index, rel.to_owned())))
                    else {
                        bail!("find printed {} outside {roots:?}", path.display());
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
    fn stat_paths(&self, paths: &[PathBuf]) -> Result<Vec<Option<Fingerprint>>> {
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
                        bail!("podman unshare find: {}", stderr.trim());
                    }
                    found.extend(parse_find_output(&output.stdout)?);
                }
                Ok(paths.iter().map(|path| found.get(path).cloned()).collect())
            }
        }
    }

    /// SHA-256 (lowercase hex) of each regular file.
    fn hash_files(&self, paths: &[PathBuf]) -> Result<Vec<String>> {
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
                    .map(|path| hashes.remove(path).ok_or_else(|| format_err!("sha256sum printed no hash for {}", path.display())))
                    .collect()
            }
        }
    }

    /// Removes directory trees (rootless: they may hold files of subordinate uids).
    fn remove_trees(&self, trees: &[PathBuf]) -> Result<()> {
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
struct Overlay {
    lower: PathBuf,
    upper: PathBuf,
    work: PathBuf,
    merged: PathBuf,
}

impl Overlay {
    /// fuse-overlayfs' `-o` (paths checked by [`check_mountable`]).
    fn options(&self) -> std::ffi::OsString {
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
fn run(mut command: Command, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let output = command.output().with_context(|| format!("cannot run {}", command.get_program().to_string_lossy()))?;
    if !output.status.success() {
        bail!("{} failed ({}): {}", what(), output.status, String::from_utf8_lossy(&output.stderr).trim());
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

/// find's complaints about starting points that do not exist.
fn only_missing_paths(stderr: &str) -> bool {
    stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .all(|line| line.starts_with("find: ") && (line.ends_with(": No such file or directory") || line.ends_with(": Not a directory")))
}

/// `umount2(path, flags)`: detaches the mount at `path` (the topmost one, if
/// stacked). Fails with EINVAL when `path` is not a mount point.
fn unmount_path(path: &Path, flags: i32) -> std::io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is a NUL-terminated string that lives across the call;
    // umount2 only reads it and has no other memory effects on this process.
    let status = unsafe { nix::libc::umount2(c_path.as_ptr(), flags) };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MountPoint {
    path: PathBuf,
    fs_type: String,
}

/// `/proc/<pid>/mountinfo`: field 5 is the mount point (octal escapes for
/// space, tab, newline and backslash), the field after ` - ` the type.
fn parse_mountinfo(text: &[u8]) -> Vec<MountPoint> {
    let mut mounts = Vec::new();
    for line in text.split(|&byte| byte == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&byte| byte == b' ').collect();
        let Some(separator) = fields.iter().position(|field| *field == b"-") else { continue };
        if fields.len() < 5 || separator < 6 || separator + 1 >= fields.len() {
            continue;
        }
        mounts.push(MountPoint {
            path: PathBuf::from(std::ffi::OsString::from_vec(unescape_octal(fields[4]))),
            fs_type: String::from_utf8_lossy(fields[separator + 1]).into_owned(),
        });
    }
    mounts
}

fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut index = 0;
    while index < field.len() {
        if field[index] == b'\\'
            && index + 4 <= field.len()
            && field[index + 1..index + 4].iter().all(|digit| (b'0'..=b'7').contains(digit))
        {
            let value = field[index + 1..index + 4].iter().fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
            bytes.push(u8::try_from(value).unwrap_or(b'?'));
            index += 4;
        } else {
            bytes.push(field[index]);
            index += 1;
        }
    }
    bytes
}

// ---------------------------------------------------------------------------
// File facts

/// What `diff` compares about a path: find's kind letter (`f d l c b p s`),
/// size, mtime, permission bits, owner, link target (escaped) and, for a
/// regular file of the image recorded as a base, its SHA-256 (image layers
/// keep mtimes to the second, so a rebuilt file of the same size can carry
/// the same metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fingerprint {
    kind: char,
    size: u64,
    mtime_sec: i64,
    mtime_nsec: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

impl Fingerprint {
    /// Equal in everything but the content hash.
    fn same_metadata(&self, other: &Fingerprint) -> bool {
        Fingerprint { sha256: None, ..self.clone() } == Fingerprint { sha256: None, ..other.clone() }
    }
}

/// One entry of an upper directory, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    relative: PathBuf,
    fingerprint: Fingerprint,
    /// A character device 0/0.
    whiteout: bool,
}

fn fingerprint_of(path: &Path, metadata: &Metadata) -> Result<(Fingerprint, bool)> {
    let file_type = metadata.file_type();
    let kind = if file_type.is_file() {
        'f'
    } else if file_type.is_dir() {
        'd'
    } else if file_type.is_symlink() {
        'l'
    } else if file_type.is_char_device() {
        'c'
    } else if file_type.is_block_device() {
        'b'
    } else if file_type.is_fifo() {
        'p'
    } else if file_type.is_socket() {
        's'
    } else {
        '?'
    };
    let target = if kind == 'l' {
        let target = std::fs::read_link(path).with_context(|| format!("cannot read the link {}", path.display()))?;
        escape_bytes(target.as_os_str().as_bytes())
    } else {
        String::new()
    };
    let fingerprint = Fingerprint {
        kind,
        size: metadata.size(),
        mtime_sec: metadata.mtime(),
        mtime_nsec: u32::try_from(metadata.mtime_nsec()).unwrap_or(0),
        mode: metadata.mode() & 0o7777,
        uid: metadata.uid(),
        gid: metadata.gid(),
        target,
        sha256: None,
    };
    Ok((fingerprint, kind == 'c' && metadata.rdev() == 0))
}

fn list_tree_in_process(root: &Path) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative_dir) = pending.pop() {
        let dir = root.join(&relative_dir);
        let mut children: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .collect::<std::io::Result<Vec<_>>>()
            .with_context(|| format!("cannot list {}", dir.display()))?;
        children.sort_by_key(std::fs::DirEntry::file_name);
        let mut subdirs = Vec::new();
        for child in children {
            let path = child.path();
            let metadata = std::fs::symlink_metadata(&path).with_context(|| format!("cannot stat {}", path.display()))?;
            let (fingerprint, whiteout) = fingerprint_of(&path, &metadata)?;
            let relative = relative_dir.join(child.file_name());
            if fingerprint.kind == 'd' {
                subdirs.push(relative.clone());
            }
            entries.push(Entry { relative, fingerprint, whiteout });
        }
        pending.extend(subdirs.into_iter().rev());
    }
    entries.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(entries)
}

/// Records of [`FIND_FORMAT`].
fn parse_find_output(output: &[u8]) -> Result<Vec<(PathBuf, Fingerprint)>> {
    let mut fields: Vec<&[u8]> = output.split(|&byte| byte == 0).collect();
    if fields.last().is_some_and(|last| last.is_empty()) {
        fields.pop();
    }
    let records_fields = fields.chunks_exact(FIND_FIELDS);
    if !records_fields.remainder().is_empty() {
        bail!("unexpected find output ({} fields)", fields.len());
    }
    let text = |field: &[u8]| String::from_utf8_lossy(field).into_owned();
    let number = |field: &[u8], radix: u32| -> Result<u64> {
        u64::from_str_radix(&text(field), radix).map_err(|_| format_err!("unexpected number {:?} in find output", text(field)))
    };
    let mut records = Vec::new();
    for record in records_fields {
        let kind = record[0].first().map(|&byte| char::from(byte)).ok_or_else(|| format_err!("empty kind in find output"))?;
        let (mtime_sec, mtime_nsec) = parse_find_time(&text(record[2]))?;
        let fingerprint = Fingerprint {
            kind,
            size: number(record[1], 10)?,
            mtime_sec,
            mtime_nsec,
            mode: u32::try_from(number(record[3], 8)?)?,
            uid: u32::try_from(number(record[4], 10)?)?,
            gid: u32::try_from(number(record[5], 10)?)?,
            target: if kind == 'l' { escape_bytes(record[6]) } else { String::new() },
            sha256: None,
        };
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(record[7]));
        records.push((path, fingerprint));
    }
    Ok(records)
}

/// `%T@`: seconds, a dot and up to 10 fractional digits.
fn parse_find_time(text: &str) -> Result<(i64, u32)> {
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, ""));
    let seconds: i64 = seconds.parse().map_err(|_| format_err!("unexpected time {text:?} in find output"))?;
    let mut digits: String = fraction.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    let nanoseconds: u32 = digits.parse().map_err(|_| format_err!("unexpected time {text:?} in find output"))?;
    Ok((seconds, nanoseconds))
}

// ---------------------------------------------------------------------------
// Upper directories and their classification

/// A path of an upper directory, as the merged view sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// The agent deleted what the image has here.
    Whiteout,
    Dir {
        opaque: bool,
        fingerprint: Fingerprint,
    },
    Other(Fingerprint),
}

/// Turns a listing into nodes: `.wh.` names become whiteouts or the opaque
/// flag of their directory; fuse-overlayfs' other `.wh.` names are hidden
/// from the merged view and skipped.
fn upper_nodes(entries: &[Entry]) -> Vec<(PathBuf, Node)> {
    let mut opaque = BTreeSet::new();
    let mut nodes = BTreeMap::new();
    for entry in entries {
        let name = entry.relative.file_name().map(|name| name.as_bytes()).unwrap_or_default();
        let parent = entry.relative.parent().map(Path::to_path_buf).unwrap_or_default();
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
            if name == OPAQUE_MARKER.as_bytes() {
                opaque.insert(parent);
            } else if entry.fingerprint.kind == 'f' && !hidden.is_empty() && !hidden.starts_with(WHITEOUT_PREFIX.as_bytes()) {
                nodes.entry(parent.join(std::ffi::OsStr::from_bytes(hidden))).or_insert(Node::Whiteout);
            }
            continue;
        }
        let node = if entry.whiteout {
            Node::Whiteout
        } else if entry.fingerprint.kind == 'd' {
            Node::Dir { opaque: false, fingerprint: entry.fingerprint.clone() }
        } else {
            Node::Other(entry.fingerprint.clone())
        };
        nodes.insert(entry.relative.clone(), node);
    }
    for dir in opaque {
        if let Some(Node::Dir { opaque, .. }) = nodes.get_mut(&dir) {
            *opaque = true;
        }
    }
    let mut nodes: Vec<(PathBuf, Node)> = nodes.into_iter().collect();
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    nodes
}

/// What the agent did to a path of a persistent directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    /// `A`: not in the image.
    Added,
    /// `M`: the agent's version hides the image's.
    Modified,
    /// `M!`: modified, and the image changed (or added, or removed) this path
    /// since the agent's change was recorded; the agent's version wins.
    ModifiedConflict,
    /// `D`: deleted; the image still has it.
    Deleted,
    /// `D!`: deleted, and the image changed this path since.
    DeletedConflict,
}

impl ChangeKind {
    /// The one- or two-letter code `lazaret state diff` prints.
    pub fn code(self) -> &'static str {
        match self {
            ChangeKind::Added => "A",
            ChangeKind::Modified => "M",
            ChangeKind::ModifiedConflict => "M!",
            ChangeKind::Deleted => "D",
            ChangeKind::DeletedConflict => "D!",
        }
    }
}

/// One line of `lazaret state diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    /// The persistent directory (container path).
    pub dir: PathBuf,
    /// The changed path (container path).
    pub path: PathBuf,
    pub kind: ChangeKind,
}

impl fmt::Display for StateChange {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:<2} {}", self.kind.code(), self.path.display())
    }
}

/// Classifies one node. `lower` is the image's path now; `base` the image's
/// path when the change was recorded (`None`: not recorded; `Some(None)`:
/// the image did not have it).
fn classify(node: &Node, lower: Option<&Fingerprint>, base: Option<&Option<Fingerprint>>) -> Option<ChangeKind> {
    // A recorded hash counts only where the current file was hashed too
    // (`diff` hashes exactly where the metadata alone cannot tell).
    let base_changed = base.is_some_and(|base| match (base, lower) {
        (Some(base), Some(lower)) if lower.sha256.is_none() => !base.same_metadata(lower),
        (base, lower) => base.as_ref() != lower,
    });
    match node {
        Node::Whiteout => match (lower, base_changed) {
            (Some(_), false) => Some(ChangeKind::Deleted),
            (Some(_), true) => Some(ChangeKind::DeletedConflict),
            // Nothing to hide: the image removed it too, or never had it.
            (None, true) => Some(ChangeKind::DeletedConflict),
            (None, false) => None,
        },
        Node::Dir { opaque, fingerprint } => match lower {
            None => Some(ChangeKind::Added),
            Some(lower) if lower.kind != 'd' || *opaque => Some(ChangeKind::Modified),
            Some(lower) if (lower.mode, lower.uid, lower.gid) != (fingerprint.mode, fingerprint.uid, fingerprint.gid) => {
                Some(ChangeKind::Modified)
            }
            Some(_) => None,
        },
        Node::Other(_) => match (lower, base_changed) {
            (_, true) => Some(ChangeKind::ModifiedConflict),
            (None, false) => Some(ChangeKind::Added),
            (Some(_), false) => Some(ChangeKind::Modified),
        },
    }
}

/// Removes [`RUNTIME_FILES`] (and file-style whiteouts of them) from the
/// upper directory: podman's mount points for them land there.
fn scrub_runtime_files(mount: &PersistentMount) {
    for file in RUNTIME_FILES {
        let Ok(relative) = Path::new(file).strip_prefix(&mount.container_path) else { continue };
        let Some(name) = relative.file_name() else { continue };
        let mut whiteout = std::ffi::OsString::from(WHITEOUT_PREFIX);
        whiteout.push(name);
        for stale in [mount.changes.join(relative), mount.changes.join(relative).with_file_name(whiteout)] {
            match std::fs::remove_file(&stale) {
                Ok(()) => tracing::debug!(path = %stale.display(), "removed a runtime file from the changes"),
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(path = %stale.display(), %error, "cannot remove a runtime file from the changes"),
            }
        }
    }
}

/// Is `container_path` one of [`RUNTIME_FILES`]?
fn is_runtime_file(container_path: &Path) -> bool {
    RUNTIME_FILES.iter().any(|file| Path::new(file) == container_path)
}

// ---------------------------------------------------------------------------
// The base manifest

#[derive(Debug, Default, Serialize, Deserialize)]
struct BaseManifest {
    version: u32,
    /// Escaped relative path -> the image's version (`None`: absent).
    entries: BTreeMap<String, Option<Fingerprint>>,
}

const MANIFEST_VERSION: u32 = 1;

impl BaseManifest {
    fn load(path: &Path) -> Result<BaseManifest> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("cannot parse {}", path.display())),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(BaseManifest { version: MANIFEST_VERSION, ..BaseManifest::default() }),
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Written to a temporary file and renamed over, so a crash leaves
    /// either version.
    fn save(&self, path: &Path) -> Result<()> {
        let temporary = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(self)?;
        std::fs::write(&temporary, bytes).with_context(|| format!("cannot write {}", temporary.display()))?;
        std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))
    }

    fn key(relative: &Path) -> String {
        escape_bytes(relative.as_os_str().as_bytes())
    }
}

/// Nodes whose image version the manifest keeps: everything but directories.
fn recorded(node: &Node) -> bool {
    !matches!(node, Node::Dir { .. })
}

// ---------------------------------------------------------------------------
// Lower directories

/// Where `dir` would be in the image: the image root joined with its segments.
fn lower_candidate(image_root: &Path, dir: &Path) -> Result<PathBuf> {
    let mut path = image_root.to_path_buf();
    for segment in normalized_segments(dir)? {
        path.push(std::ffi::OsStr::from_bytes(segment));
    }
    Ok(path)
}

/// A persistent directory in the image: its path (`None` when the image does
/// not have it) and its attributes.
type Lower = (Option<PathBuf>, Option<Fingerprint>);

/// Resolves each persistent directory inside the image root and, in the same
/// query, stats `extra[i]` (paths below the directories' candidates). Every
/// segment must be a real directory: a symbolic link in the image could point
/// anywhere on the host, since fuse-overlayfs resolves the lower path there.
fn resolve_lowers(reach: &Reach, image_root: &Path, dirs: &[PathBuf], extra: &[PathBuf]) -> Result<(Vec<Lower>, Vec<Option<Fingerprint>>)> {
    let mut prefixes_of = Vec::new();
    let mut all = Vec::new();
    for dir in dirs {
        let mut prefix = image_root.to_path_buf();
        let mut prefixes = Vec::new();
        for segment in normalized_segments(dir)? {
            prefix.push(std::ffi::OsStr::from_bytes(segment));
            prefixes.push(all.len());
            all.push(prefix.clone());
        }
        prefixes_of.push(prefixes);
    }
    let first_extra = all.len();
    all.extend_from_slice(extra);
    let mut stats = reach.stat_paths(&all)?;
    let extra_stats = stats.split_off(first_extra);
    let mut lowers = Vec::new();
    for (dir, prefixes) in dirs.iter().zip(prefixes_of) {
        let mut resolved = None;
        for (position, &index) in prefixes.iter().enumerate() {
            match &stats[index] {
                None => break,
                Some(fingerprint) if fingerprint.kind == 'l' => bail!(
                    "persistent directory {}: {} is a symbolic link in the image; list the directory it points to instead",
                    dir.display(),
                    all[index].strip_prefix(image_root).map(|rel| Path::new("/").join(rel)).unwrap_or_default().display()
                ),
                Some(fingerprint) if fingerprint.kind != 'd' => {
                    bail!("persistent directory {}: the image has a non-directory there", dir.display())
                }
                Some(fingerprint) if position + 1 == prefixes.len() => resolved = Some((all[index].clone(), fingerprint.clone())),
                Some(_) => {}
            }
        }
        lowers.push(match resolved {
            Some((path, fingerprint)) => (Some(path), Some(fingerprint)),
            None => (None, None),
        });
    }
    Ok((lowers, extra_stats))
}

/// Upper listings (as nodes) of the directories whose `_changes` exists.
fn upper_listings(reach: &Reach, domain_dir: &Path, planned: &[(PathBuf, String)]) -> Result<Vec<Vec<(PathBuf, Node)>>> {
    let mut roots = Vec::new();
    let mut index_of = Vec::new();
    for (_, name) in planned {
        let changes = changes_dir(domain_dir, name);
        if std::fs::symlink_metadata(&changes).is_ok_and(|metadata| metadata.is_dir()) {
            index_of.push(Some(roots.len()));
            roots.push(changes);
        } else {
            index_of.push(None);
        }
    }
    let mut trees = reach.list_trees(&roots)?;
    Ok(index_of.into_iter().map(|index| index.map(|index| upper_nodes(&std::mem::take(&mut trees[index]))).unwrap_or_default()).collect())
}

/// A path of an upper directory next to the image's current version of it.
struct Compared {
    relative: PathBuf,
    node: Node,
    /// `None` where the image has nothing.
    current: Option<Fingerprint>,
    /// Where the image's version is (or would be).
    lower_path: PathBuf,
}

/// Lists the upper directories and looks up every listed path in the image
/// (two queries in all).
fn compare_with_image(reach: &Reach, domain_dir: &Path, planned: &[(PathBuf, String)], image_root: &Path) -> Result<Vec<Vec<Compared>>> {
    let dirs: Vec<PathBuf> = planned.iter().map(|(dir, _)| dir.clone()).collect();
    let listings = upper_listings(reach, domain_dir, planned)?;
    let mut extra = Vec::new();
    for (dir, nodes) in dirs.iter().zip(&listings) {
        let candidate = lower_candidate(image_root, dir)?;
        extra.extend(nodes.iter().map(|(relative, _)| candidate.join(relative)));
    }
    let (lowers, stats) = resolve_lowers(reach, image_root, &dirs, &extra)?;
    let mut stats = stats.into_iter();
    let mut lower_paths = extra.into_iter();
    let mut compared = Vec::new();
    for (listing, (lower, _)) in listings.into_iter().zip(&lowers) {
        let mut nodes = Vec::new();
        for (relative, node) in listing {
            // Without the directory in the image nothing below it is there.
            let current = stats.next().flatten().filter(|_| lower.is_some());
            let lower_path = lower_paths.next().unwrap_or_default();
            nodes.push(Compared { relative, node, current, lower_path });
        }
        compared.push(nodes);
    }
    Ok(compared)
}

/// Adds to each base manifest the image's version (from `image_root`, the
/// lower of the session that made them) of upper paths it lacks, with the
/// SHA-256 of regular files, and drops paths no longer in the upper directory.
fn record_bases(reach: &Reach, domain_dir: &Path, planned: &[(PathBuf, String)], image_root: &Path) -> Result<()> {
    let compared = compare_with_image(reach, domain_dir, planned, image_root)?;
    let mut manifests = Vec::new();
    let mut to_hash: Vec<(usize, String, PathBuf)> = Vec::new();
    for ((_, name), nodes) in planned.iter().zip(compared) {
        let path = base_manifest_path(domain_dir, name);
        let mut manifest = BaseManifest::load(&path)?;
        let present: BTreeSet<String> =
            nodes.iter().filter(|node| recorded(&node.node)).map(|node| BaseManifest::key(&node.relative)).collect();
        let before = manifest.entries.len();
        manifest.entries.retain(|key, _| present.contains(key));
        let mut changed = manifest.entries.len() != before;
        for compared in nodes {
            if !recorded(&compared.node) {
                continue;
            }
            if let std::collections::btree_map::Entry::Vacant(entry) = manifest.entries.entry(BaseManifest::key(&compared.relative)) {
                if compared.current.as_ref().is_some_and(|current| current.kind == 'f') {
                    to_hash.push((manifests.len(), entry.key().clone(), compared.lower_path));
                }
                entry.insert(compared.current);
                changed = true;
            }
        }
        manifests.push((path, manifest, changed));
    }
    let paths: Vec<PathBuf> = to_hash.iter().map(|(_, _, path)| path.clone()).collect();
    let hashes = reach.hash_files(&paths)?;
    for ((index, key, _), hash) in to_hash.into_iter().zip(hashes) {
        if let Some(Some(fingerprint)) = manifests[index].1.entries.get_mut(&key) {
            fingerprint.sha256 = Some(hash);
        }
    }
    for (path, mut manifest, changed) in manifests {
        if changed {
            manifest.version = MANIFEST_VERSION;
            manifest.save(&path)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The mounted State Anchor

/// One persistent directory, mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentMount {
    /// The path inside the sandbox.
    pub container_path: PathBuf,
    /// The fuse-overlayfs mount point, bind-mounted at `container_path`.
    pub merged: PathBuf,
    /// The upper directory: the agent's changes.
    pub changes: PathBuf,
    pub work: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MountRecord {
    image: String,
    image_id: String,
    image_root: PathBuf,
    dirs: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
struct ImageMount {
    id: String,
    root: PathBuf,
}

#[derive(Debug, Default)]
struct Mounted {
    /// Which of `mounts` are mounted.
    overlays: Vec<bool>,
    image: bool,
}

/// The persistent directories of one running domain.
#[derive(Debug)]
pub struct StateAnchor {
    domain_dir: PathBuf,
    reach: Reach,
    image: Option<ImageMount>,
    planned: Vec<(PathBuf, String)>,
    mounts: Vec<PersistentMount>,
    mounted: Mutex<Mounted>,
}

impl StateAnchor {
    /// Resolves the image's root (`podman image mount`, inside `podman
    /// unshare` when not root) and mounts one fuse-overlayfs per persistent
    /// directory (see the module comment for the files). If the record of an
    /// earlier mount is still there, [`recover`]s first. On failure unmounts
    /// what it mounted and names the directory. With no persistent
    /// directories it mounts nothing.
    pub fn mount(domain_dir: &Path, image: &str, persistent_dirs: &[PathBuf]) -> Result<StateAnchor> {
        let started = Instant::now();
        let planned = plan(persistent_dirs)?;
        let reach = Reach::current();
        // Mount tables show canonical paths; so must our mount points.
        let domain_dir = &domain_dir.canonicalize().with_context(|| format!("cannot resolve the Domain Root {}", domain_dir.display()))?;
        let mut anchor = StateAnchor {
            domain_dir: domain_dir.to_path_buf(),
            reach,
            image: None,
            planned: Vec::new(),
            mounts: Vec::new(),
            mounted: Mutex::new(Mounted::default()),
        };
        if planned.is_empty() {
            return Ok(anchor);
        }
        check_mountable(domain_dir, "the Domain Root")?;
        for (dir, _) in &planned {
            check_mountable(dir, "persistent directory")?;
        }
        if domain_dir.join(STATE_FILE).exists() {
            recover(domain_dir)?;
        }
        let image_mount = anchor.reach.mount_image(image)?;
        anchor.lock().image = true;
        anchor.image = Some(image_mount.clone());
        let record = MountRecord {
            image: image.to_owned(),
            image_id: image_mount.id.clone(),
            image_root: image_mount.root.clone(),
            dirs: planned.iter().map(|(dir, _)| dir.clone()).collect(),
        };
        let written = serde_json::to_vec(&record)
            .map_err(crate::Error::from)
            .and_then(|bytes| std::fs::write(domain_dir.join(STATE_FILE), bytes).map_err(crate::Error::from))
            .with_context(|| format!("cannot write {}", domain_dir.join(STATE_FILE).display()));
        let result = written.and_then(|()| anchor.mount_overlays(&image_mount.root, &planned));
        anchor.planned = planned;
        if let Err(error) = result {
            if let Err(cleanup) = anchor.unmount() {
                tracing::error!(error = %cleanup.chained(), "cannot undo a partial State Anchor mount");
            }
            return Err(error);
        }
        tracing::info!(dirs = anchor.mounts.len(), elapsed_ms = started.elapsed().as_millis() as u64, image = %image, "State Anchor mounted");
        Ok(anchor)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mounted> {
        self.mounted.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mount_overlays(&mut self, image_root: &Path, planned: &[(PathBuf, String)]) -> Result<()> {
        let dirs: Vec<PathBuf> = planned.iter().map(|(dir, _)| dir.clone()).collect();
        let (lowers, _) = resolve_lowers(&self.reach, image_root, &dirs, &[])?;
        let mut overlays = Vec::new();
        for ((dir, name), (lower, lower_fingerprint)) in planned.iter().zip(lowers) {
            let mount = PersistentMount {
                container_path: dir.clone(),
                merged: merged_dir(&self.domain_dir, name),
                changes: changes_dir(&self.domain_dir, name),
                work: work_dir(&self.domain_dir, name),
            };
            let lower = match lower {
                Some(lower) => lower,
                None => {
                    let empty = self.domain_dir.join(EMPTY_LOWER);
                    crate::private_dirs::ensure_private_dir(&empty)?;
                    empty
                }
            };
            self.prepare(&mount, lower_fingerprint.as_ref())
                .with_context(|| format!("cannot mount the persistent directory {}", dir.display()))?;
            tracing::debug!(dir = %dir.display(), lower = %lower.display(), "mounting an overlay");
            overlays.push(Overlay { lower, upper: mount.changes.clone(), work: mount.work.clone(), merged: mount.merged.clone() });
            self.mounts.push(mount);
        }
        let (mounted, failure) = self.reach.mount_overlays(&overlays);
        self.lock().overlays = mounted;
        match failure {
            None => Ok(()),
            Some((index, error)) => {
                Err(error).with_context(|| format!("cannot mount the persistent directory {}", self.mounts[index].container_path.display()))
            }
        }
    }

    /// Creates the three directories and removes the runtime's files from
    /// the upper directory (also done at unmount; this catches a crash).
    fn prepare(&self, mount: &PersistentMount, lower: Option<&Fingerprint>) -> Result<()> {
        crate::private_dirs::ensure_private_dir(&mount.work)?;
        crate::private_dirs::ensure_private_dir(&mount.merged)?;
        match std::fs::symlink_metadata(&mount.changes) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => bail!("{} is not a directory", mount.changes.display()),
            Err(error) if error.kind() == ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&mount.changes)
                    .with_context(|| format!("cannot create {}", mount.changes.display()))?;
                if let Err(error) = self.adopt_lower_attributes(&mount.changes, lower) {
                    let _ = std::fs::remove_dir(&mount.changes);
                    return Err(error);
                }
            }
            Err(error) => return Err(error).with_context(|| format!("cannot stat {}", mount.changes.display())),
        }
        scrub_runtime_files(mount);
        Ok(())
    }

    /// The upper directory's root is what the sandbox sees as the directory:
    /// it gets the image directory's mode and owner (0755 root without one).
    fn adopt_lower_attributes(&self, changes: &Path, lower: Option<&Fingerprint>) -> Result<()> {
        let (mode, uid, gid) = lower.map_or((0o755, 0, 0), |lower| (lower.mode, lower.uid, lower.gid));
        match self.reach.namespace {
            Namespace::Host => {
                std::os::unix::fs::lchown(changes, Some(uid), Some(gid)).with_context(|| format!("cannot chown {}", changes.display()))?;
                std::fs::set_permissions(changes, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("cannot chmod {}", changes.display()))
            }
            Namespace::Rootless => {
                // Ours is uid 0 in the namespace; another owner is a
                // subordinate uid, which only `podman unshare` can give.
                std::fs::set_permissions(changes, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("cannot chmod {}", changes.display()))?;
                if (uid, gid) != (0, 0) {
                    let mut chown = self.reach.command("chown");
                    chown.arg("-h").arg(format!("{uid}:{gid}")).arg(changes);
                    run(chown, || format!("podman unshare chown {}", changes.display()))?;
                }
                Ok(())
            }
        }
    }

    /// `--mount=type=bind,source=MERGED,destination=DIR` for each directory
    /// (read-write, private propagation: podman's defaults).
    pub fn podman_arguments(&self) -> Vec<String> {
        self.mounts
            .iter()
            .map(|mount| format!("--mount=type=bind,source={},destination={}", mount.merged.display(), mount.container_path.display()))
            .collect()
    }

    /// Records the base manifests, unmounts every overlay, then the image.
    /// Call after the container is gone (runsc's gofer holds its own copy of
    /// the mount, so unmounting earlier succeeds but leaves fuse-overlayfs
    /// serving the old container). Idempotent; a failed call can be retried.
    pub fn unmount(&self) -> Result<()> {
        let started = Instant::now();
        let mut mounted = self.lock();
        if !mounted.image && !mounted.overlays.iter().any(|&mounted| mounted) {
            return Ok(());
        }
        if let (true, Some(image)) = (mounted.image, &self.image) {
            let planned: Vec<(PathBuf, String)> = self.planned[..self.mounts.len()].to_vec();
            if let Err(error) = record_bases(&self.reach, &self.domain_dir, &planned, &image.root) {
                tracing::warn!(error = %error.chained(), "cannot record the image's versions of changed files; `state diff` will not flag conflicts for them");
            }
        }
        let merged: Vec<PathBuf> =
            self.mounts.iter().zip(&mounted.overlays).filter(|(_, &mounted)| mounted).map(|(mount, _)| mount.merged.clone()).collect();
        self.reach.unmount_overlays(&merged, false).context("cannot unmount the State Anchor overlays")?;
        mounted.overlays.iter_mut().for_each(|mounted| *mounted = false);
        self.mounts.iter().for_each(scrub_runtime_files);
        // The record goes before the image mount: a crash in between leaks
        // one image mount count, whereas the other order could make
        // `recover` release a count that another domain holds.
        match std::fs::remove_file(self.domain_dir.join(STATE_FILE)) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(error).context("cannot remove the State Anchor record"),
        }
        if let (true, Some(image)) = (mounted.image, &self.image) {
            self.reach.unmount_image(&image.id)?;
            mounted.image = false;
        }
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "State Anchor unmounted");
        Ok(())
    }
}

/// After a coordinator died without unmounting (SIGKILL): records the base
/// manifests if the old image root is still mounted, unmounts every
/// `<domain_dir>/*_merged` mount (in `podman unshare`'s namespace when
/// rootless), releases the old image mount and removes the record. Run it
/// only once the old container is removed and while holding the domain lock.
pub fn recover(domain_dir: &Path) -> Result<()> {
    let record_path = domain_dir.join(STATE_FILE);
    let record: Option<MountRecord> = match std::fs::read(&record_path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(record) => Some(record),
            Err(error) => {
                tracing::warn!(%error, path = %record_path.display(), "ignoring an unreadable State Anchor record");
                None
            }
        },
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", record_path.display())),
    };
    let has_mount_points = match std::fs::read_dir(domain_dir) {
        Ok(entries) => {
            entries.filter_map(std::result::Result::ok).any(|entry| entry.file_name().as_bytes().ends_with(MERGED_SUFFIX.as_bytes()))
        }
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("cannot list {}", domain_dir.display())),
    };
    if record.is_none() && !has_mount_points {
        return Ok(());
    }
    let canonical = domain_dir.canonicalize().with_context(|| format!("cannot resolve {}", domain_dir.display()))?;
    let reach = Reach::current();
    let table = reach.mount_table()?;
    let stale_mounts: Vec<PathBuf> = table
        .iter()
        .filter(|mount| {
            mount.path.parent() == Some(canonical.as_path())
                && mount.path.file_name().is_some_and(|name| name.as_bytes().ends_with(MERGED_SUFFIX.as_bytes()))
        })
        .map(|mount| mount.path.clone())
        .collect();
    let stale: BTreeSet<PathBuf> = stale_mounts.iter().cloned().collect();
    let stacked = stale.len() != stale_mounts.len();
    let image_mounted = record.as_ref().filter(|record| table.iter().any(|mount| mount.path == record.image_root));
    if let Some(record) = image_mounted {
        let recorded = plan(&record.dirs).and_then(|planned| record_bases(&reach, domain_dir, &planned, &record.image_root));
        if let Err(error) = recorded {
            tracing::warn!(error = %error.chained(), "cannot record the image's versions of changed files");
        }
    }
    if !stale.is_empty() {
        tracing::warn!(mounts = ?stale, "unmounting State Anchor overlays left by a coordinator that did not tear down");
        reach.unmount_overlays(&stale.into_iter().collect::<Vec<_>>(), stacked)?;
    }
    // As in `unmount`: the record first, then the image mount it accounts for.
    match std::fs::remove_file(&record_path) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot remove {}", record_path.display())),
    }
    if let Some(record) = image_mounted {
        if let Err(error) = reach.unmount_image(&record.image_id) {
            tracing::warn!(error = %error.chained(), "cannot release the image mount of the previous coordinator");
        }
    }
    Ok(())
}

/// `lazaret state diff`: what the agent added, modified or deleted in each
/// persistent directory, against the image as it is now (mounted for the
/// occasion). Reads the `<name>_changes` directories, the base manifests and
/// the image. Runtime files are never listed. Changes of a running session
/// get their base recorded at its teardown, so `M!` can flag them only after.
pub fn diff(domain_dir: &Path, image: &str, persistent_dirs: &[PathBuf]) -> Result<Vec<StateChange>> {
    let planned = plan(persistent_dirs)?;
    let reach = Reach::current();
    if !planned.iter().any(|(_, name)| changes_dir(domain_dir, name).is_dir()) {
        return Ok(Vec::new());
    }
    let image_mount = reach.mount_image(image)?;
    let result = diff_against(&reach, domain_dir, &planned, &image_mount.root);
    if let Err(error) = reach.unmount_image(&image_mount.id) {
        tracing::warn!(error = %error.chained(), "cannot release the image mount");
    }
    result
}

fn diff_against(reach: &Reach, domain_dir: &Path, planned: &[(PathBuf, String)], image_root: &Path) -> Result<Vec<StateChange>> {
    let mut compared = compare_with_image(reach, domain_dir, planned, image_root)?;
    let mut manifests = Vec::new();
    for (_, name) in planned {
        manifests.push(BaseManifest::load(&base_manifest_path(domain_dir, name))?);
    }
    // Where only the content can tell (same metadata as the recorded base,
    // which has a hash), hash the image's current file.
    let mut to_hash: Vec<(usize, usize)> = Vec::new();
    for (dir_index, (nodes, manifest)) in compared.iter().zip(&manifests).enumerate() {
        for (node_index, node) in nodes.iter().enumerate() {
            let base = manifest.entries.get(&BaseManifest::key(&node.relative));
            if let (Some(Some(base)), Some(current)) = (base, &node.current) {
                if base.sha256.is_some() && base.same_metadata(current) {
                    to_hash.push((dir_index, node_index));
                }
            }
        }
    }
    let paths: Vec<PathBuf> = to_hash.iter().map(|&(dir, node)| compared[dir][node].lower_path.clone()).collect();
    let hashes = reach.hash_files(&paths)?;
    for ((dir, node), hash) in to_hash.into_iter().zip(hashes) {
        if let Some(current) = &mut compared[dir][node].current {
            current.sha256 = Some(hash);
        }
    }
    let mut changes = Vec::new();
    for (((dir, _), nodes), manifest) in planned.iter().zip(compared).zip(&manifests) {
        changes.extend(classify_nodes(dir, &nodes, manifest));
    }
    Ok(changes)
}

fn classify_nodes(dir: &Path, nodes: &[Compared], manifest: &BaseManifest) -> Vec<StateChange> {
    let mut changes = Vec::new();
    for compared in nodes {
        let path = dir.join(&compared.relative);
        if is_runtime_file(&path) {
            continue;
        }
        let base = if recorded(&compared.node) { manifest.entries.get(&BaseManifest::key(&compared.relative)) } else { None };
        if let Some(kind) = classify(&compared.node, compared.current.as_ref(), base) {
            changes.push(StateChange { dir: dir.to_path_buf(), path, kind });
        }
    }
    changes
}

/// `lazaret state reset`: discards the agent's changes (`<name>_changes`,
/// `<name>_work` and the base manifest) of the given directories. Refuses
/// while one of them is mounted; the caller also checks that the domain is
/// not running. The next mount starts from the image alone.
pub fn reset(domain_dir: &Path, persistent_dirs: &[PathBuf]) -> Result<()> {
    let planned = plan(persistent_dirs)?;
    let reach = Reach::current();
    let domain_dir = &match domain_dir.canonicalize() {
        Ok(canonical) => canonical,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("cannot resolve {}", domain_dir.display())),
    };
    let mount_points: Vec<PathBuf> =
        planned.iter().map(|(_, name)| merged_dir(domain_dir, name)).filter(|path| std::fs::symlink_metadata(path).is_ok()).collect();
    if !mount_points.is_empty() {
        let table = reach.mount_table()?;
        if let Some(mounted) = mount_points.iter().find(|path| table.iter().any(|mount| &mount.path == *path)) {
            bail!("{} is mounted: the domain is running; stop it before resetting its state", mounted.display());
        }
    }
    let trees: Vec<PathBuf> = planned.iter().flat_map(|(_, name)| [changes_dir(domain_dir, name), work_dir(domain_dir, name)]).collect();
    reach.remove_trees(&trees)?;
    for (_, name) in &planned {
        let manifest = base_manifest_path(domain_dir, name);
        match std::fs::remove_file(&manifest) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(error).with_context(|| format!("cannot remove {}", manifest.display())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(kind: char, size: u64, mtime_sec: i64) -> Fingerprint {
        Fingerprint { kind, size, mtime_sec, mtime_nsec: 0, mode: 0o644, uid: 0, gid: 0, target: String::new(), sha256: None }
    }

    #[test]
    fn names_follow_the_documented_scheme() {
        let name = |path: &str| dir_name(Path::new(path)).expect(path);
        assert_eq!(name("/usr"), "usr");
        assert_eq!(name("/home/agent"), "home_agent");
        assert_eq!(name("/home/agent/"), "home_agent");
        assert_eq!(name("/home/./agent"), "home_agent");
        assert_eq!(name("/home_agent"), "home%5Fagent");
        assert_eq!(name("/opt/my dir"), "opt_my%20dir");
        assert_eq!(name("/.cache/x-y.z"), ".cache_x-y.z");
        assert_eq!(name("/é"), "%C3%A9");
        for bad in ["usr", "/", "/usr/../etc", ""] {
            assert!(dir_name(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_injective_on_tricky_paths() {
        let paths = [
            "/a/b", "/a_b", "/a/_b", "/a_/b", "/a__b", "/a/%5F", "/a%5F", "/a/b/c", "/a/b_c", "/a_b/c", "/a%2Fb", "/a.b", "/a-b", "/a/-b",
            "/A/b", "/a/ b", "/a /b", "/%", "/%25", "/_", "/__",
        ];
        let names: BTreeSet<String> = paths.iter().map(|path| dir_name(Path::new(path)).expect(path)).collect();
        assert_eq!(names.len(), paths.len(), "{names:?}");
        // No file of one directory is a file of another: the suffixes end differently.
        let suffixes = [CHANGES_SUFFIX, WORK_SUFFIX, MERGED_SUFFIX, BASE_SUFFIX];
        let files: BTreeSet<String> = names.iter().flat_map(|name| suffixes.iter().map(move |suffix| format!("{name}{suffix}"))).collect();
        assert_eq!(files.len(), names.len() * suffixes.len());
        for file in &files {
            assert_ne!(file, STATE_FILE);
            assert_ne!(file, EMPTY_LOWER);
        }
    }

    #[test]
    fn long_names_are_hashed_and_fit() {
        let long = format!("/{}", ["segment"; 40].join("/"));
        let name = dir_name(Path::new(&long)).expect("long");
        assert!(name.starts_with("%%") && name.len() == 66, "{name}");
        assert!(name.len() + BASE_SUFFIX.len() <= NAME_MAX);
        assert_ne!(name, dir_name(Path::new(&format!("{long}x"))).expect("long"));
        let fits = format!("/{}", "a".repeat(NAME_MAX - BASE_SUFFIX.len() - 1));
        assert_eq!(dir_name(Path::new(&fits)).expect("fits").len(), NAME_MAX - BASE_SUFFIX.len() - 1);
    }

    #[test]
    fn option_breaking_paths_are_refused() {
        assert!(check_mountable(Path::new("/data/domains/abc"), "x").is_ok());
        for bad in ["/a,b", "/a:b", "/a\\b", "relative", "//plugin/x"] {
            assert!(check_mountable(Path::new(bad), "x").is_err(), "{bad}");
        }
    }

    #[test]
    fn plan_refuses_duplicates() {
        assert!(plan(&[PathBuf::from("/usr"), PathBuf::from("/usr/")]).is_err());
        let planned = plan(&[PathBuf::from("/usr"), PathBuf::from("/home/agent")]).expect("plan");
        assert_eq!(planned[1].1, "home_agent");
    }

    #[test]
    fn find_output_is_parsed() {
        let output = b"f\x0012\x001764412800.1234567890\x00644\x000\x000\x00\x00/r/a b\x00\
l\x003\x001764412800.0000000000\x00777\x001000\x001000\x00/x\x00/r/link\x00\
c\x000\x00-5\x00700\x000\x000\x00\x00/r/gone\x00";
        let records = parse_find_output(output).expect("parse");
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].0, PathBuf::from("/r/a b"));
        assert_eq!(records[0].1, Fingerprint { mtime_nsec: 123_456_789, ..fingerprint('f', 12, 1_764_412_800) });
        assert_eq!(records[1].1.target, "/x");
        assert_eq!((records[1].1.uid, records[1].1.mode), (1000, 0o777));
        assert_eq!((records[2].1.kind, records[2].1.mtime_sec), ('c', -5));
        assert!(parse_find_output(b"f\x001\x00").is_err());
        assert!(parse_find_output(b"").expect("empty").is_empty());
    }

    #[test]
    fn find_errors_about_missing_paths_are_tolerated() {
        assert!(only_missing_paths("find: '/r/x': No such file or directory\nfind: '/r/f/y': Not a directory\n"));
        assert!(!only_missing_paths("find: '/r/x': Permission denied\n"));
        assert!(!only_missing_paths("Error: cannot re-exec process\n"));
    }

    #[test]
    fn mountinfo_is_parsed_with_escapes() {
        let text = b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
109 27 0:90 / /data/d/usr_merged rw,nodev,noatime - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0\n\
110 27 0:91 / /data/my\\040dir/x_merged rw - fuse.fuse-overlayfs fuse-overlayfs rw\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1], MountPoint { path: PathBuf::from("/data/d/usr_merged"), fs_type: "fuse.fuse-overlayfs".into() });
        assert_eq!(mounts[2].path, PathBuf::from("/data/my dir/x_merged"));
        assert_eq!(mounts[0].fs_type, "ext4");
    }

    fn entry(relative: &str, kind: char, whiteout: bool) -> Entry {
        Entry { relative: PathBuf::from(relative), fingerprint: fingerprint(kind, 0, 0), whiteout }
    }

    #[test]
    fn upper_listing_turns_whiteouts_and_opaque_markers_into_nodes() {
        let entries = [
            entry("bin", 'd', false),
            entry("bin/find", 'f', false),
            entry("bin/mknod", 'c', true),
            entry("lib", 'd', false),
            entry("lib/.wh.libx.so", 'f', false),
            entry("share", 'd', false),
            entry("share/doc", 'd', false),
            entry("share/doc/.wh..opq", 'c', true),
            entry("share/doc/.wh..wh..opq", 'f', false),
            entry("share/doc/new", 'f', false),
        ];
        let nodes = upper_nodes(&entries);
        let find = |path: &str| nodes.iter().find(|(rel, _)| rel == Path::new(path)).map(|(_, node)| node.clone());
        assert_eq!(find("bin/mknod"), Some(Node::Whiteout));
        assert_eq!(find("lib/libx.so"), Some(Node::Whiteout));
        assert!(matches!(find("share/doc"), Some(Node::Dir { opaque: true, .. })));
        assert!(matches!(find("bin"), Some(Node::Dir { opaque: false, .. })));
        assert!(nodes.iter().all(|(rel, _)| !rel.to_string_lossy().contains(".wh.")), "{nodes:?}");
        assert_eq!(nodes.len(), 8);
    }

    #[test]
    fn classification_table() {
        let file = Node::Other(fingerprint('f', 10, 100));
        let old = fingerprint('f', 5, 50);
        let new = fingerprint('f', 6, 60);
        // Added, modified, and both sides changed.
        assert_eq!(classify(&file, None, None), Some(ChangeKind::Added));
        assert_eq!(classify(&file, None, Some(&None)), Some(ChangeKind::Added));
        assert_eq!(classify(&file, Some(&old), None), Some(ChangeKind::Modified));
        assert_eq!(classify(&file, Some(&old), Some(&Some(old.clone()))), Some(ChangeKind::Modified));
        assert_eq!(classify(&file, Some(&new), Some(&Some(old.clone()))), Some(ChangeKind::ModifiedConflict));
        assert_eq!(classify(&file, Some(&new), Some(&None)), Some(ChangeKind::ModifiedConflict), "the image added it too");
        assert_eq!(classify(&file, None, Some(&Some(old.clone()))), Some(ChangeKind::ModifiedConflict), "the image removed it");
        // Deletions.
        assert_eq!(classify(&Node::Whiteout, Some(&old), None), Some(ChangeKind::Deleted));
        assert_eq!(classify(&Node::Whiteout, Some(&old), Some(&Some(old.clone()))), Some(ChangeKind::Deleted));
        assert_eq!(classify(&Node::Whiteout, Some(&new), Some(&Some(old.clone()))), Some(ChangeKind::DeletedConflict));
        assert_eq!(classify(&Node::Whiteout, None, None), None);
        assert_eq!(classify(&Node::Whiteout, None, Some(&None)), None);
        // Directories.
        let dir = fingerprint('d', 4096, 1);
        let plain = Node::Dir { opaque: false, fingerprint: dir.clone() };
        assert_eq!(classify(&plain, None, None), Some(ChangeKind::Added));
        assert_eq!(classify(&plain, Some(&fingerprint('d', 4096, 9)), None), None, "only children changed");
        assert_eq!(classify(&plain, Some(&Fingerprint { mode: 0o700, ..dir.clone() }), None), Some(ChangeKind::Modified));
        assert_eq!(classify(&Node::Dir { opaque: true, fingerprint: dir.clone() }, Some(&dir), None), Some(ChangeKind::Modified));
        assert_eq!(classify(&plain, Some(&old), None), Some(ChangeKind::Modified), "a file became a directory");
    }

    #[test]
    fn codes_and_json() {
        let change = StateChange { dir: "/usr".into(), path: "/usr/bin/find".into(), kind: ChangeKind::ModifiedConflict };
        assert_eq!(change.to_string(), "M! /usr/bin/find");
        let json = serde_json::to_value(&change).expect("json");
        assert_eq!(json, serde_json::json!({"dir": "/usr", "path": "/usr/bin/find", "kind": "modifiedConflict"}));
    }

    /// The whole pipeline in-process on plain directories: an "image" lower,
    /// an upper with every kind of change, a base recorded, then the image
    /// changes under it.
    #[test]
    fn diff_pipeline_on_plain_directories() {
        let temporary = tempfile::tempdir().expect("tempdir");
        let domain = temporary.path().join("domain");
        let image = temporary.path().join("image");
        let lower = image.join("usr");
        for dir in [&domain, &lower.join("bin"), &lower.join("share/doc/old"), &lower.join("lib")] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        for file in ["bin/find", "bin/tar", "lib/libx.so", "share/doc/old/README", "share/conf"] {
            std::fs::write(lower.join(file), file).expect("write");
        }
        let upper = changes_dir(&domain, "usr");
        for dir in ["bin", "lib", "local/bin", "share/doc"] {
            std::fs::create_dir_all(upper.join(dir)).expect("mkdir");
        }
        std::fs::write(upper.join("bin/find"), "agent's find").expect("write");
        std::fs::write(upper.join("bin/tar"), "agent's tar").expect("write");
        std::fs::write(upper.join("share/conf"), "agent's conf").expect("write");
        std::fs::write(upper.join("local/bin/tool"), "new").expect("write");
        std::fs::write(upper.join("lib/.wh.libx.so"), "").expect("whiteout");
        std::fs::write(upper.join("share/doc/.wh..wh..opq"), "").expect("opaque");
        std::fs::write(upper.join("share/doc/new"), "").expect("write");
        let reach = Reach { namespace: Namespace::Host, podman: Podman::default() };
        let planned = vec![(PathBuf::from("/usr"), "usr".to_owned())];
        record_bases(&reach, &domain, &planned, &image).expect("record");
        let codes = |changes: Vec<StateChange>| -> Vec<String> { changes.iter().map(ToString::to_string).collect() };
        assert_eq!(
            codes(diff_against(&reach, &domain, &planned, &image).expect("diff")),
            [
                "M  /usr/bin/find",
                "M  /usr/bin/tar",
                "D  /usr/lib/libx.so",
                "A  /usr/local",
                "A  /usr/local/bin",
                "A  /usr/local/bin/tool",
                "M  /usr/share/conf",
                "M  /usr/share/doc",
                "A  /usr/share/doc/new"
            ]
        );
        // The image is rebuilt: tar changes, the library changes, the agent's new tool appears.
        std::fs::write(lower.join("bin/tar"), "image's new tar").expect("write");
        std::fs::write(lower.join("lib/libx.so"), "libx 2").expect("write");
        std::fs::create_dir_all(lower.join("local/bin")).expect("mkdir");
        std::fs::write(lower.join("local/bin/tool"), "image's tool").expect("write");
        // Same size, same mtime, other content: only the hash can tell.
        let conf = lower.join("share/conf");
        let mtime = std::fs::metadata(&conf).and_then(|metadata| metadata.modified()).expect("mtime");
        std::fs::write(&conf, "share/CONF").expect("write");
        std::fs::File::options().write(true).open(&conf).and_then(|file| file.set_modified(mtime)).expect("set mtime");
        let after = codes(diff_against(&reach, &domain, &planned, &image).expect("diff"));
        assert_eq!(
            after,
            [
                "M  /usr/bin/find",
                "M! /usr/bin/tar",
                "D! /usr/lib/libx.so",
                "M! /usr/local/bin/tool",
                "M! /usr/share/conf",
                "M  /usr/share/doc",
                "A  /usr/share/doc/new"
            ]
        );
        // Recording again keeps the old bases (the agent's change predates the update).
        record_bases(&reach, &domain, &planned, &image).expect("record again");
        assert_eq!(codes(diff_against(&reach, &domain, &planned, &image).expect("diff")), after);
    }

    #[test]
    fn runtime_files_are_not_listed() {
        let node = |relative: &str, node: Node, current: Option<Fingerprint>| Compared {
            relative: PathBuf::from(relative),
            node,
            current,
            lower_path: PathBuf::from("/image/etc").join(relative),
        };
        let nodes = vec![
            node("hosts", Node::Other(fingerprint('f', 0, 0)), None),
            node("resolv.conf", Node::Other(fingerprint('f', 0, 0)), None),
            node("hostname", Node::Whiteout, Some(fingerprint('f', 0, 0))),
            node("motd", Node::Other(fingerprint('f', 0, 0)), None),
        ];
        let changes = classify_nodes(Path::new("/etc"), &nodes, &BaseManifest::default());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, PathBuf::from("/etc/motd"));
    }

    #[test]
    fn character_device_whiteouts_are_recognized_in_process() {
        // A 0/0 character device (a whiteout) needs no CAP_MKNOD since Linux 5.8.
        let temporary = tempfile::tempdir().expect("tempdir");
        let path = temporary.path().join("gone");
        nix::sys::stat::mknod(&path, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::empty(), 0).expect("mknod");
        let entries = list_tree_in_process(temporary.path()).expect("list");
        assert!(entries[0].whiteout);
        assert_eq!(upper_nodes(&entries), vec![(PathBuf::from("gone"), Node::Whiteout)]);
    }
}
