//! The image's side: each persistent directory resolved inside the image
//! root (no symbolic links), upper listings compared with the image's
//! current files, and the base manifests recorded from the image a session
//! ran with.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::classify::{recorded, upper_nodes, BaseManifest, Node, MANIFEST_VERSION};
use super::listing::Fingerprint;
use super::names::{base_manifest_path, changes_dir, normalized_segments};
use super::reach::{OverlayKind, Reach};
use super::upper_kind;
use crate::error::Result;

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
pub(super) type Lower = (Option<PathBuf>, Option<Fingerprint>);

/// Resolves each persistent directory inside the image root and, in the same
/// query, stats `extra[i]` (paths below the directories' candidates). Every
/// segment must be a real directory: a symbolic link in the image could point
/// anywhere on the host, since fuse-overlayfs resolves the lower path there.
pub(super) fn resolve_lowers(
    reach: &Reach,
    image_root: &Path,
    dirs: &[PathBuf],
    extra: &[PathBuf],
) -> Result<(Vec<Lower>, Vec<Option<Fingerprint>>)> {
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
                Some(fingerprint) if fingerprint.kind == 'l' => crate::bail!(
                    "persistent directory {}: {} is a symbolic link in the image; list the directory it points to instead",
                    dir.display(),
                    all[index].strip_prefix(image_root).map(|rel| Path::new("/").join(rel)).unwrap_or_default().display()
                ),
                Some(fingerprint) if fingerprint.kind != 'd' => {
                    crate::bail!("persistent directory {}: the image has a non-directory there", dir.display())
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
    let mut kinds = Vec::new();
    for ((_, name), index) in planned.iter().zip(&index_of) {
        if index.is_some() {
            kinds.push(upper_kind(domain_dir, name)?.unwrap_or(OverlayKind::Fuse));
        }
    }
    let trees = reach.list_trees(&roots)?;
    // Kernel overlayfs marks opaque directories only with an xattr.
    let kernel_dirs: Vec<PathBuf> = roots
        .iter()
        .zip(&trees)
        .zip(&kinds)
        .filter(|(_, kind)| **kind == OverlayKind::Kernel)
        .flat_map(|((root, tree), _)| tree.iter().filter(|entry| entry.fingerprint.kind == 'd').map(|entry| root.join(&entry.relative)))
        .collect();
    let opaque = reach.opaque_dirs(&kernel_dirs)?;
    let mut nodes: Vec<Vec<(PathBuf, Node)>> = Vec::new();
    for ((root, tree), kind) in roots.iter().zip(trees).zip(kinds) {
        let opaque: BTreeSet<PathBuf> = opaque.iter().filter_map(|path| path.strip_prefix(root).ok().map(Path::to_path_buf)).collect();
        nodes.push(upper_nodes(&tree, kind, &opaque));
    }
    let mut nodes = nodes.into_iter();
    Ok(index_of.into_iter().map(|index| index.and_then(|_| nodes.next()).unwrap_or_default()).collect())
}

/// A path of an upper directory next to the image's current version of it.
pub(super) struct Compared {
    pub(super) relative: PathBuf,
    pub(super) node: Node,
    /// `None` where the image has nothing.
    pub(super) current: Option<Fingerprint>,
    /// Where the image's version is (or would be).
    pub(super) lower_path: PathBuf,
}

/// Lists the upper directories and looks up every listed path in the image
/// (two queries in all).
pub(super) fn compare_with_image(
    reach: &Reach,
    domain_dir: &Path,
    planned: &[(PathBuf, String)],
    image_root: &Path,
) -> Result<Vec<Vec<Compared>>> {
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
pub(super) fn record_bases(reach: &Reach, domain_dir: &Path, planned: &[(PathBuf, String)], image_root: &Path) -> Result<()> {
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
