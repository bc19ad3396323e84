//! `lazaret state diff|reset`: the agent's changes to the profile's
//! persistent directories (the State Anchor's upper directories).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_coordinator::state_anchor;
use lazaret_core::config::ResolvedProfile;

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

/// The resolved profile and the directories to act on; `None` (after
/// saying so) when the profile has no persistent directories.
fn target_dirs(config_path: Option<&Path>, target: &DomainTarget, dir: Option<&Path>) -> Result<Option<(ResolvedProfile, Vec<PathBuf>)>> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    if let lazaret_core::config::Backend::Kubernetes(backend) = &resolved.backend {
        bail!(
            "profile `{}` keeps its persistent directories in its Sandbox's volume claim on the cluster (namespace {}), which this \
             version cannot list or reset; `lazaret domain rm` deletes the claim with the domain",
            resolved.profile,
            backend.namespace
        );
    }
    let dirs = state_anchor::selected_dirs(&resolved.persistent_dirs, dir)?;
    if dirs.is_empty() {
        println!("profile `{}` has no persistent directories", resolved.profile);
        return Ok(None);
    }
    Ok(Some((resolved, dirs)))
}

pub fn diff(config_path: Option<&Path>, target: &DomainTarget, dir: Option<&Path>, json: bool) -> Result<u8> {
    let Some((resolved, dirs)) = target_dirs(config_path, target, dir)? else { return Ok(0) };
    let changes = state_anchor::diff(&resolved.domain.domain_dir, &resolved.image, &dirs)?;
    if json {
        // The wire form: `state/diff` answers the same.
        super::print_json(&changes.iter().map(|change| change.wire()).collect::<Vec<_>>())?;
        return Ok(0);
    }
    if changes.is_empty() {
        println!("no changes in {}", dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    for change in &changes {
        // Paths under the persistent directories are the agent's names.
        println!("{}", lazaret_core::terminal_text::block(&change.to_string()));
    }
    Ok(0)
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
    let result = state_anchor::reset(&domain.domain_dir, &dirs);
    lock.unlock();
    result?;
    println!("discarded the agent's changes in {listing}");
    Ok(0)
}
