//! What the Network Sidecar reports, coordinator side: its events become
//! client events and typed audit records, its failure and return the
//! domain's network state, and what went through the credential endpoints
//! a `credentialUse` record at a session's end. Requests to the egress
//! control of either backend go through [`Domain::egress`].

use super::*;

impl Domain {
    pub fn set_egress_reloader(&self, reloader: EgressReloader) {
        *self.egress_reloader.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reloader);
    }

    /// An event from the Network Sidecar's stream: refused DNS questions and
    /// answers whose addresses were not opened go to subscribers and the
    /// audit store, answered ones to subscribers.
    pub async fn sidecar_event(&self, event: SidecarEvent) {
        let sidecar = DecisionSource::NetworkSidecar;
        match event {
            SidecarEvent::DnsRefused { name, record_type, reason, message, suppressed } => {
                tracing::warn!(%name, %record_type, %reason, "DNS question refused");
                if reason == lazaret_protocol::sidecar::DnsRefusal::Denied {
                    self.network_hits(&name, lazaret_protocol::EntryVerdict::Deny, 1);
                }
                let refused = AuditEvent::DnsRefused { name: name.clone(), record_type: record_type.clone(), refusal: reason, suppressed };
                let record = network_record(refused, Outcome::DnsRefused, sidecar, Some(message.clone()));
                self.emit(Event::NetworkDnsRefused { name, record_type, reason, message, suppressed });
                self.audit(record).await;
            }
            SidecarEvent::DnsAnswerRefused { name, record_type, addresses, reason, message, suppressed } => {
                tracing::warn!(%name, %record_type, %reason, ?addresses, "a DNS answer's addresses were not opened");
                let refused = AuditEvent::DnsAnswerRefused {
                    name: name.clone(),
                    record_type: record_type.clone(),
                    addresses: addresses.clone(),
                    refusal: reason,
                    suppressed,
                };
                let record = network_record(refused, Outcome::DnsAnswerRefused, sidecar, Some(message.clone()));
                self.emit(Event::NetworkDnsAnswerRefused { name, record_type, addresses, reason, message, suppressed });
                self.audit(record).await;
            }
            SidecarEvent::DnsResolved { name, record_type, addresses, suppressed: _ } => {
                self.network_hits(&name, lazaret_protocol::EntryVerdict::Allow, 1);
                self.emit(Event::NetworkDnsResolved { name, record_type, addresses })
            }
            SidecarEvent::DnsHeld { name, record_type, hold_ms: _, suppressed: _ } => self.network_question_held(name, record_type).await,
            SidecarEvent::EntriesExpired { allow, deny } => self.network_entries_expired(allow, deny).await,
            SidecarEvent::DnsTally { answered, denied } => {
                for NameCount { name, count } in answered {
                    self.network_hits(&name, lazaret_protocol::EntryVerdict::Allow, count);
                }
                for NameCount { name, count } in denied {
                    self.network_hits(&name, lazaret_protocol::EntryVerdict::Deny, count);
                }
            }
            SidecarEvent::ConnectBlocked { address, protocol, port, suppressed: _ } => {
                self.network_connection_blocked(&address, &protocol, port).await
            }
            SidecarEvent::CredentialRejected { origin, status, suppressed } => {
                tracing::warn!(%origin, status, "a credential endpoint's origin refused the key");
                let why = format!("{origin} answered {status}: the key may be revoked or wrong");
                let rejected = AuditEvent::CredentialRejected { origin, status, suppressed };
                self.audit(network_record(rejected, Outcome::CredentialRejected, sidecar, Some(why))).await;
            }
            SidecarEvent::CredentialWithheld { origin, method, status, part, suppressed } => {
                tracing::warn!(%origin, %method, ?status, %part, "a credential endpoint's origin answered with the key: withheld");
                let what = match part {
                    WithheldPart::Head => "its head was withheld (the sandbox got a 502)",
                    WithheldPart::Body => "its body was cut before the key (the connection closed)",
                };
                let shown = status.map_or_else(|| "-".to_owned(), |status| status.to_string());
                let why = format!("{origin}'s answer ({shown}) to {method} carried the key in its {part}: {what}");
                let withheld = AuditEvent::CredentialWithheld { origin, method, status, part, suppressed };
                self.audit(network_record(withheld, Outcome::CredentialWithheld, sidecar, Some(why))).await;
            }
        }
    }

    /// Sends one request to the domain's egress control (the Network
    /// Sidecar, or the policy object on the cluster).
    pub(super) async fn sidecar(&self, request: SidecarRequest) -> RpcResult<NetworkPolicy> {
        self.egress(request).await.map_err(|error| rpc_error(error_code::NETWORK_FAILED, crate::error::chained(&error)))
    }

    /// Sends one request to the domain's egress control (the Network
    /// Sidecar, or the cluster's policy object), typed.
    pub(super) async fn egress(&self, request: SidecarRequest) -> std::result::Result<NetworkPolicy, crate::backend::EgressError> {
        self.backend.egress(&self.resolved, self.network_error(), request).await
    }

    /// Why the sandbox has no working network now, if it has none.
    pub fn network_error(&self) -> Option<String> {
        self.network_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The sidecar stopped (issue 33 finding 5: its death went unnoticed):
    /// every client hears it, `domain/status` says it.
    pub fn network_failed(&self, message: String) {
        tracing::error!(%message, "the Network Sidecar stopped for good");
        self.record_network_error(&message);
        self.emit(Event::NetworkFailed { message, restarting: false });
    }

    /// The Network Sidecar stopped and its supervisor is starting it again
    /// (`networkFailed` with `restarting`; `network_restored` follows).
    pub fn network_restarting(&self, message: String) {
        tracing::error!(%message, "the Network Sidecar stopped; it is being started again");
        self.record_network_error(&message);
        self.emit(Event::NetworkFailed { message, restarting: true });
    }

    /// What `domain/status` reports as the network's error until it is back.
    pub(super) fn record_network_error(&self, message: &str) {
        *self.network_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(message.to_owned());
    }

    /// The sidecar was started again and has the domain's policy back: the
    /// grants go in force again, and every client hears the network is back.
    pub async fn network_restored(&self) -> crate::Result<()> {
        *self.network_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        self.put_grants_in_force().await?;
        let message = "the Network Sidecar was started again with the domain's policy (learned addresses start afresh)".to_owned();
        tracing::info!("{message}");
        self.emit(Event::NetworkRestored { message });
        Ok(())
    }

    /// One `credentialUse` audit record (at a session's end) with what went
    /// through each credential endpoint since the last one: requests by
    /// status class, refusals of the key, failures and bytes. Nothing when
    /// the profile has no credentials or nothing went through.
    pub(super) async fn record_credential_use(&self, session_id: &str) {
        if self.resolved.credentials.is_empty() {
            return;
        }
        let now = match self.sidecar(SidecarRequest::Show {}).await {
            Ok(policy) => policy.credentials,
            Err(error) => {
                tracing::warn!(error = %error.message(), "cannot read the credential endpoints' counts");
                return;
            }
        };
        let endpoints = {
            let mut counted = self.credential_counted.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut endpoints = Vec::new();
            for status in &now {
                let before = counted.iter().find(|old| old.origin == status.origin && old.port == status.port).cloned().unwrap_or_default();
                let delta = |now: u64, then: u64| now.saturating_sub(then);
                let used = CredentialUse {
                    origin: status.origin.clone(),
                    status_1xx: delta(status.status_1xx, before.status_1xx),
                    status_2xx: delta(status.status_2xx, before.status_2xx),
                    status_3xx: delta(status.status_3xx, before.status_3xx),
                    status_4xx: delta(status.status_4xx, before.status_4xx),
                    status_5xx: delta(status.status_5xx, before.status_5xx),
                    rejected: delta(status.rejected, before.rejected),
                    failed: delta(status.failed, before.failed),
                    bytes_sent: delta(status.bytes_sent, before.bytes_sent),
                    bytes_received: delta(status.bytes_received, before.bytes_received),
                    withheld: delta(status.withheld, before.withheld),
                };
                let requests = used.status_1xx + used.status_2xx + used.status_3xx + used.status_4xx + used.status_5xx;
                if requests + used.failed > 0 {
                    endpoints.push(used);
                }
            }
            *counted = now;
            endpoints
        };
        if !endpoints.is_empty() {
            let used = AuditEvent::CredentialUse { session_id: session_id.to_owned(), endpoints };
            self.audit(network_record(used, Outcome::CredentialUse, DecisionSource::NetworkSidecar, None)).await;
        }
    }
}
