//! Small wrappers over process-level syscalls.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `command`'s child call `setsid(2)` before `exec`: a new session
/// and process group, no controlling terminal, so terminal signals and the
/// CLI's exit do not reach it.
pub fn detach_into_new_session(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only
    // setsid(2), which is async-signal-safe; it touches no shared state.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}
