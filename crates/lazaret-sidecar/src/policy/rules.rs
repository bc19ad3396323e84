//! The kernel rules a policy becomes ([`RuleSpec`]) and what is read from
//! them: the priority bands (guard, local, upstream, service, the
//! longest-prefix entries, unlisted, catch-all), the guard rules against
//! broadcast and multicast, the unlisted rules while questions are held,
//! the order rules are compared in and the diff between two sets, and the
//! netfilter backstop's view ([`allowed_ranges`], [`service_verdicts`]),
//! which decides exactly as the rules do.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cidr::max_len;
use super::{Cidr, Service, Verdict};

/// Rule priority of a host entry; an entry of prefix length `n` gets `LPM_BASE + (max - n)`
/// where `max` is 32 or 128 (see [`RuleSpec::priority_for`]).
pub const LPM_BASE: u32 = 10_000;
/// Priority of the catch-all `prohibit` rules (after every entry, before podman's `main`
/// rule at 32766).
pub const CATCH_ALL_PRIORITY: u32 = 20_000;
/// The kernel's `main` routing table.
pub const RT_TABLE_MAIN: u32 = 254;
/// Priority of the rules that let the sidecar's own marked DNS sockets reach the upstream
/// resolvers (before every entry: a deny entry must not cut the sidecar off).
pub const UPSTREAM_PRIORITY: u32 = 9_000;
/// `SO_MARK` of the sidecar's upstream DNS sockets. Setting a mark needs `CAP_NET_ADMIN`
/// (or `CAP_NET_RAW`), which the sandbox does not have, so nothing else in the namespace
/// can send traffic that these rules let through.
pub const DNS_MARK: u32 = 0x4c5a_0053;
/// Priority of the service rules (one protocol and port of one address, see the `policy`
/// module's documentation): after [`UPSTREAM_PRIORITY`], before every CIDR rule ([`LPM_BASE`]).
/// Rules of this band never overlap: each is one (address, protocol, port).
pub const SERVICE_PRIORITY: u32 = 9_500;
/// Priority of the guard rules that stop locally sent broadcast and multicast (see
/// [`guard_rules`]); before the `local` table, which holds the broadcast routes.
pub const GUARD_PRIORITY: u32 = 100;
/// Where the sidecar moves the kernel's `lookup local` rule (from priority 0, where no
/// rule could come before it).
pub const LOCAL_PRIORITY: u32 = 200;
/// The kernel's `local` routing table.
pub const RT_TABLE_LOCAL: u32 = 255;
/// The routing table of destinations no entry covers while questions are held: one
/// default route per family, out of the drop link (see `rtnl::Rtnl::ensure_drop_link`).
pub const RT_TABLE_UNLISTED: u32 = 76;
/// Priority of the `lookup unlisted` rules: after every entry, just before the catch-all
/// `prohibit` (which still decides what the unlisted table does not route, e.g. a
/// lookup bound to another interface).
pub const UNLISTED_PRIORITY: u32 = CATCH_ALL_PRIORITY - 10;

/// The rules that send what no entry covers to the unlisted table (both families), and
/// a `prohibit` for each `denied` network (the explicit denies; protected addresses
/// have theirs in `rules` already) that the rules so far would not stop before them: what is denied by name must not be
/// offered as a request. `rules` is the policy's complete rule set.
pub fn unlisted_rules(rules: &[RuleSpec], denied: &[Cidr]) -> Vec<RuleSpec> {
    let mut out = Vec::new();
    for cidr in denied {
        let rule = RuleSpec::prohibit(cidr);
        if !rules.contains(&rule) && !out.contains(&rule) {
            out.push(rule);
        }
    }
    for any in [Cidr { addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED), len: 0 }, Cidr { addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED), len: 0 }] {
        out.push(RuleSpec { dst: any, verdict: Verdict::Unlisted, priority: UNLISTED_PRIORITY, mark: 0, local_only: false, service: None });
    }
    out
}

/// Rules that keep the sandbox from sending to its link at large: broadcast (limited and
/// each subnet's, `broadcasts`) and multicast, IPv4 and IPv6. The kernel resolves these
/// destinations in the `local` table, which the priority-0 rule consults before any
/// policy rule; so the guard moves that lookup to [`LOCAL_PRIORITY`] and prohibits these
/// destinations before it, for locally sent packets only (`iif lo`): received packets and
/// the kernel's own neighbour discovery (which does not consult the rules) are untouched.
pub fn guard_rules(broadcasts: &[Ipv4Addr]) -> Vec<RuleSpec> {
    let guard = |dst: &str| {
        Cidr::parse(dst).map(|dst| RuleSpec {
            dst,
            verdict: Verdict::Deny,
            priority: GUARD_PRIORITY,
            mark: 0,
            local_only: true,
            service: None,
        })
    };
    let mut rules: Vec<RuleSpec> =
        ["255.255.255.255/32", "224.0.0.0/4", "ff00::/8"].into_iter().filter_map(|dst| guard(dst).ok()).collect();
    for broadcast in broadcasts {
        rules.push(RuleSpec {
            dst: Cidr::host(IpAddr::V4(*broadcast)),
            verdict: Verdict::Deny,
            priority: GUARD_PRIORITY,
            mark: 0,
            local_only: true,
            service: None,
        });
    }
    for any in [IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::UNSPECIFIED)] {
        rules.push(RuleSpec {
            dst: Cidr { addr: any, len: 0 },
            verdict: Verdict::Local,
            priority: LOCAL_PRIORITY,
            mark: 0,
            local_only: false,
            service: None,
        });
    }
    sort_rules(&mut rules);
    rules.dedup();
    rules
}

/// Where locally sent packets may go according to a rule set, as disjoint address
/// ranges per family: start inclusive, end exclusive (`None`: up to the top of the
/// family). The netfilter backstop (`nft.rs`) holds exactly these.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedRanges {
    pub v4: Vec<(u32, Option<u32>)>,
    pub v6: Vec<(u128, Option<u128>)>,
}

/// What `rules` decide for locally sent, unmarked packets to a whole address (any
/// protocol and port): the first rule (in priority order) whose destination covers an
/// address decides; `lookup local` rules do not (their table holds only this
/// namespace's own addresses, which go out on loopback), nor do marked rules (only the
/// sidecar's own sockets carry the mark), nor service rules (they decide one protocol
/// and port only: [`service_verdicts`]); no rule means denied.
pub fn allowed_ranges(rules: &[RuleSpec]) -> AllowedRanges {
    let mut ordered: Vec<&RuleSpec> = rules.iter().filter(|r| r.mark == 0 && r.verdict != Verdict::Local && r.service.is_none()).collect();
    // (An `Unlisted` rule decides "not allowed": its table only leads to the drop link.)
    ordered.sort_by_key(|r| r.priority);
    let family = |v4: bool| -> Vec<(u128, u128)> {
        // Decided ranges: start -> (end inclusive, allowed).
        let mut decided: BTreeMap<u128, (u128, bool)> = BTreeMap::new();
        for rule in ordered.iter().filter(|r| r.dst.is_ipv4() == v4) {
            let (start, end) = rule.dst.bounds();
            let mut gaps = Vec::new();
            let mut cursor = Some(start);
            let before = decided.range(..start).next_back().map(|(a, (b, _))| (*a, *b));
            let overlapping = before.into_iter().chain(decided.range(start..=end).map(|(a, (b, _))| (*a, *b)));
            for (a, b) in overlapping {
                let Some(c) = cursor else { break };
                if b < c {
                    continue;
                }
                if a > c {
                    gaps.push((c, a - 1));
                }
                cursor = b.checked_add(1).filter(|next| *next <= end);
            }
            if let Some(c) = cursor {
                if c <= end {
                    gaps.push((c, end));
                }
            }
            for (a, b) in gaps {
                decided.insert(a, (b, rule.verdict == Verdict::Allow));
            }
        }
        let mut allowed: Vec<(u128, u128)> = Vec::new();
        for (a, (b, allow)) in decided {
            if !allow {
                continue;
            }
            match allowed.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(a) => last.1 = b,
                _ => allowed.push((a, b)),
            }
        }
        allowed
    };
    AllowedRanges {
        v4: family(true).into_iter().map(|(a, b)| (a as u32, if b >= u128::from(u32::MAX) { None } else { Some(b as u32 + 1) })).collect(),
        v6: family(false).into_iter().map(|(a, b)| (a, b.checked_add(1))).collect(),
    }
}

/// What the rules decide for one service of one address, where a service rule decides
/// it: the netfilter backstop's `services` chain holds one of these per entry, looked at
/// before the allowed ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceVerdict {
    pub address: IpAddr,
    pub service: Service,
    /// Accepted (`lookup main`), else dropped (`prohibit`).
    pub allow: bool,
}

/// For each (address, service) of a service rule in `rules`, what locally sent, unmarked
/// packets of that protocol and port to that address meet first (in priority order,
/// `lookup local` and marked rules passed over, as in [`allowed_ranges`]): where that is
/// a service rule, its verdict; where a CIDR rule comes first (a guard rule before the
/// service band), nothing, since the allowed ranges decide it the same way. In the order
/// of the rules. Service rules are host rules (/32, /128): [`Policy`](super::Policy) makes no others.
pub fn service_verdicts(rules: &[RuleSpec]) -> Vec<ServiceVerdict> {
    let mut ordered: Vec<&RuleSpec> = rules.iter().filter(|r| r.mark == 0 && r.verdict != Verdict::Local).collect();
    ordered.sort_by_key(|r| r.priority);
    let mut out: Vec<ServiceVerdict> = Vec::new();
    for rule in &ordered {
        let Some(service) = rule.service else { continue };
        let address = rule.dst.addr();
        if out.iter().any(|known| known.address == address && known.service == service) {
            continue;
        }
        let host = Cidr::host(address);
        let first = ordered.iter().find(|r| r.dst.contains(&host) && r.service.is_none_or(|s| s == service));
        if let Some(first) = first.filter(|first| first.service.is_some()) {
            out.push(ServiceVerdict { address, service, allow: first.verdict == Verdict::Allow });
        }
    }
    out
}

/// The directed broadcast address of `address/prefix`, where the subnet has one.
pub fn subnet_broadcast(address: Ipv4Addr, prefix: u8) -> Option<Ipv4Addr> {
    if prefix >= 31 || address.is_loopback() {
        return None;
    }
    Some(Ipv4Addr::from(u32::from(address) | (u32::MAX >> prefix)))
}

/// One policy rule as the kernel holds it: `to DST lookup main`, `to DST prohibit` or
/// `to DST lookup local`, with `fwmark MARK` when `mark` is not 0, `iif lo` (sent from
/// this namespace) when `local_only`, and `ipproto P [dport N]` for a `service`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub struct RuleSpec {
    pub dst: Cidr,
    pub verdict: Verdict,
    pub priority: u32,
    pub mark: u32,
    pub local_only: bool,
    /// The one protocol (and destination port) the rule matches; `None`: every one.
    pub service: Option<Service>,
}

/// The order rules are compared in (and listed): family, priority, destination.
pub fn sort_rules(rules: &mut [RuleSpec]) {
    rules.sort_by_key(|r| (!r.dst.is_ipv4(), r.priority, r.dst, r.service, r.verdict, r.mark, r.local_only));
}

impl RuleSpec {
    /// `to CIDR prohibit` at the CIDR's longest-prefix priority.
    pub fn prohibit(cidr: &Cidr) -> RuleSpec {
        RuleSpec { dst: *cidr, verdict: Verdict::Deny, priority: RuleSpec::priority_for(cidr), mark: 0, local_only: false, service: None }
    }

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
            Verdict::Local => "lookup local",
            Verdict::Unlisted => "lookup unlisted",
        };
        write!(f, "{}: ", self.priority)?;
        if self.local_only {
            write!(f, "iif lo ")?;
        }
        if self.mark != 0 {
            write!(f, "fwmark {:#x} ", self.mark)?;
        }
        write!(f, "to {} ", self.dst)?;
        if let Some(service) = self.service {
            match (service.protocol(), service.port()) {
                (Service::TCP, Some(port)) => write!(f, "ipproto tcp dport {port} ")?,
                (Service::UDP, Some(port)) => write!(f, "ipproto udp dport {port} ")?,
                (protocol, Some(port)) => write!(f, "ipproto {protocol} dport {port} ")?,
                (protocol, None) => write!(f, "ipproto {protocol} ")?,
            }
        }
        write!(f, "{action}")
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
    use crate::policy::tests::{c, ip, service};
    use crate::policy::Policy;

    #[test]
    fn guard_rules_stop_broadcast_and_multicast_before_the_local_table() {
        let text: Vec<String> = guard_rules(&[Ipv4Addr::new(10, 213, 5, 255)]).iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            [
                "100: iif lo to 10.213.5.255/32 prohibit",
                "100: iif lo to 224.0.0.0/4 prohibit",
                "100: iif lo to 255.255.255.255/32 prohibit",
                "200: to 0.0.0.0/0 lookup local",
                "100: iif lo to ff00::/8 prohibit",
                "200: to ::/0 lookup local",
            ]
        );
        const { assert!(GUARD_PRIORITY < LOCAL_PRIORITY && LOCAL_PRIORITY < UPSTREAM_PRIORITY) };
        assert_eq!(subnet_broadcast(Ipv4Addr::new(10, 213, 5, 7), 24), Some(Ipv4Addr::new(10, 213, 5, 255)));
        assert_eq!(subnet_broadcast(Ipv4Addr::new(10, 213, 5, 7), 31), None);
        assert_eq!(subnet_broadcast(Ipv4Addr::new(127, 0, 0, 1), 8), None);
    }

    #[test]
    fn allowed_ranges_mirror_the_rules() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        p.allow(c("10.1.2.3"));
        p.allow(c("fd00::/64"));
        let mut rules = p.rules();
        rules.extend(guard_rules(&[Ipv4Addr::new(10, 255, 255, 255)]));
        rules.push(RuleSpec {
            dst: c("10.9.9.9"),
            verdict: Verdict::Allow,
            priority: UPSTREAM_PRIORITY,
            mark: DNS_MARK,
            local_only: false,
            service: None,
        });
        let ranges = allowed_ranges(&rules);
        let v4 = |a: &str| u32::from(a.parse::<Ipv4Addr>().unwrap());
        assert_eq!(
            ranges.v4,
            vec![
                (v4("10.0.0.0"), Some(v4("10.1.0.0"))),
                (v4("10.1.2.3"), Some(v4("10.1.2.4"))),
                (v4("10.2.0.0"), Some(v4("10.255.255.255"))),
            ],
            "the deny carves, the host is back in, the broadcast address is out, the marked rule adds nothing"
        );
        let fd00 = u128::from("fd00::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ranges.v6, vec![(fd00, Some(fd00 + (1u128 << 64)))]);
        let mut everything = Policy::new();
        everything.allow(c("0.0.0.0/0"));
        everything.allow(c("::/0"));
        let ranges = allowed_ranges(&everything.rules());
        assert_eq!(ranges.v4, vec![(0, None)]);
        assert_eq!(ranges.v6, vec![(0, None)]);
        assert_eq!(allowed_ranges(&Policy::new().rules()), AllowedRanges::default());
    }

    #[test]
    fn a_rule_before_the_service_band_decides_the_service_in_the_backstop_too() {
        let mut p = Policy::new();
        p.allow_service(ip("255.255.255.255"), service("udp/67"));
        p.allow_service(ip("10.213.5.255"), service("udp/9"));
        p.allow_service(ip("10.213.5.7"), service("udp/9"));
        let mut rules = p.rules();
        rules.extend(guard_rules(&[Ipv4Addr::new(10, 213, 5, 255)]));
        let verdicts: Vec<String> = service_verdicts(&rules).iter().map(|v| format!("{} {} {}", v.address, v.service, v.allow)).collect();
        assert_eq!(verdicts, ["10.213.5.7 udp/9 true"], "broadcast stays behind the guard rules");
        assert_eq!(allowed_ranges(&rules), AllowedRanges::default());
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

    #[test]
    fn unlisted_destinations_go_to_their_table_and_stated_denies_stay_prohibited() {
        let mut p = Policy::new();
        p.allow(Cidr::parse("10.0.0.0/8").unwrap());
        p.deny(Cidr::parse("10.9.0.0/16").unwrap());
        p.deny(Cidr::parse("192.0.2.7").unwrap()); // no allow around it: pruned from the rules
        let rules = p.rules();
        let unlisted = unlisted_rules(&rules, &p.stated_denies());
        let text: Vec<String> = unlisted.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            ["10000: to 192.0.2.7/32 prohibit", "19990: to 0.0.0.0/0 lookup unlisted", "19990: to ::/0 lookup unlisted"],
            "the carved deny is in the rules already; the pruned one comes back"
        );
        let mut all = rules.clone();
        all.extend(unlisted);
        assert_eq!(allowed_ranges(&all), allowed_ranges(&rules), "what is allowed does not change");
        assert!(all.iter().any(|r| r.priority == CATCH_ALL_PRIORITY && r.verdict == Verdict::Deny), "the prohibit catch-all stays after");
    }
}
