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
/// Longest value an audit record keeps whole.
pub const MAX_AUDIT_VALUE_BYTES: usize = 1024;

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

/// `text` whole if short; else its first bytes, its length and SHA-256.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_AUDIT_VALUE_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_AUDIT_VALUE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest: String = Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}… [truncated: {} bytes, sha256 {digest}]", &text[..end], text.len())
}

/// Bounds every agent-supplied value of an audit record, and the number of
/// arguments kept.
pub fn bound_for_audit(record: &mut lazaret_store::AuditRecord) {
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
    bound_argv(&mut record.requested_argv);
    if let Some(argv) = record.executed_argv.as_mut() {
        bound_argv(argv);
    }
    for value in [&mut record.justification, &mut record.reason] {
        if let Some(text) = value.as_mut() {
            *text = bounded(text);
        }
    }
    record.request_id = bounded(&record.request_id);
    record.session_id = bounded(&record.session_id);
}

#[cfg(test)]
mod tests {
    use super::*;

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
