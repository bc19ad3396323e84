//! Loading the configuration and resolving the target domain, shared by the
//! commands that work on one domain.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lazaret_core::config::{canonical_workspace, Config, ResolvedProfile};
use lazaret_core::host::RealHost;

use crate::cli::DomainTarget;

/// Loads the configuration and prints its warnings once, on stderr.
pub fn load_config(explicit: Option<&Path>) -> Result<Config> {
    let config = Config::load(explicit, &RealHost)?;
    for warning in &config.warnings {
        eprintln!("lazaret: warning: {warning}");
    }
    Ok(config)
}

/// The canonical workspace: `--workspace` or the current directory.
pub fn workspace_path(workspace: Option<&Path>) -> Result<PathBuf> {
    let path = match workspace {
        Some(path) => path.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(canonical_workspace(&path, &RealHost)?)
}

pub fn resolve_target(config: &Config, target: &DomainTarget) -> Result<ResolvedProfile> {
    let workspace = workspace_path(target.workspace.as_deref())?;
    Ok(config.resolve(&target.profile, &workspace, &RealHost)?)
}
