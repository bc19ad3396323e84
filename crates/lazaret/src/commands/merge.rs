//! `lazaret merge`: the agent branch into the workspace's current branch,
//! pinned to one commit (DECISIONS D16). What is merged is the commit the
//! human reviewed, by its id, never the branch name: an attack review saw
//! both editors fast-forward to a commit (with an `.envrc`) the agent made
//! while their confirmation was up. Both editors run this command, so the
//! rule and D4's warnings live in one place.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use lazaret_coordinator::git_sentry::{self, agent_branch, HostRepository};
use lazaret_core::exit_status;
use lazaret_core::terminal_text;
use lazaret_protocol::BranchDiff;

use crate::cli::DomainTarget;
use crate::workspace::{load_config, resolve_target};

/// Files listed by name before the rest is counted.
const LISTED_FILES: usize = 20;

pub fn run(config_path: Option<&Path>, target: &DomainTarget, expect: Option<&str>, yes: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let host = HostRepository::discover(&resolved.workspace)?
        .with_context(|| format!("{} is not a git repository", resolved.workspace.display()))?;
    let branch = agent_branch(&resolved.profile);
    let Some(now) = host.resolve(&format!("refs/heads/{branch}"))? else {
        bail!("nothing to merge: {branch} has no commit on the host yet");
    };
    let head = match expect {
        None => now,
        Some(expected) => {
            let expected = host.commit(expected).map_err(|message| anyhow::anyhow!("--expect: {message}"))?;
            if expected != now {
                eprintln!("lazaret: {}", moved_message(&host, &branch, &expected, &now));
                return Ok(exit_status::BRANCH_MOVED);
            }
            expected
        }
    };
    let diff = git_sentry::diff::committed_at(&host, &branch, head.clone(), false)?;
    if diff.base.as_deref() == Some(head.as_str()) {
        println!("{branch} at {} is already part of your HEAD: nothing to merge", short(&head));
        return Ok(0);
    }
    print_summary(&diff, &head, &resolved.workspace);
    if !yes && !confirmed()? {
        println!("nothing merged");
        return Ok(exit_status::FAILURE);
    }
    merge(&resolved.workspace, &branch, &head)
}

fn short(commit: &str) -> &str {
    &commit[..12.min(commit.len())]
}

/// Why nothing was merged when the branch moved, with what to do.
fn moved_message(host: &HostRepository, branch: &str, expected: &str, now: &str) -> String {
    let since = host
        .git_text(&["rev-list", "--count", &format!("{expected}..{now}")])
        .ok()
        .filter(|count| count != "0")
        .map(|count| format!(" ({count} commit(s) you have not reviewed)"))
        .unwrap_or_default();
    format!(
        "{branch} moved since the review: you reviewed {}, it is now at {}{since}. Nothing was merged; review it again \
         (lazaret diff) and merge with --expect {now}",
        short(expected),
        short(now),
    )
}

/// What will be merged: the commit, its files, and first D4's warnings.
fn print_summary(diff: &BranchDiff, head: &str, workspace: &Path) {
    println!(
        "Merge {} at {} ({} file(s) since {}) into {}",
        diff.branch,
        short(head),
        diff.files.len(),
        diff.base.as_deref().map(short).unwrap_or("-"),
        workspace.display()
    );
    if !diff.warnings.is_empty() {
        println!("WARNING: {} file(s) that make hosts run code:", diff.warnings.len());
        for warning in &diff.warnings {
            println!("  ! {}  ({})", terminal_text::name(&warning.path), warning.reason);
        }
    }
    for file in diff.files.iter().take(LISTED_FILES) {
        println!("  {:<2} {}", file.status, terminal_text::name(&file.path));
    }
    if diff.files.len() > LISTED_FILES {
        println!("  … and {} more (lazaret diff --stat lists them all)", diff.files.len() - LISTED_FILES);
    }
}

fn confirmed() -> Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("refusing to merge without confirmation: pass --yes (with --expect COMMIT to pin the commit you reviewed)");
    }
    print!("Merge? [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `git merge` of the commit id in the user's own repository, as the user
/// would run it (their hooks and settings); git's output names the agent's
/// files, so it is printed escaped.
fn merge(workspace: &Path, branch: &str, head: &str) -> Result<u8> {
    let output = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["merge", "--no-edit", "-m", &format!("Merge {branch} at {}", short(head)), head])
        .stdin(Stdio::null())
        .output()
        .context("cannot run git merge")?;
    print!("{}", terminal_text::block(&String::from_utf8_lossy(&output.stdout)));
    eprint!("{}", terminal_text::block(&String::from_utf8_lossy(&output.stderr)));
    if !output.status.success() {
        eprintln!("lazaret: git merge of {branch} at {} failed ({})", short(head), output.status);
        return Ok(exit_status::FAILURE);
    }
    println!("merged {branch} at {}", short(head));
    Ok(0)
}
