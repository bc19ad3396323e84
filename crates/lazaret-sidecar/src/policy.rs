//! Egress policy: CIDR parsing, the allow/deny map and the policy rules it becomes.
//!
//! The policy is longest-prefix-match: the most specific entry that covers a destination
//! decides, and a destination that no `allow` entry covers is unreachable. Every entry
//! becomes one kernel policy rule (`ip rule`), ordered so that longer prefixes are looked
//! at first; a final catch-all `prohibit` rule per address family makes the default deny.
//! Allowed destinations are looked up in the `main` table (which keeps podman's routes);
//! denied ones get `prohibit` (the sender sees `EACCES`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Rule priority of a host entry; an entry of prefix length `n` gets `LPM_BASE + (max - n)`
/// where `max` is 32 or 128 (see [`RuleSpec::priority_for`]).
pub const LPM_BASE: u32 = 10_000;
/// Priority of the catch-all `prohibit` rules (after every entry, before podman's `main`
/// rule at 32766).
pub const CATCH_ALL_PRIORITY: u32 = 20_000;
/// The kernel's `main` routing table.
pub const RT_TABLE_MAIN: u32 = 254;

/// An IPv4 or IPv6 network in CIDR notation, with host bits cleared.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// Builds a CIDR, clearing host bits. `None` if `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Option<Cidr> {
        let max = max_len(&addr);
        if len > max {
            return None;
        }
        Some(Cidr { addr: mask(addr, len), len })
    }

    /// Parses `a.b.c.d/n`, `x::y/n`, or a bare address (a host: /32 or /128).
    /// Host bits are cleared (`10.0.0.5/24` is `10.0.0.0/24`).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        if text.is_empty() || text.len() > 64 {
            return Err(format!("not a CIDR: {text:?}"));
        }
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| format!("not an IP address: {addr_text:?}"))?;
        let len = match len_text {
            None => max_len(&addr),
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("bad prefix length in {text:?}"));
                }
                l.parse::<u8>().map_err(|_| format!("bad prefix length in {text:?}"))?
            }
        };
        Cidr::new(addr, len).ok_or_else(|| format!("prefix length {len} too long in {text:?}"))
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The whole address space of the family (`0.0.0.0/0` or `::/0`).
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// Whether `other` lies inside `self` (equal counts).
    pub fn contains(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4() && self.len <= other.len && mask(other.addr, self.len) == self.addr
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn max_len(addr: &IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// What an entry does.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Allow,
    Deny,
}

/// The allow/deny map. Deny entries are kept only where they carve a hole into an allowed
/// range; everything else is denied anyway.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct Policy {
    entries: BTreeMap<Cidr, Verdict>,
}

impl Policy {
    pub fn new() -> Policy {
        Policy::default()
    }

    /// Makes `cidr` reachable (unless a more specific deny entry covers part of it).
    pub fn allow(&mut self, cidr: Cidr) {
        self.entries.insert(cidr, Verdict::Allow);
        self.prune();
    }

    /// Makes `cidr` unreachable (unless a more specific allow entry covers part of it).
    pub fn deny(&mut self, cidr: Cidr) {
        self.entries.insert(cidr, Verdict::Deny);
        self.prune();
    }

    #[cfg(test)]
    /// The verdict for one destination address (longest prefix wins; default deny).
    pub fn verdict(&self, addr: IpAddr) -> Verdict {
        let host = Cidr::new(addr, max_len(&addr)).unwrap_or(Cidr { addr, len: 0 });
        self.entries.iter().filter(|(c, _)| c.contains(&host)).max_by_key(|(c, _)| c.len).map(|(_, v)| *v).unwrap_or(Verdict::Deny)
    }

    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = (Cidr, Verdict)> + '_ {
        self.entries.iter().map(|(c, v)| (*c, *v))
    }

    pub fn listed(&self, verdict: Verdict) -> Vec<Cidr> {
        self.entries.iter().filter(|(_, v)| **v == verdict).map(|(c, _)| *c).collect()
    }

    /// Drops deny entries whose nearest enclosing entry is not an allow: they change
    /// nothing. Removing one never changes what the others mean, so one pass suffices.
    fn prune(&mut self) {
        let redundant: Vec<Cidr> = self
            .entries
            .iter()
            .filter(|(_, v)| **v == Verdict::Deny)
            .filter(|(d, _)| {
                let nearest = self.entries.iter().filter(|(c, _)| c.len < d.len && c.contains(d)).max_by_key(|(c, _)| c.len);
                !matches!(nearest, Some((_, Verdict::Allow)))
            })
            .map(|(c, _)| *c)
            .collect();
        for c in redundant {
            self.entries.remove(&c);
        }
    }

    /// The complete set of kernel rules this policy needs, catch-alls included.
    pub fn rules(&self) -> Vec<RuleSpec> {
        let mut rules: Vec<RuleSpec> =
            self.entries.iter().map(|(c, v)| RuleSpec { dst: *c, verdict: *v, priority: RuleSpec::priority_for(c) }).collect();
        for any in [Cidr { addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED), len: 0 }, Cidr { addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED), len: 0 }] {
            rules.push(RuleSpec { dst: any, verdict: Verdict::Deny, priority: CATCH_ALL_PRIORITY });
        }
        rules.sort_by_key(|r| (!r.dst.is_ipv4(), r.priority, r.dst, r.verdict));
        rules
    }
}

/// One policy rule as the kernel holds it: `to DST lookup main` or `to DST prohibit`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub struct RuleSpec {
    pub dst: Cidr,
    pub verdict: Verdict,
    pub priority: u32,
}

impl RuleSpec {
    /// Longer prefixes get smaller numbers, so the kernel looks at them first.
    pub fn priority_for(c: &Cidr) -> u32 {
        LPM_BASE + u32::from(max_len(&c.addr) - c.len)
    }
}

impl fmt::Display for RuleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.verdict {
            Verdict::Allow => "lookup main",
            Verdict::Deny => "prohibit",
        };
        write!(f, "{}: to {} {}", self.priority, self.dst, action)
    }
}

/// What must change in the kernel to go from `current` to `desired`: rules to add, then
/// rules to delete, to be applied in that order: when one prefix switches between allow
/// and deny, the new rule lands behind the old one at the same priority and the old one
/// then goes, so the prefix is never left to a less specific rule in between.
pub fn diff(current: &[RuleSpec], desired: &[RuleSpec]) -> (Vec<RuleSpec>, Vec<RuleSpec>) {
    let add = desired.iter().filter(|r| !current.contains(r)).copied().collect();
    let del = current.iter().filter(|r| !desired.contains(r)).copied().collect();
    (add, del)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_normalizes() {
        assert_eq!(c("10.0.0.5").to_string(), "10.0.0.5/32");
        assert_eq!(c("10.0.0.5/24").to_string(), "10.0.0.0/24");
        assert_eq!(c(" 0.0.0.0/0 ").to_string(), "0.0.0.0/0");
        assert_eq!(c("fd00::1").to_string(), "fd00::1/128");
        assert_eq!(c("fd00:1:2:3::7/48").to_string(), "fd00:1:2::/48");
        assert_eq!(c("::/0").to_string(), "::/0");
        assert!(c("::/0").is_default());
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10.0.0.1/33",
            "fd00::/129",
            "10.0.0/8",
            "10.0.0.1/",
            "10.0.0.1/+8",
            "10.0.0.1/-1",
            "example.com",
            "10.0.0.1/8/8",
            "1.2.3.4 /8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn containment() {
        assert!(c("10.0.0.0/8").contains(&c("10.1.2.3")));
        assert!(c("10.0.0.0/8").contains(&c("10.0.0.0/8")));
        assert!(!c("10.1.0.0/16").contains(&c("10.0.0.0/8")));
        assert!(!c("0.0.0.0/0").contains(&c("::1")));
        assert!(c("::/0").contains(&c("fd00::1")));
    }

    #[test]
    fn default_deny_and_longest_prefix_wins() {
        let mut p = Policy::new();
        assert_eq!(p.verdict(ip("10.0.0.1")), Verdict::Deny);
        assert_eq!(p.verdict(ip("::1")), Verdict::Deny);
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        p.allow(c("10.1.2.3"));
        assert_eq!(p.verdict(ip("10.9.9.9")), Verdict::Allow);
        assert_eq!(p.verdict(ip("10.1.9.9")), Verdict::Deny);
        assert_eq!(p.verdict(ip("10.1.2.3")), Verdict::Allow);
        assert_eq!(p.verdict(ip("11.0.0.1")), Verdict::Deny);
        assert_eq!(p.verdict(ip("fd00::1")), Verdict::Deny);
    }

    #[test]
    fn deny_of_an_allowed_host_removes_it_and_allow_restores_it() {
        let mut p = Policy::new();
        p.allow(c("10.213.0.10"));
        assert_eq!(p.listed(Verdict::Allow), vec![c("10.213.0.10")]);
        p.deny(c("10.213.0.10"));
        // Nothing encloses it: the deny entry is redundant and dropped.
        assert_eq!(p.entries().count(), 0);
        assert_eq!(p.verdict(ip("10.213.0.10")), Verdict::Deny);
        p.allow(c("10.213.0.10"));
        assert_eq!(p.verdict(ip("10.213.0.10")), Verdict::Allow);
    }

    #[test]
    fn redundant_denies_are_pruned() {
        let mut p = Policy::new();
        p.deny(c("10.0.0.0/8"));
        assert_eq!(p.entries().count(), 0);
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        p.deny(c("10.1.2.0/24")); // inside a deny: redundant
        assert_eq!(p.listed(Verdict::Deny), vec![c("10.1.0.0/16")]);
        p.deny(c("10.0.0.0/8")); // now both denies are redundant
        assert_eq!(p.entries().count(), 0);
    }

    #[test]
    fn rules_are_ordered_by_specificity_and_end_in_catch_alls() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        p.allow(c("fd00::/64"));
        let rules = p.rules();
        let text: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            vec![
                "10016: to 10.1.0.0/16 prohibit",
                "10024: to 10.0.0.0/8 lookup main",
                "20000: to 0.0.0.0/0 prohibit",
                "10064: to fd00::/64 lookup main",
                "20000: to ::/0 prohibit",
            ]
        );
        // Priorities strictly decrease with prefix length within a family.
        assert!(RuleSpec::priority_for(&c("10.0.0.1")) < RuleSpec::priority_for(&c("10.0.0.0/31")));
        assert!(RuleSpec::priority_for(&c("0.0.0.0/0")) < CATCH_ALL_PRIORITY);
        assert!(RuleSpec::priority_for(&c("::/0")) < CATCH_ALL_PRIORITY);
    }

    #[test]
    fn empty_policy_is_two_catch_alls() {
        let rules = Policy::new().rules();
        assert_eq!(rules.len(), 2);
        assert!(rules.iter().all(|r| r.verdict == Verdict::Deny && r.dst.is_default()));
    }

    #[test]
    fn diff_adds_before_it_deletes() {
        let mut p = Policy::new();
        let before = p.rules();
        p.allow(c("10.213.0.10"));
        let after = p.rules();
        let (add, del) = diff(&before, &after);
        assert_eq!(add.len(), 1);
        assert!(del.is_empty());
        let (add, del) = diff(&after, &before);
        assert!(add.is_empty());
        assert_eq!(del.len(), 1);
        assert_eq!(diff(&after, &after), (vec![], vec![]));
    }
}
