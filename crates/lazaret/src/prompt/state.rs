//! The prompt's state: a queue of pending requests (this session's host
//! commands and the domain's network requests, in arrival order), the one
//! shown, the in-place editor, and whether a key may answer yet (D20). Pure:
//! keys and the time in, actions out.
//!
//! Deliberate answers (docs/decisions.md D20): the agent sees every key the
//! user types and chooses when its request appears, so the prompt starts
//! *disarmed*. While disarmed every key is discarded and counted, and each
//! restarts [`ARMING_DELAY`]: a person typing a sentence answers nothing.
//! It arms once the delay passes without a key since the request appeared,
//! and disarms again when the request shown changes (another one moved into
//! its place). Armed, a denial or an abort is one key; an approving answer
//! (approve, a network allow, an edited command) is a key that selects it,
//! after which the prompt names exactly what will run or open, and Enter,
//! read after the selecting key (never in the same read), confirms it; the
//! editor too opens with `e` and Enter. Any other key cancels the
//! selection, is discarded and disarms; Escape only cancels.

use std::time::{Duration, Instant};

use lazaret_protocol::{GrantScope, NetworkDecision, PendingItem};

use super::keys::Key;

/// How long the prompt takes no answer after a request appears, after the
/// request shown changes, and after a key it discarded.
pub const ARMING_DELAY: Duration = Duration::from_secs(1);

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
/// case-sensitive for network requests. An allow key selects (Enter
/// confirms); a deny key answers at once. For a request to an address,
/// [`EVERY_PORT_KEY`] turns the allow keys into `allowEveryPort`.
pub const NETWORK_KEYS: [(char, NetworkDecision, GrantScope); 6] = [
    ('a', NetworkDecision::Allow, GrantScope::Session),
    ('m', NetworkDecision::Allow, GrantScope::Minutes { minutes: 15 }),
    ('h', NetworkDecision::Allow, GrantScope::Minutes { minutes: 60 }),
    ('p', NetworkDecision::Allow, GrantScope::Profile),
    ('d', NetworkDecision::Deny, GrantScope::Session),
    ('D', NetworkDecision::Deny, GrantScope::Profile),
];

/// For a request to an address: switches the allow keys between the one
/// protocol and port it shows and every protocol and port of the address.
pub const EVERY_PORT_KEY: char = 'w';

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
    /// An approving answer (or the editor) was selected: Enter, in a later
    /// read, sends it (or opens the editor).
    Confirming {
        choice: Choice,
        /// When it was selected: the Enter must come after.
        at: Instant,
        /// The edited text, to go back to on a cancel (an edited command).
        edited: Option<String>,
    },
}

/// What Enter confirms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// An answer to send.
    Answer(PromptAction),
    /// Editing the command (which, once edited, is confirmed again).
    Edit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptState {
    pub queue: Vec<PendingItem>,
    pub mode: Mode,
    /// For a request to an address: the allow keys open every port.
    pub every_port: bool,
    /// Keys discarded since the request shown appeared.
    pub discarded: u64,
    /// No answer before this (see [`ARMING_DELAY`]).
    armed_at: Option<Instant>,
    /// The request the arming belongs to: another one shown disarms.
    shown: Option<String>,
}

impl PromptState {
    pub fn new() -> PromptState {
        PromptState { queue: Vec::new(), mode: Mode::Viewing, every_port: false, discarded: 0, armed_at: None, shown: None }
    }

    pub fn is_active(&self) -> bool {
        !self.queue.is_empty()
    }

    pub fn current(&self) -> Option<&PendingItem> {
        self.queue.first()
    }

    /// Whether a key may answer at `now`.
    pub fn is_armed(&self, now: Instant) -> bool {
        self.armed_at.is_some_and(|at| now >= at)
    }

    /// Queues a request; one already queued (a network request re-sent as
    /// it was asked again) is updated where it stands.
    pub fn push(&mut self, item: PendingItem, now: Instant) {
        match self.queue.iter_mut().find(|known| known.request_id() == item.request_id()) {
            Some(known) => *known = item,
            None => self.queue.push(item),
        }
        self.follow(now);
    }

    /// A request answered (here or elsewhere) leaves the queue.
    pub fn remove(&mut self, request_id: &str, now: Instant) {
        self.queue.retain(|item| item.request_id() != request_id);
        self.follow(now);
    }

    /// Makes the queue what the coordinator says is pending (after events
    /// were lost): answered requests leave, unseen ones join at the end.
    pub fn resync(&mut self, pending: &[PendingItem], now: Instant) {
        self.queue.retain(|queued| pending.iter().any(|item| item.request_id() == queued.request_id()));
        for item in pending {
            match self.queue.iter_mut().find(|known| known.request_id() == item.request_id()) {
                Some(known) => *known = item.clone(),
                None => self.queue.push(item.clone()),
            }
        }
        self.follow(now);
    }

    /// After the queue changed: when the request shown is another one (or
    /// the first), the prompt disarms and forgets what was selected.
    fn follow(&mut self, now: Instant) {
        let current = self.current().map(|item| item.request_id().to_owned());
        if current == self.shown {
            return;
        }
        self.shown = current;
        self.mode = Mode::Viewing;
        self.every_port = false;
        self.discarded = 0;
        self.armed_at = self.shown.as_ref().map(|_| now + ARMING_DELAY);
    }

    /// Discards a key: counted, and the prompt disarms for [`ARMING_DELAY`].
    fn discard(&mut self, now: Instant) {
        self.discarded = self.discarded.saturating_add(1);
        self.armed_at = Some(now + ARMING_DELAY);
    }

    /// Applies one key read at `now`; returns the decision it completes, if
    /// any. The decided request leaves the queue at once.
    pub fn handle_key(&mut self, key: Key, now: Instant) -> Option<PromptAction> {
        self.follow(now);
        let current = self.current()?.clone();
        if !self.is_armed(now) {
            if let Mode::Confirming { edited, .. } = &self.mode {
                self.mode = back_from(edited.clone());
            }
            self.discard(now);
            return None;
        }
        let action = match std::mem::replace(&mut self.mode, Mode::Viewing) {
            Mode::Confirming { choice: Choice::Answer(action), at, edited: _ } if key == Key::Enter && now > at => Some(action),
            Mode::Confirming { choice: Choice::Edit, at, edited: _ } if key == Key::Enter && now > at => {
                let PendingItem::Command(escalation) = &current else { return None };
                let text = escalation.display.clone();
                let cursor = text.chars().count();
                self.mode = Mode::Editing { text, cursor, error: None };
                None
            }
            Mode::Confirming { edited, .. } => match key {
                Key::Escape => {
                    self.mode = back_from(edited);
                    None
                }
                _ => {
                    let editing = edited.is_some();
                    self.mode = back_from(edited);
                    // A key typed into the editor is meant for it.
                    if !editing {
                        self.discard(now);
                    }
                    None
                }
            },
            Mode::Viewing => self.viewing(&current, key, now),
            Mode::Editing { text, cursor, error } => self.editing(&current, key, text, cursor, error, now),
        };
        if action.is_some() {
            self.queue.retain(|item| item.request_id() != current.request_id());
            self.follow(now);
        }
        action
    }

    /// A key while the request is shown: deny, abort and the network denies
    /// answer at once; approve and the network allows select; `e` edits.
    fn viewing(&mut self, current: &PendingItem, key: Key, now: Instant) -> Option<PromptAction> {
        let request_id = current.request_id().to_owned();
        match current {
            PendingItem::Network(request) => {
                if key == Key::Char(EVERY_PORT_KEY) && request.service.is_some() {
                    self.every_port = !self.every_port;
                    return None;
                }
                match network_answer(key) {
                    Some((NetworkDecision::Deny, scope)) => {
                        Some(PromptAction::Network { request_id, decision: NetworkDecision::Deny, scope })
                    }
                    Some((_, scope)) => {
                        let decision = if self.every_port && request.service.is_some() {
                            NetworkDecision::AllowEveryPort
                        } else {
                            NetworkDecision::Allow
                        };
                        self.select(Choice::Answer(PromptAction::Network { request_id, decision, scope }), now, None);
                        None
                    }
                    None => {
                        self.discard(now);
                        None
                    }
                }
            }
            PendingItem::Command(_) => match key {
                Key::Char('a' | 'A') => {
                    self.select(Choice::Answer(PromptAction::Approve { request_id }), now, None);
                    None
                }
                Key::Char('d' | 'D') => Some(PromptAction::Deny { request_id }),
                Key::Char('q' | 'Q') => Some(PromptAction::Abort { request_id }),
                Key::Char('e' | 'E') => {
                    self.select(Choice::Edit, now, None);
                    None
                }
                _ => {
                    self.discard(now);
                    None
                }
            },
        }
    }

    fn select(&mut self, choice: Choice, now: Instant, edited: Option<String>) {
        self.mode = Mode::Confirming { choice, at: now, edited };
    }

    /// A key in the editor; Enter selects the edited command (confirmed by
    /// a second Enter, as an approval is).
    fn editing(
        &mut self,
        current: &PendingItem,
        key: Key,
        mut text: String,
        mut cursor: usize,
        mut error: Option<String>,
        now: Instant,
    ) -> Option<PromptAction> {
        match key {
            Key::Escape => return None,
            Key::Enter => match shell_words::split(&text) {
                Ok(argv) if !argv.is_empty() => {
                    let action = PromptAction::Edit { request_id: current.request_id().to_owned(), argv };
                    self.select(Choice::Answer(action), now, Some(text));
                    return None;
                }
                Ok(_) => error = Some("the command is empty".to_owned()),
                Err(problem) => error = Some(format!("cannot parse: {problem}")),
            },
            Key::Char(c) => {
                let at = byte_index(&text, cursor);
                text.insert(at, c);
                cursor += 1;
                error = None;
            }
            Key::Backspace if cursor > 0 => {
                let at = byte_index(&text, cursor - 1);
                text.remove(at);
                cursor -= 1;
            }
            Key::Delete if cursor < text.chars().count() => {
                let at = byte_index(&text, cursor);
                text.remove(at);
            }
            Key::Left => cursor = cursor.saturating_sub(1),
            Key::Right => cursor = (cursor + 1).min(text.chars().count()),
            Key::Home => cursor = 0,
            Key::End => cursor = text.chars().count(),
            _ => {}
        }
        self.mode = Mode::Editing { text, cursor, error };
        None
    }
}

/// Where a cancelled selection goes back to: the editor with its text, or
/// the request.
fn back_from(edited: Option<String>) -> Mode {
    match edited {
        Some(text) => {
            let cursor = text.chars().count();
            Mode::Editing { text, cursor, error: None }
        }
        None => Mode::Viewing,
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
            service: None,
            session_ids: vec!["5e55".to_owned()],
            repeats,
            received_at_ms: 0,
            expires_at_ms: 300_000,
        })
    }

    /// A request to one protocol and port of an address.
    pub fn address(id: &str, network: &str, service: &str) -> PendingItem {
        let PendingItem::Network(mut request) = network_item(id, network) else { unreachable!("a network item") };
        request.record_types = vec![service.to_owned()];
        request.service = Some(service.to_owned());
        PendingItem::Network(request)
    }

    fn network_item(id: &str, destination: &str) -> PendingItem {
        network(id, destination, 0)
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

    /// A clock for the tests: `at(ms)` is that long after the start.
    pub struct Clock(Instant);

    impl Clock {
        pub fn new() -> Clock {
            Clock(Instant::now())
        }
        pub fn at(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }
    }

    /// A prompt showing `items`, queued at 0 ms: armed from 1000 ms.
    pub fn shown(items: Vec<PendingItem>, clock: &Clock) -> PromptState {
        let mut state = PromptState::new();
        for item in items {
            state.push(item, clock.at(0));
        }
        state
    }

    /// Types `keys` one read each, `every` ms apart from `from`; the actions.
    pub fn typed(state: &mut PromptState, keys: &[Key], clock: &Clock, from: u64, every: u64) -> Vec<PromptAction> {
        let mut actions = Vec::new();
        for (n, key) in keys.iter().enumerate() {
            actions.extend(state.handle_key(*key, clock.at(from + n as u64 * every)));
        }
        actions
    }

    fn chars(text: &str) -> Vec<Key> {
        text.chars().map(|c| if c == '\r' { Key::Enter } else { Key::Char(c) }).collect()
    }

    #[test]
    fn deny_and_abort_are_one_key_approve_is_a_key_and_enter() {
        let clock = Clock::new();
        for (key, expected) in [('D', PromptAction::Deny { request_id: "r".into() }), ('q', PromptAction::Abort { request_id: "r".into() })]
        {
            let mut state = shown(vec![command("r", &["cargo", "test"])], &clock);
            assert_eq!(state.handle_key(Key::Char(key), clock.at(1_000)), Some(expected));
            assert!(!state.is_active());
        }
        let mut state = shown(vec![command("r", &["cargo", "test"])], &clock);
        assert_eq!(state.handle_key(Key::Char('a'), clock.at(1_000)), None, "a selects");
        assert!(matches!(state.mode, Mode::Confirming { .. }));
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_150)), Some(PromptAction::Approve { request_id: "r".into() }));
        assert!(!state.is_active());
    }

    #[test]
    fn keys_while_it_appears_are_discarded_and_each_restarts_the_delay() {
        let clock = Clock::new();
        let mut state = shown(vec![command("r", &["touch", "PWNED"])], &clock);
        // A sentence at 150 ms a key, from the moment the request appears.
        let sentence = chars("ok run it again\r");
        assert_eq!(typed(&mut state, &sentence, &clock, 0, 150), vec![]);
        assert_eq!(state.discarded, sentence.len() as u64, "every key is discarded and counted");
        let last = (sentence.len() as u64 - 1) * 150;
        assert!(!state.is_armed(clock.at(last + 999)), "the last key restarted the delay");
        assert!(state.is_armed(clock.at(last + 1_000)));
        assert!(state.is_active(), "the request still waits");
    }

    #[test]
    fn typing_on_an_armed_prompt_never_approves() {
        let clock = Clock::new();
        // Every sentence starts on an armed prompt: its first key may select,
        // the next cancels and disarms.
        for sentence in ["ok run it again\r", "all good\r", "ee\r\r", "edit it\r\r", "please add a test\r", "make a formula\r", "amend\r"] {
            for items in [
                vec![command("r", &["touch", "PWNED"]), network("n", "grant.test", 0)],
                vec![network("n", "grant.test", 0), command("r", &["touch", "PWNED"])],
                vec![address("n", "10.9.0.7/32", "tcp/8081"), command("r", &["touch", "PWNED"])],
            ] {
                let mut state = shown(items, &clock);
                let actions = typed(&mut state, &chars(sentence), &clock, 2_000, 150);
                assert!(
                    actions.iter().all(|action| !matches!(action, PromptAction::Approve { .. } | PromptAction::Edit { .. })),
                    "{sentence:?}: {actions:?}"
                );
                assert!(
                    actions.iter().all(|action| !matches!(
                        action,
                        PromptAction::Network { decision: NetworkDecision::Allow | NetworkDecision::AllowEveryPort, .. }
                    )),
                    "{sentence:?}: {actions:?}"
                );
            }
        }
    }

    #[test]
    fn a_selection_and_its_enter_in_one_read_do_nothing() {
        let clock = Clock::new();
        let mut state = shown(vec![command("r", &["touch", "x"])], &clock);
        // One read, one time: a paste of "a\r".
        assert_eq!(state.handle_key(Key::Char('a'), clock.at(1_500)), None);
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_500)), None);
        assert!(state.is_active() && !state.is_armed(clock.at(2_000)), "cancelled and disarmed");
    }

    #[test]
    fn another_request_moving_into_place_disarms_and_drops_the_selection() {
        let clock = Clock::new();
        let mut state = shown(vec![command("one", &["ls"]), command("two", &["touch", "PWNED"])], &clock);
        assert_eq!(state.handle_key(Key::Char('a'), clock.at(2_000)), None);
        // The agent withdraws the first just before the Enter lands.
        state.remove("one", clock.at(2_100));
        assert_eq!(state.mode, Mode::Viewing, "the selection was for another request");
        assert_eq!(state.handle_key(Key::Enter, clock.at(2_150)), None);
        assert_eq!(state.handle_key(Key::Char('a'), clock.at(2_300)), None);
        assert_eq!(state.handle_key(Key::Enter, clock.at(2_450)), None);
        assert_eq!(state.current().map(PendingItem::request_id), Some("two"));
        assert_eq!(state.discarded, 3);
    }

    #[test]
    fn escape_cancels_a_selection_without_disarming_and_other_keys_disarm() {
        let clock = Clock::new();
        let mut state = shown(vec![command("r", &["ls"])], &clock);
        state.handle_key(Key::Char('a'), clock.at(1_000));
        state.handle_key(Key::Escape, clock.at(1_100));
        assert_eq!(state.mode, Mode::Viewing);
        assert!(state.is_armed(clock.at(1_100)));
        state.handle_key(Key::Char('a'), clock.at(1_200));
        state.handle_key(Key::Char('x'), clock.at(1_300));
        assert!(!state.is_armed(clock.at(2_299)) && state.is_armed(clock.at(2_300)));
    }

    #[test]
    fn an_edit_is_confirmed_by_a_second_enter_and_a_key_goes_back_to_the_editor() {
        let clock = Clock::new();
        let mut state = shown(vec![command("r", &["cargo", "test"])], &clock);
        assert_eq!(state.handle_key(Key::Char('e'), clock.at(1_000)), None);
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_050)), None, "e and Enter open the editor");
        typed(&mut state, &chars(" -q"), &clock, 1_100, 100);
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_500)), None, "the first Enter names the command");
        assert!(matches!(&state.mode, Mode::Confirming { choice: Choice::Answer(PromptAction::Edit { .. }), .. }));
        assert_eq!(state.handle_key(Key::Char('x'), clock.at(1_600)), None);
        assert!(matches!(&state.mode, Mode::Editing { text, .. } if text == "cargo test -q"), "back to the editor, the key dropped");
        state.handle_key(Key::Enter, clock.at(1_700));
        assert_eq!(
            state.handle_key(Key::Enter, clock.at(1_800)),
            Some(PromptAction::Edit { request_id: "r".into(), argv: vec!["cargo".into(), "test".into(), "-q".into()] })
        );
    }

    #[test]
    fn editing_keeps_quotes_and_rejects_unparsable_text() {
        let clock = Clock::new();
        let mut state = shown(vec![command("r", &["echo", "x"])], &clock);
        state.handle_key(Key::Char('e'), clock.at(1_000));
        state.handle_key(Key::Enter, clock.at(1_050));
        typed(&mut state, &chars(" 'a b"), &clock, 1_100, 10);
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_200)), None, "unterminated quote");
        assert!(matches!(&state.mode, Mode::Editing { error: Some(_), .. }));
        state.handle_key(Key::Char('\''), clock.at(1_300));
        state.handle_key(Key::Enter, clock.at(1_400));
        assert_eq!(
            state.handle_key(Key::Enter, clock.at(1_500)),
            Some(PromptAction::Edit { request_id: "r".into(), argv: vec!["echo".into(), "x".into(), "a b".into()] })
        );
    }

    #[test]
    fn queued_requests_come_in_turn_and_vanish_when_answered_elsewhere() {
        let clock = Clock::new();
        let mut state = shown(vec![command("one", &["a"]), command("two", &["b"]), command("three", &["c"])], &clock);
        state.remove("two", clock.at(10));
        state.handle_key(Key::Char('a'), clock.at(1_000));
        assert_eq!(state.handle_key(Key::Enter, clock.at(1_100)), Some(PromptAction::Approve { request_id: "one".into() }));
        assert_eq!(state.current().map(|e| e.request_id()), Some("three"));
        assert!(!state.is_armed(clock.at(2_099)), "the next request is shown disarmed");
        state.handle_key(Key::Char('e'), clock.at(2_100));
        state.remove("three", clock.at(2_200));
        assert!(!state.is_active());
        assert_eq!(state.mode, Mode::Viewing);
    }
}

#[cfg(test)]
mod network_tests {
    use super::tests::{address, command, network, shown, Clock};
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
        let clock = Clock::new();
        for (key, decision, scope) in expected {
            let mut state = shown(vec![network("n", "grant.test", 0)], &clock);
            let mut action = state.handle_key(Key::Char(key), clock.at(1_000));
            if decision == NetworkDecision::Allow {
                assert_eq!(action, None, "key {key} selects");
                action = state.handle_key(Key::Enter, clock.at(1_100));
            }
            assert_eq!(action, Some(PromptAction::Network { request_id: "n".into(), decision, scope }), "key {key}");
            assert!(!state.is_active(), "key {key} takes the request off");
        }
    }

    #[test]
    fn an_address_request_opens_its_service_unless_every_port_is_chosen() {
        let clock = Clock::new();
        let mut state = shown(vec![address("n", "10.9.0.7/32", "tcp/8081")], &clock);
        state.handle_key(Key::Char('a'), clock.at(1_000));
        assert_eq!(
            state.handle_key(Key::Enter, clock.at(1_100)),
            Some(PromptAction::Network { request_id: "n".into(), decision: NetworkDecision::Allow, scope: GrantScope::Session })
        );
        let mut state = shown(vec![address("n", "10.9.0.7/32", "tcp/8081")], &clock);
        state.handle_key(Key::Char(EVERY_PORT_KEY), clock.at(1_000));
        assert!(state.every_port);
        state.handle_key(Key::Char('m'), clock.at(1_100));
        assert_eq!(
            state.handle_key(Key::Enter, clock.at(1_200)),
            Some(PromptAction::Network {
                request_id: "n".into(),
                decision: NetworkDecision::AllowEveryPort,
                scope: GrantScope::Minutes { minutes: 15 }
            })
        );
        // A name has no ports: the key is not an answer.
        let mut state = shown(vec![network("n", "grant.test", 0)], &clock);
        assert_eq!(state.handle_key(Key::Char(EVERY_PORT_KEY), clock.at(1_000)), None);
        assert!(!state.every_port && !state.is_armed(clock.at(1_500)), "discarded");
    }

    #[test]
    fn other_keys_leave_a_network_request_waiting() {
        let clock = Clock::new();
        let mut state = shown(vec![network("n", "grant.test", 0)], &clock);
        for (n, key) in [Key::Char('A'), Key::Char('e'), Key::Char('q'), Key::Char('x'), Key::Enter, Key::Escape, Key::Backspace]
            .into_iter()
            .enumerate()
        {
            assert_eq!(state.handle_key(key, clock.at(1_000 + 2_000 * n as u64)), None, "{key:?}");
        }
        assert_eq!(current_id(&state), Some("n"));
        assert_eq!(state.mode, Mode::Viewing, "a network request is never edited");
    }

    #[test]
    fn commands_and_network_requests_share_one_queue_in_arrival_order() {
        let clock = Clock::new();
        let mut state = shown(vec![command("c1", &["cargo", "test"]), network("n1", "grant.test", 0), command("c2", &["ls"])], &clock);
        // The command's keys answer the command, not the network request.
        assert_eq!(state.handle_key(Key::Char('m'), clock.at(1_000)), None);
        state.handle_key(Key::Char('a'), clock.at(2_000));
        assert_eq!(state.handle_key(Key::Enter, clock.at(2_100)), Some(PromptAction::Approve { request_id: "c1".into() }));
        assert_eq!(current_id(&state), Some("n1"));
        assert_eq!(
            state.handle_key(Key::Char('d'), clock.at(3_100)),
            Some(PromptAction::Network { request_id: "n1".into(), decision: NetworkDecision::Deny, scope: GrantScope::Session })
        );
        assert_eq!(current_id(&state), Some("c2"));
        assert_eq!(state.handle_key(Key::Char('D'), clock.at(4_100)), Some(PromptAction::Deny { request_id: "c2".into() }));
        assert!(!state.is_active());
    }

    #[test]
    fn a_repeated_network_request_is_updated_where_it_stands_and_stays_armed() {
        let clock = Clock::new();
        let mut state = shown(vec![network("n1", "grant.test", 0), command("c1", &["ls"])], &clock);
        state.push(network("n1", "grant.test", 3), clock.at(1_500));
        assert_eq!(state.queue.len(), 2);
        assert_eq!(current_id(&state), Some("n1"));
        assert!(matches!(state.current(), Some(PendingItem::Network(request)) if request.repeats == 3));
        assert!(state.is_armed(clock.at(1_500)), "the same request, asked again, does not disarm");
    }

    #[test]
    fn a_network_request_resolved_elsewhere_leaves_the_queue() {
        let clock = Clock::new();
        let mut state = shown(vec![network("n1", "one.test", 0), network("n2", "two.test", 0)], &clock);
        state.remove("n1", clock.at(5));
        assert_eq!(current_id(&state), Some("n2"));
        state.remove("n2", clock.at(6));
        assert!(!state.is_active());
    }

    #[test]
    fn resync_keeps_both_kinds_and_drops_what_was_answered() {
        let clock = Clock::new();
        let mut state = shown(vec![command("c1", &["ls"]), network("n1", "one.test", 0), network("n2", "two.test", 0)], &clock);
        state.resync(&[network("n2", "two.test", 5), command("c2", &["pwd"]), network("n3", "three.test", 0)], clock.at(3_000));
        let ids: Vec<&str> = state.queue.iter().map(PendingItem::request_id).collect();
        assert_eq!(ids, ["n2", "c2", "n3"]);
        assert!(matches!(state.current(), Some(PendingItem::Network(request)) if request.repeats == 5));
        assert!(!state.is_armed(clock.at(3_999)), "another request moved into place");
    }
}
