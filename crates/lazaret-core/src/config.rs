//! The configuration model (DECISIONS D7):
//! loading `config.toml` with located diagnostics, static validation at load,
//! and resolution of one profile for one workspace (expansion, `env:` pulls,
//! canonicalization) into a [`ResolvedProfile`].
//!
//! This module never creates anything on disk: a configuration that fails
//! here leaves no trace (DECISIONS D8).
//!
//! This file holds the validated configuration ([`Config`] and its parts)
//! and the constants; the jobs live in submodules, in the order a load runs
//! them:
//!
//! - `raw`: the file as written (serde types, spans kept);
//! - `load`: finding and parsing the file, assembling a [`Config`];
//! - `check`: the `Checker` that collects every problem, and the checks of
//!   single values; `tables` checks `[escalation]`, `[runtime]` and
//!   `[network]`, `profile` one `[profiles.<name>]`;
//! - `credentials`: a profile's API keys kept outside the sandbox;
//! - `backend`: where a profile's sandbox runs (podman, or a cluster);
//! - `resolve`: one profile for one workspace, into a [`ResolvedProfile`];
//!   `volume_host` keeps a volume's host side clear of Lazaret's controls.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::egress::EgressRule;
use crate::error::Diagnostic;
use crate::location::Location;

mod backend;
mod check;
mod credentials;
mod load;
mod profile;
mod raw;
mod resolve;
mod tables;
mod volume_host;

pub use backend::{is_dns_label, is_dns_subdomain, Backend, KubernetesBackend, KubernetesEgress, DEFAULT_NAMESPACE, DEFAULT_RUNTIME_CLASS};
pub use check::is_valid_profile_name;
pub use credentials::{CredentialConfig, CredentialSource, ResolvedCredential, CREDENTIAL_PORT_BASE};
pub use load::default_config_path;
pub use resolve::{canonical_workspace, ResolvedEnv, ResolvedProfile, ResolvedVolume};

/// The profile that exists without any configuration file.
pub const DEFAULT_PROFILE: &str = "default";
/// `[network] ask_hold_seconds` when not written.
pub const DEFAULT_ASK_HOLD_SECONDS: u64 = 10;
/// The longest `[network] ask_hold_seconds`: the sidecar's longest hold.
pub const MAX_ASK_HOLD_SECONDS: u64 = 30;
/// The image of the built-in profile; `lazaret image build` makes it offline.
pub const DEFAULT_IMAGE: &str = "localhost/lazaret-default:1";

/// Container paths owned by Lazaret. A volume or persistent directory may
/// not be one of them, lie inside one, or contain one.
pub const RESERVED_CONTAINER_PATHS: [&str; 3] = ["/workspace", "/workspace/.git", IN_CONTAINER_ROOT];
/// Lazaret's own directory inside the sandbox (certificates, the escalation
/// socket, `lazaret-escalate`).
pub const IN_CONTAINER_ROOT: &str = "/run/lazaret";
/// Inside the sandbox: where the host's seed bundle of the agent branch is
/// (read-only in a local sandbox; in a pod, writable like all of it), and
/// where the agent's bundles go.
pub const TRANSFER_IN_CONTAINER: &str = "/run/lazaret/transfer";
pub const OUTBOX_IN_CONTAINER: &str = "/run/lazaret/outbox";

/// Volume mount options Lazaret passes to podman.
pub const VOLUME_MODE_OPTIONS: [&str; 9] = ["ro", "rw", "z", "Z", "nosuid", "nodev", "noexec", "private", "rprivate"];

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
    /// `[network] ask`: a name on no allow entry becomes a network request
    /// for a human (default: off; a profile's `ask` overrides it).
    pub ask: bool,
    /// `[network] ask_hold_seconds`: how long the sidecar holds such a
    /// question for an answer.
    pub ask_hold_seconds: u64,
    /// `[network] ca_bundle`: the CA certificates (PEM) the Network
    /// Sidecar checks credential origins against. `None`: the system's.
    pub ca_bundle: Option<PathBuf>,
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
    /// The profile's `ask` (`None`: `[network] ask`).
    pub ask: Option<bool>,
    /// API keys the Network Sidecar adds for one origin each.
    pub credentials: Vec<CredentialConfig>,
    /// Where the sandbox runs.
    pub backend: Backend,
    pub location: Option<Location>,
}

#[derive(Debug, Clone)]
pub struct VolumeConfig {
    pub host: Located<String>,
    pub container: Located<String>,
    /// Validated podman options, e.g. `["ro", "z"]`; `ro` when not written.
    pub mode: Vec<String>,
}

#[cfg(test)]
mod tests;
