//! Network requests (`[network] ask`), as pure state: destinations the
//! sandbox asked for that no allow entry covers, waiting for a human, and
//! the grants and remembered refusals their answers made. No I/O here: the
//! coordinator feeds in what the Network Sidecar reports and what clients
//! answer, and carries out what comes back (sidecar requests, audit
//! records, events).
//!
//! A request is keyed by what an `allow` of it would open: a name, or one
//! protocol and port of an address (`10.9.0.7/32 tcp/8081`, the sidecar
//! entry [`lazaret_protocol::sidecar::service_entry`] writes), so that a
//! grant opens exactly what the human saw; `allowEveryPort` opens the whole
//! address and says so (docs/decisions.md D19).
//!
//! Invariants:
//! - one pending request per key; at most [`MAX_PENDING`] at once;
//! - a destination with a grant or remembered refusal is never asked again
//!   (the sidecar answers or refuses it without holding it; a question that
//!   raced the answer is dropped here);
//! - every grant has exactly one sidecar entry ([`grant_entry`]): the name,
//!   the address's service, or the whole address, allowed or denied, timed
//!   for the `minutes` scope.

use std::collections::BTreeMap;

use lazaret_protocol::sidecar::{service_entry, Service, SidecarRequest};
use lazaret_protocol::{DecisionSource, EntryVerdict, GrantScope, NetworkDecision, NetworkGrant, PendingNetworkRequest};

/// Most network requests pending at once in one domain. Beyond it a
/// question is refused as if nobody was asked, and the audit trail says so.
pub const MAX_PENDING: usize = 32;
/// Longest a network request waits for an answer.
pub const REQUEST_LIFETIME_MS: u64 = 10 * 60 * 1000;
/// The longest `minutes` scope: a day.
pub const MAX_GRANT_MINUTES: u32 = 24 * 60;

/// Why an answer from a client cannot be taken as given (the client's
/// mistake: `invalidValue` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefusal {
    /// A `minutes` scope outside 1 to [`MAX_GRANT_MINUTES`].
    #[error("scope minutes {minutes} is out of range: 1 to {MAX_GRANT_MINUTES}")]
    MinutesOutOfRange { minutes: u32 },
    /// `allowEveryPort` for a name: ports belong to an address.
    #[error("{destination} is a name: every port applies to an address only")]
    EveryPortOfAName { destination: String },
}

/// What became of a question the sidecar held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A new request: announce it, audit it.
    New(PendingNetworkRequest),
    /// Another question for a pending request: announce the new count.
    Repeat(PendingNetworkRequest),
    /// A grant or a remembered refusal already answers it (a question that
    /// raced the answer).
    Answered,
    /// Not queued: [`MAX_PENDING`] requests wait already. `first` is true
    /// for the first one refused since the queue filled.
    QueueFull { first: bool },
}

/// The domain's network requests and grants.
#[derive(Debug, Default)]
pub struct NetworkRequests {
    /// Pending requests by destination.
    pending: BTreeMap<String, PendingNetworkRequest>,
    /// Grants and remembered refusals by destination (one per destination).
    grants: BTreeMap<String, NetworkGrant>,
    /// Questions not queued since the queue filled (none while it is not full).
    overflow: u64,
}

impl NetworkRequests {
    /// Restores grants kept for the profile (read from the Domain Root). An
    /// address grant kept before grants were scoped to a service covers
    /// every port, and says so.
    pub fn with_profile_grants(grants: Vec<NetworkGrant>) -> NetworkRequests {
        let mut requests = NetworkRequests::default();
        for mut grant in grants.into_iter().filter(|grant| grant.scope == GrantScope::Profile) {
            grant.every_port = grant.service.is_none() && is_address_network(&grant.destination);
            requests.grants.insert(grant_entry(&grant), grant);
        }
        requests
    }

    /// A question for `name` (`record_type`) was held or refused because no
    /// allow entry covers it. `request_id` is a fresh id, used if a request
    /// is made; `sessions` are the live sessions.
    pub fn asked(&mut self, name: &str, record_type: &str, request_id: String, sessions: Vec<String>, now_ms: u64) -> Asked {
        self.asked_for(name, None, record_type, request_id, sessions, now_ms)
    }

    /// The sandbox connected straight to `service` of `network` (an
    /// address's host network, `10.9.0.7/32`) and no entry covers it: a
    /// request for exactly that service, like [`NetworkRequests::asked`].
    pub fn connection_asked(&mut self, network: &str, service: Service, request_id: String, sessions: Vec<String>, now_ms: u64) -> Asked {
        self.asked_for(network, Some(service), &service.to_string(), request_id, sessions, now_ms)
    }

    fn asked_for(
        &mut self,
        destination: &str,
        service: Option<Service>,
        record_type: &str,
        request_id: String,
        sessions: Vec<String>,
        now_ms: u64,
    ) -> Asked {
        let key = match service {
            Some(service) => service_entry(destination, service),
            None => destination.to_owned(),
        };
        // A grant of the service, or of the whole address, answers it.
        if self.grants.contains_key(&key) || self.grants.contains_key(destination) {
            return Asked::Answered;
        }
        if let Some(request) = self.pending.get_mut(&key) {
            request.repeats += 1;
            if !request.record_types.iter().any(|known| known == record_type) {
                request.record_types.push(record_type.to_owned());
            }
            return Asked::Repeat(request.clone());
        }
        if self.pending.len() >= MAX_PENDING {
            self.overflow += 1;
            return Asked::QueueFull { first: self.overflow == 1 };
        }
        let request = PendingNetworkRequest {
            request_id,
            domain_hash: String::new(),
            profile: String::new(),
            destination: destination.to_owned(),
            record_types: vec![record_type.to_owned()],
            service: service.map(|service| service.to_string()),
            session_ids: sessions,
            repeats: 0,
            received_at_ms: now_ms,
            expires_at_ms: now_ms + REQUEST_LIFETIME_MS,
        };
        self.pending.insert(key, request.clone());
        Asked::New(request)
    }

    /// Pending requests, oldest first.
    pub fn pending(&self) -> Vec<PendingNetworkRequest> {
        let mut pending: Vec<PendingNetworkRequest> = self.pending.values().cloned().collect();
        pending.sort_by_key(|request| (request.received_at_ms, request.request_id.clone()));
        pending
    }

    /// The pending request `request_id`, if it is pending.
    pub fn find(&self, request_id: &str) -> Option<&PendingNetworkRequest> {
        self.pending.values().find(|request| request.request_id == request_id)
    }

    /// Takes the request out of the queue and makes the grant its answer
    /// asks for; `grant_id` is a fresh id. `Ok(None)` when it is not
    /// pending; an error (the request stays) for `allowEveryPort` on a name.
    /// The caller puts it in force (see [`sidecar_request`]) and, if the
    /// sidecar refuses, hands both back with [`NetworkRequests::undo`].
    pub fn answer(
        &mut self,
        request_id: &str,
        decision: NetworkDecision,
        scope: GrantScope,
        decided_by: DecisionSource,
        grant_id: String,
        now_ms: u64,
    ) -> Result<Option<(PendingNetworkRequest, NetworkGrant)>, AnswerRefusal> {
        let Some(key) = self.pending.iter().find(|(_, request)| request.request_id == request_id).map(|(key, _)| key.clone()) else {
            return Ok(None);
        };
        let Some(request) = self.pending.get(&key) else { return Ok(None) };
        let every_port = match (decision, &request.service) {
            (NetworkDecision::AllowEveryPort, None) => {
                return Err(AnswerRefusal::EveryPortOfAName { destination: request.destination.clone() });
            }
            (NetworkDecision::AllowEveryPort, Some(_)) => true,
            (NetworkDecision::Allow | NetworkDecision::Deny, _) => false,
        };
        let Some(request) = self.pending.remove(&key) else { return Ok(None) };
        let grant = NetworkGrant {
            id: grant_id,
            destination: request.destination.clone(),
            service: if every_port { None } else { request.service.clone() },
            every_port,
            verdict: match decision {
                NetworkDecision::Allow | NetworkDecision::AllowEveryPort => EntryVerdict::Allow,
                NetworkDecision::Deny => EntryVerdict::Deny,
            },
            scope,
            decided_by,
            granted_at_ms: now_ms,
            expires_at_ms: match scope {
                GrantScope::Minutes { minutes } => Some(now_ms + u64::from(minutes) * 60_000),
                GrantScope::Session | GrantScope::Profile => None,
            },
            hits: 0,
        };
        self.grants.insert(grant_entry(&grant), grant.clone());
        Ok(Some((request, grant)))
    }

    /// Puts back a request whose answer did not take.
    pub fn undo(&mut self, request: PendingNetworkRequest, grant: &NetworkGrant) {
        self.grants.remove(&grant_entry(grant));
        self.pending.insert(request_key(&request), request);
    }

    /// Whether the queue had overflowed, and by how much: reported once a
    /// request leaves the queue. Resets the count.
    pub fn take_overflow(&mut self) -> u64 {
        std::mem::take(&mut self.overflow)
    }

    /// Requests whose time ran out, removed from the queue.
    pub fn expire_requests(&mut self, now_ms: u64) -> Vec<PendingNetworkRequest> {
        let expired: Vec<String> =
            self.pending.iter().filter(|(_, request)| request.expires_at_ms <= now_ms).map(|(name, _)| name.clone()).collect();
        expired.into_iter().filter_map(|name| self.pending.remove(&name)).collect()
    }

    /// The sidecar removed a timed entry: the grant it belonged to, gone.
    pub fn entry_expired(&mut self, entry: &str, verdict: EntryVerdict) -> Option<NetworkGrant> {
        match self.grants.get(entry) {
            Some(grant) if grant.verdict == verdict && grant.expires_at_ms.is_some() => self.grants.remove(entry),
            _ => None,
        }
    }

    /// Removes grant `id`; the caller revokes its sidecar entry.
    pub fn revoke(&mut self, id: &str) -> Option<NetworkGrant> {
        let entry = self.grants.iter().find(|(_, grant)| grant.id == id)?.0.clone();
        self.grants.remove(&entry)
    }

    /// Puts back a grant whose revocation did not take.
    pub fn restore(&mut self, grant: NetworkGrant) {
        self.grants.insert(grant_entry(&grant), grant);
    }

    /// Counts `count` questions for `name` answered (`Allow`) or refused
    /// (`Deny`) under its grant.
    pub fn hits(&mut self, name: &str, verdict: EntryVerdict, count: u64) {
        if let Some(grant) = self.grants.get_mut(name).filter(|grant| grant.verdict == verdict) {
            grant.hits = grant.hits.saturating_add(count);
        }
    }

    /// Every grant, oldest first.
    pub fn grants(&self) -> Vec<NetworkGrant> {
        let mut grants: Vec<NetworkGrant> = self.grants.values().cloned().collect();
        grants.sort_by_key(|grant| (grant.granted_at_ms, grant.id.clone()));
        grants
    }

    /// The grants kept for the profile (what the Domain Root file holds).
    pub fn profile_grants(&self) -> Vec<NetworkGrant> {
        self.grants().into_iter().filter(|grant| grant.scope == GrantScope::Profile).collect()
    }

    /// What puts every grant in force again on a sidecar that lost them (a
    /// restart, a reload of the configuration), timed ones with the time
    /// they have left; grants whose time is up are left out.
    pub fn sidecar_requests(&self, now_ms: u64) -> Vec<SidecarRequest> {
        self.grants.values().filter_map(|grant| sidecar_request(grant, now_ms)).collect()
    }
}

/// The sidecar entry of `grant`: its name, its address's service
/// (`10.9.0.7/32 tcp/8081`), or its whole address.
pub fn grant_entry(grant: &NetworkGrant) -> String {
    entry_of(&grant.destination, grant.service.as_deref())
}

/// What a request is keyed by: the entry an `allow` of it would make.
fn request_key(request: &PendingNetworkRequest) -> String {
    entry_of(&request.destination, request.service.as_deref())
}

fn entry_of(destination: &str, service: Option<&str>) -> String {
    match service {
        Some(service) => format!("{destination} {service}"),
        None => destination.to_owned(),
    }
}

/// Whether `destination` is an address's network (`10.9.0.7/32`), not a name.
pub fn is_address_network(destination: &str) -> bool {
    destination.split_once('/').is_some_and(|(address, _)| address.parse::<std::net::IpAddr>().is_ok())
}

/// The sidecar request that puts `grant` in force at `now_ms`; `None` for a
/// timed grant whose time is up.
pub fn sidecar_request(grant: &NetworkGrant, now_ms: u64) -> Option<SidecarRequest> {
    let for_ms = match grant.expires_at_ms {
        Some(end) if end <= now_ms => return None,
        Some(end) => Some(end - now_ms),
        None => None,
    };
    let entries = vec![grant_entry(grant)];
    Some(match grant.verdict {
        EntryVerdict::Allow => SidecarRequest::Allow { entries, for_ms },
        EntryVerdict::Deny => SidecarRequest::Deny { entries, for_ms },
    })
}

/// Checks a scope from a client: `minutes` from 1 to [`MAX_GRANT_MINUTES`].
pub fn check_scope(scope: GrantScope) -> Result<GrantScope, AnswerRefusal> {
    match scope {
        GrantScope::Minutes { minutes } if minutes == 0 || minutes > MAX_GRANT_MINUTES => Err(AnswerRefusal::MinutesOutOfRange { minutes }),
        scope => Ok(scope),
    }
}

/// The grants file in the Domain Root: grants kept for the profile.
pub mod profile_file {
    use std::path::{Path, PathBuf};

    use lazaret_protocol::NetworkGrant;

    use crate::error::Context;

    /// `<domain_dir>/network-grants.json`
    pub fn path(domain_dir: &Path) -> PathBuf {
        domain_dir.join("network-grants.json")
    }

    /// The grants kept in `path`; none when it does not exist. A file that
    /// cannot be read is an error naming it (never silently no grants).
    pub fn read(path: &Path) -> crate::Result<Vec<NetworkGrant>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("{} is not a list of grants", path.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(crate::Error::Path { action: "read", path: path.to_path_buf(), source }),
        }
    }

    /// Replaces the file with `grants`, whole (written aside, then renamed).
    pub fn write(path: &Path, grants: &[NetworkGrant]) -> crate::Result<()> {
        let text = serde_json::to_vec_pretty(grants)?;
        let aside = path.with_extension("json.new");
        std::fs::write(&aside, text).map_err(|source| crate::Error::Path { action: "write", path: aside.clone(), source })?;
        std::fs::rename(&aside, path).map_err(|source| crate::Error::Path { action: "replace", path: path.to_path_buf(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(requests: &mut NetworkRequests, name: &str, id: &str, now: u64) -> Asked {
        requests.asked(name, "A", id.to_owned(), vec!["s1".to_owned()], now)
    }

    fn new_id(asked: Asked) -> String {
        match asked {
            Asked::New(request) => request.request_id,
            other => panic!("not a new request: {other:?}"),
        }
    }

    #[test]
    fn one_request_per_destination_counts_repeats_and_record_types() {
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "grant.test", "r1", 1_000));
        assert_eq!(id, "r1");
        match requests.asked("grant.test", "AAAA", "r2".into(), vec![], 1_001) {
            Asked::Repeat(request) => {
                assert_eq!(request.request_id, "r1");
                assert_eq!(request.repeats, 1);
                assert_eq!(request.record_types, ["A", "AAAA"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(requests.pending().len(), 1);
        assert_eq!(requests.pending()[0].expires_at_ms, 1_000 + REQUEST_LIFETIME_MS);
    }

    #[test]
    fn the_queue_is_capped_and_its_overflow_counted_once() {
        let mut requests = NetworkRequests::default();
        for n in 0..MAX_PENDING {
            new_id(ask(&mut requests, &format!("n{n}.test"), &format!("r{n}"), 1));
        }
        assert_eq!(ask(&mut requests, "over.test", "x", 2), Asked::QueueFull { first: true });
        assert_eq!(ask(&mut requests, "over2.test", "y", 2), Asked::QueueFull { first: false });
        assert_eq!(requests.pending().len(), MAX_PENDING);
        assert_eq!(requests.take_overflow(), 2);
        assert_eq!(requests.take_overflow(), 0);
    }

    #[test]
    fn an_answer_makes_one_grant_and_the_destination_is_not_asked_again() {
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "grant.test", "r1", 1_000));
        let (request, grant) = requests
            .answer(&id, NetworkDecision::Allow, GrantScope::Minutes { minutes: 1 }, DecisionSource::rpc("cli"), "g1".into(), 2_000)
            .expect("answerable")
            .expect("pending");
        assert_eq!(request.destination, "grant.test");
        assert_eq!(grant.expires_at_ms, Some(62_000));
        assert_eq!(grant.verdict, EntryVerdict::Allow);
        assert!(requests.pending().is_empty());
        assert_eq!(ask(&mut requests, "grant.test", "r2", 3_000), Asked::Answered);
        assert_eq!(
            requests.answer(&id, NetworkDecision::Deny, GrantScope::Session, DecisionSource::rpc("cli"), "g2".into(), 2_000),
            Ok(None)
        );
        assert_eq!(
            sidecar_request(&grant, 2_500),
            Some(SidecarRequest::Allow { entries: vec!["grant.test".into()], for_ms: Some(59_500) })
        );
        assert_eq!(sidecar_request(&grant, 62_000), None, "a grant whose time is up is not put back");
    }

    #[test]
    fn a_refusal_is_remembered_until_it_is_revoked() {
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "deny.test", "r1", 1));
        let (_, grant) = requests
            .answer(&id, NetworkDecision::Deny, GrantScope::Session, DecisionSource::rpc("vscode"), "g1".into(), 2)
            .expect("answerable")
            .expect("pending");
        assert_eq!(sidecar_request(&grant, 3), Some(SidecarRequest::Deny { entries: vec!["deny.test".into()], for_ms: None }));
        for _ in 0..100 {
            assert_eq!(ask(&mut requests, "deny.test", "again", 4), Asked::Answered);
        }
        requests.hits("deny.test", EntryVerdict::Deny, 1);
        requests.hits("deny.test", EntryVerdict::Allow, 5);
        requests.hits("deny.test", EntryVerdict::Deny, 40);
        assert_eq!(requests.grants()[0].hits, 41, "a tally adds its count; an answer does not count toward a refusal");
        assert_eq!(requests.revoke("g1").map(|grant| grant.destination), Some("deny.test".to_owned()));
        assert!(requests.revoke("g1").is_none());
        new_id(ask(&mut requests, "deny.test", "r2", 5));
    }

    #[test]
    fn only_a_timed_grant_is_ended_by_the_sidecars_expiry() {
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "a.test", "r1", 1));
        requests.answer(&id, NetworkDecision::Allow, GrantScope::Session, DecisionSource::rpc("cli"), "g1".into(), 2).expect("answerable");
        assert!(requests.entry_expired("a.test", EntryVerdict::Allow).is_none(), "a session grant has no timer");
        let id = new_id(ask(&mut requests, "b.test", "r2", 1));
        requests
            .answer(&id, NetworkDecision::Allow, GrantScope::Minutes { minutes: 5 }, DecisionSource::rpc("cli"), "g2".into(), 2)
            .expect("answerable");
        assert!(requests.entry_expired("b.test", EntryVerdict::Deny).is_none());
        assert_eq!(requests.entry_expired("b.test", EntryVerdict::Allow).map(|grant| grant.id), Some("g2".to_owned()));
        assert_eq!(requests.grants().len(), 1);
    }

    #[test]
    fn an_address_request_is_one_service_and_its_grant_opens_that_service_or_says_every_port() {
        let mut requests = NetworkRequests::default();
        let tcp = Service::parse("tcp/8081").expect("service");
        let udp = Service::parse("udp/9999").expect("service");
        let first = match requests.connection_asked("10.9.0.7/32", tcp, "r1".into(), vec![], 1) {
            Asked::New(request) => request,
            other => panic!("{other:?}"),
        };
        assert_eq!((first.destination.as_str(), first.service.as_deref()), ("10.9.0.7/32", Some("tcp/8081")));
        assert!(matches!(requests.connection_asked("10.9.0.7/32", tcp, "x".into(), vec![], 2), Asked::Repeat(_)));
        let second = new_id(requests.connection_asked("10.9.0.7/32", udp, "r2".into(), vec![], 3));
        assert_eq!(requests.pending().len(), 2, "another service of the address is a request of its own");
        let (_, grant) = requests
            .answer("r1", NetworkDecision::Allow, GrantScope::Session, DecisionSource::rpc("cli"), "g1".into(), 4)
            .expect("answerable")
            .expect("pending");
        assert_eq!((grant.service.as_deref(), grant.every_port), (Some("tcp/8081"), false));
        assert_eq!(
            sidecar_request(&grant, 5),
            Some(SidecarRequest::Allow { entries: vec!["10.9.0.7/32 tcp/8081".into()], for_ms: None }),
            "the grant opens exactly the service shown"
        );
        assert_eq!(requests.connection_asked("10.9.0.7/32", tcp, "x".into(), vec![], 6), Asked::Answered);
        assert!(matches!(requests.connection_asked("10.9.0.7/32", udp, "x".into(), vec![], 6), Asked::Repeat(_)));
        let (_, wide) = requests
            .answer(&second, NetworkDecision::AllowEveryPort, GrantScope::Session, DecisionSource::rpc("cli"), "g2".into(), 7)
            .expect("answerable")
            .expect("pending");
        assert_eq!((wide.service.as_deref(), wide.every_port), (None, true));
        assert_eq!(grant_entry(&wide), "10.9.0.7/32");
        let other = Service::parse("tcp/22").expect("service");
        assert_eq!(requests.connection_asked("10.9.0.7/32", other, "x".into(), vec![], 8), Asked::Answered, "every port covers it");
        let name = new_id(ask(&mut requests, "grant.test", "r3", 9));
        let refused =
            requests.answer(&name, NetworkDecision::AllowEveryPort, GrantScope::Session, DecisionSource::rpc("cli"), "g3".into(), 10);
        assert_eq!(refused, Err(AnswerRefusal::EveryPortOfAName { destination: "grant.test".into() }));
        assert_eq!(requests.pending().len(), 1, "the name still waits");
        assert_eq!(requests.revoke("g1").map(|grant| grant_entry(&grant)), Some("10.9.0.7/32 tcp/8081".to_owned()));
    }

    #[test]
    fn an_address_grant_kept_before_services_covers_every_port_and_says_so() {
        // As a file written before grants had a service reads (both fields default).
        let grant = NetworkGrant {
            id: "g1".into(),
            destination: "10.9.0.7/32".into(),
            service: None,
            every_port: false,
            verdict: EntryVerdict::Allow,
            scope: GrantScope::Profile,
            decided_by: DecisionSource::rpc("cli"),
            granted_at_ms: 1,
            expires_at_ms: None,
            hits: 0,
        };
        let requests = NetworkRequests::with_profile_grants(vec![grant]);
        assert!(requests.grants()[0].every_port);
    }

    #[test]
    fn requests_expire_and_undo_puts_an_answer_back() {
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "a.test", "r1", 0));
        let (request, grant) = requests
            .answer(&id, NetworkDecision::Allow, GrantScope::Profile, DecisionSource::rpc("cli"), "g1".into(), 1)
            .expect("answerable")
            .expect("pending");
        assert_eq!(requests.profile_grants().len(), 1);
        requests.undo(request, &grant);
        assert!(requests.grants().is_empty());
        assert!(requests.expire_requests(REQUEST_LIFETIME_MS - 1).is_empty());
        assert_eq!(requests.expire_requests(REQUEST_LIFETIME_MS).len(), 1);
        assert!(requests.pending().is_empty());
    }

    #[test]
    fn scopes_are_checked_and_profile_grants_survive_a_file() {
        assert_eq!(check_scope(GrantScope::Minutes { minutes: 0 }), Err(AnswerRefusal::MinutesOutOfRange { minutes: 0 }));
        assert!(AnswerRefusal::MinutesOutOfRange { minutes: 0 }.to_string().contains("minutes 0"));
        assert!(check_scope(GrantScope::Minutes { minutes: MAX_GRANT_MINUTES + 1 }).is_err());
        assert_eq!(check_scope(GrantScope::Minutes { minutes: 30 }), Ok(GrantScope::Minutes { minutes: 30 }));
        let mut requests = NetworkRequests::default();
        let id = new_id(ask(&mut requests, "keep.test", "r1", 0));
        requests.answer(&id, NetworkDecision::Allow, GrantScope::Profile, DecisionSource::rpc("cli"), "g1".into(), 1).expect("answerable");
        let id = new_id(ask(&mut requests, "short.test", "r2", 0));
        requests.answer(&id, NetworkDecision::Allow, GrantScope::Session, DecisionSource::rpc("cli"), "g2".into(), 1).expect("answerable");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = profile_file::path(dir.path());
        assert_eq!(profile_file::read(&path).expect("no file is no grants"), vec![]);
        profile_file::write(&path, &requests.profile_grants()).expect("write");
        let again = NetworkRequests::with_profile_grants(profile_file::read(&path).expect("read"));
        assert_eq!(again.grants(), requests.profile_grants());
        std::fs::write(&path, "not json").expect("write");
        assert!(profile_file::read(&path).expect_err("not json").chained().contains("network-grants.json"));
    }
}
