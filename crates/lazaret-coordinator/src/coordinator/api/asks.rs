//! Network requests and rules, coordinator side (`[network] ask`): what
//! the Network Sidecar reports of held questions and expired entries
//! becomes requests in the one approval queue, audit records and events;
//! answers and revocations from any client become sidecar entries. The
//! state itself is [`crate::network_requests`] (pure); this module only
//! carries its decisions out.

use lazaret_core::egress::EgressRule;
use lazaret_core::time::now_ms;
use lazaret_protocol::sidecar::SidecarRequest;
use lazaret_protocol::{
    error_code, AuditEvent, AuditGrant, AutoApproveListing, DecisionSource, EntryVerdict, Event, GrantScope, NetworkDecision, NetworkGrant,
    Outcome, PendingItem, Rules,
};

use lazaret_protocol::sidecar::Service;

use super::{network_record, rpc_error, Domain, RpcResult};
use crate::error::Context;
use crate::network_requests::{self, profile_file, Asked, NetworkRequests};

/// The prefix of the ids `rules/list` gives auto-approve rules.
const AUTO_APPROVE_ID: &str = "auto-";

impl Domain {
    fn network_requests(&self) -> std::sync::MutexGuard<'_, NetworkRequests> {
        self.network_requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn revoked_auto_approve(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<usize>> {
        self.revoked_auto_approve.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Indexes of the auto-approve rules revoked in this run.
    pub fn revoked_auto_approve_rules(&self) -> Vec<usize> {
        self.revoked_auto_approve().iter().copied().collect()
    }

    fn grants_file(&self) -> std::path::PathBuf {
        profile_file::path(&self.resolved.domain.domain_dir)
    }

    /// At start, once the sidecar runs: the grants kept for the profile
    /// (Domain Root) and, with `ask`, the hold of questions for a grant.
    pub async fn start_network_requests(&self) -> crate::Result<()> {
        let path = self.grants_file();
        let kept = tokio::task::spawn_blocking(move || profile_file::read(&path))
            .await?
            .context("cannot read the network grants kept for the profile (remove the file to start without them)")?;
        *self.network_requests() = NetworkRequests::with_profile_grants(kept);
        if self.resolved.ask {
            self.egress(SidecarRequest::Hold { ms: self.resolved.ask_hold_seconds * 1000 }).await?;
        }
        self.put_grants_in_force().await
    }

    /// Puts every grant in force on the sidecar (at start, after a reload of
    /// the configuration or a restart of the sidecar).
    pub async fn put_grants_in_force(&self) -> crate::Result<()> {
        let requests = self.network_requests().sidecar_requests(now_ms());
        for request in requests {
            self.egress(request).await?;
        }
        Ok(())
    }

    /// The sidecar holds (or, its hold full, refused) a question for a name
    /// on no allow entry.
    pub(super) async fn network_question_held(&self, name: String, record_type: String) {
        // The sidecar holds only names an allow entry could hold (D19); one
        // that is not (an address, one label) is never offered.
        let plain = matches!(name.parse::<EgressRule>(), Ok(EgressRule::Domain(parsed)) if parsed == name && !parsed.starts_with("*."));
        if !plain {
            return tracing::warn!(%name, "the Network Sidecar held a question for what is not a plain DNS name: not asked");
        }
        self.ask(Question::Name { name, record_type }, "no allow entry covers it; waiting for a human").await
    }

    /// Makes `question` a network request, or counts a repeat of the
    /// pending one; `reason` goes in the audit record of a new one.
    async fn ask(&self, question: Question, reason: &str) {
        let sessions: Vec<String> = self.sessions().by_id.keys().cloned().collect();
        let request_id = match lazaret_core::ids::random_hex(8) {
            Ok(hex) => format!("net-{hex}"),
            Err(error) => return tracing::error!(%error, "cannot mint a network request id"),
        };
        // The destination, and the name's record type or the address's service.
        let (destination, record_type, service, asked) = match question {
            Question::Name { name, record_type } => {
                let asked = self.network_requests().asked(&name, &record_type, request_id, sessions, now_ms());
                (name, Some(record_type), None, asked)
            }
            Question::Connection { network, service } => {
                let asked = self.network_requests().connection_asked(&network, service, request_id, sessions, now_ms());
                (network, None, Some(service.to_string()), asked)
            }
        };
        match asked {
            Asked::New(mut request) => {
                request.domain_hash = self.resolved.domain.domain_hash.clone();
                request.profile = self.resolved.profile.clone();
                tracing::info!(%destination, ?record_type, ?service, request = %request.request_id, "network request pending");
                let asked = AuditEvent::NetworkAsked { request_id: request.request_id.clone(), destination, record_type, service };
                let record = network_record(asked, Outcome::NetworkAsked, DecisionSource::NetworkSidecar, Some(reason.to_owned()));
                self.emit(Event::NetworkRequestPending { request });
                self.audit(record).await;
            }
            Asked::Repeat(mut request) => {
                request.domain_hash = self.resolved.domain.domain_hash.clone();
                request.profile = self.resolved.profile.clone();
                self.emit(Event::NetworkRequestPending { request });
            }
            Asked::Answered => {}
            Asked::QueueFull { first } => {
                if first {
                    let reason = format!(
                        "{} network requests are pending, as many as a domain takes: {destination} was refused without asking \
                         (later ones are counted in the next record)",
                        network_requests::MAX_PENDING
                    );
                    tracing::warn!(%reason);
                    let full = AuditEvent::NetworkQueueFull { destination: Some(destination), record_type, service, more_refused: None };
                    self.audit(network_record(full, Outcome::NetworkQueueFull, DecisionSource::Policy, Some(reason))).await;
                }
            }
        }
    }

    /// The sandbox connected straight to an address no entry covers (the
    /// sidecar reports it only while questions are held): the address, as a
    /// host network (`10.9.0.7/32`), becomes a request like a held name, its
    /// "record types" what was tried (`tcp/8080`). Approving it allows that
    /// network; the connection itself failed already, its next try goes through.
    pub(super) async fn network_connection_blocked(&self, address: &str, protocol: &str, port: Option<u16>) {
        if !self.resolved.ask {
            return;
        }
        let Some((network, service)) = blocked_destination(address, protocol, port) else {
            return tracing::warn!(%address, %protocol, "the Network Sidecar reported a blocked connection that is not one");
        };
        let reason = "no entry covers the address's protocol and port: the connection was refused; asking a human whether to allow it";
        self.ask(Question::Connection { network, service }, reason).await
    }

    /// A request left the queue: if it had overflowed, the audit trail says
    /// how many questions were refused without asking meanwhile.
    async fn report_overflow(&self) {
        let overflow = self.network_requests().take_overflow();
        if overflow > 1 {
            let more = overflow - 1;
            let reason = format!("{more} more destinations were refused without asking while the queue was full");
            let full = AuditEvent::NetworkQueueFull { destination: None, record_type: None, service: None, more_refused: Some(more) };
            self.audit(network_record(full, Outcome::NetworkQueueFull, DecisionSource::Policy, Some(reason))).await;
        }
    }

    /// The sidecar removed timed entries whose time ran out.
    pub(super) async fn network_entries_expired(&self, allow: Vec<String>, deny: Vec<String>) {
        let ended: Vec<(String, EntryVerdict)> = allow
            .into_iter()
            .map(|entry| (entry, EntryVerdict::Allow))
            .chain(deny.into_iter().map(|entry| (entry, EntryVerdict::Deny)))
            .collect();
        for (entry, verdict) in ended {
            let grant = self.network_requests().entry_expired(&entry, verdict);
            let Some(grant) = grant else { continue };
            tracing::info!(destination = %grant.destination, grant = %grant.id, "network grant expired");
            let reason = format!("{} for {} ended", verdict_word(grant.verdict), grant.scope);
            let expired = AuditEvent::GrantExpired { grant: audit_grant(&grant) };
            self.audit(network_record(expired, Outcome::NetworkExpired, DecisionSource::Timeout, Some(reason))).await;
            self.emit(Event::RulesChanged {});
        }
    }

    /// Counts `count` questions answered or refused under a grant.
    pub(super) fn network_hits(&self, name: &str, verdict: EntryVerdict, count: u64) {
        self.network_requests().hits(name, verdict, count);
    }

    /// Ends network requests nobody answered in time; runs until teardown.
    pub async fn expire_network_requests(&self) {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let expired = self.network_requests().expire_requests(now_ms());
            for request in expired {
                let reason = format!("nobody answered within {} minutes", network_requests::REQUEST_LIFETIME_MS / 60_000);
                let expired = AuditEvent::NetworkRequestExpired {
                    request_id: request.request_id.clone(),
                    destination: request.destination.clone(),
                    record_types: request.record_types.clone(),
                    service: request.service.clone(),
                };
                let record = network_record(expired, Outcome::NetworkExpired, DecisionSource::Timeout, Some(reason));
                self.emit(Event::NetworkRequestResolved {
                    request_id: request.request_id,
                    outcome: Outcome::NetworkExpired,
                    decided_by: DecisionSource::Timeout,
                    scope: None,
                });
                self.audit(record).await;
                self.report_overflow().await;
            }
        }
    }

    /// Everything waiting for a human, oldest first.
    pub(super) fn pending_items(&self) -> Vec<PendingItem> {
        let mut items: Vec<PendingItem> = self.broker.pending().into_iter().map(PendingItem::Command).collect();
        items.extend(self.network_requests().pending().into_iter().map(|mut request| {
            request.domain_hash = self.resolved.domain.domain_hash.clone();
            request.profile = self.resolved.profile.clone();
            PendingItem::Network(request)
        }));
        items.sort_by_key(PendingItem::received_at_ms);
        items
    }

    /// Answers network request `request_id`: the grant goes in force on the
    /// sidecar (a held question is answered), is kept for the profile if
    /// asked, audited and announced. A failure puts the request back.
    pub(super) async fn respond_network(
        &self,
        request_id: &str,
        decision: NetworkDecision,
        scope: GrantScope,
        client: Option<String>,
    ) -> RpcResult<bool> {
        let scope = network_requests::check_scope(scope).map_err(|refusal| rpc_error(error_code::INVALID_VALUE, refusal.to_string()))?;
        let decided_by = DecisionSource::Rpc { client };
        let grant_id = lazaret_core::ids::random_hex(6)
            .map(|hex| format!("grant-{hex}"))
            .map_err(|error| rpc_error(error_code::INVALID_VALUE, format!("cannot mint a grant id: {error}")))?;
        let now = now_ms();
        let answered = self
            .network_requests()
            .answer(request_id, decision, scope, decided_by.clone(), grant_id, now)
            .map_err(|refusal| rpc_error(error_code::INVALID_VALUE, refusal.to_string()))?;
        let Some((request, grant)) = answered else {
            return Err(rpc_error(
                error_code::NETWORK_REQUEST_NOT_PENDING,
                format!("network request {request_id} is not pending (unknown, answered or expired)"),
            ));
        };
        let put = match network_requests::sidecar_request(&grant, now) {
            Some(sidecar_request) => self.egress(sidecar_request).await.map(|_| ()).map_err(crate::Error::from),
            None => Ok(()),
        };
        let kept = match (&put, scope) {
            (Ok(()), GrantScope::Profile) => self.keep_profile_grants().await,
            _ => Ok(()),
        };
        if let Err(error) = put.and(kept) {
            self.network_requests().undo(request, &grant);
            if grant.scope == GrantScope::Profile {
                // Rollback: the entry may be in force on the sidecar while
                // the grant is not kept.
                let entry = network_requests::grant_entry(&grant);
                if let Err(revoke) = self.egress(SidecarRequest::Revoke { entries: vec![entry.clone()] }).await {
                    tracing::error!(
                        %entry,
                        error = %crate::error::chained(&revoke),
                        "rollback of an answer that did not take: the entry could not be revoked on the sidecar"
                    );
                }
            }
            return Err(rpc_error(
                error_code::NETWORK_FAILED,
                format!("the answer did not take, the request still waits: {}", error.chained()),
            ));
        }
        let outcome = match decision {
            NetworkDecision::Allow | NetworkDecision::AllowEveryPort => Outcome::NetworkGranted,
            NetworkDecision::Deny => Outcome::NetworkRefused,
        };
        tracing::info!(destination = %grant.destination, %outcome, %decided_by, scope = %scope, "network request answered");
        let answered = AuditEvent::NetworkAnswered { request_id: request.request_id.clone(), grant: audit_grant(&grant) };
        let reason = format!("{} for {scope}", verdict_word(grant.verdict));
        self.audit(network_record(answered, outcome, decided_by.clone(), Some(reason))).await;
        self.emit(Event::NetworkRequestResolved { request_id: request.request_id, outcome, decided_by, scope: Some(scope) });
        self.emit(Event::RulesChanged {});
        self.report_overflow().await;
        Ok(true)
    }

    /// Writes the grants kept for the profile to the Domain Root.
    async fn keep_profile_grants(&self) -> crate::Result<()> {
        let grants = self.network_requests().profile_grants();
        let path = self.grants_file();
        tokio::task::spawn_blocking(move || profile_file::write(&path, &grants)).await?
    }

    /// Every rule and grant, with the ids `rules/revoke` takes.
    pub(super) fn rules(&self) -> Rules {
        let revoked = self.revoked_auto_approve();
        let auto_approve = self
            .resolved
            .auto_approve_entries
            .iter()
            .enumerate()
            .filter(|(index, _)| !revoked.contains(index))
            .map(|(index, (entry, source))| AutoApproveListing {
                id: format!("{AUTO_APPROVE_ID}{}", index + 1),
                entry: entry.clone(),
                source: source.clone(),
            })
            .collect();
        Rules { auto_approve, network: self.network_requests().grants() }
    }

    /// Revokes rule or grant `id` at once, audited.
    pub(super) async fn revoke_rule(&self, id: &str, client: Option<String>) -> RpcResult<bool> {
        let decided_by = DecisionSource::Rpc { client };
        if let Some(index) = id.strip_prefix(AUTO_APPROVE_ID).and_then(|number| number.parse::<usize>().ok()).and_then(|n| n.checked_sub(1))
        {
            let Some((entry, _)) = self.resolved.auto_approve_entries.get(index).cloned() else {
                return Err(unknown_rule(id));
            };
            // Revoked already: as unknown as a rule that never was.
            if !self.revoked_auto_approve().insert(index) {
                return Err(unknown_rule(id));
            }
            tracing::info!(%entry, "auto-approve rule revoked for this run");
            let revoked = AuditEvent::AutoApproveRevoked { rule_id: Some(id.to_owned()), entry };
            let reason = Some("revoked for this run of the domain (the configuration file is unchanged)".to_owned());
            self.audit(network_record(revoked, Outcome::NetworkRevoked, decided_by, reason)).await;
            self.emit(Event::RulesChanged {});
            return Ok(true);
        }
        let grant = self.network_requests().revoke(id).ok_or_else(|| unknown_rule(id))?;
        let revoked = self.egress(SidecarRequest::Revoke { entries: vec![network_requests::grant_entry(&grant)] }).await;
        let kept = match (&revoked, grant.scope) {
            (Ok(_), GrantScope::Profile) => self.keep_profile_grants().await,
            _ => Ok(()),
        };
        if let Err(error) = revoked.map(|_| ()).map_err(crate::Error::from).and(kept) {
            self.network_requests().restore(grant);
            return Err(rpc_error(error_code::NETWORK_FAILED, format!("the revocation did not take: {}", error.chained())));
        }
        tracing::info!(destination = %grant.destination, grant = %grant.id, "network grant revoked");
        let reason = format!("{} for {} revoked", verdict_word(grant.verdict), grant.scope);
        let revoked = AuditEvent::GrantRevoked { grant: audit_grant(&grant) };
        self.audit(network_record(revoked, Outcome::NetworkRevoked, decided_by, Some(reason))).await;
        self.emit(Event::RulesChanged {});
        Ok(true)
    }
}

fn unknown_rule(id: &str) -> jsonrpsee::types::ErrorObjectOwned {
    rpc_error(error_code::RULE_NOT_FOUND, format!("no rule or grant `{id}` (revoked or expired already? `lazaret rules` lists them)"))
}

fn verdict_word(verdict: EntryVerdict) -> &'static str {
    match verdict {
        EntryVerdict::Allow => "allowed",
        EntryVerdict::Deny => "refused",
    }
}

/// A grant as its audit records name it.
fn audit_grant(grant: &NetworkGrant) -> AuditGrant {
    AuditGrant {
        id: Some(grant.id.clone()),
        destination: grant.destination.clone(),
        service: grant.service.clone(),
        every_port: grant.every_port,
        verdict: grant.verdict,
        scope: grant.scope,
    }
}

/// What the sandbox asked for that no entry covers.
enum Question {
    /// A DNS question the sidecar held.
    Name { name: String, record_type: String },
    /// A direct connection to one service of an address's host network.
    Connection { network: String, service: Service },
}

/// The host network and service of a blocked connection to `address`
/// (`10.9.0.7/32` and `tcp/8080`); `None` unless `address` is an IP address
/// and `protocol` and `port` a service as the sidecar reports them (`tcp` or
/// `udp` with a port, another protocol's number without one).
fn blocked_destination(address: &str, protocol: &str, port: Option<u16>) -> Option<(String, Service)> {
    let address: std::net::IpAddr = address.parse().ok()?;
    let service = match (protocol, port) {
        ("tcp" | "udp", Some(port)) => Service::parse(&format!("{protocol}/{port}")).ok()?,
        (number, None) => Service::parse(number).ok()?,
        _ => return None,
    };
    let length = if address.is_ipv4() { 32 } else { 128 };
    Some((format!("{address}/{length}"), service))
}

#[cfg(test)]
mod tests {
    use super::blocked_destination;

    #[test]
    fn a_blocked_connection_asks_for_one_service_of_its_host_network() {
        let shown =
            |address, protocol, port| blocked_destination(address, protocol, port).map(|(network, service)| (network, service.to_string()));
        assert_eq!(shown("10.9.0.7", "tcp", Some(8080)), Some(("10.9.0.7/32".into(), "tcp/8080".into())));
        assert_eq!(shown("fd00::7", "udp", Some(53)), Some(("fd00::7/128".into(), "udp/53".into())));
        assert_eq!(shown("fd00::7", "132", None), Some(("fd00::7/128".into(), "132".into())));
        for (address, protocol, port) in [
            ("grant.test", "tcp", Some(80)),
            ("10.9.0.7/8", "tcp", Some(80)),
            ("10.9.0.7", "tcp\n", Some(80)),
            ("10.9.0.7", "tcp", None),
            ("10.9.0.7", "sctp", None),
            ("10.9.0.7", "300", None),
            ("10.9.0.7", "+6", None),
            ("10.9.0.7", "132", Some(5)),
        ] {
            assert_eq!(shown(address, protocol, port), None, "{address:?} {protocol:?} {port:?}");
        }
    }
}
