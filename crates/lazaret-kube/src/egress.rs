//! The profile's egress allowlist as a policy object for the cluster's
//! enforcer. Locally the Network Sidecar enforces it; on a cluster, Cilium
//! does, from a `CiliumNetworkPolicy` (`cilium.io/v2`) generated here:
//!
//! - DNS only to the cluster's DNS (kube-dns), and only for allowlisted
//!   names (Cilium's DNS proxy answers everything else with a refusal);
//! - `toFQDNs` for each name, `toCIDRSet` for each CIDR entry;
//! - `egressDeny` for every special range the sidecar never lets a name's
//!   answer open, from the one definition both share
//!   (`lazaret_dns::special::cluster_denied`: each range, and the NAT64 and
//!   6to4 forms of each IPv4 one). A never-range (loopback, link-local with
//!   the metadata services, multicast, ...) stays denied under any wider
//!   allow (`0.0.0.0/0`), less only the CIDR entries that lie inside it; an
//!   internal range (private, CGNAT, ULA, ...) is opened where a CIDR entry
//!   covers it, as locally with `private_answers = "refuse"`: its deny
//!   carves out the entries inside it and goes where one covers it whole.
//!   Everything else, the cluster's own pods and services included,
//!   matches no rule and is denied (a selected endpoint's egress is
//!   default-deny).
//!
//! Declared exceptions, which no field of Cilium's can close (checked by
//! `tests/one_policy.rs`, listed in docs/cluster.md's limits): Cilium's DNS
//! rules are `matchName`/`matchPattern` only, so its proxy forwards every
//! record type of an allowed name where the sidecar serves
//! [`lazaret_dns::names::SERVED_RECORD_TYPES`] (A and AAAA); its `*` takes
//! labels of up to 63 octets and `_`; a policy object cannot tell a
//! connection to an answered address from a direct one.
//!
//! A profile without egress gets a plain `NetworkPolicy` that denies all
//! egress ([`no_egress_policy`]), which every NetworkPolicy enforcer
//! honours. Where the cluster has no FQDN-capable enforcer, only such a
//! profile may run (`egress = "none"`); nothing is ever silently open.
//!
//! Invariants: pure; the output's order follows the allowlist's (sorted)
//! and the special ranges' table, so the same allowlist always gives the
//! same object (golden files).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use lazaret_core::egress::EgressRule;
use lazaret_dns::names::MAX_WILDCARD_LABELS;
use lazaret_dns::special::{cluster_denied, Prefix, RangeClass};
use serde::{Deserialize, Serialize};

use crate::objects::{domain_labels, sandbox_name, DOMAIN_LABEL};

/// A `CiliumNetworkPolicy` (`cilium.io/v2`), the fields Lazaret writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CiliumNetworkPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: CiliumPolicySpec,
}

/// `spec` of a [`CiliumNetworkPolicy`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CiliumPolicySpec {
    pub endpoint_selector: LabelSelector,
    pub egress: Vec<CiliumEgressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_deny: Vec<CiliumEgressRule>,
}

/// One egress (or egress-deny) rule: the fields Lazaret uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CiliumEgressRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_endpoints: Vec<LabelSelector>,
    #[serde(default, rename = "toFQDNs", skip_serializing_if = "Vec::is_empty")]
    pub to_fqdns: Vec<FqdnSelector>,
    #[serde(default, rename = "toCIDRSet", skip_serializing_if = "Vec::is_empty")]
    pub to_cidr_set: Vec<CidrRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_ports: Vec<PortRule>,
}

/// `matchName` or `matchPattern` (also the DNS proxy's rule shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FqdnSelector {
    MatchName(String),
    MatchPattern(String),
}

/// A CIDR with the sub-ranges it leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CidrRule {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<String>,
}

/// Ports, and the DNS rules of Cilium's DNS proxy on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRule {
    pub ports: Vec<PortProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<L7Rules>,
}

/// A port and its protocol (`ANY`, `TCP`, `UDP`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortProtocol {
    pub port: String,
    pub protocol: String,
}

/// The DNS proxy's rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct L7Rules {
    pub dns: Vec<FqdnSelector>,
}

namespaced_resource!(CiliumNetworkPolicy, "cilium.io", "v2", "CiliumNetworkPolicy", "ciliumnetworkpolicies");

/// The name of a domain's policy object (either kind).
pub fn policy_name(domain_hash: &str) -> String {
    format!("{}-egress", sandbox_name(domain_hash))
}

/// The pods of the domain.
fn domain_selector(domain_hash: &str) -> LabelSelector {
    LabelSelector { match_labels: Some(BTreeMap::from([(DOMAIN_LABEL.to_owned(), domain_hash.to_owned())])), match_expressions: None }
}

fn metadata(domain_hash: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(policy_name(domain_hash)),
        namespace: Some(namespace.to_owned()),
        labels: Some(domain_labels(domain_hash)),
        ..ObjectMeta::default()
    }
}

/// How a Lazaret name entry is written for Cilium. `github.com` is a
/// `matchName`. Lazaret's `*.example.com` matches names below `example.com`
/// (not `example.com` itself) with at most [`MAX_WILDCARD_LABELS`] labels in
/// the part the `*` stands for; Cilium's `*` stands for exactly one label
/// (its `**.`, from Cilium 1.19, for any number, which would make the
/// wildcard a bulk DNS channel), so `*.example.com` becomes one pattern per
/// depth: `*.example.com`, `*.*.example.com`, `*.*.*.example.com`. Cilium
/// cannot bound a label's length: there a label may be 63 octets (DNS's own
/// limit), not [`lazaret_dns::names::MAX_WILDCARD_LABEL`] (docs/cluster.md).
pub fn fqdn_selectors(name: &str) -> Vec<FqdnSelector> {
    match name.strip_prefix("*.") {
        Some(base) => (1..=MAX_WILDCARD_LABELS).map(|depth| FqdnSelector::MatchPattern(format!("{}{base}", "*.".repeat(depth)))).collect(),
        None => vec![FqdnSelector::MatchName(name.to_owned())],
    }
}

/// The domain's `CiliumNetworkPolicy` for `allow_egress` (sorted and
/// deduplicated here).
pub fn cilium_policy(domain_hash: &str, namespace: &str, allow_egress: &[EgressRule]) -> CiliumNetworkPolicy {
    let mut rules: Vec<&EgressRule> = allow_egress.iter().collect();
    rules.sort();
    rules.dedup();
    let names: Vec<FqdnSelector> = rules
        .iter()
        .flat_map(|rule| match rule {
            EgressRule::Domain(name) => fqdn_selectors(name),
            EgressRule::Cidr(_) => Vec::new(),
        })
        .collect();
    let cidrs: Vec<ipnet::IpNet> = rules
        .iter()
        .filter_map(|rule| match rule {
            EgressRule::Cidr(net) => Some(*net),
            EgressRule::Domain(_) => None,
        })
        .collect();
    let mut egress = Vec::new();
    if !names.is_empty() {
        let dns = PortRule {
            ports: vec![PortProtocol { port: "53".into(), protocol: "ANY".into() }],
            rules: Some(L7Rules { dns: names.clone() }),
        };
        let kube_dns = LabelSelector {
            match_labels: Some(BTreeMap::from([
                ("k8s:io.kubernetes.pod.namespace".to_owned(), "kube-system".to_owned()),
                ("k8s:k8s-app".to_owned(), "kube-dns".to_owned()),
            ])),
            match_expressions: None,
        };
        egress.push(CiliumEgressRule { to_endpoints: vec![kube_dns], to_ports: vec![dns], ..CiliumEgressRule::default() });
        egress.push(CiliumEgressRule { to_fqdns: names, ..CiliumEgressRule::default() });
    }
    if !cidrs.is_empty() {
        let to_cidr_set = cidrs.iter().map(|net| CidrRule { cidr: net.to_string(), except: Vec::new() }).collect();
        egress.push(CiliumEgressRule { to_cidr_set, ..CiliumEgressRule::default() });
    }
    CiliumNetworkPolicy {
        api_version: "cilium.io/v2".into(),
        kind: "CiliumNetworkPolicy".into(),
        metadata: metadata(domain_hash, namespace),
        spec: CiliumPolicySpec {
            endpoint_selector: domain_selector(domain_hash),
            egress,
            egress_deny: vec![CiliumEgressRule { to_cidr_set: denied_ranges(&cidrs), ..CiliumEgressRule::default() }],
        },
    }
}

/// The `egressDeny` entries for the allowlist's CIDR entries `cidrs`: every
/// prefix of [`cluster_denied`], less the entries that lie inside it; an
/// internal range that an entry covers whole is left out (the entry opens
/// it, as the sidecar's CIDR allow opens it to a name's answer), a
/// never-range never is.
pub fn denied_ranges(cidrs: &[ipnet::IpNet]) -> Vec<CidrRule> {
    // (A prefix that did not convert would only be missing from an
    // `except` list: stricter, never more open.)
    let allowed: Vec<(Prefix, &ipnet::IpNet)> =
        cidrs.iter().filter_map(|net| Some((Prefix::new(net.network(), net.prefix_len())?, net))).collect();
    cluster_denied()
        .into_iter()
        .filter(|denied| denied.range.class == RangeClass::Never || !allowed.iter().any(|(entry, _)| entry.covers(&denied.prefix)))
        .map(|denied| CidrRule {
            cidr: denied.prefix.to_string(),
            except: allowed.iter().filter(|(entry, _)| denied.prefix.covers(entry)).map(|(_, net)| net.to_string()).collect(),
        })
        .collect()
}

/// A `NetworkPolicy` that denies the domain's pods all egress: the only
/// policy a profile with `egress = "none"` gets.
pub fn no_egress_policy(domain_hash: &str, namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: metadata(domain_hash, namespace),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(domain_selector(domain_hash)),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(Vec::new()),
            ingress: None,
        }),
    }
}
