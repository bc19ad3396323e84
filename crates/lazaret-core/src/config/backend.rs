//! A profile's `backend` (issue 32): where its sandbox runs. `"podman"`
//! (the default: rootless podman and gVisor on this machine) or
//! `{ kubernetes = { ... } }` (an agent-sandbox `Sandbox` under a gVisor
//! RuntimeClass on a cluster; see `docs/cluster.md`).
//!
//! Invariants: a kubernetes table names only what the cluster needs (no
//! secret); every name is checked as the API server would (DNS labels and
//! subdomains), so a typo fails at load, located, not at the first start;
//! egress is never silently open: a cluster without an FQDN-capable enforcer
//! is written `egress = "none"`, and such a profile may allow no egress; and
//! what only this machine can do (host volumes, the sidecar's API keys and
//! questions) is refused for a cluster profile instead of being dropped.

use toml::Spanned;

use super::check::Checker;
use super::raw::{RawBackend, RawProfile};
use crate::image_reference;

/// Where a profile's sandbox runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Rootless podman with runsc on this machine.
    #[default]
    Podman,
    /// A `Sandbox` on a Kubernetes cluster.
    Kubernetes(KubernetesBackend),
}

impl Backend {
    /// The backend on one line (`config show`).
    pub fn describe(&self) -> String {
        match self {
            Backend::Podman => "podman (rootless podman and gVisor on this machine)".to_owned(),
            Backend::Kubernetes(cluster) => {
                let mut text = format!("kubernetes: namespace {}, RuntimeClass {}", cluster.namespace, cluster.runtime_class);
                if let Some(context) = &cluster.context {
                    text.push_str(&format!(", context {context}"));
                }
                if let Some(class) = &cluster.storage_class {
                    text.push_str(&format!(", StorageClass {class}"));
                }
                if let Some(image) = &cluster.image {
                    text.push_str(&format!(", image {image}"));
                }
                text.push_str(match cluster.egress {
                    KubernetesEgress::Cilium => ", egress by CiliumNetworkPolicy",
                    KubernetesEgress::None => ", no egress",
                });
                text
            }
        }
    }
}

/// `backend = { kubernetes = { ... } }`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KubernetesBackend {
    /// The kubeconfig file (`None`: `$KUBECONFIG`, else `~/.kube/config`).
    pub kubeconfig: Option<String>,
    /// The kubeconfig's context (`None`: its current context).
    pub context: Option<String>,
    pub namespace: String,
    /// A RuntimeClass whose handler runs gVisor (checked at every start).
    pub runtime_class: String,
    /// The State Anchor's StorageClass (`None`: the cluster's default).
    pub storage_class: Option<String>,
    /// The image the pod runs (`None`: the profile's `image`), as the
    /// cluster's nodes pull it.
    pub image: Option<String>,
    pub egress: KubernetesEgress,
}

/// How a cluster enforces the profile's allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KubernetesEgress {
    /// A `CiliumNetworkPolicy` from the allowlist (the default).
    Cilium,
    /// No egress at all (a deny-all `NetworkPolicy`): for a cluster without
    /// an FQDN-capable enforcer.
    None,
}

/// The defaults of a kubernetes table.
pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_RUNTIME_CLASS: &str = "gvisor";

impl Checker<'_> {
    /// `profiles.<name>.backend`, and what the profile may not ask of a
    /// cluster. `None` when there is a problem (recorded).
    pub(super) fn backend(&mut self, prefix: &str, raw: &RawProfile) -> Option<Backend> {
        let field = format!("{prefix}.backend");
        let Some(written) = &raw.backend else { return Some(Backend::Podman) };
        let location = Some(self.locate(written.span()));
        let table = match written.get_ref() {
            RawBackend::Name(name) if name == "podman" => return Some(Backend::Podman),
            RawBackend::Name(name) => {
                self.error(
                    &field,
                    format!(
                        "`{name}` is not a backend: write \"podman\" or a table, backend = {{ kubernetes = {{ namespace = \"...\" }} }}"
                    ),
                    location,
                );
                return None;
            }
            RawBackend::Table(table) => table,
        };
        let Some(kubernetes) = &table.kubernetes else {
            self.error(&field, "the table names no backend: write backend = { kubernetes = { ... } }, or \"podman\"".into(), location);
            return None;
        };
        let problems_before = self.problem_count();
        let field = format!("{field}.kubernetes");
        let text = |value: &Option<Spanned<String>>| value.as_ref().map(|value| value.get_ref().clone());
        for (key, value) in [("kubeconfig", &kubernetes.kubeconfig), ("context", &kubernetes.context)] {
            if let Some(value) = value {
                if value.get_ref().is_empty() || value.get_ref().chars().any(char::is_control) {
                    self.error(
                        &format!("{field}.{key}"),
                        format!("{key} `{}` is empty or has control characters", value.get_ref().escape_debug()),
                        Some(self.locate(value.span())),
                    );
                }
            }
        }
        if let Some(value) = &kubernetes.kubeconfig {
            if !value.get_ref().starts_with('/') {
                self.error(
                    &format!("{field}.kubeconfig"),
                    format!(
                        "`{}` is not an absolute path (leave the key out for $KUBECONFIG or ~/.kube/config)",
                        value.get_ref().escape_debug()
                    ),
                    Some(self.locate(value.span())),
                );
            }
        }
        if let Some(namespace) = &kubernetes.namespace {
            if !is_dns_label(namespace.get_ref()) {
                self.error(
                    &format!("{field}.namespace"),
                    format!(
                        "`{}` is not a valid name: lowercase letters, digits and `-`, at most 63, starting and ending with a letter or digit",
                        namespace.get_ref().escape_debug()
                    ),
                    Some(self.locate(namespace.span())),
                );
            }
        }
        // RuntimeClass and StorageClass names are DNS subdomains.
        for (key, value) in [("runtime_class", &kubernetes.runtime_class), ("storage_class", &kubernetes.storage_class)] {
            if let Some(value) = value {
                if !is_dns_subdomain(value.get_ref()) {
                    self.error(
                        &format!("{field}.{key}"),
                        format!("`{}` is not a valid name: DNS labels separated by `.`, at most 253", value.get_ref().escape_debug()),
                        Some(self.locate(value.span())),
                    );
                }
            }
        }
        if let Some(image) = &kubernetes.image {
            if let Err(message) = image_reference::pinning(image.get_ref()) {
                self.error(&format!("{field}.image"), message, Some(self.locate(image.span())));
            }
        }
        let egress = match &kubernetes.egress {
            None => KubernetesEgress::Cilium,
            Some(value) => match value.get_ref().as_str() {
                "cilium" => KubernetesEgress::Cilium,
                "none" => KubernetesEgress::None,
                other => {
                    self.error(
                        &format!("{field}.egress"),
                        format!("`{}` is not an egress enforcer: write \"cilium\" (CiliumNetworkPolicy from the allowlist) or \"none\" (no egress at all)", other.escape_debug()),
                        Some(self.locate(value.span())),
                    );
                    KubernetesEgress::None
                }
            },
        };
        if egress == KubernetesEgress::None {
            if let Some(first) = raw.allow_egress.first() {
                self.security(
                    &format!("{prefix}.allow_egress"),
                    format!("`{}` is allowed, but the profile's cluster has no egress (backend.kubernetes.egress = \"none\"): remove the allowlist or use an FQDN-capable enforcer (\"cilium\")", first.get_ref()),
                    Some(self.locate(first.span())),
                );
            }
        }
        // What only this machine can do: refused, never dropped.
        if let Some(volume) = raw.volumes.first() {
            self.error(
                &format!("{prefix}.volumes"),
                "host volumes are not available on a cluster (the pod's node has no such directory); remove `volumes` or use backend \"podman\"".into(),
                Some(self.locate(volume.span())),
            );
        }
        if let Some(credential) = raw.credentials.first() {
            self.error(
                &format!("{prefix}.credentials"),
                "API keys are added by the Network Sidecar, which a cluster profile does not have yet; remove `credentials` or use backend \"podman\"".into(),
                Some(self.locate(credential.span())),
            );
        }
        if raw.ask == Some(true) {
            self.error(
                &format!("{prefix}.ask"),
                "questions about blocked names come from the Network Sidecar, which a cluster profile does not have yet".into(),
                location.clone(),
            );
        }
        if self.problem_count() > problems_before {
            return None;
        }
        Some(Backend::Kubernetes(KubernetesBackend {
            kubeconfig: text(&kubernetes.kubeconfig),
            context: text(&kubernetes.context),
            namespace: text(&kubernetes.namespace).unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
            runtime_class: text(&kubernetes.runtime_class).unwrap_or_else(|| DEFAULT_RUNTIME_CLASS.to_owned()),
            storage_class: text(&kubernetes.storage_class),
            image: text(&kubernetes.image),
            egress,
        }))
    }
}

/// An RFC 1123 label, as Kubernetes checks namespace and RuntimeClass names.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// An RFC 1123 subdomain (StorageClass names).
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}
