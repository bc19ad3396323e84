//! The [`Checker`]: static validation at load time, collecting every problem
//! instead of stopping at the first, and the value-level checks the
//! top-level tables (`tables`) and the profiles (`profile`) share.
//!
//! Invariants: a check never stops the load by itself; it records a
//! [`Diagnostic`] located at the value it refuses and returns what it could
//! make of the value (or `None`). [`Checker::finish`] turns any recorded
//! problem into one [`Error::Config`] naming them all. Nothing here touches
//! the disk beyond lenient canonicalization of host directories.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::raw::RawLimits;
use super::{Located, VOLUME_MODE_OPTIONS};
use crate::egress::EgressRule;
use crate::error::{Diagnostic, Error, Result, Severity};
use crate::expand::{self, TokenValues};
use crate::host::HostEnvironment;
use crate::location::Location;
use crate::paths;

/// Static validation at load time, collecting every problem.
pub(super) struct Checker<'a> {
    path: &'a Path,
    text: &'a str,
    diagnostics: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl<'a> Checker<'a> {
    /// A checker for `text`, read from `path` (the locations name it).
    pub(super) fn new(path: &'a Path, text: &'a str) -> Checker<'a> {
        Checker { path, text, diagnostics: Vec::new(), warnings: Vec::new() }
    }
}

impl Checker<'_> {
    /// The warnings, or every recorded problem as one error.
    pub(super) fn finish(self) -> Result<Vec<Diagnostic>> {
        if !self.diagnostics.is_empty() {
            return Err(Error::Config(self.diagnostics));
        }
        Ok(self.warnings)
    }

    /// How many problems are recorded so far.
    pub(super) fn problem_count(&self) -> usize {
        self.diagnostics.len()
    }

    pub(super) fn locate(&self, span: std::ops::Range<usize>) -> Location {
        Location::from_span(self.path, self.text, span)
    }

    pub(super) fn located(&self, value: &Spanned<String>) -> Located<String> {
        Located { value: value.get_ref().clone(), location: Some(self.locate(value.span())) }
    }

    pub(super) fn error(&mut self, field: &str, message: String, location: Option<Location>) {
        self.diagnostics.push(Diagnostic { severity: Severity::Invalid, field: field.to_owned(), message, location });
    }

    pub(super) fn security(&mut self, field: &str, message: String, location: Option<Location>) {
        self.diagnostics.push(Diagnostic { severity: Severity::Security, field: field.to_owned(), message, location });
    }

    /// A warning: shown, but the configuration loads.
    pub(super) fn warn(&mut self, field: String, message: String, location: Option<Location>) {
        self.warnings.push(Diagnostic { severity: Severity::Invalid, field, message, location });
    }

    /// `data_root`, `socket_dir` or `runsc`: tilde allowed, no tokens,
    /// absolute, no `..`.
    pub(super) fn host_directory(&mut self, field: &str, value: &Spanned<String>, host: &dyn HostEnvironment) -> Option<PathBuf> {
        let location = Some(self.locate(value.span()));
        let text = value.get_ref();
        if text.contains(['{', '}']) {
            self.error(field, format!("`{text}`: expansion tokens are not available in {field}"), location);
            return None;
        }
        if paths::has_parent_segment(text) {
            self.security(field, format!("`{text}` contains a `..` segment; refusing to resolve it"), location);
            return None;
        }
        let home = match host.home_dir() {
            Ok(home) => home,
            Err(error) => {
                self.error(field, error.to_string(), location);
                return None;
            }
        };
        let no_tokens = TokenValues {
            profile_name: String::new(),
            profile_dir: String::new(),
            domain_hash: String::new(),
            domain_dir: String::new(),
            workspace_dir: String::new(),
        };
        let expanded = match expand::expand(text, &no_tokens, Some(&home)) {
            Ok(expanded) => expanded,
            Err(error) => {
                self.error(field, error.to_string(), location);
                return None;
            }
        };
        if !expanded.starts_with('/') {
            self.error(field, format!("`{text}` is not an absolute path"), location);
            return None;
        }
        match paths::canonicalize_lenient(host, Path::new(&expanded)) {
            Ok((canonical, _)) => Some(canonical),
            Err(error) => {
                self.error(field, format!("cannot resolve `{expanded}`: {error}"), location);
                None
            }
        }
    }

    /// A path that may hold tokens and is resolved later: its tokens must
    /// exist and it may not contain a `..` segment.
    pub(super) fn path_template(&mut self, field: &str, value: &Spanned<String>) {
        self.tokens(field, value);
        if paths::has_parent_segment(value.get_ref()) {
            self.security(
                field,
                format!("`{}` contains a `..` segment; refusing to resolve it", value.get_ref()),
                Some(self.locate(value.span())),
            );
        }
    }

    pub(super) fn tokens(&mut self, field: &str, value: &Spanned<String>) {
        if let Err(error) = expand::check_tokens(value.get_ref()) {
            self.error(field, error.to_string(), Some(self.locate(value.span())));
        }
    }

    /// `allow_egress` entries, parsed and deduplicated.
    pub(super) fn egress(&mut self, field: &str, entries: &[Spanned<String>]) -> Vec<EgressRule> {
        let mut rules = Vec::new();
        for entry in entries {
            match entry.get_ref().parse::<EgressRule>() {
                Ok(rule) if !rules.contains(&rule) => rules.push(rule),
                Ok(_) => {}
                Err(message) => self.error(field, message, Some(self.locate(entry.span()))),
            }
        }
        rules
    }

    /// `auto_approve` entries, parsed by the policy engine; a refused entry
    /// is named by `field`.
    pub(super) fn auto_approve_rules(&mut self, field: &str, entries: &[Spanned<String>]) -> Vec<crate::policy::AutoApproveRule> {
        let mut rules = Vec::new();
        for entry in entries {
            match crate::policy::parse_auto_approve_entry(entry.get_ref()) {
                Ok(rule) => rules.push(rule),
                Err(error) => self.error(field, error.to_string(), Some(self.locate(entry.span()))),
            }
        }
        rules
    }

    /// `[limits]` or a profile's `limits`: each value checked, named by
    /// `prefix.key` in the diagnostic.
    pub(super) fn limits(&mut self, prefix: &str, raw: &RawLimits) -> crate::limits::Limits {
        let mut limits = crate::limits::Limits::default();
        if let Some(memory) = &raw.memory {
            match crate::limits::parse_memory(memory.get_ref()) {
                Ok(bytes) => limits.memory = Some(bytes),
                Err(message) => self.error(&format!("{prefix}.memory"), message, Some(self.locate(memory.span()))),
            }
        }
        if let Some(processes) = &raw.processes {
            match crate::limits::check_processes(*processes.get_ref()) {
                Ok(count) => limits.processes = Some(count),
                Err(message) => self.error(&format!("{prefix}.processes"), message, Some(self.locate(processes.span()))),
            }
        }
        if let Some(cpus) = &raw.cpus {
            match crate::limits::check_cpus(*cpus.get_ref()) {
                Ok(count) => limits.cpus = Some(count),
                Err(message) => self.error(&format!("{prefix}.cpus"), message, Some(self.locate(cpus.span()))),
            }
        }
        limits
    }

    /// A volume's `mode`: known options only, no contradiction; `ro` is
    /// added when neither `ro` nor `rw` is written.
    pub(super) fn volume_mode(&mut self, field: &str, mode: &Spanned<String>) -> Vec<String> {
        let location = Some(self.locate(mode.span()));
        let options: Vec<String> = mode.get_ref().split(',').map(|option| option.trim().to_owned()).collect();
        for option in &options {
            if !VOLUME_MODE_OPTIONS.contains(&option.as_str()) {
                self.error(
                    field,
                    format!("`{}`: unknown volume option `{option}` (allowed: {})", mode.get_ref(), VOLUME_MODE_OPTIONS.join(", ")),
                    location.clone(),
                );
                return Vec::new();
            }
        }
        let has = |name: &str| options.iter().any(|option| option == name);
        let (read_only, read_write) = (has("ro"), has("rw"));
        if read_only && read_write {
            self.error(field, format!("`{}`: `ro` and `rw` contradict each other", mode.get_ref()), location.clone());
        }
        if has("z") && has("Z") {
            self.error(field, format!("`{}`: `z` and `Z` contradict each other", mode.get_ref()), location);
        }
        let mut options = options;
        if !read_only && !read_write {
            options.insert(0, "ro".to_owned());
        }
        options
    }
}

/// Is `name` a valid profile name (`^[a-z0-9_-]{2,32}$`)?
pub fn is_valid_profile_name(name: &str) -> bool {
    (2..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Is `name` a valid environment variable name (`^[A-Za-z_][A-Za-z0-9_]*$`)?
pub(super) fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_') && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A diagnostic about the value `at`, located where it was written.
pub(super) fn diagnostic(severity: Severity, field: &str, message: String, at: &Located<String>) -> Diagnostic {
    Diagnostic { severity, field: field.to_owned(), message, location: at.location.clone() }
}
