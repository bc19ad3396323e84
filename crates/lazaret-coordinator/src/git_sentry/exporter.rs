//! Running the export inside the sandbox: one long-lived shell per
//! container, started once, that reads one request line and answers one
//! result line per export, so an export does not pay for a fresh exec. If it
//! is gone (the agent can kill it), the export runs through a fresh exec and
//! the next export starts a new shell; if it hangs, it is killed when the
//! export's time is up ([`lazaret_core::bounds::EXPORT`]). The execs are `runsc
//! exec`s with the container's own process settings when the coordinator
//! found runsc's state of the sandbox (`crate::exec_target`; 20-30 ms, so
//! the shell is started at the first export, not beside the first session),
//! else `podman exec`s (200-300 ms; the shell is started with the sandbox).
//!
//! The shell, the `git` it runs and its answers are the agent's to replace or
//! forge: an answer only says that a bundle may be in the outbox, which the
//! host then copies and checks whole exactly as before (D13). A forged or
//! stale answer can at most make the host import a bundle the agent wrote
//! itself, which it can always do.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::Instant;

use crate::cleanup::LogFailure;
use crate::error::Result;
use crate::exec_target::{ExecTarget, EXPORTER_LOOP, EXPORTER_ONCE};
use crate::podman::Podman;

/// A result line longer than this is not the exporter's: it is dropped.
const MAX_ANSWER: usize = 128;
/// `$0` of the exporter's shell, so it shows as such in `ps` inside.
pub const EXPORTER_NAME: &str = "lazaret-exporter";

/// The running exporter of one container.
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// What an export inside the sandbox reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A bundle of the branch may be in the outbox.
    Written,
    /// No branch, or git failed: nothing to import.
    Failed,
}

/// Runs exports inside one container, through the long-lived shell when it
/// lives and a fresh exec otherwise.
pub struct Exporter {
    container: String,
    /// `runsc exec` of the running sandbox, and where the process specs go.
    runsc: Option<(ExecTarget, PathBuf)>,
    process: Option<Process>,
    next_request: u64,
}

impl Exporter {
    pub fn new(container: &str) -> Exporter {
        Exporter { container: container.to_owned(), runsc: None, process: None, next_request: 1 }
    }

    /// Runs the exports through `runsc exec` of `target` (process specs in
    /// `spec_dir`, the private Domain Root) from now on.
    pub fn use_runsc(&mut self, target: ExecTarget, spec_dir: PathBuf) {
        self.runsc = Some((target, spec_dir));
    }

    /// Whether a fresh exec is cheap (`runsc exec`), so that the shell need
    /// not be started before the first export.
    pub fn starts_cheaply(&self) -> bool {
        self.runsc.is_some()
    }

    /// The exec of `argv` in the sandbox (`-i` for podman when `interactive`).
    fn exec(&self, argv: &[&str], interactive: bool, spec_name: &str) -> Result<tokio::process::Command> {
        let argv: Vec<String> = argv.iter().map(|word| (*word).to_owned()).collect();
        if let Some((target, dir)) = &self.runsc {
            return Ok(tokio::process::Command::from(target.own_command(&dir.join(spec_name), &argv)?));
        }
        let mut command = tokio::process::Command::from(Podman::default().command());
        command.arg("exec");
        if interactive {
            command.arg("-i");
        }
        command.arg(&self.container).args(&argv);
        Ok(command)
    }

    /// Starts the long-lived shell if none runs, without waiting for it: the
    /// first request waits in its pipe until the shell reads it.
    pub fn start(&mut self, loop_script: &str) {
        if self.process.is_some() {
            return;
        }
        let mut command = match self.exec(&["sh", "-c", loop_script, EXPORTER_NAME], true, EXPORTER_LOOP) {
            Ok(command) => command,
            Err(error) => {
                tracing::warn!(error = %error.chained(), "cannot start the exporter inside the sandbox");
                return;
            }
        };
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
        match command.spawn() {
            Ok(mut child) => match (child.stdin.take(), child.stdout.take()) {
                (Some(stdin), Some(stdout)) => {
                    self.process = Some(Process { child, stdin, stdout: BufReader::new(stdout) });
                }
                _ => tracing::warn!("the exporter inside the sandbox has no pipes"),
            },
            Err(error) => tracing::warn!(%error, "cannot start the exporter inside the sandbox"),
        }
    }

    /// Runs one export within `limit`: `arguments` (words without spaces,
    /// checked by the caller) go to the long-lived shell; if it is gone, to
    /// `one_shot`, a script run by a fresh `podman exec`, and a new shell is
    /// started for the next export. The process is out of `self` during the
    /// exchange: if this future is dropped half-way, so is the process
    /// (killed), never reused in an unknown state.
    pub async fn export(&mut self, loop_script: &str, one_shot: &str, arguments: &[String], limit: Duration) -> Result<Outcome> {
        let deadline = Instant::now() + limit;
        self.start(loop_script);
        if let Some(mut process) = self.process.take() {
            let id = self.next_request;
            self.next_request += 1;
            match tokio::time::timeout_at(deadline, process.exchange(id, arguments)).await {
                Ok(Some(outcome)) => {
                    self.process = Some(process);
                    return Ok(outcome);
                }
                // Gone (killed inside, or podman failed): a fresh exec below.
                Ok(None) => {
                    tracing::info!("the exporter inside the sandbox is gone; exporting through a fresh exec");
                    process.child.start_kill().log_failure("stopping the exec of a gone exporter");
                }
                Err(_) => {
                    process.child.start_kill().log_failure("stopping the exec of an exporter past its time limit");
                    crate::bail!("the export of the agent branch did not finish within {} s inside the sandbox; stopped", limit.as_secs());
                }
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let command = self.exec(&["sh", "-c", one_shot], false, EXPORTER_ONCE)?;
        let output = crate::bounded_process::output_within(command, remaining, "the export of the agent branch").await?;
        self.start(loop_script);
        Ok(if output.status.success() { Outcome::Written } else { Outcome::Failed })
    }
}

impl Process {
    /// Sends request `id` and reads lines until its answer. `None` when the
    /// exporter is gone or answers with what no exporter writes.
    async fn exchange(&mut self, id: u64, arguments: &[String]) -> Option<Outcome> {
        let mut request = id.to_string();
        for argument in arguments {
            request.push(' ');
            request.push_str(argument);
        }
        request.push('\n');
        self.stdin.write_all(request.as_bytes()).await.ok()?;
        self.stdin.flush().await.ok()?;
        let prefix = format!("{id} ");
        loop {
            let line = self.read_line().await?;
            // Answers to requests abandoned earlier are skipped.
            if let Some(answer) = line.strip_prefix(&prefix) {
                return match answer {
                    "ok" => Some(Outcome::Written),
                    "failed" => Some(Outcome::Failed),
                    _ => None,
                };
            }
        }
    }

    /// One line of at most [`MAX_ANSWER`] bytes, without its newline.
    async fn read_line(&mut self) -> Option<String> {
        let mut line = Vec::new();
        loop {
            let available = self.stdout.fill_buf().await.ok()?;
            if available.is_empty() {
                return None;
            }
            let (taken, complete) = match available.iter().position(|&byte| byte == b'\n') {
                Some(end) => (end, true),
                None => (available.len(), false),
            };
            if line.len() + taken > MAX_ANSWER {
                return None;
            }
            line.extend_from_slice(&available[..taken]);
            self.stdout.consume(taken + usize::from(complete));
            if complete {
                return String::from_utf8(line).ok();
            }
        }
    }
}
