//! Egress policy: CIDR parsing, the allow/deny map and the policy rules it becomes.
//!
//! The policy is longest-prefix-match: the most specific entry that covers a destination
//! decides, and a destination that no `allow` entry covers is unreachable. Every entry
//! becomes one kernel policy rule (`ip rule`), ordered so that longer prefixes are looked
//! at first; a final catch-all `prohibit` rule per address family makes the default deny.
//! Allowed destinations are looked up in the `main` table (which keeps podman's routes);
//! denied ones get `prohibit` (the sender sees `EACCES`).
//!
//! While questions are held (`[network] ask`), destinations that no entry covers are
//! not prohibited but sent to the drop link ([`unlisted_rules`]): netfilter logs them for
//! the sidecar, which offers the address to the human, and refuses them there (`nft.rs`).
//! Explicit denies and protected addresses keep their `prohibit` rules: they are never
//! offered.
//!
//! Services: an entry can also be one protocol and port of one address (`10.9.0.7/32
//! tcp/8081`, [`Policy::allow_service`]). Allowed, it becomes `to 10.9.0.7/32 ipproto tcp
//! dport 8081 lookup main`; denied, the same with `prohibit`. Service rules have their own
//! band, [`SERVICE_PRIORITY`]: after the sidecar's upstream rules and before every CIDR
//! rule, since a protocol and port is more specific than any prefix. A service allow opens
//! that protocol and port and nothing else: every other packet to the address matches no
//! service rule and goes on to the CIDR rules (the unlisted table while questions are
//! held, else the catch-all `prohibit`). A deny wins where kinds meet: a service allow
//! gets no rule while an explicit CIDR deny decides its address
//! ([`Policy::denies_explicitly`]) or the address is protected (`State::rules`), and a
//! service deny carves its protocol and port out of a CIDR allow. The netfilter backstop
//! holds the same decisions ([`service_verdicts`]); [`allowed_ranges`] counts no service
//! rule as opening its address.
//!
//! The parts: `cidr` (a network in CIDR notation, host bits cleared) and
//! `rules` (the kernel rules: their priorities, the guard and unlisted
//! rules, the order and diff, and the netfilter backstop's view of them);
//! this file holds the allow/deny map, [`Policy`].

mod cidr;
mod rules;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use cidr::Cidr;
pub use lazaret_protocol::sidecar::Service;
pub use rules::{
    allowed_ranges, diff, guard_rules, service_verdicts, sort_rules, subnet_broadcast, unlisted_rules, AllowedRanges, RuleSpec,
    ServiceVerdict, CATCH_ALL_PRIORITY, DNS_MARK, GUARD_PRIORITY, LOCAL_PRIORITY, LPM_BASE, RT_TABLE_LOCAL, RT_TABLE_MAIN,
    RT_TABLE_UNLISTED, SERVICE_PRIORITY, UNLISTED_PRIORITY, UPSTREAM_PRIORITY,
};

/// What an entry does. (`Local`, `lookup local`, only appears in the guard rules;
/// `Unlisted`, `lookup unlisted`, only in [`unlisted_rules`].)
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Allow,
    Deny,
    Local,
    Unlisted,
}

/// The allow/deny map. Deny entries are kept only where they carve a hole into an allowed
/// range; everything else is denied anyway. `stated` keeps every entry as given (the
/// latest verdict per CIDR, nothing pruned), so that a deny without an allow around it
/// still keeps a name's answers out ([`Policy::denies_explicitly`]). `services` are the
/// entries of one protocol and port of one address (see the module's documentation),
/// each an allow or a deny.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct Policy {
    entries: BTreeMap<Cidr, Verdict>,
    stated: BTreeMap<Cidr, Verdict>,
    services: BTreeMap<(IpAddr, Service), Verdict>,
}

impl Policy {
    pub fn new() -> Policy {
        Policy::default()
    }

    /// Makes `cidr` reachable (unless a more specific deny entry covers part of it).
    pub fn allow(&mut self, cidr: Cidr) {
        self.entries.insert(cidr, Verdict::Allow);
        self.stated.insert(cidr, Verdict::Allow);
        self.prune();
    }

    /// Makes `cidr` unreachable (unless a more specific allow entry covers part of it).
    pub fn deny(&mut self, cidr: Cidr) {
        self.entries.insert(cidr, Verdict::Deny);
        self.stated.insert(cidr, Verdict::Deny);
        self.prune();
    }

    /// Removes the allow or deny entry of exactly `cidr`; whether it was one. The
    /// denies inside a removed deny that it made redundant carve again where an
    /// allow encloses them.
    pub fn remove(&mut self, cidr: Cidr) -> bool {
        let was = self.stated.remove(&cidr);
        self.entries.remove(&cidr);
        if was == Some(Verdict::Deny) {
            for (inner, verdict) in &self.stated {
                if *verdict == Verdict::Deny && inner.len > cidr.len && cidr.contains(inner) {
                    self.entries.insert(*inner, Verdict::Deny);
                }
            }
        }
        self.prune();
        was.is_some()
    }

    /// Makes `service` of `address` reachable (unless an explicit CIDR deny decides the
    /// address, see [`Policy::rules`]); replaces a deny of it.
    pub fn allow_service(&mut self, address: IpAddr, service: Service) {
        self.services.insert((address, service), Verdict::Allow);
    }

    /// Makes `service` of `address` unreachable, also where a CIDR allow covers the
    /// address; replaces an allow of it.
    pub fn deny_service(&mut self, address: IpAddr, service: Service) {
        self.services.insert((address, service), Verdict::Deny);
    }

    /// Removes the allow or deny of exactly `service` of `address`; whether it was one.
    pub fn remove_service(&mut self, address: IpAddr, service: Service) -> bool {
        self.services.remove(&(address, service)).is_some()
    }

    /// The verdict stated for exactly `service` of `address`, if it is an entry.
    pub fn stated_service(&self, address: IpAddr, service: Service) -> Option<Verdict> {
        self.services.get(&(address, service)).copied()
    }

    /// The service entries of `verdict`, by address and service.
    pub fn listed_services(&self, verdict: Verdict) -> Vec<(IpAddr, Service)> {
        self.services.iter().filter(|(_, v)| **v == verdict).map(|(key, _)| *key).collect()
    }

    /// The verdict last stated for exactly `cidr`, if it is an entry.
    pub fn stated(&self, cidr: &Cidr) -> Option<Verdict> {
        self.stated.get(cidr).copied()
    }

    /// Whether `cidr` itself is an allow entry.
    pub fn allows_exactly(&self, cidr: &Cidr) -> bool {
        self.entries.get(cidr) == Some(&Verdict::Allow)
    }

    /// Whether the most specific entry ever stated for `addr` is a deny (a name's answer
    /// must not reopen it), even where the deny changes nothing about the kernel rules.
    pub fn denies_explicitly(&self, addr: IpAddr) -> bool {
        self.most_specific_stated(addr) == Some(Verdict::Deny)
    }

    /// Whether the entries alone make `addr` reachable (the most specific entry
    /// stated for it is an allow).
    pub fn allows(&self, addr: IpAddr) -> bool {
        self.most_specific_stated(addr) == Some(Verdict::Allow)
    }

    fn most_specific_stated(&self, addr: IpAddr) -> Option<Verdict> {
        let host = Cidr::host(addr);
        self.stated.iter().filter(|(c, _)| c.contains(&host)).max_by_key(|(c, _)| c.len).map(|(_, v)| *v)
    }

    #[cfg(test)]
    /// The verdict for one destination address (longest prefix wins; default deny).
    pub fn verdict(&self, addr: IpAddr) -> Verdict {
        let host = Cidr::host(addr);
        self.entries.iter().filter(|(c, _)| c.contains(&host)).max_by_key(|(c, _)| c.len).map(|(_, v)| *v).unwrap_or(Verdict::Deny)
    }

    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = (Cidr, Verdict)> + '_ {
        self.entries.iter().map(|(c, v)| (*c, *v))
    }

    /// Every deny entry as stated, including those that change nothing about the
    /// `prohibit` catch-all (see [`unlisted_rules`]: they keep an address from being
    /// offered).
    pub fn stated_denies(&self) -> Vec<Cidr> {
        self.stated.iter().filter(|(_, v)| **v == Verdict::Deny).map(|(c, _)| *c).collect()
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

    /// The complete set of kernel rules this policy needs, catch-alls included. A
    /// service deny always has its rule; a service allow has none while an explicit
    /// CIDR deny decides its address (the deny wins, as for a name's answer).
    pub fn rules(&self) -> Vec<RuleSpec> {
        let mut rules: Vec<RuleSpec> = self
            .entries
            .iter()
            .map(|(c, v)| RuleSpec { dst: *c, verdict: *v, priority: RuleSpec::priority_for(c), mark: 0, local_only: false, service: None })
            .collect();
        for any in [Cidr { addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED), len: 0 }, Cidr { addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED), len: 0 }] {
            rules.push(RuleSpec {
                dst: any,
                verdict: Verdict::Deny,
                priority: CATCH_ALL_PRIORITY,
                mark: 0,
                local_only: false,
                service: None,
            });
        }
        for ((address, service), verdict) in &self.services {
            if *verdict == Verdict::Allow && self.denies_explicitly(*address) {
                continue;
            }
            rules.push(RuleSpec {
                dst: Cidr::host(*address),
                verdict: *verdict,
                priority: SERVICE_PRIORITY,
                mark: 0,
                local_only: false,
                service: Some(*service),
            });
        }
        sort_rules(&mut rules);
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn c(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    pub(super) fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
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
    fn remove_takes_out_exactly_the_entry() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        p.deny(c("10.1.2.0/24")); // inside a deny: redundant for now
        assert!(!p.remove(c("10.2.0.0/16")), "not an entry");
        assert!(!p.remove(c("10.0.0.0/9")), "inside an entry is not the entry");
        assert_eq!(p.stated(&c("10.1.2.0/24")), Some(Verdict::Deny));
        assert!(p.remove(c("10.1.0.0/16")));
        assert_eq!(p.stated(&c("10.1.0.0/16")), None);
        assert_eq!(p.verdict(ip("10.1.9.9")), Verdict::Allow, "the hole is gone");
        assert_eq!(p.verdict(ip("10.1.2.3")), Verdict::Deny, "the deny inside it carves again");
        assert!(p.denies_explicitly(ip("10.1.2.3")));
        assert!(p.remove(c("10.0.0.0/8")));
        assert_eq!(p.entries().count(), 0, "the deny without an allow around it is pruned");
        assert!(!p.allows(ip("10.9.9.9")));
        assert!(p.denies_explicitly(ip("10.1.2.3")), "and still stated");
        assert!(p.remove(c("10.1.2.0/24")));
        assert!(!p.denies_explicitly(ip("10.1.2.3")));
        assert_eq!(p, Policy::new());
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

    pub(super) fn service(text: &str) -> Service {
        Service::parse(text).unwrap()
    }

    #[test]
    fn a_service_is_a_rule_of_its_own_band_and_opens_no_whole_address() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.allow_service(ip("10.9.0.7"), service("tcp/8081"));
        p.allow_service(ip("192.0.2.7"), service("udp/53"));
        p.allow_service(ip("fd00::7"), service("132"));
        p.deny_service(ip("10.1.2.3"), service("tcp/22"));
        let text: Vec<String> = p.rules().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            [
                "9500: to 10.1.2.3/32 ipproto tcp dport 22 prohibit",
                "9500: to 10.9.0.7/32 ipproto tcp dport 8081 lookup main",
                "9500: to 192.0.2.7/32 ipproto udp dport 53 lookup main",
                "10024: to 10.0.0.0/8 lookup main",
                "20000: to 0.0.0.0/0 prohibit",
                "9500: to fd00::7/128 ipproto 132 lookup main",
                "20000: to ::/0 prohibit",
            ]
        );
        const { assert!(UPSTREAM_PRIORITY < SERVICE_PRIORITY && SERVICE_PRIORITY < LPM_BASE) };
        assert!(SERVICE_PRIORITY > LOCAL_PRIORITY && SERVICE_PRIORITY < RuleSpec::priority_for(&c("10.0.0.1")));
        // The whole-address decisions: the service allows open no address; the
        // service deny closes nothing of 10.0.0.0/8 but its own protocol and port.
        let ranges = allowed_ranges(&p.rules());
        let v4 = |a: &str| u32::from(a.parse::<Ipv4Addr>().unwrap());
        assert_eq!(ranges.v4, vec![(v4("10.0.0.0"), Some(v4("11.0.0.0")))]);
        assert!(ranges.v6.is_empty(), "fd00::7 is not open as a whole: {:?}", ranges.v6);
        let verdicts: Vec<(String, String, bool)> =
            service_verdicts(&p.rules()).iter().map(|v| (v.address.to_string(), v.service.to_string(), v.allow)).collect();
        assert_eq!(
            verdicts,
            [
                ("10.1.2.3".to_owned(), "tcp/22".to_owned(), false),
                ("10.9.0.7".to_owned(), "tcp/8081".to_owned(), true),
                ("192.0.2.7".to_owned(), "udp/53".to_owned(), true),
                ("fd00::7".to_owned(), "132".to_owned(), true),
            ]
        );
        assert_eq!(p.stated_service(ip("10.9.0.7"), service("tcp/8081")), Some(Verdict::Allow));
        assert_eq!(p.stated_service(ip("10.9.0.7"), service("tcp/8080")), None, "another port is no entry");
        assert_eq!(p.listed_services(Verdict::Deny), [(ip("10.1.2.3"), service("tcp/22"))]);
        assert!(!p.allows(ip("192.0.2.7")), "a service allow is no CIDR allow");
        assert!(p.remove_service(ip("192.0.2.7"), service("udp/53")));
        assert!(!p.remove_service(ip("192.0.2.7"), service("udp/53")), "gone");
        p.deny_service(ip("10.9.0.7"), service("tcp/8081"));
        assert_eq!(p.stated_service(ip("10.9.0.7"), service("tcp/8081")), Some(Verdict::Deny), "a deny replaces the allow");
    }

    #[test]
    fn an_explicit_cidr_deny_wins_over_a_service_allow() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.9.0.0/16"));
        p.allow_service(ip("10.9.0.7"), service("tcp/8081"));
        p.allow_service(ip("192.0.2.7"), service("tcp/443"));
        p.deny(c("192.0.2.0/24")); // no allow around it: pruned from the rules, still stated
        let rules = p.rules();
        assert!(rules.iter().all(|r| r.service.is_none()), "no service rule under a deny: {rules:?}");
        assert!(service_verdicts(&rules).is_empty());
        // An allow of exactly the address is more specific than the deny: the service
        // is open anyway, and its rule comes back.
        p.allow(c("10.9.0.7"));
        assert!(p.rules().iter().any(|r| r.service == Some(service("tcp/8081")) && r.verdict == Verdict::Allow));
        assert!(!p.rules().iter().any(|r| r.service == Some(service("tcp/443"))));
    }
}
