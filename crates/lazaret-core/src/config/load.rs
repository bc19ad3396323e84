//! Loading: finding and reading `config.toml`, turning TOML errors into
//! located diagnostics, and assembling the checked tables into a
//! [`Config`].
//!
//! Invariants: the file is never looked for inside the workspace
//! (DECISIONS D7); an absent file at the default path means the built-in
//! defaults, an absent explicit file is an error; every problem the checks
//! find is reported at once, and a configuration with any problem yields no
//! [`Config`]; the built-in `default` profile always exists (a file may
//! replace it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::check::Checker;
use super::raw::{RawConfig, RawProfile};
use super::{Config, ConfigSource, ProfileConfig, DEFAULT_IMAGE, DEFAULT_PROFILE};
use crate::error::{Error, Result};
use crate::host::HostEnvironment;
use crate::location::Location;

/// `$XDG_CONFIG_HOME/lazaret/config.toml`, else `~/.config/lazaret/config.toml`.
/// Never a path inside the workspace (DECISIONS D7).
pub fn default_config_path(host: &dyn HostEnvironment) -> Result<PathBuf> {
    let base = match host.var("XDG_CONFIG_HOME").filter(|value| value.starts_with('/')) {
        Some(dir) => PathBuf::from(dir),
        None => host.home_dir()?.join(".config"),
    };
    Ok(base.join("lazaret").join("config.toml"))
}

fn default_data_root(host: &dyn HostEnvironment) -> Result<PathBuf> {
    let base = match host.var("XDG_DATA_HOME").filter(|value| value.starts_with('/')) {
        Some(dir) => PathBuf::from(dir),
        None => host.home_dir()?.join(".local").join("share"),
    };
    Ok(base.join("lazaret"))
}

/// A profile without `image`, named with its table (issue 27: the parser's
/// own error said `1:1: missing field image`, which names neither).
fn missing_profile_image(text: &str, path: &Path, message: &str) -> Option<Error> {
    if message.trim() != "missing field `image`" {
        return None;
    }
    let table: toml::Table = toml::from_str(text).ok()?;
    let profiles = table.get("profiles")?.as_table()?;
    let (name, _) = profiles.iter().find(|(_, profile)| profile.as_table().is_some_and(|profile| !profile.contains_key("image")))?;
    let header = format!("[profiles.{name}]");
    let location = text.find(&header).map(|start| Location::from_span(path, text, start..start + header.len()));
    Some(Error::invalid(
        format!("profiles.{name}.image"),
        format!("`{header}` has no `image`: name the image the profile runs (for example `image = \"localhost/lazaret-default:1\"`)"),
        location,
    ))
}

impl Config {
    /// Loads `explicit_path` (which must exist), or the default path (which
    /// may be absent: then only the built-in profile exists).
    pub fn load(explicit_path: Option<&Path>, host: &dyn HostEnvironment) -> Result<Config> {
        let path = match explicit_path {
            Some(path) => path.to_path_buf(),
            None => default_config_path(host)?,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text, &path, host),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && explicit_path.is_none() => {
                Config::from_raw(RawConfig::default(), ConfigSource::BuiltIn { looked_at: path.clone() }, &path, "", host)
            }
            Err(source) => Err(Error::ReadConfig { path, source }),
        }
    }

    /// Parses and validates configuration text read from `path`.
    pub fn parse(text: &str, path: &Path, host: &dyn HostEnvironment) -> Result<Config> {
        let raw: RawConfig = toml::from_str(text).map_err(|error| {
            if let Some(missing) = missing_profile_image(text, path, error.message()) {
                return missing;
            }
            let location = error.span().map(|span| Location::from_span(path, text, span));
            Error::invalid("", error.message().trim().to_owned(), location)
        })?;
        Config::from_raw(raw, ConfigSource::File(path.to_path_buf()), path, text, host)
    }

    /// Checks every table of `raw` (written in `text`, read from `path`).
    fn from_raw(raw: RawConfig, source: ConfigSource, path: &Path, text: &str, host: &dyn HostEnvironment) -> Result<Config> {
        let mut checker = Checker::new(path, text);
        let data_root = match &raw.data_root {
            Some(value) => checker.host_directory("data_root", value, host),
            None => Some(default_data_root(host)?),
        };
        let escalation = checker.escalation(raw.escalation.as_ref(), host);
        let runsc = checker.runsc(raw.runtime.as_ref(), host);
        let limits = raw.limits.as_ref().map(|limits| checker.limits("limits", limits)).unwrap_or_default();
        let network = checker.network(raw.network.as_ref(), host);
        let profiles = profiles(&mut checker, &raw.profiles);
        let warnings = checker.finish()?;
        let (Some(data_root), Some(socket_root)) = (data_root, escalation.socket_root) else {
            return Err(Error::invalid("", "internal: unresolved directories without a diagnostic", None));
        };
        Ok(Config {
            source,
            data_root,
            socket_root,
            allow_egress: network.allow_egress,
            podman_network: network.podman_network,
            dns_upstream: network.dns_upstream,
            private_answers: network.private_answers,
            ask: network.ask,
            ask_hold_seconds: network.ask_hold_seconds,
            ca_bundle: network.ca_bundle,
            escalation_enabled: escalation.enabled,
            auto_approve: escalation.auto_approve,
            auto_approve_rules: escalation.auto_approve_rules,
            escalation_timeouts: escalation.timeouts,
            profiles,
            runsc,
            limits,
            warnings,
        })
    }
}

/// The built-in `default` profile and the file's profiles (one of the
/// file's named `default` replaces the built-in one).
fn profiles(checker: &mut Checker<'_>, raw: &BTreeMap<Spanned<String>, Spanned<RawProfile>>) -> BTreeMap<String, ProfileConfig> {
    let mut profiles = BTreeMap::new();
    profiles.insert(DEFAULT_PROFILE.to_owned(), built_in_default_profile());
    for (name, profile) in raw {
        if let Some(profile) = checker.profile(name, profile) {
            profiles.insert(profile.name.clone(), profile);
        }
    }
    profiles
}

fn built_in_default_profile() -> ProfileConfig {
    ProfileConfig {
        name: DEFAULT_PROFILE.to_owned(),
        image: DEFAULT_IMAGE.to_owned(),
        persistent_dirs: Vec::new(),
        allow_egress: Vec::new(),
        env: BTreeMap::new(),
        volumes: Vec::new(),
        command: Vec::new(),
        auto_approve: Vec::new(),
        auto_approve_rules: Vec::new(),
        limits: crate::limits::Limits::default(),
        ask: None,
        credentials: Vec::new(),
        backend: super::Backend::Podman,
        location: None,
    }
}
