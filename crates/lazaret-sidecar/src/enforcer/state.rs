//! The egress policy's state: the CIDR and service entries ([`Policy`]), the
//! name patterns, the learned addresses, the host's networks, the hold, and
//! the timers of timed entries (one per entry's text; an entry whose time
//! runs out is removed as a revoke removes it). From it come the kernel rules
//! ([`State::rules`]: a protected address stays denied unless allowed
//! exactly) and the policy the control protocol reports. Pure: no kernel,
//! no clock but the `now` it is given.

pub(super) mod learned;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use lazaret_dns::NamePolicy;
use lazaret_protocol::sidecar::PrivateAnswers;
use lazaret_protocol::{EntryVerdict, ExpiringEntry, LearnedAddress, NetworkPolicy};

use crate::control::Entry;
use crate::policy::{sort_rules, Cidr, Policy, RuleSpec, Service, Verdict, DNS_MARK, UPSTREAM_PRIORITY};
use learned::Learned;

/// A timed entry: at `expires` it is removed, as a revoke removes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    pub entry: Entry,
    pub verdict: EntryVerdict,
    pub expires: Instant,
}

/// Timed entries whose time ran out (their normalised text), as the
/// `entriesExpired` event reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl Expired {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// The error of a revoke naming `entry`, which is neither an allow nor a deny entry.
pub fn not_an_entry(entry: &Entry) -> String {
    format!("`{entry}` is neither an allow nor a deny entry (nothing was revoked)")
}

/// Everything the kernel rules are made from, and the timers of timed entries.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// The CIDR entries and the service entries.
    pub cidrs: Policy,
    pub names: NamePolicy,
    pub learned: BTreeMap<IpAddr, Learned>,
    pub private_answers: PrivateAnswers,
    /// The prefixes of the host's interfaces (`--protect-net`, refreshed by the
    /// coordinator): internal, like private networks.
    pub host_networks: Vec<Cidr>,
    /// How long a question for a name on no allow entry waits for one (zero:
    /// refused at once). A `set` leaves it as it is.
    pub hold: Duration,
    /// Timed entries by their normalised text (`Entry`'s `Display`): one
    /// entry is an allow or a deny, never both, so one timer per text.
    pub timers: BTreeMap<String, Timer>,
}

impl State {
    /// Allows or denies `entries`; with `life`, each ends at `now + life` (a
    /// new timer replaces the old), without it each is permanent (its timer
    /// goes). A deny replaces the allow of the same entry, and its timer with
    /// it (and the other way round).
    pub fn add_entries(&mut self, entries: &[Entry], verdict: EntryVerdict, life: Option<Duration>, now: Instant) {
        for entry in entries {
            match (entry, verdict) {
                (Entry::Cidr(c), EntryVerdict::Allow) => self.cidrs.allow(*c),
                (Entry::Cidr(c), EntryVerdict::Deny) => self.cidrs.deny(*c),
                (Entry::Service(c, service), EntryVerdict::Allow) => self.cidrs.allow_service(c.addr(), *service),
                (Entry::Service(c, service), EntryVerdict::Deny) => self.cidrs.deny_service(c.addr(), *service),
                (Entry::Name(n), EntryVerdict::Allow) => self.names.allow(n.clone()),
                (Entry::Name(n), EntryVerdict::Deny) => self.names.deny(n.clone()),
            }
            let text = entry.to_string();
            match life {
                Some(life) => {
                    self.timers.insert(text, Timer { entry: entry.clone(), verdict, expires: now + life });
                }
                None => {
                    self.timers.remove(&text);
                }
            }
        }
    }

    /// Whether `entry` is exactly an entry of this verdict.
    pub fn holds(&self, entry: &Entry, verdict: EntryVerdict) -> bool {
        match (entry, verdict) {
            (Entry::Cidr(c), EntryVerdict::Allow) => self.cidrs.stated(c) == Some(Verdict::Allow),
            (Entry::Cidr(c), EntryVerdict::Deny) => self.cidrs.stated(c) == Some(Verdict::Deny),
            (Entry::Service(c, service), EntryVerdict::Allow) => self.cidrs.stated_service(c.addr(), *service) == Some(Verdict::Allow),
            (Entry::Service(c, service), EntryVerdict::Deny) => self.cidrs.stated_service(c.addr(), *service) == Some(Verdict::Deny),
            (Entry::Name(n), EntryVerdict::Allow) => self.names.has_allow(n),
            (Entry::Name(n), EntryVerdict::Deny) => self.names.has_deny(n),
        }
    }

    /// The first of `entries` that is neither an allow nor a deny entry exactly.
    pub fn unknown_entry<'a>(&self, entries: &'a [Entry]) -> Option<&'a Entry> {
        entries.iter().find(|entry| !self.holds(entry, EntryVerdict::Allow) && !self.holds(entry, EntryVerdict::Deny))
    }

    /// Removes `entries` (allow or deny) and their timers; those that are no
    /// entry are passed over (see [`State::unknown_entry`] for the check).
    pub fn remove_entries(&mut self, entries: &[Entry]) {
        for entry in entries {
            match entry {
                Entry::Cidr(c) => {
                    self.cidrs.remove(*c);
                }
                Entry::Service(c, service) => {
                    self.cidrs.remove_service(c.addr(), *service);
                }
                Entry::Name(n) => {
                    self.names.remove(n);
                }
            }
            self.timers.remove(&entry.to_string());
        }
    }

    /// Removes the timed entries whose time ran out by `now` (as a revoke
    /// removes them) and says which.
    pub fn expire_entries(&mut self, now: Instant) -> Expired {
        let due: Vec<String> = self.timers.iter().filter(|(_, timer)| timer.expires <= now).map(|(text, _)| text.clone()).collect();
        let mut expired = Expired::default();
        for text in due {
            let Some(timer) = self.timers.remove(&text) else { continue };
            if !self.holds(&timer.entry, timer.verdict) {
                continue;
            }
            self.remove_entries(std::slice::from_ref(&timer.entry));
            match timer.verdict {
                EntryVerdict::Allow => expired.allow.push(text),
                EntryVerdict::Deny => expired.deny.push(text),
            }
        }
        expired
    }

    /// When the next timed entry ends.
    pub fn next_entry_expiry(&self) -> Option<Instant> {
        self.timers.values().map(|timer| timer.expires).min()
    }

    /// What every change ends with: learned addresses no longer open are
    /// forgotten, and timers of entries that are gone (or changed verdict) dropped.
    pub(super) fn settle(&mut self) {
        self.forget_disallowed();
        let stale: Vec<String> =
            self.timers.iter().filter(|(_, timer)| !self.holds(&timer.entry, timer.verdict)).map(|(text, _)| text.clone()).collect();
        for text in stale {
            self.timers.remove(&text);
        }
    }

    /// The policy in force, as the control protocol reports it: CIDRs, then
    /// services (as their entries' text, `10.9.0.7/32 tcp/8081`), then names.
    pub fn policy(&self, upstreams: &[SocketAddr], rules: usize, now: Instant) -> NetworkPolicy {
        let services = |verdict: Verdict| -> Vec<String> {
            self.cidrs
                .listed_services(verdict)
                .into_iter()
                .map(|(address, service)| Entry::Service(Cidr::host(address), service).to_string())
                .collect()
        };
        let mut allow: Vec<String> = self.cidrs.listed(Verdict::Allow).iter().map(|c| c.to_string()).collect();
        allow.extend(services(Verdict::Allow));
        allow.extend(self.names.allowed().map(|n| n.to_string()));
        // Every deny as stated, also one the rules prune (no allow around it):
        // it still keeps a name's answers out and the address from being
        // offered, and a restarted sidecar gets it back from this list.
        let mut deny: Vec<String> = self.cidrs.stated_denies().iter().map(|c| c.to_string()).collect();
        deny.extend(services(Verdict::Deny));
        deny.extend(self.names.denied().map(|n| n.to_string()));
        let learned = self
            .learned
            .iter()
            .map(|(address, learned)| LearnedAddress {
                address: address.to_string(),
                names: learned.names.iter().cloned().collect(),
                expires_in_seconds: learned.expires.saturating_duration_since(now).as_secs(),
            })
            .collect();
        let expiring = self
            .timers
            .iter()
            .map(|(text, timer)| ExpiringEntry {
                entry: text.clone(),
                verdict: timer.verdict,
                expires_in_ms: millis(timer.expires.saturating_duration_since(now)),
            })
            .collect();
        NetworkPolicy {
            allow,
            deny,
            learned,
            upstreams: upstreams.iter().map(|u| u.to_string()).collect(),
            rules: rules as u64,
            private_answers: self.private_answers,
            hold_ms: millis(self.hold),
            expiring,
            // Filled in by the control side, which holds the endpoints.
            credentials: Vec::new(),
        }
    }

    /// The rules this state needs, upstream rules included (guard rules not).
    /// A `protected` address or network gets a deny rule unless the CIDR
    /// entries allow exactly that address or network; a service allow of a
    /// protected address gets no rule at all (nor under an explicit CIDR
    /// deny: [`Policy::rules`]).
    pub fn rules(&self, upstreams: &[SocketAddr], protected: &[Cidr]) -> Vec<RuleSpec> {
        let mut policy = self.cidrs.clone();
        for address in self.learned.keys() {
            if !self.cidrs.denies_explicitly(*address) && !is_protected(protected, *address) {
                policy.allow(Cidr::host(*address));
            }
        }
        let mut rules = policy.rules();
        rules.retain(|rule| !(rule.service.is_some() && rule.verdict == Verdict::Allow && is_protected(protected, rule.dst.addr())));
        for cidr in protected {
            if !self.cidrs.allows_exactly(cidr) {
                let rule = RuleSpec::prohibit(cidr);
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        for upstream in upstreams {
            let rule = RuleSpec {
                dst: Cidr::host(upstream.ip()),
                verdict: Verdict::Allow,
                priority: UPSTREAM_PRIORITY,
                mark: DNS_MARK,
                local_only: false,
                service: None,
            };
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        sort_rules(&mut rules);
        rules
    }

    /// What [`Enforcer::offers`](super::Enforcer::offers) says, for these `protected` addresses.
    pub fn offers(&self, protected: &[Cidr], address: IpAddr, service: Option<Service>) -> bool {
        let address = address.to_canonical();
        service.is_none_or(|service| self.cidrs.stated_service(address, service).is_none())
            && !self.cidrs.denies_explicitly(address)
            && !self.cidrs.allows(address)
            && !self.learned.contains_key(&address)
            && !is_protected(protected, address)
    }
}

/// Whole milliseconds, at most `u64::MAX`.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether `address` lies in one of the `protected` addresses or networks.
pub(super) fn is_protected(protected: &[Cidr], address: IpAddr) -> bool {
    let host = Cidr::host(address.to_canonical());
    protected.iter().any(|cidr| cidr.contains(&host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforcer::tests::{ip, state_with_name};
    use std::collections::BTreeSet;

    #[test]
    fn host_addresses_stay_denied_under_wide_allows_until_allowed_exactly() {
        let mut state = state_with_name("allowed.test");
        state.cidrs.allow(Cidr::parse("0.0.0.0/0").unwrap());
        let host = ip("10.88.0.1");
        state.learn("allowed.test", &[(host, 60)], Instant::now());
        let text = |state: &State| state.rules(&[], &[Cidr::host(host)]).iter().map(|r| r.to_string()).collect::<Vec<_>>();
        assert_eq!(text(&state)[0], "10000: to 10.88.0.1/32 prohibit", "{:?}", text(&state));
        assert!(!text(&state).iter().any(|r| r.contains("10.88.0.1/32 lookup main")), "a name cannot open it either");
        state.cidrs.allow(Cidr::host(host));
        assert_eq!(text(&state)[0], "10000: to 10.88.0.1/32 lookup main");
    }

    /// Issue 33 finding 4: rootless podman's user-mode network (slirp4netns:
    /// 10.0.2.0/24 with its resolver at .3 and the namespace at .100) is
    /// protected as a whole; a name's answer inside it opens nothing, an
    /// allow of exactly that network opens it.
    #[test]
    fn a_protected_network_stays_denied_under_wide_allows_until_allowed_exactly() {
        let mut state = state_with_name("allowed.test");
        state.cidrs.allow(Cidr::parse("10.0.0.0/8").unwrap());
        let slirp = Cidr::parse("10.0.2.0/24").unwrap();
        let learning = state.learn("allowed.test", &[(ip("10.0.2.3"), 60)], Instant::now());
        assert!(learning.refused.is_empty() && !learning.told.is_empty(), "the state alone learns it: {learning:?}");
        let text = |state: &State| state.rules(&[], &[slirp]).iter().map(|r| r.to_string()).collect::<Vec<_>>();
        assert!(
            text(&state).contains(&"10000: to 10.0.2.0/24 prohibit".to_owned())
                || text(&state).iter().any(|r| r.ends_with("to 10.0.2.0/24 prohibit")),
            "{:?}",
            text(&state)
        );
        assert!(
            !text(&state).iter().any(|r| r.contains("10.0.2.3/32 lookup main")),
            "a name cannot open an address in it: {:?}",
            text(&state)
        );
        assert!(is_protected(&[slirp], ip("10.0.2.100")) && is_protected(&[slirp], ip("::ffff:10.0.2.3")));
        assert!(!is_protected(&[slirp], ip("10.0.3.1")));
        state.cidrs.allow(slirp);
        assert!(!text(&state).iter().any(|r| r.contains("prohibit") && r.contains("10.0.2.0/24")), "{:?}", text(&state));
    }

    /// What `Enforcer::change` does to the state, without the kernel.
    fn change(state: &mut State, edit: impl FnOnce(&mut State)) {
        edit(state);
        state.settle();
    }

    fn entries(texts: &[&str]) -> Vec<Entry> {
        texts.iter().map(|text| Entry::parse(text).unwrap()).collect()
    }

    fn rule_text(state: &State) -> Vec<String> {
        state.rules(&[], &[]).iter().map(|r| r.to_string()).collect()
    }

    fn timers(state: &State) -> Vec<(String, EntryVerdict, Instant)> {
        state.timers.iter().map(|(text, timer)| (text.clone(), timer.verdict, timer.expires)).collect()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn timed_entries_end_on_their_own_as_a_revoke_would() {
        let mut state = State { private_answers: PrivateAnswers::Allow, ..State::default() };
        let now = Instant::now();
        change(&mut state, |s| s.add_entries(&entries(&["Grant.test", "10.0.0.0/8"]), EntryVerdict::Allow, Some(60 * SECOND), now));
        change(&mut state, |s| s.add_entries(&entries(&["evil.test"]), EntryVerdict::Deny, Some(30 * SECOND), now));
        change(&mut state, |s| s.hold = 10 * SECOND);
        let told = state.learn("grant.test", &[(ip("93.184.216.34"), 3600)], now).told;
        assert_eq!(told.len(), 1);
        let policy = state.policy(&[], 5, now + 10 * SECOND);
        assert_eq!(policy.hold_ms, 10_000);
        assert_eq!(policy.allow, ["10.0.0.0/8", "grant.test"]);
        assert_eq!(policy.deny, ["evil.test"]);
        let expiring: Vec<(String, EntryVerdict, u64)> =
            policy.expiring.iter().map(|e| (e.entry.clone(), e.verdict, e.expires_in_ms)).collect();
        assert_eq!(
            expiring,
            [
                ("10.0.0.0/8".to_owned(), EntryVerdict::Allow, 50_000),
                ("evil.test".to_owned(), EntryVerdict::Deny, 20_000),
                ("grant.test".to_owned(), EntryVerdict::Allow, 50_000)
            ],
            "sorted by entry, with the time left"
        );
        assert_eq!(state.next_entry_expiry(), Some(now + 30 * SECOND));
        assert_eq!(state.expire_entries(now + 29 * SECOND), Expired::default(), "not yet");
        let mut expired = Expired::default();
        change(&mut state, |s| expired = s.expire_entries(now + 30 * SECOND));
        assert_eq!(expired, Expired { allow: vec![], deny: vec!["evil.test".into()] });
        assert!(!state.names.has_deny(&lazaret_dns::NamePattern::parse("evil.test").unwrap()));
        assert!(rule_text(&state).contains(&"10024: to 10.0.0.0/8 lookup main".to_owned()), "{:?}", rule_text(&state));
        assert!(rule_text(&state).contains(&"10000: to 93.184.216.34/32 lookup main".to_owned()), "{:?}", rule_text(&state));
        change(&mut state, |s| expired = s.expire_entries(now + 60 * SECOND));
        assert_eq!(expired, Expired { allow: vec!["10.0.0.0/8".into(), "grant.test".into()], deny: vec![] });
        assert!(state.learned.is_empty(), "the expired name's address is forgotten, its hour notwithstanding");
        assert_eq!(rule_text(&state), ["20000: to 0.0.0.0/0 prohibit", "20000: to ::/0 prohibit"]);
        assert!(state.timers.is_empty() && state.next_entry_expiry().is_none());
        assert_eq!(state.hold, 10 * SECOND, "the hold stays");
        assert!(state.policy(&[], 2, now).expiring.is_empty());
    }

    #[test]
    fn adding_again_makes_permanent_or_renews_and_a_deny_replaces_an_allow_timer() {
        let mut state = State::default();
        let now = Instant::now();
        let a = entries(&["a.test"]);
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Allow, Some(60 * SECOND), now));
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Allow, None, now));
        assert!(state.timers.is_empty(), "permanent now");
        assert!(state.holds(&a[0], EntryVerdict::Allow));
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Allow, Some(10 * SECOND), now));
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Allow, Some(20 * SECOND), now));
        assert_eq!(timers(&state), [("a.test".to_owned(), EntryVerdict::Allow, now + 20 * SECOND)], "the new timer replaces the old");
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Deny, None, now));
        assert!(state.timers.is_empty(), "a permanent deny replaces the timed allow");
        assert!(state.holds(&a[0], EntryVerdict::Deny) && !state.holds(&a[0], EntryVerdict::Allow));
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Allow, Some(5 * SECOND), now));
        change(&mut state, |s| s.add_entries(&a, EntryVerdict::Deny, Some(7 * SECOND), now));
        assert_eq!(timers(&state), [("a.test".to_owned(), EntryVerdict::Deny, now + 7 * SECOND)]);
        let mut expired = Expired::default();
        change(&mut state, |s| expired = s.expire_entries(now + 7 * SECOND));
        assert_eq!(expired.deny, ["a.test"]);
        assert_eq!(state.unknown_entry(&a), Some(&a[0]), "after the timed deny, nothing is left of the entry");
        // CIDRs alike: a deny of the same network replaces its allow and timer.
        let net = entries(&["10.1.0.0/16"]);
        change(&mut state, |s| s.add_entries(&net, EntryVerdict::Allow, Some(5 * SECOND), now));
        change(&mut state, |s| s.add_entries(&net, EntryVerdict::Deny, Some(9 * SECOND), now));
        assert_eq!(timers(&state), [("10.1.0.0/16".to_owned(), EntryVerdict::Deny, now + 9 * SECOND)]);
        change(&mut state, |s| s.cidrs.allow(Cidr::parse("10.1.0.0/16").unwrap()));
        assert!(state.timers.is_empty(), "a timer whose entry changed verdict another way goes too");
    }

    #[test]
    fn a_set_keeps_the_timers_of_the_entries_it_keeps() {
        let mut state = State::default();
        let now = Instant::now();
        change(&mut state, |s| s.add_entries(&entries(&["a.test", "b.test", "10.0.0.0/8"]), EntryVerdict::Allow, Some(60 * SECOND), now));
        change(&mut state, |s| s.add_entries(&entries(&["c.test", "10.1.0.0/16"]), EntryVerdict::Deny, Some(60 * SECOND), now));
        change(&mut state, |s| s.hold = 3 * SECOND);
        // What a `set` does (main.rs): replaces the entries, leaves the hold.
        let (mut cidrs, mut names) = (Policy::new(), NamePolicy::new());
        names.allow(lazaret_dns::NamePattern::parse("a.test").unwrap());
        names.deny(lazaret_dns::NamePattern::parse("b.test").unwrap());
        names.deny(lazaret_dns::NamePattern::parse("c.test").unwrap());
        cidrs.allow(Cidr::parse("10.1.0.0/16").unwrap());
        change(&mut state, |s| {
            s.cidrs = cidrs;
            s.names = names;
        });
        let kept: Vec<(String, EntryVerdict)> = state.timers.iter().map(|(text, timer)| (text.clone(), timer.verdict)).collect();
        assert_eq!(kept, [("a.test".to_owned(), EntryVerdict::Allow), ("c.test".to_owned(), EntryVerdict::Deny)]);
        assert_eq!(state.hold, 3 * SECOND);
    }

    #[test]
    fn a_revoke_needs_every_entry_exactly_and_closes_what_they_opened() {
        let mut state = State::default();
        let now = Instant::now();
        change(&mut state, |s| {
            s.add_entries(&entries(&["*.allowed.test", "other.test", "10.213.0.0/24"]), EntryVerdict::Allow, None, now);
            s.add_entries(&entries(&["bad.allowed.test", "10.213.0.128/25"]), EntryVerdict::Deny, None, now);
            s.add_entries(&entries(&["grant.test"]), EntryVerdict::Allow, Some(60 * SECOND), now);
        });
        state.learn("a.allowed.test", &[(ip("93.184.216.34"), 60), (ip("10.213.0.13"), 60)], now);
        state.learn("other.test", &[(ip("93.184.216.35"), 60), (ip("10.213.0.12"), 60)], now);
        assert_eq!(state.learned.len(), 4);
        let before = state.policy(&[], 0, now);
        for (request, unknown) in [
            (vec!["other.test", "b.allowed.test"], "b.allowed.test"),
            (vec!["10.213.0.5", "other.test"], "10.213.0.5/32"),
            (vec!["allowed.test"], "allowed.test"),
            (vec!["10.213.0.0/16"], "10.213.0.0/16"),
        ] {
            let asked = entries(&request);
            let first = state.unknown_entry(&asked).map(|entry| entry.to_string());
            assert_eq!(first.as_deref(), Some(unknown), "{request:?}");
            assert!(not_an_entry(&Entry::parse(unknown).unwrap()).contains(&format!("`{unknown}`")));
        }
        assert_eq!(state.policy(&[], 0, now), before, "checking changes nothing");
        let revoked = entries(&["other.test", "BAD.allowed.test", "10.213.0.0/24", "grant.test"]);
        assert_eq!(state.unknown_entry(&revoked), None, "names compare after parsing");
        // Connections still use other.test's addresses and the private address the
        // revoked CIDR let a.allowed.test open: they go all the same.
        let in_use = BTreeSet::from([ip("93.184.216.35"), ip("10.213.0.12"), ip("10.213.0.13")]);
        change(&mut state, |s| s.remove_entries(&revoked));
        assert!(!state.expire(now, &in_use));
        assert_eq!(state.learned.keys().copied().collect::<Vec<_>>(), [ip("93.184.216.34")]);
        let rules = rule_text(&state);
        assert!(!rules.iter().any(|r| r.contains("93.184.216.35") || r.contains("10.213.0.")), "{rules:?}");
        assert!(rules.contains(&"10000: to 93.184.216.34/32 lookup main".to_owned()), "{rules:?}");
        assert!(state.timers.is_empty(), "the revoked timed entry's timer went");
        let policy = state.policy(&[], 0, now);
        assert_eq!(policy.allow, ["*.allowed.test"]);
        assert_eq!(policy.deny, ["10.213.0.128/25"], "a deny with no allow around it is still listed: it keeps answers out");
        assert_eq!(state.names.check_name("bad.allowed.test"), Ok(()), "the revoked deny no longer carves");
        assert!(state.cidrs.denies_explicitly(ip("10.213.0.200")), "the deny not revoked stays stated");
        change(&mut state, |s| s.remove_entries(&entries(&["10.213.0.128/25"])));
        assert!(!state.cidrs.denies_explicitly(ip("10.213.0.200")), "and goes when revoked");
    }

    fn service(text: &str) -> Service {
        Service::parse(text).unwrap()
    }

    #[test]
    fn service_entries_are_allowed_denied_timed_listed_and_revoked_by_their_text() {
        let mut state = State::default();
        let now = Instant::now();
        let granted = entries(&["10.9.0.7/32 tcp/8081"]);
        change(&mut state, |s| s.add_entries(&granted, EntryVerdict::Allow, Some(60 * SECOND), now));
        change(&mut state, |s| s.add_entries(&entries(&["10.9.0.7 udp/53", "fd00::7/128 132"]), EntryVerdict::Deny, None, now));
        assert!(state.holds(&granted[0], EntryVerdict::Allow) && !state.holds(&granted[0], EntryVerdict::Deny));
        let other_port = entries(&["10.9.0.7/32 tcp/8080"]);
        assert_eq!(state.unknown_entry(&other_port), Some(&other_port[0]), "another port of the address is no entry");
        assert_eq!(state.unknown_entry(&entries(&["10.9.0.7/32"])).map(|e| e.to_string()).as_deref(), Some("10.9.0.7/32"));
        let policy = state.policy(&[], 0, now + SECOND);
        assert_eq!(policy.allow, ["10.9.0.7/32 tcp/8081"]);
        assert_eq!(policy.deny, ["10.9.0.7/32 udp/53", "fd00::7/128 132"]);
        let expiring: Vec<(String, u64)> = policy.expiring.iter().map(|e| (e.entry.clone(), e.expires_in_ms)).collect();
        assert_eq!(expiring, [("10.9.0.7/32 tcp/8081".to_owned(), 59_000)]);
        assert_eq!(
            rule_text(&state),
            [
                "9500: to 10.9.0.7/32 ipproto tcp dport 8081 lookup main",
                "9500: to 10.9.0.7/32 ipproto udp dport 53 prohibit",
                "20000: to 0.0.0.0/0 prohibit",
                "9500: to fd00::7/128 ipproto 132 prohibit",
                "20000: to ::/0 prohibit",
            ]
        );
        let mut expired = Expired::default();
        change(&mut state, |s| expired = s.expire_entries(now + 60 * SECOND));
        assert_eq!(expired, Expired { allow: vec!["10.9.0.7/32 tcp/8081".into()], deny: vec![] }, "reported as the entry's text");
        assert!(!rule_text(&state).iter().any(|r| r.contains("8081")), "{:?}", rule_text(&state));
        // Made permanent, then revoked exactly; the deny of the same service replaces an allow.
        change(&mut state, |s| s.add_entries(&granted, EntryVerdict::Allow, None, now));
        change(&mut state, |s| s.add_entries(&entries(&["10.9.0.7/32 udp/53"]), EntryVerdict::Allow, Some(SECOND), now));
        assert!(state.holds(&entries(&["10.9.0.7/32 udp/53"])[0], EntryVerdict::Allow));
        assert_eq!(state.unknown_entry(&granted), None);
        change(&mut state, |s| s.remove_entries(&granted));
        assert_eq!(state.unknown_entry(&granted), Some(&granted[0]));
        assert_eq!(state.policy(&[], 0, now).allow, ["10.9.0.7/32 udp/53"]);
        assert_eq!(state.timers.keys().cloned().collect::<Vec<_>>(), ["10.9.0.7/32 udp/53"]);
    }

    #[test]
    fn a_protected_address_or_an_explicit_deny_wins_over_a_service_allow() {
        let mut state = State::default();
        let now = Instant::now();
        let host = Cidr::parse("10.88.0.1").unwrap();
        change(&mut state, |s| {
            s.add_entries(&entries(&["10.88.0.1/32 tcp/22", "10.9.0.7/32 tcp/8081", "10.1.0.5/32 tcp/80"]), EntryVerdict::Allow, None, now);
            s.add_entries(&entries(&["10.9.0.0/16"]), EntryVerdict::Deny, None, now);
        });
        let text: Vec<String> = state.rules(&[], &[host]).iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            [
                "9500: to 10.1.0.5/32 ipproto tcp dport 80 lookup main",
                "10000: to 10.88.0.1/32 prohibit",
                "20000: to 0.0.0.0/0 prohibit",
                "20000: to ::/0 prohibit"
            ],
            "neither the protected address nor the denied network gets its service"
        );
        assert!(!state.offers(&[host], ip("10.88.0.1"), Some(service("tcp/22"))));
        assert!(!state.offers(&[host], ip("10.88.0.1"), Some(service("tcp/23"))));
        assert!(!state.offers(&[host], ip("10.9.0.7"), Some(service("tcp/8080"))));
    }

    #[test]
    fn another_port_of_an_address_with_a_service_grant_is_still_offered_and_a_denied_service_never() {
        let mut state = State::default();
        let now = Instant::now();
        change(&mut state, |s| {
            s.add_entries(&entries(&["10.9.0.7/32 tcp/8081"]), EntryVerdict::Allow, None, now);
            s.add_entries(&entries(&["10.9.0.7/32 tcp/22"]), EntryVerdict::Deny, None, now);
        });
        let address = ip("10.9.0.7");
        assert!(state.offers(&[], address, Some(service("tcp/8080"))), "a port of its own is a question of its own");
        assert!(state.offers(&[], address, Some(service("udp/9999"))));
        assert!(state.offers(&[], ip("::ffff:10.9.0.7"), Some(service("udp/9999"))));
        assert!(state.offers(&[], address, None));
        assert!(!state.offers(&[], address, Some(service("tcp/22"))), "the denied service is never offered");
        assert!(!state.offers(&[], address, Some(service("tcp/8081"))), "nor the allowed one (a packet before the allow)");
        change(&mut state, |s| s.add_entries(&entries(&["10.9.0.7/32"]), EntryVerdict::Allow, None, now));
        assert!(!state.offers(&[], address, Some(service("tcp/8080"))), "every port allowed: nothing to ask");
    }

    #[test]
    fn upstream_rules_are_marked_and_come_first() {
        let state = State::default();
        let rules = state.rules(&["10.213.0.53:53".parse().unwrap()], &[]);
        let text: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            ["9000: fwmark 0x4c5a0053 to 10.213.0.53/32 lookup main", "20000: to 0.0.0.0/0 prohibit", "20000: to ::/0 prohibit"]
        );
    }
}
