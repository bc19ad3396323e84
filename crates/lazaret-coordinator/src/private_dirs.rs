//! Creating the private directories a domain needs (socket directories,
//! the Domain Root) so that no other user can plant or read anything there,
//! and the private files written into them.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{Context, Result};

/// Creates `path` (and missing parents, 0700) or checks the existing one:
/// it must be a real directory (not a symlink) owned by us and not a shared
/// directory (world-writable or sticky, such as `/tmp`, which must never be
/// changed: a `socket_dir = "/tmp"` as root would otherwise lock every other
/// user out of it); then its mode is forced to 0700.
pub fn ensure_private_dir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let metadata = std::fs::symlink_metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    let own_uid = nix::unistd::getuid().as_raw();
    if !metadata.file_type().is_dir() || metadata.uid() != own_uid {
        return Err(lazaret_core::Error::security(
            "directory",
            format!("{} is not a directory owned by uid {own_uid}; refusing to use it", path.display()),
            None,
        )
        .into());
    }
    let mode = metadata.permissions().mode();
    if mode & 0o1002 != 0 {
        return Err(lazaret_core::Error::security(
            "directory",
            format!(
                "{} is shared with other users (mode {:o}); Lazaret keeps its sockets, locks and state only in a directory of its own: \
                 name another (the default socket_dir is $XDG_RUNTIME_DIR/lazaret)",
                path.display(),
                mode & 0o7777
            ),
            None,
        )
        .into());
    }
    if mode & 0o777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot chmod {}", path.display()))?;
    }
    Ok(())
}

/// Writes `bytes` to `path`, created 0600 (or truncated).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    std::io::Write::write_all(&mut file, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Replaces `path` with `bytes` as a whole: written 0600 beside it, then
/// renamed over it (a reader sees the old file or the new one).
pub fn replace_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let temporary = path.with_extension("tmp");
    write_private(&temporary, bytes)?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Removes the file `path`; one that is not there is fine.
pub fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error).with_context(|| format!("cannot remove {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_directory_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let error = ensure_private_dir(dir.path()).expect_err("refused");
        assert!(error.chained().contains("shared with other users (mode 1777)"), "{}", error.chained());
        let mode = std::fs::metadata(dir.path()).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777, "the shared directory is not changed");
    }

    #[test]
    fn an_own_directory_is_made_private_and_a_new_one_is_created_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_private_dir(dir.path()).expect("ours");
        assert_eq!(std::fs::metadata(dir.path()).expect("stat").permissions().mode() & 0o777, 0o700);
        let nested = dir.path().join("a/b");
        ensure_private_dir(&nested).expect("created");
        assert_eq!(std::fs::metadata(&nested).expect("stat").permissions().mode() & 0o777, 0o700);
    }
}
