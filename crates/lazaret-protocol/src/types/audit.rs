//! The audit trail's wire types: a record is a chain envelope and one
//! typed event (docs/decisions.md D23), with the outcome and who decided.

use serde::{Deserialize, Serialize};

use super::{EntryVerdict, GrantScope};

/// What became of an audited request or change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Refused before anyone was asked (a bad signature, an unknown
    /// session, a policy refusal), or a network change that did not take.
    Rejected,
    /// Run without asking: the argv is in the auto-approve list (D11).
    Auto,
    /// Run as requested, approved by a human.
    Approved,
    /// Run with the argv a human wrote instead.
    Edited,
    /// Refused by a human (or the requester went away).
    Denied,
    /// Refused, and the domain torn down by its owning CLI.
    Aborted,
    /// Nobody answered within the approval time-out.
    TimedOut,
    /// `net allow` took.
    NetworkAllowed,
    /// `net deny` took.
    NetworkDenied,
    /// `net reload` took.
    NetworkReloaded,
    /// The Network Sidecar refused a DNS question.
    DnsRefused,
    /// The Network Sidecar answered a question but opened none of its addresses.
    DnsAnswerRefused,
    /// A destination on no allow entry became a network request for a human.
    NetworkAsked,
    /// A network request was answered: the destination allowed (the record
    /// names the scope and who answered).
    NetworkGranted,
    /// A network request was answered: the destination refused, and the
    /// refusal remembered for its scope.
    NetworkRefused,
    /// A grant (or remembered refusal) or a network request ran out of time.
    NetworkExpired,
    /// A grant (or remembered refusal) was revoked.
    NetworkRevoked,
    /// A network request was not queued: the domain has as many pending
    /// network requests as it takes.
    NetworkQueueFull,
    /// A credential endpoint's origin answered 401 or 403 to a request that
    /// carried the key: usually a revoked or wrong key.
    CredentialRejected,
    /// What went through the credential endpoints since the last such
    /// record, per origin (written when a session ends).
    CredentialUse,
    /// A credential endpoint's origin answered with the key in the head or
    /// body of its answer: the head was withheld (502), or the body cut
    /// before the key.
    CredentialWithheld,
}

impl Outcome {
    /// The wire word (`timedOut`, `networkAllowed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Rejected => "rejected",
            Outcome::Auto => "auto",
            Outcome::Approved => "approved",
            Outcome::Edited => "edited",
            Outcome::Denied => "denied",
            Outcome::Aborted => "aborted",
            Outcome::TimedOut => "timedOut",
            Outcome::NetworkAllowed => "networkAllowed",
            Outcome::NetworkDenied => "networkDenied",
            Outcome::NetworkReloaded => "networkReloaded",
            Outcome::DnsRefused => "dnsRefused",
            Outcome::DnsAnswerRefused => "dnsAnswerRefused",
            Outcome::NetworkAsked => "networkAsked",
            Outcome::NetworkGranted => "networkGranted",
            Outcome::NetworkRefused => "networkRefused",
            Outcome::NetworkExpired => "networkExpired",
            Outcome::NetworkRevoked => "networkRevoked",
            Outcome::NetworkQueueFull => "networkQueueFull",
            Outcome::CredentialRejected => "credentialRejected",
            Outcome::CredentialUse => "credentialUse",
            Outcome::CredentialWithheld => "credentialWithheld",
        }
    }

    /// Whether the requested command (or an edit of it) runs.
    pub fn runs(self) -> bool {
        matches!(self, Outcome::Auto | Outcome::Approved | Outcome::Edited)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Who decided: on the wire one word, `rpc:<client>` for an answer over
/// the control socket (the client name is self-declared by the answering
/// process: `rpc:terminal`, `rpc:vscode`, `rpc:neovim`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DecisionSource {
    /// The profile's policy (auto-approve list, refusal rules).
    Policy,
    /// The approval time-out.
    Timeout,
    /// The requesting process itself (it went away before an answer).
    Client,
    /// The Network Sidecar (refused DNS questions).
    NetworkSidecar,
    /// An answer or change over the control socket, with the client's name
    /// when it gave one.
    Rpc { client: Option<String> },
}

impl DecisionSource {
    /// An answer over the control socket from `client`.
    pub fn rpc(client: impl Into<String>) -> DecisionSource {
        DecisionSource::Rpc { client: Some(client.into()) }
    }
}

impl std::fmt::Display for DecisionSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecisionSource::Policy => formatter.write_str("policy"),
            DecisionSource::Timeout => formatter.write_str("timeout"),
            DecisionSource::Client => formatter.write_str("client"),
            DecisionSource::NetworkSidecar => formatter.write_str("networkSidecar"),
            DecisionSource::Rpc { client: None } => formatter.write_str("rpc"),
            DecisionSource::Rpc { client: Some(client) } => write!(formatter, "rpc:{client}"),
        }
    }
}

impl std::str::FromStr for DecisionSource {
    type Err = String;

    fn from_str(text: &str) -> Result<DecisionSource, String> {
        Ok(match text {
            "policy" => DecisionSource::Policy,
            "timeout" => DecisionSource::Timeout,
            "client" => DecisionSource::Client,
            "networkSidecar" => DecisionSource::NetworkSidecar,
            "rpc" => DecisionSource::Rpc { client: None },
            other => match other.strip_prefix("rpc:") {
                Some(client) if !client.is_empty() => DecisionSource::rpc(client),
                _ => return Err(format!("unknown decision source `{}`", other.escape_debug())),
            },
        })
    }
}

impl Serialize for DecisionSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DecisionSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DecisionSource, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for DecisionSource {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DecisionSource".into()
    }

    fn json_schema(_generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Who decided: `policy`, `timeout`, `client`, `networkSidecar`, `rpc` or `rpc:<client>` (self-declared client name).",
            "type": "string",
            "pattern": "^(policy|timeout|client|networkSidecar|rpc|rpc:.+)$"
        })
    }
}

/// One record of the audit trail (hash-chained): the envelope every kind
/// shares (its place in the chain, what became of it, who decided, why,
/// when) and the event itself, whose `type` names its kind and whose
/// fields are that kind's. The state store keeps each record as the bytes
/// it was written as, and the chain hashes those bytes (see
/// `lazaret-store`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Position in the chain, from 1.
    pub sequence: u64,
    /// `hash` of the record before (64 zeros for the first).
    pub previous_hash: String,
    /// SHA-256 (hex) of the record's stored bytes: this record as written,
    /// with `hash` empty.
    pub hash: String,
    /// What happened: the kind (`type`) and its fields.
    #[serde(flatten)]
    pub event: AuditEvent,
    pub outcome: Outcome,
    /// Why, in words (a refusal's reason, a denial's reason, the Network
    /// Sidecar's message); agent text for some kinds.
    pub reason: Option<String>,
    pub decided_by: Option<DecisionSource>,
    pub received_at_ms: u64,
    pub decided_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
}

impl AuditRecord {
    /// A record of `event` happening now: received, decided and finished at
    /// `at_ms` (the chain fields are filled in by the store).
    pub fn at(at_ms: u64, event: AuditEvent, outcome: Outcome, decided_by: DecisionSource, reason: Option<String>) -> AuditRecord {
        AuditRecord {
            sequence: 0,
            previous_hash: String::new(),
            hash: String::new(),
            event,
            outcome,
            reason,
            decided_by: Some(decided_by),
            received_at_ms: at_ms,
            decided_at_ms: Some(at_ms),
            finished_at_ms: Some(at_ms),
        }
    }
}

/// What an audit record is about: one variant per kind, tagged by `type`.
/// A kind added later (a checkpoint of the trail, say) is a new variant:
/// clients show a `type` they do not know by its envelope alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum AuditEvent {
    /// A host command requested from inside the sandbox (`lazaret-escalate`):
    /// refused, run without asking, or decided by a human.
    Escalation(EscalationAudit),
    /// Connections to the Escalation Socket refused before they made a
    /// request (no TLS identity, nothing readable in time): `connections`
    /// of them, one, or a window's count past the first of its kind.
    ConnectionRefused { connections: u64 },
    /// The Network Sidecar refused a DNS question (`recordType` as asked:
    /// `A`, `TXT`, ...; the name as asked, agent text). `suppressed`:
    /// refusals before this one that the sidecar's rate limit left out.
    DnsRefused { name: String, record_type: String, refusal: crate::sidecar::DnsRefusal, suppressed: Option<u64> },
    /// An allowlisted name's answer pointed at `addresses` the Network
    /// Sidecar did not open (left out of the reply); `refusal` is the first
    /// address's reason, `reason` names each.
    DnsAnswerRefused {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        refusal: crate::sidecar::AnswerRefusal,
        suppressed: Option<u64>,
    },
    /// The egress policy was changed over the control socket (`net allow`,
    /// `net deny`: one entry; `net reload`: the configuration's allowlist
    /// and `privateAnswers`). Outcome `rejected` when it did not take.
    PolicyChanged { action: PolicyAction, entries: Vec<String>, private_answers: Option<crate::sidecar::PrivateAnswers> },
    /// A destination on no allow entry became a network request (`[network]
    /// ask`): a name (with the record type first asked) or an address's
    /// host network (with the `service` the connection tried).
    NetworkAsked { request_id: String, destination: String, record_type: Option<String>, service: Option<String> },
    /// A network request was answered; the answer made `grant` (an allow,
    /// or a remembered refusal).
    NetworkAnswered { request_id: String, grant: AuditGrant },
    /// A network request went away unanswered.
    NetworkRequestExpired { request_id: String, destination: String, record_types: Vec<String>, service: Option<String> },
    /// A question was refused without asking: as many network requests
    /// wait as a domain takes. The first refusal names its destination;
    /// once the queue has room, one more record counts the refusals since
    /// (`moreRefused`).
    NetworkQueueFull { destination: Option<String>, record_type: Option<String>, service: Option<String>, more_refused: Option<u64> },
    /// A grant (or remembered refusal) for some minutes ran out.
    GrantExpired { grant: AuditGrant },
    /// A grant (or remembered refusal) was revoked (`rules/revoke`).
    GrantRevoked { grant: AuditGrant },
    /// An auto-approve rule was revoked for the rest of this run
    /// (`rules/revoke`; the configuration file is unchanged).
    AutoApproveRevoked { rule_id: Option<String>, entry: String },
    /// A credential endpoint's origin answered 401 or 403 to a request that
    /// carried the key.
    CredentialRejected { origin: String, status: u16, suppressed: Option<u64> },
    /// A credential endpoint's origin answered `method` with the key in the
    /// `part` of its answer: the head withheld (the sandbox got a 502) or
    /// the body cut before the key. `status`: the origin's, when readable.
    CredentialWithheld { origin: String, method: String, status: Option<u16>, part: crate::sidecar::WithheldPart, suppressed: Option<u64> },
    /// What went through the credential endpoints since the last such
    /// record, per origin, written when `sessionId` ended.
    CredentialUse { session_id: String, endpoints: Vec<CredentialUse> },
    /// A record of layout v4 (an argv-shaped record of every kind) that the
    /// migration to typed records could not read as any kind: every field
    /// kept as it was (a v4 record had the fields of an escalation).
    Legacy(EscalationAudit),
}

impl AuditEvent {
    /// The wire word of its kind (its `type`).
    pub fn kind(&self) -> &'static str {
        match self {
            AuditEvent::Escalation(_) => "escalation",
            AuditEvent::ConnectionRefused { .. } => "connectionRefused",
            AuditEvent::DnsRefused { .. } => "dnsRefused",
            AuditEvent::DnsAnswerRefused { .. } => "dnsAnswerRefused",
            AuditEvent::PolicyChanged { .. } => "policyChanged",
            AuditEvent::NetworkAsked { .. } => "networkAsked",
            AuditEvent::NetworkAnswered { .. } => "networkAnswered",
            AuditEvent::NetworkRequestExpired { .. } => "networkRequestExpired",
            AuditEvent::NetworkQueueFull { .. } => "networkQueueFull",
            AuditEvent::GrantExpired { .. } => "grantExpired",
            AuditEvent::GrantRevoked { .. } => "grantRevoked",
            AuditEvent::AutoApproveRevoked { .. } => "autoApproveRevoked",
            AuditEvent::CredentialRejected { .. } => "credentialRejected",
            AuditEvent::CredentialWithheld { .. } => "credentialWithheld",
            AuditEvent::CredentialUse { .. } => "credentialUse",
            AuditEvent::Legacy(_) => "legacy",
        }
    }
}

/// An escalation: the host command a session asked for, and what ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EscalationAudit {
    /// Minted by the coordinator for each request (D16).
    pub request_id: String,
    /// The id the requesting client chose: a correlation value only,
    /// written by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// The session the request claimed; `verified` says whether its
    /// signature checked out.
    pub session_id: String,
    pub verified: bool,
    /// The agent's words: untrusted.
    pub justification: Option<String>,
    pub requested_argv: Vec<String>,
    /// What ran (differs from the request when edited).
    pub executed_argv: Option<Vec<String>>,
    pub exit_status: Option<i32>,
}

impl EscalationAudit {
    /// A request as received: nothing decided, nothing run.
    pub fn request(request_id: &str, session_id: &str) -> EscalationAudit {
        EscalationAudit {
            request_id: request_id.to_owned(),
            client_request_id: None,
            session_id: session_id.to_owned(),
            verified: false,
            justification: None,
            requested_argv: Vec::new(),
            executed_argv: None,
            exit_status: None,
        }
    }
}

/// A change of the egress policy over the control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum PolicyAction {
    /// `network/allow`.
    Allow,
    /// `network/deny`.
    Deny,
    /// `network/reload`: the configuration's allowlist replaced the policy.
    Reload,
}

impl PolicyAction {
    /// The wire word (`allow`, `deny`, `reload`).
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::Allow => "allow",
            PolicyAction::Deny => "deny",
            PolicyAction::Reload => "reload",
        }
    }
}

impl std::fmt::Display for PolicyAction {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A network grant or remembered refusal as an audit record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditGrant {
    /// The id `rules/list` shows and `rules/revoke` takes; `None` in
    /// records migrated from layout v4, which did not keep it.
    pub id: Option<String>,
    /// The name, or the address's host network (`10.9.0.7/32`).
    pub destination: String,
    /// For an address: the one protocol and port it covers (`tcp/8081`).
    pub service: Option<String>,
    /// For an address: every protocol and port of it.
    pub every_port: bool,
    pub verdict: EntryVerdict,
    /// How long it holds (`minutes`: its duration).
    pub scope: GrantScope,
}

/// What went through one credential endpoint between two `credentialUse`
/// records: requests by the origin's status class, keys refused (401, 403),
/// requests the sidecar failed itself, bytes, answers withheld.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CredentialUse {
    pub origin: String,
    pub status_1xx: u64,
    pub status_2xx: u64,
    pub status_3xx: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    pub rejected: u64,
    pub failed: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub withheld: u64,
}

/// The result of `audit/verify`: what it proves is in docs/security.md
/// ("The audit trail").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditVerification {
    pub records: u64,
    pub intact: bool,
    /// The first record that breaks the chain, and why (`problem` alone:
    /// the head kept beside the store does not match, or is missing).
    pub problem_at: Option<u64>,
    pub problem: Option<String>,
    /// What else the check found that does not break the chain (a
    /// migration from an older layout, a head one append behind after a
    /// crash).
    #[serde(default)]
    pub notes: Vec<String>,
}
