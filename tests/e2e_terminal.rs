//! A session in a real terminal (tmux), typed as a person types (issue 27):
//! Enter sends CR, Ctrl-C is a byte, the window is resized. `lazaret run --
//! sh` (dash: no line editor of its own to hide a raw terminal) behaves as
//! over ssh or `podman exec -it`, as root and rootless (and, in `tests/run`,
//! on both runsc versions), with nothing but `[escalation] enabled = true`
//! configured; the user's terminal is sane after the session, also after
//! the CLI was killed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lazaret_test_support::tmux::Tmux;
use lazaret_test_support::*;

/// The flags of `stty -a` a sane terminal has (as `podman exec -it` gives).
const SANE: [&str; 6] = ["icrnl", "onlcr", "isig", "icanon", "echo", "iutf8"];

fn assert_sane(text: &str, what: &str) {
    let words: Vec<&str> = text.split_whitespace().collect();
    for flag in SANE {
        assert!(words.contains(&flag), "{what}: `{flag}` is set: {text}");
        assert!(!words.contains(&format!("-{flag}").as_str()), "{what}: `-{flag}`: {text}");
    }
}

fn a_session_in_a_terminal_behaves_as_over_ssh(subject: &Subject) {
    subject.write_config("[escalation]\nenabled = true\n");
    let workspace = subject.repository("ws");
    subject.hand_over();
    let terminal = Tmux::new(subject.env.path().join("tmux.sock"));
    let window = "lzt";
    // The pane's own terminal settings before and after the session. Once
    // the CLI is killed its guard puts them back, a moment later (a process
    // to be scheduled on a loaded machine): waited for, at most 10 s.
    let command = format!(
        "before=$(stty -g); {} run --workspace {} -- sh; echo LAZARET-EXIT=$?; \
         i=0; while [ \"$(stty -g)\" != \"$before\" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         if [ \"$(stty -g)\" = \"$before\" ]; then echo TERMINAL-RESTORED; else echo TERMINAL-CHANGED; stty -a; fi; sleep 600",
        subject.command_line(""),
        workspace.display()
    );
    terminal.tmux(&["new-session", "-d", "-s", window, "-x", "100", "-y", "30", &command]);
    let label = subject.label();
    // Typed only once the shell inside asks (dash's prompt): earlier keys
    // would meet the pane's own line discipline.
    assert!(terminal.shows_line(window, "#", Duration::from_secs(60)), "{label}: the shell's prompt:\n{}", terminal.screen(window));

    terminal.line(window, "echo ready-$((1+1))");
    assert!(terminal.shows_line(window, "ready-2", Duration::from_secs(30)), "{label}: a typed command runs:\n{}", terminal.screen(window));
    terminal.line(window, "clear; stty -a");
    assert!(wait_until(Duration::from_secs(30), || terminal.screen(window).contains("iutf8")), "{label}: {}", terminal.screen(window));
    assert_sane(&terminal.screen(window).replace(';', " "), &format!("{label}: stty -a inside"));

    terminal.line(window, "clear; printf 'col-a\\ncol-b\\n'");
    assert!(terminal.shows_line(window, "col-b", Duration::from_secs(30)), "{label}: {}", terminal.screen(window));
    assert!(terminal.screen(window).lines().any(|line| line == "col-a"), "{label}: lines start at column 0:\n{}", terminal.screen(window));

    assert!(
        terminal.interrupts_a_job(window),
        "{label}: Ctrl-C is a SIGINT for the foreground job and the shell goes on:\n{}",
        terminal.screen(window)
    );

    terminal.tmux(&["resize-window", "-t", window, "-x", "90", "-y", "25"]);
    // The size reaches the sandbox asynchronously (SIGWINCH): ask until it shows.
    let resized = (0..10).any(|_| {
        terminal.line(window, "stty size");
        terminal.shows_line(window, "25 90", Duration::from_secs(2))
    });
    assert!(resized, "{label}: the new size inside:\n{}", terminal.screen(window));

    // The approval prompt takes the screen and gives it back.
    terminal
        .line(window, "clear; echo before-prompt; lazaret-escalate --justification terminal-test -- touch from-terminal; echo escalate-$?");
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(window).contains("Approve & Run")),
        "{label}: the prompt:\n{}",
        terminal.screen(window)
    );
    assert!(terminal.answer(window, "d"), "{label}: the prompt arms:\n{}", terminal.screen(window));
    assert!(terminal.shows_line(window, "escalate-97", Duration::from_secs(30)), "{label}: denied:\n{}", terminal.screen(window));
    assert!(
        terminal.screen(window).lines().any(|line| line == "before-prompt") && !terminal.screen(window).contains("Approve & Run"),
        "{label}: the screen is back:\n{}",
        terminal.screen(window)
    );
    assert!(!workspace.join("from-terminal").exists(), "{label}: a denied command ran");

    terminal.line(window, "exit 3");
    assert!(
        terminal.shows_line(window, "LAZARET-EXIT=3", Duration::from_secs(30)),
        "{label}: the inner status:\n{}",
        terminal.screen(window)
    );
    assert!(
        terminal.shows_line(window, "TERMINAL-RESTORED", Duration::from_secs(30)),
        "{label}: the user's terminal after the session:\n{}",
        terminal.screen(window)
    );

    // Killed, the CLI cannot put the terminal back itself: its guard does.
    let killed = "killed";
    terminal.tmux(&["new-window", "-d", "-t", window, "-n", killed, &command]);
    let target = format!("{window}:{killed}");
    assert!(terminal.shows_line(&target, "#", Duration::from_secs(60)), "{label}: {}", terminal.screen(&target));
    terminal.line(&target, "echo up-$((4+4))");
    assert!(terminal.shows_line(&target, "up-8", Duration::from_secs(30)), "{label}: {}", terminal.screen(&target));
    let shell = terminal.tmux(&["display-message", "-p", "-t", &target, "#{pane_pid}"]).trim().to_owned();
    let cli = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    let cli = cli.split_whitespace().next().expect("the CLI under the pane's shell").to_owned();
    assert!(Command::new("kill").args(["-9", &cli]).status().expect("kill").success());
    // The guard puts the settings back a moment after the kill: the shell's
    // next line may still meet the raw terminal, so only that it was put
    // back is checked, not where the lines start.
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(&target).contains("LAZARET-EXIT=137")),
        "{label}: {}",
        terminal.screen(&target)
    );
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(&target).contains("TERMINAL-RESTORED")),
        "{label}: the user's terminal after SIGKILL of the CLI:\n{}",
        terminal.screen(&target)
    );
    // Typed at an interactive shell with job control (as in an editor's
    // terminal), the session ends with its shell and the prompt comes back
    // (a guard in a process group of its own was stopped by SIGTTOU and held
    // the CLI).
    let job_control = "bash";
    terminal.tmux(&["new-window", "-d", "-t", window, "-n", job_control, "env PS1='HOST-PROMPT$ ' bash --norc -i"]);
    let target = format!("{window}:{job_control}");
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(&target).contains("HOST-PROMPT$")),
        "{label}: {}",
        terminal.screen(&target)
    );
    terminal.line(&target, &format!("before=$(stty -g); {} run --workspace {} -- sh", subject.command_line(""), workspace.display()));
    assert!(terminal.shows_line(&target, "#", Duration::from_secs(60)), "{label}: {}", terminal.screen(&target));
    terminal.line(&target, "exit 4");
    assert!(
        wait_until(Duration::from_secs(30), || {
            let screen = terminal.screen(&target);
            screen.lines().skip_while(|line| !line.starts_with("# exit 4")).any(|line| line.starts_with("HOST-PROMPT$"))
        }),
        "{label}: the interactive shell's prompt comes back:\n{}",
        terminal.screen(&target)
    );
    terminal.line(&target, "echo back-$? $([ \"$(stty -g)\" = \"$before\" ] && echo restored)");
    assert!(
        wait_until(Duration::from_secs(30), || terminal.screen(&target).lines().any(|line| line.trim_end() == "back-4 restored")),
        "{label}: the interactive shell gets the terminal back:\n{}",
        terminal.screen(&target)
    );
    drop(terminal);
    let domain = subject.domain("default", &workspace);
    assert!(wait_until(Duration::from_secs(30), || subject.torn_down(&domain, Path::new(&workspace))), "{label}: the domain ends");
}

#[test]
fn a_session_in_a_terminal_behaves_as_over_ssh_as_root() {
    let _guard = sandbox_guard();
    ensure_default_image();
    a_session_in_a_terminal_behaves_as_over_ssh(&Subject::current());
}

#[test]
fn a_session_in_a_terminal_behaves_as_over_ssh_rootless() {
    let _guard = sandbox_guard();
    let Some(subject) = Subject::rootless() else { return };
    a_session_in_a_terminal_behaves_as_over_ssh(&subject);
}
