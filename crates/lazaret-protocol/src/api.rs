//! The coordinator's API as one jsonrpsee `#[rpc]` trait: the coordinator
//! implements `LazaretApiServer`, the CLI calls `LazaretApiClient`, and
//! `tests/generated.rs` derives the editors' TypeScript and Lua method
//! tables from this file. Parameter names are camelCase on the wire and
//! sent by name (an object); methods whose parameters are all optional
//! also accept `[]` or no params.

use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::proc_macros::rpc;

use crate::types::*;

/// The coordinator's API. See `docs/rpc.md` for transcripts.
#[rpc(server, client)]
pub trait LazaretApi {
    /// Registers a client session; resolves once the sandbox is running.
    /// The session counts as live until `session/unregister` or until its
    /// connection closes (reference-counted teardown).
    #[method(name = "session/register", with_extensions, param_kind = map)]
    async fn session_register(
        &self,
        #[argument(rename = "sessionId")] session_id: String,
        pid: u32,
        command: Option<Vec<String>>,
        client: Option<String>,
        #[argument(rename = "publicKey")] public_key: Option<String>,
    ) -> RpcResult<RegisterResult>;

    /// Ends a session of this connection and records it.
    #[method(name = "session/unregister", with_extensions, param_kind = map)]
    async fn session_unregister(
        &self,
        #[argument(rename = "sessionId")] session_id: String,
        #[argument(rename = "exitStatus")] exit_status: Option<i32>,
    ) -> RpcResult<bool>;

    /// Completed sessions from the state store, oldest first (`limit` most
    /// recent, 50 by default).
    #[method(name = "session/list", param_kind = map)]
    async fn session_list(&self, limit: Option<usize>) -> RpcResult<Vec<CompletedSession>>;

    /// The domain: profile, workspace, container state, live sessions.
    #[method(name = "domain/status", param_kind = map)]
    async fn domain_status(&self) -> RpcResult<DomainStatus>;

    /// Tears the whole domain down (every session ends, the sandbox is
    /// removed), as the prompt's [Q] Abort does.
    #[method(name = "domain/shutdown", param_kind = map)]
    async fn domain_shutdown(&self, reason: Option<String>) -> RpcResult<bool>;

    /// The sandbox's egress policy as the Network Sidecar enforces it.
    #[method(name = "network/show", param_kind = map)]
    async fn network_show(&self) -> RpcResult<NetworkPolicy>;

    /// Allows a CIDR, an address or a DNS name (`github.com`,
    /// `*.npmjs.org`) live, without restarting the sandbox.
    #[method(name = "network/allow", param_kind = map)]
    async fn network_allow(&self, rule: String) -> RpcResult<NetworkPolicy>;

    /// Denies a CIDR or a name live (removes an allow entry, or carves a
    /// hole in a wider one).
    #[method(name = "network/deny", param_kind = map)]
    async fn network_deny(&self, rule: String) -> RpcResult<NetworkPolicy>;

    /// Re-reads the configuration file and replaces the live policy with its
    /// merged allowlist (live `allow`/`deny` changes are dropped). An invalid
    /// configuration changes nothing.
    #[method(name = "network/reload", param_kind = map)]
    async fn network_reload(&self) -> RpcResult<NetworkPolicy>;

    /// Requests waiting for a human, oldest first.
    #[method(name = "escalation/list", param_kind = map)]
    async fn escalation_list(&self) -> RpcResult<Vec<PendingEscalation>>;

    /// Answers a pending request: `edit` runs `argv` instead. The first
    /// answer wins; later ones fail with code 1007. `client` names the
    /// answering client for the audit trail (`terminal`, `vscode`,
    /// `neovim`, ...); it is self-declared, any process of the user may
    /// answer.
    #[method(name = "escalation/respond", param_kind = map)]
    async fn escalation_respond(
        &self,
        #[argument(rename = "requestId")] request_id: String,
        decision: Decision,
        argv: Option<Vec<String>>,
        reason: Option<String>,
        client: Option<String>,
    ) -> RpcResult<bool>;

    /// Everything waiting for a human, oldest first: host commands and
    /// network destinations (`[network] ask`).
    #[method(name = "pending/list", param_kind = map)]
    async fn pending_list(&self) -> RpcResult<Vec<PendingItem>>;

    /// Answers a pending network request for `scope`. The first answer
    /// wins; later ones fail with code 1010. `client` as for
    /// `escalation/respond`.
    #[method(name = "network/respond", param_kind = map)]
    async fn network_respond(
        &self,
        #[argument(rename = "requestId")] request_id: String,
        decision: NetworkDecision,
        scope: GrantScope,
        client: Option<String>,
    ) -> RpcResult<bool>;

    /// The auto-approve rules in force and the network grants and
    /// remembered refusals, each with the id `rules/revoke` takes.
    #[method(name = "rules/list", param_kind = map)]
    async fn rules_list(&self) -> RpcResult<Rules>;

    /// Revokes a network grant (what it opened closes at once, established
    /// flows included), a remembered refusal, or an auto-approve rule (for
    /// this run of the domain: the configuration file is not changed).
    /// Fails with code 1011 for an unknown id.
    #[method(name = "rules/revoke", param_kind = map)]
    async fn rules_revoke(&self, id: String, client: Option<String>) -> RpcResult<bool>;

    /// A page of the audit trail (typed records: escalations, network
    /// events, credential use), oldest first: the `limit` most recent
    /// records (100 by default, at most 1000), or with `before` the most
    /// recent ones whose `sequence` is below it (to page back, pass the
    /// first `sequence` of the page you have).
    #[method(name = "audit/list", param_kind = map)]
    async fn audit_list(&self, limit: Option<usize>, before: Option<u64>) -> RpcResult<Vec<AuditRecord>>;

    /// Verifies the audit hash chain.
    #[method(name = "audit/verify", param_kind = map)]
    async fn audit_verify(&self) -> RpcResult<AuditVerification>;

    /// The agent branch against its base, plus uncommitted changes.
    /// `patch: false` leaves the patch texts empty. `head` (a full commit
    /// id) diffs that commit instead of the branch's current head, so a
    /// client can show again exactly what it showed (DECISIONS D16).
    #[method(name = "branch/diff", param_kind = map)]
    async fn branch_diff(&self, patch: Option<bool>, head: Option<String>) -> RpcResult<BranchDiff>;

    /// One path (relative to the workspace) at the agent branch's base, at
    /// its head, and in the sandbox's working tree, for a diff editor.
    /// `baseCommit` and `headCommit` (full commit ids, from the
    /// `BranchDiff` the client shows) pin the committed sides to those
    /// commits: a review shows the commits it names, never a branch that
    /// moved since (DECISIONS D16).
    #[method(name = "branch/fileContents", param_kind = map)]
    async fn branch_file_contents(
        &self,
        path: String,
        #[argument(rename = "baseCommit")] base_commit: Option<String>,
        #[argument(rename = "headCommit")] head_commit: Option<String>,
    ) -> RpcResult<FileContents>;

    /// What the agent changed in the profile's persistent directories (all,
    /// or the one named by `dir`), as `lazaret state diff` shows it.
    #[method(name = "state/diff", param_kind = map)]
    async fn state_diff(&self, dir: Option<String>) -> RpcResult<Vec<StateChange>>;

    /// Domain events as `events/event` notifications ([`SequencedEvent`]).
    #[subscription(name = "events/subscribe" => "events/event", unsubscribe = "events/unsubscribe", item = SequencedEvent)]
    async fn events_subscribe(&self) -> SubscriptionResult;
}
