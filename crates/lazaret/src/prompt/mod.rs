//! The terminal approval prompt: the four
//! actions [A]pprove, [D]eny, [E]dit, [Q] Abort over a queue of pending
//! escalations of this CLI's session. State and key handling (`state`,
//! `keys`) are separate from rendering (`render`), which is tested against
//! ratatui's `TestBackend` snapshots.

pub mod keys;
pub mod render;
pub mod state;

pub use state::{PromptAction, PromptState};
