//! Bounded runs of a host-side process: podman, a script in podman's
//! namespace, a credential command, a runsc probe, a command inside the
//! sandbox. Each run here has a bound (from `lazaret_core::bounds`, or the
//! caller's for what the sandbox controls): [`output_bounded`] (async) and
//! [`output_bounded_blocking`] run the command in a process group of its own
//! and kill the whole group past its bound, failing with
//! [`crate::Error::TimedOut`] naming what and the bound; [`output_within`]
//! and [`output_capped`] bound a command whose length (and output) the
//! sandbox controls.

use std::process::{Command, Stdio};

/// Runs a host-side command (podman, or a script in podman's namespace)
/// for at most `bound` (one of `lazaret_core::bounds`) and returns its
/// output. The command runs in a process group of its own; past the bound
/// the whole group is killed (podman and what it started in that group;
/// conmon, which detaches into its own session, stays with its container)
/// and reaped, and the call fails with [`crate::Error::TimedOut`], which
/// names `what` and the bound. Stdin is `/dev/null`.
pub async fn output_bounded(
    mut command: tokio::process::Command,
    bound: std::time::Duration,
    what: &str,
) -> crate::Result<std::process::Output> {
    use tokio::io::AsyncReadExt;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    let mut child = command.spawn().map_err(|error| crate::format_err!("cannot run {what}: {error}"))?;
    let group = child.id();
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let finished = tokio::time::timeout(bound, async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let read_out = async {
            match stdout.as_mut() {
                Some(pipe) => pipe.read_to_end(&mut out).await.map(drop),
                None => Ok(()),
            }
        };
        let read_err = async {
            match stderr.as_mut() {
                Some(pipe) => pipe.read_to_end(&mut err).await.map(drop),
                None => Ok(()),
            }
        };
        let (status, (), ()) = tokio::try_join!(child.wait(), read_out, read_err)?;
        std::io::Result::Ok(std::process::Output { status, stdout: out, stderr: err })
    })
    .await;
    match finished {
        Ok(output) => Ok(output.map_err(|error| crate::format_err!("{what}: {error}"))?),
        Err(_) => {
            kill_group(group);
            let _ = child.wait().await;
            Err(crate::Error::TimedOut { what: what.to_owned(), bound })
        }
    }
}

/// [`output_bounded`] for blocking code (the State Anchor, the Network
/// Sidecar's start, podman queries on the blocking pool): the same process
/// group, kill and error. A waiter thread reaps the command and two threads
/// read its output, so no pipe can hold the caller past the bound either.
pub fn output_bounded_blocking(mut command: Command, bound: std::time::Duration, what: &str) -> crate::Result<std::process::Output> {
    use std::os::unix::process::CommandExt;
    let deadline = std::time::Instant::now() + bound;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = command.spawn().map_err(|error| crate::format_err!("cannot run {what}: {error}"))?;
    let group = child.id();
    let (sender, parts) = std::sync::mpsc::channel();
    read_in_thread(child.stdout.take(), sender.clone(), Part::Stdout);
    read_in_thread(child.stderr.take(), sender.clone(), Part::Stderr);
    std::thread::spawn(move || {
        let _ = sender.send(Part::Status(child.wait()));
    });
    let (mut status, mut stdout, mut stderr) = (None, None, None);
    while status.is_none() || stdout.is_none() || stderr.is_none() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match parts.recv_timeout(left) {
            Ok(Part::Status(result)) => status = Some(result.map_err(|error| crate::format_err!("{what}: {error}"))?),
            Ok(Part::Stdout(bytes)) => stdout = Some(bytes),
            Ok(Part::Stderr(bytes)) => stderr = Some(bytes),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                kill_group(Some(group));
                // The waiter thread reaps it; wait for that, briefly.
                while let Ok(part) = parts.recv_timeout(std::time::Duration::from_secs(1)) {
                    if matches!(part, Part::Status(_)) {
                        break;
                    }
                }
                return Err(crate::Error::TimedOut { what: what.to_owned(), bound });
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => crate::bail!("{what}: its output was lost"),
        }
    }
    match (status, stdout, stderr) {
        (Some(status), Some(stdout), Some(stderr)) => Ok(std::process::Output { status, stdout, stderr }),
        _ => crate::bail!("{what}: its output was lost"),
    }
}

/// What the threads of [`output_bounded_blocking`] report.
enum Part {
    Status(std::io::Result<std::process::ExitStatus>),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// Reads `pipe` to its end in a thread of its own and sends what it read.
fn read_in_thread(pipe: Option<impl std::io::Read + Send + 'static>, sender: std::sync::mpsc::Sender<Part>, part: fn(Vec<u8>) -> Part) {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = sender.send(part(bytes));
    });
}

/// SIGKILL to the process group a bounded command leads.
fn kill_group(group: Option<u32>) {
    let Some(group) = group.and_then(|id| i32::try_from(id).ok()) else { return };
    if let Err(error) = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), nix::sys::signal::Signal::SIGKILL) {
        tracing::debug!(%error, group, "the timed-out command's process group was already gone");
    }
}

/// Runs a `podman exec` (or any podman command whose length the sandbox
/// controls) for at most `limit`; past it the podman process is killed and
/// the call fails, so an agent that makes a command hang inside cannot hold
/// the coordinator (attack review finding 8).
pub async fn output_within(
    command: tokio::process::Command,
    limit: std::time::Duration,
    what: &str,
) -> crate::Result<std::process::Output> {
    output_bounded(command, limit, &format!("{what} inside the sandbox")).await
}

/// What [`output_capped`] read.
pub struct CappedOutput {
    /// At most the requested number of bytes of stdout.
    pub stdout: Vec<u8>,
    /// The command wrote more than that (and was killed).
    pub cut: bool,
    /// Its exit status, when it ended by itself.
    pub status: Option<std::process::ExitStatus>,
}

/// Like [`output_within`], but reads at most `max_stdout` bytes of stdout
/// and kills the command once it writes more: for output whose size the
/// sandbox controls (a file the agent wrote, through binaries the agent may
/// have replaced), so the coordinator never holds more than the cap.
pub async fn output_capped(
    mut command: tokio::process::Command,
    limit: std::time::Duration,
    max_stdout: usize,
    what: &str,
) -> crate::Result<CappedOutput> {
    use tokio::io::AsyncReadExt;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| crate::format_err!("cannot run podman for {what}: {error}"))?;
    let mut stdout = child.stdout.take().ok_or_else(|| crate::format_err!("no stdout from podman for {what}"))?;
    let read = async {
        let mut buffer = Vec::new();
        (&mut stdout).take(max_stdout as u64 + 1).read_to_end(&mut buffer).await?;
        let cut = buffer.len() > max_stdout;
        buffer.truncate(max_stdout);
        let status = if cut {
            child.start_kill()?;
            None
        } else {
            Some(child.wait().await?)
        };
        std::io::Result::Ok(CappedOutput { stdout: buffer, cut, status })
    };
    match tokio::time::timeout(limit, read).await {
        Ok(output) => Ok(output?),
        Err(_) => Err(crate::Error::TimedOut { what: format!("{what} inside the sandbox"), bound: limit }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podman::Podman;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    /// A podman that never answers: it starts a child of its own (as podman
    /// starts runsc or conmon), writes both process ids to `dir/pids`, and
    /// waits.
    fn hanging_podman(dir: &std::path::Path) -> Podman {
        let program = dir.join("podman");
        let pids = dir.join("pids");
        let script = format!("#!/bin/sh\nsleep 300 &\necho \"$$ $!\" > '{0}.tmp'\nmv '{0}.tmp' '{0}'\nwait\n", pids.display());
        std::fs::write(&program, script).expect("write the fake podman");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Podman::with_program(program.display().to_string())
    }

    /// The process ids the fake podman wrote.
    fn written_pids(file: &std::path::Path) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(text) = std::fs::read_to_string(file) {
                return text.split_whitespace().map(|pid| pid.parse().expect("a pid")).collect();
            }
            assert!(Instant::now() < deadline, "the fake podman never started");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Gone, or a zombie waiting for whoever inherited it: no longer running.
    fn wait_until_gone(pid: i32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()));
            if matches!(state, None | Some('Z')) {
                return;
            }
            assert!(Instant::now() < deadline, "process {pid} still runs (state {state:?}) after the time-out");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_timed_out(error: crate::Error, what: &str) {
        let message = error.to_string();
        assert!(matches!(error, crate::Error::TimedOut { bound, .. } if bound == Duration::from_secs(1)), "{message}");
        assert!(message.contains(what), "names what timed out: {message}");
        assert!(message.contains("within 1 s"), "names the bound: {message}");
    }

    #[tokio::test]
    async fn a_podman_past_its_bound_is_killed_with_its_children() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let mut command = tokio::process::Command::from(hanging_podman(dir.path()).command());
        command.args(["rm", "lazaret-test-container"]);
        let started = Instant::now();
        let error = output_bounded(command, Duration::from_secs(1), "podman rm lazaret-test-container").await.expect_err("times out");
        assert!(started.elapsed() < Duration::from_secs(5), "returned at the bound, not when podman ended");
        assert_timed_out(error, "podman rm lazaret-test-container");
        for pid in written_pids(&pids) {
            wait_until_gone(pid);
        }
    }

    #[test]
    fn a_blocking_podman_past_its_bound_is_killed_with_its_children() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let mut command = hanging_podman(dir.path()).command();
        command.args(["image", "exists", "lazaret-test-image"]);
        let started = Instant::now();
        let error = output_bounded_blocking(command, Duration::from_secs(1), "podman image exists").expect_err("times out");
        assert!(started.elapsed() < Duration::from_secs(5), "returned at the bound");
        assert_timed_out(error, "podman image exists");
        for pid in written_pids(&pids) {
            wait_until_gone(pid);
        }
    }

    #[tokio::test]
    async fn a_bounded_command_that_ends_in_time_gives_its_output() {
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let output = output_bounded(command, Duration::from_secs(10), "sh").await.expect("runs");
        assert_eq!((output.status.code(), &output.stdout[..], &output.stderr[..]), (Some(3), &b"out\n"[..], &b"err\n"[..]));
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let output = output_bounded_blocking(command, Duration::from_secs(10), "sh").expect("runs");
        assert_eq!((output.status.code(), &output.stdout[..], &output.stderr[..]), (Some(3), &b"out\n"[..], &b"err\n"[..]));
    }

    /// Teardown's `podman rm` names the container and its bound when podman
    /// hangs, and does not retry a hung podman.
    #[tokio::test]
    async fn a_hung_podman_rm_is_reported_with_the_container_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let podman = hanging_podman(dir.path());
        let started = Instant::now();
        let error = crate::backend::sandbox::remove_within(&podman, "lazaret-abc", Duration::from_secs(1)).await.expect_err("hangs");
        assert!(started.elapsed() < Duration::from_secs(5), "one attempt, stopped at the bound");
        let message = error.chained();
        assert!(message.contains("podman rm lazaret-abc") && message.contains("within 1 s"), "{message}");
        for pid in written_pids(&dir.path().join("pids")) {
            wait_until_gone(pid);
        }
    }
}
