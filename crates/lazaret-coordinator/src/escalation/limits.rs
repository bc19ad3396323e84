//! Bounds on what one sandbox can make the coordinator hold (attack review
//! finding 15: 300 requests of about 600 KB each took the coordinator to
//! 2 GB and the store to 637 MB, and blinded `lazaret pending`). A request
//! larger than these caps is refused before anything waits on it; the
//! pending queue has a cap per session and per domain; and every audit
//! record keeps long values only as a prefix with their length and digest.

use lazaret_protocol::escalation::RequestPayload;
use sha2::{Digest, Sha256};

/// Largest justification accepted, in bytes.
pub const MAX_JUSTIFICATION_BYTES: usize = 4096;
/// Most arguments (the program included) and most bytes over all of them.
pub const MAX_ARGUMENTS: usize = 512;
pub const MAX_ARGV_BYTES: usize = 64 << 10;
/// Requests waiting for a human, per session and per domain.
pub const MAX_PENDING_PER_SESSION: usize = 8;
pub const MAX_PENDING_PER_DOMAIN: usize = 32;
/// Largest pending request as `escalation/list` and the `escalationPending`
/// event carry it (JSON). With the per-domain cap this bounds every answer of
/// `escalation/list` well under the control socket's response limit, so the
/// list needs no paging: a human always sees every waiting request. (Argv of
/// control characters grows six-fold in JSON, so the byte caps above alone
/// would not bound it.)
pub const MAX_PENDING_JSON_BYTES: usize = 192 << 10;
/// Longest value an audit record keeps whole.
pub const MAX_AUDIT_VALUE_BYTES: usize = 1024;
/// Escalation connections served at once, per domain (finding 14: 19,865
/// connections held open took the coordinator to 17,810 descriptors).
pub const MAX_CONNECTIONS: usize = 64;
/// Host commands running at once, per domain (finding 6).
pub const MAX_RUNNING_COMMANDS: usize = 8;
/// Refusals of one kind in this window after the first are only counted.
pub const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Refusals of unauthenticated connections: the first of each kind in a
/// window is recorded, the rest counted and written as one summary record
/// when the window ends (as the sidecar's DNS refusals are).
#[derive(Debug, Default)]
pub struct RefusalLog {
    window_started: Option<std::time::Instant>,
    seen: std::collections::BTreeSet<String>,
    suppressed: std::collections::BTreeMap<String, u64>,
}

impl RefusalLog {
    /// Notes one refusal of `kind`: whether to record it now, and the
    /// summaries of a window that just ended.
    pub fn note(&mut self, kind: &str, now: std::time::Instant) -> (bool, Vec<(String, u64)>) {
        let summaries = self.flush(now);
        if self.window_started.is_none() {
            self.window_started = Some(now);
        }
        if self.seen.insert(kind.to_owned()) {
            (true, summaries)
        } else {
            *self.suppressed.entry(kind.to_owned()).or_insert(0) += 1;
            (false, summaries)
        }
    }

    /// Ends the window now, over or not: the counts of what was not recorded.
    pub fn drain(&mut self) -> Vec<(String, u64)> {
        self.window_started = None;
        self.seen.clear();
        std::mem::take(&mut self.suppressed).into_iter().collect()
    }

    /// Ends the window if it is over: the counts of what was not recorded.
    pub fn flush(&mut self, now: std::time::Instant) -> Vec<(String, u64)> {
        match self.window_started {
            Some(started) if now.duration_since(started) >= REFUSAL_WINDOW => {
                self.window_started = None;
                self.seen.clear();
                std::mem::take(&mut self.suppressed).into_iter().collect()
            }
            _ => Vec::new(),
        }
    }
}

/// Why the request is too large, if it is.
pub fn oversize(payload: &RequestPayload) -> Option<String> {
    let justification = payload.justification.as_deref().map_or(0, str::len);
    if justification > MAX_JUSTIFICATION_BYTES {
        return Some(format!("the justification is {justification} bytes; at most {MAX_JUSTIFICATION_BYTES} are accepted"));
    }
    if payload.argv.len() > MAX_ARGUMENTS {
        return Some(format!("the command has {} arguments; at most {MAX_ARGUMENTS} are accepted", payload.argv.len()));
    }
    let bytes: usize = payload.argv.iter().map(String::len).sum();
    if bytes > MAX_ARGV_BYTES {
        return Some(format!("the command is {bytes} bytes long; at most {MAX_ARGV_BYTES} are accepted"));
    }
    None
}

/// Why a pending request would be too large to show, if it would be.
pub fn too_large_to_show(escalation: &lazaret_protocol::PendingEscalation) -> Option<String> {
    let bytes = serde_json::to_vec(escalation).map_or(usize::MAX, |json| json.len());
    (bytes > MAX_PENDING_JSON_BYTES).then(|| {
        format!("the request takes {bytes} bytes to show (its text escaped); at most {MAX_PENDING_JSON_BYTES} can wait for a human")
    })
}

/// `text` whole if short; else its first bytes, its length and SHA-256.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_AUDIT_VALUE_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_AUDIT_VALUE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest = lazaret_core::ids::hex(&Sha256::digest(text.as_bytes()));
    format!("{}… [truncated: {} bytes, sha256 {digest}]", &text[..end], text.len())
}

/// Bounds every agent-supplied value of an audit record (and every other
/// text of it, whichever kind it is), and the number of arguments kept.
pub fn bound_for_audit(record: &mut lazaret_protocol::AuditRecord) {
    use lazaret_protocol::AuditEvent;
    let bound_argv = |argv: &mut Vec<String>| {
        if argv.len() > MAX_ARGUMENTS {
            let dropped = argv.len() - MAX_ARGUMENTS;
            argv.truncate(MAX_ARGUMENTS);
            argv.push(format!("… [{dropped} more arguments dropped]"));
        }
        for argument in argv.iter_mut() {
            *argument = bounded(argument);
        }
    };
    let bound = |text: &mut String| *text = bounded(text);
    let bound_some = |text: &mut Option<String>| {
        if let Some(text) = text.as_mut() {
            *text = bounded(text);
        }
    };
    bound_some(&mut record.reason);
    match &mut record.event {
        AuditEvent::Escalation(escalation) => {
            bound(&mut escalation.request_id);
            bound_some(&mut escalation.client_request_id);
            bound(&mut escalation.session_id);
            bound_some(&mut escalation.justification);
            bound_argv(&mut escalation.requested_argv);
            if let Some(argv) = escalation.executed_argv.as_mut() {
                bound_argv(argv);
            }
        }
        AuditEvent::Legacy(legacy) => {
            bound(&mut legacy.request_id);
            bound_some(&mut legacy.client_request_id);
            bound(&mut legacy.session_id);
            bound_some(&mut legacy.justification);
            bound_argv(&mut legacy.requested_argv);
            if let Some(argv) = legacy.executed_argv.as_mut() {
                bound_argv(argv);
            }
        }
        AuditEvent::ConnectionRefused { connections: _ } => {}
        AuditEvent::DnsRefused { name, record_type, refusal: _, suppressed: _ } => {
            bound(name);
            bound(record_type);
        }
        AuditEvent::DnsAnswerRefused { name, record_type, addresses, refusal: _, suppressed: _ } => {
            bound(name);
            bound(record_type);
            bound_argv(addresses);
        }
        AuditEvent::PolicyChanged { action: _, entries, private_answers: _ } => bound_argv(entries),
        AuditEvent::NetworkAsked { request_id, destination, record_type, service } => {
            bound(request_id);
            bound(destination);
            bound_some(record_type);
            bound_some(service);
        }
        AuditEvent::NetworkRequestExpired { request_id, destination, record_types, service } => {
            bound(request_id);
            bound(destination);
            bound_argv(record_types);
            bound_some(service);
        }
        AuditEvent::NetworkQueueFull { destination, record_type, service, more_refused: _ } => {
            bound_some(destination);
            bound_some(record_type);
            bound_some(service);
        }
        AuditEvent::NetworkAnswered { request_id, grant } => {
            bound(request_id);
            bound(&mut grant.destination);
            bound_some(&mut grant.id);
            bound_some(&mut grant.service);
        }
        AuditEvent::GrantExpired { grant } | AuditEvent::GrantRevoked { grant } => {
            bound(&mut grant.destination);
            bound_some(&mut grant.id);
            bound_some(&mut grant.service);
        }
        AuditEvent::AutoApproveRevoked { rule_id, entry } => {
            bound_some(rule_id);
            bound(entry);
        }
        AuditEvent::CredentialRejected { origin, status: _, suppressed: _ } => bound(origin),
        AuditEvent::CredentialWithheld { origin, method, status: _, part: _, suppressed: _ } => {
            bound(origin);
            bound(method);
        }
        AuditEvent::CredentialUse { session_id, endpoints } => {
            bound(session_id);
            for endpoint in endpoints.iter_mut() {
                bound(&mut endpoint.origin);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pending_list_fits_in_one_answer_of_the_control_socket() {
        // The largest list: every slot of the domain taken by a request at the
        // size limit, plus the JSON-RPC envelope.
        let list = MAX_PENDING_PER_DOMAIN * (MAX_PENDING_JSON_BYTES + 1) + 1024;
        let limit = lazaret_rpc::server::Config::default().max_response_size;
        assert!(list <= limit / 2, "{list} bytes against a response limit of {limit}");
        // Within the byte caps, escaped text can exceed the display limit…
        let escalation = |argv: Vec<String>| lazaret_protocol::PendingEscalation {
            request_id: "r".into(),
            domain_hash: "d".into(),
            profile: "default".into(),
            session_id: "s".into(),
            display: lazaret_core::policy::display_command(&argv),
            risk_notes: lazaret_core::policy::risk_notes(&argv),
            argv,
            justification: Some("j".repeat(MAX_JUSTIFICATION_BYTES)),
            cwd: "/home/user/project".into(),
            reasons: vec!["not in auto_approve".into()],
            received_at_ms: 0,
            expires_at_ms: 0,
        };
        let escaped = escalation(vec!["touch".into(), "\u{1}".repeat(MAX_ARGV_BYTES - 8)]);
        assert!(too_large_to_show(&escaped).is_some_and(|reason| reason.contains("bytes to show")));
        // …while the largest plain request still waits for a human.
        let plain = escalation(vec!["touch".into(), "a".repeat(MAX_ARGV_BYTES - 8)]);
        assert_eq!(too_large_to_show(&plain), None);
    }

    #[test]
    fn refusals_are_recorded_once_per_kind_and_window_then_summarised() {
        let mut log = RefusalLog::default();
        let start = std::time::Instant::now();
        assert_eq!(log.note("tls", start), (true, vec![]));
        for _ in 0..2999 {
            assert_eq!(log.note("tls", start), (false, vec![]));
        }
        assert_eq!(log.note("timeout", start), (true, vec![]), "another kind is recorded once too");
        let later = start + REFUSAL_WINDOW;
        assert_eq!(log.note("tls", later), (true, vec![("tls".to_owned(), 2999)]), "the window's count, then a new window");
        assert_eq!(log.flush(later), vec![], "the new window is not over");
        assert_eq!(log.flush(later + REFUSAL_WINDOW), vec![], "nothing was suppressed in it");
    }

    /// A DNS name, an argv, a justification: every text the sandbox can
    /// make long is bounded in every kind of record that carries it.
    #[test]
    fn every_kind_of_record_is_bounded() {
        use lazaret_protocol::{AuditEvent, AuditRecord, DecisionSource, EscalationAudit, Outcome};
        let long = "x".repeat(MAX_AUDIT_VALUE_BYTES * 3);
        let mut escalation = EscalationAudit::request(&long, &long);
        escalation.justification = Some(long.clone());
        escalation.requested_argv = vec![long.clone(); MAX_ARGUMENTS + 3];
        let records = [
            AuditEvent::Escalation(escalation),
            AuditEvent::DnsRefused {
                name: long.clone(),
                record_type: long.clone(),
                refusal: lazaret_protocol::sidecar::DnsRefusal::Malformed,
                suppressed: None,
            },
            AuditEvent::NetworkQueueFull { destination: Some(long.clone()), record_type: None, service: None, more_refused: None },
        ];
        for event in records {
            let mut record = AuditRecord::at(0, event, Outcome::Rejected, DecisionSource::Policy, Some(long.clone()));
            bound_for_audit(&mut record);
            let json = serde_json::to_value(&record).expect("json");
            let mut texts = vec![json];
            while let Some(value) = texts.pop() {
                match value {
                    serde_json::Value::String(text) => assert!(text.len() < MAX_AUDIT_VALUE_BYTES + 120, "{} bytes kept", text.len()),
                    serde_json::Value::Array(items) => {
                        assert!(items.len() <= MAX_ARGUMENTS + 1, "{} arguments kept", items.len());
                        texts.extend(items);
                    }
                    serde_json::Value::Object(fields) => texts.extend(fields.into_values()),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn long_values_keep_a_prefix_their_length_and_digest() {
        let long = "é".repeat(2000);
        let kept = bounded(&long);
        assert!(kept.len() < MAX_AUDIT_VALUE_BYTES + 120, "{}", kept.len());
        assert!(kept.contains("[truncated: 4000 bytes, sha256 "), "{kept}");
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn oversized_requests_are_named() {
        let payload = |argv: Vec<String>, justification: Option<String>| RequestPayload {
            request_id: "r".into(),
            session_id: "s".into(),
            argv,
            justification,
            nonce: "n".into(),
            timestamp_ms: 0,
        };
        assert_eq!(oversize(&payload(vec!["ls".into()], Some("why".into()))), None);
        let big = payload(vec!["ls".into()], Some("a".repeat(MAX_JUSTIFICATION_BYTES + 1)));
        assert!(oversize(&big).is_some_and(|reason| reason.contains("justification is 4097 bytes")));
        let many = payload(vec!["x".into(); MAX_ARGUMENTS + 1], None);
        assert!(oversize(&many).is_some_and(|reason| reason.contains("513 arguments")));
        let long = payload(vec!["cat".into(), "a".repeat(MAX_ARGV_BYTES)], None);
        assert!(oversize(&long).is_some_and(|reason| reason.contains("bytes long")));
    }
}
