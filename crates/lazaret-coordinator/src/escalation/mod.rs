//! Host Escalation, coordinator side (DECISIONS
//! D9): the Trust Anchor, the Escalation Socket server, verification of the
//! Session Anchor signatures, the policy decision, the wait for a human,
//! direct execution and the audit trail.

pub mod execute;
pub mod limits;
pub mod relay;
pub mod server;
pub mod trust_anchor;
pub mod verify;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use lazaret_core::config::ResolvedProfile;
use lazaret_core::policy::AutoApproveRule;
use lazaret_protocol::{AuditRecord, DecisionSource};
use lazaret_protocol::{Event, PendingEscalation};
use tokio::sync::oneshot;

/// What the Escalation Socket needs of the domain it serves, and no more:
/// the coordinator's `Domain` implements it. The server never sees the
/// session map, the store or the container, only these.
pub trait EscalationDomain: Send + Sync + 'static {
    /// The registered Session Anchor key of a live session (its delegation
    /// key is checked against it).
    fn session_public_key(&self, session_id: &str) -> Option<ed25519_dalek::VerifyingKey>;
    /// Requests waiting for a human, and the replay guard.
    fn broker(&self) -> &Broker;
    /// Publishes an event to the domain's subscribers.
    fn emit(&self, event: Event);
    /// Appends an audit record; failures are logged.
    fn audit(&self, record: AuditRecord) -> impl Future<Output = ()> + Send;
    /// Indexes (into the settings' `auto_approve_rules`) of the rules
    /// revoked in this run (`rules/revoke`).
    fn revoked_auto_approve_rules(&self) -> Vec<usize>;
}

/// The domain's identity and escalation policy, as the server applies it.
#[derive(Debug, Clone)]
pub struct EscalationSettings {
    pub domain_hash: String,
    pub profile: String,
    /// Where host commands run (the workspace).
    pub workspace: PathBuf,
    pub auto_approve_rules: Vec<AutoApproveRule>,
    /// How long a request waits for a human.
    pub approval_timeout: Duration,
    /// How long an approved host command may run.
    pub command_timeout: Duration,
}

impl EscalationSettings {
    pub fn of(resolved: &ResolvedProfile) -> EscalationSettings {
        EscalationSettings {
            domain_hash: resolved.domain.domain_hash.clone(),
            profile: resolved.profile.clone(),
            workspace: resolved.workspace.clone(),
            auto_approve_rules: resolved.auto_approve_rules.clone(),
            approval_timeout: Duration::from_secs(resolved.escalation_timeouts.approval_seconds),
            command_timeout: Duration::from_secs(resolved.escalation_timeouts.command_seconds),
        }
    }
}

/// A human's (or editor's) answer to a pending request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approve {
        decided_by: DecisionSource,
    },
    Edit {
        argv: Vec<String>,
        decided_by: DecisionSource,
    },
    Deny {
        reason: String,
        decided_by: DecisionSource,
    },
    /// The owning CLI aborted: denied, and the domain is torn down.
    Abort {
        decided_by: DecisionSource,
    },
}

struct Waiting {
    escalation: PendingEscalation,
    answer: oneshot::Sender<Answer>,
}

/// Requests waiting for a human. The first answer wins.
#[derive(Default)]
pub struct Broker {
    waiting: Mutex<HashMap<String, Waiting>>,
    pub replay_guard: Mutex<verify::ReplayGuard>,
}

impl Broker {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a pending request; the receiver gets the first answer.
    pub fn add(&self, escalation: PendingEscalation) -> oneshot::Receiver<Answer> {
        let (answer, receiver) = oneshot::channel();
        self.waiting().insert(escalation.request_id.clone(), Waiting { escalation, answer });
        receiver
    }

    /// Removes a request that timed out or whose client went away.
    pub fn withdraw(&self, request_id: &str) -> bool {
        self.waiting().remove(request_id).is_some()
    }

    /// Delivers an answer; false when the request is not (or no longer) pending.
    pub fn answer(&self, request_id: &str, answer: Answer) -> bool {
        match self.waiting().remove(request_id) {
            Some(waiting) => waiting.answer.send(answer).is_ok(),
            None => false,
        }
    }

    pub fn pending(&self) -> Vec<PendingEscalation> {
        let mut pending: Vec<PendingEscalation> = self.waiting().values().map(|waiting| waiting.escalation.clone()).collect();
        pending.sort_by_key(|escalation| escalation.received_at_ms);
        pending
    }
}
