//! The Hold-to-Bind lockfile (design document section 4.3 step 1, DECISIONS
//! D7 and D12): `<socket_dir>/lazaret_coord_<hash>.lock`, in the user's
//! private (0700) socket directory, so no other user can create it first
//! (the design document's `/tmp` name let anyone block a domain). Opened with
//! `O_NOFOLLOW` and refused when another user owns it. `flock` via
//! `std::fs::File::lock`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};

pub struct DomainLock {
    file: File,
    path: PathBuf,
}

impl DomainLock {
    /// Opens (creating 0600 if needed) the lockfile. A symlink, a non-regular
    /// file or a file owned by another user is a security abort: in a shared
    /// `/tmp` another user could pre-create it.
    pub fn open(path: &Path) -> Result<DomainLock> {
        if let Some(dir) = path.parent() {
            crate::private_dirs::ensure_private_dir(dir)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(path)
            .map_err(|error| {
                if error.raw_os_error() == Some(nix::libc::ELOOP) {
                    crate::Error::from(lazaret_core::Error::security(
                        "lockfile",
                        format!("{} is a symbolic link; refusing to follow it", path.display()),
                        None,
                    ))
                } else {
                    crate::Error::Context {
                        context: format!("cannot open the domain lockfile {}", path.display()),
                        source: Box::new(error.into()),
                    }
                }
            })?;
        let metadata = file.metadata().with_context(|| format!("cannot stat {}", path.display()))?;
        let own_uid = nix::unistd::getuid().as_raw();
        if metadata.uid() != own_uid || !metadata.file_type().is_file() {
            return Err(lazaret_core::Error::security(
                "lockfile",
                format!(
                    "{} is owned by uid {} (not {own_uid}) or is not a regular file; refusing to use it. Remove it if it is stale.",
                    path.display(),
                    metadata.uid()
                ),
                None,
            )
            .into());
        }
        Ok(DomainLock { file, path: path.to_path_buf() })
    }

    /// `LOCK_EX | LOCK_NB`: true when we got the lock.
    pub fn try_lock(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(error)) => Err(error).with_context(|| format!("cannot lock {}", self.path.display())),
        }
    }

    /// `LOCK_EX`, blocking.
    pub fn lock(&self) -> Result<()> {
        self.file.lock().with_context(|| format!("cannot lock {}", self.path.display()))
    }

    /// `LOCK_UN`.
    pub fn unlock(&self) {
        let _ = self.file.unlock();
    }
}
