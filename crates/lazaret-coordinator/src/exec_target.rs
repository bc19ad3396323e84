//! Sessions without `podman exec` (issue 16: join and cold start).
//!
//! A session is one process started in the running sandbox. `podman exec`
//! spent 140-220 ms in podman and conmon around the `runsc exec` that does
//! the work, which alone takes 20-30 ms. So once the sandbox runs, the
//! coordinator records what `runsc exec` needs ([`ExecTarget`], a private
//! file in the Domain Root), and the CLI starts sessions with it: runsc gets
//! the container's own process settings (user, capabilities,
//! no-new-privileges, environment: the `process` of the spec runsc created
//! the container with, read from runsc's own state file) with only the
//! command, the working directory and the session's variables changed,
//! which is what `podman exec` hands runsc too. Resource limits are the
//! sandbox's whatever the exec path (runsc's loader applies the root
//! container's rlimits to every exec).
//!
//! Anything unexpected (runsc's state not where runsc keeps it by default,
//! a state format without the spec, the container gone) leaves no record,
//! and sessions go through `podman exec` as before.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Result};

/// In the Domain Root: the record of the running sandbox.
const FILE: &str = "session-exec.json";
/// In the Domain Root: the process specs of the exporter (`git_sentry`).
pub const EXPORTER_LOOP: &str = "exporter-loop.process.json";
pub const EXPORTER_ONCE: &str = "exporter-once.process.json";
/// The largest runsc state file read (the spec with every mount).
const MAX_STATE_BYTES: u64 = 4 << 20;

/// What `runsc exec` needs to start a session in the running sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecTarget {
    /// The runsc the sandbox runs under.
    pub runsc: PathBuf,
    /// runsc's state directory for the sandbox (`--root`).
    pub root: PathBuf,
    /// runsc's state file of the container: gone when the container is.
    pub state_file: PathBuf,
    pub container_id: String,
    pub container_name: String,
    /// The OCI `process` the container was created with.
    pub process: serde_json::Value,
    /// Whether runsc's terminals send the signals of ^C, ^Z and ^\\
    /// themselves (`runsc::Selected::terminal_signals`); if not, the CLI
    /// delivers a typed ^C.
    #[serde(default)]
    pub terminal_signals: bool,
}

/// What a session runs, and with which extra variables.
pub struct SessionProcess<'a> {
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// Set in the process's environment, replacing the container's value of
    /// the same name.
    pub environment: &'a [(String, String)],
}

impl ExecTarget {
    /// Finds the container's runsc state where runsc keeps it when podman
    /// runs it (as root `/var/run/runsc`; rootless `$XDG_RUNTIME_DIR/runsc`,
    /// podman's runtime directory) and takes its spec's `process`. Only a
    /// directory and a file of this user (not symlinks, not writable by
    /// anyone else) are taken: a state file planted by another user would
    /// name the capabilities and the control socket.
    pub fn locate(runsc: &Path, container_id: &str, container_name: &str) -> Option<ExecTarget> {
        if container_id.is_empty() || !container_id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return None;
        }
        let uid = nix::unistd::geteuid().as_raw();
        let mut roots: Vec<PathBuf> = Vec::new();
        if uid == 0 {
            roots.push(PathBuf::from("/var/run/runsc"));
            roots.push(PathBuf::from("/run/runsc"));
        } else {
            if let Some(runtime_dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|value| !value.is_empty()) {
                roots.push(PathBuf::from(runtime_dir).join("runsc"));
            }
            roots.push(PathBuf::from(format!("/run/user/{uid}/runsc")));
        }
        let suffix = format!("{container_id}.state");
        let sandbox_suffix = format!(":{suffix}");
        for root in roots {
            if !is_own_private_dir(&root, uid) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&root) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                // `<sandbox>_sandbox:<container>.state` (and `<container>.state` in older runsc)
                if name != suffix.as_str() && !name.ends_with(&sandbox_suffix) {
                    continue;
                }
                let state_file = entry.path();
                if !is_own_private_file(&state_file, uid) {
                    continue;
                }
                let Some(process) = read_process(&state_file, container_id) else { continue };
                return Some(ExecTarget {
                    runsc: runsc.to_path_buf(),
                    root,
                    state_file,
                    container_id: container_id.to_owned(),
                    container_name: container_name.to_owned(),
                    process,
                    terminal_signals: false,
                });
            }
        }
        None
    }

    /// Writes the record into `domain_dir` (0600, replaced atomically).
    pub fn write(&self, domain_dir: &Path) -> Result<()> {
        let target = domain_dir.join(FILE);
        let temporary = domain_dir.join(format!("{FILE}.tmp"));
        crate::private_dirs::write_private(&temporary, &serde_json::to_vec(self).context("cannot encode the exec record")?)?;
        std::fs::rename(&temporary, &target).with_context(|| format!("cannot write {}", target.display()))?;
        Ok(())
    }

    /// The record of the sandbox `container_name` if it is still the
    /// running one (its runsc state still exists).
    pub fn read(domain_dir: &Path, container_name: &str) -> Option<ExecTarget> {
        let text = std::fs::read(domain_dir.join(FILE)).ok()?;
        let target: ExecTarget = serde_json::from_slice(&text).ok()?;
        (target.container_name == container_name && target.state_file.is_file()).then_some(target)
    }

    /// Removes the record and the coordinator's own process specs (at
    /// teardown, and before a start).
    pub fn remove(domain_dir: &Path) {
        for name in [FILE, EXPORTER_LOOP, EXPORTER_ONCE] {
            crate::cleanup::remove_file(&domain_dir.join(name));
        }
    }

    /// The arguments of `runsc` that run `process_file` in the sandbox.
    pub fn exec_arguments(&self, process_file: &Path) -> Vec<std::ffi::OsString> {
        let mut arguments: Vec<std::ffi::OsString> =
            vec!["--root".into(), self.root.clone().into_os_string(), "exec".into(), "--process".into()];
        arguments.push(process_file.as_os_str().to_owned());
        arguments.push(self.container_id.clone().into());
        arguments
    }

    /// A process of the coordinator's own in the sandbox (no secret in it):
    /// its spec is written to `process_file` (0600) and the command that
    /// runs it returned.
    pub fn own_command(&self, process_file: &Path, argv: &[String]) -> Result<std::process::Command> {
        let process = self.session_process(&SessionProcess { argv, cwd: "/workspace", environment: &[] });
        crate::private_dirs::write_private(process_file, &serde_json::to_vec(&process).context("cannot encode a process spec")?)?;
        // With podman's environment, as a `podman exec` would have.
        let mut command = std::process::Command::new(&self.runsc);
        command.env_clear().envs(crate::podman::environment()).args(self.exec_arguments(process_file));
        Ok(command)
    }

    /// The `process.json` of one session: the container's process with its
    /// command, working directory and session variables, without a terminal
    /// (as `podman exec --interactive` without `--tty`).
    pub fn session_process(&self, session: &SessionProcess<'_>) -> serde_json::Value {
        let mut process = self.process.clone();
        let mut environment: Vec<String> = process
            .get("env")
            .and_then(serde_json::Value::as_array)
            .map(|values| values.iter().filter_map(|value| value.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for (name, value) in session.environment {
            let prefix = format!("{name}=");
            environment.retain(|entry| !entry.starts_with(&prefix));
            environment.push(format!("{name}={value}"));
        }
        if let Some(object) = process.as_object_mut() {
            object.insert("args".to_owned(), serde_json::json!(session.argv));
            object.insert("cwd".to_owned(), serde_json::json!(session.cwd));
            object.insert("env".to_owned(), serde_json::json!(environment));
            object.insert("terminal".to_owned(), serde_json::json!(false));
            object.remove("consoleSize");
        }
        process
    }
}

/// Removes the process-spec FIFOs that sessions of versions before the
/// inherited pipe left in `socket_dir` (a CLI killed before runsc read its
/// FIFO); only FIFOs with that name are touched.
pub fn remove_session_fifos(socket_dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(socket_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("session-") && name.ends_with(".process") && entry.file_type().is_ok_and(|kind| kind.is_fifo()) {
            crate::cleanup::remove_file(&entry.path());
        }
    }
}

impl ExecTarget {
    /// The record in `domain_dir`, whether or not its sandbox still runs.
    pub fn recorded(domain_dir: &Path) -> Option<ExecTarget> {
        serde_json::from_slice(&std::fs::read(domain_dir.join(FILE)).ok()?).ok()
    }

    /// Ends every `runsc exec` of this sandbox still running: at a start
    /// that replaces it, and at teardown once it is gone (issue 33 finding
    /// 3: a CLI killed before it wrote the process spec left `runsc exec
    /// --process <fifo>` blocked forever, reparented to PID 1, past the
    /// teardown). Only this user's processes running this runsc are looked
    /// at. Returns how many were ended.
    pub fn end_execs(&self) -> usize {
        let uid = nix::unistd::getuid().as_raw();
        let mut ended = 0;
        let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let owned = std::fs::metadata(entry.path()).is_ok_and(|metadata| std::os::unix::fs::MetadataExt::uid(&metadata) == uid);
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let words: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
            if owned && is_exec_of(&words, self) {
                tracing::warn!(pid, container = %self.container_id, "ending a runsc exec left by a session of the sandbox");
                if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).is_ok() {
                    ended += 1;
                }
            }
        }
        ended
    }
}

/// Whether a command line is `<target's runsc> ... exec ... <container id>`.
fn is_exec_of(words: &[&[u8]], target: &ExecTarget) -> bool {
    let runsc = target.runsc.as_os_str().as_encoded_bytes();
    words.first() == Some(&runsc) && words.contains(&b"exec".as_slice()) && words.contains(&target.container_id.as_bytes())
}

/// Whether `path` is a directory owned by `uid`, not a symlink, and
/// writable by nobody else.
fn is_own_private_dir(path: &Path, uid: u32) -> bool {
    is_own_private(path, uid, std::fs::FileType::is_dir)
}

/// [`is_own_private_dir`] for a regular file.
fn is_own_private_file(path: &Path, uid: u32) -> bool {
    is_own_private(path, uid, std::fs::FileType::is_file)
}

fn is_own_private(path: &Path, uid: u32, kind: fn(&std::fs::FileType) -> bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return false };
    kind(&metadata.file_type()) && metadata.uid() == uid && metadata.mode() & 0o022 == 0
}

/// The spec's `process` from runsc's state file, if the file is runsc's
/// state of `container_id`.
fn read_process(state_file: &Path, container_id: &str) -> Option<serde_json::Value> {
    let file = std::fs::File::open(state_file).ok()?;
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_STATE_BYTES), &mut text).ok()?;
    let state: serde_json::Value = serde_json::from_slice(&text).ok()?;
    if state.get("id").and_then(serde_json::Value::as_str) != Some(container_id) {
        return None;
    }
    let process = state.get("spec")?.get("process")?;
    process.is_object().then(|| process.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(process: serde_json::Value) -> ExecTarget {
        ExecTarget {
            runsc: PathBuf::from("/usr/bin/runsc"),
            root: PathBuf::from("/run/runsc"),
            state_file: PathBuf::from("/run/runsc/x.state"),
            container_id: "ab".to_owned(),
            container_name: "lazaret-x".to_owned(),
            process,
            terminal_signals: true,
        }
    }

    #[test]
    fn a_session_keeps_the_containers_settings_and_changes_only_command_directory_and_its_variables() {
        let process = serde_json::json!({
            "user": {"uid": 0, "gid": 0},
            "args": ["catatonit", "--", "sh", "-c", "seed"],
            "cwd": "/",
            "env": ["PATH=/usr/bin", "TERM=xterm", "LAZARET_SESSION_ID=old"],
            "capabilities": {"bounding": ["CAP_CHOWN"]},
            "noNewPrivileges": true,
            "terminal": true,
            "consoleSize": {"height": 1, "width": 1},
        });
        let argv = ["sh".to_owned(), "-c".to_owned(), "true".to_owned()];
        let environment = [("LAZARET_SESSION_ID".to_owned(), "new".to_owned()), ("TERM".to_owned(), "vt100".to_owned())];
        let session = target(process).session_process(&SessionProcess { argv: &argv, cwd: "/workspace", environment: &environment });
        assert_eq!(session["args"], serde_json::json!(argv));
        assert_eq!(session["cwd"], "/workspace");
        assert_eq!(session["env"], serde_json::json!(["PATH=/usr/bin", "LAZARET_SESSION_ID=new", "TERM=vt100"]));
        assert_eq!(session["capabilities"], serde_json::json!({"bounding": ["CAP_CHOWN"]}));
        assert_eq!(session["noNewPrivileges"], true);
        assert_eq!(session["user"], serde_json::json!({"uid": 0, "gid": 0}));
        assert_eq!(session["terminal"], false);
        assert!(session.get("consoleSize").is_none());
    }

    #[test]
    fn only_the_state_of_the_named_container_is_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("abc_sandbox:abc.state");
        assert!(is_own_private_dir(dir.path(), nix::unistd::geteuid().as_raw()));
        assert!(!is_own_private_dir(dir.path(), nix::unistd::geteuid().as_raw() + 1), "another user's");
        std::fs::write(&state, r#"{"id":"abc","spec":{"process":{"args":["x"]}}}"#).expect("write");
        assert_eq!(read_process(&state, "abc"), Some(serde_json::json!({"args": ["x"]})));
        assert_eq!(read_process(&state, "abd"), None);
        std::fs::write(&state, r#"{"id":"abc","spec":{}}"#).expect("write");
        assert_eq!(read_process(&state, "abc"), None);
    }

    #[test]
    fn a_record_is_read_back_only_for_its_container_while_its_state_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("ab.state");
        std::fs::write(&state, "{}").expect("write");
        let mut record = target(serde_json::json!({"args": ["x"]}));
        record.state_file = state.clone();
        record.write(dir.path()).expect("write");
        assert_eq!(ExecTarget::read(dir.path(), "lazaret-x"), Some(record));
        assert_eq!(ExecTarget::read(dir.path(), "lazaret-y"), None);
        std::fs::remove_file(&state).expect("remove");
        assert_eq!(ExecTarget::read(dir.path(), "lazaret-x"), None);
        ExecTarget::remove(dir.path());
        assert!(!dir.path().join(FILE).exists());
    }
}
