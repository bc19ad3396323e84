//! The configuration model (DECISIONS D7):
//! loading `config.toml` with located diagnostics, static validation at load,
//! and resolution of one profile for one workspace (expansion, `env:` pulls,
//! canonicalization) into a [`ResolvedProfile`].
//!
//! This module never creates anything on disk: a configuration that fails
//! here leaves no trace (DECISIONS D8).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::domain::{DomainAnchor, DomainResources};
use crate::egress::EgressRule;
use crate::error::{Diagnostic, Error, Result, Severity};
use crate::expand::{self, TokenValues};
use crate::host::HostEnvironment;
use crate::image_reference::{self, Pinning};
use crate::location::Location;
use crate::paths;

/// The profile that exists without any configuration file.
pub const DEFAULT_PROFILE: &str = "default";
/// The image of the built-in profile; `lazaret image build` makes it offline.
pub const DEFAULT_IMAGE: &str = "localhost/lazaret-default:1";

/// Container paths owned by Lazaret. A volume or persistent directory may
/// not be one of them, lie inside one, or contain one.
pub const RESERVED_CONTAINER_PATHS: [&str; 3] = ["/workspace", "/workspace/.git", IN_CONTAINER_ROOT];
/// Lazaret's own directory inside the sandbox (certificates, the escalation
/// socket, `lazaret-escalate`).
pub const IN_CONTAINER_ROOT: &str = "/run/lazaret";
/// Kernel and runtime file systems that nothing may be mounted into.
const RUNTIME_CONTAINER_PATHS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Volume mount options Lazaret passes to podman.
pub const VOLUME_MODE_OPTIONS: [&str; 9] = ["ro", "rw", "z", "Z", "nosuid", "nodev", "noexec", "private", "rprivate"];

/// Longest Unix socket path (`sun_path` is 108 bytes with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

// ---------------------------------------------------------------------------
// The file as written. Spans let every later diagnostic point at its value.

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_root: Option<Spanned<String>>,
    network: Option<RawNetwork>,
    escalation: Option<RawEscalation>,
    runtime: Option<RawRuntime>,
    limits: Option<RawLimits>,
    #[serde(default)]
    profiles: BTreeMap<Spanned<String>, Spanned<RawProfile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    runsc: Option<Spanned<String>>,
}

/// `[limits]` and `[profiles.<name>.limits]` (see [`crate::limits`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<Spanned<String>>,
    processes: Option<Spanned<i64>>,
    cpus: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    allow_egress: Vec<Spanned<String>>,
    podman_network: Option<Spanned<String>>,
    #[serde(default)]
    dns_upstream: Vec<Spanned<String>>,
    private_answers: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEscalation {
    /// Default: on, as without the table.
    enabled: Option<bool>,
    /// Default: `$XDG_RUNTIME_DIR/lazaret` (DECISIONS D17).
    socket_dir: Option<Spanned<String>>,
    #[serde(default)]
    auto_approve: Vec<Spanned<String>>,
    approval_timeout_seconds: Option<Spanned<u64>>,
    command_timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    image: Spanned<String>,
    #[serde(default)]
    persistent_dirs: Vec<Spanned<String>>,
    #[serde(default)]
    allow_egress: Vec<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    volumes: Vec<Spanned<RawVolume>>,
    command: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    auto_approve: Vec<Spanned<String>>,
    limits: Option<RawLimits>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    host: Spanned<String>,
    container: Spanned<String>,
    mode: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------
// The validated configuration.

/// A value and where it was written (`None` for built-in values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub location: Option<Location>,
}

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// No file exists at the default path: built-in defaults only.
    BuiltIn {
        looked_at: PathBuf,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub source: ConfigSource,
    pub data_root: PathBuf,
    /// Parent of the per-domain socket directories.
    pub socket_root: PathBuf,
    pub allow_egress: Vec<EgressRule>,
    /// The podman network the Network Sidecar attaches to.
    pub podman_network: String,
    /// The resolvers the Network Sidecar asks for allowlisted names (empty:
    /// the nameservers podman gives the sidecar).
    pub dns_upstream: Vec<std::net::SocketAddr>,
    /// `[network] private_answers`: whether an allowlisted name's answer may
    /// open internal addresses no CIDR entry allows (default: refuse).
    pub private_answers: crate::egress::PrivateAnswers,
    pub escalation_enabled: bool,
    pub auto_approve: Vec<Located<String>>,
    /// `auto_approve`, parsed and validated by the policy engine.
    pub auto_approve_rules: Vec<crate::policy::AutoApproveRule>,
    pub escalation_timeouts: EscalationTimeouts,
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// `[runtime] runsc`: the runsc binary to run sandboxes with (absolute,
    /// canonical, existing). `None`: the newest runsc found.
    pub runsc: Option<PathBuf>,
    /// `[limits]`: every profile's limits where it sets none itself.
    pub limits: crate::limits::Limits,
    pub warnings: Vec<Diagnostic>,
}

/// How long a request waits for a human, and how long a host command may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EscalationTimeouts {
    pub approval_seconds: u64,
    pub command_seconds: u64,
}

impl Default for EscalationTimeouts {
    fn default() -> EscalationTimeouts {
        EscalationTimeouts { approval_seconds: 300, command_seconds: 600 }
    }
}

#[derive(Debug, Clone)]
pub struct ProfileConfig {
    pub name: String,
    pub image: String,
    pub persistent_dirs: Vec<Located<String>>,
    pub allow_egress: Vec<EgressRule>,
    pub env: BTreeMap<String, Located<String>>,
    pub volumes: Vec<VolumeConfig>,
    /// The command a session runs when `lazaret run` names none (empty: the
    /// image's `CMD`).
    pub command: Vec<String>,
    /// The profile's own `auto_approve` entries, added to `[escalation]`'s.
    pub auto_approve: Vec<Located<String>>,
    pub auto_approve_rules: Vec<crate::policy::AutoApproveRule>,
    /// The profile's own `limits` (keys it leaves out come from `[limits]`).
    pub limits: crate::limits::Limits,
    pub location: Option<Location>,
}

#[derive(Debug, Clone)]
pub struct VolumeConfig {
    pub host: Located<String>,
    pub container: Located<String>,
    /// Validated podman options, e.g. `["ro", "z"]`; `ro` when not written.
    pub mode: Vec<String>,
}

/// One profile resolved for one workspace: every token expanded, every host
/// path canonical, every `env:` pulled.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub struct ResolvedProfile {
    pub profile: String,
    pub image: String,
    pub workspace: PathBuf,
    pub data_root: PathBuf,
    pub profile_dir: PathBuf,
    pub domain: DomainResources,
    pub persistent_dirs: Vec<PathBuf>,
    /// Global `[network] allow_egress` followed by the profile's, deduplicated.
    pub allow_egress: Vec<EgressRule>,
    pub podman_network: String,
    /// `[network] dns_upstream` (empty: podman's nameservers for the sidecar).
    pub dns_upstream: Vec<std::net::SocketAddr>,
    /// `[network] private_answers`.
    pub private_answers: crate::egress::PrivateAnswers,
    pub env: BTreeMap<String, ResolvedEnv>,
    pub volumes: Vec<ResolvedVolume>,
    /// The profile's default command (empty: the image's `CMD`).
    pub command: Vec<String>,
    pub escalation_enabled: bool,
    #[serde(skip)]
    /// `[escalation] auto_approve` followed by the profile's own.
    pub auto_approve_rules: Vec<crate::policy::AutoApproveRule>,
    pub escalation_timeouts: EscalationTimeouts,
    /// `[runtime] runsc`, if configured.
    pub runsc: Option<PathBuf>,
    /// The profile's `limits` over `[limits]`; unset keys take the defaults.
    pub limits: crate::limits::Limits,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ResolvedEnv {
    pub value: String,
    /// The host variable the value was pulled from (`env:VAR`), if any.
    /// Such values are secrets as far as display is concerned.
    pub from_host: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ResolvedVolume {
    pub host: PathBuf,
    pub container: PathBuf,
    pub mode: Vec<String>,
    pub host_exists: bool,
}

impl ResolvedVolume {
    /// The `--volume` argument for podman.
    pub fn podman_argument(&self) -> String {
        format!("{}:{}:{}", self.host.display(), self.container.display(), self.mode.join(","))
    }
}

// ---------------------------------------------------------------------------
// Loading.

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

fn default_socket_root(host: &dyn HostEnvironment) -> PathBuf {
    match host.var("XDG_RUNTIME_DIR").filter(|value| value.starts_with('/')) {
        Some(dir) => PathBuf::from(dir).join("lazaret"),
        None => PathBuf::from(format!("/tmp/lazaret-{}", host.uid())),
    }
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

    fn from_raw(raw: RawConfig, source: ConfigSource, path: &Path, text: &str, host: &dyn HostEnvironment) -> Result<Config> {
        let mut checker = Checker { path, text, diagnostics: Vec::new(), warnings: Vec::new() };
        let data_root = match &raw.data_root {
            Some(value) => checker.host_directory("data_root", value, host),
            None => Some(default_data_root(host)?),
        };
        let (escalation_enabled, socket_root, auto_approve) = match &raw.escalation {
            Some(escalation) => (
                escalation.enabled.unwrap_or(true),
                match &escalation.socket_dir {
                    Some(socket_dir) => checker.host_directory("escalation.socket_dir", socket_dir, host),
                    None => Some(default_socket_root(host)),
                },
                escalation.auto_approve.iter().map(|entry| checker.auto_approve_entry(entry)).collect(),
            ),
            None => (true, Some(default_socket_root(host)), Vec::new()),
        };
        if let Some(socket_root) = &socket_root {
            let longest = socket_root.join("0123456789ab").join("escalate.sock");
            if longest.as_os_str().len() > MAX_SOCKET_PATH {
                let location = raw.escalation.as_ref().and_then(|e| e.socket_dir.as_ref()).map(|dir| checker.locate(dir.span()));
                checker.error(
                    "escalation.socket_dir",
                    format!("`{}` is too long: socket paths under it would exceed {MAX_SOCKET_PATH} bytes", socket_root.display()),
                    location,
                );
            }
        }
        let mut escalation_timeouts = EscalationTimeouts::default();
        if let Some(escalation) = &raw.escalation {
            for (field, value, target) in [
                ("escalation.approval_timeout_seconds", &escalation.approval_timeout_seconds, &mut escalation_timeouts.approval_seconds),
                ("escalation.command_timeout_seconds", &escalation.command_timeout_seconds, &mut escalation_timeouts.command_seconds),
            ] {
                if let Some(value) = value {
                    if !(1..=86_400).contains(value.get_ref()) {
                        checker.error(
                            field,
                            format!("`{}` is out of range (1 to 86400 seconds)", value.get_ref()),
                            Some(checker.locate(value.span())),
                        );
                    }
                    *target = *value.get_ref();
                }
            }
        }
        let auto_approve_rules: Vec<crate::policy::AutoApproveRule> = raw
            .escalation
            .iter()
            .flat_map(|escalation| escalation.auto_approve.iter())
            .filter_map(|entry| match crate::policy::parse_auto_approve_entry(entry.get_ref()) {
                Ok(rule) => Some(rule),
                Err(error) => {
                    checker.error("escalation.auto_approve", error.to_string(), Some(checker.locate(entry.span())));
                    None
                }
            })
            .collect();
        let runsc = raw.runtime.as_ref().and_then(|runtime| runtime.runsc.as_ref()).and_then(|value| {
            let path = checker.host_directory("runtime.runsc", value, host)?;
            match host.canonicalize(&path) {
                Ok(path) => Some(path),
                Err(error) => {
                    let location = Some(checker.locate(value.span()));
                    checker.error("runtime.runsc", format!("`{}` cannot be used: {error}", value.get_ref()), location);
                    None
                }
            }
        });
        let limits = raw.limits.as_ref().map(|limits| checker.limits("limits", limits)).unwrap_or_default();
        let global_egress = raw.network.as_ref().map(|n| checker.egress("network.allow_egress", &n.allow_egress)).unwrap_or_default();
        let podman_network = match raw.network.as_ref().and_then(|network| network.podman_network.as_ref()) {
            Some(name) => {
                let valid = !name.get_ref().is_empty() && name.get_ref().chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
                if !valid {
                    checker.error(
                        "network.podman_network",
                        format!("`{}` is not a valid podman network name", name.get_ref()),
                        Some(checker.locate(name.span())),
                    );
                }
                name.get_ref().clone()
            }
            None => "podman".to_owned(),
        };
        let mut dns_upstream = Vec::new();
        for entry in raw.network.as_ref().map(|network| network.dns_upstream.as_slice()).unwrap_or_default() {
            let text = entry.get_ref();
            let parsed = text.parse::<std::net::IpAddr>().map(|address| std::net::SocketAddr::new(address, 53)).or_else(|_| text.parse());
            match parsed {
                Ok(address) => dns_upstream.push(address),
                Err(_) => checker.error(
                    "network.dns_upstream",
                    format!("`{text}` is not an IP address (optionally with a port, e.g. 10.0.0.53 or [fd00::53]:5353)"),
                    Some(checker.locate(entry.span())),
                ),
            }
        }
        let private_answers = match raw.network.as_ref().and_then(|network| network.private_answers.as_ref()) {
            None => crate::egress::PrivateAnswers::default(),
            Some(value) => crate::egress::PrivateAnswers::parse(value.get_ref()).unwrap_or_else(|| {
                checker.error(
                    "network.private_answers",
                    format!("`{}` is not a choice: \"refuse\" (the default) or \"allow\"", value.get_ref()),
                    Some(checker.locate(value.span())),
                );
                crate::egress::PrivateAnswers::default()
            }),
        };

        let mut profiles = BTreeMap::new();
        profiles.insert(DEFAULT_PROFILE.to_owned(), built_in_default_profile());
        for (name, profile) in &raw.profiles {
            if let Some(profile) = checker.profile(name, profile) {
                profiles.insert(profile.name.clone(), profile);
            }
        }

        if !checker.diagnostics.is_empty() {
            return Err(Error::Config(checker.diagnostics));
        }
        let (Some(data_root), Some(socket_root)) = (data_root, socket_root) else {
            return Err(Error::invalid("", "internal: unresolved directories without a diagnostic", None));
        };
        Ok(Config {
            source,
            data_root,
            socket_root,
            allow_egress: global_egress,
            podman_network,
            dns_upstream,
            private_answers,
            escalation_enabled,
            auto_approve,
            auto_approve_rules,
            escalation_timeouts,
            profiles,
            runsc,
            limits,
            warnings: checker.warnings,
        })
    }

    pub fn profile(&self, name: &str) -> Result<&ProfileConfig> {
        self.profiles.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            if is_valid_profile_name(name) {
                Error::invalid("profile", format!("no profile named `{name}` (known: {})", known.join(", ")), None)
            } else {
                Error::invalid("profile", format!("profile name `{name}` is invalid: it must match ^[a-z0-9_-]{{2,32}}$"), None)
            }
        })
    }

    /// Resolves `profile` for the canonical `workspace`.
    pub fn resolve(&self, profile_name: &str, workspace: &Path, host: &dyn HostEnvironment) -> Result<ResolvedProfile> {
        let profile = self.profile(profile_name)?;
        let anchor = DomainAnchor::new(&profile.name, workspace)?;
        let domain = DomainResources::new(&anchor, &self.data_root, &self.socket_root);
        let profile_dir = self.data_root.join(&profile.name);
        let values = TokenValues {
            profile_name: profile.name.clone(),
            profile_dir: profile_dir.to_string_lossy().into_owned(),
            domain_hash: domain.domain_hash.clone(),
            domain_dir: domain.domain_dir.to_string_lossy().into_owned(),
            workspace_dir: workspace.to_string_lossy().into_owned(),
        };
        let home = host.home_dir()?;
        let field = |suffix: String| format!("profiles.{}.{suffix}", profile.name);
        let mut diagnostics = Vec::new();

        let mut persistent_dirs = Vec::new();
        for (index, dir) in profile.persistent_dirs.iter().enumerate() {
            let name = field(format!("persistent_dirs[{index}]"));
            match expand_checked(&name, dir, &values, None).and_then(|path| container_path(&name, &path, dir)) {
                Ok(path) if persistent_dirs.contains(&path) => {
                    diagnostics.push(diagnostic(Severity::Invalid, &name, format!("`{}` is listed twice", path.display()), dir))
                }
                Ok(path) => persistent_dirs.push(path),
                Err(error) => push_errors(&mut diagnostics, error),
            }
        }

        let mut env = BTreeMap::new();
        for (key, value) in &profile.env {
            let name = field(format!("env.{key}"));
            let resolved = match value.value.strip_prefix("env:") {
                Some(variable) => match host.var(variable) {
                    Some(pulled) => Ok(ResolvedEnv { value: pulled, from_host: Some(variable.to_owned()) }),
                    None => Err(Error::Config(vec![diagnostic(
                        Severity::Invalid,
                        &name,
                        format!("`env:{variable}` names the host variable `{variable}`, which is not set"),
                        value,
                    )])),
                },
                None => expand_checked(&name, value, &values, None).map(|expanded| ResolvedEnv { value: expanded, from_host: None }),
            };
            match resolved {
                Ok(resolved) => {
                    env.insert(key.clone(), resolved);
                }
                Err(error) => push_errors(&mut diagnostics, error),
            }
        }

        let git_dir = workspace.join(".git");
        let mut volumes: Vec<ResolvedVolume> = Vec::new();
        for (index, volume) in profile.volumes.iter().enumerate() {
            let host_field = field(format!("volumes[{index}].host"));
            let container_field = field(format!("volumes[{index}].container"));
            let host_path = expand_checked(&host_field, &volume.host, &values, Some(&home))
                .and_then(|expanded| self.volume_host_path(&host_field, &expanded, &volume.host, &volume.mode, &domain, &git_dir, host));
            let container = expand_checked(&container_field, &volume.container, &values, None)
                .and_then(|expanded| container_path(&container_field, &expanded, &volume.container));
            match (host_path, container) {
                (Ok((host_path, host_exists)), Ok(container)) => {
                    if volumes.iter().any(|other| other.container == container) {
                        diagnostics.push(diagnostic(
                            Severity::Invalid,
                            &container_field,
                            format!("`{}` is the target of two volumes", container.display()),
                            &volume.container,
                        ));
                    } else {
                        volumes.push(ResolvedVolume { host: host_path, container, mode: volume.mode.clone(), host_exists });
                    }
                }
                (host_result, container_result) => {
                    for error in [host_result.err(), container_result.err()].into_iter().flatten() {
                        push_errors(&mut diagnostics, error);
                    }
                }
            }
        }

        if !diagnostics.is_empty() {
            return Err(Error::Config(diagnostics));
        }
        let mut allow_egress = self.allow_egress.clone();
        for rule in &profile.allow_egress {
            if !allow_egress.contains(rule) {
                allow_egress.push(rule.clone());
            }
        }
        Ok(ResolvedProfile {
            profile: profile.name.clone(),
            image: profile.image.clone(),
            workspace: workspace.to_path_buf(),
            data_root: self.data_root.clone(),
            profile_dir,
            domain,
            persistent_dirs,
            allow_egress,
            podman_network: self.podman_network.clone(),
            dns_upstream: self.dns_upstream.clone(),
            private_answers: self.private_answers,
            env,
            volumes,
            command: profile.command.clone(),
            escalation_enabled: self.escalation_enabled,
            auto_approve_rules: self.auto_approve_rules.iter().chain(&profile.auto_approve_rules).cloned().collect(),
            escalation_timeouts: self.escalation_timeouts,
            runsc: self.runsc.clone(),
            limits: profile.limits.or(self.limits),
        })
    }

    /// Checks an expanded volume host path: absolute, no `..`, canonical, and
    /// clear of the paths that would hand the agent Lazaret's own controls.
    #[allow(clippy::too_many_arguments)]
    fn volume_host_path(
        &self,
        field: &str,
        expanded: &str,
        written: &Located<String>,
        mode: &[String],
        domain: &DomainResources,
        git_dir: &Path,
        host: &dyn HostEnvironment,
    ) -> Result<(PathBuf, bool)> {
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
        let (canonical, exists) = paths::canonicalize_lenient(host, Path::new(expanded)).map_err(|error| {
            Error::Config(vec![diagnostic(Severity::Invalid, field, format!("cannot resolve `{expanded}`: {error}"), written)])
        })?;
        let refuse = |why: String| Error::Config(vec![diagnostic(Severity::Security, field, why, written)]);
        let read_only = mode.iter().any(|option| option == "ro");
        if paths::overlaps(&canonical, &self.socket_root) {
            return Err(refuse(format!(
                "`{}` overlaps Lazaret's socket directory {}; mounting it would expose host sockets to the sandbox",
                canonical.display(),
                self.socket_root.display()
            )));
        }
        if paths::is_within(&canonical, git_dir) || (!read_only && paths::is_within(git_dir, &canonical)) {
            return Err(refuse(format!(
                "`{}` overlaps the workspace's git directory; the host's .git is never mounted into the sandbox writable or in part (DECISIONS D1)",
                canonical.display()
            )));
        }
        let writable_guarded = [(&domain.domain_dir, "the domain's state directory"), (&self.data_root, "Lazaret's data_root")];
        for (guarded, what) in writable_guarded {
            if !read_only && paths::is_within(guarded, &canonical) {
                return Err(refuse(format!(
                    "`{}` contains {what} ({}); mount it read-only (mode = \"ro\") or choose a narrower path",
                    canonical.display(),
                    guarded.display()
                )));
            }
        }
        if !read_only
            && paths::is_within(&canonical, &domain.domain_dir)
            && !paths::is_within(&canonical, &domain.domain_dir.join("volumes"))
        {
            return Err(refuse(format!(
                "`{}` is inside the domain's state directory; writable volumes there must live under {{domain_dir}}/volumes",
                canonical.display()
            )));
        }
        if let ConfigSource::File(config_file) = &self.source {
            if let Some(config_dir) = config_file.parent() {
                if !read_only && paths::is_within(config_dir, &canonical) {
                    return Err(refuse(format!(
                        "`{}` contains Lazaret's configuration ({}); the agent must not be able to write it",
                        canonical.display(),
                        config_dir.display()
                    )));
                }
            }
        }
        Ok((canonical, exists))
    }
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
        location: None,
    }
}

/// Canonicalizes a workspace directory; it must exist and be a directory.
pub fn canonical_workspace(path: &Path, host: &dyn HostEnvironment) -> Result<PathBuf> {
    let workspace_error = |message: String| Error::Workspace { path: path.to_path_buf(), message };
    // A `..` in a workspace typed on the command line is the user's own shell
    // path: it is resolved here, not refused. Only configured paths are.
    let canonical = host.canonicalize(path).map_err(|error| workspace_error(format!("cannot resolve: {error}")))?;
    if !canonical.is_dir() {
        return Err(workspace_error("not a directory".into()));
    }
    if canonical.to_str().is_none() {
        return Err(workspace_error("the path is not valid UTF-8".into()));
    }
    Ok(canonical)
}

/// Is `name` a valid profile name (`^[a-z0-9_-]{2,32}$`)?
pub fn is_valid_profile_name(name: &str) -> bool {
    (2..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_') && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn diagnostic(severity: Severity, field: &str, message: String, at: &Located<String>) -> Diagnostic {
    Diagnostic { severity, field: field.to_owned(), message, location: at.location.clone() }
}

fn push_errors(diagnostics: &mut Vec<Diagnostic>, error: Error) {
    match error {
        Error::Config(more) => diagnostics.extend(more),
        other => {
            diagnostics.push(Diagnostic { severity: Severity::Invalid, field: String::new(), message: other.to_string(), location: None })
        }
    }
}

fn expand_checked(field: &str, value: &Located<String>, values: &TokenValues, home: Option<&Path>) -> Result<String> {
    let expanded = expand::expand(&value.value, values, home)
        .map_err(|error| Error::Config(vec![diagnostic(Severity::Invalid, field, error.to_string(), value)]))?;
    if paths::has_parent_segment(&expanded) {
        return Err(Error::Config(vec![diagnostic(
            Severity::Security,
            field,
            format!("`{expanded}` contains a `..` segment; refusing to resolve it"),
            value,
        )]));
    }
    Ok(expanded)
}

/// Validates an expanded container path.
fn container_path(field: &str, expanded: &str, written: &Located<String>) -> Result<PathBuf> {
    let invalid = |message: String| Error::Config(vec![diagnostic(Severity::Invalid, field, message, written)]);
    if !expanded.starts_with('/') {
        return Err(invalid(format!("`{expanded}` is not an absolute container path")));
    }
    let path = PathBuf::from(expanded);
    if path == Path::new("/") {
        return Err(invalid("`/` would replace the whole container file system".into()));
    }
    for reserved in RESERVED_CONTAINER_PATHS {
        if paths::overlaps(&path, Path::new(reserved)) {
            return Err(invalid(format!("`{expanded}` would shadow `{reserved}`, which Lazaret reserves")));
        }
    }
    for runtime in RUNTIME_CONTAINER_PATHS {
        if paths::is_within(&path, Path::new(runtime)) {
            return Err(invalid(format!("`{expanded}` is inside `{runtime}`, which belongs to the container runtime")));
        }
    }
    Ok(path)
}

/// Static validation at load time, collecting every problem.
struct Checker<'a> {
    path: &'a Path,
    text: &'a str,
    diagnostics: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn locate(&self, span: std::ops::Range<usize>) -> Location {
        Location::from_span(self.path, self.text, span)
    }

    fn located(&self, value: &Spanned<String>) -> Located<String> {
        Located { value: value.get_ref().clone(), location: Some(self.locate(value.span())) }
    }

    fn error(&mut self, field: &str, message: String, location: Option<Location>) {
        self.diagnostics.push(Diagnostic { severity: Severity::Invalid, field: field.to_owned(), message, location });
    }

    fn security(&mut self, field: &str, message: String, location: Option<Location>) {
        self.diagnostics.push(Diagnostic { severity: Severity::Security, field: field.to_owned(), message, location });
    }

    /// `data_root` or `socket_dir`: tilde allowed, no tokens, absolute, no `..`.
    fn host_directory(&mut self, field: &str, value: &Spanned<String>, host: &dyn HostEnvironment) -> Option<PathBuf> {
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

    fn auto_approve_entry(&mut self, entry: &Spanned<String>) -> Located<String> {
        if entry.get_ref().trim().is_empty() {
            self.error("escalation.auto_approve", "an entry is empty".into(), Some(self.locate(entry.span())));
        }
        self.located(entry)
    }

    fn egress(&mut self, field: &str, entries: &[Spanned<String>]) -> Vec<EgressRule> {
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

    fn tokens(&mut self, field: &str, value: &Spanned<String>) {
        if let Err(error) = expand::check_tokens(value.get_ref()) {
            self.error(field, error.to_string(), Some(self.locate(value.span())));
        }
    }

    fn profile(&mut self, name: &Spanned<String>, raw: &Spanned<RawProfile>) -> Option<ProfileConfig> {
        let profile_name = name.get_ref();
        let name_location = Some(self.locate(name.span()));
        let errors_before = self.diagnostics.len();
        if !is_valid_profile_name(profile_name) {
            self.error(
                "profiles",
                format!("profile name `{profile_name}` is invalid: it must match ^[a-z0-9_-]{{2,32}}$"),
                name_location.clone(),
            );
        } else if profile_name == "domains" {
            self.error(
                "profiles",
                "profile name `domains` is reserved (it would collide with <data_root>/domains)".into(),
                name_location.clone(),
            );
        }
        let field = |suffix: &str| format!("profiles.{profile_name}.{suffix}");
        let raw = raw.get_ref();

        let image = raw.image.get_ref();
        let image_location = Some(self.locate(raw.image.span()));
        match image_reference::pinning(image) {
            Err(message) => self.error(&field("image"), message, image_location),
            Ok(Pinning::Latest | Pinning::Unpinned) => self.warnings.push(Diagnostic {
                severity: Severity::Invalid,
                field: field("image"),
                message: format!("`{image}` is not pinned; pin a tag other than `latest` or a @sha256 digest to avoid silent drift"),
                location: image_location,
            }),
            Ok(Pinning::Digest | Pinning::Tag(_)) => {}
        }

        for (index, dir) in raw.persistent_dirs.iter().enumerate() {
            let name = field(&format!("persistent_dirs[{index}]"));
            self.tokens(&name, dir);
            if paths::has_parent_segment(dir.get_ref()) {
                self.security(
                    &name,
                    format!("`{}` contains a `..` segment; refusing to resolve it", dir.get_ref()),
                    Some(self.locate(dir.span())),
                );
            }
        }

        let allow_egress = self.egress(&field("allow_egress"), &raw.allow_egress);

        let mut env = BTreeMap::new();
        for (key, value) in &raw.env {
            let key_name = key.get_ref();
            let name = field(&format!("env.{key_name}"));
            if !is_valid_env_name(key_name) {
                self.error(&name, format!("`{key_name}` is not a valid environment variable name"), Some(self.locate(key.span())));
            } else if key_name.starts_with("LAZARET_") {
                self.error(
                    &name,
                    format!("`{key_name}`: variables starting with LAZARET_ are set by Lazaret itself"),
                    Some(self.locate(key.span())),
                );
            }
            match value.get_ref().strip_prefix("env:") {
                Some(variable) if !is_valid_env_name(variable) => self.error(
                    &name,
                    format!("`env:{variable}`: `{variable}` is not a valid environment variable name"),
                    Some(self.locate(value.span())),
                ),
                Some(_) => {}
                None => self.tokens(&name, value),
            }
            env.insert(key_name.clone(), self.located(value));
        }

        let mut volumes = Vec::new();
        for (index, volume) in raw.volumes.iter().enumerate() {
            let volume = volume.get_ref();
            let host_field = field(&format!("volumes[{index}].host"));
            self.tokens(&host_field, &volume.host);
            if paths::has_parent_segment(volume.host.get_ref()) {
                self.security(
                    &host_field,
                    format!("`{}` contains a `..` segment; refusing to resolve it", volume.host.get_ref()),
                    Some(self.locate(volume.host.span())),
                );
            }
            self.tokens(&field(&format!("volumes[{index}].container")), &volume.container);
            let mode = match &volume.mode {
                Some(mode) => self.volume_mode(&field(&format!("volumes[{index}].mode")), mode),
                None => vec!["ro".to_owned()],
            };
            volumes.push(VolumeConfig { host: self.located(&volume.host), container: self.located(&volume.container), mode });
        }

        let command = match &raw.command {
            Some(command) => {
                let words: Vec<String> = command.get_ref().iter().map(|word| word.get_ref().clone()).collect();
                if words.first().is_none_or(|program| program.trim().is_empty()) {
                    self.error(
                        &field("command"),
                        "the command is empty: name a program (e.g. [\"claude\"]) or leave `command` out to run the image's CMD".into(),
                        Some(self.locate(command.span())),
                    );
                }
                words
            }
            None => Vec::new(),
        };

        let mut auto_approve_rules = Vec::new();
        for entry in &raw.auto_approve {
            match crate::policy::parse_auto_approve_entry(entry.get_ref()) {
                Ok(rule) => auto_approve_rules.push(rule),
                Err(error) => self.error(&field("auto_approve"), error.to_string(), Some(self.locate(entry.span()))),
            }
        }

        let limits = raw.limits.as_ref().map(|limits| self.limits(&format!("profiles.{profile_name}.limits"), limits)).unwrap_or_default();

        if self.diagnostics.len() > errors_before {
            return None;
        }
        Some(ProfileConfig {
            name: profile_name.clone(),
            image: image.clone(),
            persistent_dirs: raw.persistent_dirs.iter().map(|dir| self.located(dir)).collect(),
            allow_egress,
            env,
            volumes,
            command,
            auto_approve: raw.auto_approve.iter().map(|entry| self.located(entry)).collect(),
            auto_approve_rules,
            limits,
            location: name_location,
        })
    }

    /// `[limits]` or a profile's `limits`: each value checked, named by
    /// `prefix.key` in the diagnostic.
    fn limits(&mut self, prefix: &str, raw: &RawLimits) -> crate::limits::Limits {
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

    fn volume_mode(&mut self, field: &str, mode: &Spanned<String>) -> Vec<String> {
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

#[cfg(test)]
mod tests;
