//! A profile's `credentials`: API keys the Network Sidecar adds to the
//! requests for one origin, so that they never enter the sandbox (the
//! sidecar's `inject` module). Checked at load (origin, header, where the
//! key comes from), given a port and checked against the allowlist when the
//! profile is resolved.
//!
//! Invariants: only where a key comes from is kept here, never the key: the
//! coordinator reads it when it starts the sidecar
//! (`lazaret_coordinator::credentials`). Every origin is `https` without a
//! path and covered by the profile's allowlist; every endpoint has its own
//! port, [`CREDENTIAL_PORT_BASE`] plus its index.

use std::collections::BTreeMap;

use lazaret_protocol::sidecar::{credential_header, Origin, MAX_CREDENTIALS};
use toml::Spanned;

use super::check::{diagnostic, is_valid_env_name, Checker};
use super::raw::RawCredential;
use super::Located;
use crate::egress::EgressRule;
use crate::error::{Diagnostic, Severity};
use crate::location::Location;

/// The loopback port of a profile's first credential endpoint; the next
/// ones follow it.
pub const CREDENTIAL_PORT_BASE: u16 = 17400;

/// Where a key comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    /// `env:VAR`: the variable of the shell that runs `lazaret run`.
    Env(String),
    /// `file:PATH`: a file only its owner can read (0600 or stricter).
    File(String),
    /// `command = [...]`: its standard output, run on the host with the
    /// fixed environment of host commands (DECISIONS D9), e.g. a keyring's CLI.
    Command(Vec<String>),
}

impl std::fmt::Display for CredentialSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Env(variable) => write!(formatter, "env:{variable}"),
            CredentialSource::File(path) => write!(formatter, "file:{path}"),
            CredentialSource::Command(argv) => write!(formatter, "command {argv:?}"),
        }
    }
}

/// One `credentials` entry, checked.
#[derive(Debug, Clone)]
pub struct CredentialConfig {
    pub origin: Origin,
    /// Lower case.
    pub header: String,
    pub source: CredentialSource,
    /// `scheme = "bearer"`: the header's value is `Bearer <key>`.
    pub bearer: bool,
    /// The sandbox variable that gets the endpoint's URL
    /// (`http://127.0.0.1:<port>`), e.g. `ANTHROPIC_BASE_URL`.
    pub base_url_env: Option<String>,
    /// Appended to the URL in `base_url_env` (`/v1` for an API whose clients
    /// expect the version in the base URL); empty when not written.
    pub base_path: String,
    pub location: Option<Location>,
}

/// One credential endpoint of a resolved profile: everything but the key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResolvedCredential {
    /// `https://host[:port]`.
    pub origin: String,
    pub header: String,
    pub bearer: bool,
    /// A `file:` path with its tokens and `~` expanded.
    pub source: CredentialSource,
    pub port: u16,
    pub base_url_env: Option<String>,
    pub base_path: String,
}

impl ResolvedCredential {
    /// What the sandbox reaches the origin's API at.
    pub fn endpoint_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The value of `base_url_env`: the endpoint and `base_path`.
    pub fn base_url(&self) -> String {
        format!("{}{}", self.endpoint_url(), self.base_path)
    }
}

impl Checker<'_> {
    /// `credentials`: each entry's origin, header and key source; `env` is
    /// the profile's own (a `base_url_env` may not also be set there).
    pub(super) fn credentials(
        &mut self,
        prefix: &str,
        raw: &[Spanned<RawCredential>],
        env: &BTreeMap<String, Located<String>>,
    ) -> Vec<CredentialConfig> {
        if raw.len() > MAX_CREDENTIALS {
            let location = raw.get(MAX_CREDENTIALS).map(|entry| self.locate(entry.span()));
            self.error(&format!("{prefix}.credentials"), format!("more than {MAX_CREDENTIALS} entries"), location);
        }
        let mut credentials: Vec<CredentialConfig> = Vec::new();
        for (index, entry) in raw.iter().enumerate() {
            let field = format!("{prefix}.credentials[{index}]");
            let location = Some(self.locate(entry.span()));
            let entry = entry.get_ref();
            let origin = match Origin::parse(entry.origin.get_ref()) {
                Ok(origin) => Some(origin),
                Err(message) => {
                    self.error(&format!("{field}.origin"), message, Some(self.locate(entry.origin.span())));
                    None
                }
            };
            if let Some(origin) = &origin {
                if credentials.iter().any(|other| other.origin == *origin) {
                    let message = format!("`{origin}` has two entries; an origin has one credential");
                    self.error(&format!("{field}.origin"), message, Some(self.locate(entry.origin.span())));
                }
            }
            let header = match credential_header(entry.header.get_ref()) {
                Ok(header) => Some(header),
                Err(message) => {
                    self.error(&format!("{field}.header"), message, Some(self.locate(entry.header.span())));
                    None
                }
            };
            let source = self.credential_source(&field, entry, location.clone());
            let bearer = match &entry.scheme {
                None => false,
                Some(scheme) if scheme.get_ref().eq_ignore_ascii_case("bearer") => true,
                Some(scheme) => {
                    let message =
                        format!("`{}` is not a scheme Lazaret writes: \"bearer\" (`Bearer <key>`), or leave it out", scheme.get_ref());
                    self.error(&format!("{field}.scheme"), message, Some(self.locate(scheme.span())));
                    false
                }
            };
            let base_url_env = entry.base_url_env.as_ref().map(|name| {
                let text = name.get_ref();
                let at = Some(self.locate(name.span()));
                if !is_valid_env_name(text) {
                    self.error(&format!("{field}.base_url_env"), format!("`{text}` is not a valid environment variable name"), at);
                } else if text.starts_with("LAZARET_") {
                    self.error(&format!("{field}.base_url_env"), format!("`{text}`: variables starting with LAZARET_ are Lazaret's"), at);
                } else if env.contains_key(text) || credentials.iter().any(|other| other.base_url_env.as_deref() == Some(text)) {
                    self.error(
                        &format!("{field}.base_url_env"),
                        format!("`{text}` is set twice (here and in `env` or another credential)"),
                        at,
                    );
                }
                text.clone()
            });
            let base_path =
                entry.base_path.as_ref().map(|path| self.base_path(&field, path, entry.base_url_env.is_some())).unwrap_or_default();
            if let (Some(origin), Some(header), Some(source)) = (origin, header, source) {
                credentials.push(CredentialConfig { origin, header, source, bearer, base_url_env, base_path, location });
            }
        }
        credentials
    }

    /// `base_path`: `/` and URL path characters, only with `base_url_env`.
    fn base_path(&mut self, field: &str, path: &Spanned<String>, has_env: bool) -> String {
        let text = path.get_ref();
        let at = Some(self.locate(path.span()));
        let valid = text.starts_with('/') && text.len() <= 256 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~%".contains(&b));
        if !valid {
            self.error(&format!("{field}.base_path"), format!("`{text}` is not a URL path (`/v1`, letters, digits and -._~%/)"), at);
        } else if !has_env {
            self.error(&format!("{field}.base_path"), "`base_path` goes with `base_url_env`, which is not set".into(), at);
        }
        text.clone()
    }

    /// `value = "env:VAR"` or `"file:PATH"`, or `command = [...]`: exactly one.
    fn credential_source(&mut self, field: &str, entry: &RawCredential, location: Option<Location>) -> Option<CredentialSource> {
        match (&entry.value, &entry.command) {
            (Some(value), None) => {
                let at = Some(self.locate(value.span()));
                if let Some(variable) = value.get_ref().strip_prefix("env:") {
                    if is_valid_env_name(variable) {
                        return Some(CredentialSource::Env(variable.to_owned()));
                    }
                    self.error(
                        &format!("{field}.value"),
                        format!("`env:{variable}`: `{variable}` is not a valid environment variable name"),
                        at,
                    );
                } else if let Some(path) = value.get_ref().strip_prefix("file:") {
                    let spanned = Spanned::new(value.span(), path.to_owned());
                    self.path_template(&format!("{field}.value"), &spanned);
                    return Some(CredentialSource::File(path.to_owned()));
                } else {
                    // Never echo the value: it may be a key written in by mistake.
                    let message = "is `env:VAR` or `file:PATH` (a key is never written in the configuration)".to_owned();
                    self.error(&format!("{field}.value"), message, at);
                }
                None
            }
            (None, Some(command)) => {
                let argv: Vec<String> = command.get_ref().iter().map(|word| word.get_ref().clone()).collect();
                if argv.first().is_none_or(|program| program.trim().is_empty()) {
                    self.error(&format!("{field}.command"), "the command is empty".into(), Some(self.locate(command.span())));
                    return None;
                }
                Some(CredentialSource::Command(argv))
            }
            (Some(_), Some(_)) => {
                self.error(field, "give `value` or `command`, not both".into(), location);
                None
            }
            (None, None) => {
                self.error(field, "give `value = \"env:VAR\"`, `value = \"file:PATH\"` or `command = [...]`".into(), location);
                None
            }
        }
    }
}

/// The profile's credentials with their ports, `file:` paths expanded by
/// `expand_path`; an origin the allowlist does not cover is a problem (the
/// sidecar reaches it under the same policy as the sandbox).
pub(super) fn resolve(
    profile: &str,
    credentials: &[CredentialConfig],
    allow_egress: &[EgressRule],
    mut expand_path: impl FnMut(&str, &Located<String>) -> crate::error::Result<String>,
) -> Result<Vec<ResolvedCredential>, Vec<Diagnostic>> {
    let mut names = lazaret_dns::NamePolicy::new();
    for rule in allow_egress {
        if let EgressRule::Domain(name) = rule {
            if let Ok(pattern) = lazaret_dns::NamePattern::parse(name) {
                names.allow(pattern);
            }
        }
    }
    let mut problems = Vec::new();
    let mut resolved = Vec::new();
    for (index, credential) in credentials.iter().enumerate() {
        let field = format!("profiles.{profile}.credentials[{index}]");
        let written = Located { value: credential.origin.to_string(), location: credential.location.clone() };
        let covered = match credential.origin.host.parse::<std::net::IpAddr>() {
            Ok(address) => allow_egress.iter().any(|rule| matches!(rule, EgressRule::Cidr(net) if net.contains(&address))),
            Err(_) => names.check_name(&credential.origin.host).is_ok(),
        };
        if !covered {
            problems.push(diagnostic(
                Severity::Invalid,
                &format!("{field}.origin"),
                format!(
                    "`{}` is not on the allowlist: add `{}` to allow_egress (the sidecar reaches the origin under the same policy as the sandbox)",
                    credential.origin, credential.origin.host
                ),
                &written,
            ));
        }
        let source = match &credential.source {
            CredentialSource::File(path) => {
                match expand_path(&format!("{field}.value"), &Located { value: path.clone(), location: credential.location.clone() }) {
                    Ok(expanded) if expanded.starts_with('/') => CredentialSource::File(expanded),
                    Ok(expanded) => {
                        problems.push(diagnostic(
                            Severity::Invalid,
                            &format!("{field}.value"),
                            format!("`file:{expanded}` is not an absolute path"),
                            &written,
                        ));
                        continue;
                    }
                    Err(crate::error::Error::Config(more)) => {
                        problems.extend(more);
                        continue;
                    }
                    Err(other) => {
                        problems.push(diagnostic(Severity::Invalid, &format!("{field}.value"), other.to_string(), &written));
                        continue;
                    }
                }
            }
            other => other.clone(),
        };
        resolved.push(ResolvedCredential {
            origin: credential.origin.to_string(),
            header: credential.header.clone(),
            bearer: credential.bearer,
            source,
            port: CREDENTIAL_PORT_BASE + index as u16,
            base_url_env: credential.base_url_env.clone(),
            base_path: credential.base_path.clone(),
        });
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}
