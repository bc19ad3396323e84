//! What the agent changed: an upper directory's entries as nodes of the
//! merged view (whiteouts, opaque directories), their classification into
//! [`ChangeKind`]s against the image and the base manifest, and the
//! runtime files that are never persisted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::listing::{Entry, Fingerprint};
use super::names::escape_bytes;
use super::reach::OverlayKind;
use super::{PersistentMount, OPAQUE_MARKER, RUNTIME_FILES, WHITEOUT_PREFIX};
use crate::error::{Context, Result};

/// A path of an upper directory, as the merged view sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// The agent deleted what the image has here.
    Whiteout,
    Dir {
        opaque: bool,
        fingerprint: Fingerprint,
    },
    Other(Fingerprint),
}

/// Turns a listing into nodes. Kernel overlayfs: character devices 0/0 are
/// whiteouts and `opaque` (relative paths, from the xattr) the opaque
/// directories; a `.wh.` name is an ordinary file (the kernel shows it in the
/// merged view, so the agent may create one). fuse-overlayfs: `.wh.` names
/// also become whiteouts or the opaque flag of their directory, and its
/// other `.wh.` names are hidden from the merged view and skipped.
pub(super) fn upper_nodes(entries: &[Entry], kind: OverlayKind, opaque: &BTreeSet<PathBuf>) -> Vec<(PathBuf, Node)> {
    let mut opaque = opaque.clone();
    let mut nodes = BTreeMap::new();
    for entry in entries {
        let name = entry.relative.file_name().map(|name| name.as_bytes()).unwrap_or_default();
        let parent = entry.relative.parent().map(Path::to_path_buf).unwrap_or_default();
        let file_style = if kind == OverlayKind::Fuse { name.strip_prefix(WHITEOUT_PREFIX.as_bytes()) } else { None };
        if let Some(hidden) = file_style {
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

/// What the agent did to a path of a persistent directory (the wire type:
/// `lazaret state diff --json` and `state/diff` print the same).
pub use lazaret_protocol::StateChangeKind as ChangeKind;

/// One line of `lazaret state diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The persistent directory (container path).
    pub dir: PathBuf,
    /// The changed path (container path).
    pub path: PathBuf,
    pub kind: ChangeKind,
}

impl StateChange {
    /// The wire form (`state/diff`, `lazaret state diff --json`); a name
    /// that is not UTF-8 is shown with replacement characters.
    pub fn wire(&self) -> lazaret_protocol::StateChange {
        lazaret_protocol::StateChange {
            dir: self.dir.to_string_lossy().into_owned(),
            path: self.path.to_string_lossy().into_owned(),
            kind: self.kind,
        }
    }
}

impl fmt::Display for StateChange {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:<2} {}", self.kind.code(), self.path.display())
    }
}

/// Classifies one node. `lower` is the image's path now; `base` the image's
/// path when the change was recorded (`None`: not recorded; `Some(None)`:
/// the image did not have it).
pub(super) fn classify(node: &Node, lower: Option<&Fingerprint>, base: Option<&Option<Fingerprint>>) -> Option<ChangeKind> {
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
pub(super) fn scrub_runtime_files(mount: &PersistentMount) {
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
pub(super) fn is_runtime_file(container_path: &Path) -> bool {
    RUNTIME_FILES.iter().any(|file| Path::new(file) == container_path)
}

// ---------------------------------------------------------------------------
// The base manifest

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct BaseManifest {
    pub(super) version: u32,
    /// Escaped relative path -> the image's version (`None`: absent).
    pub(super) entries: BTreeMap<String, Option<Fingerprint>>,
}

pub(super) const MANIFEST_VERSION: u32 = 1;

impl BaseManifest {
    pub(super) fn load(path: &Path) -> Result<BaseManifest> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("cannot parse {}", path.display())),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(BaseManifest { version: MANIFEST_VERSION, ..BaseManifest::default() }),
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Written to a temporary file and renamed over, so a crash leaves
    /// either version.
    pub(super) fn save(&self, path: &Path) -> Result<()> {
        let temporary = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(self)?;
        std::fs::write(&temporary, bytes).with_context(|| format!("cannot write {}", temporary.display()))?;
        std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))
    }

    pub(super) fn key(relative: &Path) -> String {
        escape_bytes(relative.as_os_str().as_bytes())
    }
}

/// Nodes whose image version the manifest keeps: everything but directories.
pub(super) fn recorded(node: &Node) -> bool {
    !matches!(node, Node::Dir { .. })
}

#[cfg(test)]
mod tests {
    use super::super::listing::fingerprint;
    use super::*;

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
        let nodes = upper_nodes(&entries, OverlayKind::Fuse, &BTreeSet::new());
        let find = |path: &str| nodes.iter().find(|(rel, _)| rel == Path::new(path)).map(|(_, node)| node.clone());
        assert_eq!(find("bin/mknod"), Some(Node::Whiteout));
        assert_eq!(find("lib/libx.so"), Some(Node::Whiteout));
        assert!(matches!(find("share/doc"), Some(Node::Dir { opaque: true, .. })));
        assert!(matches!(find("bin"), Some(Node::Dir { opaque: false, .. })));
        assert!(nodes.iter().all(|(rel, _)| !rel.to_string_lossy().contains(".wh.")), "{nodes:?}");
        assert_eq!(nodes.len(), 8);
    }

    /// Kernel overlayfs: whiteouts are 0:0 devices and opaque directories an
    /// xattr (given as `opaque`); `.wh.` names are the agent's own files.
    #[test]
    fn kernel_upper_listing_takes_opaque_from_xattrs_and_wh_names_as_files() {
        let entries = [
            entry("bin", 'd', false),
            entry("bin/gone", 'c', true),
            entry("share", 'd', false),
            entry("share/doc", 'd', false),
            entry("share/.wh.man", 'f', false),
            entry("share/doc/.wh..wh..opq", 'f', false),
        ];
        let opaque = BTreeSet::from([PathBuf::from("share/doc")]);
        let nodes = upper_nodes(&entries, OverlayKind::Kernel, &opaque);
        let find = |path: &str| nodes.iter().find(|(rel, _)| rel == Path::new(path)).map(|(_, node)| node.clone());
        assert_eq!(find("bin/gone"), Some(Node::Whiteout));
        assert!(matches!(find("share/doc"), Some(Node::Dir { opaque: true, .. })));
        assert!(matches!(find("share"), Some(Node::Dir { opaque: false, .. })));
        assert!(matches!(find("share/.wh.man"), Some(Node::Other(_))));
        assert!(matches!(find("share/doc/.wh..wh..opq"), Some(Node::Other(_))));
        assert_eq!(find("share/man"), None);
        assert_eq!(nodes.len(), 6);
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
        let json = serde_json::to_value(change.wire()).expect("json");
        assert_eq!(json, serde_json::json!({"dir": "/usr", "path": "/usr/bin/find", "kind": "modifiedConflict"}));
    }
}
