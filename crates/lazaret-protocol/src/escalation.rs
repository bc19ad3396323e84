//! The Escalation Socket's wire format (DECISIONS D9): what `lazaret-escalate` sends from inside the sandbox over
//! mTLS, and the frames the coordinator streams back.
//!
//! Frames are a 4-byte big-endian length followed by that many bytes of
//! JSON. Signed material travels as the exact JSON text that was signed
//! (`payload`, `delegation`), so no canonicalization is needed.

use serde::{Deserialize, Serialize};

/// Largest frame either side accepts.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Requests older or newer than this (against the coordinator's clock) are
/// refused; nonces are remembered for at least this long.
pub const REQUEST_WINDOW_MS: u64 = 60_000;
/// How long a session's delegation and a sandbox's client certificate are
/// valid: 30 days. Neither is usable sooner than that once its session or
/// domain is gone (a delegation needs a live session of the coordinator
/// that holds the session key; a certificate, the coordinator whose
/// in-memory CA signed it), so the expiry is a backstop, not a session's
/// working limit (attack review finding 13: a 24 h expiry made long
/// sessions' escalations fail).
pub const CREDENTIAL_LIFETIME_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// Environment variable holding the session credential inside the sandbox.
pub const CREDENTIAL_VARIABLE: &str = "LAZARET_SESSION_CREDENTIAL";
pub const SESSION_ID_VARIABLE: &str = "LAZARET_SESSION_ID";

/// Fixed paths inside the sandbox.
pub mod paths {
    pub const SOCKET: &str = "/run/lazaret/escalate.sock";
    /// The sandbox's TLS credentials in one file, in this order: the
    /// client's key, its certificate, the CA certificate (one open through
    /// the gofer per request, not three).
    pub const CLIENT_BUNDLE: &str = "/run/lazaret/tls/bundle.pem";
    /// The server name the client expects in the coordinator's certificate.
    pub const SERVER_NAME: &str = "lazaret-coordinator";
}

/// Exit statuses of `lazaret-escalate` for outcomes other than the host
/// command's own status.
pub mod exit_status {
    /// A human (or editor) denied the request.
    pub const DENIED: u8 = 97;
    /// Nobody answered within the approval timeout, or the command ran too long.
    pub const TIMED_OUT: u8 = 98;
    /// The request was refused before a decision (identity, signature,
    /// replay) or could not be sent.
    pub const REFUSED: u8 = 99;
}

/// A session key's statement that `delegated_public_key` may sign requests
/// for the session until `expires_at_ms` (signed by the session key that the
/// CLI registered with the coordinator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delegation {
    pub session_id: String,
    /// Base64 of the 32-byte ed25519 public key.
    pub delegated_public_key: String,
    pub expires_at_ms: u64,
}

/// What the process inside the sandbox holds: the delegation, its
/// signature, and the delegated private key. Travels as base64 JSON in
/// [`CREDENTIAL_VARIABLE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCredential {
    /// JSON text of a [`Delegation`].
    pub delegation: String,
    /// Base64 ed25519 signature of `delegation` by the session key.
    pub delegation_signature: String,
    /// Base64 of the 32-byte ed25519 secret key.
    pub delegated_secret_key: String,
}

/// The request proper. The argv is authoritative (D9): it is exactly what
/// a human approves and what runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPayload {
    pub request_id: String,
    pub session_id: String,
    pub argv: Vec<String>,
    #[serde(default)]
    pub justification: Option<String>,
    /// 128 random bits, hex; never accepted twice.
    pub nonce: String,
    pub timestamp_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedRequest {
    /// JSON text of a [`RequestPayload`].
    pub payload: String,
    /// Base64 ed25519 signature of `payload` by the delegated key.
    pub signature: String,
    /// JSON text of the [`Delegation`], and its signature by the session key.
    pub delegation: String,
    pub delegation_signature: String,
}

/// Frames from the coordinator to `lazaret-escalate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "type")]
pub enum ServerFrame {
    /// Waiting for a human; `message` says so.
    Pending {
        request_id: String,
        message: String,
    },
    /// `argv` runs (it differs from the request when edited). Sent at once
    /// for an edit; otherwise in the same write as the command's first
    /// output or its end, so a quick command costs the client one wake-up.
    Running {
        request_id: String,
        argv: Vec<String>,
        decision: crate::Outcome,
    },
    /// Base64 chunks of the host command's output.
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    /// The host command ended; `status` is its exit status (128+signal when killed).
    Exit {
        status: i32,
    },
    Denied {
        reason: String,
    },
    TimedOut {
        reason: String,
    },
    Refused {
        reason: String,
    },
}

/// Encodes one frame.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let length = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// Reads the length prefix of a frame; `None` when it exceeds the limit.
pub fn frame_length(prefix: [u8; 4]) -> Option<usize> {
    let length = usize::try_from(u32::from_be_bytes(prefix)).ok()?;
    (length <= MAX_FRAME_BYTES).then_some(length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_are_bounded() {
        let frame = encode_frame(b"{}");
        assert_eq!(frame, [0, 0, 0, 2, b'{', b'}']);
        assert_eq!(frame_length([0, 0, 0, 2]), Some(2));
        assert_eq!(frame_length([0xff, 0, 0, 0]), None);
        let json = serde_json::to_string(&ServerFrame::Exit { status: 3 }).expect("json");
        assert_eq!(json, r#"{"type":"exit","status":3}"#);
    }
}
