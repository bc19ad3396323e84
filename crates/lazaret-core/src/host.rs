//! The host facts that configuration resolution reads: environment variables,
//! the home directory and path canonicalization. Behind a trait so that the
//! resolution logic stays testable with a fake host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub trait HostEnvironment {
    /// A host environment variable, `None` if unset or not UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// The home directory: `$HOME` if set and non-empty, else the passwd entry.
    fn home_dir(&self) -> Result<PathBuf>;
    /// `realpath(3)` of an existing path.
    fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf>;
    /// The user id Lazaret runs as.
    fn uid(&self) -> u32;
}

/// The real host.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealHost;

impl HostEnvironment for RealHost {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn home_dir(&self) -> Result<PathBuf> {
        if let Some(home) = self.var("HOME").filter(|home| !home.is_empty()) {
            return Ok(PathBuf::from(home));
        }
        let uid = self.uid();
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(user)) => Ok(user.dir),
            _ => Err(Error::NoHomeDirectory { uid }),
        }
    }

    fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn uid(&self) -> u32 {
        nix::unistd::getuid().as_raw()
    }
}

/// A host made of fixed values, for tests and for callers that want to pin
/// the environment (paths are canonicalized lexically: they must not exist).
#[derive(Debug, Clone, Default)]
pub struct FixedHost {
    pub vars: BTreeMap<String, String>,
    pub home: Option<PathBuf>,
    pub uid: u32,
}

impl HostEnvironment for FixedHost {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    fn home_dir(&self) -> Result<PathBuf> {
        self.home.clone().ok_or(Error::NoHomeDirectory { uid: self.uid })
    }

    fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf> {
        if path.is_absolute() {
            Ok(path.to_path_buf())
        } else {
            Err(std::io::Error::new(std::io::ErrorKind::NotFound, "relative path"))
        }
    }

    fn uid(&self) -> u32 {
        self.uid
    }
}
