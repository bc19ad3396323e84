//! The Hold-to-Bind lockfile (DECISIONS
//! D7 and D12): `<socket_dir>/lazaret_coord_<hash>.lock`, in the user's
//! private (0700) socket directory, so no other user can create it first
//! (a `/tmp` name let anyone block a domain). Opened with
//! `O_NOFOLLOW` and refused when another user owns it. `flock` via
//! `std::fs::File::lock`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::cleanup::LogFailure;
use crate::error::{Context, Result};

pub struct DomainLock {
    file: File,
    path: PathBuf,
    /// Whether this process holds the lock (so dropping it unlocks).
    held: bool,
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
        Ok(DomainLock { file, path: path.to_path_buf(), held: false })
    }

    /// `LOCK_EX | LOCK_NB`: true when we got the lock (on the file the path
    /// names now; see [`DomainLock::unlock`]).
    pub fn try_lock(&mut self) -> Result<bool> {
        loop {
            match self.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
                Err(std::fs::TryLockError::Error(error)) => {
                    return Err(error).with_context(|| format!("cannot lock {}", self.path.display()))
                }
            }
            if self.is_current()? {
                self.held = true;
                return Ok(true);
            }
            *self = DomainLock::open(&self.path)?;
        }
    }

    /// `LOCK_EX`, blocking.
    pub fn lock(&mut self) -> Result<()> {
        loop {
            self.file.lock().with_context(|| format!("cannot lock {}", self.path.display()))?;
            if self.is_current()? {
                self.held = true;
                return Ok(());
            }
            *self = DomainLock::open(&self.path)?;
        }
    }

    /// Removes the lockfile, then `LOCK_UN`: nothing stays on disk while
    /// nobody holds the lock. Safe because a holder counts only once it has
    /// checked that the path still names the file it locked: whoever waited
    /// on the removed file opens the path again.
    pub fn unlock(&mut self) {
        if self.held && self.is_current().unwrap_or(false) {
            crate::cleanup::remove_file(&self.path);
        }
        self.held = false;
        self.file.unlock().log_failure(format_args!("unlocking {}", self.path.display()));
    }

    /// Whether the path still names the file this lock is on.
    fn is_current(&self) -> Result<bool> {
        let held = self.file.metadata().with_context(|| format!("cannot stat {}", self.path.display()))?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(named) => Ok(named.ino() == held.ino() && named.dev() == held.dev()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error).with_context(|| format!("cannot stat {}", self.path.display())),
        }
    }
}

impl Drop for DomainLock {
    /// A holder that goes away unlocks as [`DomainLock::unlock`] does.
    fn drop(&mut self) {
        if self.held {
            self.unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lockfile_goes_with_the_lock_and_a_waiter_moves_to_the_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        let path = dir.path().join("lazaret_coord_test.lock");
        let mut first = DomainLock::open(&path).expect("open");
        assert!(first.try_lock().expect("lock"));
        // A waiter opened the same file before it was removed.
        let mut waiter = DomainLock::open(&path).expect("open");
        assert!(!waiter.try_lock().expect("try"));
        let waiting = std::thread::spawn(move || {
            waiter.lock().expect("lock");
            waiter
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        first.unlock();
        let mut waiter = waiting.join().expect("join");
        // The waiter holds the lock on the file the path names now...
        assert!(path.exists(), "the waiter opened the path again");
        let mut third = DomainLock::open(&path).expect("open");
        assert!(!third.try_lock().expect("try"), "so nobody else gets it");
        waiter.unlock();
        assert!(!path.exists(), "nothing stays while nobody holds the lock");
        assert!(third.try_lock().expect("try"));
        drop(third);
        assert!(!path.exists(), "dropping a held lock unlocks it too");
    }
}
