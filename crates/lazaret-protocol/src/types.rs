//! The wire types of the control socket: parameters, results and events.
//! Every field is camelCase on the wire; times are Unix milliseconds.

use serde::{Deserialize, Serialize};

/// The state of the domain's sandbox container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum ContainerState {
    Starting,
    Running,
    Failed,
    Stopping,
}

/// The answer to `session/register`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterResult {
    pub domain_hash: String,
    pub container_name: String,
    /// The sandbox's default command (the image's CMD), for sessions that
    /// name none.
    pub default_command: Vec<String>,
    /// Live sessions after this registration.
    pub session_count: usize,
    /// How the session's command joins the sandbox: the client runs this
    /// and never works out the backend from the profile.
    pub target: SessionTarget,
}

/// Where and how a session's command runs (`session/register`'s answer),
/// as the coordinator that made the sandbox says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "type")]
pub enum SessionTarget {
    /// The local gVisor sandbox: `runsc exec` with the container's process
    /// spec the coordinator recorded in the Domain Root (0600, never on the
    /// wire: it holds the sandbox's environment), `podman exec` when there
    /// is no record.
    Local { container_name: String },
    /// The domain's pod on a cluster, reached as the coordinator reaches it
    /// (`lazaret pod-exec`): its kubeconfig, context and namespace. An exec
    /// carries no environment: the session's variables and the profile's
    /// `env` cross on the command's stdin.
    Pod { kubeconfig: String, context: Option<String>, namespace: String, pod: String },
}

/// A session that is live now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LiveSession {
    pub session_id: String,
    pub pid: u32,
    /// Self-declared by the client that registered it (`cli`, an editor name).
    pub client: String,
    pub command: Vec<String>,
    pub started_at_ms: u64,
}

/// The answer to `domain/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DomainStatus {
    pub api_version: u32,
    pub domain_hash: String,
    pub profile: String,
    pub workspace: String,
    pub image: String,
    pub container_name: String,
    pub container_state: ContainerState,
    /// Why the container failed, when `containerState` is `failed`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub container_error: Option<String>,
    pub coordinator_pid: u32,
    pub started_at_ms: u64,
    pub sessions: Vec<LiveSession>,
    /// `lazaret/agent-<profile>`, `None` for a directly mounted workspace.
    #[serde(default)]
    pub agent_branch: Option<String>,
    /// The agent branch's commit on the host, once it exists there.
    #[serde(default)]
    pub agent_branch_head: Option<String>,
    /// Why the sandbox has no working network now (its Network Sidecar
    /// stopped: no name resolves, no policy change takes), while that lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_error: Option<String>,
}

/// A session that ended, from the state store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CompletedSession {
    pub session_id: String,
    pub pid: u32,
    pub command: Vec<String>,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    pub exit_status: Option<i32>,
    /// `exited`, `disconnected` or `sandbox-failed`.
    pub end_reason: String,
}

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
    /// kept as it was.
    Legacy(LegacyAudit),
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

/// The fields of a layout v4 record, as they were (the `legacy` kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LegacyAudit {
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    pub session_id: String,
    pub verified: bool,
    pub justification: Option<String>,
    pub requested_argv: Vec<String>,
    pub executed_argv: Option<Vec<String>>,
    pub exit_status: Option<i32>,
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

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub path: String,
    /// git's status letter: `A`, `M`, `D`, `R`, `T`, or `??` (untracked).
    pub status: String,
    /// `None` for binary files.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// A changed file that makes hosts run code (DECISIONS D4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PathWarning {
    pub path: String,
    pub reason: String,
}

/// The agent's uncommitted changes inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UncommittedChanges {
    pub files: Vec<FileChange>,
    pub patch: String,
}

/// The agent branch against its base on the host, plus the agent's
/// uncommitted changes when the sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BranchDiff {
    /// `lazaret/agent-<profile>`.
    pub branch: String,
    /// The host commit the agent branch started from (merge base with the
    /// host's `HEAD`); `None` while the branch does not exist on the host.
    pub base: Option<String>,
    /// The agent branch's commit on the host.
    pub head: Option<String>,
    pub files: Vec<FileChange>,
    pub patch: String,
    /// `None` when the sandbox is not running.
    pub uncommitted: Option<UncommittedChanges>,
    pub warnings: Vec<PathWarning>,
}

/// One side of a file for a diff editor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileVersion {
    /// Whether the path exists on this side.
    pub exists: bool,
    /// NUL bytes or invalid UTF-8: `text` is `None`.
    pub binary: bool,
    /// `text` holds only the first `MAX_FILE_TEXT` bytes.
    pub truncated: bool,
    /// Size in bytes (0 when absent).
    pub size: u64,
    pub text: Option<String>,
}

/// Largest text of one [`FileVersion`], in bytes.
pub const MAX_FILE_TEXT: usize = 1 << 20;

/// The answer to `branch/fileContents`: one path at the agent branch's
/// base, at its head on the host, and in the sandbox's working tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileContents {
    pub path: String,
    /// The base commit the diff starts from (`BranchDiff.base`).
    pub base_commit: Option<String>,
    /// The agent branch's commit on the host (`BranchDiff.head`).
    pub head_commit: Option<String>,
    pub base: FileVersion,
    pub head: FileVersion,
    /// The file in the sandbox's `/workspace`, uncommitted changes
    /// included. Written by the agent: treat as untrusted. `None` when the
    /// sandbox is not running or the workspace is mounted directly.
    pub working: Option<FileVersion>,
}

/// How a path under a persistent directory differs from the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum StateChangeKind {
    /// `A`: not in the image.
    Added,
    /// `M`: the agent's version hides the image's.
    Modified,
    /// `M!`: modified, and the image changed this path since; the agent's
    /// version wins.
    ModifiedConflict,
    /// `D`: deleted; the image still has it.
    Deleted,
    /// `D!`: deleted, and the image changed this path since.
    DeletedConflict,
}

impl StateChangeKind {
    /// The one- or two-letter code `lazaret state diff` prints.
    pub fn code(self) -> &'static str {
        match self {
            StateChangeKind::Added => "A",
            StateChangeKind::Modified => "M",
            StateChangeKind::ModifiedConflict => "M!",
            StateChangeKind::Deleted => "D",
            StateChangeKind::DeletedConflict => "D!",
        }
    }
}

/// One change of the agent in a persistent directory (the State Anchor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    /// The persistent directory (container path).
    pub dir: String,
    /// The changed path (container path; the agent chose it).
    pub path: String,
    pub kind: StateChangeKind,
}

/// The egress policy the Network Sidecar enforces now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicy {
    /// Allowed CIDRs and DNS names (`github.com`, `*.npmjs.org`).
    pub allow: Vec<String>,
    /// Denied CIDRs and names (holes in wider allows).
    pub deny: Vec<String>,
    /// Addresses reachable now because an allowed name resolved to them.
    pub learned: Vec<LearnedAddress>,
    /// The resolvers the sidecar forwards allowed questions to.
    pub upstreams: Vec<String>,
    /// How many kernel rules enforce it.
    pub rules: u64,
    /// Whether a name's answer may open internal addresses no CIDR entry
    /// allows: `refuse` (the default) or `allow` (`[network] private_answers`).
    pub private_answers: crate::sidecar::PrivateAnswers,
    /// How long a question for a name on no allow entry is held for a
    /// grant, in milliseconds (`[network] ask`); 0: refused at once.
    #[serde(default)]
    pub hold_ms: u64,
    /// Entries of `allow` and `deny` that end on their own, with the time
    /// they have left.
    #[serde(default)]
    pub expiring: Vec<ExpiringEntry>,
    /// The credential endpoints the sidecar serves the sandbox (a profile's
    /// `credentials`): where each origin's API is reached, which header the
    /// sidecar adds, and what went through it. Never the credential itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialEndpointStatus>,
}

/// One credential endpoint of the Network Sidecar and what went through it
/// since the sidecar started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CredentialEndpointStatus {
    /// The API origin, `https://host[:port]`.
    pub origin: String,
    /// The sandbox reaches it at `http://127.0.0.1:<port>`.
    pub port: u16,
    /// The header the sidecar sets (lower case), e.g. `x-api-key`.
    pub header: String,
    /// Requests the origin answered, by status class.
    pub status_1xx: u64,
    pub status_2xx: u64,
    pub status_3xx: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    /// Of the 4xx answers, 401 and 403: usually a revoked or wrong key.
    pub rejected: u64,
    /// Requests the sidecar answered itself with an error (refused, too
    /// large, the origin unreachable).
    pub failed: u64,
    /// Bytes of request bodies sent on, and of response bodies passed back.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Answers that carried the credential (counted in their status class
    /// too): a head withheld (the client got a 502) or a body cut before it.
    #[serde(default)]
    pub withheld: u64,
}

/// Whether an entry allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum EntryVerdict {
    Allow,
    Deny,
}

/// An allow or deny entry that ends on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExpiringEntry {
    pub entry: String,
    pub verdict: EntryVerdict,
    pub expires_in_ms: u64,
}

/// An address learned from an answer to an allowed DNS name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LearnedAddress {
    pub address: String,
    pub names: Vec<String>,
    pub expires_in_seconds: u64,
}

/// A request from inside the sandbox waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingEscalation {
    /// Minted by the coordinator, random per request: never the agent's
    /// choice (DECISIONS D16). Clients key a request by (domain, id).
    pub request_id: String,
    pub domain_hash: String,
    pub profile: String,
    /// The verified session the request came from.
    pub session_id: String,
    /// Exactly what would run (the program is resolved on the host).
    pub argv: Vec<String>,
    /// The argv quoted for display only.
    pub display: String,
    /// The agent's words: untrusted.
    pub justification: Option<String>,
    /// The host directory the command would run in.
    pub cwd: String,
    /// Why this was not auto-approved.
    pub reasons: Vec<String>,
    /// Warnings: commands that run project code or take command-running options.
    pub risk_notes: Vec<String>,
    pub received_at_ms: u64,
    /// When the request is denied if nobody answers.
    pub expires_at_ms: u64,
}

/// A destination the sandbox asked for that no allow entry covers, waiting
/// for a human (`[network] ask`): a name it looked up, or an address it
/// connected to directly. Everything in it came from the sandbox (the name is
/// checked to be a plain DNS name, lower case; the address is re-written by
/// the coordinator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingNetworkRequest {
    /// Minted by the coordinator, random per request.
    pub request_id: String,
    pub domain_hash: String,
    pub profile: String,
    /// The DNS name asked for (lower case, letters, digits, hyphens, dots),
    /// or the address connected to, as its host network (`10.9.0.7/32`,
    /// `fd00::7/128`). Approving it allows exactly this entry.
    pub destination: String,
    /// The record types asked for (`A`, `AAAA`); for an address, what was
    /// tried (`tcp/8080`, `udp/53`, or an IP protocol number), the same as
    /// `service`.
    pub record_types: Vec<String>,
    /// For an address: the protocol and port the connection tried
    /// (`tcp/8080`, `udp/53`, or an IP protocol number). `allow` opens
    /// exactly this service of the address; `allowEveryPort` is the wider
    /// answer; `deny` refuses this service. Each service of an address is a
    /// request of its own. `None` for a name.
    #[serde(default)]
    pub service: Option<String>,
    /// The sessions live when it was first asked. The sandbox's network is
    /// shared by all its sessions, so which one asked cannot be told.
    pub session_ids: Vec<String>,
    /// Questions for it after the first, while it waits.
    pub repeats: u64,
    pub received_at_ms: u64,
    /// When the request goes away if nobody answers (the destination stays
    /// refused).
    pub expires_at_ms: u64,
}

/// Something waiting for a human: a host command from `lazaret-escalate`,
/// or a network destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PendingItem {
    Command(PendingEscalation),
    Network(PendingNetworkRequest),
}

impl PendingItem {
    pub fn request_id(&self) -> &str {
        match self {
            PendingItem::Command(escalation) => &escalation.request_id,
            PendingItem::Network(request) => &request.request_id,
        }
    }

    pub fn received_at_ms(&self) -> u64 {
        match self {
            PendingItem::Command(escalation) => escalation.received_at_ms,
            PendingItem::Network(request) => request.received_at_ms,
        }
    }
}

/// How long an answer to a network request holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "type")]
pub enum GrantScope {
    /// Until this sandbox stops (every session of the domain has ended).
    Session,
    /// For `minutes` minutes (1 to 1440).
    Minutes { minutes: u32 },
    /// For the profile, until revoked: kept in the Domain Root (never in
    /// the configuration file or the workspace), shown by `lazaret config
    /// show`, in force at every start of this domain.
    Profile,
}

impl std::fmt::Display for GrantScope {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrantScope::Session => formatter.write_str("this session"),
            GrantScope::Minutes { minutes } => write!(formatter, "{minutes} min"),
            GrantScope::Profile => formatter.write_str("the profile"),
        }
    }
}

/// An answer to a network request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum NetworkDecision {
    /// Allow the destination for the scope; a held question is answered.
    /// For an address, only the protocol and port the request shows
    /// (`service`).
    Allow,
    /// For an address only: allow every protocol and port of it, wider
    /// than the request shows; every client names it so. Refused for a name.
    AllowEveryPort,
    /// Refuse it, and remember the refusal for the scope: no new request
    /// for it until then.
    Deny,
}

/// A network grant or remembered refusal, made by answering a network
/// request (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkGrant {
    /// What `rules/revoke` takes.
    pub id: String,
    /// The name, or the address's host network (`10.9.0.7/32`).
    pub destination: String,
    /// For an address: the one protocol and port the grant covers
    /// (`tcp/8081`); `None` for a name, or for an address when `everyPort`.
    #[serde(default)]
    pub service: Option<String>,
    /// For an address: the grant covers every protocol and port of it (an
    /// `allowEveryPort` answer, or a grant made before grants were scoped).
    #[serde(default)]
    pub every_port: bool,
    pub verdict: EntryVerdict,
    pub scope: GrantScope,
    pub decided_by: DecisionSource,
    pub granted_at_ms: u64,
    /// When it ends on its own (`minutes` scope).
    pub expires_at_ms: Option<u64>,
    /// Questions for the destination since it was made (answered under an
    /// allow, refused under a deny), as the sidecar's events report them:
    /// past its rate limit (20/s, bursts of 50) some go uncounted.
    pub hits: u64,
}

/// An auto-approve rule in force (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AutoApproveListing {
    /// What `rules/revoke` takes.
    pub id: String,
    /// The entry as written (`cargo check *`).
    pub entry: String,
    /// Where it was written: `FILE:LINE:COLUMN` in the configuration, or
    /// the table (`[escalation] auto_approve`, `[profiles.NAME]
    /// auto_approve`) when the place is not known.
    pub source: String,
}

/// Every rule and grant of the domain (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    pub auto_approve: Vec<AutoApproveListing>,
    pub network: Vec<NetworkGrant>,
}

/// An answer to a pending escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Decision {
    /// Run the argv as requested.
    Approve,
    /// Refuse it (`reason` goes back to the sandbox and into the audit).
    Deny,
    /// Run `argv` instead (recorded as edited, with both argvs).
    Edit,
    /// Refuse it, recorded as aborted (the terminal prompt's [Q] Abort,
    /// which then ends the domain with `domain/shutdown`).
    Abort,
}

/// The domain events of `events/subscribe`: the payload of
/// [`SequencedEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "kind")]
pub enum Event {
    SessionRegistered {
        session_id: String,
        pid: u32,
        session_count: usize,
    },
    SessionEnded {
        session_id: String,
        exit_status: Option<i32>,
        end_reason: String,
        session_count: usize,
    },
    ContainerState {
        state: ContainerState,
        message: Option<String>,
    },
    ShuttingDown {
        reason: String,
    },
    /// The agent branch reached the host at `commit`.
    BranchUpdated {
        branch: String,
        commit: String,
        previous: Option<String>,
    },
    /// An export from the sandbox was refused (e.g. objects failed fsck);
    /// the host branch did not move.
    BranchRejected {
        branch: String,
        reason: String,
    },
    /// A request needs a human: answer it with `escalation/respond`.
    EscalationPending {
        escalation: PendingEscalation,
    },
    /// A request was decided; `argv` is what runs, if anything.
    EscalationResolved {
        request_id: String,
        outcome: Outcome,
        decided_by: DecisionSource,
        argv: Option<Vec<String>>,
    },
    /// A host command requested from the sandbox finished.
    EscalationFinished {
        request_id: String,
        exit_status: Option<i32>,
    },
    /// The egress policy changed (`network/allow`, `network/deny`,
    /// `network/reload`; for a reload `rule` lists the new allowlist).
    NetworkChanged {
        action: String,
        rule: String,
    },
    /// The Network Sidecar refused a DNS question from the sandbox; nothing
    /// went upstream. `suppressed`: refusals dropped by the rate limit
    /// since the last event.
    NetworkDnsRefused {
        name: String,
        record_type: String,
        reason: crate::sidecar::DnsRefusal,
        message: String,
        suppressed: Option<u64>,
    },
    /// An allowlisted name's answer pointed at `addresses` the Network
    /// Sidecar does not open (attack review finding 17); they were left out
    /// of the reply. `reason` is the first address's; `message` names each
    /// address and why. `suppressed`: as for `networkDnsRefused`.
    NetworkDnsAnswerRefused {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        reason: crate::sidecar::AnswerRefusal,
        message: String,
        suppressed: Option<u64>,
    },
    /// The Network Sidecar stopped: the sandbox has no working network (no
    /// name resolves; the kernel keeps the last rules, so nothing new opens)
    /// until `networkRestored`. `restarting`: whether it is being started
    /// again; if not, the sandbox stays without network until the domain
    /// starts anew.
    NetworkFailed {
        message: String,
        restarting: bool,
    },
    /// The Network Sidecar is back with the domain's policy as it was (live
    /// changes included; learned addresses start afresh).
    NetworkRestored {
        message: String,
    },
    /// An allowlisted name was resolved; its `addresses` are reachable now.
    NetworkDnsResolved {
        name: String,
        record_type: String,
        addresses: Vec<String>,
    },
    /// A network destination needs a human: answer it with
    /// `network/respond`. Sent again (same `requestId`) when more questions
    /// for it came in.
    NetworkRequestPending {
        request: PendingNetworkRequest,
    },
    /// A network request was answered or expired.
    NetworkRequestResolved {
        request_id: String,
        outcome: Outcome,
        decided_by: DecisionSource,
        scope: Option<GrantScope>,
    },
    /// Rules or grants changed (a grant made, expired or revoked): call
    /// `rules/list` again.
    RulesChanged {},
    /// This subscriber fell behind and `dropped` events were lost. Resync:
    /// call `pending/list`, `rules/list` and `domain/status` again.
    EventsLagged {
        dropped: u64,
    },
}

/// What `events/event` notifications carry: the event and its number.
/// `seq` counts from 1 per subscription, with no gaps (a dropped stretch
/// is itself reported, as `eventsLagged`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SequencedEvent {
    pub seq: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// What `lazaret status --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Whether a coordinator answers for the domain.
    pub running: bool,
    pub domain_hash: String,
    /// `domain/status`, when running.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<DomainStatus>,
}

/// A running domain as `lazaret editor-info` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RunningDomain {
    pub control_socket: String,
    #[serde(flatten)]
    pub status: DomainStatus,
}

/// The domain of a folder (running or not), as `lazaret editor-info
/// --workspace DIR` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FolderDomain {
    /// The folder as given, made absolute.
    pub workspace: String,
    pub profile: String,
    pub domain_hash: String,
    pub control_socket: String,
    /// Whether a coordinator answers on `controlSocket` now.
    pub running: bool,
}

/// What `lazaret editor-info --json` prints: how an editor finds the
/// coordinators without reading the configuration itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EditorInfo {
    /// The API version this `lazaret` speaks (`API_VERSION`).
    pub api_version: u32,
    /// The `lazaret` version, e.g. `0.1.0`.
    pub version: String,
    /// Always `Content-Length` (LSP-style framing).
    pub framing: String,
    /// The user's socket directory.
    pub socket_root: String,
    /// `<socketRoot>/<domainHash>/control.sock`.
    pub control_socket_pattern: String,
    /// The profile `lazaret run` uses without `--profile`.
    pub default_profile: String,
    /// Every configured profile (the built-in `default` included).
    pub profiles: Vec<String>,
    /// Every running domain of the user.
    pub domains: Vec<RunningDomain>,
    /// The default profile's domain of each `--workspace` folder.
    pub folders: Vec<FolderDomain>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_camel_case() {
        let event = Event::SessionEnded { session_id: "s".into(), exit_status: Some(1), end_reason: "exited".into(), session_count: 0 };
        let json = serde_json::to_value(SequencedEvent { seq: 7, event }).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"seq": 7, "kind": "sessionEnded", "sessionId": "s", "exitStatus": 1, "endReason": "exited", "sessionCount": 0})
        );
        let back: SequencedEvent = serde_json::from_value(json).expect("round trip");
        assert_eq!(back.seq, 7);
        let state = serde_json::to_value(ContainerState::Running).expect("json");
        assert_eq!(state, "running");
        assert_eq!(serde_json::to_value(Decision::Approve).expect("json"), "approve");
        assert_eq!(serde_json::to_value(StateChangeKind::ModifiedConflict).expect("json"), "modifiedConflict");
        let lagged = serde_json::to_value(SequencedEvent { seq: 3, event: Event::EventsLagged { dropped: 9 } }).expect("json");
        assert_eq!(lagged, serde_json::json!({"seq": 3, "kind": "eventsLagged", "dropped": 9}));
        assert_eq!(serde_json::to_value(NetworkDecision::AllowEveryPort).expect("json"), "allowEveryPort");
    }

    /// One record of every kind, each field set to something of its own.
    fn one_of_each_kind() -> Vec<AuditRecord> {
        use crate::sidecar::{AnswerRefusal, DnsRefusal, PrivateAnswers, WithheldPart};
        let grant = AuditGrant {
            id: Some("grant-3f9a1e2f44d0".into()),
            destination: "10.9.0.7/32".into(),
            service: Some("tcp/8081".into()),
            every_port: false,
            verdict: EntryVerdict::Allow,
            scope: GrantScope::Minutes { minutes: 15 },
        };
        let events = [
            (
                AuditEvent::Escalation(EscalationAudit {
                    request_id: "66e906c6a5b5279dde4e04b4437dfa8f".into(),
                    client_request_id: Some("agent-1".into()),
                    session_id: "a98dc688481839dc94ec367c41b22429".into(),
                    verified: true,
                    justification: Some("the tests need it".into()),
                    requested_argv: vec!["echo".into(), "ok".into()],
                    executed_argv: Some(vec!["/usr/bin/echo".into(), "ok".into()]),
                    exit_status: Some(0),
                }),
                Outcome::Auto,
            ),
            (AuditEvent::ConnectionRefused { connections: 7 }, Outcome::Rejected),
            (
                AuditEvent::DnsRefused {
                    name: "evil.example".into(),
                    record_type: "TXT".into(),
                    refusal: DnsRefusal::RecordType,
                    suppressed: Some(3),
                },
                Outcome::DnsRefused,
            ),
            (
                AuditEvent::DnsAnswerRefused {
                    name: "rebind.example".into(),
                    record_type: "A".into(),
                    addresses: vec!["10.0.0.1".into(), "127.0.0.1".into()],
                    refusal: AnswerRefusal::PrivateAddress,
                    suppressed: None,
                },
                Outcome::DnsAnswerRefused,
            ),
            (
                AuditEvent::PolicyChanged {
                    action: PolicyAction::Reload,
                    entries: vec!["github.com".into(), "10.0.0.0/8".into()],
                    private_answers: Some(PrivateAnswers::Allow),
                },
                Outcome::NetworkReloaded,
            ),
            (
                AuditEvent::NetworkAsked {
                    request_id: "net-5d0c8b3f9a1e2f44".into(),
                    destination: "10.9.0.7/32".into(),
                    record_type: None,
                    service: Some("udp/53".into()),
                },
                Outcome::NetworkAsked,
            ),
            (AuditEvent::NetworkAnswered { request_id: "net-5d0c8b3f9a1e2f44".into(), grant: grant.clone() }, Outcome::NetworkGranted),
            (
                AuditEvent::NetworkRequestExpired {
                    request_id: "net-0000000000000001".into(),
                    destination: "grant.test".into(),
                    record_types: vec!["A".into(), "AAAA".into()],
                    service: None,
                },
                Outcome::NetworkExpired,
            ),
            (
                AuditEvent::NetworkQueueFull { destination: None, record_type: None, service: None, more_refused: Some(968) },
                Outcome::NetworkQueueFull,
            ),
            (AuditEvent::GrantExpired { grant: grant.clone() }, Outcome::NetworkExpired),
            (
                AuditEvent::GrantRevoked { grant: AuditGrant { id: None, every_port: true, service: None, ..grant } },
                Outcome::NetworkRevoked,
            ),
            (AuditEvent::AutoApproveRevoked { rule_id: Some("auto-2".into()), entry: "cargo check *".into() }, Outcome::NetworkRevoked),
            (
                AuditEvent::CredentialRejected { origin: "https://api.example".into(), status: 401, suppressed: None },
                Outcome::CredentialRejected,
            ),
            (
                AuditEvent::CredentialWithheld {
                    origin: "https://api.example".into(),
                    method: "POST".into(),
                    status: None,
                    part: WithheldPart::Body,
                    suppressed: Some(1),
                },
                Outcome::CredentialWithheld,
            ),
            (
                AuditEvent::CredentialUse {
                    session_id: "f742a361d8ba74a012b08f5c71c0ced8".into(),
                    endpoints: vec![CredentialUse {
                        origin: "https://api.example".into(),
                        status_2xx: 3,
                        bytes_sent: 10,
                        withheld: 1,
                        ..Default::default()
                    }],
                },
                Outcome::CredentialUse,
            ),
            (
                AuditEvent::Legacy(LegacyAudit {
                    request_id: "network-1796692719170-5".into(),
                    client_request_id: None,
                    session_id: "-".into(),
                    verified: true,
                    justification: None,
                    requested_argv: vec!["net".into(), "sideways".into()],
                    executed_argv: None,
                    exit_status: None,
                }),
                Outcome::NetworkAllowed,
            ),
        ];
        events
            .into_iter()
            .enumerate()
            .map(|(index, (event, outcome))| {
                let mut record =
                    AuditRecord::at(1_000 + index as u64, event, outcome, DecisionSource::rpc("vscode"), Some(format!("reason {index}")));
                record.sequence = index as u64 + 1;
                record.previous_hash = format!("{index:064}");
                record
            })
            .collect()
    }

    /// Every kind reads back as written, and no kind has a field of the
    /// envelope's name (the flattened event would lose it).
    #[test]
    fn every_audit_kind_round_trips_with_its_envelope() {
        let records = one_of_each_kind();
        let mut kinds = std::collections::BTreeSet::new();
        for record in &records {
            let json = serde_json::to_value(record).expect("json");
            let kind = json["type"].as_str().expect("a type").to_owned();
            assert_eq!(record.event.kind(), kind);
            assert!(kinds.insert(kind.clone()), "{kind} twice");
            assert_eq!(json["outcome"], record.outcome.as_str(), "{json}");
            assert_eq!(json["decidedBy"], "rpc:vscode", "{json}");
            assert_eq!(json["receivedAtMs"], record.received_at_ms, "{json}");
            let back: AuditRecord = serde_json::from_value(json.clone()).expect("reads back");
            assert_eq!(&back, record, "{json}");
        }
        assert_eq!(kinds.len(), 16, "{kinds:?}");
        let dns = serde_json::to_value(&records[2]).expect("json");
        assert_eq!(
            dns,
            serde_json::json!({
                "sequence": 3, "previousHash": format!("{:064}", 2), "hash": "",
                "type": "dnsRefused", "name": "evil.example", "recordType": "TXT", "refusal": "recordType", "suppressed": 3,
                "outcome": "dnsRefused", "reason": "reason 2", "decidedBy": "rpc:vscode",
                "receivedAtMs": 1002, "decidedAtMs": 1002, "finishedAtMs": 1002
            })
        );
        let answered = serde_json::to_value(&records[6]).expect("json");
        assert_eq!(
            answered["grant"],
            serde_json::json!({"id": "grant-3f9a1e2f44d0", "destination": "10.9.0.7/32", "service": "tcp/8081", "everyPort": false, "verdict": "allow", "scope": {"type": "minutes", "minutes": 15}})
        );
        let unknown = serde_json::json!({"sequence": 1, "previousHash": "", "hash": "", "type": "checkpoint", "outcome": "auto", "reason": null, "decidedBy": null, "receivedAtMs": 1, "decidedAtMs": null, "finishedAtMs": null});
        assert!(serde_json::from_value::<AuditRecord>(unknown).is_err(), "a kind this build does not know is not read as another");
    }

    #[test]
    fn the_sidecars_words_parse_back() {
        use crate::sidecar::{AnswerRefusal, DnsRefusal, WithheldPart};
        for word in ["malformed", "recordType", "badCharacters", "notAName", "notAllowlisted", "denied", "longLabel", "tooManyLabels"] {
            let refusal = DnsRefusal::parse(word).expect(word);
            assert_eq!(serde_json::to_value(refusal).expect("json"), word);
        }
        for word in ["specialAddress", "privateAddress", "hostNetwork", "deniedAddress", "hostAddress"] {
            let refusal = AnswerRefusal::parse(word).expect(word);
            assert_eq!(serde_json::to_value(refusal).expect("json"), word);
        }
        assert_eq!(WithheldPart::parse("head"), Some(WithheldPart::Head));
        assert_eq!(WithheldPart::parse("body"), Some(WithheldPart::Body));
        assert_eq!((DnsRefusal::parse("Denied"), AnswerRefusal::parse(""), WithheldPart::parse("tail")), (None, None, None));
    }

    /// A grant kept in a Domain Root before grants had a service (D19) still
    /// reads: no service, and `everyPort` for the coordinator to set.
    #[test]
    fn a_grant_written_before_services_reads() {
        let old = r#"{"id":"g1","destination":"10.9.0.7/32","verdict":"allow","scope":{"type":"profile"},"decidedBy":"rpc:cli","grantedAtMs":1,"expiresAtMs":null,"hits":0}"#;
        let grant: NetworkGrant = serde_json::from_str(old).expect("an old grant reads");
        assert_eq!((grant.service, grant.every_port), (None, false));
    }
}
