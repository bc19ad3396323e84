//! The prompt's state: a queue of pending requests (this session's host
//! commands and the domain's network requests, in arrival order), the one
//! shown, and the in-place editor. Pure: keys in, actions out.

use lazaret_protocol::{GrantScope, NetworkDecision, PendingItem};

use super::keys::Key;

/// What the user decided, for the CLI to send to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptAction {
    Approve {
        request_id: String,
    },
    Deny {
        request_id: String,
    },
    Edit {
        request_id: String,
        argv: Vec<String>,
    },
    Abort {
        request_id: String,
    },
    /// The answer to a network request.
    Network {
        request_id: String,
        decision: NetworkDecision,
        scope: GrantScope,
    },
}

/// The network request's keys and what each answers, in the order the
/// prompt lists them. `d` and `D` differ: the prompt's keys are
/// case-sensitive for network requests.
pub const NETWORK_KEYS: [(char, NetworkDecision, GrantScope); 6] = [
    ('a', NetworkDecision::Allow, GrantScope::Session),
    ('m', NetworkDecision::Allow, GrantScope::Minutes { minutes: 15 }),
    ('h', NetworkDecision::Allow, GrantScope::Minutes { minutes: 60 }),
    ('p', NetworkDecision::Allow, GrantScope::Profile),
    ('d', NetworkDecision::Deny, GrantScope::Session),
    ('D', NetworkDecision::Deny, GrantScope::Profile),
];

/// The answer `key` gives a network request, if any.
pub fn network_answer(key: Key) -> Option<(NetworkDecision, GrantScope)> {
    let Key::Char(c) = key else { return None };
    NETWORK_KEYS.iter().find(|(k, _, _)| *k == c).map(|(_, decision, scope)| (*decision, *scope))
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
    pub queue: Vec<PendingItem>,
    pub mode: Mode,
}

impl PromptState {
    pub fn new() -> PromptState {
        PromptState { queue: Vec::new(), mode: Mode::Viewing }
    }

    pub fn is_active(&self) -> bool {
        !self.queue.is_empty()
    }

    pub fn current(&self) -> Option<&PendingItem> {
        self.queue.first()
    }

    /// Queues a request; one already queued (a network request re-sent as
    /// it was asked again) is updated where it stands.
    pub fn push(&mut self, item: PendingItem) {
        match self.queue.iter_mut().find(|known| known.request_id() == item.request_id()) {
            Some(known) => *known = item,
            None => self.queue.push(item),
        }
    }

    /// A request answered (here or elsewhere) leaves the queue.
    pub fn remove(&mut self, request_id: &str) {
        let was_current = self.current().is_some_and(|current| current.request_id() == request_id);
        self.queue.retain(|item| item.request_id() != request_id);
        if was_current {
            self.mode = Mode::Viewing;
        }
    }

    /// Makes the queue what the coordinator says is pending (after events
    /// were lost): answered requests leave, unseen ones join at the end.
    pub fn resync(&mut self, pending: &[PendingItem]) {
        let stale: Vec<String> = self
            .queue
            .iter()
            .filter(|queued| !pending.iter().any(|item| item.request_id() == queued.request_id()))
            .map(|queued| queued.request_id().to_owned())
            .collect();
        for request_id in stale {
            self.remove(&request_id);
        }
        for item in pending {
            self.push(item.clone());
        }
    }

    /// Applies one key; returns the decision it completes, if any. The
    /// decided request leaves the queue at once.
    pub fn handle_key(&mut self, key: Key) -> Option<PromptAction> {
        let current = self.current()?;
        let current_id = current.request_id().to_owned();
        let request_id = current_id.clone();
        let command = match current {
            PendingItem::Command(escalation) => escalation.display.clone(),
            PendingItem::Network(_) => {
                let action = network_answer(key).map(|(decision, scope)| PromptAction::Network { request_id, decision, scope });
                if action.is_some() {
                    self.remove(&current_id);
                }
                return action;
            }
        };
        let action = match &mut self.mode {
            Mode::Viewing => match key {
                Key::Char('a' | 'A') => Some(PromptAction::Approve { request_id }),
                Key::Char('d' | 'D') => Some(PromptAction::Deny { request_id }),
                Key::Char('q' | 'Q') => Some(PromptAction::Abort { request_id }),
                Key::Char('e' | 'E') => {
                    let text = command;
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
    use lazaret_protocol::{PendingEscalation, PendingNetworkRequest};

    use super::*;

    /// A pending host command, queued.
    pub fn command(id: &str, argv: &[&str]) -> PendingItem {
        PendingItem::Command(escalation(id, argv))
    }

    pub fn network(id: &str, destination: &str, repeats: u64) -> PendingItem {
        PendingItem::Network(PendingNetworkRequest {
            request_id: id.to_owned(),
            domain_hash: "0123456789ab".to_owned(),
            profile: "claude".to_owned(),
            destination: destination.to_owned(),
            record_types: vec!["A".to_owned(), "AAAA".to_owned()],
            session_ids: vec!["5e55".to_owned()],
            repeats,
            received_at_ms: 0,
            expires_at_ms: 300_000,
        })
    }

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
            state.push(command("r", &["cargo", "test"]));
            assert_eq!(state.handle_key(Key::Char(key)), Some(expected));
            assert!(!state.is_active());
        }
        let mut state = PromptState::new();
        state.push(command("r", &["cargo", "test"]));
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
        state.push(command("r", &["echo", "x"]));
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
        state.push(command("one", &["a"]));
        state.push(command("two", &["b"]));
        state.push(command("three", &["c"]));
        state.remove("two");
        assert_eq!(state.handle_key(Key::Char('a')), Some(PromptAction::Approve { request_id: "one".into() }));
        assert_eq!(state.current().map(|e| e.request_id()), Some("three"));
        state.handle_key(Key::Char('e'));
        state.remove("three");
        assert!(!state.is_active());
        assert_eq!(state.mode, Mode::Viewing);
    }
}

#[cfg(test)]
mod network_tests {
    use super::tests::{command, network};
    use super::*;

    fn current_id(state: &PromptState) -> Option<&str> {
        state.current().map(PendingItem::request_id)
    }

    #[test]
    fn each_network_key_answers_with_its_decision_and_scope() {
        let expected = [
            ('a', NetworkDecision::Allow, GrantScope::Session),
            ('m', NetworkDecision::Allow, GrantScope::Minutes { minutes: 15 }),
            ('h', NetworkDecision::Allow, GrantScope::Minutes { minutes: 60 }),
            ('p', NetworkDecision::Allow, GrantScope::Profile),
            ('d', NetworkDecision::Deny, GrantScope::Session),
            ('D', NetworkDecision::Deny, GrantScope::Profile),
        ];
        for (key, decision, scope) in expected {
            let mut state = PromptState::new();
            state.push(network("n", "grant.test", 0));
            assert_eq!(
                state.handle_key(Key::Char(key)),
                Some(PromptAction::Network { request_id: "n".into(), decision, scope }),
                "key {key}"
            );
            assert!(!state.is_active(), "key {key} takes the request off");
        }
    }

    #[test]
    fn other_keys_leave_a_network_request_waiting() {
        let mut state = PromptState::new();
        state.push(network("n", "grant.test", 0));
        for key in [Key::Char('A'), Key::Char('e'), Key::Char('q'), Key::Char('x'), Key::Enter, Key::Escape, Key::Backspace] {
            assert_eq!(state.handle_key(key), None, "{key:?}");
        }
        assert_eq!(current_id(&state), Some("n"));
        assert_eq!(state.mode, Mode::Viewing, "a network request is never edited");
    }

    #[test]
    fn commands_and_network_requests_share_one_queue_in_arrival_order() {
        let mut state = PromptState::new();
        state.push(command("c1", &["cargo", "test"]));
        state.push(network("n1", "grant.test", 0));
        state.push(command("c2", &["ls"]));
        // The command's keys answer the command, not the network request.
        assert_eq!(state.handle_key(Key::Char('m')), None);
        assert_eq!(state.handle_key(Key::Char('a')), Some(PromptAction::Approve { request_id: "c1".into() }));
        assert_eq!(current_id(&state), Some("n1"));
        assert_eq!(
            state.handle_key(Key::Char('d')),
            Some(PromptAction::Network { request_id: "n1".into(), decision: NetworkDecision::Deny, scope: GrantScope::Session })
        );
        assert_eq!(current_id(&state), Some("c2"));
        assert_eq!(state.handle_key(Key::Char('D')), Some(PromptAction::Deny { request_id: "c2".into() }));
        assert!(!state.is_active());
    }

    #[test]
    fn a_repeated_network_request_is_updated_where_it_stands() {
        let mut state = PromptState::new();
        state.push(network("n1", "grant.test", 0));
        state.push(command("c1", &["ls"]));
        state.push(network("n1", "grant.test", 3));
        assert_eq!(state.queue.len(), 2);
        assert_eq!(current_id(&state), Some("n1"));
        assert!(matches!(state.current(), Some(PendingItem::Network(request)) if request.repeats == 3));
    }

    #[test]
    fn a_network_request_resolved_elsewhere_leaves_the_queue() {
        let mut state = PromptState::new();
        state.push(network("n1", "one.test", 0));
        state.push(network("n2", "two.test", 0));
        state.remove("n1");
        assert_eq!(current_id(&state), Some("n2"));
        state.remove("n2");
        assert!(!state.is_active());
    }

    #[test]
    fn resync_keeps_both_kinds_and_drops_what_was_answered() {
        let mut state = PromptState::new();
        state.push(command("c1", &["ls"]));
        state.push(network("n1", "one.test", 0));
        state.push(network("n2", "two.test", 0));
        state.resync(&[network("n2", "two.test", 5), command("c2", &["pwd"]), network("n3", "three.test", 0)]);
        let ids: Vec<&str> = state.queue.iter().map(PendingItem::request_id).collect();
        assert_eq!(ids, ["n2", "c2", "n3"]);
        assert!(matches!(state.current(), Some(PendingItem::Network(request)) if request.repeats == 5));
    }
}
