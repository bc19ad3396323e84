//! The configuration file as written: the serde types `config.toml`
//! deserializes into.
//!
//! Invariants: every type refuses unknown keys (`deny_unknown_fields`), and
//! every value a later diagnostic may point at keeps its span
//! ([`toml::Spanned`]). Nothing here is checked beyond its TOML type; the
//! checks are in the `check`, `tables` and `profile` modules.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) data_root: Option<Spanned<String>>,
    pub(super) network: Option<RawNetwork>,
    pub(super) escalation: Option<RawEscalation>,
    pub(super) runtime: Option<RawRuntime>,
    pub(super) limits: Option<RawLimits>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<Spanned<String>, Spanned<RawProfile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRuntime {
    pub(super) runsc: Option<Spanned<String>>,
}

/// `[limits]` and `[profiles.<name>.limits]` (see [`crate::limits`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) memory: Option<Spanned<String>>,
    pub(super) processes: Option<Spanned<i64>>,
    pub(super) cpus: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    #[serde(default)]
    pub(super) allow_egress: Vec<Spanned<String>>,
    pub(super) podman_network: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) dns_upstream: Vec<Spanned<String>>,
    pub(super) private_answers: Option<Spanned<String>>,
    /// Default: off.
    pub(super) ask: Option<bool>,
    pub(super) ask_hold_seconds: Option<Spanned<u64>>,
    /// Default: the first of the usual places that exists.
    pub(super) ca_bundle: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEscalation {
    /// Default: on, as without the table.
    pub(super) enabled: Option<bool>,
    /// Default: `$XDG_RUNTIME_DIR/lazaret` (DECISIONS D17).
    pub(super) socket_dir: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) auto_approve: Vec<Spanned<String>>,
    pub(super) approval_timeout_seconds: Option<Spanned<u64>>,
    pub(super) command_timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub(super) image: Spanned<String>,
    #[serde(default)]
    pub(super) persistent_dirs: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) allow_egress: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub(super) volumes: Vec<Spanned<RawVolume>>,
    pub(super) command: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) auto_approve: Vec<Spanned<String>>,
    pub(super) limits: Option<RawLimits>,
    /// Default: `[network] ask`.
    pub(super) ask: Option<bool>,
    #[serde(default)]
    pub(super) credentials: Vec<Spanned<RawCredential>>,
    /// Default: `"podman"`.
    pub(super) backend: Option<Spanned<RawBackend>>,
}

/// One `credentials` entry of a profile.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    pub(super) origin: Spanned<String>,
    pub(super) header: Spanned<String>,
    pub(super) value: Option<Spanned<String>>,
    pub(super) command: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) scheme: Option<Spanned<String>>,
    pub(super) base_url_env: Option<Spanned<String>>,
    pub(super) base_path: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVolume {
    pub(super) host: Spanned<String>,
    pub(super) container: Spanned<String>,
    pub(super) mode: Option<Spanned<String>>,
}

/// `backend` as written: a name or a table.
#[derive(Debug)]
pub(super) enum RawBackend {
    Name(String),
    Table(Box<RawBackendTable>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackendTable {
    pub(super) kubernetes: Option<RawKubernetes>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKubernetes {
    pub(super) kubeconfig: Option<Spanned<String>>,
    pub(super) context: Option<Spanned<String>>,
    pub(super) namespace: Option<Spanned<String>>,
    pub(super) runtime_class: Option<Spanned<String>>,
    pub(super) storage_class: Option<Spanned<String>>,
    pub(super) image: Option<Spanned<String>>,
    pub(super) egress: Option<Spanned<String>>,
}

/// A string or a table, each with serde's own messages (an untagged enum
/// would only say that nothing matched).
impl<'de> Deserialize<'de> for RawBackend {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawBackend, D::Error> {
        struct BackendVisitor;
        impl<'de> Visitor<'de> for BackendVisitor {
            type Value = RawBackend;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("\"podman\" or a table { kubernetes = { ... } }")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawBackend, E> {
                Ok(RawBackend::Name(value.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBackend, A::Error> {
                RawBackendTable::deserialize(de::value::MapAccessDeserializer::new(map)).map(|table| RawBackend::Table(Box::new(table)))
            }
        }
        deserializer.deserialize_any(BackendVisitor)
    }
}
