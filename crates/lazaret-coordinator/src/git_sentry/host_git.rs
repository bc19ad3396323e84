//! The host's own git, hardened (DECISIONS D3): it only ever runs in the
//! user's repository (never in one the agent can write; the one other place
//! is a domain's first checkout, built in fresh directories no sandbox has
//! seen, see `first_checkout`), with hooks,
//! fsmonitor, automatic maintenance and credential helpers disabled and
//! object checks on. Its environment carries no `GIT_*` variable.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::bail;
use crate::error::{Context, Result};

/// `-c` settings applied to every host git invocation. All but one also apply
/// to the housekeeping run ([`HostRepository::housekeeping`]).
pub(super) const HARDENING: [&str; 14] = [
    "gc.auto=0",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "maintenance.auto=false",
    "transfer.fsckObjects=true",
    "fetch.fsckObjects=true",
    "fetch.writeCommitGraph=false",
    "credential.helper=",
    "core.askPass=",
    "core.sshCommand=false",
    "protocol.ext.allow=never",
    "diff.external=",
    "core.pager=cat",
];

/// The user's repository: its working tree (the workspace) and its common
/// git directory.
#[derive(Debug, Clone)]
pub struct HostRepository {
    pub workdir: PathBuf,
    pub git_common_dir: PathBuf,
}

impl HostRepository {
    /// The repository whose top level is `workspace`, or `None` when the
    /// workspace is not a git working tree at all.
    pub fn discover(workspace: &Path) -> Result<Option<HostRepository>> {
        let output =
            host_git_command(workspace).args(["rev-parse", "--show-toplevel", "--git-common-dir"]).output().context("cannot run git")?;
        if !output.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let mut lines = text.lines();
        let (Some(toplevel), Some(common)) = (lines.next(), lines.next()) else { return Ok(None) };
        let toplevel = std::fs::canonicalize(toplevel).with_context(|| format!("cannot resolve {toplevel}"))?;
        if toplevel != workspace {
            bail!(
                "{} is inside the git repository {}, not its top level; run Lazaret on the repository's top level (--workspace {})",
                workspace.display(),
                toplevel.display(),
                toplevel.display()
            );
        }
        let common = if Path::new(common).is_absolute() { PathBuf::from(common) } else { workspace.join(common) };
        Ok(Some(HostRepository { workdir: toplevel, git_common_dir: std::fs::canonicalize(common)? }))
    }

    pub fn config_path(&self) -> PathBuf {
        self.git_common_dir.join("config")
    }

    /// A hardened host git command in this repository, for callers that need
    /// pipes or extra environment (the quarantined import).
    pub fn command(&self) -> Command {
        host_git_command(&self.workdir)
    }

    /// Runs hardened host git in this repository; fails with git's stderr.
    pub fn git(&self, arguments: &[&str]) -> Result<Output> {
        let output = host_git_command(&self.workdir)
            .args(arguments)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run git {}", arguments.join(" ")))?;
        if !output.status.success() {
            bail!("git {} failed: {}", arguments.join(" "), String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(output)
    }

    pub fn git_text(&self, arguments: &[&str]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.git(arguments)?.stdout).trim_end().to_owned())
    }

    /// `git gc --auto`, as git's own `fetch` runs it, so that the packs of
    /// accepted imports do not pile up: the user's own `gc.*` thresholds
    /// decide, in the foreground, with the rest of the hardening in force.
    pub fn housekeeping(&self) -> Result<()> {
        let mut command = host_git_command_with(&self.workdir, &HARDENING[1..]);
        let output = command
            .args(["-c", "gc.autoDetach=false", "gc", "--auto", "--quiet"])
            .stdin(Stdio::null())
            .output()
            .context("cannot run git gc")?;
        if !output.status.success() {
            bail!("git gc --auto failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(())
    }

    /// `git cat-file --batch-check=<format>`: one line of stdin per query,
    /// its stdout back (a missing object is a `<query> missing` line, not a
    /// failure).
    pub fn batch_check(&self, format: &str, queries: &[String]) -> Result<String> {
        use std::io::Write;
        let mut child = host_git_command(&self.workdir)
            .arg("cat-file")
            .arg(format!("--batch-check={format}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run git cat-file")?;
        let mut input = String::new();
        for query in queries {
            input.push_str(query);
            input.push('\n');
        }
        child.stdin.take().context("git cat-file has no stdin")?.write_all(input.as_bytes()).context("cannot write to git cat-file")?;
        let output = child.wait_with_output().context("cannot run git cat-file")?;
        if !output.status.success() {
            bail!("git cat-file --batch-check failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The commits several refs point at, with one git process (`None` for a
    /// ref that does not exist or names no commit).
    pub fn resolve_all(&self, references: &[&str]) -> Result<Vec<Option<String>>> {
        let queries: Vec<String> = references.iter().map(|reference| format!("{reference}^{{commit}}")).collect();
        let answer = self.batch_check("%(objectname) %(objecttype)", &queries)?;
        let mut lines = answer.lines();
        Ok(references
            .iter()
            .map(|_| {
                lines.next().and_then(|line| match line.split_once(' ') {
                    Some((sha, "commit")) => Some(sha.to_owned()),
                    _ => None,
                })
            })
            .collect())
    }

    /// A commit a client names by its full id (40 or 64 hex digits, as
    /// `BranchDiff` gives it): the id, when this repository has that commit.
    /// Nothing shorter is taken: a client pins what it showed (DECISIONS
    /// D16), and an agent can make a commit that shares a short prefix.
    /// The message names the value.
    pub fn commit(&self, id: &str) -> std::result::Result<String, CommitRefusal> {
        if !matches!(id.len(), 40 | 64) || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(CommitRefusal::NotAFullId(id.to_owned()));
        }
        let id = id.to_ascii_lowercase();
        match self.resolve_all(&[id.as_str()]) {
            Ok(found) if found.first().cloned().flatten().as_deref() == Some(id.as_str()) => Ok(id),
            Ok(_) => Err(CommitRefusal::NotInRepository { id, repository: self.workdir.clone() }),
            Err(error) => Err(CommitRefusal::Lookup { id, source: Box::new(error) }),
        }
    }

    /// The commit a ref points at, `None` if it does not exist (or names no
    /// commit); an error when git itself fails (not a repository, git
    /// missing), never taken for a missing ref.
    pub fn resolve(&self, reference: &str) -> Result<Option<String>> {
        let query = format!("{reference}^{{commit}}");
        let output = host_git_command(&self.workdir)
            .args(["rev-parse", "--verify", "--quiet", &query])
            .stdin(Stdio::null())
            .output()
            .context("cannot run git rev-parse")?;
        match output.status.code() {
            Some(0) => Ok(Some(String::from_utf8_lossy(&output.stdout).trim().to_owned()).filter(|sha| !sha.is_empty())),
            // `--verify --quiet`: a ref that does not exist is status 1 and says nothing.
            Some(1) if output.stderr.is_empty() => Ok(None),
            _ => bail!("git rev-parse --verify {query} failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim()),
        }
    }
}

fn host_git_command(workdir: &Path) -> Command {
    host_git_command_with(workdir, &HARDENING)
}

fn host_git_command_with(workdir: &Path, hardening: &[&str]) -> Command {
    let mut command = Command::new("git");
    command.env_clear();
    for name in ["PATH", "HOME", "USER", "LANG", "XDG_CONFIG_HOME", "TMPDIR"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.env("GIT_TERMINAL_PROMPT", "0").env("GIT_OPTIONAL_LOCKS", "0");
    command.arg("-C").arg(workdir);
    for setting in hardening {
        command.arg("-c").arg(setting);
    }
    command
}

/// Why a commit id a client named is not taken ([`HostRepository::commit`]).
#[derive(Debug, thiserror::Error)]
pub enum CommitRefusal {
    #[error("{0:?} is not a full commit id (40 or 64 hex digits)")]
    NotAFullId(String),
    #[error("commit {id} is not in the repository {}", repository.display())]
    NotInRepository { id: String, repository: std::path::PathBuf },
    #[error("cannot look up commit {id}")]
    Lookup {
        id: String,
        #[source]
        source: Box<crate::Error>,
    },
}
