//! Running an approved host command: `execve` of the program resolved on
//! the host's PATH (never through a shell, DECISIONS D9), in the user's own
//! project directory, with a fixed environment, a timeout and output caps.
//! Output streams back to the sandbox as it comes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use lazaret_protocol::escalation::ServerFrame;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::cleanup::LogFailure;
use crate::error::Result;

/// Bytes of stdout and of stderr forwarded per command; the rest is dropped
/// with a note.
pub const OUTPUT_CAP_BYTES: usize = 8 << 20;

/// The only environment a host command gets.
pub(crate) fn fixed_environment(host_path: &str) -> Vec<(String, String)> {
    let mut environment =
        vec![("PATH".to_owned(), host_path.to_owned()), ("LANG".to_owned(), "C.UTF-8".to_owned()), ("TERM".to_owned(), "dumb".to_owned())];
    for name in ["HOME", "USER", "LOGNAME"] {
        if let Ok(value) = std::env::var(name) {
            environment.push((name.to_owned(), value));
        }
    }
    environment
}

pub struct Finished {
    pub exit_status: Option<i32>,
    pub timed_out: bool,
}

/// Runs `program` (absolute) with `arguments`, sending output frames to
/// `send` as they arrive.
pub async fn run<F, Fut>(
    program: &Path,
    arguments: &[String],
    cwd: &Path,
    host_path: &str,
    timeout: Duration,
    mut send: F,
) -> Result<Finished>
where
    F: FnMut(ServerFrame) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut command = tokio::process::Command::new(program);
    command
        .args(arguments)
        .current_dir(cwd)
        .env_clear()
        .envs(fixed_environment(host_path))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        crate::bail!("the command's output pipes are missing");
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let (mut out_buffer, mut err_buffer) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
    let (mut out_sent, mut err_sent) = (0usize, 0usize);
    let (mut out_open, mut err_open) = (true, true);
    let mut timed_out = false;
    while out_open || err_open {
        tokio::select! {
            read = read_some(&mut stdout, &mut out_buffer), if out_open => match read {
                Some(bytes) => forward(&mut send, &out_buffer[..bytes], &mut out_sent, true).await,
                None => out_open = false,
            },
            read = read_some(&mut stderr, &mut err_buffer), if err_open => match read {
                Some(bytes) => forward(&mut send, &err_buffer[..bytes], &mut err_sent, false).await,
                None => err_open = false,
            },
            _ = &mut deadline => { timed_out = true; break; }
        }
    }
    // Output closed is not the end: a command that closes stdout and stderr
    // and keeps running is still bound by the same deadline.
    let status = if timed_out {
        None
    } else {
        tokio::select! {
            status = child.wait() => Some(status?),
            _ = &mut deadline => None,
        }
    };
    let Some(status) = status else {
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // The whole process group, so helpers the command started go too.
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
                .log_failure(format_args!("killing the process group {pid} of a command past its time limit"));
        }
        child.wait().await.log_failure("reaping a command killed past its time limit");
        return Ok(Finished { exit_status: None, timed_out: true });
    };
    let exit_status = status.code().or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|signal| 128 + signal));
    Ok(Finished { exit_status, timed_out: false })
}

async fn read_some(reader: &mut (impl AsyncRead + Unpin), buffer: &mut [u8]) -> Option<usize> {
    match reader.read(buffer).await {
        Ok(0) | Err(_) => None,
        Ok(count) => Some(count),
    }
}

async fn forward<F, Fut>(send: &mut F, bytes: &[u8], sent: &mut usize, is_stdout: bool)
where
    F: FnMut(ServerFrame) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if *sent >= OUTPUT_CAP_BYTES {
        return;
    }
    let room = OUTPUT_CAP_BYTES - *sent;
    let mut chunk = bytes[..bytes.len().min(room)].to_vec();
    *sent += chunk.len();
    if *sent >= OUTPUT_CAP_BYTES {
        chunk.extend_from_slice(format!("\n[lazaret: output cut at {} MiB]\n", OUTPUT_CAP_BYTES >> 20).as_bytes());
    }
    let data = BASE64.encode(&chunk);
    send(if is_stdout { ServerFrame::Stdout { data } } else { ServerFrame::Stderr { data } }).await;
}
