//! A real terminal for the suites: a tmux server of the test's own (its
//! socket in the test's directory), typed into as a person types (tmux
//! sends CR for Enter, a byte for Ctrl-C) and read back as the screen
//! shows it. The server is killed on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A tmux server and the windows a test opens in it.
pub struct Tmux {
    pub socket: PathBuf,
}

impl Tmux {
    /// A server whose socket is `socket` (started by the first `new-session`).
    pub fn new(socket: PathBuf) -> Tmux {
        Tmux { socket }
    }

    /// Runs `tmux ARGUMENTS` on this server and gives its stdout.
    pub fn tmux(&self, arguments: &[&str]) -> String {
        crate::stdout(&Command::new("tmux").arg("-S").arg(&self.socket).args(arguments).output().expect("tmux"))
    }

    /// The pane as text, wrapped lines joined (`-J`): what a raw terminal
    /// prints from the middle of a line (after the CLI was killed) wraps at
    /// the window's edge, and a word split there is still one line.
    pub fn screen(&self, window: &str) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", window])
    }

    /// Types `text` and Enter (tmux sends CR for it, as a terminal does).
    pub fn line(&self, window: &str, text: &str) {
        self.tmux(&["send-keys", "-t", window, "-l", text]);
        self.tmux(&["send-keys", "-t", window, "Enter"]);
    }

    /// Types a foreground job that waits for SIGINT, then Ctrl-C, then a
    /// command for the shell: true when the job says it took the SIGINT
    /// (`interrupted-7`, alone on its line or after the echo of the command
    /// typed ahead) and the shell ran the command (`after-5`).
    ///
    /// The job traps SIGINT before it prints `started-2` (the typed line
    /// shows `$((1+1))`), so a ^C typed once that shows has a handler to
    /// meet. With `echo started; sleep 100` the shell can print and take
    /// the SIGINT before `sleep` is its foreground process; dash's own
    /// handler then holds it and `sleep` runs on (CI saw it once; typed so
    /// in tmux, about 1 in 20; with the trap, 0 in 40).
    pub fn interrupts_a_job(&self, window: &str) -> bool {
        self.line(
            window,
            "clear; sh -c 'trap \"echo interrupted-$((6+1)); exit 130\" INT; echo started-$((1+1)); while :; do sleep 1; done'",
        );
        if !self.shows_line(window, "started-2", Duration::from_secs(30)) {
            return false;
        }
        self.tmux(&["send-keys", "-t", window, "C-c"]);
        let typed = "echo after-$((2+3))";
        self.line(window, typed);
        self.shows_line_after_typeahead(window, "interrupted-7", typed, Duration::from_secs(30))
            && self.shows_line(window, "after-5", Duration::from_secs(30))
    }

    /// As [`Tmux::shows_line`], where `typed_ahead` was typed while the
    /// program that prints `line` ran: the terminal may echo it first, on
    /// the same line (CI saw `echo after-$((2+3))interrupted-7`). Only that
    /// exact text may come before; the output itself must be whole.
    pub fn shows_line_after_typeahead(&self, window: &str, line: &str, typed_ahead: &str, within: Duration) -> bool {
        crate::wait_until(within, || self.screen(window).lines().any(|shown| is_output_line(shown, line, typed_ahead)))
    }

    /// Answers the approval prompt on `window` with `key` once it takes
    /// answers (a second without a key since its request appeared: D20),
    /// as a person reads it before answering; false when it never arms.
    pub fn answer(&self, window: &str, key: &str) -> bool {
        if !crate::wait_until(Duration::from_secs(10), || self.screen(window).contains("Ready for your answer")) {
            return false;
        }
        self.tmux(&["send-keys", "-t", window, key]);
        true
    }

    /// Approves the host command on the prompt: `a` once it is ready, then
    /// Enter once it names the command (`naming`); false when it never does.
    pub fn approve(&self, window: &str, naming: &str) -> bool {
        if !self.answer(window, "a") || !crate::wait_until(Duration::from_secs(10), || self.screen(window).contains(naming)) {
            return false;
        }
        self.tmux(&["send-keys", "-t", window, "Enter"]);
        true
    }

    /// Waits until a line of the screen is the output `line`: alone, or
    /// after the prompt when its command was typed ahead (as a terminal
    /// shows type-ahead), never the typed command itself.
    pub fn shows_line(&self, window: &str, line: &str, within: Duration) -> bool {
        self.shows_line_after_typeahead(window, line, "", within)
    }
}

/// Whether the screen line `shown` is the output `line`: alone, after the
/// shell's prompt, or after the echo of `typed_ahead` (and the prompt).
fn is_output_line(shown: &str, line: &str, typed_ahead: &str) -> bool {
    let shown = shown.trim_end();
    let shown = shown.strip_prefix("# ").unwrap_or(shown);
    shown == line || shown.strip_prefix(typed_ahead) == Some(line)
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

#[cfg(test)]
mod tests {
    use super::is_output_line;

    #[test]
    fn output_after_a_typed_ahead_echo_counts_and_nothing_looser() {
        let typed = "echo after-$((2+3))";
        for shown in ["interrupted-7", "# interrupted-7", "echo after-$((2+3))interrupted-7", "# echo after-$((2+3))interrupted-7  "] {
            assert!(is_output_line(shown, "interrupted-7", typed), "{shown:?}");
        }
        for shown in ["echo after-$((2+3))", "xinterrupted-7", "interrupted-77", "echo after-$((2+3)) interrupted-7", "echo interrupted-7"]
        {
            assert!(!is_output_line(shown, "interrupted-7", typed), "{shown:?}");
        }
    }
}
