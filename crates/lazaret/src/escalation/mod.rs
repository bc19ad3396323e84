//! Host Escalation, coordinator side (design document section 5, DECISIONS
//! D9): the Trust Anchor, the Escalation Socket server, verification of the
//! Session Anchor signatures, the policy decision, the wait for a human,
//! direct execution and the audit trail.

pub mod execute;
pub mod limits;
pub mod server;
pub mod trust_anchor;
pub mod verify;

use std::collections::HashMap;
use std::sync::Mutex;

use lazaret_protocol::PendingEscalation;
use tokio::sync::oneshot;

/// A human's (or editor's) answer to a pending request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approve {
        decided_by: String,
    },
    Edit {
        argv: Vec<String>,
        decided_by: String,
    },
    Deny {
        reason: String,
        decided_by: String,
    },
    /// The owning CLI aborted: denied, and the domain is torn down.
    Abort {
        decided_by: String,
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
