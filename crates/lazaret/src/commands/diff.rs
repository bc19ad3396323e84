//! `lazaret diff`: the agent branch against its base, with the agent's
//! uncommitted changes when the sandbox runs (asked of the coordinator over
//! JSON-RPC), and D4's warnings first.

use std::path::Path;

use anyhow::{Context, Result};
use lazaret_coordinator::git_sentry::{self, agent_branch, HostRepository};
use lazaret_core::bounds;
use lazaret_core::terminal_text;
use lazaret_protocol::BranchDiff;
use lazaret_protocol::LazaretApiClient;

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

pub fn run(config_path: Option<&Path>, target: &DomainTarget, stat: bool, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let host = HostRepository::discover(&resolved.workspace)?
        .with_context(|| format!("{} is not a git repository", resolved.workspace.display()))?;
    let socket = resolved.domain.control_socket.clone();
    let with_patch = !stat;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let from_coordinator: Option<BranchDiff> = runtime.block_on(async {
        if !socket_is_live(&socket).await {
            return Ok::<_, anyhow::Error>(None);
        }
        let client = lazaret_rpc::client::connect(&socket, bounds::SLOW_CALL).await?;
        Ok(Some(lazaret_rpc::client::within("branch_diff", bounds::SLOW_CALL, client.branch_diff(Some(with_patch), None)).await?))
    })?;
    let diff = match from_coordinator {
        Some(diff) => diff,
        None => git_sentry::diff::committed(&host, &agent_branch(&resolved.profile), with_patch)?,
    };
    if json {
        super::print_json(&diff)?;
        return Ok(0);
    }
    print_text(&diff, stat);
    Ok(0)
}

fn print_text(diff: &BranchDiff, stat: bool) {
    let short = |sha: &Option<String>| sha.as_deref().map(|s| s[..12.min(s.len())].to_owned()).unwrap_or_else(|| "-".to_owned());
    match &diff.head {
        None => println!("{}: not on the host yet (no agent commit so far)", diff.branch),
        Some(_) => println!("{}: {} (started from {})", diff.branch, short(&diff.head), short(&diff.base)),
    }
    if !diff.warnings.is_empty() {
        println!();
        println!("WARNING: the agent changed files that make hosts run code; review them before merging or opening the folder:");
        for warning in &diff.warnings {
            println!("  ! {}  ({})", terminal_text::name(&warning.path), warning.reason);
        }
    }
    println!();
    let counts = |added: Option<u64>, deleted: Option<u64>| match (added, deleted) {
        (Some(a), Some(d)) => format!("+{a} -{d}"),
        _ => "binary".to_owned(),
    };
    println!("committed ({} files):", diff.files.len());
    for file in &diff.files {
        println!("  {:<2} {:<12} {}", file.status, counts(file.additions, file.deletions), terminal_text::name(&file.path));
    }
    match &diff.uncommitted {
        None => println!("uncommitted: (sandbox not running)"),
        Some(uncommitted) => {
            println!("uncommitted ({} files):", uncommitted.files.len());
            for file in &uncommitted.files {
                println!("  {:<2} {:<12} {}", file.status, counts(file.additions, file.deletions), terminal_text::name(&file.path));
            }
        }
    }
    if !stat {
        if !diff.patch.is_empty() {
            println!("\n{}", terminal_text::block(&diff.patch));
        }
        if let Some(uncommitted) = diff.uncommitted.as_ref().filter(|u| !u.patch.is_empty()) {
            println!("\n# uncommitted\n{}", terminal_text::block(&uncommitted.patch));
        }
    }
}
