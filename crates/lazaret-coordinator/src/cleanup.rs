//! Teardown and rollback steps that must not stop what they are part of:
//! a failure is logged with what was being undone, never dropped
//! silently (issue 46). An absent file or directory is not a failure:
//! removing what is already gone is the goal reached.
//!
//! Use these instead of `let _ = std::fs::remove_…` on every path that
//! cleans up after a start, a crash or a shutdown; use
//! [`LogFailure::log_failure`] for any other step whose failure is
//! reported and then passed over.

use std::fmt::Display;
use std::path::Path;

/// A result whose failure is logged (at `warn`, with what was being done)
/// and then passed over.
pub trait LogFailure {
    fn log_failure(self, what: impl Display);
}

impl<T, E: std::error::Error + 'static> LogFailure for std::result::Result<T, E> {
    fn log_failure(self, what: impl Display) {
        if let Err(error) = self {
            tracing::warn!(error = %crate::error::chained(&error), "{what} failed");
        }
    }
}

/// Removes the file (or socket) at `path`; a failure other than its
/// absence is logged.
pub fn remove_file(path: &Path) {
    absent_is_fine(std::fs::remove_file(path)).log_failure(format_args!("removing {}", path.display()));
}

/// Removes the directory tree at `path`; a failure other than its absence
/// is logged.
pub fn remove_dir_all(path: &Path) {
    absent_is_fine(std::fs::remove_dir_all(path)).log_failure(format_args!("removing the directory {}", path.display()));
}

/// Removes the empty directory at `path`; a failure other than its absence
/// (one that still holds something included) is logged.
pub fn remove_dir(path: &Path) {
    absent_is_fine(std::fs::remove_dir(path)).log_failure(format_args!("removing the directory {}", path.display()));
}

fn absent_is_fine(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absence_is_fine_and_other_failures_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gone = dir.path().join("gone");
        assert!(absent_is_fine(std::fs::remove_file(&gone)).is_ok());
        std::fs::create_dir(&gone).expect("mkdir");
        std::fs::write(gone.join("file"), "x").expect("write");
        // A directory that still holds a file: a failure to log.
        assert!(absent_is_fine(std::fs::remove_dir(&gone)).is_err());
        remove_dir_all(&gone);
        assert!(!gone.exists());
    }
}
