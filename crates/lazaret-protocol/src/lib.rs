//! `lazaret-protocol`: the JSON-RPC 2.0 API between the Session Coordinator
//! and its clients (the `lazaret` CLI, editor extensions), defined once as a
//! jsonrpsee `#[rpc]` trait, and the wire types it carries.
//!
//! Wire conventions: method names are `<resource>/<method>`, fields are
//! camelCase, messages are framed LSP-style (`Content-Length: N\r\n\r\n`),
//! see `docs/rpc.md`. Nothing else in Lazaret knows these names.

pub mod escalation;

#[cfg(feature = "rpc")]
use jsonrpsee::core::{RpcResult, SubscriptionResult};
#[cfg(feature = "rpc")]
use jsonrpsee::proc_macros::rpc;
use serde::{Deserialize, Serialize};

/// Version of this API; bumped on incompatible changes.
pub const API_VERSION: u32 = 1;

/// Application error codes (JSON-RPC reserves -32768..-32000).
pub mod error_code {
    /// The domain is tearing down; start a new session (the CLI retries).
    pub const SHUTTING_DOWN: i32 = 1001;
    /// The sandbox container could not be started; `message` says why.
    pub const SANDBOX_FAILED: i32 = 1002;
    /// The session id is unknown or belongs to another connection.
    pub const UNKNOWN_SESSION: i32 = 1003;
    /// The request was well-formed but its values are not acceptable.
    pub const INVALID_VALUE: i32 = 1004;
    /// The state store failed.
    pub const STORE_FAILED: i32 = 1005;
    /// A git operation failed; `message` has git's reason.
    pub const GIT_FAILED: i32 = 1006;
    /// The escalation is unknown or was already answered.
    pub const ESCALATION_NOT_PENDING: i32 = 1007;
    /// The domain has no Network Sidecar (empty allowlist) or it refused.
    pub const NETWORK_FAILED: i32 = 1008;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterParams {
    /// Random 128-bit hex id chosen by the client (`LAZARET_SESSION_ID`).
    pub session_id: String,
    pub pid: u32,
    /// What the session runs inside the sandbox (for display and the store).
    #[serde(default)]
    pub command: Vec<String>,
    /// `cli` or an editor name.
    #[serde(default = "default_client")]
    pub client: String,
    /// Base64 ed25519 public key of the client's Session Anchor; requests
    /// from inside the sandbox must carry a delegation signed by it.
    #[serde(default)]
    pub public_key: Option<String>,
}

fn default_client() -> String {
    "cli".to_owned()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterResult {
    pub domain_hash: String,
    pub container_name: String,
    /// The sandbox's default command (the image's CMD), for sessions that
    /// name none.
    pub default_command: Vec<String>,
    /// Live sessions after this registration.
    pub session_count: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnregisterParams {
    pub session_id: String,
    /// The inner command's exit status, when it ended normally.
    #[serde(default)]
    pub exit_status: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ContainerState {
    Starting,
    Running,
    Failed,
    Stopping,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveSession {
    pub session_id: String,
    pub pid: u32,
    pub client: String,
    pub command: Vec<String>,
    pub started_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletedSession {
    pub session_id: String,
    pub pid: u32,
    pub command: Vec<String>,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    pub exit_status: Option<i32>,
    /// `exited` or `disconnected`.
    pub end_reason: String,
}

/// The result of `audit/verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditVerification {
    pub records: u64,
    pub intact: bool,
    /// The first record that breaks the chain, and why.
    pub problem_at: Option<u64>,
    pub problem: Option<String>,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase")]
pub struct PathWarning {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UncommittedChanges {
    pub files: Vec<FileChange>,
    pub patch: String,
}

/// The agent branch against its base on the host, plus the agent's
/// uncommitted changes when the sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// A request from inside the sandbox waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingEscalation {
    pub request_id: String,
    pub domain_hash: String,
    pub profile: String,
    /// The verified session the request came from.
    pub session_id: String,
    /// Exactly what would run (the program is resolved on the host).
    pub argv: Vec<String>,
    /// The argv quoted for display only.
    pub display: String,
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

/// Notifications of `events/subscribe`, delivered as `events/event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A request was decided (`outcome`: auto, approved, edited, denied,
    /// aborted, timedOut).
    EscalationResolved {
        request_id: String,
        outcome: String,
        decided_by: String,
        argv: Option<Vec<String>>,
    },
    /// The egress policy changed (`network/allow`, `network/deny`,
    /// `network/reload`; for a reload `rule` lists the new allowlist).
    NetworkChanged {
        action: String,
        rule: String,
    },
    /// The Network Sidecar refused a DNS question from the sandbox; nothing
    /// went upstream. `reason`: notAllowlisted, denied, recordType,
    /// longLabel, tooManyLabels, badCharacters or malformed. `suppressed`:
    /// refusals dropped by the rate limit since the last event.
    NetworkDnsRefused {
        name: String,
        record_type: String,
        reason: String,
        message: String,
        suppressed: Option<u64>,
    },
    /// An allowlisted name was resolved; its `addresses` are reachable now.
    NetworkDnsResolved {
        name: String,
        record_type: String,
        addresses: Vec<String>,
    },
    /// A host command requested from the sandbox finished.
    EscalationFinished {
        request_id: String,
        exit_status: Option<i32>,
    },
}

/// The coordinator's API. `lazaret` implements `LazaretApiServer`; see
/// `docs/rpc.md` for transcripts.
#[cfg(feature = "rpc")]
#[rpc(server)]
pub trait LazaretApi {
    /// Registers a client session; resolves once the sandbox is running.
    /// The session counts as live until `session/unregister` or until its
    /// connection closes (reference-counted teardown).
    #[method(name = "session/register", with_extensions)]
    async fn session_register(
        &self,
        session_id: String,
        pid: u32,
        command: Option<Vec<String>>,
        client: Option<String>,
        public_key: Option<String>,
    ) -> RpcResult<RegisterResult>;

    /// Ends a session of this connection and records it.
    #[method(name = "session/unregister", with_extensions)]
    async fn session_unregister(&self, session_id: String, exit_status: Option<i32>) -> RpcResult<bool>;

    /// Completed sessions from the state store, oldest first.
    #[method(name = "session/list")]
    async fn session_list(&self, limit: Option<usize>) -> RpcResult<Vec<CompletedSession>>;

    /// The domain: profile, workspace, container state, live sessions.
    #[method(name = "domain/status")]
    async fn domain_status(&self) -> RpcResult<DomainStatus>;

    /// Tears the whole domain down (every session ends, the sandbox is
    /// removed), as the prompt's [Q] Abort does.
    #[method(name = "domain/shutdown")]
    async fn domain_shutdown(&self, reason: Option<String>) -> RpcResult<bool>;

    /// The sandbox's egress policy as the Network Sidecar enforces it
    /// (`allow` and `deny` CIDR lists, read back from the kernel).
    #[method(name = "network/show")]
    async fn network_show(&self) -> RpcResult<serde_json::Value>;

    /// Allows a CIDR, an address or a DNS name (`github.com`,
    /// `*.npmjs.org`) live, without restarting the sandbox.
    #[method(name = "network/allow")]
    async fn network_allow(&self, rule: String) -> RpcResult<serde_json::Value>;

    /// Denies a CIDR or a name live (removes an allow entry, or carves a
    /// hole in a wider one).
    #[method(name = "network/deny")]
    async fn network_deny(&self, rule: String) -> RpcResult<serde_json::Value>;

    /// Re-reads the configuration file and replaces the live policy with its
    /// merged allowlist (live `allow`/`deny` changes are dropped). An invalid
    /// configuration changes nothing.
    #[method(name = "network/reload")]
    async fn network_reload(&self) -> RpcResult<serde_json::Value>;

    /// Requests waiting for a human, oldest first.
    #[method(name = "escalation/list")]
    async fn escalation_list(&self) -> RpcResult<Vec<PendingEscalation>>;

    /// Answers a pending request: `decision` is `approve`, `deny`, `edit`
    /// (then `argv` is what runs) or `abort` (deny, recorded as aborted). The first answer wins; later ones fail
    /// with code 1007. `client` names the answering client for the audit
    /// trail (`terminal`, `vscode`, `neovim`, ...).
    #[method(name = "escalation/respond")]
    async fn escalation_respond(
        &self,
        request_id: String,
        decision: String,
        argv: Option<Vec<String>>,
        reason: Option<String>,
        client: Option<String>,
    ) -> RpcResult<bool>;

    /// The escalation audit trail, oldest first (`limit` most recent).
    #[method(name = "audit/list")]
    async fn audit_list(&self, limit: Option<usize>) -> RpcResult<Vec<serde_json::Value>>;

    /// Verifies the audit hash chain.
    #[method(name = "audit/verify")]
    async fn audit_verify(&self) -> RpcResult<AuditVerification>;

    /// The agent branch against its base, plus uncommitted changes.
    /// `patch: false` leaves the patch texts empty.
    #[method(name = "branch/diff")]
    async fn branch_diff(&self, patch: Option<bool>) -> RpcResult<BranchDiff>;

    /// Domain events as `events/event` notifications.
    #[subscription(name = "events/subscribe" => "events/event", unsubscribe = "events/unsubscribe", item = Event)]
    async fn events_subscribe(&self) -> SubscriptionResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_camel_case() {
        let event = Event::SessionEnded { session_id: "s".into(), exit_status: Some(1), end_reason: "exited".into(), session_count: 0 };
        let json = serde_json::to_value(&event).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"kind": "sessionEnded", "sessionId": "s", "exitStatus": 1, "endReason": "exited", "sessionCount": 0})
        );
        let state = serde_json::to_value(ContainerState::Running).expect("json");
        assert_eq!(state, "running");
    }
}
