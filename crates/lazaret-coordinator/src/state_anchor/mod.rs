//! The State Anchor (issue 8): each of a
//! profile's `persistent_dirs` is an overlay mount on the host (kernel
//! overlayfs where it can be mounted, else fuse-overlayfs; see "Kind" below)
//! whose lower directory is that directory in the image's own root (`podman image
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
//! - `<name>_work` (0700): the overlay's work directory.
//! - `<name>_overlay`: `kernel` or `fuse`, the kind that writes `<name>_changes`.
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
//! Kind: the two implementations mark deletions and opaque directories
//! differently, so an upper directory keeps the kind that started it
//! (`<name>_overlay`; an upper with content and no record is fuse-overlayfs',
//! from before kernel overlayfs was used). A new one gets kernel overlayfs
//! when `mount -t overlay` works where the mounts live (as root; rootless in
//! podman's user namespace with `userxattr`, Linux 5.11 and later), else
//! fuse-overlayfs with the kernel's reason in the log; `LAZARET_STATE_OVERLAY
//! = kernel|fuse` forces one, and `lazaret doctor` says which a new one would
//! get. Kernel mounts use `redirect_dir=nofollow,metacopy=off,index=off,
//! xino=off` (plus `userxattr` rootless), so no xattr in an upper directory
//! can redirect a lookup to another path or make a file's data come from
//! elsewhere. The agent writes only through the merged directory: from
//! inside, `trusted.*` xattrs are refused by gVisor (EOPNOTSUPP), overlayfs
//! stores `user.overlay.*` escaped (`user.overlay.overlay.*`) under
//! `userxattr` and ignores them as root, and mknod of a 0:0 device is refused
//! (EPERM); `overlay_attributes_set_from_inside_cannot_hide_or_redirect_image_files`
//! (root and rootless) tries all of these. Kernel overlayfs deletes with a
//! 0:0 character device and marks an opaque directory with
//! `trusted.overlay.opaque` (`user.overlay.opaque` rootless) only; its
//! `.wh.`-named files are ordinary files.
//!
//! Whiteouts on fuse-overlayfs: fuse-overlayfs 1.10 deletes with a character device 0/0 in the
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
//! gVisor file access: these are ordinary bind mounts, served `shared`:
//! gVisor revalidates its dentry cache against the host on each access (in
//! git mode the sandbox runs with `--file-access-mounts=exclusive` for the
//! agent's checkout, and each of these mounts gets a `share=shared` mount
//! hint, see `backend::sandbox`). Nothing writes to a merged directory
//! from the host while the sandbox runs, so `exclusive` would be correct for
//! the overlays, but measured here it did not make unpacking 10,000 files
//! into an overlaid `/usr` measurably faster. The cost was fuse-overlayfs' own:
//! unpacking 10,000 files inside the sandbox took 19.4 s into a
//! fuse-overlayfs mount, 2.35 s into a kernel overlayfs mount and 2.30 s into
//! a plain directory (by hand), which is why kernel overlayfs is preferred.
//!
//! Layout: this file has the public API ([`StateAnchor`], [`recover`],
//! [`diff`], [`reset`]); `names` the file names in the Domain Root, `reach`
//! the commands run where the mounts are, `mounts` mountinfo and `umount2`,
//! `listing` file facts and `find` output, `classify` nodes, change kinds and
//! the base manifest, `image` the image's side of a comparison.

mod classify;
mod image;
mod listing;
mod mounts;
mod names;
pub mod pod;
mod reach;

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use self::classify::{classify, is_runtime_file, recorded, scrub_runtime_files, BaseManifest};
use self::image::{compare_with_image, record_bases, resolve_lowers, Compared};
use self::listing::Fingerprint;
use self::names::{base_manifest_path, changes_dir, check_mountable, merged_dir, overlay_kind_path, plan, work_dir};
use self::reach::{run, Namespace, Overlay, OverlayChoice, Reach};
use crate::error::{Context, Result};

pub use classify::{ChangeKind, StateChange};
pub use listing::has_opaque_xattr;
pub use names::dir_name;
pub use reach::OverlayKind;

/// Suffix of the upper directory.
pub const CHANGES_SUFFIX: &str = "_changes";
/// Suffix of the fuse-overlayfs work directory.
pub const WORK_SUFFIX: &str = "_work";
/// Suffix of the file naming the overlay kind of `<name>_changes`.
pub const OVERLAY_SUFFIX: &str = "_overlay";
/// Environment variable forcing the kind of new upper directories
/// (`kernel` or `fuse`; for tests and troubleshooting).
pub const OVERLAY_ENV: &str = "LAZARET_STATE_OVERLAY";
/// Kernel overlayfs' opaque mark, as root and in a user namespace (`userxattr`).
const KERNEL_OPAQUE_XATTR: &str = "trusted.overlay.opaque";
const KERNEL_OPAQUE_USER_XATTR: &str = "user.overlay.opaque";
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
    /// The overlay kind of each of `dirs` that got mounted (in order).
    #[serde(default)]
    overlays: Vec<OverlayKind>,
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
            overlays: Vec::new(),
        };
        let written = write_record(domain_dir, &record);
        let result = written.and_then(|()| anchor.mount_overlays(&image_mount.root, &planned)).and_then(|kinds| {
            // Rewritten with the kinds the overlays got.
            write_record(domain_dir, &MountRecord { overlays: kinds, ..record })
        });
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

    /// Mounts the overlays; returns the kind each got.
    fn mount_overlays(&mut self, image_root: &Path, planned: &[(PathBuf, String)]) -> Result<Vec<OverlayKind>> {
        let dirs: Vec<PathBuf> = planned.iter().map(|(dir, _)| dir.clone()).collect();
        let (lowers, _) = resolve_lowers(&self.reach, image_root, &dirs, &[])?;
        let mut overlays = Vec::new();
        let mut kind_files = Vec::new();
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
            // An upper directory keeps the kind that wrote it (see the module comment).
            let recorded = upper_kind(&self.domain_dir, name)?;
            self.prepare(&mount, lower_fingerprint.as_ref())
                .with_context(|| format!("cannot mount the persistent directory {}", dir.display()))?;
            let kind = match recorded {
                Some(OverlayKind::Kernel) => OverlayChoice::Kernel,
                Some(OverlayKind::Fuse) => OverlayChoice::Fuse,
                None => forced_choice(),
            };
            tracing::debug!(dir = %dir.display(), lower = %lower.display(), ?kind, "mounting an overlay");
            kind_files.push((overlay_kind_path(&self.domain_dir, name), recorded.is_none()));
            overlays.push(Overlay { lower, upper: mount.changes.clone(), work: mount.work.clone(), merged: mount.merged.clone(), kind });
            self.mounts.push(mount);
        }
        let (mounted, failure) = self.reach.mount_overlays(&overlays);
        self.lock().overlays = mounted.iter().map(Option::is_some).collect();
        let mut kinds = Vec::new();
        for ((result, (kind_file, new)), mount) in mounted.iter().zip(&kind_files).zip(&self.mounts) {
            let Some(result) = result else { continue };
            if let Some(reason) = &result.fallback_reason {
                tracing::warn!(dir = %mount.container_path.display(), %reason, "kernel overlayfs cannot be mounted here; using fuse-overlayfs");
            }
            tracing::info!(dir = %mount.container_path.display(), overlay = result.kind.name(), "persistent directory mounted");
            if *new {
                // Before the sandbox starts: nothing is in the upper directory yet.
                std::fs::write(kind_file, format!("{}\n", result.kind.name()))
                    .with_context(|| format!("cannot write {}", kind_file.display()))?;
            }
            kinds.push(result.kind);
        }
        match failure {
            None => Ok(kinds),
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
            Ok(_) => crate::bail!("{} is not a directory", mount.changes.display()),
            Err(error) if error.kind() == ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&mount.changes)
                    .with_context(|| format!("cannot create {}", mount.changes.display()))?;
                if let Err(error) = self.adopt_lower_attributes(&mount.changes, lower) {
                    crate::cleanup::remove_dir(&mount.changes);
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
                    run(chown, lazaret_core::bounds::MOUNT_COMMAND, || format!("podman unshare chown {}", changes.display()))?;
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
        self.reach.unmount_overlays(&merged).context("cannot unmount the State Anchor overlays")?;
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

fn write_record(domain_dir: &Path, record: &MountRecord) -> Result<()> {
    serde_json::to_vec(record)
        .map_err(crate::Error::from)
        .and_then(|bytes| std::fs::write(domain_dir.join(STATE_FILE), bytes).map_err(crate::Error::from))
        .with_context(|| format!("cannot write {}", domain_dir.join(STATE_FILE).display()))
}

/// The kind of overlay that wrote `<name>_changes`: as recorded in
/// `<name>_overlay`; fuse-overlayfs for an upper directory with content but
/// no record (made before kernel overlayfs was used); `None` for one that is
/// absent or empty (any kind may start it).
fn upper_kind(domain_dir: &Path, name: &str) -> Result<Option<OverlayKind>> {
    let path = overlay_kind_path(domain_dir, name);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim() {
            "kernel" => return Ok(Some(OverlayKind::Kernel)),
            "fuse" => return Ok(Some(OverlayKind::Fuse)),
            other => crate::bail!("{} names the unknown overlay kind {other:?}", path.display()),
        },
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
    let changes = changes_dir(domain_dir, name);
    match std::fs::read_dir(&changes) {
        Ok(mut entries) => Ok(entries.next().is_some().then_some(OverlayKind::Fuse)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        // Unreadable: it has content of some kind; the older kind is the safe guess.
        Err(_) => Ok(Some(OverlayKind::Fuse)),
    }
}

/// The choice for a new upper directory: [`OVERLAY_ENV`] or either.
fn forced_choice() -> OverlayChoice {
    match std::env::var(OVERLAY_ENV).as_deref() {
        Ok("fuse") => OverlayChoice::Fuse,
        Ok("kernel") => OverlayChoice::Kernel,
        _ => OverlayChoice::Either,
    }
}

/// Which overlay a new persistent directory would get here (`lazaret
/// doctor`): kernel overlayfs if a probe mount succeeds, else fuse-overlayfs
/// and the kernel's reason.
pub fn probe_overlay() -> (OverlayKind, Option<String>) {
    match forced_choice() {
        OverlayChoice::Fuse => return (OverlayKind::Fuse, Some(format!("{OVERLAY_ENV}=fuse"))),
        OverlayChoice::Kernel | OverlayChoice::Either => {}
    }
    match Reach::current().probe_kernel_overlay() {
        Ok(()) => (OverlayKind::Kernel, None),
        Err(error) => (OverlayKind::Fuse, Some(error.chained())),
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
        reach.unmount_overlays_maybe_stacked(&stale.into_iter().collect::<Vec<_>>(), stacked)?;
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

/// The persistent directories to act on: all of `all`, or the one named by
/// `dir` (which must be one of them).
pub fn selected_dirs(all: &[PathBuf], dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    match dir {
        None => Ok(all.to_vec()),
        Some(dir) if all.iter().any(|known| known == dir) => Ok(vec![dir.to_path_buf()]),
        Some(dir) => Err(crate::Error::msg(format!(
            "{} is not a persistent directory of this profile (persistent_dirs: {})",
            dir.display(),
            all.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ))),
    }
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
            crate::bail!("{} is mounted: the domain is running; stop it before resetting its state", mounted.display());
        }
    }
    let trees: Vec<PathBuf> = planned.iter().flat_map(|(_, name)| [changes_dir(domain_dir, name), work_dir(domain_dir, name)]).collect();
    reach.remove_trees(&trees)?;
    for (_, name) in &planned {
        for file in [base_manifest_path(domain_dir, name), overlay_kind_path(domain_dir, name)] {
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => return Err(error).with_context(|| format!("cannot remove {}", file.display())),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::classify::Node;
    use super::listing::fingerprint;
    use super::*;
    use crate::podman::Podman;

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
}
