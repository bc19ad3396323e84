//! Where the mounts live and the commands that reach them: on the host as
//! root, in the mount namespace of podman's pause process (`podman
//! unshare`) rootless. Image mounts, fuse-overlayfs mounts and unmounts,
//! listings, stats and hashes all go through [`Reach`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::listing::{fingerprint_of, has_opaque_xattr, list_tree_in_process, only_missing_paths, parse_find_output, Entry, Fingerprint};
use super::mounts::{parse_mountinfo, unmount_path, MountPoint};
use super::names::check_mountable;
use super::{ImageMount, FIND_ARGUMENT_BYTES, FIND_FORMAT, KERNEL_OPAQUE_USER_XATTR, KERNEL_OPAQUE_XATTR};
use crate::cleanup::LogFailure;
use crate::error::{Context, Result};
use crate::podman::Podman;
use lazaret_core::bounds;

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
        let id =
            String::from_utf8_lossy(&run(inspect, bounds::MOUNT_COMMAND, || format!("podman image inspect {image}"))?).trim().to_owned();
        if id.len() != 64 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            crate::bail!("podman image inspect {image} printed {id:?}, not an image ID");
        }
        let mut mount = self.podman_command();
        mount.args(["image", "mount", &id]);
        let root = String::from_utf8_lossy(&run(mount, bounds::MOUNT_COMMAND, || format!("podman image mount {image}"))?).trim().to_owned();
        let image_mount = ImageMount { id, root: PathBuf::from(root) };
        if let Err(error) = check_mountable(&image_mount.root, "the image root") {
            self.unmount_image(&image_mount.id).log_failure(format_args!("unmounting image {} after a failed check", image_mount.id));
            return Err(error);
        }
        Ok(image_mount)
    }

    /// Releases one `podman image mount` (podman counts them).
    pub(super) fn unmount_image(&self, id: &str) -> Result<()> {
        let mut unmount = self.podman_command();
        unmount.args(["image", "unmount", id]);
        run(unmount, bounds::MOUNT_COMMAND, || format!("podman image unmount {id}")).map(drop)
    }

    /// Mounts each overlay, in order, stopping at the first failure, all in
    /// one shell where the mounts live (`podman unshare` rootless). An
    /// overlay that may use either kind tries kernel overlayfs first and
    /// falls back to fuse-overlayfs with the kernel's complaint as reason.
    /// Returns the kind each got (`None`: not mounted) and, on failure, the
    /// index that failed and why.
    pub(super) fn mount_overlays(&self, overlays: &[Overlay]) -> (Vec<Option<MountedOverlay>>, Option<(usize, crate::Error)>) {
        let mut mounted = vec![None; overlays.len()];
        if overlays.is_empty() {
            return (mounted, None);
        }
        let mut command = self.command("sh");
        command.args(["-c", MOUNT_SCRIPT, "sh"]);
        for overlay in overlays {
            let choice = match overlay.kind {
                OverlayChoice::Kernel => "kernel",
                OverlayChoice::Fuse => "fuse",
                OverlayChoice::Either => "either",
            };
            command.arg(choice).arg(overlay.kernel_options(self.namespace)).arg(overlay.options()).arg(&overlay.merged);
        }
        // Bounded: a fuse-overlayfs or podman that hangs must not hold the
        // start. On time-out the mount table below says what got mounted.
        let output = match crate::bounded_process::output_bounded_blocking(
            command,
            bounds::MOUNT_COMMAND,
            "the State Anchor's overlay mount script",
        ) {
            Ok(output) => output,
            Err(error @ crate::Error::TimedOut { .. }) => return self.after_failed_mount(overlays, mounted, 0, error),
            Err(error) => {
                return (mounted, Some((0, crate::Error::msg(format!("cannot run sh to mount the overlays: {}", error.chained())))))
            }
        };
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let mut fields = line.splitn(3, ' ');
            let (Some(Ok(index)), Some(kind)) = (fields.next().map(str::parse::<usize>), fields.next()) else { continue };
            let kind = match kind {
                "kernel" => OverlayKind::Kernel,
                "fuse" => OverlayKind::Fuse,
                _ => continue,
            };
            if let Some(slot) = mounted.get_mut(index) {
                *slot = Some(MountedOverlay { kind, fallback_reason: fields.next().map(|reason| reason.trim().to_owned()) });
            }
        }
        if output.status.success() {
            return (mounted, None);
        }
        let error = crate::Error::msg(format!(
            "mounting the overlays failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
        let failed = mounted.iter().position(Option::is_none).unwrap_or(0);
        self.after_failed_mount(overlays, mounted, failed, error)
    }

    /// What a failed (or timed-out) mount script left mounted, by the mount
    /// table; all of them when the table cannot be read.
    fn after_failed_mount(
        &self,
        overlays: &[Overlay],
        mut mounted: Vec<Option<MountedOverlay>>,
        failed: usize,
        error: crate::Error,
    ) -> (Vec<Option<MountedOverlay>>, Option<(usize, crate::Error)>) {
        match self.mount_table() {
            Ok(table) => {
                // The table is the truth about what is mounted.
                for (index, overlay) in overlays.iter().enumerate() {
                    if mounted[index].is_none() && table.iter().any(|mount| mount.path == overlay.merged) {
                        mounted[index] = Some(MountedOverlay { kind: OverlayKind::Fuse, fallback_reason: None });
                    }
                }
                (mounted, Some((failed, error)))
            }
            // Unknown: try to unmount all of them.
            Err(_) => (
                overlays.iter().map(|_| Some(MountedOverlay { kind: OverlayKind::Fuse, fallback_reason: None })).collect(),
                Some((failed, error)),
            ),
        }
    }

    /// Can a kernel overlayfs be mounted where the mounts live (on plain
    /// directories in a temporary directory)? `Err` has the kernel's reason.
    pub(super) fn probe_kernel_overlay(&self) -> Result<()> {
        // A random name, made exclusively: no other user can pre-empt it.
        let root = std::env::temp_dir().join(format!("lazaret-overlay-probe-{}", lazaret_core::ids::random_hex(8)?));
        std::fs::DirBuilder::new().mode(0o700).create(&root).with_context(|| format!("cannot create {}", root.display()))?;
        let overlay = Overlay {
            lower: root.join("lower"),
            upper: root.join("upper"),
            work: root.join("work"),
            merged: root.join("merged"),
            kind: OverlayChoice::Kernel,
        };
        for dir in [&overlay.lower, &overlay.upper, &overlay.work, &overlay.merged] {
            std::fs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let (mounted, failure) = self.mount_overlays(std::slice::from_ref(&overlay));
        let unmounted =
            if mounted.iter().any(Option::is_some) { self.unmount_overlays(std::slice::from_ref(&overlay.merged)) } else { Ok(()) };
        // The kernel's work directory (work/work, mode 000) is ours in the namespace.
        let removed = self.remove_trees(&[root]);
        if let Some((_, error)) = failure {
            return Err(error);
        }
        unmounted?;
        removed
    }

    /// Unmounts the overlay at each of `merged` (one mount each); a path
    /// that is not mounted is fine.
    pub(super) fn unmount_overlays(&self, merged: &[PathBuf]) -> Result<()> {
        self.unmount_overlays_maybe_stacked(merged, false)
    }

    /// Unmounts every mount (stacked ones too) at each of `merged`; a path
    /// that is not mounted is fine.
    /// `stacked`: a path may carry more than one mount (recovery).
    pub(super) fn unmount_overlays_maybe_stacked(&self, merged: &[PathBuf], stacked: bool) -> Result<()> {
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
                // umount (kernel overlays; fuse ones too) or fusermount3;
                // the mount table only to tell "was not mounted" from a real
                // failure, and to catch stacked mounts.
                let mut pending: Vec<PathBuf> = merged.to_vec();
                for _ in 0..8 {
                    if pending.is_empty() {
                        return Ok(());
                    }
                    let mut command = self.command("sh");
                    command
                        .args(["-c", "rc=0; for m do umount \"$m\" 2>/dev/null || fusermount3 -u \"$m\" || rc=1; done; exit $rc", "sh"])
                        .args(&pending);
                    let result = run(command, bounds::MOUNT_COMMAND, || "podman unshare umount".to_owned());
                    if result.is_ok() && !stacked {
                        return Ok(());
                    }
                    let table = self.mount_table()?;
                    pending.retain(|path| table.iter().any(|mount| &mount.path == path));
                    if let (Err(error), false) = (result, pending.is_empty()) {
                        return Err(error);
                    }
                }
                crate::bail!("overlays stay mounted after repeated umount and fusermount3 -u: {merged:?}")
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
                run(command, bounds::MOUNT_COMMAND, || "podman unshare cat /proc/self/mountinfo".to_owned())?
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
                let output = crate::bounded_process::output_bounded_blocking(command, bounds::STATE_WALK, "podman unshare find")?;
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

    /// Which of `dirs` (directories of kernel overlayfs upper directories)
    /// carry its opaque xattr: `trusted.overlay.opaque` as root,
    /// `user.overlay.opaque` rootless (`userxattr`), read where the mounts
    /// live (rootless by this executable's `state-anchor-opaque` in `podman
    /// unshare`: the directories may belong to subordinate uids).
    pub(super) fn opaque_dirs(&self, dirs: &[PathBuf]) -> Result<BTreeSet<PathBuf>> {
        let mut opaque = BTreeSet::new();
        match self.namespace {
            Namespace::Host => {
                for dir in dirs {
                    if has_opaque_xattr(dir, KERNEL_OPAQUE_XATTR).with_context(|| format!("cannot read the xattrs of {}", dir.display()))? {
                        opaque.insert(dir.clone());
                    }
                }
            }
            Namespace::Rootless => {
                let executable = std::env::current_exe().context("cannot find the lazaret executable")?;
                for chunk in argument_chunks(dirs) {
                    let mut command = self.command(&executable.to_string_lossy());
                    command.args(["state-anchor-opaque", KERNEL_OPAQUE_USER_XATTR, "--"]).args(chunk);
                    let output = run(command, bounds::STATE_WALK, || "podman unshare lazaret state-anchor-opaque".to_owned())?;
                    for path in output.split(|&byte| byte == 0).filter(|path| !path.is_empty()) {
                        opaque.insert(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
                    }
                }
            }
        }
        Ok(opaque)
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
                    let output = crate::bounded_process::output_bounded_blocking(command, bounds::STATE_WALK, "podman unshare find")?;
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
                    for record in run(command, bounds::STATE_WALK, || "podman unshare sha256sum".to_owned())?.split(|&byte| byte == 0) {
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
                run(command, bounds::STATE_WALK, || "podman unshare rm -rf".to_owned()).map(drop).or_else(|error| {
                    // Podman itself may not work (then nothing was mounted
                    // or written from the namespace): trees holding only the
                    // user's own files go without it.
                    let plain = trees.iter().all(|tree| std::fs::remove_dir_all(tree).is_ok());
                    if plain {
                        Ok(())
                    } else {
                        Err(error)
                    }
                })
            }
        }
    }
}

/// One overlay mount to make.
#[derive(Debug, Clone)]
pub(super) struct Overlay {
    pub(super) lower: PathBuf,
    pub(super) upper: PathBuf,
    pub(super) work: PathBuf,
    pub(super) merged: PathBuf,
    pub(super) kind: OverlayChoice,
}

/// Which overlay implementation an upper directory is written by (recorded
/// next to it and in the State Anchor record): the two mark deletions and
/// opaque directories differently, so an upper keeps its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverlayKind {
    /// Kernel overlayfs (`mount -t overlay`; `userxattr` rootless).
    Kernel,
    /// fuse-overlayfs.
    Fuse,
}

impl OverlayKind {
    pub fn name(self) -> &'static str {
        match self {
            OverlayKind::Kernel => "kernel",
            OverlayKind::Fuse => "fuse",
        }
    }
}

/// What to mount: a kind an existing upper directory requires, or either
/// (kernel overlayfs, else fuse-overlayfs) for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OverlayChoice {
    Kernel,
    Fuse,
    Either,
}

/// How one overlay got mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountedOverlay {
    pub(super) kind: OverlayKind,
    /// Why kernel overlayfs was not used, when it was tried and failed.
    pub(super) fallback_reason: Option<String>,
}

/// `$1` choice, `$2` kernel options, `$3` fuse-overlayfs options, `$4` the
/// mount point, repeated; prints `INDEX KIND [REASON]` per mount.
const MOUNT_SCRIPT: &str = r#"i=0
while [ $# -ge 4 ]; do
  case $1 in
    kernel) mount -t overlay overlay -o "$2" "$4" || exit 1; echo "$i kernel" ;;
    fuse) fuse-overlayfs -o "$3" "$4" || exit 1; echo "$i fuse" ;;
    *) if reason=$(mount -t overlay overlay -o "$2" "$4" 2>&1); then echo "$i kernel"
       else fuse-overlayfs -o "$3" "$4" || exit 1; echo "$i fuse $(printf %s "$reason" | tr "\\n" " ")"; fi ;;
  esac
  i=$((i+1)); shift 4
done"#;

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

    /// Kernel overlayfs' `-o`: no redirects followed or made, no metacopy,
    /// no index (see the module comment); `userxattr` rootless.
    pub(super) fn kernel_options(&self, namespace: Namespace) -> std::ffi::OsString {
        let mut options = self.options();
        options.push(",redirect_dir=nofollow,metacopy=off,index=off,xino=off");
        if namespace == Namespace::Rootless {
            options.push(",userxattr");
        }
        options
    }
}

/// Runs `command` for at most `bound`; its stdout, or an error with `what`
/// and its stderr (or the bound).
pub(super) fn run(command: Command, bound: std::time::Duration, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let what = what();
    let output = crate::bounded_process::output_bounded_blocking(command, bound, &what)?;
    if !output.status.success() {
        crate::bail!("{what} failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
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
