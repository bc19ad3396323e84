//! Errors of `lazaret-core`. Every configuration error names the offending
//! value and, when it comes from a file, where it is.

use std::path::PathBuf;

use crate::exit_status;
use crate::location::Location;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How bad a configuration problem is: security problems abort with the
/// distinct status of DECISIONS D8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Invalid,
    Security,
}

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Dotted path of the offending key, e.g. `profiles.claude.volumes[0].host`.
    pub field: String,
    pub message: String,
    pub location: Option<Location>,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(location) = &self.location {
            write!(formatter, "{location}: ")?;
        }
        if self.severity == Severity::Security {
            write!(formatter, "security: ")?;
        }
        if self.field.is_empty() {
            write!(formatter, "{}", self.message)
        } else {
            write!(formatter, "{}: {}", self.field, self.message)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read configuration file {path}: {source}")]
    ReadConfig { path: PathBuf, source: std::io::Error },

    #[error("{}", render_diagnostics(.0))]
    Config(Vec<Diagnostic>),

    #[error("workspace {path}: {message}")]
    Workspace { path: PathBuf, message: String },

    #[error("cannot determine the home directory: $HOME is unset and uid {uid} has no passwd entry")]
    NoHomeDirectory { uid: u32 },
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

impl Error {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>, location: Option<Location>) -> Error {
        Error::Config(vec![Diagnostic { severity: Severity::Invalid, field: field.into(), message: message.into(), location }])
    }

    pub fn security(field: impl Into<String>, message: impl Into<String>, location: Option<Location>) -> Error {
        Error::Config(vec![Diagnostic { severity: Severity::Security, field: field.into(), message: message.into(), location }])
    }

    /// The process exit status this error maps to.
    pub fn exit_status(&self) -> u8 {
        match self {
            Error::Config(diagnostics) if diagnostics.iter().any(|d| d.severity == Severity::Security) => exit_status::SECURITY_ABORT,
            Error::Config(_) | Error::ReadConfig { .. } => exit_status::CONFIG_INVALID,
            Error::Workspace { .. } | Error::NoHomeDirectory { .. } => exit_status::FAILURE,
        }
    }

    pub fn is_security(&self) -> bool {
        self.exit_status() == exit_status::SECURITY_ABORT
    }
}
