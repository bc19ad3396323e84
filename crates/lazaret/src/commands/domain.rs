//! `lazaret domain`: the Domain Anchor and the resource names it derives.

use std::path::Path;

use anyhow::Result;
use lazaret_core::config::is_valid_profile_name;
use lazaret_core::domain::{DomainAnchor, DomainResources};

use crate::cli::DomainTarget;
use crate::workspace::{load_config, workspace_path};

pub fn run(config_path: Option<&Path>, target: &DomainTarget, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    // The names derive from the profile name alone, so any valid name has a
    // domain; say so when the profile is not configured (yet).
    if !config.profiles.contains_key(&target.profile) {
        if !is_valid_profile_name(&target.profile) {
            config.profile(&target.profile)?;
        }
        eprintln!("lazaret: warning: profile `{}` is not configured; showing the names it would use", target.profile);
    }
    let workspace = workspace_path(target.workspace.as_deref())?;
    let anchor = DomainAnchor::new(&target.profile, &workspace)?;
    let resources = DomainResources::new(&anchor, &config.data_root, &config.socket_root);
    if json {
        super::print_json(&resources)?;
        return Ok(0);
    }
    let rows = [
        ("domain_hash", resources.domain_hash.clone()),
        ("profile", resources.profile.clone()),
        ("workspace", resources.workspace.display().to_string()),
        ("container_name", resources.container_name.clone()),
        ("sidecar_name", resources.sidecar_name.clone()),
        ("control_socket", resources.control_socket.display().to_string()),
        ("escalation_socket", resources.escalation_socket.display().to_string()),
        ("lockfile", resources.lockfile.display().to_string()),
        ("domain_dir", resources.domain_dir.display().to_string()),
    ];
    for (name, value) in rows {
        println!("{name:<18} {value}");
    }
    Ok(0)
}

/// `lazaret domain rm`: deletes what a domain left outside this machine (a
/// cluster profile's objects: `lazaret_coordinator::backend::remove_domain`),
/// holding the domain lock so that no session starts it meanwhile.
pub fn remove(config_path: Option<&Path>, target: &DomainTarget) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = crate::workspace::resolve_target(&config, target)?;
    let domain = &resolved.domain;
    let mut lock = lazaret_coordinator::domain_lock::DomainLock::open(&domain.lockfile)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let running = runtime.block_on(crate::hold_to_bind::socket_is_live(&domain.control_socket));
    if running || !lock.try_lock()? {
        anyhow::bail!("domain {} is running: end its sessions first (lazaret status)", domain.domain_hash);
    }
    let removed = runtime.block_on(lazaret_coordinator::backend::remove_domain(&resolved));
    lock.unlock();
    let removed = removed?;
    if removed.deleted.is_empty() {
        println!("domain {}: nothing of it was on the cluster ({})", domain.domain_hash, removed.place);
    } else {
        println!("domain {}: deleted {} ({})", domain.domain_hash, removed.deleted.join(", "), removed.place);
    }
    Ok(0)
}
