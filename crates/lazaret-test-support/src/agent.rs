//! [`agent`]: `lazaret run --workspace W [--profile P] -- sh -c SCRIPT`,
//! the one way the suites run an agent.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::{stderr, stdout, Result, TestEnv};

/// An agent session to run in `workspace` with `env`'s configuration.
pub struct Agent<'a> {
    env: &'a TestEnv,
    workspace: PathBuf,
    profile: Option<String>,
    variables: Vec<(OsString, OsString)>,
}

/// An agent of the default profile in `workspace`; see [`Agent`].
pub fn agent<'a>(env: &'a TestEnv, workspace: &Path) -> Agent<'a> {
    Agent { env, workspace: workspace.to_path_buf(), profile: None, variables: Vec::new() }
}

impl Agent<'_> {
    /// Runs under `profile` instead of the default one.
    pub fn profile(mut self, profile: &str) -> Self {
        self.profile = Some(profile.to_owned());
        self
    }

    /// Sets an environment variable of the `lazaret` process.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.variables.push((key.into(), value.into()));
        self
    }

    /// The command, not started.
    pub fn command(&self, script: &str) -> Command {
        let mut command = self.env.lazaret();
        command.envs(self.variables.iter().map(|(key, value)| (key, value)));
        command.arg("run");
        if let Some(profile) = &self.profile {
            command.args(["--profile", profile]);
        }
        command.arg("--workspace").arg(&self.workspace).args(["--", "sh", "-c", script]);
        command
    }

    /// Runs the session to its end, whatever its exit status.
    pub fn output(&self, script: &str) -> Output {
        self.command(script).output().expect("spawn lazaret run")
    }

    /// Runs the session to its end; its stdout, or an error that names the
    /// script and carries both outputs when it failed.
    pub fn run_ok(&self, script: &str) -> Result<String> {
        let output = self.command(script).output()?;
        if output.status.success() {
            Ok(stdout(&output))
        } else {
            Err(format!("lazaret run -- sh -c {script:?}: {}\n{}{}", output.status, stdout(&output), stderr(&output)).into())
        }
    }

    /// Runs the session to its end and panics (with both outputs) unless
    /// it succeeded.
    pub fn run(&self, script: &str) -> Output {
        let output = self.output(script);
        assert!(output.status.success(), "lazaret run -- sh -c {script:?}: {}{}", stdout(&output), stderr(&output));
        output
    }

    /// Like [`Agent::run`], returning stdout.
    pub fn stdout(&self, script: &str) -> String {
        stdout(&self.run(script))
    }

    /// Starts the session in the background, stdout and stderr piped.
    pub fn spawn(&self, script: &str) -> Child {
        self.command(script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn lazaret run")
    }
}
