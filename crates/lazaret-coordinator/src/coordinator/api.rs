//! The coordinator's in-memory state and its implementation of the
//! `LazaretApi` JSON-RPC trait. Sessions are keyed by id and owned by the
//! control connection that registered them, so a vanished client (even one
//! killed with SIGKILL) is unregistered when its connection closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jsonrpsee::core::{async_trait, RpcResult, SubscriptionResult};
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::{ConnectionId, Extensions, PendingSubscriptionSink, SubscriptionMessage};
use lazaret_core::config::ResolvedProfile;
use lazaret_core::time::now_ms;
use lazaret_protocol::sidecar::{NameCount, SidecarEvent, SidecarRequest, WithheldPart};
use lazaret_protocol::{
    error_code, AuditEvent, AuditRecord, AuditVerification, BranchDiff, CompletedSession, ContainerState, CredentialUse, Decision,
    DecisionSource, DomainStatus, Event, FileContents, GrantScope, LazaretApiServer, LiveSession, NetworkDecision, NetworkPolicy, Outcome,
    PendingEscalation, PendingItem, PolicyAction, RegisterResult, Rules, SequencedEvent, SessionTarget, StateChange, API_VERSION,
};
use lazaret_store::Store;
use tokio::sync::{broadcast, watch, Notify};

use crate::escalation::Answer;
use crate::git_sentry::sync::Export;
use crate::git_sentry::{self, GitLayout};

mod asks;
mod sidecar_events;

/// Most audit records in one `audit/list` answer.
const MAX_AUDIT_PAGE: usize = 1000;

fn rpc_error(code: i32, message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), None::<()>)
}

struct Session {
    connection: ConnectionId,
    live: LiveSession,
    /// The client's Session Anchor public key.
    public_key: Option<ed25519_dalek::VerifyingKey>,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Session>,
    shutting_down: bool,
    ever_registered: bool,
}

/// Shared by the RPC handlers and the coordinator's main loop.
pub struct Domain {
    pub resolved: ResolvedProfile,
    /// The agent-branch layout, `None` for a directly mounted workspace.
    pub git: Option<GitLayout>,
    pub store: Arc<Store>,
    pub started_at_ms: u64,
    sessions: Mutex<Sessions>,
    container: watch::Sender<(ContainerState, Option<String>)>,
    default_command: Mutex<Vec<String>>,
    events: broadcast::Sender<Event>,
    /// Signalled whenever the live session count drops to zero.
    pub idle: Notify,
    /// Signalled by `domain/shutdown`.
    pub shutdown_requested: Notify,
    /// The sandbox: local, or a pod on a cluster; everything that differs
    /// between the two is there (`crate::backend`).
    pub backend: crate::backend::SandboxBackend,
    /// Why the sandbox has no working network now (the sidecar stopped).
    network_error: Mutex<Option<String>>,
    /// The credential endpoints' counts at the last `credentialUse` record.
    credential_counted: Mutex<Vec<lazaret_protocol::CredentialEndpointStatus>>,
    /// Re-reads the configuration: the merged allowlist (`network/reload`).
    egress_reloader: Mutex<Option<EgressReloader>>,
    /// Escalation requests waiting for a human.
    pub broker: crate::escalation::Broker,
    /// Network requests waiting for a human, and the grants answers made.
    network_requests: Mutex<crate::network_requests::NetworkRequests>,
    /// Auto-approve rules revoked in this run (indexes into the profile's).
    revoked_auto_approve: Mutex<std::collections::BTreeSet<usize>>,
}

impl Domain {
    pub fn new(resolved: ResolvedProfile, store: Arc<Store>, git: Option<GitLayout>, backend: crate::backend::SandboxBackend) -> Domain {
        Domain {
            resolved,
            git,
            store,
            started_at_ms: now_ms(),
            sessions: Mutex::default(),
            container: watch::channel((ContainerState::Starting, None)).0,
            default_command: Mutex::new(Vec::new()),
            events: broadcast::channel(256).0,
            idle: Notify::new(),
            shutdown_requested: Notify::new(),
            backend,
            network_error: Mutex::new(None),
            credential_counted: Mutex::new(Vec::new()),
            egress_reloader: Mutex::new(None),
            broker: crate::escalation::Broker::default(),
            network_requests: Mutex::default(),
            revoked_auto_approve: Mutex::default(),
        }
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        // A panic while holding this lock cannot leave the map half-updated
        // (every update is a single insert or remove), so keep going.
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    pub fn set_container_state(&self, state: ContainerState, message: Option<String>) {
        self.container.send_replace((state, message.clone()));
        self.emit(Event::ContainerState { state, message });
    }

    pub fn set_default_command(&self, command: Vec<String>) {
        *self.default_command.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = command;
    }

    /// The agent branch's layout, or the error of a domain without one.
    fn agent_branch_layout(&self) -> Result<GitLayout, ErrorObjectOwned> {
        self.git
            .clone()
            .ok_or_else(|| rpc_error(error_code::INVALID_VALUE, "this domain mounts its workspace directly; there is no agent branch"))
    }

    pub fn container_is_running(&self) -> bool {
        self.container.borrow().0 == ContainerState::Running
    }

    /// Exports the agent branch to the host if it changed since the last
    /// export (one export at a time), and announces the outcome.
    pub async fn export_agent_branch(&self) {
        let Some(layout) = &self.git else { return };
        if let Some(result) = self.backend.export_branch(layout, self.container_is_running()).await {
            self.report_export(&layout.branch, result);
        }
    }

    /// How a session joins the sandbox.
    pub fn session_target(&self) -> crate::Result<SessionTarget> {
        self.backend.session_target(&self.resolved)
    }

    /// Where reads of the sandbox's working tree run; an error before the
    /// sandbox runs where it is (a pod not up yet).
    fn inside(&self) -> Result<crate::sandbox_exec::Inside<'_>, ErrorObjectOwned> {
        self.backend
            .inside(&self.resolved)
            .ok_or_else(|| rpc_error(error_code::SANDBOX_NOT_RUNNING, "the sandbox is not running yet: its working tree cannot be read"))
    }

    /// Teardown has begun: no session joins any more.
    pub fn is_shutting_down(&self) -> bool {
        self.sessions().shutting_down
    }

    /// Announces (and logs) the outcome of an export of the agent branch.
    fn report_export(&self, branch: &str, result: crate::Result<Export>) {
        match result {
            Ok(Export::Updated { previous, commit }) => {
                tracing::info!(branch, commit, "agent branch updated on the host");
                self.emit(Event::BranchUpdated { branch: branch.to_owned(), commit, previous });
            }
            Ok(Export::Unchanged | Export::NoBranch) => {}
            Err(error) => {
                tracing::warn!(branch, error = %error.chained(), "export of the agent branch refused");
                self.emit(Event::BranchRejected { branch: branch.to_owned(), reason: error.chained() });
            }
        }
    }

    /// Runs a store query on the blocking pool (section 4.4), as an RPC result.
    async fn read_store<T: Send + 'static>(&self, query: impl FnOnce(&Store) -> lazaret_store::Result<T> + Send + 'static) -> RpcResult<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || query(&store))
            .await
            .map_err(|error| rpc_error(error_code::STORE_FAILED, error.to_string()))?
            .map_err(|error| rpc_error(error_code::STORE_FAILED, error.to_string()))
    }

    /// The registered Session Anchor key of a live session.
    pub fn session_public_key(&self, session_id: &str) -> Option<ed25519_dalek::VerifyingKey> {
        self.sessions().by_id.get(session_id).and_then(|session| session.public_key)
    }

    /// Appends an audit record (on the blocking pool); failures are logged,
    /// never swallowed silently.
    pub async fn audit(&self, mut record: AuditRecord) {
        crate::escalation::limits::bound_for_audit(&mut record);
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.append_audit(record)).await {
            Ok(Ok(record)) => {
                tracing::info!(kind = record.event.kind(), outcome = %record.outcome, sequence = record.sequence, "audited")
            }
            Ok(Err(error)) => tracing::error!(%error, "cannot write the audit record"),
            Err(error) => tracing::error!(%error, "audit task failed"),
        }
    }

    pub fn live_count(&self) -> usize {
        self.sessions().by_id.len()
    }

    pub fn ever_registered(&self) -> bool {
        self.sessions().ever_registered
    }

    /// Marks the domain as shutting down if no session is live; returns
    /// whether it did. New registrations are refused from then on.
    pub fn begin_shutdown_if_idle(&self) -> bool {
        let mut sessions = self.sessions();
        if !sessions.by_id.is_empty() {
            return false;
        }
        sessions.shutting_down = true;
        true
    }

    /// Marks the domain as shutting down, live sessions or not (teardown
    /// for a signal or a requested shutdown). New registrations are refused
    /// from then on.
    pub fn begin_shutdown(&self) {
        self.sessions().shutting_down = true;
    }

    /// Ends every session of a closed connection.
    pub async fn connection_closed(&self, connection: ConnectionId) {
        let ended: Vec<LiveSession> = {
            let mut sessions = self.sessions();
            let ids: Vec<String> = sessions.by_id.iter().filter(|(_, s)| s.connection == connection).map(|(id, _)| id.clone()).collect();
            ids.into_iter().filter_map(|id| sessions.by_id.remove(&id)).map(|session| session.live).collect()
        };
        for live in ended {
            self.finish(live, None, "disconnected").await;
        }
    }

    /// Records an ended session, announces it, and wakes the main loop when
    /// it was the last one.
    async fn finish(&self, live: LiveSession, exit_status: Option<i32>, end_reason: &str) {
        let record = CompletedSession {
            session_id: live.session_id.clone(),
            pid: live.pid,
            command: live.command.clone(),
            started_at_ms: live.started_at_ms,
            ended_at_ms: now_ms(),
            exit_status,
            end_reason: end_reason.to_owned(),
        };
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.record_session(&record)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::error!(%error, "cannot record a completed session"),
            Err(error) => tracing::error!(%error, "session recording task failed"),
        }
        self.record_credential_use(&live.session_id).await;
        let session_count = self.live_count();
        tracing::info!(session = %live.session_id, end_reason, session_count, "session ended");
        self.emit(Event::SessionEnded { session_id: live.session_id, exit_status, end_reason: end_reason.to_owned(), session_count });
        if session_count == 0 {
            self.idle.notify_one();
        }
    }
}

/// The Escalation Socket's view of the domain.
impl crate::escalation::EscalationDomain for Domain {
    fn session_public_key(&self, session_id: &str) -> Option<ed25519_dalek::VerifyingKey> {
        Domain::session_public_key(self, session_id)
    }

    fn broker(&self) -> &crate::escalation::Broker {
        &self.broker
    }

    fn emit(&self, event: Event) {
        Domain::emit(self, event);
    }

    fn audit(&self, record: AuditRecord) -> impl std::future::Future<Output = ()> + Send {
        Domain::audit(self, record)
    }

    fn revoked_auto_approve_rules(&self) -> Vec<usize> {
        Domain::revoked_auto_approve_rules(self)
    }
}

/// Re-reads the configuration and returns the domain's merged allowlist and
/// `[network] private_answers`.
pub type EgressReloader =
    Arc<dyn Fn() -> crate::Result<(Vec<lazaret_core::egress::EgressRule>, lazaret_core::egress::PrivateAnswers)> + Send + Sync>;

/// The audit record of a network event that happens now (received,
/// decided and finished at once).
fn network_record(event: AuditEvent, outcome: Outcome, decided_by: DecisionSource, reason: Option<String>) -> AuditRecord {
    AuditRecord::at(now_ms(), event, outcome, decided_by, reason)
}

/// The RPC face of a [`Domain`].
#[derive(Clone)]
pub struct Api(pub Arc<Domain>);

/// A change to the egress policy from a client.
#[derive(Clone, Copy)]
enum NetworkChange {
    Allow,
    Deny,
}

impl NetworkChange {
    /// The policy action of audit records; its word is the one of events and logs.
    fn action(self) -> PolicyAction {
        match self {
            NetworkChange::Allow => PolicyAction::Allow,
            NetworkChange::Deny => PolicyAction::Deny,
        }
    }

    /// The audit outcome of the change carried out.
    fn outcome(self) -> Outcome {
        match self {
            NetworkChange::Allow => Outcome::NetworkAllowed,
            NetworkChange::Deny => Outcome::NetworkDenied,
        }
    }

    fn request(self, entry: String) -> SidecarRequest {
        match self {
            NetworkChange::Allow => SidecarRequest::Allow { entries: vec![entry], for_ms: None },
            NetworkChange::Deny => SidecarRequest::Deny { entries: vec![entry], for_ms: None },
        }
    }
}

impl Api {
    async fn change_network(&self, change: NetworkChange, rule: String) -> RpcResult<NetworkPolicy> {
        let parsed: lazaret_core::egress::EgressRule =
            rule.parse().map_err(|message: String| rpc_error(error_code::INVALID_VALUE, message))?;
        let answer = self.0.sidecar(change.request(parsed.to_string())).await;
        // Policy changes are audited next to escalations, refused ones too.
        let outcome = if answer.is_ok() { change.outcome() } else { Outcome::Rejected };
        let reason = answer.as_ref().err().map(|error| error.message().to_owned());
        let action = change.action();
        let changed = AuditEvent::PolicyChanged { action, entries: vec![parsed.to_string()], private_answers: None };
        self.0.audit(network_record(changed, outcome, DecisionSource::Rpc { client: None }, reason)).await;
        let answer = answer?;
        tracing::info!(%action, rule = %parsed, "egress policy changed");
        self.0.emit(Event::NetworkChanged { action: action.to_string(), rule: parsed.to_string() });
        Ok(answer)
    }
}

fn connection_of(extensions: &Extensions) -> RpcResult<ConnectionId> {
    extensions.get::<ConnectionId>().copied().ok_or_else(|| rpc_error(-32603, "no connection id"))
}

fn valid_session_id(id: &str) -> bool {
    (16..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

#[async_trait]
impl LazaretApiServer for Api {
    async fn session_register(
        &self,
        extensions: &Extensions,
        session_id: String,
        pid: u32,
        command: Option<Vec<String>>,
        client: Option<String>,
        public_key: Option<String>,
    ) -> RpcResult<RegisterResult> {
        let connection = connection_of(extensions)?;
        if !valid_session_id(&session_id) {
            return Err(rpc_error(error_code::INVALID_VALUE, format!("sessionId `{session_id}` must be 16 to 64 hex digits")));
        }
        let public_key = match public_key {
            Some(text) => Some(
                crate::escalation::verify::decode_public_key(&text)
                    .ok_or_else(|| rpc_error(error_code::INVALID_VALUE, "publicKey must be a base64 ed25519 public key"))?,
            ),
            None => None,
        };
        let domain = &self.0;
        let session_count = {
            let mut sessions = domain.sessions();
            if sessions.shutting_down {
                return Err(rpc_error(error_code::SHUTTING_DOWN, "the domain is shutting down; start a new session"));
            }
            if sessions.by_id.contains_key(&session_id) {
                return Err(rpc_error(error_code::INVALID_VALUE, format!("session {session_id} is already registered")));
            }
            let live = LiveSession {
                session_id: session_id.clone(),
                pid,
                client: client.unwrap_or_else(|| "cli".to_owned()),
                command: command.unwrap_or_default(),
                started_at_ms: now_ms(),
            };
            sessions.by_id.insert(session_id.clone(), Session { connection, live, public_key });
            sessions.ever_registered = true;
            sessions.by_id.len()
        };
        tracing::info!(session = %session_id, pid, session_count, "session registered");
        domain.emit(Event::SessionRegistered { session_id: session_id.clone(), pid, session_count });

        // Resolve once the sandbox is up (or has failed).
        let mut container = domain.container.subscribe();
        let state = match container.wait_for(|(state, _)| *state != ContainerState::Starting).await {
            Ok(state) => state.clone(),
            Err(_) => (ContainerState::Failed, Some("the coordinator is stopping".to_owned())),
        };
        if state.0 != ContainerState::Running {
            let removed = domain.sessions().by_id.remove(&session_id);
            if let Some(session) = removed {
                domain.finish(session.live, None, "sandbox-failed").await;
            }
            let message = state.1.unwrap_or_else(|| format!("the sandbox is {:?}", state.0));
            return Err(rpc_error(error_code::SANDBOX_FAILED, message));
        }
        let default_command = domain.default_command.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let target = match domain.session_target() {
            Ok(target) => target,
            Err(error) => {
                let removed = domain.sessions().by_id.remove(&session_id);
                if let Some(session) = removed {
                    domain.finish(session.live, None, "sandbox-failed").await;
                }
                return Err(rpc_error(error_code::SANDBOX_FAILED, error.chained()));
            }
        };
        Ok(RegisterResult {
            domain_hash: domain.resolved.domain.domain_hash.clone(),
            container_name: domain.resolved.domain.container_name.clone(),
            default_command,
            session_count,
            target,
        })
    }

    async fn session_unregister(&self, extensions: &Extensions, session_id: String, exit_status: Option<i32>) -> RpcResult<bool> {
        let connection = connection_of(extensions)?;
        let removed = {
            let mut sessions = self.0.sessions();
            match sessions.by_id.get(&session_id) {
                Some(session) if session.connection == connection => sessions.by_id.remove(&session_id),
                _ => None,
            }
        };
        match removed {
            Some(session) => {
                // The session's last commits are on the host before its CLI exits.
                self.0.export_agent_branch().await;
                self.0.finish(session.live, exit_status, "exited").await;
                Ok(true)
            }
            None => Err(rpc_error(error_code::UNKNOWN_SESSION, format!("no session {session_id} on this connection"))),
        }
    }

    async fn session_list(&self, limit: Option<usize>) -> RpcResult<Vec<CompletedSession>> {
        let limit = limit.unwrap_or(50).min(10_000);
        let records = self.0.read_store(move |store| store.sessions(limit)).await?;
        Ok(records)
    }

    async fn domain_status(&self) -> RpcResult<DomainStatus> {
        let domain = &self.0;
        let (container_state, container_error) = domain.container.borrow().clone();
        let mut sessions: Vec<LiveSession> = domain.sessions().by_id.values().map(|session| session.live.clone()).collect();
        sessions.sort_by_key(|session| session.started_at_ms);
        Ok(DomainStatus {
            api_version: API_VERSION,
            domain_hash: domain.resolved.domain.domain_hash.clone(),
            profile: domain.resolved.profile.clone(),
            workspace: domain.resolved.workspace.display().to_string(),
            image: domain.resolved.image.clone(),
            container_name: domain.resolved.domain.container_name.clone(),
            container_state,
            container_error,
            coordinator_pid: std::process::id(),
            started_at_ms: domain.started_at_ms,
            sessions,
            agent_branch: domain.git.as_ref().map(|layout| layout.branch.clone()),
            agent_branch_head: match domain.git.clone() {
                Some(layout) => match tokio::task::spawn_blocking(move || layout.host.resolve(&layout.branch_ref())).await {
                    Ok(Ok(head)) => head,
                    Ok(Err(error)) => {
                        tracing::warn!(error = %error.chained(), "cannot read the agent branch's head on the host");
                        None
                    }
                    Err(error) => {
                        tracing::warn!(%error, "reading the agent branch's head failed");
                        None
                    }
                },
                None => None,
            },
            network_error: domain.network_error(),
        })
    }

    async fn domain_shutdown(&self, reason: Option<String>) -> RpcResult<bool> {
        tracing::info!(reason = reason.as_deref().unwrap_or("requested"), "shutdown requested over JSON-RPC");
        self.0.shutdown_requested.notify_one();
        Ok(true)
    }

    async fn network_show(&self) -> RpcResult<NetworkPolicy> {
        self.0.sidecar(SidecarRequest::Show {}).await
    }

    async fn network_allow(&self, rule: String) -> RpcResult<NetworkPolicy> {
        self.change_network(NetworkChange::Allow, rule).await
    }

    async fn network_deny(&self, rule: String) -> RpcResult<NetworkPolicy> {
        self.change_network(NetworkChange::Deny, rule).await
    }

    async fn network_reload(&self) -> RpcResult<NetworkPolicy> {
        let reloader = self.0.egress_reloader.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let reloader =
            reloader.ok_or_else(|| rpc_error(error_code::NETWORK_FAILED, "this coordinator cannot re-read its configuration"))?;
        let (rules, private_answers) = tokio::task::spawn_blocking(move || reloader())
            .await
            .map_err(|error| rpc_error(error_code::NETWORK_FAILED, error.to_string()))?
            .map_err(|error| rpc_error(error_code::INVALID_VALUE, error.chained()))?;
        let entries: Vec<String> = rules.iter().map(|rule| rule.to_string()).collect();
        let answer = self.0.sidecar(SidecarRequest::Set { allow: entries.clone(), deny: Vec::new(), private_answers }).await;
        let outcome = if answer.is_ok() { Outcome::NetworkReloaded } else { Outcome::Rejected };
        let reason = answer.as_ref().err().map(|error| error.message().to_owned());
        let reloaded =
            AuditEvent::PolicyChanged { action: PolicyAction::Reload, entries: entries.clone(), private_answers: Some(private_answers) };
        self.0.audit(network_record(reloaded, outcome, DecisionSource::Rpc { client: None }, reason)).await;
        let mut answer = answer?;
        // The grants of network requests outlive a reload.
        if let Err(error) = self.0.put_grants_in_force().await {
            return Err(rpc_error(
                error_code::NETWORK_FAILED,
                format!("reloaded, but the network grants did not come back: {}", error.chained()),
            ));
        }
        if let Ok(policy) = self.0.sidecar(SidecarRequest::Show {}).await {
            answer = policy;
        }
        tracing::info!(allow = ?entries, %private_answers, "egress policy reloaded from the configuration");
        self.0.emit(Event::NetworkChanged { action: PolicyAction::Reload.to_string(), rule: entries.join(" ") });
        Ok(answer)
    }

    async fn escalation_list(&self) -> RpcResult<Vec<PendingEscalation>> {
        Ok(self.0.broker.pending())
    }

    async fn pending_list(&self) -> RpcResult<Vec<PendingItem>> {
        Ok(self.0.pending_items())
    }

    async fn network_respond(
        &self,
        request_id: String,
        decision: NetworkDecision,
        scope: GrantScope,
        client: Option<String>,
    ) -> RpcResult<bool> {
        self.0.respond_network(&request_id, decision, scope, client).await
    }

    async fn rules_list(&self) -> RpcResult<Rules> {
        Ok(self.0.rules())
    }

    async fn rules_revoke(&self, id: String, client: Option<String>) -> RpcResult<bool> {
        self.0.revoke_rule(&id, client).await
    }

    async fn escalation_respond(
        &self,
        request_id: String,
        decision: Decision,
        argv: Option<Vec<String>>,
        reason: Option<String>,
        client: Option<String>,
    ) -> RpcResult<bool> {
        let decided_by = DecisionSource::Rpc { client };
        let answer = match decision {
            Decision::Approve => Answer::Approve { decided_by },
            Decision::Abort => Answer::Abort { decided_by },
            Decision::Deny => Answer::Deny { reason: reason.unwrap_or_else(|| "denied on the host".to_owned()), decided_by },
            Decision::Edit => {
                let argv = argv
                    .filter(|argv| !argv.is_empty() && !argv[0].is_empty())
                    .ok_or_else(|| rpc_error(error_code::INVALID_VALUE, "decision `edit` needs a non-empty argv: what runs instead"))?;
                if argv.iter().any(|word| word.contains('\0')) {
                    return Err(rpc_error(error_code::INVALID_VALUE, "argv must not contain NUL bytes"));
                }
                Answer::Edit { argv, decided_by }
            }
        };
        if self.0.broker.answer(&request_id, answer) {
            Ok(true)
        } else {
            Err(rpc_error(
                error_code::ESCALATION_NOT_PENDING,
                format!("request {request_id} is not pending (unknown, or already answered)"),
            ))
        }
    }

    async fn audit_list(&self, limit: Option<usize>, before: Option<u64>) -> RpcResult<Vec<AuditRecord>> {
        // Pages stay well under the response limit: records are bounded
        // (`limits::bound_for_audit`), and so is their number.
        let limit = limit.unwrap_or(100).min(MAX_AUDIT_PAGE);
        let records = self.0.read_store(move |store| store.audit_records_before(before, limit)).await?;
        Ok(records)
    }

    async fn audit_verify(&self) -> RpcResult<AuditVerification> {
        self.0.read_store(|store| store.verify_audit()).await
    }

    async fn branch_diff(&self, patch: Option<bool>, head: Option<String>) -> RpcResult<BranchDiff> {
        let layout = self.0.agent_branch_layout()?;
        let with_patch = patch.unwrap_or(true);
        let host = layout.host.clone();
        let branch = layout.branch.clone();
        let mut diff = tokio::task::spawn_blocking(move || match head {
            Some(head) => {
                let head = host.commit(&head).map_err(|refusal| {
                    rpc_error(error_code::INVALID_VALUE, format!("the head commit: {}", crate::error::chained(&refusal)))
                })?;
                git_sentry::diff::committed_at(&host, &branch, head, with_patch).map_err(git_failed)
            }
            None => git_sentry::diff::committed(&host, &branch, with_patch).map_err(git_failed),
        })
        .await
        .map_err(|error| rpc_error(error_code::GIT_FAILED, error.to_string()))??;
        if self.0.container_is_running() {
            git_sentry::diff::add_uncommitted(&mut diff, &self.0.inside()?, with_patch).await.map_err(git_failed)?;
        }
        Ok(diff)
    }

    async fn branch_file_contents(
        &self,
        path: String,
        base_commit: Option<String>,
        head_commit: Option<String>,
    ) -> RpcResult<FileContents> {
        let layout = self.0.agent_branch_layout()?;
        git_sentry::contents::check_path(&path).map_err(|refusal| rpc_error(error_code::INVALID_VALUE, refusal.to_string()))?;
        let host = layout.host.clone();
        let branch = layout.branch.clone();
        let committed_path = path.clone();
        let mut contents = tokio::task::spawn_blocking(move || {
            let pinned = |side: &str, id: &str| {
                host.commit(id).map_err(|refusal| {
                    rpc_error(error_code::INVALID_VALUE, format!("the {side} commit: {}", crate::error::chained(&refusal)))
                })
            };
            match (base_commit, head_commit) {
                (None, None) => git_sentry::contents::committed(&host, &branch, &committed_path).map_err(git_failed),
                (base, Some(head)) => {
                    let head = pinned("head", &head)?;
                    let (base, head) = match base {
                        Some(base) => (pinned("base", &base)?, head),
                        None => git_sentry::diff::endpoints_at(&host, head),
                    };
                    git_sentry::contents::committed_at(&host, base, head, &committed_path).map_err(git_failed)
                }
                (Some(_), None) => Err(rpc_error(
                    error_code::INVALID_VALUE,
                    "a base commit without a head commit: pin both, or the head alone (its base is its merge base with HEAD)",
                )),
            }
        })
        .await
        .map_err(|error| rpc_error(error_code::GIT_FAILED, error.to_string()))??;
        if self.0.container_is_running() {
            let working = git_sentry::contents::working(&self.0.inside()?, &path)
                .await
                .map_err(|error| rpc_error(error_code::SANDBOX_NOT_RUNNING, error.chained()))?;
            contents.working = Some(working);
        }
        Ok(contents)
    }

    async fn state_diff(&self, dir: Option<String>) -> RpcResult<Vec<StateChange>> {
        let resolved = &self.0.resolved;
        let dirs = crate::state_anchor::selected_dirs(&resolved.persistent_dirs, dir.as_deref().map(std::path::Path::new))
            .map_err(|error| rpc_error(error_code::INVALID_VALUE, error.chained()))?;
        let changes = self.0.backend.state_diff(resolved, dirs).await.map_err(|failure| match failure {
            crate::backend::StateDiffFailure::Base(error) => rpc_error(error_code::INVALID_VALUE, error.chained()),
            crate::backend::StateDiffFailure::Listing(error) => rpc_error(error_code::SANDBOX_NOT_RUNNING, error.chained()),
            crate::backend::StateDiffFailure::Read(error) => rpc_error(error_code::STORE_FAILED, error.chained()),
        })?;
        Ok(changes.iter().map(|change| change.wire()).collect())
    }

    async fn events_subscribe(&self, pending: PendingSubscriptionSink) -> SubscriptionResult {
        let mut events = self.0.events.subscribe();
        let sink = pending.accept().await?;
        // Numbered per subscription; a stretch the broadcast channel dropped
        // because this subscriber fell behind is reported, and numbered, as
        // one `eventsLagged`, so numbers never skip.
        let mut seq = 0;
        loop {
            let event = tokio::select! {
                _ = sink.closed() => return Ok(()),
                event = events.recv() => match event {
                    Ok(event) => event,
                    Err(broadcast::error::RecvError::Lagged(dropped)) => {
                        tracing::warn!(dropped, "an event subscriber fell behind");
                        Event::EventsLagged { dropped }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            seq += 1;
            let message = SubscriptionMessage::from(serde_json::value::to_raw_value(&SequencedEvent { seq, event })?);
            if sink.send(message).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// A git failure of `branch/*` in wire form.
fn git_failed(error: crate::Error) -> ErrorObjectOwned {
    rpc_error(error_code::GIT_FAILED, error.chained())
}
