//! The sandbox's only resolver: a UDP DNS server on 127.0.0.1:53 of the shared network
//! namespace. It answers `A`/`AAAA` questions for allowlisted names by asking the
//! upstream resolvers (from sockets marked with [`DNS_MARK`], the only traffic the
//! upstream rules let through), makes the answered addresses reachable for their TTL
//! (those a name may open: see `addresses.rs`; the others are left out of the reply
//! and reported as a `dnsAnswerRefused` event), and refuses everything else without
//! sending anything upstream.
//!
//! With a hold (`{"type":"hold","ms":…}`), a question for a name on no allow entry
//! is not refused at once: it is reported (`dnsHeld`) and waits, without the
//! enforcer's lock, for a change of the policy ([`Changed`], bumped by every control
//! change and every expiry of timed entries). On each change the name is checked
//! again: once allowed, the very question that waited is resolved and answered;
//! once refused otherwise (a deny), it is refused so; at the end of the hold it is
//! refused as not allowlisted. Nothing about it goes upstream before it is allowed.
//! At most [`MAX_HELD`] questions are held at once, so that held questions cannot
//! take the slots of allowed ones.
//!
//! Learned addresses and timed entries expire in [`expiry_loop`].

use crate::lock;
use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lazaret_dns::wire::{encode_error, encode_query, encode_reply, parse_query, parse_response, type_name, MAX_MESSAGE};
use lazaret_dns::{Question, Rcode, Refusal, Response};
use lazaret_protocol::sidecar::{DnsRefusal, SidecarEvent};

use crate::enforcer::{Enforcer, Learning};
use crate::events::Events;
use crate::policy::DNS_MARK;

/// Where the sandbox's `/etc/resolv.conf` points.
pub const LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53);
/// How long one upstream gets to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// Questions held at once (see [`wait_for_change`]); past it a question for a
/// name on no allow entry is refused at once.
pub const MAX_HELD: usize = 32;
/// Queries handled at once, held ones included; more are dropped (the client
/// retries). At most [`MAX_HELD`] of them are held, so 64 stay for the others.
const MAX_IN_FLIGHT: usize = 64 + MAX_HELD;
/// How often [`expiry_loop`] looks for learned addresses and timed entries past their time.
const EXPIRY_TICK: Duration = Duration::from_millis(250);

/// What the DNS server, the expiry loop and the control socket share.
pub struct Shared {
    pub enforcer: Mutex<Enforcer>,
    pub events: Events,
    /// Bumped after every change of the policy (control requests, expiries of
    /// timed entries): wakes held questions.
    pub changed: Changed,
    /// Questions held now.
    held: AtomicUsize,
}

impl Shared {
    pub fn new(enforcer: Enforcer) -> Shared {
        Shared { enforcer: Mutex::new(enforcer), events: Events::new(), changed: Changed::default(), held: AtomicUsize::new(0) }
    }

    pub fn enforcer(&self) -> MutexGuard<'_, Enforcer> {
        lock(&self.enforcer)
    }
}

/// A count of policy changes, and a wake-up for questions waiting on one.
#[derive(Debug, Default)]
pub struct Changed {
    generation: Mutex<u64>,
    condvar: Condvar,
}

impl Changed {
    /// Records a change (made before this call) and wakes every waiter.
    pub fn bump(&self) {
        {
            let mut generation = lock(&self.generation);
            *generation = generation.wrapping_add(1);
        }
        self.condvar.notify_all();
    }
}

/// Waits until `check` (the name policy's verdict on a held question, taken
/// without holding `changed`'s lock) says anything but "not allowlisted": it is
/// asked now and after every change until `deadline`. `Ok` (now allowed) or
/// another refusal (a deny) is returned at once; at the deadline, `NotAllowlisted`.
pub fn wait_for_change(changed: &Changed, deadline: Instant, mut check: impl FnMut() -> Result<(), Refusal>) -> Result<(), Refusal> {
    loop {
        // Read before the check: a change after it bumps past `seen` and is checked again.
        let seen = *lock(&changed.generation);
        match check() {
            Err(Refusal::NotAllowlisted) => {}
            decided => return decided,
        }
        let mut generation = lock(&changed.generation);
        while *generation == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refusal::NotAllowlisted);
            }
            generation = match changed.condvar.wait_timeout(generation, left) {
                Ok((generation, _)) => generation,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// One held question; gives its place back when dropped.
struct Held<'a>(&'a AtomicUsize);

impl Held<'_> {
    /// A place among the [`MAX_HELD`], if one is free.
    fn take(counter: &AtomicUsize) -> Option<Held<'_>> {
        counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| (held < MAX_HELD).then_some(held + 1)).ok()?;
        Some(Held(counter))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Holds a question for a name on no allow entry for up to `hold` (reported as
/// `dnsHeld`; `holdMs` 0 when [`MAX_HELD`] are held already and it is refused at
/// once): the name policy's verdict once it is no longer "not allowlisted", or
/// `NotAllowlisted` at the end.
fn hold_question(shared: &Shared, question: &Question, name: &str, record_type: &str, hold: Duration) -> Result<(), Refusal> {
    let Some(_held) = Held::take(&shared.held) else {
        eprintln!("lazaret-sidecar: dns: not holding {name} {record_type}: {MAX_HELD} questions are held already");
        shared.events.emit(SidecarEvent::DnsHeld {
            name: name.to_owned(),
            record_type: record_type.to_owned(),
            hold_ms: 0,
            suppressed: None,
        });
        return Err(Refusal::NotAllowlisted);
    };
    let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
    eprintln!("lazaret-sidecar: dns: holding {name} {record_type} for up to {hold_ms} ms");
    shared.events.emit(SidecarEvent::DnsHeld { name: name.to_owned(), record_type: record_type.to_owned(), hold_ms, suppressed: None });
    let verdict = wait_for_change(&shared.changed, Instant::now() + hold, || shared.enforcer().state().names.check(question));
    if verdict.is_ok() {
        eprintln!("lazaret-sidecar: dns: {name} {record_type} was allowed while held");
    }
    verdict
}

/// Serves queries until the process ends; each query on its own thread, so a slow
/// upstream does not hold the others up.
pub fn serve(socket: UdpSocket, shared: Arc<Shared>) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut buffer = vec![0u8; MAX_MESSAGE];
    loop {
        let (length, peer) = match socket.recv_from(&mut buffer) {
            Ok(received) => received,
            Err(error) => {
                eprintln!("lazaret-sidecar: dns: receive: {error}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
            continue;
        }
        let (packet, shared, socket) = (buffer[..length].to_vec(), Arc::clone(&shared), socket.try_clone());
        let Ok(socket) = socket else { continue };
        let slot = InFlight::take(&in_flight);
        let spawned = std::thread::Builder::new().spawn(move || {
            let _slot = slot;
            if let Some(reply) = answer(&packet, &shared) {
                let _ = socket.send_to(&reply, peer);
            }
        });
        if let Err(error) = spawned {
            eprintln!("lazaret-sidecar: dns: cannot start a worker: {error}");
        }
    }
}

/// One query being answered; gives its slot back when dropped (a panicking worker too).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn take(counter: &Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The reply to one packet from the sandbox (`None`: stay silent).
fn answer(packet: &[u8], shared: &Shared) -> Option<Vec<u8>> {
    let query = match parse_query(packet) {
        Ok(query) => query,
        Err(error) => {
            shared.events.emit(SidecarEvent::DnsRefused {
                name: String::new(),
                record_type: String::new(),
                reason: DnsRefusal::Malformed,
                message: error.to_string(),
                suppressed: None,
            });
            return encode_error(packet, Rcode::FormatError);
        }
    };
    let name = query.question.name();
    let record_type = type_name(query.question.record_type);
    let (checked, hold) = {
        let enforcer = shared.enforcer();
        (enforcer.state().names.check(&query.question), enforcer.state().hold)
    };
    let checked = match checked {
        Err(Refusal::NotAllowlisted) if !hold.is_zero() => hold_question(shared, &query.question, &name, &record_type, hold),
        other => other,
    };
    if let Err(refusal) = checked {
        eprintln!("lazaret-sidecar: dns: refused {name} {record_type}: {refusal}");
        shared.events.emit(SidecarEvent::DnsRefused {
            name: name.clone(),
            record_type: record_type.to_owned(),
            reason: refusal_reason(&refusal),
            message: refusal.to_string(),
            suppressed: None,
        });
        return Some(encode_reply(&query, Rcode::Refused, &[]));
    }
    let upstreams = shared.enforcer().upstreams().to_vec();
    // Upstream sees the name in lower case: letter case must not carry data out.
    let mut forwarded = query.question.clone();
    forwarded.labels.iter_mut().for_each(|label| label.make_ascii_lowercase());
    let response = match resolve(&forwarded, &upstreams) {
        Ok(response) => response,
        Err(error) => {
            eprintln!("lazaret-sidecar: dns: {name} {record_type}: {error}");
            return Some(encode_reply(&query, Rcode::ServerFailure, &[]));
        }
    };
    if response.rcode != Rcode::NoError {
        let rcode = if response.rcode == Rcode::NameError { Rcode::NameError } else { Rcode::ServerFailure };
        return Some(encode_reply(&query, rcode, &[]));
    }
    // An alias into a denied name does not open that name's addresses.
    let denied_alias = {
        let enforcer = shared.enforcer();
        response
            .chain()
            .into_iter()
            .skip(1)
            .find_map(|alias| enforcer.state().names.denial(&alias).map(|pattern| (alias, pattern.to_string())))
    };
    if let Some((alias, pattern)) = denied_alias {
        let message = format!("the answer is an alias of {alias}, which `{pattern}` denies");
        eprintln!("lazaret-sidecar: dns: refused {name} {record_type}: {message}");
        shared.events.emit(SidecarEvent::DnsRefused {
            name: name.clone(),
            record_type: record_type.to_owned(),
            reason: DnsRefusal::Denied,
            message,
            suppressed: None,
        });
        return Some(encode_reply(&query, Rcode::Refused, &[]));
    }
    let answers = response.addresses();
    let now = Instant::now();
    let learned = shared.enforcer().learn(&name, &answers, now);
    let Learning { told, refused } = match learned {
        Ok(learning) => learning,
        Err(error) => {
            eprintln!("lazaret-sidecar: dns: cannot open {name}'s addresses: {error}");
            return Some(encode_reply(&query, Rcode::ServerFailure, &[]));
        }
    };
    if let Some((_, first)) = refused.first() {
        // Left out of the reply, and reported: the name stays allowed, these addresses closed.
        let chain = response.chain();
        let through = if chain.len() > 1 { format!(" (an alias of {})", chain[1..].join(", ")) } else { String::new() };
        let described: Vec<String> = refused.iter().map(|(address, why)| why.describe(*address)).collect();
        let message = format!("the answer for {name}{through} pointed at {}, not opened", described.join("; "));
        eprintln!("lazaret-sidecar: dns: {message}");
        let addresses: Vec<String> = refused.iter().map(|(address, _)| address.to_string()).collect();
        shared.events.emit(SidecarEvent::DnsAnswerRefused {
            name: name.clone(),
            record_type: record_type.to_owned(),
            addresses,
            reason: first.reason(),
            message,
            suppressed: None,
        });
    }
    let addresses: Vec<String> = told.iter().map(|(address, _)| address.to_string()).collect();
    shared.events.emit(SidecarEvent::DnsResolved { name, record_type: record_type.to_owned(), addresses, suppressed: None });
    Some(encode_reply(&query, Rcode::NoError, &told))
}

/// A refusal as the control protocol's events carry it.
fn refusal_reason(refusal: &Refusal) -> DnsRefusal {
    match refusal {
        Refusal::RecordType(_) => DnsRefusal::RecordType,
        Refusal::BadCharacters => DnsRefusal::BadCharacters,
        Refusal::NotAName => DnsRefusal::NotAName,
        Refusal::NotAllowlisted => DnsRefusal::NotAllowlisted,
        Refusal::Denied(_) => DnsRefusal::Denied,
        Refusal::LongLabel(_) => DnsRefusal::LongLabel,
        Refusal::TooManyLabels(_) => DnsRefusal::TooManyLabels,
    }
}

/// Asks each upstream in turn until one answers.
fn resolve(question: &Question, upstreams: &[SocketAddr]) -> io::Result<Response> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no upstream resolver is configured");
    for upstream in upstreams {
        match ask(question, *upstream) {
            Ok(response) => return Ok(response),
            Err(error) => last = io::Error::new(error.kind(), format!("upstream {upstream}: {error}")),
        }
    }
    Err(last)
}

fn ask(question: &Question, upstream: SocketAddr) -> io::Result<Response> {
    let socket = marked_socket(upstream)?;
    let id = random_id()?;
    socket.send(&encode_query(id, question))?;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    let mut buffer = vec![0u8; MAX_MESSAGE];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
        }
        socket.set_read_timeout(Some(left))?;
        let length = match socket.recv(&mut buffer) {
            Ok(length) => length,
            Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
            }
            Err(error) => return Err(error),
        };
        // Anything that is not the answer to this question under this id is ignored.
        if let Ok(response) = parse_response(&buffer[..length], id, question) {
            return Ok(response);
        }
    }
}

/// A UDP socket connected to `upstream` whose packets carry [`DNS_MARK`].
fn marked_socket(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let any: SocketAddr = match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any)?;
    let mark: libc::c_uint = DNS_MARK;
    // SAFETY: setsockopt reads `size_of::<c_uint>()` bytes from a live local; the fd is
    // owned by `socket` for the whole call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.connect(upstream)?;
    Ok(socket)
}

/// A random DNS message id (getrandom).
pub fn random_id() -> io::Result<u16> {
    let mut bytes = [0u8; 2];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the live local buffer.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(u16::from_ne_bytes(bytes))
}

/// Removes timed entries whose time ran out (reported as `entriesExpired`, never
/// rate limited; held questions are woken), and forgets learned addresses whose time
/// ran out and that no TCP connection or connected UDP socket in this namespace
/// uses any more. Checks four times a second, and sends the rate limit's per-name
/// tally each time ([`Events::flush_tally`]).
pub fn expiry_loop(shared: Arc<Shared>) {
    loop {
        std::thread::sleep(EXPIRY_TICK);
        shared.events.flush_tally();
        let now = Instant::now();
        let mut enforcer = shared.enforcer();
        if enforcer.state().next_entry_expiry().is_some_and(|expiry| expiry <= now) {
            match enforcer.expire_entries(now) {
                Ok(expired) if !expired.is_empty() => {
                    eprintln!("lazaret-sidecar: timed entries expired: allow {}; deny {}", expired.allow.join(" "), expired.deny.join(" "));
                    shared.changed.bump();
                    shared.events.emit_always(SidecarEvent::EntriesExpired { allow: expired.allow, deny: expired.deny });
                }
                Ok(_) => {}
                Err(error) => eprintln!("lazaret-sidecar: expiring timed entries: {error}"),
            }
        }
        if enforcer.state().next_expiry().is_none_or(|expiry| expiry > now) {
            continue;
        }
        let in_use = connected_addresses();
        let mut forgot = false;
        let result = enforcer.change(|state| forgot = state.expire(now, &in_use));
        if let Err(error) = result {
            eprintln!("lazaret-sidecar: expiring learned addresses: {error}");
        } else if forgot {
            eprintln!("lazaret-sidecar: learned addresses expired");
        }
    }
}

/// Remote addresses of this namespace's TCP sockets that are not listening or closed,
/// and of its connected UDP sockets (the sandbox's sockets are host sockets here:
/// runsc's hostinet).
fn connected_addresses() -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    for path in ["/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"] {
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(parse_proc_net_sockets(&text));
        }
    }
    out
}

/// Parses `/proc/net/{tcp,udp}{,6}`: the remote address of every socket whose state is
/// not LISTEN (0A) or CLOSE (07; an unconnected UDP socket).
fn parse_proc_net_sockets(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(remote), Some(state)) = (fields.get(2), fields.get(3)) else { continue };
        if *state == "0A" || *state == "07" {
            continue;
        }
        let Some((address, _port)) = remote.split_once(':') else { continue };
        if let Some(address) = parse_proc_address(address) {
            out.push(address);
        }
    }
    out
}

/// `/proc/net/tcp` writes addresses as 32-bit words in host byte order, in hex.
fn parse_proc_address(hex: &str) -> Option<IpAddr> {
    let words: Vec<u32> =
        (0..hex.len() / 8).map(|i| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok())).collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes);
            // An IPv4 connection of a dual-stack socket shows as ::ffff:a.b.c.d.
            Some(IpAddr::V6(Ipv6Addr::from(octets)).to_canonical())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_dns::{NamePattern, NamePolicy};

    /// A name policy that another thread changes after `after`, then bumps `changed`.
    fn change_later(
        names: &Arc<Mutex<NamePolicy>>,
        changed: &Arc<Changed>,
        after: Duration,
        edit: impl FnOnce(&mut NamePolicy) + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let (names, changed) = (Arc::clone(names), Arc::clone(changed));
        std::thread::spawn(move || {
            std::thread::sleep(after);
            edit(&mut lock(&names));
            changed.bump();
        })
    }

    fn pattern(text: &str) -> NamePattern {
        NamePattern::parse(text).unwrap()
    }

    #[test]
    fn a_held_question_is_answered_once_its_name_is_allowed() {
        let names = Arc::new(Mutex::new(NamePolicy::new()));
        let changed = Arc::new(Changed::default());
        let started = Instant::now();
        let other = change_later(&names, &changed, Duration::from_millis(30), |names| names.allow(pattern("other.test")));
        let grant = change_later(&names, &changed, Duration::from_millis(120), |names| names.allow(pattern("grant.test")));
        // The other name's allow wakes it too; it goes back to waiting.
        let verdict = wait_for_change(&changed, started + Duration::from_secs(20), || lock(&names).check_name("grant.test"));
        assert_eq!(verdict, Ok(()));
        assert!(started.elapsed() >= Duration::from_millis(120) && started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        other.join().unwrap();
        grant.join().unwrap();
    }

    #[test]
    fn a_held_question_is_refused_at_the_deadline() {
        let names = Arc::new(Mutex::new(NamePolicy::new()));
        let changed = Arc::new(Changed::default());
        let started = Instant::now();
        let unrelated = change_later(&names, &changed, Duration::from_millis(20), |names| names.allow(pattern("other.test")));
        let verdict = wait_for_change(&changed, started + Duration::from_millis(150), || lock(&names).check_name("grant.test"));
        assert_eq!(verdict, Err(Refusal::NotAllowlisted));
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
        unrelated.join().unwrap();
        let late = change_later(&names, &changed, Duration::ZERO, |names| names.allow(pattern("grant.test")));
        late.join().unwrap();
        let past = Instant::now();
        assert_eq!(
            wait_for_change(&changed, past, || Err(Refusal::NotAllowlisted)),
            Err(Refusal::NotAllowlisted),
            "no wait past the deadline"
        );
    }

    #[test]
    fn a_deny_during_the_hold_refuses_at_once() {
        let names = Arc::new(Mutex::new(NamePolicy::new()));
        let changed = Arc::new(Changed::default());
        let started = Instant::now();
        let deny = change_later(&names, &changed, Duration::from_millis(50), |names| names.deny(pattern("*.example.test")));
        let verdict = wait_for_change(&changed, started + Duration::from_secs(20), || lock(&names).check_name("a.example.test"));
        assert_eq!(verdict, Err(Refusal::Denied("*.example.test".into())));
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        deny.join().unwrap();
    }

    #[test]
    fn a_change_between_the_check_and_the_wait_is_not_missed() {
        let changed = Changed::default();
        let mut checks = 0;
        // The first check sees the old policy, then the change lands before the wait.
        let verdict = wait_for_change(&changed, Instant::now() + Duration::from_secs(20), || {
            checks += 1;
            if checks == 1 {
                changed.bump();
                Err(Refusal::NotAllowlisted)
            } else {
                Ok(())
            }
        });
        assert_eq!((verdict, checks), (Ok(()), 2));
    }

    #[test]
    fn at_most_max_held_questions_are_held() {
        let counter = AtomicUsize::new(0);
        let mut held: Vec<Held<'_>> = (0..MAX_HELD).map(|_| Held::take(&counter).unwrap()).collect();
        assert!(Held::take(&counter).is_none());
        held.pop();
        let again = Held::take(&counter);
        assert!(again.is_some());
        assert!(Held::take(&counter).is_none());
        drop(again);
        assert_eq!(counter.load(Ordering::Acquire), MAX_HELD - 1);
        const { assert!(MAX_IN_FLIGHT - MAX_HELD >= 64, "held questions leave 64 slots to the others") };
    }

    #[test]
    fn proc_net_sockets_yield_connected_remotes() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n\
           1: 0305D50A:AC2A 0B05D50A:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2\n\
           2: 0305D50A:AC2B 0C05D50A:1F90 07 00000000:00000000 00:00000000 00000000     0        0 3\n";
        assert_eq!(parse_proc_net_sockets(text), vec!["10.213.5.11".parse::<IpAddr>().unwrap()]);
        let six = "sl local rem st\n 0: 00000000000000000000000000000000:0035 0000FDFD000000000000000001000000:1F90 01 0\n";
        assert_eq!(parse_proc_net_sockets(six), vec!["fdfd::1".parse::<IpAddr>().unwrap()]);
        // /proc/net/udp as seen from the sidecar, a sandbox's connected socket and the resolver.
        let udp = "   sl  local_address rem_address   st tx_queue\n 8391: 0208D50A:E868 0B08D50A:270F 01 00000000:00000000\n\
                   14484: 0100007F:0035 00000000:0000 07 00000000:00000000\n";
        assert_eq!(parse_proc_net_sockets(udp), vec!["10.213.8.11".parse::<IpAddr>().unwrap()]);
        let mapped = "sl local rem st\n 0: 00000000000000000000000000000000:0035 0000000000000000FFFF00000B05D50A:1F90 01 0\n";
        assert_eq!(parse_proc_net_sockets(mapped), vec!["10.213.5.11".parse::<IpAddr>().unwrap()]);
    }
}
