//! The user's terminal while a session runs: [`TerminalUi`], the screen as
//! the sandbox drew it (a vt100 emulator fed with all output) and the
//! approval prompt drawn over it, repainted from the emulator when the
//! prompt goes; and raw mode for the session ([`RawTerminal`]), with the
//! guard process ([`guard_terminal`]) that puts the terminal's settings back
//! however the CLI ends.

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::prompt::PromptState;

/// The user's screen as the sandbox drew it (a vt100 emulator fed with all
/// output) and the approval prompt that may cover it. While the prompt
/// shows, sandbox output is only fed to the emulator; afterwards the screen
/// is repainted from it, so a full-screen program looks as it did.
pub struct TerminalUi {
    pub(super) parser: vt100::Parser,
    pub prompt: PromptState,
    /// Whether the prompt as last drawn took answers (it is drawn again
    /// when that changes, so the user sees it arm).
    drawn_armed: bool,
}

pub type SharedUi = Arc<Mutex<TerminalUi>>;

pub fn lock_ui(ui: &SharedUi) -> std::sync::MutexGuard<'_, TerminalUi> {
    ui.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TerminalUi {
    pub fn new() -> TerminalUi {
        let (columns, rows) = terminal_size();
        TerminalUi { parser: vt100::Parser::new(rows, columns, 0), prompt: PromptState::new(), drawn_armed: false }
    }

    fn draw_prompt(&mut self) {
        let now = std::time::Instant::now();
        self.drawn_armed = self.prompt.is_armed(now);
        let (rows, columns) = self.parser.screen().size();
        let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
        let options = ratatui::TerminalOptions { viewport: ratatui::Viewport::Fixed(ratatui::layout::Rect::new(0, 0, columns, rows)) };
        if let Ok(mut terminal) = ratatui::Terminal::with_options(backend, options) {
            let _ = terminal.clear();
            let _ = terminal.draw(|frame| crate::prompt::render::render(frame, &self.prompt, now));
            let _ = terminal.hide_cursor();
        }
    }

    fn restore_screen(&mut self) {
        let mut stdout = std::io::stdout();
        let _ = stdout.write_all(b"\x1b[0m\x1b[H\x1b[2J");
        let _ = stdout.write_all(&self.parser.screen().state_formatted());
        let _ = stdout.flush();
    }

    /// A request of this session (or a network request of its domain)
    /// arrived, or was asked again: show (or queue, or update) it.
    pub fn show_pending(&mut self, item: lazaret_protocol::PendingItem) {
        self.prompt.push(item, std::time::Instant::now());
        self.draw_prompt();
    }

    /// A request was answered (here or elsewhere): next one, or back to the sandbox.
    pub fn resolved(&mut self, request_id: &str) {
        if !self.prompt.is_active() {
            return;
        }
        self.prompt.remove(request_id, std::time::Instant::now());
        self.refresh();
    }

    /// At the start, or when events were lost: the queue becomes what the
    /// coordinator lists.
    pub fn resync(&mut self, pending: &[lazaret_protocol::PendingItem]) {
        let was_active = self.prompt.is_active();
        self.prompt.resync(pending, std::time::Instant::now());
        if was_active || self.prompt.is_active() {
            self.refresh();
        }
    }

    /// Draws the prompt again when it armed since it was drawn (called a
    /// few times a second), so the user sees it is ready.
    pub(super) fn tick(&mut self) {
        if self.prompt.is_active() && self.prompt.is_armed(std::time::Instant::now()) != self.drawn_armed {
            self.draw_prompt();
        }
    }

    pub(super) fn refresh(&mut self) {
        if self.prompt.is_active() {
            self.draw_prompt();
        } else {
            self.restore_screen();
        }
    }
}

impl Default for TerminalUi {
    fn default() -> TerminalUi {
        TerminalUi::new()
    }
}

/// The user's terminal's size (columns, rows); 80x24 when it has none or
/// says 0x0, as some do before they are laid out (the screen model
/// panicked on it).
pub(super) fn terminal_size() -> (u16, u16) {
    sized(crossterm::terminal::size().unwrap_or((80, 24)))
}

pub(super) fn sized((columns, rows): (u16, u16)) -> (u16, u16) {
    if columns == 0 || rows == 0 {
        (80, 24)
    } else {
        (columns, rows)
    }
}

/// The user's terminal in raw mode for the session's lifetime. A guard
/// process ([`guard_terminal`]) started first holds the settings it had and
/// puts them back when the CLI's end of its stdin closes, however the CLI
/// ends (SIGKILL included, which no handler sees).
pub(super) struct RawTerminal {
    _guard: Option<(std::process::Child, std::process::ChildStdin)>,
}

impl RawTerminal {
    pub(super) fn enable() -> Result<RawTerminal> {
        let guard = std::env::current_exe().ok().and_then(|program| {
            let mut child = std::process::Command::new(program)
                .arg("terminal-guard")
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                // In the CLI's own (foreground) process group: a background
                // one would be stopped by SIGTTOU when it sets the terminal.
                .spawn()
                .ok()?;
            // It reads the settings before we change them: wait for its word
            // (one byte on its stderr).
            let mut ready = [0u8; 1];
            let said = child.stderr.take().is_some_and(|mut words| words.read_exact(&mut ready).is_ok());
            let stdin = child.stdin.take()?;
            if !said {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Some((child, stdin))
        });
        if guard.is_none() {
            tracing::warn!("cannot start the terminal guard; a killed CLI would leave the terminal raw");
        }
        crossterm::terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        Ok(RawTerminal { _guard: guard })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
        // The guard ends with its stdin (and puts the same settings back),
        // before the shell gets the terminal back; it is not waited for long.
        if let Some((mut child, stdin)) = self._guard.take() {
            drop(stdin);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while child.try_wait().is_ok_and(|status| status.is_none()) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// `lazaret terminal-guard`: reads the terminal's settings from stdout, then
/// waits for stdin to end and puts them back. Started by an interactive
/// session before the terminal goes raw.
pub fn guard_terminal() -> Result<u8> {
    use nix::sys::termios::{tcgetattr, tcsetattr, SetArg};
    let terminal = std::io::stdout();
    let saved = tcgetattr(&terminal).context("the terminal guard's stdout is not a terminal")?;
    // Read: the session may change them now.
    std::io::stderr().write_all(b"\n").context("cannot tell the session the guard is ready")?;
    // Whatever ends the session's job does not end the guard first, and a
    // guard left in the background still sets the terminal (no SIGTTOU stop).
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGQUIT,
        nix::sys::signal::Signal::SIGTTOU,
    ] {
        // SAFETY: SIG_IGN installs no handler; nothing runs in signal context.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn) };
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    tcsetattr(&terminal, SetArg::TCSANOW, &saved).context("cannot put the terminal's settings back")?;
    Ok(0)
}
