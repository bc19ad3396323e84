//! The egress policy and the kernel it lives in: the CIDR entries, the service
//! entries (one protocol and port of one address: `10.9.0.7/32 tcp/8081`, see
//! `policy.rs`; held in [`State::cidrs`] beside the CIDRs), the DNS name
//! patterns, the addresses learned from answers to allowed names (each until its
//! TTL runs out and no connection uses it; internal addresses only where a CIDR
//! allow covers them or private answers are allowed, see `addresses.rs`), the
//! host's own addresses and networks, and the upstream resolvers only the
//! sidecar's marked sockets may reach. Every change is reconciled into the
//! kernel's policy rules at once, or not at all.
//!
//! The state also holds the timers of timed entries (`forMs`: each ends on its
//! own, removed as a revoke removes it, see [`State::expire_entries`]) and how
//! long a DNS question for a name on no allow entry is held (`hold`, see
//! `dns.rs`). Removing an entry (a revoke, an expiry, a deny, a `set`) forgets
//! the learned addresses its names no longer open, in use or not, so their
//! rules go and established flows through them stop.
//!
//! A service allow never opens its address as a whole, and gets no rule while
//! an explicit CIDR deny decides the address or the address is protected
//! ([`State::rules`]). A connection to another protocol or port of such an
//! address is still an open question ([`Enforcer::offers`]): a request of its
//! own while questions are held. One whose exact service is denied never is.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use lazaret_dns::NamePolicy;
use lazaret_protocol::sidecar::AnswerRefusal;
pub use lazaret_protocol::sidecar::PrivateAnswers;
use lazaret_protocol::{EntryVerdict, ExpiringEntry, LearnedAddress, NetworkPolicy};

use crate::addresses::{classify, Class};
use crate::control::Entry;
use crate::nft::Nft;
use crate::policy::{
    allowed_ranges, diff, guard_rules, service_verdicts, sort_rules, unlisted_rules, Cidr, Policy, RuleSpec, Service, Verdict, DNS_MARK,
    UPSTREAM_PRIORITY,
};
use crate::rtnl::Rtnl;

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
    fn settle(&mut self) {
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

    /// Drops learned names that the name policy no longer allows, addresses left
    /// without a name, and addresses a name may no longer open (a deny, the switch
    /// turned off, a network the host gained).
    fn forget_disallowed(&mut self) {
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

    /// What [`Enforcer::offers`] says, for these `protected` addresses.
    pub fn offers(&self, protected: &[Cidr], address: IpAddr, service: Option<Service>) -> bool {
        let address = address.to_canonical();
        service.is_none_or(|service| self.cidrs.stated_service(address, service).is_none())
            && !self.cidrs.denies_explicitly(address)
            && !self.cidrs.allows(address)
            && !self.learned.contains_key(&address)
            && !is_protected(protected, address)
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

/// Whole milliseconds, at most `u64::MAX`.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The host's addresses and the upstream resolvers: only the sidecar's marked
/// sockets may ask those anything, whatever a wide CIDR entry or a name's answer says.
fn with_upstreams(mut protected: Vec<Cidr>, upstreams: &[SocketAddr]) -> Vec<Cidr> {
    // An IPv4-mapped address is protected as the IPv4 address it is.
    for cidr in protected.iter_mut() {
        if *cidr == Cidr::host(cidr.addr()) {
            *cidr = Cidr::host(cidr.addr().to_canonical());
        }
    }
    for upstream in upstreams {
        let host = Cidr::host(upstream.ip());
        if !protected.contains(&host) {
            protected.push(host);
        }
    }
    protected
}

/// Whether `address` lies in one of the `protected` addresses or networks.
fn is_protected(protected: &[Cidr], address: IpAddr) -> bool {
    let host = Cidr::host(address.to_canonical());
    protected.iter().any(|cidr| cidr.contains(&host))
}

/// The state and the kernel it is enforced in: policy rules, and the netfilter
/// backstop that mirrors them (`nft.rs`).
pub struct Enforcer {
    rtnl: Rtnl,
    nft: Nft,
    state: State,
    upstreams: Vec<SocketAddr>,
    /// The host's own addresses, and networks of rootless podman's namespace
    /// (see [`State::rules`]).
    protected: Vec<Cidr>,
    /// Broadcast and multicast guard (fixed for the sidecar's life).
    guard: Vec<RuleSpec>,
    /// The rules last put in force (sorted), so that a change that leaves them as they
    /// are (an answer renewing a known address) costs no netlink round trip.
    installed: Vec<RuleSpec>,
    /// Whether the drop link is there: while questions are held, destinations no entry
    /// covers go to it (`policy::unlisted_rules`) and are reported (`blocked.rs`).
    drop_link: bool,
}

impl Enforcer {
    /// Installs `state` (with the upstream and guard rules) in this namespace, then
    /// retires the kernel's priority-0 `lookup local` rule that the guard replaces.
    pub fn start(
        mut rtnl: Rtnl,
        nft: Nft,
        state: State,
        upstreams: Vec<SocketAddr>,
        protected: Vec<Cidr>,
    ) -> io::Result<(Enforcer, usize)> {
        let guard = guard_rules(&rtnl.ipv4_broadcasts()?);
        let protected = with_upstreams(protected, &upstreams);
        let mut enforcer =
            Enforcer { rtnl, nft, state: State::default(), upstreams, protected, guard, installed: Vec::new(), drop_link: false };
        let rules = enforcer.change(|current| *current = state)?;
        enforcer.rtnl.delete_priority_zero_local_rules()?;
        Ok((enforcer, rules))
    }

    /// From the next hold on (the hold is 0 at start; [`Enforcer::change`] installs
    /// the rules, or puts the previous ones back), destinations no entry covers are
    /// routed to the drop link, which must be up, with the unlisted table's routes
    /// and the netfilter rules that refuse what it carries.
    pub fn use_drop_link(&mut self) {
        self.drop_link = true;
    }

    /// Back to the `prohibit` catch-all for what no entry covers (the drop link's
    /// log failed: nothing would be offered any more).
    pub fn stop_using_drop_link(&mut self) -> io::Result<usize> {
        self.drop_link = false;
        self.install(self.desired())
    }

    /// Whether a connection to `service` of `address` (`None`: a protocol and
    /// port unknown, e.g. past the snap length) may be offered to the human: no
    /// entry decides it. Not an explicit deny, a protected address, an allowed
    /// one (a CIDR entry or a learned answer) whose route went nowhere, nor a
    /// service that is an entry itself (denied: its `prohibit` rule stops it
    /// before the drop link anyway; allowed: a packet sent before the allow),
    /// whatever the routing did with the packet. Service entries for *other*
    /// protocols and ports of the address decide nothing here: this one is a
    /// question of its own.
    pub fn offers(&self, address: IpAddr, service: Option<Service>) -> bool {
        self.state.offers(&self.protected, address, service)
    }

    fn desired(&self) -> Vec<RuleSpec> {
        let mut rules = self.state.rules(&self.upstreams, &self.protected);
        if self.drop_link && !self.state.hold.is_zero() {
            let unlisted = unlisted_rules(&rules, &self.state.cidrs.stated_denies());
            rules.extend(unlisted);
        }
        rules.extend(self.guard.iter().copied());
        sort_rules(&mut rules);
        rules
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// Applies `edit` to the state and makes the kernel hold its rules. On failure the
    /// previous state (and its rules) is put back.
    pub fn change<R>(&mut self, edit: impl FnOnce(&mut State) -> R) -> io::Result<usize> {
        let previous = self.state.clone();
        edit(&mut self.state);
        self.state.settle();
        match self.install(self.desired()) {
            Ok(rules) => Ok(rules),
            Err(error) => {
                self.state = previous;
                if let Err(error) = self.install(self.desired()) {
                    eprintln!("lazaret-sidecar: could not restore the previous policy: {error}");
                }
                Err(error)
            }
        }
    }

    /// Puts `desired` in force unless it already is.
    fn install(&mut self, desired: Vec<RuleSpec>) -> io::Result<usize> {
        if desired == self.installed {
            return Ok(desired.len());
        }
        self.installed.clear();
        let rules = self.reconcile(&desired)?;
        self.installed = desired;
        Ok(rules)
    }

    /// Adds go first (denies before allows), then deletes (allows before denies), so
    /// that no step is more open than both the old and the new policy.
    fn reconcile(&mut self, desired: &[RuleSpec]) -> io::Result<usize> {
        let current = self.rtnl.dump_rules()?;
        let (mut add, mut del) = diff(&current, desired);
        add.sort_by_key(|r| r.verdict == Verdict::Allow);
        del.sort_by_key(|r| r.verdict != Verdict::Allow);
        for rule in &add {
            self.rtnl.add_rule(rule).map_err(|e| io::Error::new(e.kind(), format!("adding rule {rule}: {e}")))?;
        }
        for rule in &del {
            match self.rtnl.del_rule(rule) {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                    return Err(io::Error::new(e.kind(), format!("deleting rule {rule}: {e}")));
                }
                _ => {}
            }
        }
        let now = self.rtnl.dump_rules()?;
        let mut want = desired.to_vec();
        sort_rules(&mut want);
        if now != want {
            return Err(io::Error::other(format!("kernel holds {} rules of ours, expected {}", now.len(), want.len())));
        }
        self.nft
            .replace(&allowed_ranges(desired), &service_verdicts(desired))
            .map_err(|e| io::Error::new(e.kind(), format!("netfilter output filter: {e}")))?;
        Ok(now.len())
    }

    /// Records an answer (see [`State::learn`]) and installs its rules; protected
    /// addresses are neither learned nor told.
    pub fn learn(&mut self, name: &str, answers: &[(IpAddr, u32)], now: Instant) -> io::Result<Learning> {
        type Answers = Vec<(IpAddr, u32)>;
        let (protected, answers): (Answers, Answers) = answers.iter().partition(|(address, _)| is_protected(&self.protected, *address));
        let mut learning = Learning::default();
        self.change(|state| learning = state.learn(name, &answers, now))?;
        let protected = protected.into_iter().map(|(address, _)| (address.to_canonical(), NotOpened::Host));
        learning.refused.splice(0..0, protected);
        Ok(learning)
    }

    /// Replaces the host's own addresses (host deny rules; the upstream resolvers stay
    /// among them) and networks (internal for a name's answers) with what the host
    /// has now; learned addresses a name may no longer open are forgotten.
    pub fn protect(&mut self, addresses: Vec<Cidr>, networks: Vec<Cidr>) -> io::Result<usize> {
        let previous = std::mem::replace(&mut self.protected, with_upstreams(addresses, &self.upstreams));
        let result = self.change(|state| state.host_networks = networks);
        if result.is_err() {
            self.protected = previous;
            let _ = self.install(self.desired());
        }
        result
    }

    /// Allows or denies entries (CIDRs and names), for `life` if timed (see
    /// [`State::add_entries`]).
    pub fn apply_entries(&mut self, entries: &[Entry], verdict: EntryVerdict, life: Option<Duration>, now: Instant) -> io::Result<usize> {
        self.change(|state| state.add_entries(entries, verdict, life, now))
    }

    /// Removes allow or deny entries exactly as given, with their timers; what
    /// they opened closes (learned addresses of names no longer allowed go,
    /// in use or not). If one is neither, the error names it and nothing changes.
    pub fn revoke(&mut self, entries: &[Entry]) -> io::Result<usize> {
        if let Some(entry) = self.state.unknown_entry(entries) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, not_an_entry(entry)));
        }
        self.change(|state| state.remove_entries(entries))
    }

    /// Removes the timed entries whose time ran out (see [`State::expire_entries`]).
    pub fn expire_entries(&mut self, now: Instant) -> io::Result<Expired> {
        let mut expired = Expired::default();
        self.change(|state| expired = state.expire_entries(now))?;
        Ok(expired)
    }

    /// The policy in force, as the control protocol reports it.
    pub fn snapshot(&self, rules: usize, now: Instant) -> NetworkPolicy {
        self.state.policy(&self.upstreams, rules, now)
    }

    /// How many of our rules the kernel holds now.
    pub fn rule_count(&mut self) -> io::Result<usize> {
        Ok(self.rtnl.dump_rules()?.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_dns::NamePattern;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A state allowing `pattern`, with private answers allowed: the addresses in
    /// these tests are private, and most of them are about learning itself.
    fn state_with_name(pattern: &str) -> State {
        let mut state = State::default();
        state.names.allow(NamePattern::parse(pattern).unwrap());
        state.private_answers = PrivateAnswers::Allow;
        state
    }

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
