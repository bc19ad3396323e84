//! Running one client session's command inside the sandbox: with `runsc
//! exec` and the container's own process settings when the coordinator
//! recorded them (`lazaret_coordinator::exec_target`; 20-30 ms instead of
//! `podman exec`'s 140-220), else with `podman exec`. Either way the process
//! gets the container's user, capabilities, no-new-privileges and
//! environment, plus the session's variables, and no terminal from the
//! runtime. The process spec carries the session's credential, so it goes to
//! runsc through a pipe it inherits (`--process /proc/self/fd/N`), filled
//! before runsc starts: never a file, a FIFO or a command line, and nothing
//! a killed CLI can leave behind or leave runsc waiting on.
//!
//! Interactive (stdin and stdout are terminals): a host PTY sits between the
//! user's terminal and the exec, so the CLI owns the byte stream (it
//! can pause output and draw a prompt). Inside the sandbox, `script` gives
//! the command a terminal of its own, since `podman exec -t` fails under
//! runsc (conmon passes `--tty`, which runsc lacks). That terminal starts
//! from sane settings, as `podman exec -it` or ssh give (`script` copies
//! the raw host PTY's, issue 27: Enter, a CR, did nothing and ^C sent no
//! signal), so its line discipline turns CR into a newline and ^C, ^Z and
//! ^\ into signals for the foreground job, as over ssh. Window size changes
//! are applied with `stty`. The user's terminal is raw for the session and
//! put back on every exit: by the CLI, and by a guard process
//! ([`guard_terminal`]) when the CLI is killed.
//!
//! Non-interactive: the exec with stdin, stdout and stderr passed through.
//!
//! The user's terminal during a session (the screen model and prompt drawn
//! over it, raw mode and its guard process) is in `terminal`.

mod terminal;

use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result};
use lazaret_coordinator::exec_target::{ExecTarget, SessionProcess};
use lazaret_coordinator::podman::{self, Podman};
use lazaret_protocol::SessionTarget;

use crate::pod_exec::PodTarget;
use crate::prompt::{keys, PromptAction};
pub use terminal::{guard_terminal, lock_ui, SharedUi, TerminalUi};
use terminal::{sized, terminal_size, RawTerminal};

/// Exit status reported when the inner command's status is unknown.
const UNKNOWN_STATUS: i32 = 255;

/// How this session's command joins the sandbox, worked out once from the
/// coordinator's [`SessionTarget`].
#[derive(Clone)]
pub enum Join {
    /// `runsc exec` with the container's process spec the coordinator recorded.
    Runsc(ExecTarget),
    /// `podman exec` of the container (no record: an old runsc, a lost file).
    Podman(String),
    /// `lazaret pod-exec` to the pod, with the variables the pod's sessions
    /// get beside the session's own (the profile's `env`: an exec carries none).
    Pod(PodTarget, Vec<(String, String)>),
}

impl Join {
    /// The way in `target` names; `domain_dir` holds a local sandbox's exec
    /// record, `profile_environment` is the profile's `env`.
    pub fn of(target: &SessionTarget, domain_dir: &std::path::Path, profile_environment: Vec<(String, String)>) -> Join {
        match target {
            SessionTarget::Local { container_name } => match ExecTarget::read(domain_dir, container_name) {
                Some(recorded) => Join::Runsc(recorded),
                None => Join::Podman(container_name.clone()),
            },
            SessionTarget::Pod { kubeconfig, context, namespace, pod } => Join::Pod(
                PodTarget {
                    kubeconfig: PathBuf::from(kubeconfig),
                    context: context.clone(),
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                },
                profile_environment,
            ),
        }
    }

    /// `sh -c script` in the sandbox this session joins, for its helper
    /// commands (an interrupt, a window size), and what to call it in a log
    /// line; `None` when this program cannot be found to run `pod-exec`.
    fn helper_command(&self, script: &str) -> Option<(std::process::Command, String)> {
        match self {
            Join::Runsc(ExecTarget { container_name: container, .. }) | Join::Podman(container) => {
                let mut command = Podman::default().command();
                command.args(["exec", container, "sh", "-c", script]);
                Some((command, format!("podman exec in {container}")))
            }
            Join::Pod(pod, _) => {
                let program = std::env::current_exe().ok()?;
                let mut command = std::process::Command::new(program);
                command.args(pod.arguments(&[], &["sh".to_owned(), "-c".to_owned(), script.to_owned()]));
                Some((command, format!("an exec in Pod {}/{}", pod.namespace, pod.pod)))
            }
        }
    }

    /// Whether the sandbox's terminal turns a typed ^C into a signal itself
    /// (else the CLI delivers it). In a pod, gVisor's line discipline
    /// signals as our runsc's does when the cluster's gVisor is 20260905 or
    /// later (docs/cluster.md, "Limits").
    fn terminal_signals(&self) -> bool {
        match self {
            Join::Runsc(recorded) => recorded.terminal_signals,
            Join::Podman(_) => false,
            Join::Pod(..) => true,
        }
    }
}

/// One client session's command and how it joins the sandbox.
#[derive(Clone)]
pub struct SessionCommand {
    pub join: Join,
    pub session_id: String,
    /// The delegated Session Anchor credential (base64), for `lazaret-escalate`.
    pub credential: String,
    pub argv: Vec<String>,
}

/// A process to start on the host for a session, and the process spec that
/// `runsc exec` reads from the pipe it inherits.
struct Launch {
    program: OsString,
    arguments: Vec<OsString>,
    environment: Vec<(OsString, OsString)>,
    feed: Option<ProcessFeed>,
}

/// How a session's `inner` command (run by `sh` or `script` inside) is
/// started, as its [`Join`] says.
fn launch(session: &SessionCommand, term: Option<&str>, inner: Vec<String>) -> Result<Launch> {
    let mut variables = session_environment(session, term);
    match &session.join {
        Join::Pod(pod, profile_environment) => {
            // `pod-exec` authenticates to the cluster as the user does: a
            // kubeconfig's credential plugin (EKS, GKE, AKS) and proxy settings
            // read the user's environment. None of it reaches the pod: only
            // the variables it is told to pass.
            let mut environment: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            variables.extend(profile_environment.iter().cloned());
            let names: Vec<String> = variables.iter().map(|(name, _)| name.clone()).collect();
            environment.retain(|(name, _)| !names.iter().any(|passed| name.as_os_str() == passed.as_str()));
            environment.extend(variables.into_iter().map(|(name, value)| (name.into(), value.into())));
            let program = std::env::current_exe().context("cannot find this program, to run pod-exec")?;
            let arguments = pod.arguments(&names, &inner).into_iter().map(OsString::from).collect();
            Ok(Launch { program: program.into_os_string(), arguments, environment, feed: None })
        }
        Join::Podman(container) => {
            let mut environment = podman::environment();
            let mut arguments: Vec<OsString> = exec_arguments(container, &variables).into_iter().map(OsString::from).collect();
            arguments.extend(inner.into_iter().map(OsString::from));
            environment.extend(variables.into_iter().map(|(name, value)| (name.into(), value.into())));
            Ok(Launch { program: Podman::default().program().into(), arguments, environment, feed: None })
        }
        Join::Runsc(target) => {
            let process = target.session_process(&SessionProcess { argv: &inner, cwd: "/workspace", environment: &variables });
            let feed = ProcessFeed::create(&serde_json::to_vec(&process)?)?;
            let arguments = target.exec_arguments(&feed.path());
            Ok(Launch { program: target.runsc.clone().into_os_string(), arguments, environment: podman::environment(), feed: Some(feed) })
        }
    }
}

impl Launch {
    /// What the child does between fork and exec: keep the process spec's
    /// pipe open across the exec (it is close-on-exec everywhere else).
    fn inherit_feed(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        let fd = self.feed.as_ref().map(ProcessFeed::raw_fd);
        move || match fd {
            Some(fd) => ProcessFeed::inherit(fd),
            None => Ok(()),
        }
    }
}

/// The pipe through which `runsc exec --process` reads the session's
/// process spec (which holds the credential). The whole spec is written and
/// the write end closed before runsc starts, so runsc reads it to its end at
/// once, whenever it runs (issue 33 finding 3: with a FIFO in the socket
/// directory, a CLI killed before it wrote left the FIFO behind and runsc
/// blocked on it for good). Only the read end is left, close-on-exec but
/// in the one child that inherits it.
struct ProcessFeed {
    read: std::os::fd::OwnedFd,
}

impl ProcessFeed {
    fn create(spec: &[u8]) -> Result<ProcessFeed> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("cannot make a pipe for the process spec")?;
        // Written whole before runsc runs: the pipe must hold all of it.
        if spec.len() > 64 << 10 {
            let size = i32::try_from(spec.len()).context("the process spec is too large")?;
            fcntl(&write, FcntlArg::F_SETPIPE_SZ(size))
                .with_context(|| format!("a pipe cannot hold the {} byte process spec", spec.len()))?;
        }
        let mut write = std::fs::File::from(write);
        write.write_all(spec).context("cannot write the process spec")?;
        Ok(ProcessFeed { read })
    }

    fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.read)
    }

    /// The path under which runsc opens the inherited read end.
    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.raw_fd()))
    }

    /// In the child, between fork and exec: clears close-on-exec on `fd`.
    /// Async-signal-safe (one `fcntl`).
    fn inherit(fd: std::os::fd::RawFd) -> std::io::Result<()> {
        // SAFETY: `fd` is the pipe's read end, open in this (forked) process;
        // F_SETFD only changes its descriptor flags.
        if unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// How long relayed output is drained after the session's process ended.
const RELAY_DRAIN: std::time::Duration = std::time::Duration::from_millis(500);

/// Copies the CLI's stdin into the session on a thread of its own: a read
/// from a terminal blocks, and a blocked thread must not hold the CLI's exit
/// (the process ends with the CLI).
fn relay_stdin(input: tokio::process::ChildStdin) -> Result<()> {
    let fd = input.into_owned_fd().context("cannot take the session's stdin")?;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()))
        .context("cannot make the session's stdin blocking")?;
    let mut input = std::fs::File::from(fd);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut input);
    });
    Ok(())
}

/// The session's variables, set in its process (with podman: passed by name,
/// `--env NAME`, so their values never appear on a host command line).
fn session_environment(session: &SessionCommand, term: Option<&str>) -> Vec<(String, String)> {
    let mut variables = vec![
        ("LAZARET_SESSION_ID".to_owned(), session.session_id.clone()),
        (lazaret_protocol::escalation::CREDENTIAL_VARIABLE.to_owned(), session.credential.clone()),
    ];
    if let Some(term) = term {
        variables.push(("TERM".to_owned(), term.to_owned()));
    }
    variables
}

pub fn is_interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Single-quotes `word` for a POSIX shell.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn state_file(session_id: &str) -> String {
    format!("/tmp/.lazaret-session-{session_id}")
}

/// `podman exec` of `container`, both modes.
fn exec_arguments(container: &str, variables: &[(String, String)]) -> Vec<String> {
    let mut arguments = vec!["exec".to_owned(), "--interactive".to_owned(), "--workdir=/workspace".to_owned()];
    for (name, _) in variables {
        arguments.push(format!("--env={name}"));
    }
    arguments.push(container.to_owned());
    arguments
}

/// Where the prompt's decisions go.
pub type ActionSender = tokio::sync::mpsc::UnboundedSender<PromptAction>;

/// Runs the session to completion and returns the inner exit status. In
/// interactive mode `ui` is the screen the prompt draws on and `actions`
/// receives the user's decisions.
pub async fn run(session: &SessionCommand, ui: SharedUi, actions: ActionSender) -> Result<i32> {
    if is_interactive() {
        let session = session.clone();
        tokio::task::spawn_blocking(move || run_interactive(&session, ui, actions)).await.context("session task failed")?
    } else {
        run_piped(session).await
    }
}

async fn run_piped(session: &SessionCommand) -> Result<i32> {
    // `sh` records the command's pid so that an interrupt can be delivered
    // inside the sandbox; `exec` then replaces it with the command.
    let state = state_file(&session.session_id);
    let mut inner = vec!["sh".to_owned(), "-c".to_owned(), format!("echo \"$$\" > {state}; exec \"$@\""), "lazaret-session".to_owned()];
    inner.extend(session.argv.iter().cloned());
    let launch = launch(session, None, inner)?;
    let mut command = tokio::process::Command::new(&launch.program);
    command
        .env_clear()
        .envs(launch.environment.iter().map(|(name, value)| (name, value)))
        .args(&launch.arguments)
        // The session's stdio are pipes of the CLI, relayed, never the
        // user's own files: runsc writes a donated regular file at its own
        // offset, from 0 (`{ echo a; lazaret run -- echo b; } > f` lost `a`,
        // and stdout and stderr overwrote each other in `> f 2>&1`), and as
        // root it chowns every stdio it is given to the sandbox's user (the
        // user's terminal, `/dev/null`). conmon did the same for podman exec.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: the closure only calls `fcntl` (async-signal-safe) on a
    // descriptor number it owns a copy of; it allocates nothing.
    unsafe { command.pre_exec(launch.inherit_feed()) };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut child = command.spawn().with_context(|| format!("cannot run {}", launch.program.to_string_lossy()))?;
    let mut relays = Vec::new();
    if let Some(input) = child.stdin.take() {
        relay_stdin(input)?;
    }
    if let Some(mut output) = child.stdout.take() {
        relays.push(tokio::spawn(async move { tokio::io::copy(&mut output, &mut tokio::io::stdout()).await }));
    }
    if let Some(mut output) = child.stderr.take() {
        relays.push(tokio::spawn(async move { tokio::io::copy(&mut output, &mut tokio::io::stderr()).await }));
    }
    // The parent's read end of the spec's pipe closes here.
    drop(launch);
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = terminate.recv() => { let _ = child.kill().await; return Ok(128 + 15); }
        _ = interrupt.recv() => {
            // Deliver the interrupt inside the sandbox as well: podman exec
            // without a terminal does not forward signals.
            signal_inside(&session.join, &format!("kill -INT \"$(cat {state})\""));
            let _ = child.kill().await;
            return Ok(128 + 2);
        }
    };
    // What the command wrote before it ended is in the pipes; a process it
    // left behind that keeps them open is not waited for long.
    for relay in relays {
        let _ = tokio::time::timeout(RELAY_DRAIN, relay).await;
    }
    Ok(status.code().unwrap_or(UNKNOWN_STATUS))
}

/// Runs `script` inside the sandbox.
fn run_interactive(session: &SessionCommand, ui: SharedUi, actions: ActionSender) -> Result<i32> {
    use portable_pty::{native_pty_system, PtySize};

    let (columns, rows) = terminal_size();
    let pair = native_pty_system()
        .openpty(PtySize { rows, cols: columns, pixel_width: 0, pixel_height: 0 })
        .map_err(|error| anyhow::anyhow!("cannot open a pseudo-terminal: {error}"))?;
    if let Some(fd) = pair.master.as_raw_fd() {
        make_raw(fd)?;
    }

    let quoted: Vec<String> = session.argv.iter().map(|word| shell_quote(word)).collect();
    let inner = format!(
        "printf '%s %s\\n' \"$$\" \"$(tty)\" > {state}; stty sane iutf8 rows {rows} cols {columns} 2>/dev/null; exec {command}",
        state = state_file(&session.session_id),
        command = quoted.join(" "),
    );
    let term = std::env::var("TERM").unwrap_or_else(|_| "xterm-256color".to_owned());
    let script: Vec<String> =
        ["script", "--quiet", "--flush", "--return", "--echo", "always", "--command", &inner, "/dev/null"].map(str::to_owned).to_vec();
    let launch = launch(session, Some(&term), script)?;
    // Spawned here, not by portable-pty, which closes every descriptor but
    // stdio in the child: the process spec's pipe must stay open.
    let terminal = pair.master.tty_name().context("the pseudo-terminal has no name")?;
    let open_terminal = || {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NOCTTY | nix::libc::O_CLOEXEC)
            .open(&terminal)
            .with_context(|| format!("cannot open {}", terminal.display()))
    };
    let mut command = std::process::Command::new(&launch.program);
    command
        .env_clear()
        .envs(launch.environment.iter().map(|(name, value)| (name, value)))
        .args(&launch.arguments)
        .stdin(open_terminal()?)
        .stdout(open_terminal()?)
        .stderr(open_terminal()?);
    let mut inherit_feed = launch.inherit_feed();
    // SAFETY: between fork and exec the closure makes only async-signal-safe
    // calls (setsid, ioctl, fcntl) and allocates nothing: a new session whose
    // controlling terminal is the pseudo-terminal on stdin, as a terminal
    // program expects, and the spec's pipe kept open.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::setsid() == -1 || nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            inherit_feed()
        })
    };
    let mut child = command.spawn().with_context(|| format!("cannot run {}", launch.program.to_string_lossy()))?;
    // Only the child keeps the terminal's slave side open (the command holds
    // its stdio until dropped), so the master reads end when the child does;
    // and the parent's read end of the spec's pipe closes here.
    drop(command);
    drop(pair.slave);
    drop(launch);

    let mut reader = pair.master.try_clone_reader().map_err(|error| anyhow::anyhow!("{error}"))?;
    let mut writer = pair.master.take_writer().map_err(|error| anyhow::anyhow!("{error}"))?;
    let _raw = RawTerminal::enable()?;

    let output_ui = ui.clone();
    let output = std::thread::spawn(move || {
        let mut stdout = std::io::stdout();
        let mut buffer = [0u8; 8192];
        while let Ok(count) = reader.read(&mut buffer) {
            if count == 0 {
                break;
            }
            let mut screen = lock_ui(&output_ui);
            screen.parser.process(&buffer[..count]);
            if !screen.prompt.is_active() && stdout.write_all(&buffer[..count]).and_then(|()| stdout.flush()).is_err() {
                break;
            }
        }
    });
    // Where the sandbox's terminal does not signal (old runsc builds,
    // podman exec), a typed ^C is delivered by the CLI.
    let stand_in = (!session.join.terminal_signals()).then(|| (session.join.clone(), state_file(&session.session_id)));
    // The input thread blocks on our stdin; it ends with the process.
    let input_ui = ui.clone();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buffer = [0u8; 4096];
        while let Ok(count) = stdin.read(&mut buffer) {
            if count == 0 {
                break;
            }
            let bytes = &buffer[..count];
            {
                // While the prompt shows, keys are for it, not the sandbox.
                let mut screen = lock_ui(&input_ui);
                if screen.prompt.is_active() {
                    // One time for every key of one read: a selection and
                    // its Enter in the same read confirm nothing (D20).
                    let now = std::time::Instant::now();
                    for key in keys::decode(bytes) {
                        if let Some(action) = screen.prompt.handle_key(key, now) {
                            let _ = actions.send(action);
                        }
                    }
                    screen.refresh();
                    continue;
                }
            }
            // ^C, ^Z and ^\ reach the sandbox's terminal as bytes; its line
            // discipline signals the foreground job, as over ssh. Where it
            // does not (nor knows the line-kill character), a ^C is left out
            // (left in the line being typed, it would start the next
            // command) and the CLI sends the SIGINT.
            let interrupted = stand_in.is_some() && bytes.contains(&0x03);
            let forwarded: std::borrow::Cow<'_, [u8]> =
                if interrupted { bytes.iter().copied().filter(|byte| *byte != 0x03).collect::<Vec<u8>>().into() } else { bytes.into() };
            if writer.write_all(&forwarded).and_then(|()| writer.flush()).is_err() {
                break;
            }
            if let Some((inside, state)) = stand_in.as_ref().filter(|_| interrupted) {
                let (inside, script) = (inside.clone(), interrupt_script(state));
                std::thread::spawn(move || signal_inside(&inside, &script));
            }
        }
    });
    let resize_master = pair.master;
    let resize_inside = session.join.clone();
    let resize_state = state_file(&session.session_id);
    let resizer = std::thread::spawn(move || watch_window_size(&*resize_master, &resize_inside, &resize_state, &ui));

    let status = child.wait().context("waiting for the session's exec")?;
    let _ = output.join();
    drop(resizer);
    Ok(status
        .code()
        .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|signal| 128 + signal))
        .unwrap_or(UNKNOWN_STATUS))
}

/// The shell snippet that delivers a typed ^C inside the sandbox, where
/// runsc's terminal does not (see [`lazaret_coordinator::runsc::TERMINAL_SIGNALS_SINCE`]).
///
/// There, processes have no controlling terminal (`tty_nr` and `tpgid` read
/// 0), so neither the line discipline nor we can name the terminal's
/// foreground group. The approximation: SIGINT to every process group of the
/// session other than the session leader's (the jobs of an interactive
/// shell), or to the leader's group when there is no other (a program run
/// directly).
fn interrupt_script(state: &str) -> String {
    format!(
        "read sid tty < {state} || exit 0; \
         groups=$(ps -o pgid= -s \"$sid\" | tr -d ' ' | sort -u | grep -vx \"$sid\"); \
         if [ -n \"$groups\" ]; then for group in $groups; do kill -INT \"-$group\"; done; \
         else kill -INT \"-$sid\"; fi"
    )
}

/// Runs a short shell snippet inside the sandbox (best effort), for at most
/// [`lazaret_core::bounds::IN_SANDBOX_SIGNAL`]: the sandbox's `sh`, `ps`
/// and `stty` are the agent's to replace, and a hung one must not hold the
/// session's terminal.
fn signal_inside(join: &Join, script: &str) {
    let Some((command, what)) = join.helper_command(script) else { return };
    if let Err(error) =
        lazaret_coordinator::bounded_process::output_bounded_blocking(command, lazaret_core::bounds::IN_SANDBOX_SIGNAL, &what)
    {
        tracing::debug!(error = %error.chained(), "signal or terminal size inside the sandbox");
    }
}

/// Polls the terminal size (SIGWINCH cannot be waited for from a plain
/// thread without a signal crate) and applies changes to both terminals;
/// on the same beat, draws the prompt again once it arms.
fn watch_window_size(master: &dyn portable_pty::MasterPty, inside: &Join, state: &str, ui: &SharedUi) {
    let mut last = terminal_size();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        lock_ui(ui).tick();
        let Ok(size) = crossterm::terminal::size() else { return };
        let current = sized(size);
        if current != last {
            last = current;
            let (columns, rows) = current;
            {
                let mut screen = lock_ui(ui);
                screen.parser.set_size(rows, columns);
                if screen.prompt.is_active() {
                    screen.refresh();
                }
            }
            let _ = master.resize(portable_pty::PtySize { rows, cols: columns, pixel_width: 0, pixel_height: 0 });
            signal_inside(inside, &format!("read sid tty < {state} && stty -F \"$tty\" rows {rows} cols {columns}"));
        }
    }
}

/// Puts the host PTY in raw mode: bytes reach `podman exec` untouched (no
/// echo, no signals generated on the host side).
fn make_raw(fd: std::os::fd::RawFd) -> Result<()> {
    use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
    // SAFETY: `fd` is the PTY master owned by `pair.master`, which outlives
    // this call; the borrow does not escape it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut attributes = tcgetattr(borrowed).context("tcgetattr on the pty")?;
    cfmakeraw(&mut attributes);
    tcsetattr(borrowed, SetArg::TCSANOW, &attributes).context("tcsetattr on the pty")?;
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    fn session(join: Join) -> SessionCommand {
        SessionCommand { join, session_id: "5e55".into(), credential: "c".into(), argv: vec!["true".into()] }
    }

    /// The coordinator's target decides the way in; the CLI reads no backend.
    #[test]
    fn the_coordinators_target_decides_how_a_session_joins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = SessionTarget::Local { container_name: "lazaret-default-0123456789ab".into() };
        let join = Join::of(&local, dir.path(), vec![("PROFILE_VAR".into(), "1".into())]);
        assert!(matches!(&join, Join::Podman(name) if name == "lazaret-default-0123456789ab"), "no exec record: podman exec");
        let started = launch(&session(join), None, vec!["sh".into()]).expect("launch");
        let arguments: Vec<String> = started.arguments.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(arguments[0], "exec");
        assert!(
            arguments.contains(&"lazaret-default-0123456789ab".to_owned()) && arguments.contains(&"--env=LAZARET_SESSION_ID".to_owned())
        );
        assert!(!arguments.iter().any(|a| a.contains("PROFILE_VAR")), "a local sandbox has the profile's env already");

        let pod = SessionTarget::Pod {
            kubeconfig: "/home/u/.kube/config".into(),
            context: Some("ctx".into()),
            namespace: "agents".into(),
            pod: "lazaret-0123456789ab".into(),
        };
        let join = Join::of(&pod, dir.path(), vec![("PROFILE_VAR".into(), "1".into())]);
        assert!(join.terminal_signals());
        let started = launch(&session(join), None, vec!["sh".into()]).expect("launch");
        let arguments: Vec<String> = started.arguments.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        for expected in [
            "pod-exec",
            "--kubeconfig=/home/u/.kube/config",
            "--namespace=agents",
            "--pod=lazaret-0123456789ab",
            "--context=ctx",
            "--pass=PROFILE_VAR",
        ] {
            assert!(arguments.contains(&expected.to_owned()), "{expected}: {arguments:?}");
        }
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("a b"), "'a b'");
    }
}
