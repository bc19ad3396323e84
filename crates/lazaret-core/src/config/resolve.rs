//! Resolution of one profile for one workspace: every token expanded, every
//! host path canonical, every `env:` pulled, the global settings merged in,
//! giving a [`ResolvedProfile`].
//!
//! Invariants: resolution reads the host (variables, home, lenient
//! canonicalization) but creates nothing; it reports every problem of the
//! profile at once; no resolved path has a `..` segment, and every one is
//! absolute; no volume's container path touches a path Lazaret reserves or
//! the runtime owns; the host side of a volume is checked by `volume_host`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::check::{diagnostic, is_valid_profile_name};
use super::volume_host::ControlPaths;
use super::{
    Backend, Config, ConfigSource, EscalationTimeouts, KubernetesEgress, Located, ProfileConfig, VolumeConfig, RESERVED_CONTAINER_PATHS,
};
use crate::domain::{DomainAnchor, DomainResources};
use crate::egress::EgressRule;
use crate::error::{Diagnostic, Error, Result, Severity};
use crate::expand::{self, TokenValues};
use crate::host::HostEnvironment;
use crate::paths;

/// Kernel and runtime file systems that nothing may be mounted into.
const RUNTIME_CONTAINER_PATHS: [&str; 3] = ["/proc", "/sys", "/dev"];

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
    /// The profile's `ask`, else `[network] ask`: names on no allow entry
    /// become network requests for a human.
    pub ask: bool,
    /// `[network] ask_hold_seconds`.
    pub ask_hold_seconds: u64,
    pub env: BTreeMap<String, ResolvedEnv>,
    pub volumes: Vec<ResolvedVolume>,
    /// The profile's default command (empty: the image's `CMD`).
    pub command: Vec<String>,
    pub escalation_enabled: bool,
    #[serde(skip)]
    /// `[escalation] auto_approve` followed by the profile's own.
    pub auto_approve_rules: Vec<crate::policy::AutoApproveRule>,
    #[serde(skip)]
    /// The entries of `auto_approve_rules` as written, each with where it
    /// was written (`file:line:column`, or the table when unknown).
    pub auto_approve_entries: Vec<(String, String)>,
    pub escalation_timeouts: EscalationTimeouts,
    /// `[runtime] runsc`, if configured.
    pub runsc: Option<PathBuf>,
    /// The profile's `limits` over `[limits]`; unset keys take the defaults.
    pub limits: crate::limits::Limits,
    /// The credential endpoints (never a key: only where it comes from).
    pub credentials: Vec<super::ResolvedCredential>,
    /// `[network] ca_bundle`, if configured.
    pub ca_bundle: Option<PathBuf>,
    /// Where the sandbox runs.
    pub backend: super::Backend,
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

/// The paths of a profile, resolved.
struct ResolvedPaths {
    persistent_dirs: Vec<PathBuf>,
    env: BTreeMap<String, ResolvedEnv>,
    volumes: Vec<ResolvedVolume>,
}

impl Config {
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
        let git_dir = workspace.join(".git");
        let controls = self.control_paths(&domain, &git_dir);
        let resolution = Resolution { profile, values: &values, home: &home, controls, host, diagnostics: Vec::new() };
        let ResolvedPaths { persistent_dirs, mut env, volumes } = resolution.paths()?;
        let mut allow_egress = self.allow_egress.clone();
        for rule in &profile.allow_egress {
            if !allow_egress.contains(rule) {
                allow_egress.push(rule.clone());
            }
        }
        let ask = profile.ask.unwrap_or(self.ask);
        cluster_allows(profile, &allow_egress, ask)?;
        let credentials = super::credentials::resolve(&profile.name, &profile.credentials, &allow_egress, |field, path| {
            expand_checked(field, path, &values, Some(&home))
        })
        .map_err(Error::Config)?;
        for credential in &credentials {
            if let Some(name) = &credential.base_url_env {
                env.insert(name.clone(), ResolvedEnv { value: credential.base_url(), from_host: None });
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
            ask,
            ask_hold_seconds: self.ask_hold_seconds,
            env,
            volumes,
            command: profile.command.clone(),
            escalation_enabled: self.escalation_enabled,
            auto_approve_rules: self.auto_approve_rules.iter().chain(&profile.auto_approve_rules).cloned().collect(),
            auto_approve_entries: written_where(&self.auto_approve, "[escalation] auto_approve")
                .chain(written_where(&profile.auto_approve, &format!("[profiles.{}] auto_approve", profile.name)))
                .collect(),
            escalation_timeouts: self.escalation_timeouts,
            runsc: self.runsc.clone(),
            limits: profile.limits.or(self.limits),
            credentials,
            ca_bundle: self.ca_bundle.clone(),
            backend: profile.backend.clone(),
        })
    }

    fn control_paths<'a>(&'a self, domain: &'a DomainResources, git_dir: &'a Path) -> ControlPaths<'a> {
        let config_dir = match &self.source {
            ConfigSource::File(config_file) => config_file.parent(),
            ConfigSource::BuiltIn { .. } => None,
        };
        ControlPaths { socket_root: &self.socket_root, git_dir, domain_dir: &domain.domain_dir, data_root: &self.data_root, config_dir }
    }
}

/// What a cluster profile cannot have once the global settings are merged
/// in (the profile's own keys are checked at load, `backend`): an allowlist
/// where the cluster has no egress, and questions about blocked names.
fn cluster_allows(profile: &ProfileConfig, allow_egress: &[EgressRule], ask: bool) -> Result<()> {
    let Backend::Kubernetes(kubernetes) = &profile.backend else { return Ok(()) };
    let field = format!("profiles.{}.backend", profile.name);
    if let (KubernetesEgress::None, Some(first)) = (kubernetes.egress, allow_egress.first()) {
        return Err(Error::security(
            &field,
            format!(
                "[network] allow_egress allows `{first}`, but the profile's cluster has no egress (egress = \"none\"); \
                 Lazaret never opens what it cannot enforce: remove the allowlist or use an FQDN-capable enforcer (\"cilium\")"
            ),
            profile.location.clone(),
        ));
    }
    if ask {
        return Err(Error::invalid(
            &field,
            "[network] ask is on, but questions about blocked names come from the Network Sidecar, which a cluster profile does not have yet; \
             set `ask = false` in the profile"
                .to_owned(),
            profile.location.clone(),
        ));
    }
    Ok(())
}

/// The resolution of one profile's paths and environment, collecting every
/// problem.
struct Resolution<'a> {
    profile: &'a ProfileConfig,
    values: &'a TokenValues,
    home: &'a Path,
    controls: ControlPaths<'a>,
    host: &'a dyn HostEnvironment,
    diagnostics: Vec<Diagnostic>,
}

impl Resolution<'_> {
    /// Persistent directories, environment and volumes, or every problem
    /// found in them as one error.
    fn paths(mut self) -> Result<ResolvedPaths> {
        let persistent_dirs = self.persistent_dirs();
        let env = self.env();
        let volumes = self.volumes();
        if !self.diagnostics.is_empty() {
            return Err(Error::Config(self.diagnostics));
        }
        Ok(ResolvedPaths { persistent_dirs, env, volumes })
    }

    /// `profiles.<name>.<suffix>`.
    fn field(&self, suffix: String) -> String {
        format!("profiles.{}.{suffix}", self.profile.name)
    }

    fn persistent_dirs(&mut self) -> Vec<PathBuf> {
        let mut persistent_dirs = Vec::new();
        for (index, dir) in self.profile.persistent_dirs.iter().enumerate() {
            let name = self.field(format!("persistent_dirs[{index}]"));
            match expand_checked(&name, dir, self.values, None).and_then(|path| container_path(&name, &path, dir)) {
                Ok(path) if persistent_dirs.contains(&path) => {
                    self.diagnostics.push(diagnostic(Severity::Invalid, &name, format!("`{}` is listed twice", path.display()), dir))
                }
                Ok(path) => persistent_dirs.push(path),
                Err(error) => push_errors(&mut self.diagnostics, error),
            }
        }
        persistent_dirs
    }

    fn env(&mut self) -> BTreeMap<String, ResolvedEnv> {
        let mut env = BTreeMap::new();
        for (key, value) in &self.profile.env {
            match self.env_value(&self.field(format!("env.{key}")), value) {
                Ok(resolved) => {
                    env.insert(key.clone(), resolved);
                }
                Err(error) => push_errors(&mut self.diagnostics, error),
            }
        }
        env
    }

    /// `env:VAR` pulls the host's `VAR`, which must be set; any other value
    /// is expanded.
    fn env_value(&self, name: &str, value: &Located<String>) -> Result<ResolvedEnv> {
        match value.value.strip_prefix("env:") {
            Some(variable) => match self.host.var(variable) {
                Some(pulled) => Ok(ResolvedEnv { value: pulled, from_host: Some(variable.to_owned()) }),
                None => Err(Error::Config(vec![diagnostic(
                    Severity::Invalid,
                    name,
                    format!("`env:{variable}` names the host variable `{variable}`, which is not set"),
                    value,
                )])),
            },
            None => expand_checked(name, value, self.values, None).map(|expanded| ResolvedEnv { value: expanded, from_host: None }),
        }
    }

    fn volumes(&mut self) -> Vec<ResolvedVolume> {
        let mut volumes: Vec<ResolvedVolume> = Vec::new();
        for (index, volume) in self.profile.volumes.iter().enumerate() {
            let container_field = self.field(format!("volumes[{index}].container"));
            match self.volume(index, volume, &container_field) {
                Ok(resolved) if volumes.iter().any(|other| other.container == resolved.container) => {
                    self.diagnostics.push(diagnostic(
                        Severity::Invalid,
                        &container_field,
                        format!("`{}` is the target of two volumes", resolved.container.display()),
                        &volume.container,
                    ));
                }
                Ok(resolved) => volumes.push(resolved),
                Err(errors) => {
                    for error in errors {
                        push_errors(&mut self.diagnostics, error);
                    }
                }
            }
        }
        volumes
    }

    /// `volumes[index]`, or the errors of its host side and its container
    /// side (both are reported).
    fn volume(&self, index: usize, volume: &VolumeConfig, container_field: &str) -> std::result::Result<ResolvedVolume, Vec<Error>> {
        let host_field = self.field(format!("volumes[{index}].host"));
        let host_path = expand_checked(&host_field, &volume.host, self.values, Some(self.home))
            .and_then(|expanded| self.controls.host_path(&host_field, &expanded, &volume.host, &volume.mode, self.host));
        let container = expand_checked(container_field, &volume.container, self.values, None)
            .and_then(|expanded| container_path(container_field, &expanded, &volume.container));
        match (host_path, container) {
            (Ok((host, host_exists)), Ok(container)) => Ok(ResolvedVolume { host, container, mode: volume.mode.clone(), host_exists }),
            (host_result, container_result) => Err([host_result.err(), container_result.err()].into_iter().flatten().collect()),
        }
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

fn push_errors(diagnostics: &mut Vec<Diagnostic>, error: Error) {
    match error {
        Error::Config(more) => diagnostics.extend(more),
        other => {
            diagnostics.push(Diagnostic { severity: Severity::Invalid, field: String::new(), message: other.to_string(), location: None })
        }
    }
}

/// `value` with its tokens (and, given `home`, its tilde) expanded; a `..`
/// segment in the result is refused.
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

/// Each entry with where it was written: its location, else `table`.
fn written_where<'a>(entries: &'a [super::Located<String>], table: &str) -> impl Iterator<Item = (String, String)> + 'a {
    let table = table.to_owned();
    entries.iter().map(move |entry| {
        let place = entry.location.as_ref().map(|location| location.to_string()).unwrap_or_else(|| table.clone());
        (entry.value.clone(), place)
    })
}
