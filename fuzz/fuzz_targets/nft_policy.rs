//! The Network Sidecar's policy as the kernel gets it: arbitrary rules
//! (what entries and learned answers become, services among them) through
//! `allowed_ranges` and `service_verdicts` into the nf_tables batch
//! `Nft::replace` sends. Invariants checked: nothing panics; the allowed
//! ranges are sorted, disjoint and non-empty; a packet is accepted by the
//! backstop's model (the `services` chain first, then the ranges) exactly
//! when the first rule (by priority) that covers its address and matches its
//! protocol and port allows it, both for a service some rule names and for
//! one no rule names (which a service rule must never open); and the batch
//! is well-formed netlink (every message and attribute length fits its
//! container) carrying exactly those ranges and one rule per service verdict.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lazaret_sidecar::nft::{read_batch, replace_batch};
use lazaret_sidecar::policy::{allowed_ranges, service_verdicts, Cidr, RuleSpec, Service, ServiceVerdict, Verdict};
use libfuzzer_sys::fuzz_target;

/// Bytes of one fuzzed rule: flags (family, mark, `iif lo`), 16 address bytes,
/// the prefix length, verdict and priority, then the service: a selector (none,
/// TCP or UDP with a port, another protocol) and two bytes for it.
const RULE_BYTES: usize = 22;

fn service_of(selector: u8, a: u8, b: u8) -> Option<Service> {
    match selector % 4 {
        2 => {
            let protocol = if a & 1 == 0 { Service::TCP } else { Service::UDP };
            Service::new(protocol, Some(u16::from_be_bytes([a >> 1, b]).max(1))).ok()
        }
        3 => Service::new(if matches!(a, 0 | Service::TCP | Service::UDP) { 132 } else { a }, None).ok(),
        _ => None,
    }
}

fn rules(data: &[u8]) -> Vec<RuleSpec> {
    data.chunks_exact(RULE_BYTES)
        .filter_map(|chunk| {
            let v4 = chunk[0] & 1 == 0;
            let address = if v4 {
                IpAddr::V4(Ipv4Addr::new(chunk[1], chunk[2], chunk[3], chunk[4]))
            } else {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&chunk[1..17]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            let service = service_of(chunk[19], chunk[20], chunk[21]);
            // Service rules are host rules, as `Policy` makes them.
            let dst = if service.is_some() { Cidr::host(address) } else { Cidr::new(address, chunk[17] % if v4 { 33 } else { 129 })? };
            let verdict = match chunk[18] % 4 {
                0 => Verdict::Allow,
                1 => Verdict::Deny,
                2 => Verdict::Local,
                _ => Verdict::Unlisted,
            };
            let mark = if chunk[0] & 2 != 0 { 0x4c5a_0053 } else { 0 };
            Some(RuleSpec { dst, verdict, priority: u32::from(chunk[18] / 4 % 8), mark, local_only: chunk[0] & 4 != 0, service })
        })
        .collect()
}

/// The reference decision over `ordered` (rules already stably sorted by
/// priority) for a packet to `value` of `service` (`None`: a protocol and
/// port no rule names): the first unmarked, non-`local` rule of the family
/// covering `value` whose service is none or this one decides (`unlisted`
/// leads only to the drop link: not allowed).
fn allowed(ordered: &[&RuleSpec], v4: bool, value: u128, service: Option<Service>) -> bool {
    ordered
        .iter()
        .filter(|r| r.mark == 0 && r.verdict != Verdict::Local && r.dst.is_ipv4() == v4)
        .filter(|r| r.service.is_none() || r.service == service)
        .find(|r| {
            let (start, end) = r.dst.bounds();
            start <= value && value <= end
        })
        .is_some_and(|r| r.verdict == Verdict::Allow)
}

fn value_of(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The expressions `read_batch` shows for the `services` rule of `verdict`.
fn service_expressions(verdict: &ServiceVerdict) -> Vec<String> {
    let mut out = match verdict.address {
        IpAddr::V4(v4) => {
            vec!["meta 15".to_owned(), "cmp 02".to_owned(), "payload 1 16 4".to_owned(), format!("cmp {}", hex(&v4.octets()))]
        }
        IpAddr::V6(v6) => {
            vec!["meta 15".to_owned(), "cmp 0a".to_owned(), "payload 1 24 16".to_owned(), format!("cmp {}", hex(&v6.octets()))]
        }
    };
    out.push("meta 16".to_owned());
    out.push(format!("cmp {:02x}", verdict.service.protocol()));
    if let Some(port) = verdict.service.port() {
        out.push("payload 2 2 2".to_owned());
        out.push(format!("cmp {}", hex(&port.to_be_bytes())));
    }
    out.push(if verdict.allow { "accept" } else { "drop" }.to_owned());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&many, data)) = data.split_first() else { return };
    let mut rules = rules(data);
    let fuzzed = rules.len();
    // A large learned table: up to 4,080 disjoint single addresses (as a
    // long session's answers make), so batches span several messages.
    for n in 0..u32::from(many) * 16 {
        let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 2 * n));
        rules.push(RuleSpec { dst: Cidr::host(address), verdict: Verdict::Allow, priority: 4, mark: 0, local_only: false, service: None });
    }
    let ranges = allowed_ranges(&rules);
    let services = service_verdicts(&rules);
    let v4: Vec<(u128, Option<u128>)> = ranges.v4.iter().map(|(a, b)| (u128::from(*a), b.map(u128::from))).collect();
    let v6: Vec<(u128, Option<u128>)> = ranges.v6.clone();
    let mut ordered: Vec<&RuleSpec> = rules.iter().collect();
    ordered.sort_by_key(|r| r.priority);
    let in_ranges = |v4_family: bool, value: u128| {
        let list = if v4_family { &v4 } else { &v6 };
        list.iter().any(|(start, end)| *start <= value && end.is_none_or(|end| value < end))
    };
    for (family, list) in [(true, &v4), (false, &v6)] {
        for pair in list.windows(2) {
            let end = pair[0].1.expect("only the last range reaches the top");
            assert!(end < pair[1].0, "ranges sorted, disjoint and not adjacent: {pair:?}");
        }
        for (start, end) in list.iter() {
            assert!(end.is_none_or(|end| *start < end), "non-empty: {start} {end:?}");
        }
        // Sample the edges of every fuzzed rule (and of the learned table's
        // first and last entries) against the reference, for a service no
        // rule names: the services chain lets it pass to the ranges.
        let top = if family { u128::from(u32::MAX) } else { u128::MAX };
        let mut samples = vec![0, top];
        let edges = rules[..fuzzed].iter().chain(rules[fuzzed..].first()).chain(rules[fuzzed..].last());
        for rule in edges.filter(|r| r.dst.is_ipv4() == family) {
            let (start, end) = rule.dst.bounds();
            samples.extend([start, end, start.saturating_sub(1), end.saturating_add(1).min(top)]);
        }
        for value in samples {
            assert_eq!(in_ranges(family, value), allowed(&ordered, family, value, None), "{value:#x} (v4: {family})");
        }
    }
    // Each service a rule names, at its address: the backstop's model (the
    // first matching service verdict, else the ranges) against the reference.
    for rule in rules[..fuzzed].iter().filter(|r| r.service.is_some()) {
        let (address, v4_family, value) = (rule.dst.addr(), rule.dst.is_ipv4(), value_of(rule.dst.addr()));
        let service = rule.service;
        let verdict = services.iter().find(|v| v.address == address && Some(v.service) == service);
        let model = verdict.map_or_else(|| in_ranges(v4_family, value), |v| v.allow);
        assert_eq!(model, allowed(&ordered, v4_family, value, service), "{address} {service:?}");
    }
    // The batch: well-formed netlink carrying exactly the ranges and the services.
    let read = read_batch(&replace_batch(&ranges, &services)).expect("a well-formed batch");
    let mut expected = Vec::new();
    for (start, end) in &ranges.v4 {
        expected.push(start.to_be_bytes().to_vec());
        expected.extend(end.map(|end| end.to_be_bytes().to_vec()));
    }
    for (start, end) in &ranges.v6 {
        expected.push(start.to_be_bytes().to_vec());
        expected.extend(end.map(|end| end.to_be_bytes().to_vec()));
    }
    assert_eq!(read.keys, expected, "the batch carries exactly the ranges");
    assert_eq!(read.flushed, ["set allowed4", "set allowed6", "chain services"], "and replaces all three");
    let rules_read: Vec<(String, Vec<String>)> = services.iter().map(|v| ("services".to_owned(), service_expressions(v))).collect();
    assert_eq!(read.rules, rules_read, "and exactly one rule per service verdict");
});
