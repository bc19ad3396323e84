//! Record types stored as JSON values.

use serde::{Deserialize, Serialize};

/// One completed client session (a `lazaret run` that ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: String,
    pub pid: u32,
    pub command: Vec<String>,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// The inner command's exit status, if the client reported one.
    pub exit_status: Option<i32>,
    /// `exited` (the client unregistered) or `disconnected` (it vanished).
    pub end_reason: String,
}
