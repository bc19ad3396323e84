//! The prompt's state: a queue of pending requests, the one shown, and the
//! in-place editor. Pure: keys in, actions out.

use lazaret_protocol::PendingEscalation;

use super::keys::Key;

/// What the user decided, for the CLI to send to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptAction {
    Approve { request_id: String },
    Deny { request_id: String },
    Edit { request_id: String, argv: Vec<String> },
    Abort { request_id: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Viewing,
    /// Editing the command line; `cursor` is a char index into `text`.
    Editing {
        text: String,
        cursor: usize,
        error: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptState {
    pub queue: Vec<PendingEscalation>,
    pub mode: Mode,
}

impl PromptState {
    pub fn new() -> PromptState {
        PromptState { queue: Vec::new(), mode: Mode::Viewing }
    }

    pub fn is_active(&self) -> bool {
        !self.queue.is_empty()
    }

    pub fn current(&self) -> Option<&PendingEscalation> {
        self.queue.first()
    }

    pub fn push(&mut self, escalation: PendingEscalation) {
        if !self.queue.iter().any(|known| known.request_id == escalation.request_id) {
            self.queue.push(escalation);
        }
    }

    /// A request answered (here or elsewhere) leaves the queue.
    pub fn remove(&mut self, request_id: &str) {
        let was_current = self.current().is_some_and(|current| current.request_id == request_id);
        self.queue.retain(|escalation| escalation.request_id != request_id);
        if was_current {
            self.mode = Mode::Viewing;
        }
    }

    /// Makes the queue what the coordinator says is pending (after events
    /// were lost): answered requests leave, unseen ones join at the end.
    pub fn resync(&mut self, pending: &[PendingEscalation]) {
        let stale: Vec<String> = self
            .queue
            .iter()
            .filter(|queued| !pending.iter().any(|escalation| escalation.request_id == queued.request_id))
            .map(|queued| queued.request_id.clone())
            .collect();
        for request_id in stale {
            self.remove(&request_id);
        }
        for escalation in pending {
            self.push(escalation.clone());
        }
    }

    /// Applies one key; returns the decision it completes, if any. The
    /// decided request leaves the queue at once.
    pub fn handle_key(&mut self, key: Key) -> Option<PromptAction> {
        let current_id = self.current()?.request_id.clone();
        let request_id = current_id.clone();
        let action = match &mut self.mode {
            Mode::Viewing => match key {
                Key::Char('a' | 'A') => Some(PromptAction::Approve { request_id }),
                Key::Char('d' | 'D') => Some(PromptAction::Deny { request_id }),
                Key::Char('q' | 'Q') => Some(PromptAction::Abort { request_id }),
                Key::Char('e' | 'E') => {
                    let text = self.current().map(|current| current.display.clone()).unwrap_or_default();
                    let cursor = text.chars().count();
                    self.mode = Mode::Editing { text, cursor, error: None };
                    None
                }
                _ => None,
            },
            Mode::Editing { text, cursor, error } => match key {
                Key::Escape => {
                    self.mode = Mode::Viewing;
                    None
                }
                Key::Enter => match shell_words::split(text) {
                    Ok(argv) if !argv.is_empty() => Some(PromptAction::Edit { request_id, argv }),
                    Ok(_) => {
                        *error = Some("the command is empty".to_owned());
                        None
                    }
                    Err(problem) => {
                        *error = Some(format!("cannot parse: {problem}"));
                        None
                    }
                },
                Key::Char(c) => {
                    let at = byte_index(text, *cursor);
                    text.insert(at, c);
                    *cursor += 1;
                    *error = None;
                    None
                }
                Key::Backspace if *cursor > 0 => {
                    let at = byte_index(text, *cursor - 1);
                    text.remove(at);
                    *cursor -= 1;
                    None
                }
                Key::Delete if *cursor < text.chars().count() => {
                    let at = byte_index(text, *cursor);
                    text.remove(at);
                    None
                }
                Key::Left => {
                    *cursor = cursor.saturating_sub(1);
                    None
                }
                Key::Right => {
                    *cursor = (*cursor + 1).min(text.chars().count());
                    None
                }
                Key::Home => {
                    *cursor = 0;
                    None
                }
                Key::End => {
                    *cursor = text.chars().count();
                    None
                }
                _ => None,
            },
        };
        if action.is_some() {
            self.remove(&current_id);
        }
        action
    }
}

impl Default for PromptState {
    fn default() -> PromptState {
        PromptState::new()
    }
}

fn byte_index(text: &str, char_index: usize) -> usize {
    text.char_indices().nth(char_index).map(|(index, _)| index).unwrap_or(text.len())
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn escalation(id: &str, argv: &[&str]) -> PendingEscalation {
        PendingEscalation {
            request_id: id.to_owned(),
            domain_hash: "0123456789ab".to_owned(),
            profile: "claude".to_owned(),
            session_id: "5e55".to_owned(),
            argv: argv.iter().map(|word| (*word).to_owned()).collect(),
            display: argv.join(" "),
            justification: Some("run the tests on the host".to_owned()),
            cwd: "/home/user/project".to_owned(),
            reasons: vec!["`cargo test` is not in auto_approve".to_owned()],
            risk_notes: vec!["cargo runs build scripts (build.rs) and may use a rustc-wrapper from .cargo/config.toml".to_owned()],
            received_at_ms: 0,
            expires_at_ms: 300_000,
        }
    }

    #[test]
    fn the_four_actions() {
        for (key, expected) in [
            ('a', PromptAction::Approve { request_id: "r".into() }),
            ('D', PromptAction::Deny { request_id: "r".into() }),
            ('q', PromptAction::Abort { request_id: "r".into() }),
        ] {
            let mut state = PromptState::new();
            state.push(escalation("r", &["cargo", "test"]));
            assert_eq!(state.handle_key(Key::Char(key)), Some(expected));
            assert!(!state.is_active());
        }
        let mut state = PromptState::new();
        state.push(escalation("r", &["cargo", "test"]));
        assert_eq!(state.handle_key(Key::Char('e')), None);
        for key in [Key::Char(' '), Key::Char('-'), Key::Char('q')] {
            state.handle_key(key);
        }
        assert_eq!(
            state.handle_key(Key::Enter),
            Some(PromptAction::Edit { request_id: "r".into(), argv: vec!["cargo".into(), "test".into(), "-q".into()] })
        );
    }

    #[test]
    fn editing_keeps_quotes_and_rejects_unparsable_text() {
        let mut state = PromptState::new();
        state.push(escalation("r", &["echo", "x"]));
        state.handle_key(Key::Char('e'));
        for c in " 'a b".chars() {
            state.handle_key(Key::Char(c));
        }
        assert_eq!(state.handle_key(Key::Enter), None, "unterminated quote");
        assert!(matches!(&state.mode, Mode::Editing { error: Some(_), .. }));
        state.handle_key(Key::Char('\''));
        assert_eq!(
            state.handle_key(Key::Enter),
            Some(PromptAction::Edit { request_id: "r".into(), argv: vec!["echo".into(), "x".into(), "a b".into()] })
        );
    }

    #[test]
    fn queued_requests_come_in_turn_and_vanish_when_answered_elsewhere() {
        let mut state = PromptState::new();
        state.push(escalation("one", &["a"]));
        state.push(escalation("two", &["b"]));
        state.push(escalation("three", &["c"]));
        state.remove("two");
        assert_eq!(state.handle_key(Key::Char('a')), Some(PromptAction::Approve { request_id: "one".into() }));
        assert_eq!(state.current().map(|e| e.request_id.as_str()), Some("three"));
        state.handle_key(Key::Char('e'));
        state.remove("three");
        assert!(!state.is_active());
        assert_eq!(state.mode, Mode::Viewing);
    }
}
