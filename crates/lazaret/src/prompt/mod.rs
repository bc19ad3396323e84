//! The terminal approval prompt over one queue, in arrival order, of this
//! CLI's session's pending escalations (the four actions [A]pprove, [D]eny,
//! [E]dit, [Q] Abort) and its domain's network requests (allow for the
//! session, 15 minutes, 1 hour or the profile; deny for the session or the
//! profile). State and key handling (`state`,
//! `keys`) are separate from rendering (`render`), which is tested against
//! ratatui's `TestBackend` snapshots.

pub mod keys;
pub mod render;
pub mod state;

pub use state::{PromptAction, PromptState};
