//! Lazaret's Kubernetes backend (issue 32): a domain's sandbox as a
//! kubernetes-sigs/agent-sandbox `Sandbox` whose pod runs under a gVisor
//! RuntimeClass, with the profile's egress allowlist as a policy object for
//! the cluster's enforcer. Everything above the sandbox (coordinator,
//! approvals, audit, the agent branch's quarantined import) stays on the
//! developer's machine; the cluster is as untrusted as the sandbox.
//!
//! - [`objects`]: the objects a domain becomes, from the domain and its
//!   profile (pure: no I/O, golden-tested);
//! - [`egress`]: the allowlist as a `CiliumNetworkPolicy`, or a plain
//!   deny-all `NetworkPolicy` for a profile without egress (pure);
//! - [`cluster`]: the API calls: the runtime-class check, creation as the
//!   domain's lock, readiness, exec, suspend/resume, teardown.
//!
//! Invariants: nothing secret is ever put into an API object (objects end
//! up in etcd): the profile's environment, session credentials and TLS
//! material go over exec stdin only; every object of a domain carries the
//! domain label, so teardown finds all of them.

/// `kube::Resource` for a namespaced custom resource type with `metadata`:
/// `namespaced_resource!(Type, group, version, kind, plural)`.
macro_rules! namespaced_resource {
    ($type:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod cluster;
pub mod egress;
mod error;
pub mod objects;

pub use error::Error;

/// This crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
