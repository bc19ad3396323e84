//! Session Anchor verification: a
//! request must carry a delegation signed by the registered key of the
//! session it names, be signed by the delegated key, be fresh, and never
//! have been seen before. Pure apart from the clock passed in.

use std::collections::{HashMap, VecDeque};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use lazaret_protocol::escalation::{Delegation, RequestPayload, SignedRequest, REQUEST_WINDOW_MS};

/// Why a signed request was refused: its `Display` is the reason the audit
/// trail and the client get.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed payload: {0}")]
    MalformedPayload(String),
    #[error("malformed delegation: {0}")]
    MalformedDelegation(String),
    #[error("session {session_id} is not a live session of this domain")]
    UnknownSession { session_id: String },
    #[error("the delegation belongs to another session")]
    ForeignDelegation,
    #[error("malformed delegation signature")]
    MalformedDelegationSignature,
    #[error("the delegation is not signed by the session's key")]
    DelegationNotSigned,
    #[error(
        "the session credential has expired (credentials last {} days): start a new `lazaret run` session",
        lazaret_protocol::escalation::CREDENTIAL_LIFETIME_MS / (24 * 60 * 60 * 1000)
    )]
    CredentialExpired,
    #[error("malformed delegated key")]
    MalformedDelegatedKey,
    #[error("malformed request signature")]
    MalformedSignature,
    #[error("the request signature does not verify")]
    BadSignature,
    #[error("the request is outside the {} s freshness window", REQUEST_WINDOW_MS / 1000)]
    Stale,
    #[error("replayed request (nonce already used)")]
    Replayed,
    #[error("empty command")]
    EmptyCommand,
    #[error("a NUL byte in the command")]
    NulInCommand,
}

/// Nonces seen per session within the freshness window.
#[derive(Default)]
pub struct ReplayGuard {
    seen: HashMap<String, VecDeque<(String, u64)>>,
}

impl ReplayGuard {
    /// Records `nonce`; false when it was already seen.
    fn admit(&mut self, session_id: &str, nonce: &str, now_ms: u64) -> bool {
        let seen = self.seen.entry(session_id.to_owned()).or_default();
        while seen.front().is_some_and(|(_, at)| now_ms.saturating_sub(*at) > 2 * REQUEST_WINDOW_MS) {
            seen.pop_front();
        }
        if seen.iter().any(|(known, _)| known == nonce) {
            return false;
        }
        seen.push_back((nonce.to_owned(), now_ms));
        true
    }
}

pub fn decode_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = BASE64.decode(text).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

fn decode_signature(text: &str) -> Option<Signature> {
    let bytes: [u8; 64] = BASE64.decode(text).ok()?.try_into().ok()?;
    Some(Signature::from_bytes(&bytes))
}

/// The session id a request claims, for the audit record of a rejection.
pub fn claimed_session(signed: &SignedRequest) -> (String, String) {
    serde_json::from_str::<RequestPayload>(&signed.payload)
        .map(|payload| (payload.session_id, payload.request_id))
        .unwrap_or_else(|_| ("-".to_owned(), "-".to_owned()))
}

/// Verifies `signed`; `session_key` looks up the registered key of a live
/// session. The error is the reason, for the audit trail and the client.
pub fn verify(
    signed: &SignedRequest,
    session_key: impl Fn(&str) -> Option<VerifyingKey>,
    now_ms: u64,
    guard: &mut ReplayGuard,
) -> Result<RequestPayload, Refusal> {
    let payload: RequestPayload = serde_json::from_str(&signed.payload).map_err(|error| Refusal::MalformedPayload(error.to_string()))?;
    let delegation: Delegation =
        serde_json::from_str(&signed.delegation).map_err(|error| Refusal::MalformedDelegation(error.to_string()))?;
    let Some(session_key) = session_key(&payload.session_id) else {
        return Err(Refusal::UnknownSession { session_id: payload.session_id });
    };
    if delegation.session_id != payload.session_id {
        return Err(Refusal::ForeignDelegation);
    }
    let delegation_signature = decode_signature(&signed.delegation_signature).ok_or(Refusal::MalformedDelegationSignature)?;
    session_key.verify(signed.delegation.as_bytes(), &delegation_signature).map_err(|_| Refusal::DelegationNotSigned)?;
    if delegation.expires_at_ms < now_ms {
        return Err(Refusal::CredentialExpired);
    }
    let delegated_key = decode_public_key(&delegation.delegated_public_key).ok_or(Refusal::MalformedDelegatedKey)?;
    let signature = decode_signature(&signed.signature).ok_or(Refusal::MalformedSignature)?;
    delegated_key.verify(signed.payload.as_bytes(), &signature).map_err(|_| Refusal::BadSignature)?;
    if payload.timestamp_ms.abs_diff(now_ms) > REQUEST_WINDOW_MS {
        return Err(Refusal::Stale);
    }
    if payload.nonce.len() < 16 || !guard.admit(&payload.session_id, &payload.nonce, now_ms) {
        return Err(Refusal::Replayed);
    }
    if payload.argv.is_empty() || payload.argv[0].is_empty() {
        return Err(Refusal::EmptyCommand);
    }
    if payload.argv.iter().any(|word| word.contains('\0')) {
        return Err(Refusal::NulInCommand);
    }
    Ok(payload)
}

/// The CLI side: a delegated key and its signed delegation.
pub mod delegate {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};
    use lazaret_protocol::escalation::SessionCredential;

    /// Issues the credential injected into a session's process: a new key,
    /// delegated by `session_key` until `expires_at_ms`.
    pub fn issue(session_key: &SigningKey, session_id: &str, delegated_secret: [u8; 32], expires_at_ms: u64) -> SessionCredential {
        let delegated = SigningKey::from_bytes(&delegated_secret);
        let delegation = Delegation {
            session_id: session_id.to_owned(),
            delegated_public_key: BASE64.encode(delegated.verifying_key().to_bytes()),
            expires_at_ms,
        };
        let delegation = serde_json::to_string(&delegation).unwrap_or_default();
        let delegation_signature = BASE64.encode(session_key.sign(delegation.as_bytes()).to_bytes());
        SessionCredential { delegation, delegation_signature, delegated_secret_key: BASE64.encode(delegated_secret) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn signed(session: &SigningKey, delegated: [u8; 32], payload: &RequestPayload, expires: u64) -> SignedRequest {
        let credential = delegate::issue(session, &payload.session_id, delegated, expires);
        let payload_text = serde_json::to_string(payload).expect("json");
        let signature = BASE64.encode(SigningKey::from_bytes(&delegated).sign(payload_text.as_bytes()).to_bytes());
        SignedRequest {
            payload: payload_text,
            signature,
            delegation: credential.delegation,
            delegation_signature: credential.delegation_signature,
        }
    }

    fn payload(nonce: &str, timestamp_ms: u64) -> RequestPayload {
        RequestPayload {
            request_id: "r1".into(),
            session_id: "s1".into(),
            argv: vec!["true".into()],
            justification: None,
            nonce: nonce.into(),
            timestamp_ms,
        }
    }

    #[test]
    fn accepts_good_requests_and_rejects_each_forgery() {
        let session = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let lookup = |id: &str| (id == "s1").then(|| session.verifying_key());
        let now = 1_000_000;
        let mut guard = ReplayGuard::default();
        let good = signed(&session, [9; 32], &payload("0123456789abcdef", now), now + 10_000);
        assert!(verify(&good, lookup, now, &mut guard).is_ok());
        let replay = verify(&good, lookup, now, &mut guard).expect_err("replay");
        assert_eq!(replay, Refusal::Replayed);
        assert!(replay.to_string().contains("replayed"), "{replay}");

        let mut tampered = signed(&session, [9; 32], &payload("1123456789abcdef", now), now + 10_000);
        tampered.payload = tampered.payload.replace("\"true\"", "\"rm\"");
        assert!(verify(&tampered, lookup, now, &mut guard).expect_err("tampered").to_string().contains("signature"));

        let foreign = signed(&other, [9; 32], &payload("2123456789abcdef", now), now + 10_000);
        assert_eq!(verify(&foreign, lookup, now, &mut guard).expect_err("foreign"), Refusal::DelegationNotSigned);

        let expired = signed(&session, [9; 32], &payload("3123456789abcdef", now), now - 1);
        assert_eq!(verify(&expired, lookup, now, &mut guard).expect_err("expired"), Refusal::CredentialExpired);

        let stale = signed(&session, [9; 32], &payload("4123456789abcdef", now - 2 * REQUEST_WINDOW_MS), now + 10_000);
        assert_eq!(verify(&stale, lookup, now, &mut guard).expect_err("stale"), Refusal::Stale);

        let mut unknown = payload("5123456789abcdef", now);
        unknown.session_id = "s2".into();
        let unknown = signed(&session, [9; 32], &unknown, now + 10_000);
        assert!(verify(&unknown, lookup, now, &mut guard).expect_err("unknown").to_string().contains("not a live session"));
    }
}
