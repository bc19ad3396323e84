//! File facts: the fingerprint `diff` compares, the listing of an upper
//! directory in-process (root) or from GNU `find -printf` output (rootless),
//! and find's tolerated complaints.

use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::names::escape_bytes;
use super::FIND_FIELDS;
use crate::error::{Context, Result};

/// What `diff` compares about a path: find's kind letter (`f d l c b p s`),
/// size, mtime, permission bits, owner, link target (escaped) and, for a
/// regular file of the image recorded as a base, its SHA-256 (image layers
/// keep mtimes to the second, so a rebuilt file of the same size can carry
/// the same metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Fingerprint {
    pub(super) kind: char,
    pub(super) size: u64,
    pub(super) mtime_sec: i64,
    pub(super) mtime_nsec: u32,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sha256: Option<String>,
}

impl Fingerprint {
    /// Equal in everything but the content hash.
    pub(super) fn same_metadata(&self, other: &Fingerprint) -> bool {
        Fingerprint { sha256: None, ..self.clone() } == Fingerprint { sha256: None, ..other.clone() }
    }
}

/// One entry of an upper directory, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) relative: PathBuf,
    pub(super) fingerprint: Fingerprint,
    /// A character device 0/0.
    pub(super) whiteout: bool,
}

pub(super) fn fingerprint_of(path: &Path, metadata: &Metadata) -> Result<(Fingerprint, bool)> {
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

/// Does `path` carry the overlay's opaque mark (the xattr `name` with the
/// value `y`, or `x`, which newer kernels also write)? `lgetxattr(2)`.
pub fn has_opaque_xattr(path: &Path, name: &str) -> std::io::Result<bool> {
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| invalid())?;
    let c_name = std::ffi::CString::new(name).map_err(|_| invalid())?;
    let mut value = [0u8; 8];
    // SAFETY: both strings are NUL-terminated and live across the call; the
    // kernel writes at most `value.len()` bytes into `value`, which we own.
    let length = unsafe { nix::libc::lgetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
    if let Ok(length) = usize::try_from(length) {
        return Ok(matches!(&value[..length.min(value.len())], b"y" | b"x"));
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        // No such xattr, none supported, or a longer value: not the mark.
        Some(nix::libc::ENODATA | nix::libc::EOPNOTSUPP | nix::libc::ERANGE) => Ok(false),
        _ => Err(error),
    }
}

pub(super) fn list_tree_in_process(root: &Path) -> Result<Vec<Entry>> {
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
pub(super) fn parse_find_output(output: &[u8]) -> Result<Vec<(PathBuf, Fingerprint)>> {
    let mut fields: Vec<&[u8]> = output.split(|&byte| byte == 0).collect();
    if fields.last().is_some_and(|last| last.is_empty()) {
        fields.pop();
    }
    let records_fields = fields.chunks_exact(FIND_FIELDS);
    if !records_fields.remainder().is_empty() {
        crate::bail!("unexpected find output ({} fields)", fields.len());
    }
    let text = |field: &[u8]| String::from_utf8_lossy(field).into_owned();
    let number = |field: &[u8], radix: u32| -> Result<u64> {
        u64::from_str_radix(&text(field), radix).map_err(|_| crate::format_err!("unexpected number {:?} in find output", text(field)))
    };
    let mut records = Vec::new();
    for record in records_fields {
        let kind = record[0].first().map(|&byte| char::from(byte)).ok_or_else(|| crate::format_err!("empty kind in find output"))?;
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
pub(super) fn parse_find_time(text: &str) -> Result<(i64, u32)> {
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, ""));
    let seconds: i64 = seconds.parse().map_err(|_| crate::format_err!("unexpected time {text:?} in find output"))?;
    let mut digits: String = fraction.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    let nanoseconds: u32 = digits.parse().map_err(|_| crate::format_err!("unexpected time {text:?} in find output"))?;
    Ok((seconds, nanoseconds))
}

/// find's complaints about starting points that do not exist.
pub(super) fn only_missing_paths(stderr: &str) -> bool {
    stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .all(|line| line.starts_with("find: ") && (line.ends_with(": No such file or directory") || line.ends_with(": Not a directory")))
}

/// A fingerprint of a regular file with this kind, size and mtime (tests).
#[cfg(test)]
pub(super) fn fingerprint(kind: char, size: u64, mtime_sec: i64) -> Fingerprint {
    Fingerprint { kind, size, mtime_sec, mtime_nsec: 0, mode: 0o644, uid: 0, gid: 0, target: String::new(), sha256: None }
}

#[cfg(test)]
mod tests {
    use super::super::classify::{upper_nodes, Node};
    use super::super::reach::OverlayKind;
    use super::*;

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
    fn character_device_whiteouts_are_recognized_in_process() {
        // A 0/0 character device (a whiteout) needs no CAP_MKNOD since Linux 5.8.
        let temporary = tempfile::tempdir().expect("tempdir");
        let path = temporary.path().join("gone");
        nix::sys::stat::mknod(&path, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::empty(), 0).expect("mknod");
        let entries = list_tree_in_process(temporary.path()).expect("list");
        assert!(entries[0].whiteout);
        assert_eq!(
            upper_nodes(&entries, OverlayKind::Fuse, &std::collections::BTreeSet::new()),
            vec![(PathBuf::from("gone"), Node::Whiteout)]
        );
    }
}
