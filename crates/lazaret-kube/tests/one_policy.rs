//! One policy, two enforcers (issue 46): locally the Network Sidecar
//! enforces a profile's allowlist, on a cluster the `CiliumNetworkPolicy`
//! that `egress.rs` generates from it. This test puts the same destinations
//! to both, for the same allowlists, and fails on every disagreement that is
//! not declared in [`KNOWN_GAPS`] with its reason (and on a declared one
//! that no longer happens), so any new drift fails here.
//!
//! Rows: an address of every special range of `lazaret_dns::special` (the
//! seven the issue found missing on the cluster among them, [`SEVEN`]), the
//! NAT64, 6to4 and IPv4-mapped forms of every IPv4 one, public controls,
//! each reached two ways: as the answer of an allowed name (`answer`), and
//! straight (`direct`); and DNS questions of several record types and names.
//!
//! - The sidecar's side is its own code: `State::learn` (which asks
//!   `State::not_opened`) for an answer, the rules `State::rules` and the
//!   guard rules make (`allowed_ranges`, which the netfilter backstop holds
//!   too) for a direct connection, `NamePolicy::check` for a question; the
//!   state holds the allowlist as the coordinator sends it (entries), with
//!   the default `private_answers = "refuse"` and no host networks (the
//!   cluster has none of the workstation's).
//! - The cluster's side is a small evaluator of the generated object, as
//!   Cilium documents it: an `egressDeny` CIDR (less its `except` list)
//!   refuses whatever an `egress` rule allows; an answer of a name that a
//!   `toFQDNs` selector matches is allowed, a direct connection only where a
//!   `toCIDRSet` entry covers it; a question is forwarded (whatever its type)
//!   where a DNS rule to kube-dns matches its name. A connection to an
//!   IPv4-mapped address leaves as IPv4 (the kernel's doing), so it is judged
//!   as its IPv4 address, as the sidecar judges it.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use ipnet::IpNet;
use lazaret_core::egress::EgressRule;
use lazaret_dns::special::{Prefix, SPECIAL_RANGES};
use lazaret_dns::wire::{type_name, Question, TYPE_A, TYPE_AAAA, TYPE_TXT};
use lazaret_kube::egress::{cilium_policy, CidrRule, CiliumNetworkPolicy, FqdnSelector};
use lazaret_sidecar::control::Entry;
use lazaret_sidecar::enforcer::State;
use lazaret_sidecar::policy::{allowed_ranges, guard_rules};

const TYPE_ANY: u16 = 255;

/// The names of every allowlist: an exact name and a wildcard.
const NAMES: [&str; 2] = ["github.com", "*.npmjs.org"];

/// The allowlists: the names alone, and with CIDR entries, wide and narrow.
const ALLOWLISTS: [&[&str]; 5] = [&[], &["10.0.0.0/8"], &["0.0.0.0/0"], &["::/0"], &["169.254.169.254/32", "fd00::/8"]];

/// The ranges the cluster policy left out before issue 46, one address each:
/// NAT64, 6to4, IPv4-mapped, multicast (both families), benchmarking,
/// reserved, IETF protocol assignments.
const SEVEN: [&str; 8] =
    ["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "::ffff:127.0.0.1", "239.255.255.250", "ff02::1", "198.18.0.1", "240.0.0.1", "192.0.0.8"];

/// Addresses beyond one per range: the metadata service and its forms, an
/// IPv4-compatible address, public hosts and their NAT64, 6to4 and mapped forms.
const MORE: [&str; 12] = [
    "169.254.169.254",
    "::ffff:169.254.169.254",
    "::a00:1",
    "1.1.1.1",
    "8.8.8.8",
    "93.184.216.34",
    "64:ff9b::808:808",
    "64:ff9b::101:101",
    "2002:808:808::1",
    "::ffff:1.1.1.1",
    "2606:4700::1111",
    "2a00:1450:4001::200e",
];

/// DNS questions: the record types, the name rules (exact, wildcard depth,
/// the wildcard's own name, label length and characters, case).
fn questions() -> Vec<(String, u16)> {
    let mut questions: Vec<(String, u16)> = [
        ("github.com", TYPE_A),
        ("github.com", TYPE_AAAA),
        ("github.com", TYPE_TXT),
        ("github.com", TYPE_ANY),
        ("GitHub.com", TYPE_A),
        ("api.github.com", TYPE_A),
        ("example.com", TYPE_AAAA),
        ("registry.npmjs.org", TYPE_A),
        ("registry.npmjs.org", TYPE_TXT),
        ("a.b.c.npmjs.org", TYPE_AAAA),
        ("a.b.c.d.npmjs.org", TYPE_A),
        ("npmjs.org", TYPE_A),
        ("_x.npmjs.org", TYPE_A),
        ("-x.npmjs.org", TYPE_A),
    ]
    .iter()
    .map(|(name, record_type)| (name.to_string(), *record_type))
    .collect();
    questions.push((format!("{}.npmjs.org", "a".repeat(40)), TYPE_A));
    questions
}

// Why the enforcers may disagree on a row.

/// No field of Cilium's can close it (docs/cluster.md, limits).
const RECORD_TYPES: &str = "Cilium's DNS rules are matchName/matchPattern only: its proxy forwards every record type of an \
     allowed name, where the sidecar serves A and AAAA (lazaret_dns::names::SERVED_RECORD_TYPES); on a cluster a TXT or ANY \
     answer of an allowed name reaches the pod";
/// No field of Cilium's can close it (docs/cluster.md, limits).
const LABEL_LENGTH: &str = "Cilium cannot bound a label's length: under a wildcard a label may have 63 octets there, 32 locally";
/// No field of Cilium's can close it (docs/cluster.md, limits).
const LABEL_CHARACTERS: &str = "Cilium's `*` stands for letters, digits, `-` and `_`, a hyphen at a label's edge too; the \
     sidecar refuses `_` and a name no allow entry could hold";
/// The cluster is the stricter; closing it would change the sidecar's rules.
const WIDE_ALLOW_DIRECT: &str = "the sidecar routes a CIDR allow as written: a wide one (0.0.0.0/0, ::/0) routes direct \
     connections into the never-ranges it covers too (link-local with 169.254.169.254, ::/96, the discard prefix, the NAT64 \
     and 6to4 forms; loopback and this network stay on the sandbox's own stack; multicast and broadcast stop at its guard \
     rules), which the cluster keeps denied under any wider allow";
/// Both reach the address; only the way differs.
const NARROW_NEVER_ALLOW: &str = "a CIDR entry inside a never-range opens that address on both; the sidecar still does not \
     learn it from a name's answer (its CIDR rule opens it anyway), a policy object cannot tell an answer from a connection";

/// Every disagreement there is, and why: (allowlist's CIDR entries or `*`
/// for every allowlist, row, whether the cluster is the one that allows).
const KNOWN_GAPS: &[(&str, &str, bool, &str)] = &[
    ("*", "TXT github.com", true, RECORD_TYPES),
    ("*", "ANY github.com", true, RECORD_TYPES),
    ("*", "TXT registry.npmjs.org", true, RECORD_TYPES),
    ("*", "A aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.npmjs.org", true, LABEL_LENGTH),
    ("*", "A _x.npmjs.org", true, LABEL_CHARACTERS),
    ("*", "A -x.npmjs.org", true, LABEL_CHARACTERS),
    ("0.0.0.0/0", "direct 0.0.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct 127.0.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct 169.254.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct 169.254.169.254", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct ::ffff:0.0.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct ::ffff:127.0.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct ::ffff:169.254.0.1", false, WIDE_ALLOW_DIRECT),
    ("0.0.0.0/0", "direct ::ffff:169.254.169.254", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct ::", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct ::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct ::a00:1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct fe80::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 100::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::7f00:1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::a9fe:1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::a9fe:a9fe", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::e000:1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::ef00:0", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 64:ff9b::ffff:ffff", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:0:1::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:7f00:1::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:a9fe:1::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:a9fe:a9fe::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:e000:1::1", false, WIDE_ALLOW_DIRECT),
    ("::/0", "direct 2002:ffff:ffff::1", false, WIDE_ALLOW_DIRECT),
    ("169.254.169.254/32 fd00::/8", "answer 169.254.169.254", true, NARROW_NEVER_ALLOW),
    ("169.254.169.254/32 fd00::/8", "answer ::ffff:169.254.169.254", true, NARROW_NEVER_ALLOW),
];

/// One destination put to both enforcers.
#[derive(Clone, Debug)]
enum Row {
    /// The allowed name `github.com` answered this address; then a connection to it.
    Answer(IpAddr),
    /// A connection to this address, no name asked.
    Direct(IpAddr),
    /// A question for this name and record type.
    Question(String, u16),
}

impl Row {
    fn label(&self) -> String {
        match self {
            Row::Answer(address) => format!("answer {address}"),
            Row::Direct(address) => format!("direct {address}"),
            Row::Question(name, record_type) => format!("{} {name}", type_name(*record_type)),
        }
    }
}

/// One address inside `prefix`: its first, past the network's own address
/// where there is room (`10.0.0.1`, `fe80::1`).
fn inside(prefix: &Prefix) -> IpAddr {
    match prefix.first() {
        IpAddr::V4(v4) if prefix.prefix_len() < 32 => IpAddr::V4(Ipv4Addr::from(u32::from(v4) + 1)),
        IpAddr::V6(v6) if prefix.prefix_len() < 128 => IpAddr::V6(Ipv6Addr::from(u128::from(v6) + 1)),
        first => first,
    }
}

/// The NAT64, 6to4 and IPv4-mapped forms of `v4`.
fn forms(v4: Ipv4Addr) -> [IpAddr; 3] {
    let bits = u128::from(u32::from(v4));
    [
        IpAddr::V6(Ipv6Addr::from((0x0064_ff9b << 96) | bits)),
        IpAddr::V6(Ipv6Addr::from((0x2002 << 112) | (bits << 80) | 1)),
        IpAddr::V6(v4.to_ipv6_mapped()),
    ]
}

fn addresses() -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = Vec::new();
    let mut add = |address: IpAddr| {
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    };
    for range in &SPECIAL_RANGES {
        let address = inside(&range.prefix);
        add(address);
        if let IpAddr::V4(v4) = address {
            forms(v4).into_iter().for_each(&mut add);
        }
    }
    for text in SEVEN.iter().chain(MORE.iter()) {
        add(text.parse().expect(text));
    }
    // The last address of the ranges, where another range may begin or end.
    for text in ["255.255.255.254", "239.0.0.0", "64:ff9b::ef00:0", "64:ff9b::ffff:ffff"] {
        add(text.parse().expect(text));
    }
    addresses
}

fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for address in addresses() {
        rows.push(Row::Answer(address));
        rows.push(Row::Direct(address));
    }
    rows.extend(questions().into_iter().map(|(name, record_type)| Row::Question(name, record_type)));
    rows
}

/// The sidecar's state for the names and `cidrs`, as the coordinator sends them.
fn sidecar_state(cidrs: &[&str]) -> State {
    let mut state = State::default();
    for text in NAMES.iter().chain(cidrs) {
        match Entry::parse(text).expect(text) {
            Entry::Cidr(cidr) => state.cidrs.allow(cidr),
            Entry::Name(pattern) => state.names.allow(pattern),
            Entry::Service(..) => panic!("{text}: no service entries here"),
        }
    }
    state
}

/// Whether the sidecar lets `row` through.
fn sidecar_allows(cidrs: &[&str], row: &Row) -> bool {
    let mut state = sidecar_state(cidrs);
    match row {
        Row::Answer(address) => {
            assert_eq!(state.names.check(&Question::new("github.com", TYPE_AAAA)), Ok(()));
            let learning = state.learn("github.com", &[(*address, 300)], Instant::now());
            assert_eq!(learning.told.is_empty(), state.not_opened(address.to_canonical()).is_some(), "{address}");
            !learning.told.is_empty()
        }
        Row::Direct(address) => {
            let mut rules = state.rules(&[], &[]);
            rules.extend(guard_rules(&[]));
            let ranges = allowed_ranges(&rules);
            match address.to_canonical() {
                IpAddr::V4(v4) => {
                    let value = u32::from(v4);
                    ranges.v4.iter().any(|(start, end)| *start <= value && end.is_none_or(|end| value < end))
                }
                IpAddr::V6(v6) => {
                    let value = u128::from(v6);
                    ranges.v6.iter().any(|(start, end)| *start <= value && end.is_none_or(|end| value < end))
                }
            }
        }
        Row::Question(name, record_type) => state.names.check(&Question::new(name, *record_type)).is_ok(),
    }
}

/// The policy object the cluster gets for the names and `cidrs`.
fn cluster_policy(cidrs: &[&str]) -> CiliumNetworkPolicy {
    let allowlist: Vec<EgressRule> = NAMES.iter().chain(cidrs).map(|text| text.parse().expect(text)).collect();
    let policy = cilium_policy("0123456789ab", "lazaret", &allowlist);
    // What the API server stores and Cilium reads: the JSON.
    serde_json::from_value(serde_json::to_value(&policy).expect("json")).expect("the policy reads back")
}

/// Whether a `toCIDRSet` entry selects `address`: in its CIDR, in none of its exceptions.
fn selects(rule: &CidrRule, address: IpAddr) -> bool {
    let net = |text: &str| -> IpNet { text.parse().unwrap_or_else(|_| panic!("{text} is no CIDR")) };
    net(&rule.cidr).contains(&address) && !rule.except.iter().any(|except| net(except).contains(&address))
}

/// Cilium's `matchPattern`: `*` stands for any run of letters, digits, `-`
/// and `_` (none included) within a label; the rest is literal, case aside.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => {
            let run = name.iter().take_while(|byte| byte.is_ascii_alphanumeric() || **byte == b'-' || **byte == b'_').count();
            (0..=run).any(|taken| glob(rest, &name[taken..]))
        }
        Some((byte, rest)) => name.first().is_some_and(|first| first.eq_ignore_ascii_case(byte)) && glob(rest, &name[1..]),
    }
}

fn matches(selector: &FqdnSelector, name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    match selector {
        FqdnSelector::MatchName(exact) => exact.eq_ignore_ascii_case(&name),
        FqdnSelector::MatchPattern(pattern) => pattern == "*" || glob(pattern.as_bytes(), name.as_bytes()),
    }
}

/// Whether the cluster's policy lets `row` through.
fn cluster_allows(policy: &CiliumNetworkPolicy, row: &Row) -> bool {
    let spec = &policy.spec;
    let denied = |address: IpAddr| spec.egress_deny.iter().flat_map(|rule| &rule.to_cidr_set).any(|entry| selects(entry, address));
    let by_cidr = |address: IpAddr| spec.egress.iter().flat_map(|rule| &rule.to_cidr_set).any(|entry| selects(entry, address));
    let by_name = |name: &str| spec.egress.iter().flat_map(|rule| &rule.to_fqdns).any(|selector| matches(selector, name));
    match row {
        Row::Answer(address) => {
            let address = address.to_canonical();
            (by_name("github.com") || by_cidr(address)) && !denied(address)
        }
        Row::Direct(address) => {
            let address = address.to_canonical();
            by_cidr(address) && !denied(address)
        }
        Row::Question(name, _) => spec
            .egress
            .iter()
            .filter(|rule| !rule.to_endpoints.is_empty())
            .flat_map(|rule| &rule.to_ports)
            .filter(|ports| ports.ports.iter().any(|port| port.port == "53"))
            .filter_map(|ports| ports.rules.as_ref())
            .flat_map(|rules| &rules.dns)
            .any(|selector| matches(selector, name)),
    }
}

#[test]
fn the_evaluators_read_what_they_should() {
    assert!(glob(b"*.npmjs.org", b"registry.npmjs.org") && glob(b"*.*.npmjs.org", b"a.b.npmjs.org"));
    assert!(!glob(b"*.npmjs.org", b"a.b.npmjs.org") && !glob(b"*.npmjs.org", b"npmjs.org") && !glob(b"*.npmjs.org", b"evilnpmjs.org"));
    let rule = CidrRule { cidr: "10.0.0.0/8".into(), except: vec!["10.1.0.0/16".into()] };
    assert!(selects(&rule, "10.2.0.1".parse().expect("ip")) && !selects(&rule, "10.1.0.1".parse().expect("ip")));
    // The table reaches every range: each has a row, the seven among them.
    let addresses = addresses();
    for range in &SPECIAL_RANGES {
        assert!(addresses.iter().any(|address| range.prefix.contains(*address)), "{}", range.what);
    }
    for seven in SEVEN {
        assert!(addresses.contains(&seven.parse().expect(seven)), "{seven}");
    }
    // A names-only allowlist opens a public answer on both, and nothing direct.
    assert!(sidecar_allows(&[], &Row::Answer("1.1.1.1".parse().expect("ip"))));
    assert!(cluster_allows(&cluster_policy(&[]), &Row::Answer("1.1.1.1".parse().expect("ip"))));
    assert!(!sidecar_allows(&[], &Row::Direct("1.1.1.1".parse().expect("ip"))));
    assert!(!cluster_allows(&cluster_policy(&[]), &Row::Direct("1.1.1.1".parse().expect("ip"))));
}

#[test]
fn one_policy_two_enforcers() {
    let rows = rows();
    let mut found: BTreeSet<(String, String, bool)> = BTreeSet::new();
    let mut compared = 0;
    for cidrs in ALLOWLISTS {
        let policy = cluster_policy(cidrs);
        for row in &rows {
            let sidecar = sidecar_allows(cidrs, row);
            let cluster = cluster_allows(&policy, row);
            compared += 1;
            if sidecar != cluster {
                found.insert((cidrs.join(" "), row.label(), cluster));
            }
        }
    }
    let mut declared: BTreeSet<(String, String, bool)> = BTreeSet::new();
    for (allowlist, row, cluster, reason) in KNOWN_GAPS {
        assert!(!reason.is_empty());
        for cidrs in ALLOWLISTS {
            if *allowlist == "*" || *allowlist == cidrs.join(" ") {
                declared.insert((cidrs.join(" "), row.to_string(), *cluster));
            }
        }
    }
    let describe = |set: Vec<&(String, String, bool)>| -> Vec<String> {
        set.iter()
            .map(|(cidrs, row, cluster)| {
                let (allows, refuses) = if *cluster { ("cluster", "sidecar") } else { ("sidecar", "cluster") };
                format!("names{}{cidrs}: {row}: the {allows} allows, the {refuses} refuses", if cidrs.is_empty() { "" } else { " + " })
            })
            .collect()
    };
    let new: Vec<String> = describe(found.difference(&declared).collect());
    let gone: Vec<String> = describe(declared.difference(&found).collect());
    assert!(
        new.is_empty() && gone.is_empty(),
        "{compared} comparisons; disagreements not in KNOWN_GAPS ({}):\n  {}\ndeclared in KNOWN_GAPS but not found ({}):\n  {}",
        new.len(),
        new.join("\n  "),
        gone.len(),
        gone.join("\n  ")
    );
}
