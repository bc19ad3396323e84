//! Path hygiene: the `..` interception and
//! canonicalization that tolerates paths which do not exist yet.

use std::path::{Component, Path, PathBuf};

use crate::host::HostEnvironment;

/// True when any segment of `path` is `..`. Checked on the expanded string,
/// before anything touches the filesystem.
pub fn has_parent_segment(path: &str) -> bool {
    path.split('/').any(|segment| segment == "..")
}

/// Canonicalizes the longest existing ancestor of an absolute `path` and
/// appends the rest. The rest contains no `..` (checked by the caller) and,
/// not existing, no symlinks. Returns the path and whether it exists.
pub fn canonicalize_lenient(host: &dyn HostEnvironment, path: &Path) -> std::io::Result<(PathBuf, bool)> {
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut existing = path;
    loop {
        match host.canonicalize(existing) {
            Ok(canonical) => {
                let exists = missing.is_empty();
                let mut result = canonical;
                for part in missing.iter().rev() {
                    result.push(part);
                }
                return Ok((result, exists));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(error);
                };
                missing.push(name);
                existing = parent;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Lexical containment on normalized absolute paths: is `inner` equal to or
/// below `outer`?
pub fn is_within(inner: &Path, outer: &Path) -> bool {
    let inner: Vec<Component> = inner.components().filter(|c| !matches!(c, Component::CurDir)).collect();
    let outer: Vec<Component> = outer.components().filter(|c| !matches!(c, Component::CurDir)).collect();
    inner.len() >= outer.len() && inner[..outer.len()] == outer[..]
}

/// Do the two paths overlap (one is equal to or inside the other)?
pub fn overlaps(a: &Path, b: &Path) -> bool {
    is_within(a, b) || is_within(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_segments_are_found_anywhere() {
        for path in ["..", "/a/../b", "a/..", "../x", "/x/y/.."] {
            assert!(has_parent_segment(path), "{path}");
        }
        for path in ["/a/b", "/a/..b", "/a/b..", "/a/.../b", "~/x", "/a/./b"] {
            assert!(!has_parent_segment(path), "{path}");
        }
    }

    #[test]
    fn containment() {
        assert!(is_within(Path::new("/a/b/c"), Path::new("/a/b")));
        assert!(is_within(Path::new("/a/b"), Path::new("/a/b/")));
        assert!(!is_within(Path::new("/a/bc"), Path::new("/a/b")));
        assert!(overlaps(Path::new("/"), Path::new("/run/lazaret")));
        assert!(!overlaps(Path::new("/usr"), Path::new("/run/lazaret")));
    }

    #[test]
    fn lenient_canonicalization_resolves_existing_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let host = crate::host::RealHost;
        let (resolved, exists) = canonicalize_lenient(&host, &link.join("not/yet")).expect("canonicalize");
        let canonical_real = std::fs::canonicalize(&real).expect("canonical");
        assert_eq!(resolved, canonical_real.join("not/yet"));
        assert!(!exists);
        let (resolved, exists) = canonicalize_lenient(&host, &link).expect("canonicalize");
        assert_eq!(resolved, canonical_real);
        assert!(exists);
    }
}
