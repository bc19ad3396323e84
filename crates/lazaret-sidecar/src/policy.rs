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

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use lazaret_protocol::sidecar::Service;

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
/// Priority of the service rules (one protocol and port of one address, see the module's
/// documentation): after [`UPSTREAM_PRIORITY`], before every CIDR rule ([`LPM_BASE`]).
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
/// of the rules. Service rules are host rules (/32, /128): [`Policy`] makes no others.
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

    /// The first and last address of the network, as numbers of its family.
    pub fn bounds(&self) -> (u128, u128) {
        let (value, bits) = match self.addr {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
            IpAddr::V6(v6) => (u128::from(v6), 128u32),
        };
        let host_bits = bits - u32::from(self.len);
        let span = if host_bits == 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
        (value, value | span)
    }

    /// The network holding exactly `addr`.
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, len: max_len(&addr) }
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

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
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

    fn service(text: &str) -> Service {
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
