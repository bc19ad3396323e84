//! The wire types of the control socket: parameters, results and events.
//! Every field is camelCase on the wire; times are Unix milliseconds.

use serde::{Deserialize, Serialize};

mod approvals;
mod audit;
mod branch;

pub use approvals::*;
pub use audit::*;
pub use branch::*;

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
                AuditEvent::Legacy(EscalationAudit {
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
