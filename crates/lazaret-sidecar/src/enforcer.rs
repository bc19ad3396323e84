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
//!
//! The parts: `state` (the entries, their timers, and the rules the state
//! becomes) and `learned` (the addresses answers to allowed names open, and
//! why one stays closed); this file holds the [`Enforcer`], the state in
//! force in the kernel: the rules read back after every change, the
//! netfilter backstop replaced with them.

mod state;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

pub use lazaret_protocol::sidecar::PrivateAnswers;
use lazaret_protocol::{EntryVerdict, NetworkPolicy};

use crate::control::Entry;
use crate::nft::Nft;
use crate::policy::{allowed_ranges, diff, guard_rules, service_verdicts, sort_rules, unlisted_rules, Cidr, RuleSpec, Service, Verdict};
use crate::rtnl::Rtnl;
use state::is_protected;
pub use state::learned::{Learned, Learning, NotOpened, MAX_LEARNED, MAX_ROUTE_SECONDS, MIN_ROUTE_SECONDS};
pub use state::{not_an_entry, Expired, State, Timer};

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

    pub(super) fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A state allowing `pattern`, with private answers allowed: the addresses in
    /// these tests are private, and most of them are about learning itself.
    pub(super) fn state_with_name(pattern: &str) -> State {
        let mut state = State::default();
        state.names.allow(NamePattern::parse(pattern).unwrap());
        state.private_answers = PrivateAnswers::Allow;
        state
    }
}
