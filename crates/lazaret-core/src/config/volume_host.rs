//! The host side of a volume: an expanded host path checked, canonicalized,
//! and kept clear of the paths through which the agent would reach
//! Lazaret's own controls.
//!
//! Invariants (DECISIONS D1, D8): a volume's host path is absolute, has no
//! `..` segment and is canonical; it never overlaps the socket directory;
//! it never lies inside the workspace's `.git`, nor contains it unless
//! read-only; a writable volume never contains the domain's state
//! directory, `data_root` or the configuration file's directory, and lies
//! inside the domain's state directory only under `{domain_dir}/volumes`.
//! Every refusal is a security diagnostic (exit status 77).

use std::path::{Path, PathBuf};

use super::check::diagnostic;
use super::Located;
use crate::error::{Error, Result, Severity};
use crate::host::HostEnvironment;
use crate::paths;

/// The host paths a volume must keep clear of, for one profile in one
/// workspace.
pub(super) struct ControlPaths<'a> {
    pub(super) socket_root: &'a Path,
    /// The workspace's `.git`.
    pub(super) git_dir: &'a Path,
    pub(super) domain_dir: &'a Path,
    pub(super) data_root: &'a Path,
    /// The configuration file's directory, if a file was read.
    pub(super) config_dir: Option<&'a Path>,
}

impl ControlPaths<'_> {
    /// Checks an expanded volume host path (`written` is the value in the
    /// file, named by `field`); returns it canonical, and whether it exists.
    pub(super) fn host_path(
        &self,
        field: &str,
        expanded: &str,
        written: &Located<String>,
        mode: &[String],
        host: &dyn HostEnvironment,
    ) -> Result<(PathBuf, bool)> {
        let (canonical, exists) = canonical_host_path(field, expanded, written, host)?;
        let read_only = mode.iter().any(|option| option == "ro");
        if let Some(why) = self.refusal(&canonical, read_only) {
            return Err(Error::Config(vec![diagnostic(Severity::Security, field, why, written)]));
        }
        Ok((canonical, exists))
    }

    /// Why mounting `canonical` would expose one of Lazaret's controls, if
    /// it would.
    fn refusal(&self, canonical: &Path, read_only: bool) -> Option<String> {
        if paths::overlaps(canonical, self.socket_root) {
            return Some(format!(
                "`{}` overlaps Lazaret's socket directory {}; mounting it would expose host sockets to the sandbox",
                canonical.display(),
                self.socket_root.display()
            ));
        }
        if paths::is_within(canonical, self.git_dir) || (!read_only && paths::is_within(self.git_dir, canonical)) {
            return Some(format!(
                "`{}` overlaps the workspace's git directory; the host's .git is never mounted into the sandbox writable or in part (DECISIONS D1)",
                canonical.display()
            ));
        }
        if read_only {
            return None;
        }
        self.writable_refusal(canonical)
    }

    /// The refusals that only apply to a writable volume.
    fn writable_refusal(&self, canonical: &Path) -> Option<String> {
        let guarded = [(self.domain_dir, "the domain's state directory"), (self.data_root, "Lazaret's data_root")];
        for (guarded, what) in guarded {
            if paths::is_within(guarded, canonical) {
                return Some(format!(
                    "`{}` contains {what} ({}); mount it read-only (mode = \"ro\") or choose a narrower path",
                    canonical.display(),
                    guarded.display()
                ));
            }
        }
        if paths::is_within(canonical, self.domain_dir) && !paths::is_within(canonical, &self.domain_dir.join("volumes")) {
            return Some(format!(
                "`{}` is inside the domain's state directory; writable volumes there must live under {{domain_dir}}/volumes",
                canonical.display()
            ));
        }
        let config_dir = self.config_dir.filter(|config_dir| paths::is_within(config_dir, canonical))?;
        Some(format!(
            "`{}` contains Lazaret's configuration ({}); the agent must not be able to write it",
            canonical.display(),
            config_dir.display()
        ))
    }
}

/// An expanded host path: no `..`, absolute, canonical (leniently: it may
/// not exist yet).
fn canonical_host_path(field: &str, expanded: &str, written: &Located<String>, host: &dyn HostEnvironment) -> Result<(PathBuf, bool)> {
    if paths::has_parent_segment(expanded) {
        return Err(Error::Config(vec![diagnostic(
            Severity::Security,
            field,
            format!("`{expanded}` contains a `..` segment; refusing to resolve it"),
            written,
        )]));
    }
    if !expanded.starts_with('/') {
        return Err(Error::Config(vec![diagnostic(
            Severity::Invalid,
            field,
            format!("`{expanded}` is not an absolute path (use `~/`, `{{profile_dir}}` or `{{workspace_dir}}` to anchor it)"),
            written,
        )]));
    }
    paths::canonicalize_lenient(host, Path::new(expanded)).map_err(|error| {
        Error::Config(vec![diagnostic(Severity::Invalid, field, format!("cannot resolve `{expanded}`: {error}"), written)])
    })
}
