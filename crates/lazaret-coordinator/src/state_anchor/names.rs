//! Names of a persistent directory's files in the Domain Root: the
//! injective `dir_name` escaping, the byte escaping of manifest keys, the
//! paths refused as mount options, and the plan of a profile's directories.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{BASE_SUFFIX, CHANGES_SUFFIX, MERGED_SUFFIX, NAME_MAX, OVERLAY_SUFFIX, WORK_SUFFIX};
use crate::error::Result;

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
pub(super) fn normalized_segments(container_path: &Path) -> Result<Vec<&[u8]>> {
    if !container_path.is_absolute() {
        crate::bail!("persistent directory {} is not an absolute path", container_path.display());
    }
    let mut segments = Vec::new();
    for component in container_path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(segment) => segments.push(segment.as_bytes()),
            Component::ParentDir | Component::Prefix(_) => {
                crate::bail!("persistent directory {} contains `..`", container_path.display())
            }
        }
    }
    if segments.is_empty() {
        crate::bail!("`/` cannot be a persistent directory");
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
pub(super) fn escape_bytes(bytes: &[u8]) -> String {
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

/// The bytes [`escape_bytes`] escaped; `None` for a text it cannot have made.
pub(super) fn unescape_bytes(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    Some(bytes)
}

/// fuse-overlayfs splits `-o` on `,` and its layer lists on `:`, libfuse
/// treats `\` as an escape and a leading `//` as a plugin; podman splits
/// `--mount` on `,`. Such paths are refused rather than escaped.
pub(super) fn check_mountable(path: &Path, what: &str) -> Result<()> {
    let bytes = path.as_os_str().as_bytes();
    if let Some(byte) = bytes.iter().find(|byte| matches!(byte, b',' | b':' | b'\\' | b'\n')) {
        crate::bail!(
            "{what} {} contains {:?}, which fuse-overlayfs and podman mount options cannot carry",
            path.display(),
            char::from(*byte)
        );
    }
    if !path.is_absolute() || bytes.starts_with(b"//") {
        crate::bail!("{what} {} must be an absolute path starting with a single `/`", path.display());
    }
    Ok(())
}

pub(super) fn changes_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{CHANGES_SUFFIX}"))
}

/// The file recording which overlay kind wrote `<name>_changes`.
pub(super) fn overlay_kind_path(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{OVERLAY_SUFFIX}"))
}

pub(super) fn work_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{WORK_SUFFIX}"))
}

pub(super) fn merged_dir(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{MERGED_SUFFIX}"))
}

pub(super) fn base_manifest_path(domain_dir: &Path, name: &str) -> PathBuf {
    domain_dir.join(format!("{name}{BASE_SUFFIX}"))
}

/// (container path, name) of each persistent directory; duplicates refused.
pub(super) fn plan(persistent_dirs: &[PathBuf]) -> Result<Vec<(PathBuf, String)>> {
    let mut seen = BTreeSet::new();
    let mut planned = Vec::new();
    for dir in persistent_dirs {
        let name = dir_name(dir)?;
        if !seen.insert(name.clone()) {
            crate::bail!("persistent directory {} is listed twice", dir.display());
        }
        planned.push((dir.clone(), name));
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::super::{EMPTY_LOWER, STATE_FILE};
    use super::*;

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
}
