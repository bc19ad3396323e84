//! Creating the private directories a domain needs (socket directories,
//! the Domain Root) so that no other user can plant or read anything there.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result};

/// Creates `path` (and missing parents, 0700) or checks the existing one:
/// it must be a real directory (not a symlink) owned by us; its mode is
/// forced to 0700.
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
    if metadata.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot chmod {}", path.display()))?;
    }
    Ok(())
}
