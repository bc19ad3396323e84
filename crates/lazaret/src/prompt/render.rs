//! Drawing the prompt with ratatui. Knows nothing of keys or sockets.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use lazaret_core::terminal_text;
use lazaret_protocol::{GrantScope, NetworkDecision, PendingEscalation, PendingItem, PendingNetworkRequest};

use super::state::{Mode, PromptState, NETWORK_KEYS};

/// Characters of the command shown before it is cut.
const SHOWN_COMMAND: usize = 240;
/// Characters of any other text of the agent shown before it is cut.
const SHOWN_TEXT: usize = 160;

fn label(text: &str) -> Span<'static> {
    Span::styled(format!("{text:<15}"), Style::default().add_modifier(Modifier::BOLD))
}

/// The start of `text` (already escaped), noting in `cut` when it was cut.
fn fit(text: &str, max_chars: usize, cut: &mut bool) -> String {
    let start = terminal_text::cut(text, max_chars);
    *cut |= start.len() != text.len();
    start.into_owned()
}

fn key_span(k: String) -> Span<'static> {
    Span::styled(k, Style::default().fg(Color::Black).bg(Color::Yellow).add_modifier(Modifier::BOLD))
}

/// Draws the prompt over the whole frame.
pub fn render(frame: &mut Frame<'_>, state: &PromptState) {
    let area = frame.area();
    frame.render_widget(Clear, area);
    match state.current() {
        Some(PendingItem::Command(escalation)) => render_command(frame, area, state, escalation),
        Some(PendingItem::Network(request)) => render_network(frame, area, state.queue.len(), request),
        None => {}
    }
}

fn render_command(frame: &mut Frame<'_>, area: Rect, state: &PromptState, escalation: &PendingEscalation) {
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
    let footer_height = if matches!(state.mode, Mode::Editing { .. }) { 4 } else { 3 };
    let [body, footer] = Layout::vertical([Constraint::Min(1), Constraint::Length(footer_height)]).areas(inner);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), body);
    render_footer(frame, footer, &state.mode);
}

/// A network request: the destination first (escaped and cut like all
/// agent text, though the sidecar lets only letters, digits, hyphens and
/// dots through), then how often it was asked and the six answers.
fn render_network(frame: &mut Frame<'_>, area: Rect, queued: usize, request: &PendingNetworkRequest) {
    // A direct connection asks for an address's host network (`10.0.0.7/32`);
    // its "record types" are what was tried (`tcp/8080`).
    let address = request.destination.split_once('/').is_some_and(|(address, _)| address.parse::<std::net::IpAddr>().is_ok());
    let (what, tried, until) = if address {
        ("an address", "Tried", "Until you answer, the address is refused at once; once allowed, its next connection goes through.")
    } else {
        (
            "a name",
            "Record types",
            "Until you answer, the name is refused (a question waits a moment first); once allowed, its next question is answered.",
        )
    };
    let title = format!(" Lazaret: network request: the sandbox asks to reach {what} (1 of {queued}) ");
    let block = Block::default().borders(Borders::ALL).title(title).border_style(Style::default().fg(Color::Yellow));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut cut = false;
    let asked = request.repeats.saturating_add(1);
    let record_types = request.record_types.iter().map(|kind| terminal_text::name(kind).into_owned()).collect::<Vec<_>>().join(", ");
    let mut lines = vec![
        Line::from(vec![
            label("Destination"),
            Span::styled(
                fit(&terminal_text::name(&request.destination), SHOWN_COMMAND, &mut cut),
                Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ),
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
    let [body, footer] = Layout::vertical([Constraint::Min(1), Constraint::Length(3)]).areas(inner);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), body);
    let mut allow = vec![Span::raw("Allow ")];
    let mut deny = vec![Span::raw("Deny  ")];
    for (k, decision, scope) in NETWORK_KEYS {
        let what = match scope {
            GrantScope::Session => "this session".to_owned(),
            GrantScope::Minutes { minutes: 60 } => "1 hour".to_owned(),
            GrantScope::Minutes { minutes } => format!("{minutes} min"),
            GrantScope::Profile => "profile (until revoked)".to_owned(),
        };
        let line = match decision {
            NetworkDecision::Allow | NetworkDecision::AllowEveryPort => &mut allow,
            NetworkDecision::Deny => &mut deny,
        };
        line.extend([Span::raw(" "), key_span(format!("[{k}]")), Span::raw(format!(" {what} "))]);
    }
    frame.render_widget(Paragraph::new(vec![Line::from(allow), Line::from(deny)]).wrap(Wrap { trim: false }), footer);
}

fn render_footer(frame: &mut Frame<'_>, area: Rect, mode: &Mode) {
    let key = |k: &'static str| key_span(k.to_owned());
    match mode {
        Mode::Viewing => {
            let actions = Line::from(vec![
                key("[A]"),
                Span::raw(" Approve & Run  "),
                key("[D]"),
                Span::raw(" Deny  "),
                key("[E]"),
                Span::raw(" Edit  "),
                key("[Q]"),
                Span::raw(" Abort session"),
            ]);
            frame.render_widget(Paragraph::new(vec![actions]).wrap(Wrap { trim: false }), area);
        }
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
                None => Line::raw("Edit the command (shell quoting). Enter: run this instead  Esc: back"),
            };
            frame.render_widget(Paragraph::new(vec![hint, edit]).wrap(Wrap { trim: false }), area);
        }
    }
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::super::keys::Key;
    use super::super::state::tests::{command, escalation, network};
    use super::*;

    /// Renders `state` at `width`x`height` and compares the text of the
    /// screen with `snapshots/<name>.txt` (UPDATE_SNAPSHOTS=1 rewrites it).
    fn assert_snapshot(name: &str, state: &PromptState, width: u16, height: u16) {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| render(frame, state)).expect("draw");
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
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test", "--workspace"]));
        assert_snapshot("standard", &state, 100, 16);
    }

    #[test]
    fn prompt_snapshot_long_argv_and_justification() {
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
        state.push(PendingItem::Command(long));
        state.push(command("second", &["ls"]));
        assert_snapshot("long", &state, 80, 24);
    }

    /// Agent text at its worst: a 4 KiB justification of escapes, bidi
    /// and newlines before a 60 KiB argv. The command still comes first,
    /// the cut is said, the actions stay on screen and no cell holds a
    /// character that acts on the terminal.
    #[test]
    fn prompt_snapshot_hostile_text() {
        let mut state = PromptState::new();
        let mut hostile = escalation("7f3a9c", &["printf", "\u{1b}]0;pwned\u{7}", "evil\u{202e}txt", &"A".repeat(60 << 10)]);
        hostile.display = lazaret_core::policy::display_command(&hostile.argv);
        hostile.justification = Some("line one\nline two\r\u{1b}[2J\u{9b}H\u{2066}x\u{2069}\u{200b}".repeat(128));
        state.push(PendingItem::Command(hostile));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        terminal.draw(|frame| render(frame, &state)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        for cell in buffer.content() {
            assert!(!cell.symbol().chars().any(lazaret_core::terminal_text::is_unsafe), "a raw {:?} on the screen", cell.symbol());
        }
        assert_snapshot("hostile", &state, 80, 24);
    }

    #[test]
    fn prompt_snapshot_narrow_terminal() {
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test"]));
        assert_snapshot("narrow", &state, 40, 30);
    }

    #[test]
    fn prompt_snapshot_editing() {
        let mut state = PromptState::new();
        state.push(command("7f3a9c", &["cargo", "test"]));
        state.handle_key(Key::Char('e'));
        for c in " -q".chars() {
            state.handle_key(Key::Char(c));
        }
        assert_snapshot("editing", &state, 80, 18);
    }

    #[test]
    fn prompt_snapshot_network_request() {
        let mut state = PromptState::new();
        state.push(network("4e7b21", "grant.test", 2));
        state.push(command("7f3a9c", &["cargo", "test"]));
        assert_snapshot("network", &state, 100, 16);
    }

    #[test]
    fn prompt_snapshot_network_request_for_an_address() {
        let mut state = PromptState::new();
        let PendingItem::Network(mut request) = network("5c0a11", "10.213.20.13/32", 0) else { unreachable!() };
        request.record_types = vec!["tcp/8081".to_owned()];
        state.push(PendingItem::Network(request));
        assert_snapshot("network-address", &state, 100, 16);
    }

    /// A destination is agent text: whatever it holds, nothing reaches the
    /// terminal raw (the sidecar already lets only plain names through).
    #[test]
    fn a_hostile_destination_is_shown_inert() {
        let mut state = PromptState::new();
        state.push(network("4e7b21", &format!("evil\u{1b}]0;pwned\u{7}\u{202e}{}", "a".repeat(400)), 0));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        terminal.draw(|frame| render(frame, &state)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        for cell in buffer.content() {
            assert!(!cell.symbol().chars().any(lazaret_core::terminal_text::is_unsafe), "a raw {:?} on the screen", cell.symbol());
        }
        let text: String = buffer.content().iter().map(|cell| cell.symbol()).collect();
        assert!(text.contains("[D]") && text.contains("Long text was cut"), "{text}");
    }
}
