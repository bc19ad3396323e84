//! The Network Sidecar's control protocol: what the coordinator (and
//! `lazaret-sidecar ctl`) sends on the sidecar's control socket, what the
//! sidecar answers, and the events it streams to a watcher. One JSON object
//! per line each way, typed here once for both ends.
//!
//! Requests carry `type`: `allow`/`deny` add entries (a CIDR, an address, a
//! host address with one protocol and port, `10.9.0.7/32 tcp/8081`, see
//! [`service_entry`], or a DNS name pattern; `forMs` makes them end on
//! their own), `revoke` removes
//! entries, `hold` says how long a question for a name on no allow entry
//! waits for one, `set` replaces the whole policy, `protect` says what
//! stays out of reach under wide allows, `show` asks for the policy, `watch`
//! turns the connection into an event stream, `credentials` sets the
//! endpoints that add an API key outside the sandbox:
//!
//! ```text
//! --> {"type":"allow","entries":["10.89.0.5/32","*.npmjs.org"]}
//! <-- {"type":"policy","allow":["10.89.0.5/32","*.npmjs.org"],"deny":[],"learned":[],"upstreams":["10.255.255.53:53"],"rules":17,"privateAnswers":"refuse","holdMs":0,"expiring":[]}
//! --> {"type":"allow","entries":["grant.test"],"forMs":60000}
//! --> {"type":"watch"}
//! <-- {"type":"watching"}
//! <-- {"type":"dnsRefused","name":"example.org","recordType":"A","reason":"notAllowlisted","message":"the name is not on the allowlist"}
//! <-- {"type":"connectBlocked","address":"10.9.0.7","protocol":"tcp","port":8080}
//! ```
//!
//! A request that cannot be carried out is answered `{"type":"error","message":…}`
//! and leaves the policy as it was.
//!
//! The credential endpoints' types and checks are in `credentials`, a
//! service entry's protocol and port in `service`; both are re-exported
//! here, so that every type of the protocol is `sidecar::*`.

mod credentials;
mod service;

use serde::{Deserialize, Serialize};

use crate::NetworkPolicy;

pub use credentials::{
    check_credential_value, credential_header, CredentialEndpoint, Origin, Secret, CA_BUNDLE_IN_SIDECAR, MAX_CREDENTIALS,
    MAX_CREDENTIAL_LENGTH, RESERVED_HEADERS,
};
pub use service::{service_entry, Service};

/// Longest request line the sidecar accepts, newline included.
pub const MAX_LINE: usize = 64 * 1024;
/// Most entries (or addresses, or networks) in one request.
pub const MAX_ITEMS: usize = 4096;
/// Longest hold of a DNS question ([`SidecarRequest::Hold`]): shorter than
/// the usual resolver time-out, so a held question is answered, not retried.
pub const MAX_HOLD_MS: u64 = 30_000;
/// Longest life of a timed entry (`forMs`): a day.
pub const MAX_FOR_MS: u64 = 24 * 60 * 60 * 1000;

/// Whether an allowlisted DNS name's answer may open internal addresses
/// (private, CGNAT, ULA and other special-purpose ranges, the host's own
/// networks) that no CIDR entry allows: `[network] private_answers`. Refused
/// by default: an allowed name stands for hosts out on the network, not for
/// whatever its DNS says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PrivateAnswers {
    #[default]
    Refuse,
    Allow,
}

impl PrivateAnswers {
    /// The configuration's spelling, and the wire's.
    pub fn as_str(self) -> &'static str {
        match self {
            PrivateAnswers::Refuse => "refuse",
            PrivateAnswers::Allow => "allow",
        }
    }

    /// `refuse` or `allow`; anything else is `None`.
    pub fn parse(text: &str) -> Option<PrivateAnswers> {
        [PrivateAnswers::Refuse, PrivateAnswers::Allow].into_iter().find(|value| value.as_str() == text)
    }
}

impl std::fmt::Display for PrivateAnswers {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A request on the sidecar's control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum SidecarRequest {
    /// Adds entries to the allowlist (CIDRs, addresses, an address's
    /// service as [`service_entry`] writes it, DNS name patterns).
    /// With `forMs` they end on their own after that many milliseconds:
    /// the sidecar removes them then (what they opened closes, established
    /// flows included, as a revoke does) and reports
    /// [`SidecarEvent::EntriesExpired`].
    Allow {
        entries: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_ms: Option<u64>,
    },
    /// Adds entries to the denylist: holes in wider allows, and names
    /// refused at once (never held). `forMs` as for `allow`.
    Deny {
        entries: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_ms: Option<u64>,
    },
    /// Removes allow or deny entries exactly as written (timed or not):
    /// what an allow opened closes at once, established flows included. An
    /// entry that is neither is an error naming it, and nothing changes.
    Revoke { entries: Vec<String> },
    /// How long a DNS question for a name on no allow entry waits for one
    /// (an `allow` of the name answers the very question) before it is
    /// refused; `0`, the default, refuses at once. Each held question is
    /// reported as [`SidecarEvent::DnsHeld`]. At most [`MAX_HOLD_MS`].
    Hold { ms: u64 },
    /// Replaces the whole policy (a reload). Denies carve into allows,
    /// whatever their order.
    Set {
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
        #[serde(default)]
        private_answers: PrivateAnswers,
    },
    /// What stays out of reach under wide allows: addresses and networks
    /// (`addresses`, e.g. the host's own, and rootless podman's user-mode
    /// network), and the networks of the host's interfaces (`networks`: a
    /// name's answer does not open them). Replaces what was protected before.
    Protect {
        #[serde(default)]
        addresses: Vec<String>,
        #[serde(default)]
        networks: Vec<String>,
    },
    /// Replaces the credential endpoints: for each, the sidecar serves plain
    /// HTTP/1.1 on `127.0.0.1:<port>` of the namespace and forwards every
    /// request over TLS to `origin` only, with `header` set to `value`
    /// (whatever copy of it the request carried is dropped). An empty list
    /// closes them all. Answered with the policy, whose `credentials` list
    /// the endpoints (never a value). At most [`MAX_CREDENTIALS`].
    Credentials { endpoints: Vec<CredentialEndpoint> },
    /// The policy in force. (Variants without fields are written `{}` so
    /// that unknown fields are refused in them too.)
    Show {},
    /// Answered [`SidecarReply::Watching`], then [`SidecarEvent`]s, one per
    /// line, until the client goes.
    Watch {},
}

/// The sidecar's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum SidecarReply {
    /// The request was carried out; the policy in force now.
    Policy(NetworkPolicy),
    /// The connection is an event stream from now on.
    Watching,
    /// Nothing changed; `message` says why.
    Error { message: String },
}

/// Why the sidecar refused a DNS question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum DnsRefusal {
    /// Not a DNS question the sidecar can read.
    Malformed,
    /// A record type other than A and AAAA.
    RecordType,
    /// A label with characters other than letters, digits and hyphens.
    BadCharacters,
    /// Not a name an allow entry could hold (one label, a hyphen at a
    /// label's edge, over 253 octets, an address written as a name): refused
    /// at once, never held or asked about.
    NotAName,
    /// The name is on no allow entry.
    NotAllowlisted,
    /// A deny entry covers the name (or an alias in its answer).
    Denied,
    /// A label under a wildcard longer than the sidecar takes.
    LongLabel,
    /// More labels than the sidecar takes under a wildcard.
    TooManyLabels,
}

impl DnsRefusal {
    /// The wire's spelling, for messages and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsRefusal::Malformed => "malformed",
            DnsRefusal::RecordType => "recordType",
            DnsRefusal::BadCharacters => "badCharacters",
            DnsRefusal::NotAName => "notAName",
            DnsRefusal::NotAllowlisted => "notAllowlisted",
            DnsRefusal::Denied => "denied",
            DnsRefusal::LongLabel => "longLabel",
            DnsRefusal::TooManyLabels => "tooManyLabels",
        }
    }

    /// The refusal whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<DnsRefusal> {
        [
            DnsRefusal::Malformed,
            DnsRefusal::RecordType,
            DnsRefusal::BadCharacters,
            DnsRefusal::NotAName,
            DnsRefusal::NotAllowlisted,
            DnsRefusal::Denied,
            DnsRefusal::LongLabel,
            DnsRefusal::TooManyLabels,
        ]
        .into_iter()
        .find(|refusal| refusal.as_str() == text)
    }
}

impl std::fmt::Display for DnsRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Why addresses in an allowed name's answer were not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AnswerRefusal {
    /// Never a remote host: loopback, link-local, multicast, broadcast,
    /// `0.0.0.0/8`, IPv4-compatible IPv6.
    SpecialAddress,
    /// Private, CGNAT, ULA or another internal range no CIDR entry allows
    /// (with `private_answers = "refuse"`).
    PrivateAddress,
    /// On one of the host's networks (likewise).
    HostNetwork,
    /// A CIDR deny entry covers it.
    DeniedAddress,
    /// One of the host's own addresses.
    HostAddress,
}

impl AnswerRefusal {
    /// The wire's spelling, for messages and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerRefusal::SpecialAddress => "specialAddress",
            AnswerRefusal::PrivateAddress => "privateAddress",
            AnswerRefusal::HostNetwork => "hostNetwork",
            AnswerRefusal::DeniedAddress => "deniedAddress",
            AnswerRefusal::HostAddress => "hostAddress",
        }
    }

    /// The refusal whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<AnswerRefusal> {
        [
            AnswerRefusal::SpecialAddress,
            AnswerRefusal::PrivateAddress,
            AnswerRefusal::HostNetwork,
            AnswerRefusal::DeniedAddress,
            AnswerRefusal::HostAddress,
        ]
        .into_iter()
        .find(|refusal| refusal.as_str() == text)
    }
}

impl std::fmt::Display for AnswerRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What the sidecar streams to a watcher. `suppressed`: how many events
/// before this one the rate limit dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum SidecarEvent {
    /// A DNS question was refused (`name` and `record_type` are empty when
    /// the question could not be read).
    DnsRefused {
        name: String,
        record_type: String,
        reason: DnsRefusal,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// An allowed name's answer pointed at `addresses` the sidecar left
    /// closed and out of the reply; `reason` is the first one's.
    DnsAnswerRefused {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        reason: AnswerRefusal,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// An allowed name resolved; `addresses` are open now.
    DnsResolved {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// A question for a name on no allow entry is held for up to `holdMs`
    /// ([`SidecarRequest::Hold`]): an allow of the name in that time
    /// answers it; otherwise it is refused (`dnsRefused`, `notAllowlisted`).
    /// Nothing about it went upstream. `holdMs` 0: not held after all (too
    /// many questions are held already), refused at once.
    DnsHeld {
        name: String,
        record_type: String,
        hold_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// Timed entries (`forMs`) whose time ran out were removed. Never
    /// dropped by the rate limit.
    EntriesExpired { allow: Vec<String>, deny: Vec<String> },
    /// The `dnsResolved` events (`answered`) and `dnsRefused` events of
    /// reason `denied` (`denied`) the rate limit dropped since the last
    /// tally, counted per name, so that a grant's or a refusal's hits are
    /// exact under a flood. At most [`TALLY_NAMES`] names per tally (drops
    /// for further names are only in `suppressed`). Sent at most four times
    /// a second, past the limit, and only when something was dropped.
    DnsTally { answered: Vec<NameCount>, denied: Vec<NameCount> },
    /// The sandbox opened a connection (or sent a datagram) straight to an
    /// address that no entry covers, while questions are held
    /// ([`SidecarRequest::Hold`] above 0): the connection failed at once
    /// (TCP is reset, anything else dropped), and an `allow` of the
    /// address opens it for the next try. `protocol` is `tcp`, `udp` or the
    /// IP protocol number; `port` the destination port of TCP and UDP.
    /// Addresses that are never a remote host (loopback, link-local,
    /// multicast, broadcast) and explicit denies are never reported.
    ConnectBlocked {
        address: String,
        protocol: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// The origin of a credential endpoint answered 401 or 403 to a request
    /// that carried the credential: usually a revoked or wrong key.
    CredentialRejected {
        origin: String,
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// The origin of a credential endpoint answered a request (`method`)
    /// with the credential in `part` of its answer (an echo, a reflection):
    /// a head that carried it was never sent (the client got a 502), a body
    /// was cut before it and the client connection closed. `status`: the
    /// origin's, when its status line could be read. Never the credential.
    CredentialWithheld {
        origin: String,
        method: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        part: WithheldPart,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
}

/// Where an origin's answer carried the credential of its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum WithheldPart {
    /// The status line or a header (of the answer or of an interim 1xx).
    Head,
    /// The body, or a trailer of a chunked body.
    Body,
}

impl WithheldPart {
    /// The wire word (`head`, `body`).
    pub fn as_str(self) -> &'static str {
        match self {
            WithheldPart::Head => "head",
            WithheldPart::Body => "body",
        }
    }

    /// The part whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<WithheldPart> {
        [WithheldPart::Head, WithheldPart::Body].into_iter().find(|part| part.as_str() == text)
    }
}

impl std::fmt::Display for WithheldPart {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// How many names one [`SidecarEvent::DnsTally`] counts at most.
pub const TALLY_NAMES: usize = 1024;

/// A name and how many times something happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameCount {
    pub name: String,
    pub count: u64,
}

impl SidecarEvent {
    /// Records that the rate limit dropped `count` events before this one.
    pub fn set_suppressed(&mut self, count: u64) {
        match self {
            SidecarEvent::DnsRefused { suppressed, .. }
            | SidecarEvent::DnsAnswerRefused { suppressed, .. }
            | SidecarEvent::DnsResolved { suppressed, .. }
            | SidecarEvent::DnsHeld { suppressed, .. }
            | SidecarEvent::ConnectBlocked { suppressed, .. }
            | SidecarEvent::CredentialRejected { suppressed, .. }
            | SidecarEvent::CredentialWithheld { suppressed, .. } => *suppressed = Some(count),
            SidecarEvent::EntriesExpired { .. } | SidecarEvent::DnsTally { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(line: &str) -> Result<SidecarRequest, serde_json::Error> {
        serde_json::from_str(line)
    }

    #[test]
    fn requests_read_as_documented() {
        assert_eq!(
            request(r#"{"type":"allow","entries":["10.89.0.5/32","*.npmjs.org"]}"#).unwrap(),
            SidecarRequest::Allow { entries: vec!["10.89.0.5/32".into(), "*.npmjs.org".into()], for_ms: None }
        );
        assert_eq!(
            request(r#"{"type":"allow","entries":["grant.test"],"forMs":60000}"#).unwrap(),
            SidecarRequest::Allow { entries: vec!["grant.test".into()], for_ms: Some(60_000) }
        );
        assert_eq!(request(r#"{"type":"hold","ms":10000}"#).unwrap(), SidecarRequest::Hold { ms: 10_000 });
        assert_eq!(
            request(r#"{"type":"revoke","entries":["grant.test"]}"#).unwrap(),
            SidecarRequest::Revoke { entries: vec!["grant.test".into()] }
        );
        assert_eq!(
            request(r#"{"type":"set"}"#).unwrap(),
            SidecarRequest::Set { allow: vec![], deny: vec![], private_answers: PrivateAnswers::Refuse }
        );
        assert_eq!(
            request(r#"{"type":"set","privateAnswers":"allow","deny":["10.1.0.0/16"]}"#).unwrap(),
            SidecarRequest::Set { allow: vec![], deny: vec!["10.1.0.0/16".into()], private_answers: PrivateAnswers::Allow }
        );
        assert_eq!(request(r#"{"type":"show"}"#).unwrap(), SidecarRequest::Show {});
        assert_eq!(request(r#"{"type":"watch"}"#).unwrap(), SidecarRequest::Watch {});
        assert_eq!(serde_json::to_string(&SidecarRequest::Show {}).unwrap(), r#"{"type":"show"}"#);
    }

    #[test]
    fn unknown_types_fields_and_values_are_refused() {
        for bad in [
            r#"{}"#,
            r#"{"type":"flush"}"#,
            r#"{"allow":["10.0.0.1"]}"#,
            r#"{"type":"allow"}"#,
            r#"{"type":"allow","entries":"10.0.0.1"}"#,
            r#"{"type":"allow","entries":[5]}"#,
            r#"{"type":"allow","entries":[],"extra":1}"#,
            r#"{"type":"set","private":"allow"}"#,
            r#"{"type":"set","privateAnswers":"yes"}"#,
            r#"{"type":"protect","routes":[]}"#,
            r#"{"type":"show","all":true}"#,
            r#"{"type":"hold"}"#,
            r#"{"type":"hold","ms":-1}"#,
            r#"{"type":"revoke","entries":["a.test"],"forMs":5}"#,
            r#"{"type":"allow","entries":["a.test"],"forMs":"5"}"#,
        ] {
            assert!(request(bad).is_err(), "{bad} was read");
        }
    }

    #[test]
    fn a_secret_is_on_the_wire_but_never_in_debug_output() {
        let credentials = SidecarRequest::Credentials {
            endpoints: vec![CredentialEndpoint {
                origin: "https://api.example.test".into(),
                port: 17400,
                header: "authorization".into(),
                value: Secret::new("Bearer sk-live-123".into()),
            }],
        };
        let line = serde_json::to_string(&credentials).unwrap();
        assert!(line.contains(r#""value":"Bearer sk-live-123""#), "{line}");
        let debug = format!("{credentials:?}");
        assert!(!debug.contains("sk-live-123") && debug.contains("18 bytes"), "{debug}");
        assert!(request(r#"{"type":"credentials","endpoints":[{"origin":"https://a.test","port":1,"header":"x","value":"v","extra":1}]}"#)
            .is_err());
    }

    #[test]
    fn spellings_are_the_wires() {
        use DnsRefusal as D;
        for reason in [D::Malformed, D::RecordType, D::BadCharacters, D::NotAllowlisted, D::Denied, D::LongLabel, D::TooManyLabels] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
        use AnswerRefusal as A;
        for reason in [A::SpecialAddress, A::PrivateAddress, A::HostNetwork, A::DeniedAddress, A::HostAddress] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
        for answers in [PrivateAnswers::Refuse, PrivateAnswers::Allow] {
            assert_eq!(serde_json::to_value(answers).unwrap(), answers.as_str());
            assert_eq!(PrivateAnswers::parse(answers.as_str()), Some(answers));
        }
    }

    #[test]
    fn every_request_reply_and_event_reads_back_as_written() {
        let requests = [
            SidecarRequest::Deny { entries: vec!["x.test".into()], for_ms: None },
            SidecarRequest::Deny { entries: vec!["x.test".into()], for_ms: Some(1) },
            SidecarRequest::Protect { addresses: vec!["10.0.2.0/24".into()], networks: vec!["10.88.0.0/16".into()] },
            SidecarRequest::Set { allow: vec!["0.0.0.0/0".into()], deny: vec![], private_answers: PrivateAnswers::Allow },
            SidecarRequest::Credentials {
                endpoints: vec![CredentialEndpoint {
                    origin: "https://api.example.test".into(),
                    port: 17400,
                    header: "x-api-key".into(),
                    value: Secret::new("sk-test".into()),
                }],
            },
        ];
        for value in requests {
            assert_eq!(request(&serde_json::to_string(&value).unwrap()).unwrap(), value);
        }
        let policy = NetworkPolicy {
            allow: vec!["a.test".into()],
            deny: vec![],
            learned: vec![],
            upstreams: vec!["10.255.255.53:53".into()],
            rules: 3,
            private_answers: PrivateAnswers::Refuse,
            hold_ms: 10_000,
            expiring: vec![crate::ExpiringEntry { entry: "grant.test".into(), verdict: crate::EntryVerdict::Allow, expires_in_ms: 59_000 }],
            credentials: vec![crate::CredentialEndpointStatus {
                origin: "https://api.example.test".into(),
                port: 17400,
                header: "x-api-key".into(),
                status_2xx: 3,
                rejected: 1,
                status_4xx: 1,
                ..Default::default()
            }],
        };
        for value in [SidecarReply::Policy(policy), SidecarReply::Watching, SidecarReply::Error { message: "no".into() }] {
            let line = serde_json::to_string(&value).unwrap();
            assert_eq!(serde_json::from_str::<SidecarReply>(&line).unwrap(), value, "{line}");
        }
        let mut event = SidecarEvent::DnsRefused {
            name: "example.org".into(),
            record_type: "A".into(),
            reason: DnsRefusal::NotAllowlisted,
            message: "the name is not on the allowlist".into(),
            suppressed: None,
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"type":"dnsRefused","name":"example.org","recordType":"A","reason":"notAllowlisted","message":"the name is not on the allowlist"}"#
        );
        event.set_suppressed(7);
        let line = serde_json::to_string(&event).unwrap();
        assert!(line.ends_with(r#","suppressed":7}"#), "{line}");
        assert_eq!(serde_json::from_str::<SidecarEvent>(&line).unwrap(), event);
        let expired = SidecarEvent::EntriesExpired { allow: vec!["grant.test".into()], deny: vec![] };
        let mut copy = expired.clone();
        copy.set_suppressed(3);
        assert_eq!(copy, expired, "expiries carry no count: they are never dropped");
        assert_eq!(serde_json::to_string(&expired).unwrap(), r#"{"type":"entriesExpired","allow":["grant.test"],"deny":[]}"#);
        let held = SidecarEvent::DnsHeld { name: "grant.test".into(), record_type: "A".into(), hold_ms: 10_000, suppressed: None };
        assert_eq!(serde_json::to_string(&held).unwrap(), r#"{"type":"dnsHeld","name":"grant.test","recordType":"A","holdMs":10000}"#);
        let blocked =
            SidecarEvent::ConnectBlocked { address: "10.9.0.7".into(), protocol: "tcp".into(), port: Some(8080), suppressed: None };
        assert_eq!(
            serde_json::to_string(&blocked).unwrap(),
            r#"{"type":"connectBlocked","address":"10.9.0.7","protocol":"tcp","port":8080}"#
        );
        let line = r#"{"type":"connectBlocked","address":"fd00::7","protocol":"47"}"#;
        let read: SidecarEvent = serde_json::from_str(line).unwrap();
        assert_eq!(read, SidecarEvent::ConnectBlocked { address: "fd00::7".into(), protocol: "47".into(), port: None, suppressed: None });
        let mut withheld = SidecarEvent::CredentialWithheld {
            origin: "https://api.example.test".into(),
            method: "GET".into(),
            status: Some(200),
            part: WithheldPart::Body,
            suppressed: None,
        };
        assert_eq!(
            serde_json::to_string(&withheld).unwrap(),
            r#"{"type":"credentialWithheld","origin":"https://api.example.test","method":"GET","status":200,"part":"body"}"#
        );
        withheld.set_suppressed(2);
        let line = serde_json::to_string(&withheld).unwrap();
        assert!(line.ends_with(r#""part":"body","suppressed":2}"#), "{line}");
        let line = r#"{"type":"credentialWithheld","origin":"https://a.test","method":"POST","part":"head"}"#;
        let read: SidecarEvent = serde_json::from_str(line).unwrap();
        assert_eq!(
            read,
            SidecarEvent::CredentialWithheld {
                origin: "https://a.test".into(),
                method: "POST".into(),
                status: None,
                part: WithheldPart::Head,
                suppressed: None
            }
        );
    }
}
