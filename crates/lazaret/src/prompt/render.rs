//! Drawing the prompt with ratatui. Knows nothing of keys or sockets.
//!
//! Every drawing says whether the prompt takes an answer yet (D20: keys are
//! ignored for a second after a request appears, after the request shown
//! changes and after an ignored key) and how many keys it ignored; an
//! approving answer, once selected, is named exactly (the command that will
//! run, the name or the address's protocol and port, or every port) with
//! Enter to confirm. Names are cut in the middle, their end always shown
//! (D19).

use std::time::Instant;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use lazaret_core::terminal_text;
use lazaret_protocol::{GrantScope, NetworkDecision, PendingEscalation, PendingItem, PendingNetworkRequest};

use super::state::{Choice, Mode, PromptAction, PromptState, ARMING_DELAY, EVERY_PORT_KEY, NETWORK_KEYS};

/// Characters of the command shown before it is cut.
const SHOWN_COMMAND: usize = 240;
/// Characters of any other text of the agent shown before it is cut.
const SHOWN_TEXT: usize = 160;
/// Characters of a name or address shown: cut in the middle beyond it.
const SHOWN_NAME: usize = 120;

fn label(text: &str) -> Span<'static> {
    Span::styled(format!("{text:<15}"), Style::default().add_modifier(Modifier::BOLD))
}

/// The start of `text` (already escaped), noting in `cut` when it was cut.
fn fit(text: &str, max_chars: usize, cut: &mut bool) -> String {
    let start = terminal_text::cut(text, max_chars);
    *cut |= start.len() != text.len();
    start.into_owned()
}

/// A name or address (escaped), cut in the middle so that its end shows.
fn destination(text: &str) -> String {
    terminal_text::cut_middle(&terminal_text::name(text), SHOWN_NAME).into_owned()
}

/// What allowing `request` opens, as the prompt names it.
fn opened(request: &PendingNetworkRequest, decision: NetworkDecision) -> String {
    match (&request.service, decision) {
        (Some(_), NetworkDecision::AllowEveryPort) => {
            format!("EVERY protocol and port of {} (wider than asked)", destination(&request.destination))
        }
        (Some(service), _) => format!("{} {} only", destination(&request.destination), terminal_text::name(service)),
        (None, _) => destination(&request.destination),
    }
}

fn key_span(k: String) -> Span<'static> {
    Span::styled(k, Style::default().fg(Color::Black).bg(Color::Yellow).add_modifier(Modifier::BOLD))
}

/// Draws the prompt over the whole frame, as it stands at `now`.
pub fn render(frame: &mut Frame<'_>, state: &PromptState, now: Instant) {
    let area = frame.area();
    frame.render_widget(Clear, area);
    match state.current() {
        Some(PendingItem::Command(escalation)) => render_command(frame, area, state, escalation, now),
        Some(PendingItem::Network(request)) => render_network(frame, area, state, request, now),
        None => {}
    }
}

/// Whether a key answers yet, and what was ignored.
fn arming_line(state: &PromptState, now: Instant) -> Line<'static> {
    let ignored = match state.discarded {
        0 => String::new(),
        1 => " 1 key was ignored.".to_owned(),
        count => format!(" {count} keys were ignored."),
    };
    if state.is_armed(now) {
        Line::styled(format!("Ready for your answer.{ignored}"), Style::default().fg(Color::Green))
    } else {
        Line::styled(
            format!(
                "Keys are ignored until {} s passes without one: a request just appeared or changed, or a key was not an answer.{ignored}",
                ARMING_DELAY.as_secs()
            ),
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    }
}

fn render_command(frame: &mut Frame<'_>, area: Rect, state: &PromptState, escalation: &PendingEscalation, now: Instant) {
    let title = format!(" Lazaret: the sandbox asks to run a command on the host ({} of {}) ", 1, state.queue.len());
    let block = Block::default().borders(Borders::ALL).title(title).border_style(Style::default().fg(Color::Yellow));
    let inner = block.inner(area);
    frame.render_widget(block, area);

    // The agent's text (command, argv, justification) is escaped and cut:
    // a long justification must not push the command out of the window, and
    // nothing the agent wrote may act on the terminal (DECISIONS D16). The
    // command comes first.
    let mut cut = false;
    let argv = format!("[{}]", escalation.argv.iter().map(|word| terminal_text::quoted(word)).collect::<Vec<_>>().join(", "));
    let justification = escalation.justification.as_deref().map(|text| terminal_text::name(text).into_owned());
    let mut lines = vec![
        Line::from(vec![
            label("Command"),
            Span::styled(fit(&escalation.display, SHOWN_COMMAND, &mut cut), Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
        ]),
        Line::from(vec![label("Exact argv"), Span::raw(fit(&argv, SHOWN_TEXT, &mut cut))]),
        Line::from(vec![label("Request"), Span::raw(terminal_text::name(&escalation.request_id).into_owned())]),
        Line::from(vec![label("Profile"), Span::raw(format!("{} (domain {})", escalation.profile, escalation.domain_hash))]),
        Line::from(vec![label("Directory"), Span::raw(terminal_text::name(&escalation.cwd).into_owned())]),
        Line::from(vec![
            label("Justification"),
            Span::raw(justification.map(|text| fit(&text, SHOWN_TEXT, &mut cut)).unwrap_or_else(|| "(none given)".to_owned())),
        ]),
    ];
    if cut {
        lines.push(Line::styled(
            format!("Long text was cut: `lazaret pending --full` prints request {} whole.", terminal_text::name(&escalation.request_id)),
            Style::default().add_modifier(Modifier::ITALIC),
        ));
    }
    for reason in &escalation.reasons {
        lines.push(Line::from(vec![label("Asking because"), Span::raw(fit(&terminal_text::name(reason), SHOWN_TEXT, &mut cut))]));
    }
    for note in &escalation.risk_notes {
        lines.push(Line::from(vec![
            label("RISK"),
            Span::styled(fit(&terminal_text::name(note), SHOWN_TEXT, &mut cut), Style::default().fg(Color::Red)),
        ]));
    }
    let mut footer_lines = vec![arming_line(state, now)];
    footer_lines.extend(command_footer(state, escalation));
    render_body_and_footer(frame, inner, lines, footer_lines);
}

/// The request's lines, and under them the footer (the state of the prompt
/// and its keys), which always shows whole: the body gives way.
fn render_body_and_footer(frame: &mut Frame<'_>, area: Rect, body: Vec<Line<'static>>, footer: Vec<Line<'static>>) {
    let width = usize::from(area.width.max(1));
    let rows: usize = footer.iter().map(|line| line.width().div_ceil(width).max(1)).sum();
    let rows = u16::try_from(rows).unwrap_or(u16::MAX);
    let [top, bottom] = Layout::vertical([Constraint::Min(1), Constraint::Length(rows)]).areas(area);
    frame.render_widget(Paragraph::new(body).wrap(Wrap { trim: false }), top);
    frame.render_widget(Paragraph::new(footer).wrap(Wrap { trim: false }), bottom);
}

/// What a selected answer does, and how to confirm it.
fn confirm_line(what: String) -> Vec<Line<'static>> {
    vec![
        Line::styled(what, Style::default().fg(Color::Yellow).add_modifier(Modifier::BOLD)),
        Line::from(vec![
            key_span("[Enter]".to_owned()),
            Span::raw(" yes  "),
            key_span("[Esc]".to_owned()),
            Span::raw(" back  (any other key: back, and keys are ignored for a second)"),
        ]),
    ]
}

fn command_footer(state: &PromptState, escalation: &PendingEscalation) -> Vec<Line<'static>> {
    let key = |k: &'static str| key_span(k.to_owned());
    match &state.mode {
        Mode::Viewing => vec![
            Line::from(vec![
                key("[A]"),
                Span::raw(" Approve & Run  "),
                key("[D]"),
                Span::raw(" Deny  "),
                key("[E]"),
                Span::raw(" Edit  "),
                key("[Q]"),
                Span::raw(" Abort session"),
            ]),
            Line::raw("A and E ask for Enter next: nothing runs on one key."),
        ],
        Mode::Confirming { choice: Choice::Answer(PromptAction::Approve { .. }), .. } => confirm_line(format!(
            "Run `{}` on the host, in {}?",
            terminal_text::cut(&escalation.display, SHOWN_TEXT),
            terminal_text::name(&escalation.cwd)
        )),
        Mode::Confirming { choice: Choice::Answer(PromptAction::Edit { argv, .. }), .. } => confirm_line(format!(
            "Run the edited command `{}` on the host, instead of the request?",
            terminal_text::cut(&lazaret_core::policy::display_command(argv), SHOWN_TEXT)
        )),
        Mode::Confirming { choice: Choice::Edit, .. } => confirm_line("Edit the command before it runs?".to_owned()),
        Mode::Confirming { .. } => Vec::new(),
        Mode::Editing { text, cursor, error } => {
            let (before, after) = text.split_at(text.char_indices().nth(*cursor).map(|(index, _)| index).unwrap_or(text.len()));
            let mut after_chars = after.chars();
            let at_cursor = after_chars.next().map(String::from).unwrap_or_else(|| " ".to_owned());
            let edit = Line::from(vec![
                Span::raw("> "),
                Span::raw(before.to_owned()),
                Span::styled(at_cursor, Style::default().add_modifier(Modifier::REVERSED)),
                Span::raw(after_chars.as_str().to_owned()),
            ]);
            let hint = match error {
                Some(error) => Line::styled(error.clone(), Style::default().fg(Color::Red)),
                None => Line::raw("Edit the command (shell quoting). Enter: run this instead (asks once more)  Esc: back"),
            };
            vec![hint, edit]
        }
    }
}

/// A network request: the destination first (escaped and cut in the
/// middle like all agent text, though the sidecar lets only letters,
/// digits, hyphens and dots through), then how often it was asked and the
/// answers: for an address, what an allow opens (its protocol and port, or
/// every port).
fn render_network(frame: &mut Frame<'_>, area: Rect, state: &PromptState, request: &PendingNetworkRequest, now: Instant) {
    // A direct connection asks for one protocol and port of an address's
    // host network (`10.0.0.7/32`, `tcp/8080`).
    let address = request.service.is_some();
    let (what, tried, until) = if address {
        (
            "an address",
            "Protocol, port",
            "Until you answer, the connection is refused at once; once allowed, its next connection goes through.",
        )
    } else {
        (
            "a name",
            "Record types",
            "Until you answer, the name is refused (a question waits a moment first); once allowed, its next question is answered.",
        )
    };
    let title = format!(" Lazaret: network request: the sandbox asks to reach {what} (1 of {}) ", state.queue.len());
    let block = Block::default().borders(Borders::ALL).title(title).border_style(Style::default().fg(Color::Yellow));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut cut = false;
    let asked = request.repeats.saturating_add(1);
    let record_types = request.record_types.iter().map(|kind| terminal_text::name(kind).into_owned()).collect::<Vec<_>>().join(", ");
    let mut lines = vec![
        Line::from(vec![
            label("Destination"),
            Span::styled(destination(&request.destination), Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
        ]),
        Line::from(vec![label(tried), Span::raw(fit(&record_types, SHOWN_TEXT, &mut cut))]),
        Line::from(vec![label("Asked"), Span::raw(if asked == 1 { "once".to_owned() } else { format!("{asked} times") })]),
        Line::from(vec![label("Request"), Span::raw(terminal_text::name(&request.request_id).into_owned())]),
        Line::from(vec![label("Profile"), Span::raw(format!("{} (domain {})", request.profile, request.domain_hash))]),
        Line::raw("The sandbox's network is shared by all its sessions: which one asked cannot be told."),
        Line::raw(until),
    ];
    if cut {
        lines.push(Line::styled(
            format!("Long text was cut: `lazaret pending --full` prints request {} whole.", terminal_text::name(&request.request_id)),
            Style::default().add_modifier(Modifier::ITALIC),
        ));
    }
    let mut footer_lines = vec![arming_line(state, now)];
    if let Mode::Confirming { choice: Choice::Answer(PromptAction::Network { decision, scope, .. }), .. } = &state.mode {
        footer_lines.extend(confirm_line(format!("Allow {} for {}?", opened(request, *decision), scope_words(*scope))));
    } else {
        let decision = if state.every_port && address { NetworkDecision::AllowEveryPort } else { NetworkDecision::Allow };
        let mut allow = vec![Span::raw("Allow ")];
        let mut deny = vec![Span::raw("Deny  ")];
        for (k, verdict, scope) in NETWORK_KEYS {
            let line = match verdict {
                NetworkDecision::Deny => &mut deny,
                NetworkDecision::Allow | NetworkDecision::AllowEveryPort => &mut allow,
            };
            line.extend([Span::raw(" "), key_span(format!("[{k}]")), Span::raw(format!(" {} ", scope_words(scope)))]);
        }
        if address {
            footer_lines.push(Line::from(vec![
                Span::raw("Allow opens "),
                Span::styled(opened(request, decision), Style::default().add_modifier(Modifier::BOLD)),
            ]));
        }
        allow.push(Span::raw(" (then Enter)"));
        footer_lines.push(Line::from(allow));
        footer_lines.push(Line::from(deny));
        if address {
            let switch =
                if state.every_port { " back to this protocol and port only" } else { " every protocol and port of the address instead" };
            footer_lines.push(Line::from(vec![key_span(format!("[{EVERY_PORT_KEY}]")), Span::raw(switch)]));
        }
    }
    render_body_and_footer(frame, inner, lines, footer_lines);
}

fn scope_words(scope: GrantScope) -> String {
    match scope {
        GrantScope::Session => "this session".to_owned(),
        GrantScope::Minutes { minutes: 60 } => "1 hour".to_owned(),
        GrantScope::Minutes { minutes } => format!("{minutes} min"),
        GrantScope::Profile => "the profile (until revoked)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::super::keys::Key;
    use super::super::state::tests::{address, command, escalation, network, shown, Clock};
    use super::*;

    /// Renders `state` at `width`x`height` and compares the text of the
    /// screen with `snapshots/<name>.txt` (UPDATE_SNAPSHOTS=1 rewrites it).
    fn assert_snapshot(name: &str, state: &PromptState, now: Instant, width: u16, height: u16) {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| render(frame, state, now)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        let mut text = String::new();
        for y in 0..height {
            let line: String = (0..width).map(|x| buffer[(x, y)].symbol().to_owned()).collect();
            text.push_str(line.trim_end());
            text.push('\n');
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/prompt/snapshots").join(format!("{name}.txt"));
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, &text).expect("write snapshot");
        }
        let expected =
            std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing snapshot {}; run with UPDATE_SNAPSHOTS=1", path.display()));
        assert_eq!(text, expected, "snapshot {name} differs:\n{text}");
    }

    #[test]
    fn prompt_snapshot_standard() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test", "--workspace"]), clock.at(0));
        assert_snapshot("standard", &state, clock.at(5_000), 100, 16);
    }

    #[test]
    fn prompt_snapshot_long_argv_and_justification() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        let mut long = escalation(
            "7f3a9c",
            &[
                "npm",
                "run",
                "build",
                "--",
                "--config",
                "./very/long/path/to/a/configuration/file/that/does/not/fit.json",
                "--mode=production",
            ],
        );
        long.justification = Some("The user asked me to produce a production build so that the bundle size can be compared with the previous release; this needs the host's node_modules cache.".to_owned());
        long.risk_notes.push("`--config` may name a file that runs code".to_owned());
        state.push(PendingItem::Command(long), clock.at(0));
        state.push(command("second", &["ls"]), clock.at(0));
        assert_snapshot("long", &state, clock.at(5_000), 80, 24);
    }

    /// Agent text at its worst: a 4 KiB justification of escapes, bidi
    /// and newlines before a 60 KiB argv. The command still comes first,
    /// the cut is said, the actions stay on screen and no cell holds a
    /// character that acts on the terminal.
    #[test]
    fn prompt_snapshot_hostile_text() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        let mut hostile = escalation("7f3a9c", &["printf", "\u{1b}]0;pwned\u{7}", "evil\u{202e}txt", &"A".repeat(60 << 10)]);
        hostile.display = lazaret_core::policy::display_command(&hostile.argv);
        hostile.justification = Some("line one\nline two\r\u{1b}[2J\u{9b}H\u{2066}x\u{2069}\u{200b}".repeat(128));
        state.push(PendingItem::Command(hostile), clock.at(0));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        terminal.draw(|frame| render(frame, &state, clock.at(5_000))).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        for cell in buffer.content() {
            assert!(!cell.symbol().chars().any(lazaret_core::terminal_text::is_unsafe), "a raw {:?} on the screen", cell.symbol());
        }
        assert_snapshot("hostile", &state, clock.at(5_000), 80, 24);
    }

    #[test]
    fn prompt_snapshot_narrow_terminal() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test"]), clock.at(0));
        assert_snapshot("narrow", &state, clock.at(5_000), 40, 30);
    }

    #[test]
    fn prompt_snapshot_editing() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test"]), clock.at(0));
        state.handle_key(Key::Char('e'), clock.at(1_000));
        state.handle_key(Key::Enter, clock.at(1_100));
        for c in " -q".chars() {
            state.handle_key(Key::Char(c), clock.at(1_200));
        }
        assert_snapshot("editing", &state, clock.at(5_000), 80, 18);
    }

    #[test]
    fn prompt_snapshot_network_request() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(network("4e7b21", "grant.test", 2), clock.at(0));
        state.push(command("7f3a9c", &["cargo", "test"]), clock.at(0));
        assert_snapshot("network", &state, clock.at(5_000), 100, 16);
    }

    #[test]
    fn prompt_snapshot_network_request_for_an_address() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(address("5c0a11", "10.213.20.13/32", "tcp/8081"), clock.at(0));
        assert_snapshot("network-address", &state, clock.at(5_000), 100, 18);
        state.handle_key(Key::Char('w'), clock.at(5_000));
        state.handle_key(Key::Char('m'), clock.at(5_100));
        assert_snapshot("network-address-every-port", &state, clock.at(5_200), 100, 18);
    }

    /// Just after a request appears, and after keys that were not answers:
    /// the prompt says it ignores keys, and how many it ignored.
    #[test]
    fn prompt_snapshot_disarmed_and_confirming() {
        let clock = Clock::new();
        let mut state = shown(vec![command("7f3a9c", &["touch", "PWNED"])], &clock);
        for (n, c) in "ok run".chars().enumerate() {
            state.handle_key(Key::Char(c), clock.at(100 * n as u64));
        }
        assert_snapshot("disarmed", &state, clock.at(600), 100, 16);
        state.handle_key(Key::Char('a'), clock.at(3_000));
        assert_snapshot("confirm-approve", &state, clock.at(3_000), 100, 16);
    }

    /// A 253-character name that starts like a trusted API: its end, which
    /// decides who controls it, is on screen (D19).
    #[test]
    fn a_long_name_shows_its_end() {
        let clock = Clock::new();
        let name =
            format!("api.anthropic.com.{}.x.typeahead.test", ["a".repeat(63), "a".repeat(63), "a".repeat(63), "a".repeat(26)].join("."));
        assert_eq!(name.len(), 253);
        let state = shown(vec![network("4e7b21", &name, 0)], &clock);
        for (width, height) in [(100, 18), (60, 30)] {
            let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
            terminal.draw(|frame| render(frame, &state, clock.at(5_000))).expect("draw");
            let buffer = terminal.backend().buffer().clone();
            let text: String = (0..height)
                .map(|y| (0..width).map(|x| buffer[(x, y)].symbol().to_owned()).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n");
            assert!(text.contains("x.typeahead.test"), "{width}x{height}: {text}");
        }
        assert_snapshot("long-name", &state, clock.at(5_000), 100, 18);
    }

    /// A destination is agent text: whatever it holds, nothing reaches the
    /// terminal raw (the sidecar already lets only plain names through).
    #[test]
    fn a_hostile_destination_is_shown_inert() {
        let clock = Clock::new();
        let mut state = PromptState::new();
        state.push(network("4e7b21", &format!("evil\u{1b}]0;pwned\u{7}\u{202e}{}", "a".repeat(400)), 0), clock.at(0));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        terminal.draw(|frame| render(frame, &state, clock.at(5_000))).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        for cell in buffer.content() {
            assert!(!cell.symbol().chars().any(lazaret_core::terminal_text::is_unsafe), "a raw {:?} on the screen", cell.symbol());
        }
        let text: String = buffer.content().iter().map(|cell| cell.symbol()).collect();
        assert!(text.contains("[D]") && text.contains("(308 characters"), "{text}");
    }
}
