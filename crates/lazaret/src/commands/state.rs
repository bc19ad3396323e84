//! `lazaret state diff|reset`: the agent's changes to the profile's
//! persistent directories (the State Anchor's upper directories; on a
//! cluster, its `Sandbox`'s volume claim, listed by the coordinator:
//! `lazaret_coordinator::state_anchor::pod`). What differs between the two
//! is `lazaret_coordinator::backend`'s.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_coordinator::state_anchor;
use lazaret_core::bounds;
use lazaret_core::config::ResolvedProfile;
use lazaret_protocol::{LazaretApiClient, StateChange};

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

/// The resolved profile and the directories to act on; `None` (after
/// saying so) when the profile has no persistent directories.
fn target_dirs(config_path: Option<&Path>, target: &DomainTarget, dir: Option<&Path>) -> Result<Option<(ResolvedProfile, Vec<PathBuf>)>> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let dirs = state_anchor::selected_dirs(&resolved.persistent_dirs, dir)?;
    if dirs.is_empty() {
        println!("profile `{}` has no persistent directories", resolved.profile);
        return Ok(None);
    }
    Ok(Some((resolved, dirs)))
}

pub fn diff(config_path: Option<&Path>, target: &DomainTarget, dir: Option<&Path>, json: bool) -> Result<u8> {
    let Some((resolved, dirs)) = target_dirs(config_path, target, dir)? else { return Ok(0) };
    let changes = state_diff(&resolved, &dirs, dir)?;
    if json {
        // The wire form: `state/diff` answers the same.
        super::print_json(&changes)?;
        return Ok(0);
    }
    if changes.is_empty() {
        println!("no changes in {}", dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    for change in &changes {
        // Paths under the persistent directories are the agent's names.
        println!("{}", lazaret_core::terminal_text::block(&format!("{:<2} {}", change.kind.code(), change.path)));
    }
    Ok(0)
}

/// The domain's coordinator's `state/diff` while it runs (a pod's listing
/// now), else what this machine keeps (`backend::state_diff_kept`): one
/// implementation, whatever the backend.
fn state_diff(resolved: &ResolvedProfile, dirs: &[PathBuf], dir: Option<&Path>) -> Result<Vec<StateChange>> {
    let domain = &resolved.domain;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let wire = runtime.block_on(async {
        if !socket_is_live(&domain.control_socket).await {
            return Ok::<_, anyhow::Error>(None);
        }
        let client = lazaret_rpc::client::connect(&domain.control_socket, bounds::ORDINARY_CALL).await?;
        let dir = dir.map(|dir| dir.display().to_string());
        // A listing of a large directory in a pod takes a while.
        let bound = state_anchor::pod::LISTING_TIME + bounds::ORDINARY_CALL;
        Ok(Some(lazaret_rpc::client::within("state_diff", bound, client.state_diff(dir)).await?))
    })?;
    match wire {
        Some(wire) => Ok(wire),
        None => Ok(lazaret_coordinator::backend::state_diff_kept(resolved, dirs)?.iter().map(|change| change.wire()).collect()),
    }
}

pub fn reset(config_path: Option<&Path>, target: &DomainTarget, dir: Option<&Path>, yes: bool) -> Result<u8> {
    let Some((resolved, dirs)) = target_dirs(config_path, target, dir)? else { return Ok(0) };
    let domain = &resolved.domain;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Under the domain lock, so that no coordinator starts while we delete.
    let mut lock = DomainLock::open(&domain.lockfile)?;
    lock.lock()?;
    if runtime.block_on(socket_is_live(&domain.control_socket)) {
        lock.unlock();
        bail!("domain {} is running; end its sessions first (lazaret status shows them)", domain.domain_hash);
    }
    let listing = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    if !yes {
        if !std::io::stdin().is_terminal() {
            lock.unlock();
            bail!("refusing to discard the agent's changes in {listing} without confirmation; pass --yes");
        }
        print!("Discard everything the agent changed in {listing} (domain {})? [y/N] ", domain.domain_hash);
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            lock.unlock();
            println!("nothing discarded");
            return Ok(1);
        }
    }
    let result = lazaret_coordinator::backend::state_reset(&resolved, &dirs);
    lock.unlock();
    let then = result?;
    println!("discarded the agent's changes in {listing}{then}");
    Ok(0)
}
