//! The addresses answers to allowed names open: each with the names that
//! resolved to it and its time (the answer's TTL held between
//! [`MIN_ROUTE_SECONDS`] and [`MAX_ROUTE_SECONDS`], kept while a connection
//! uses it), at most [`MAX_LEARNED`]; and why an answered address stays
//! closed ([`NotOpened`]: never a remote host, a CIDR deny, internal while
//! private answers are refused). An address a name may no longer open is
//! forgotten at the change that closes it.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use lazaret_protocol::sidecar::{AnswerRefusal, PrivateAnswers};

use super::State;
use crate::addresses::{classify, Class};
use crate::policy::Cidr;

/// Shortest time an answered address stays reachable, whatever the TTL said: a
/// connection made right after the answer must not lose its route at once.
pub const MIN_ROUTE_SECONDS: u32 = 60;
/// Longest time an answered address stays reachable without a new answer.
pub const MAX_ROUTE_SECONDS: u32 = 86_400;
/// How long an address past its time is kept once more while a connection uses it.
const IN_USE_GRACE: Duration = Duration::from_secs(60);
/// Most answered addresses held at once (each is a kernel rule); past it, the ones
/// closest to expiry go first.
pub const MAX_LEARNED: usize = 4096;

/// An address reachable because an allowed name resolved to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    pub names: BTreeSet<String>,
    pub expires: Instant,
}

/// Why an answered address was not opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotOpened {
    /// Never a remote host (what it is).
    Special(&'static str),
    /// Internal (what it is), no CIDR allow covers it, private answers are refused.
    Private(&'static str),
    /// On one of the host's own networks, no CIDR allow covers it, private answers are refused.
    HostNetwork(Cidr),
    /// An explicit CIDR deny covers it.
    Denied,
    /// One of the host's own addresses (or an upstream resolver).
    Host,
}

impl NotOpened {
    /// The reason code in events and audit records.
    /// The reason as the control protocol's events carry it.
    pub fn reason(&self) -> AnswerRefusal {
        match self {
            NotOpened::Special(_) => AnswerRefusal::SpecialAddress,
            NotOpened::Private(_) => AnswerRefusal::PrivateAddress,
            NotOpened::HostNetwork(_) => AnswerRefusal::HostNetwork,
            NotOpened::Denied => AnswerRefusal::DeniedAddress,
            NotOpened::Host => AnswerRefusal::HostAddress,
        }
    }

    /// `address` and why it stays closed, for a message.
    pub fn describe(&self, address: IpAddr) -> String {
        match self {
            NotOpened::Special(what) => format!("special address {address} ({what}, never opened by a name)"),
            NotOpened::Private(what) => format!("private address {address} ({what})"),
            NotOpened::HostNetwork(network) => format!("address {address} on the host's network {network}"),
            NotOpened::Denied => format!("address {address}, which a CIDR deny covers"),
            NotOpened::Host => format!("address {address}, one of the host's own"),
        }
    }
}

/// What an answer did: the addresses that became reachable, each with the seconds
/// it stays so (what the client is told), and those that did not, with why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learning {
    pub told: Vec<(IpAddr, u32)>,
    pub refused: Vec<(IpAddr, NotOpened)>,
}

impl State {
    /// Drops learned names that the name policy no longer allows, addresses left
    /// without a name, and addresses a name may no longer open (a deny, the switch
    /// turned off, a network the host gained).
    pub(super) fn forget_disallowed(&mut self) {
        let names = &self.names;
        for learned in self.learned.values_mut() {
            learned.names.retain(|name| names.check_name(name).is_ok());
        }
        self.learned.retain(|_, learned| !learned.names.is_empty());
        let closed: Vec<IpAddr> = self.learned.keys().copied().filter(|address| self.not_opened(*address).is_some()).collect();
        for address in closed {
            self.learned.remove(&address);
        }
    }

    /// Why a name's answer may not open `address` (canonical), if it may not: never
    /// a remote host; an explicit CIDR deny; internal (private, CGNAT, ULA, other
    /// special-purpose ranges, the host's networks) while private answers are
    /// refused and no CIDR allow covers it.
    pub fn not_opened(&self, address: IpAddr) -> Option<NotOpened> {
        let class = classify(address, &self.host_networks);
        if let Class::Never(what) = class {
            return Some(NotOpened::Special(what));
        }
        if self.cidrs.denies_explicitly(address) {
            return Some(NotOpened::Denied);
        }
        if self.private_answers == PrivateAnswers::Allow || self.cidrs.allows(address) {
            return None;
        }
        match class {
            Class::Internal(what) => Some(NotOpened::Private(what)),
            Class::HostNetwork(network) => Some(NotOpened::HostNetwork(network)),
            Class::Remote | Class::Never(_) => None,
        }
    }

    /// Records that `name` resolved to `answers` at `now`: the addresses that became
    /// reachable (told to the client), and those left out (see [`State::not_opened`]).
    pub fn learn(&mut self, name: &str, answers: &[(IpAddr, u32)], now: Instant) -> Learning {
        let mut told = Vec::new();
        let mut refused = Vec::new();
        for (address, ttl) in answers {
            // `::ffff:a.b.c.d` is routed as IPv4: learn it as such.
            let address = &address.to_canonical();
            if let Some(why) = self.not_opened(*address) {
                if !refused.iter().any(|(known, _)| known == address) {
                    refused.push((*address, why));
                }
                continue;
            }
            let lifetime = Duration::from_secs(u64::from((*ttl).clamp(MIN_ROUTE_SECONDS, MAX_ROUTE_SECONDS)));
            let learned = self.learned.entry(*address).or_insert_with(|| Learned { names: BTreeSet::new(), expires: now });
            learned.names.insert(name.to_owned());
            learned.expires = learned.expires.max(now + lifetime);
            told.push((*address, learned.expires.saturating_duration_since(now).as_secs() as u32));
        }
        while self.learned.len() > MAX_LEARNED {
            let oldest = self.learned.iter().filter(|(address, _)| !told.iter().any(|(t, _)| t == *address)).min_by_key(|(_, l)| l.expires);
            let Some(oldest) = oldest.map(|(address, _)| *address) else { break };
            self.learned.remove(&oldest);
        }
        Learning { told, refused }
    }

    /// Forgets addresses whose time ran out, unless a connection still uses them.
    /// Returns whether anything was forgotten.
    pub fn expire(&mut self, now: Instant, in_use: &BTreeSet<IpAddr>) -> bool {
        let before = self.learned.len();
        self.learned.retain(|address, learned| learned.expires > now || in_use.contains(address));
        for (address, learned) in self.learned.iter_mut() {
            if learned.expires <= now && in_use.contains(address) {
                learned.expires = now + IN_USE_GRACE;
            }
        }
        self.learned.len() != before
    }

    pub fn next_expiry(&self) -> Option<Instant> {
        self.learned.values().map(|learned| learned.expires).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforcer::tests::{ip, state_with_name};
    use lazaret_dns::NamePattern;

    #[test]
    fn answers_become_host_rules_for_their_ttl_with_a_floor() {
        let mut state = state_with_name("*.allowed.test");
        let now = Instant::now();
        let told = state.learn("www.allowed.test", &[(ip("10.213.0.11"), 5), (ip("10.213.0.12"), 600)], now).told;
        assert_eq!(told, vec![(ip("10.213.0.11"), MIN_ROUTE_SECONDS), (ip("10.213.0.12"), 600)]);
        let rules: Vec<String> = state.rules(&[], &[]).iter().map(|r| r.to_string()).collect();
        assert!(rules.contains(&"10000: to 10.213.0.11/32 lookup main".to_owned()), "{rules:?}");
        // Still in use: kept past its time; then forgotten.
        let later = now + Duration::from_secs(u64::from(MIN_ROUTE_SECONDS) + 1);
        assert!(!state.expire(later, &BTreeSet::from([ip("10.213.0.11")])));
        assert_eq!(state.learned[&ip("10.213.0.11")].expires, later + IN_USE_GRACE, "kept a grace period, not re-checked every second");
        assert!(state.expire(later + IN_USE_GRACE, &BTreeSet::new()));
        assert_eq!(state.learned.keys().copied().collect::<Vec<_>>(), vec![ip("10.213.0.12")]);
        assert_eq!(state.next_expiry(), Some(now + Duration::from_secs(600)));
    }

    #[test]
    fn explicit_denies_and_special_addresses_are_never_learned() {
        let mut state = state_with_name("allowed.test");
        state.cidrs.allow(Cidr::parse("10.0.0.0/8").unwrap());
        state.cidrs.deny(Cidr::parse("10.9.0.0/16").unwrap());
        let answers = [
            (ip("10.9.0.1"), 60),
            (ip("127.0.0.1"), 60),
            (ip("169.254.169.254"), 60),
            (ip("224.0.0.1"), 60),
            (ip("255.255.255.255"), 60),
            (ip("0.0.0.0"), 60),
            (ip("fe80::1"), 60),
            (ip("::ffff:169.254.169.254"), 60),
            (ip("ff02::1"), 60),
            (ip("10.213.0.11"), 60),
        ];
        let learning = state.learn("allowed.test", &answers, Instant::now());
        assert_eq!(learning.told, vec![(ip("10.213.0.11"), 60)]);
        let reasons: Vec<AnswerRefusal> = learning.refused.iter().map(|(_, why)| why.reason()).collect();
        assert_eq!(reasons[0], AnswerRefusal::DeniedAddress);
        assert!(reasons[1..].iter().all(|reason| *reason == AnswerRefusal::SpecialAddress), "{reasons:?}");
        assert_eq!(learning.refused.len(), answers.len() - 2, "each left-out address is reported once (169.254.169.254 came twice)");
    }

    #[test]
    fn this_network_broadcast_and_ipv4_compatible_addresses_are_never_learned_even_when_allowed() {
        let mut state = state_with_name("allowed.test");
        state.cidrs.allow(Cidr::parse("0.0.0.0/0").unwrap());
        state.cidrs.allow(Cidr::parse("::/0").unwrap());
        let answers: Vec<(IpAddr, u32)> =
            ["0.0.0.0", "0.1.2.3", "255.255.255.255", "::10.213.0.11", "::8.8.8.8", "::ffff:0.0.0.1", "64:ff9b::7f00:1"]
                .iter()
                .map(|text| (ip(text), 60))
                .collect();
        let learning = state.learn("allowed.test", &answers, Instant::now());
        assert!(learning.told.is_empty(), "{:?}", learning.told);
        assert!(learning.refused.iter().all(|(_, why)| matches!(why, NotOpened::Special(_))), "{:?}", learning.refused);
        assert!(state.learned.is_empty());
    }

    #[test]
    fn private_answers_open_only_where_a_cidr_allow_covers_them_unless_allowed() {
        let mut state = state_with_name("*.allowed.test");
        state.private_answers = PrivateAnswers::Refuse;
        state.cidrs.allow(Cidr::parse("10.213.0.0/24").unwrap());
        state.cidrs.deny(Cidr::parse("10.213.0.128/25").unwrap());
        state.host_networks = vec![Cidr::parse("93.184.216.0/24").unwrap()];
        let now = Instant::now();
        let answers: Vec<(IpAddr, u32)> =
            ["10.213.0.11", "10.213.0.200", "10.9.0.1", "192.168.1.1", "100.64.0.1", "fd00::1", "93.184.216.34", "198.18.0.1", "1.1.1.1"]
                .iter()
                .map(|text| (ip(text), 60))
                .collect();
        let learning = state.learn("a.allowed.test", &answers, now);
        assert_eq!(learning.told, vec![(ip("10.213.0.11"), 60), (ip("1.1.1.1"), 60)], "covered, and remote");
        let refused: Vec<String> =
            learning.refused.iter().map(|(address, why)| format!("{:?} {}", why.reason(), why.describe(*address))).collect();
        assert_eq!(
            refused,
            [
                "DeniedAddress address 10.213.0.200, which a CIDR deny covers",
                "PrivateAddress private address 10.9.0.1 (private network 10.0.0.0/8)",
                "PrivateAddress private address 192.168.1.1 (private network 192.168.0.0/16)",
                "PrivateAddress private address 100.64.0.1 (shared (CGNAT) network 100.64.0.0/10)",
                "PrivateAddress private address fd00::1 (unique local network fc00::/7)",
                "HostNetwork address 93.184.216.34 on the host's network 93.184.216.0/24",
                "PrivateAddress private address 198.18.0.1 (benchmarking network 198.18.0.0/15)",
            ]
        );
        // The switch opens them (not the denied one); turning it off again forgets them.
        state.private_answers = PrivateAnswers::Allow;
        let learning = state.learn("a.allowed.test", &answers, now);
        assert_eq!(learning.told.len(), 8, "{learning:?}");
        assert_eq!(learning.refused.iter().map(|(_, why)| why.reason()).collect::<Vec<_>>(), [AnswerRefusal::DeniedAddress]);
        state.private_answers = PrivateAnswers::Refuse;
        state.forget_disallowed();
        assert_eq!(state.learned.keys().copied().collect::<Vec<_>>(), [ip("1.1.1.1"), ip("10.213.0.11")]);
        // A network the host gains is forgotten too.
        state.host_networks.push(Cidr::parse("1.1.1.0/24").unwrap());
        state.forget_disallowed();
        assert_eq!(state.learned.keys().copied().collect::<Vec<_>>(), [ip("10.213.0.11")]);
    }

    #[test]
    fn the_switch_is_allow_or_refuse() {
        assert_eq!(PrivateAnswers::parse("allow"), Some(PrivateAnswers::Allow));
        assert_eq!(PrivateAnswers::parse("refuse"), Some(PrivateAnswers::Refuse));
        assert_eq!(PrivateAnswers::parse("yes"), None);
        assert_eq!(PrivateAnswers::default(), PrivateAnswers::Refuse);
    }

    #[test]
    fn a_deny_without_an_allow_around_it_still_keeps_answers_out() {
        let mut state = state_with_name("*.allowed.test");
        state.cidrs.deny(Cidr::parse("10.0.0.0/8").unwrap());
        let now = Instant::now();
        assert!(state.learn("a.allowed.test", &[(ip("10.1.2.3"), 60)], now).told.is_empty());
        state.cidrs.allow(Cidr::parse("10.1.0.0/16").unwrap());
        assert_eq!(state.learn("a.allowed.test", &[(ip("10.1.2.3"), 60), (ip("10.2.0.1"), 60)], now).told, vec![(ip("10.1.2.3"), 60)]);
    }

    #[test]
    fn mapped_answers_are_learned_as_ipv4_and_the_table_is_capped() {
        let mut state = state_with_name("*.allowed.test");
        let now = Instant::now();
        assert_eq!(state.learn("a.allowed.test", &[(ip("::ffff:10.213.0.11"), 60)], now).told, vec![(ip("10.213.0.11"), 60)]);
        for n in 0..(MAX_LEARNED as u32 + 10) {
            let address = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            state.learn("b.allowed.test", &[(address, 60 + n)], now);
        }
        assert_eq!(state.learned.len(), MAX_LEARNED);
        assert!(
            state.learned.contains_key(&IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + MAX_LEARNED as u32 + 9))),
            "the newest stays"
        );
    }

    #[test]
    fn denying_a_name_forgets_its_addresses() {
        let mut state = state_with_name("*.allowed.test");
        state.names.allow(NamePattern::parse("other.test").unwrap());
        let now = Instant::now();
        state.learn("a.allowed.test", &[(ip("10.213.0.11"), 60)], now);
        state.learn("other.test", &[(ip("10.213.0.11"), 60), (ip("10.213.0.12"), 60)], now);
        state.names.deny(NamePattern::parse("other.test").unwrap());
        state.forget_disallowed();
        assert_eq!(state.learned.keys().copied().collect::<Vec<_>>(), vec![ip("10.213.0.11")]);
        assert_eq!(state.learned[&ip("10.213.0.11")].names, BTreeSet::from(["a.allowed.test".to_owned()]));
    }
}
