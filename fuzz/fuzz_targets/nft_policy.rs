//! The Network Sidecar's policy as the kernel gets it: arbitrary rules
//! (what entries and learned answers become) through `allowed_ranges` into
//! the nf_tables batch `Nft::replace` sends. Invariants checked: nothing
//! panics; the allowed ranges are sorted, disjoint and non-empty; an address
//! is in them exactly when the first rule (by priority) that covers it
//! allows it; and the batch is well-formed netlink (every message and
//! attribute length fits its container) carrying exactly those ranges.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lazaret_sidecar::nft::{replace_batch, set_element_keys};
use lazaret_sidecar::policy::{allowed_ranges, Cidr, RuleSpec, Verdict};
use libfuzzer_sys::fuzz_target;

const RULE_BYTES: usize = 19;

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
            let dst = Cidr::new(address, chunk[17] % if v4 { 33 } else { 129 })?;
            let verdict = match chunk[18] % 4 {
                0 => Verdict::Allow,
                1 => Verdict::Deny,
                2 => Verdict::Local,
                _ => Verdict::Unlisted,
            };
            let mark = if chunk[0] & 2 != 0 { 0x4c5a_0053 } else { 0 };
            Some(RuleSpec { dst, verdict, priority: u32::from(chunk[18] / 4 % 8), mark, local_only: chunk[0] & 4 != 0 })
        })
        .collect()
}

/// The reference decision over `ordered` (rules already stably sorted by
/// priority): the first unmarked, non-`local` rule of the family covering
/// `value` decides (`unlisted` leads only to the drop link: not allowed).
fn allowed(ordered: &[&RuleSpec], v4: bool, value: u128) -> bool {
    ordered
        .iter()
        .filter(|r| r.mark == 0 && r.verdict != Verdict::Local && r.dst.is_ipv4() == v4)
        .find(|r| {
            let (start, end) = r.dst.bounds();
            start <= value && value <= end
        })
        .is_some_and(|r| r.verdict == Verdict::Allow)
}

fuzz_target!(|data: &[u8]| {
    let Some((&many, data)) = data.split_first() else { return };
    let mut rules = rules(data);
    let fuzzed = rules.len();
    // A large learned table: up to 4,080 disjoint single addresses (as a
    // long session's answers make), so batches span several messages.
    for n in 0..u32::from(many) * 16 {
        let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 2 * n));
        rules.push(RuleSpec { dst: Cidr::host(address), verdict: Verdict::Allow, priority: 4, mark: 0, local_only: false });
    }
    let ranges = allowed_ranges(&rules);
    let v4: Vec<(u128, Option<u128>)> = ranges.v4.iter().map(|(a, b)| (u128::from(*a), b.map(u128::from))).collect();
    let v6: Vec<(u128, Option<u128>)> = ranges.v6.clone();
    for (family, list) in [(true, &v4), (false, &v6)] {
        for pair in list.windows(2) {
            let end = pair[0].1.expect("only the last range reaches the top");
            assert!(end < pair[1].0, "ranges sorted, disjoint and not adjacent: {pair:?}");
        }
        for (start, end) in list.iter() {
            assert!(end.is_none_or(|end| *start < end), "non-empty: {start} {end:?}");
        }
        // Sample the edges of every fuzzed rule (and of the learned table's
        // first and last entries) against the reference.
        let mut ordered: Vec<&RuleSpec> = rules.iter().collect();
        ordered.sort_by_key(|r| r.priority);
        let top = if family { u128::from(u32::MAX) } else { u128::MAX };
        let mut samples = vec![0, top];
        let edges = rules[..fuzzed].iter().chain(rules[fuzzed..].first()).chain(rules[fuzzed..].last());
        for rule in edges.filter(|r| r.dst.is_ipv4() == family) {
            let (start, end) = rule.dst.bounds();
            samples.extend([start, end, start.saturating_sub(1), end.saturating_add(1).min(top)]);
        }
        for value in samples {
            let inside = list.iter().any(|(start, end)| *start <= value && end.is_none_or(|end| value < end));
            assert_eq!(inside, allowed(&ordered, family, value), "{value:#x} (v4: {family})");
        }
    }
    // The batch: well-formed netlink carrying exactly the ranges.
    let keys = set_element_keys(&replace_batch(&ranges)).expect("a well-formed batch");
    let mut expected = Vec::new();
    for (start, end) in &ranges.v4 {
        expected.push(start.to_be_bytes().to_vec());
        expected.extend(end.map(|end| end.to_be_bytes().to_vec()));
    }
    for (start, end) in &ranges.v6 {
        expected.push(start.to_be_bytes().to_vec());
        expected.extend(end.map(|end| end.to_be_bytes().to_vec()));
    }
    assert_eq!(keys, expected, "the batch carries exactly the ranges");
});
