//! Layout v4's audit records and their conversion to typed records (v5).
//!
//! v4 kept every record in one escalation-shaped form: a network event was
//! an argv of words (`["dns", NAME, TYPE]`, `["credential", ORIGIN,
//! STATUS]`, a grant as `["network", ENTRY, VERDICT, SCOPE]`), with the
//! session `-` and a request id made up as `network-<ms>-<n>` unless a
//! network request's id (`net-<hex>`) stood in for it. [`to_v5`] reads each
//! shape the coordinator of v4 wrote back into its kind; a record it cannot
//! read as one is kept as `legacy`, every field as it was.

use std::net::IpAddr;

use lazaret_protocol::sidecar::{AnswerRefusal, DnsRefusal, PrivateAnswers, Service, WithheldPart};
use lazaret_protocol::{
    AuditEvent, AuditGrant, AuditRecord, CredentialUse, DecisionSource, EntryVerdict, EscalationAudit, GrantScope, Outcome, PolicyAction,
};
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

/// Sequence number -> stored bytes (`<hash>\n<json>`), the JSON a [`V4Record`].
pub(crate) const AUDIT_V4: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_v4");

/// An audit record as layouts v3 and v4 wrote it: the fields, their order
/// and their omissions of `lazaret_protocol::AuditRecord` until v5, so that
/// the v3 to v4 step still writes exactly what v4 wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V4Record {
    pub sequence: u64,
    pub previous_hash: String,
    pub hash: String,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    pub session_id: String,
    pub verified: bool,
    pub outcome: Outcome,
    pub reason: Option<String>,
    pub decided_by: Option<DecisionSource>,
    pub justification: Option<String>,
    pub requested_argv: Vec<String>,
    pub executed_argv: Option<Vec<String>>,
    pub exit_status: Option<i32>,
    pub received_at_ms: u64,
    pub decided_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
}

/// Whether `json` is a record of layout v4.
pub(crate) fn readable(json: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<V4Record>(json).map(|_| ()).map_err(|error| format!("it is not a v4 audit record: {error}"))
}

/// The typed record of a v4 record (chain fields left for the caller), and
/// whether it was kept as `legacy`.
pub(crate) fn to_v5(old: V4Record) -> (AuditRecord, bool) {
    let (event, reason, legacy) = match typed(&old) {
        Some((event, reason)) => (event, reason, false),
        None => {
            let legacy = EscalationAudit {
                request_id: old.request_id,
                client_request_id: old.client_request_id,
                session_id: old.session_id,
                verified: old.verified,
                justification: old.justification,
                requested_argv: old.requested_argv,
                executed_argv: old.executed_argv,
                exit_status: old.exit_status,
            };
            (AuditEvent::Legacy(legacy), old.reason, true)
        }
    };
    let record = AuditRecord {
        sequence: old.sequence,
        previous_hash: old.previous_hash,
        hash: String::new(),
        event,
        outcome: old.outcome,
        reason,
        decided_by: old.decided_by,
        received_at_ms: old.received_at_ms,
        decided_at_ms: old.decided_at_ms,
        finished_at_ms: old.finished_at_ms,
    };
    (record, legacy)
}

/// The kind of `old` and its reason, unless it is of no known kind.
fn typed(old: &V4Record) -> Option<(AuditEvent, Option<String>)> {
    if network_shaped(old) {
        if let Some(typed) = network(old) {
            return Some(typed);
        }
        // A network record of a shape not known here (the session `-` is
        // not one a request can claim and have verified).
        if old.session_id == "-" {
            return None;
        }
    }
    if refused_connection(old) {
        return Some((AuditEvent::ConnectionRefused { connections: refused_connections(old.reason.as_deref()) }, old.reason.clone()));
    }
    escalation_outcome(old.outcome).then(|| {
        let escalation = EscalationAudit {
            request_id: old.request_id.clone(),
            client_request_id: old.client_request_id.clone(),
            session_id: old.session_id.clone(),
            verified: old.verified,
            justification: old.justification.clone(),
            requested_argv: old.requested_argv.clone(),
            executed_argv: old.executed_argv.clone(),
            exit_status: old.exit_status,
        };
        (AuditEvent::Escalation(escalation), old.reason.clone())
    })
}

/// What every network record of v4 had: a made-up (`network-`) or a
/// network request's (`net-`) id, verified, and none of an escalation's own
/// fields.
fn network_shaped(old: &V4Record) -> bool {
    (old.request_id.starts_with(MADE_UP_ID) || old.request_id.starts_with(REQUEST_ID))
        && old.verified
        && old.client_request_id.is_none()
        && old.justification.is_none()
        && old.executed_argv.is_none()
        && old.exit_status.is_none()
}

/// v4's made-up ids of network records, `network-<ms>-<n>`.
const MADE_UP_ID: &str = "network-";
/// The coordinator's ids of network requests, `net-<hex>`.
const REQUEST_ID: &str = "net-";

/// A connection that never made a request: v4 wrote `-` for both ids and nothing else.
fn refused_connection(old: &V4Record) -> bool {
    old.request_id == "-"
        && old.session_id == "-"
        && old.outcome == Outcome::Rejected
        && !old.verified
        && old.client_request_id.is_none()
        && old.requested_argv.is_empty()
        && old.executed_argv.is_none()
        && old.exit_status.is_none()
        && old.justification.is_none()
        && old.decided_by.is_none()
}

/// `N more connections refused (KIND) within S s; ...`: N; one otherwise.
fn refused_connections(reason: Option<&str>) -> u64 {
    reason.and_then(|reason| reason.split_once(" more connections refused (")).and_then(|(count, _)| count.parse().ok()).unwrap_or(1)
}

fn escalation_outcome(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Rejected | Outcome::Auto | Outcome::Approved | Outcome::Edited | Outcome::Denied | Outcome::Aborted | Outcome::TimedOut
    )
}

/// A network record of v4, read by the shape each of its writers gave it.
fn network(old: &V4Record) -> Option<(AuditEvent, Option<String>)> {
    let argv: Vec<&str> = old.requested_argv.iter().map(String::as_str).collect();
    let request = old.request_id.starts_with(REQUEST_ID).then(|| old.request_id.clone());
    let reason = old.reason.clone();
    let unclaimed = old.session_id == "-";
    let event = match (old.outcome, argv.as_slice(), request) {
        (Outcome::DnsRefused, ["dns", name, record_type, rest @ ..], None) if unclaimed => {
            let suppressed = suppressed(rest, "refusals")?;
            let (word, message) = reason?.split_once(": ").map(|(word, message)| (word.to_owned(), message.to_owned()))?;
            let refusal = DnsRefusal::parse(&word)?;
            let event = AuditEvent::DnsRefused { name: (*name).to_owned(), record_type: (*record_type).to_owned(), refusal, suppressed };
            return Some((event, Some(message)));
        }
        (Outcome::DnsAnswerRefused, ["dns", name, record_type, rest @ ..], None) if unclaimed => {
            let (addresses, suppressed) = match rest.split_last() {
                Some((last, addresses)) if last.starts_with("(+") => (addresses, suppressed(&[last], "refusals")?),
                _ => (rest, None),
            };
            if addresses.is_empty() || addresses.iter().any(|address| address.parse::<IpAddr>().is_err()) {
                return None;
            }
            let (word, message) = reason?.split_once(": ").map(|(word, message)| (word.to_owned(), message.to_owned()))?;
            let event = AuditEvent::DnsAnswerRefused {
                name: (*name).to_owned(),
                record_type: (*record_type).to_owned(),
                addresses: addresses.iter().map(|address| (*address).to_owned()).collect(),
                refusal: AnswerRefusal::parse(&word)?,
                suppressed,
            };
            return Some((event, Some(message)));
        }
        (Outcome::CredentialRejected, ["credential", origin, status, rest @ ..], None) if unclaimed => AuditEvent::CredentialRejected {
            origin: (*origin).to_owned(),
            status: status.parse().ok()?,
            suppressed: suppressed(rest, "events")?,
        },
        (Outcome::CredentialWithheld, ["credential", origin, method, status, part, rest @ ..], None) if unclaimed => {
            AuditEvent::CredentialWithheld {
                origin: (*origin).to_owned(),
                method: (*method).to_owned(),
                status: if *status == "-" { None } else { Some(status.parse().ok()?) },
                part: WithheldPart::parse(part)?,
                suppressed: suppressed(rest, "events")?,
            }
        }
        (Outcome::CredentialUse, ["credential-use", pairs @ ..], None) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
            let endpoints = pairs.chunks(2).map(|pair| credential_use(pair[0], pair[1])).collect::<Option<Vec<_>>>()?;
            AuditEvent::CredentialUse { session_id: old.session_id.clone(), endpoints }
        }
        (Outcome::NetworkAllowed | Outcome::NetworkDenied | Outcome::Rejected, ["net", action @ ("allow" | "deny"), rule], None)
            if unclaimed =>
        {
            let action = if *action == "allow" { PolicyAction::Allow } else { PolicyAction::Deny };
            let expected = if action == PolicyAction::Allow { Outcome::NetworkAllowed } else { Outcome::NetworkDenied };
            if old.outcome != expected && old.outcome != Outcome::Rejected {
                return None;
            }
            AuditEvent::PolicyChanged { action, entries: vec![(*rule).to_owned()], private_answers: None }
        }
        (Outcome::NetworkReloaded | Outcome::Rejected, ["net", "reload", entries @ .., last], None) if unclaimed => {
            let private_answers = PrivateAnswers::parse(last.strip_prefix("private_answers=")?)?;
            AuditEvent::PolicyChanged {
                action: PolicyAction::Reload,
                entries: entries.iter().map(|entry| (*entry).to_owned()).collect(),
                private_answers: Some(private_answers),
            }
        }
        (Outcome::NetworkAsked, ["network", destination, asked], Some(request_id)) if unclaimed => {
            let (record_type, service) = asked_as(destination, asked)?;
            AuditEvent::NetworkAsked { request_id, destination: (*destination).to_owned(), record_type, service }
        }
        (Outcome::NetworkQueueFull, ["network", "queue"], None) if unclaimed => {
            let count = reason.as_deref()?.split_once(" more destinations were refused without asking")?.0.parse().ok()?;
            AuditEvent::NetworkQueueFull { destination: None, record_type: None, service: None, more_refused: Some(count) }
        }
        (Outcome::NetworkQueueFull, ["network", destination, asked], None) if unclaimed => {
            let (record_type, service) = asked_as(destination, asked)?;
            AuditEvent::NetworkQueueFull { destination: Some((*destination).to_owned()), record_type, service, more_refused: None }
        }
        (Outcome::NetworkExpired, ["network", destination, record_types @ ..], Some(request_id))
            if unclaimed && !record_types.is_empty() =>
        {
            // An address's request was for one service, its "record types".
            let service = match (destination.contains('/'), record_types) {
                (true, [service]) => asked_as(destination, service)?.1,
                (true, _) => return None,
                (false, _) => None,
            };
            AuditEvent::NetworkRequestExpired {
                request_id,
                destination: (*destination).to_owned(),
                record_types: record_types.iter().map(|record_type| (*record_type).to_owned()).collect(),
                service,
            }
        }
        (Outcome::NetworkExpired, ["network", grant @ ..], None) if unclaimed => AuditEvent::GrantExpired { grant: grant_of(grant)? },
        (Outcome::NetworkGranted | Outcome::NetworkRefused, ["network", grant @ ..], Some(request_id)) if unclaimed => {
            let grant = grant_of(grant)?;
            let expected = if grant.verdict == EntryVerdict::Allow { Outcome::NetworkGranted } else { Outcome::NetworkRefused };
            if old.outcome != expected {
                return None;
            }
            AuditEvent::NetworkAnswered { request_id, grant }
        }
        (Outcome::NetworkRevoked, ["auto_approve", entry], None) if unclaimed => {
            AuditEvent::AutoApproveRevoked { rule_id: None, entry: (*entry).to_owned() }
        }
        (Outcome::NetworkRevoked, ["network", grant @ ..], None) if unclaimed => AuditEvent::GrantRevoked { grant: grant_of(grant)? },
        _ => return None,
    };
    Some((event, reason))
}

/// What v4 appended when a rate limit had left events out:
/// `(+N WHAT not recorded: rate limit)`; `Some(None)` when nothing was.
fn suppressed(rest: &[&str], what: &str) -> Option<Option<u64>> {
    match rest {
        [] => Some(None),
        [note] => {
            let count = note.strip_prefix("(+")?.strip_suffix(&format!(" {what} not recorded: rate limit)"))?;
            Some(Some(count.parse().ok()?))
        }
        _ => None,
    }
}

/// What a request or a refused question asked for: a name's record type,
/// or an address's (`/` in its host network) service.
fn asked_as(destination: &str, asked: &str) -> Option<(Option<String>, Option<String>)> {
    if destination.contains('/') {
        Service::parse(asked).ok()?;
        Some((None, Some(asked.to_owned())))
    } else {
        Some((Some(asked.to_owned()), None))
    }
}

/// v4's argv of a grant, less its `network`: `[ENTRY, VERDICT, SCOPE]`,
/// then `every port` for an address's every-port grant. The entry is the
/// destination, and for one service of an address `NETWORK SERVICE`; the
/// scope as `GrantScope` displays it. v4 did not keep the grant's id.
fn grant_of(argv: &[&str]) -> Option<AuditGrant> {
    let (entry, verdict, scope, every_port) = match argv {
        [entry, verdict, scope] => (*entry, *verdict, *scope, false),
        [entry, verdict, scope, "every port"] => (*entry, *verdict, *scope, true),
        _ => return None,
    };
    let (destination, service) = match entry.split_once(' ') {
        Some((network, service)) if network.contains('/') && !every_port => {
            Service::parse(service).ok()?;
            (network, Some(service.to_owned()))
        }
        Some(_) => return None,
        None => (entry, None),
    };
    let verdict = match verdict {
        "allow" => EntryVerdict::Allow,
        "deny" => EntryVerdict::Deny,
        _ => return None,
    };
    let scope = match scope {
        "this session" => GrantScope::Session,
        "the profile" => GrantScope::Profile,
        minutes => GrantScope::Minutes { minutes: minutes.strip_suffix(" min")?.parse().ok()? },
    };
    Some(AuditGrant { id: None, destination: destination.to_owned(), service, every_port, verdict, scope })
}

/// One origin's counts as v4 wrote them: `1xx=… 2xx=… 3xx=… 4xx=… 5xx=…
/// rejected=… failed=… sent=…B received=…B withheld=…`, all of them, in
/// that order.
fn credential_use(origin: &str, counts: &str) -> Option<CredentialUse> {
    let mut words = counts.split(' ');
    let mut next =
        |name: &str, unit: &str| -> Option<u64> { words.next()?.strip_prefix(name)?.strip_prefix('=')?.strip_suffix(unit)?.parse().ok() };
    let counted = CredentialUse {
        origin: origin.to_owned(),
        status_1xx: next("1xx", "")?,
        status_2xx: next("2xx", "")?,
        status_3xx: next("3xx", "")?,
        status_4xx: next("4xx", "")?,
        status_5xx: next("5xx", "")?,
        rejected: next("rejected", "")?,
        failed: next("failed", "")?,
        bytes_sent: next("sent", "B")?,
        bytes_received: next("received", "B")?,
        withheld: next("withheld", "")?,
    };
    words.next().is_none().then_some(counted)
}
