//! `lazaret config check|show|path`.

use std::path::Path;

use anyhow::Result;
use lazaret_core::config::{default_config_path, Config, ConfigSource, ResolvedProfile};
use lazaret_core::host::RealHost;
use lazaret_core::Error;

use crate::cli::DomainTarget;
use crate::workspace::{load_config, resolve_target, workspace_path};

pub fn path(config_path: Option<&Path>) -> Result<u8> {
    let path = match config_path {
        Some(path) => path.to_path_buf(),
        None => default_config_path(&RealHost)?,
    };
    println!("{}", path.display());
    Ok(0)
}

/// Loads the file, then resolves every profile against the workspace so that
/// problems only visible after expansion (`env:` pulls, `..`, reserved
/// container paths) are reported too. All problems are printed at once.
pub fn check(config_path: Option<&Path>, workspace: Option<&Path>) -> Result<u8> {
    let config = load_config(config_path)?;
    let workspace = workspace_path(workspace)?;
    let mut diagnostics = Vec::new();
    for name in config.profiles.keys() {
        if let Err(error) = config.resolve(name, &workspace, &RealHost) {
            match error {
                Error::Config(found) => diagnostics.extend(found),
                other => return Err(other.into()),
            }
        }
    }
    if !diagnostics.is_empty() {
        return Err(Error::Config(diagnostics).into());
    }
    let source = describe_source(&config);
    println!("ok: {source}: {} profile(s): {}", config.profiles.len(), config.profiles.keys().cloned().collect::<Vec<_>>().join(", "));
    Ok(0)
}

pub fn show(config_path: Option<&Path>, target: &DomainTarget, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let mut resolved = resolve_target(&config, target)?;
    redact_host_values(&mut resolved);
    if json {
        let mut value = serde_json::to_value(&resolved)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("config_source".into(), serde_json::Value::String(describe_source(&config)));
            object.insert("socket_root".into(), serde_json::Value::String(config.socket_root.display().to_string()));
            object.insert(
                "auto_approve".into(),
                serde_json::Value::Array(
                    config
                        .auto_approve
                        .iter()
                        .chain(config.profile(&resolved.profile).map(|profile| profile.auto_approve.as_slice()).unwrap_or_default())
                        .map(|entry| entry.value.clone().into())
                        .collect(),
                ),
            );
            object.insert("network_grants".into(), serde_json::to_value(kept_grants(&resolved)?)?);
        }
        super::print_json(&value)?;
        return Ok(0);
    }
    println!("# {}", describe_source(&config));
    println!("profile          {}", resolved.profile);
    println!("image            {}", resolved.image);
    println!("backend          {}", resolved.backend.describe());
    println!("workspace        {}", resolved.workspace.display());
    println!("domain_hash      {}", resolved.domain.domain_hash);
    println!("data_root        {}", resolved.data_root.display());
    println!("profile_dir      {}", resolved.profile_dir.display());
    println!("domain_dir       {}", resolved.domain.domain_dir.display());
    println!("socket_dir       {}", resolved.domain.socket_dir.display());
    println!("escalation       {}", if resolved.escalation_enabled { "enabled" } else { "disabled" });
    if !resolved.command.is_empty() {
        println!("command          {}", shell_words::join(&resolved.command));
    }
    let profile_auto_approve = config.profile(&resolved.profile).map(|profile| profile.auto_approve.clone()).unwrap_or_default();
    for entry in config.auto_approve.iter().chain(&profile_auto_approve) {
        println!("auto_approve     {}", entry.value);
    }
    for dir in &resolved.persistent_dirs {
        println!("persistent_dir   {}", dir.display());
    }
    if resolved.allow_egress.is_empty() && !resolved.ask {
        println!("allow_egress     (none: no network egress)");
    }
    for rule in &resolved.allow_egress {
        println!("allow_egress     {rule}");
    }
    if resolved.ask {
        println!("ask              on: a name on no allow entry is held {} s and asked about", resolved.ask_hold_seconds);
    }
    for grant in kept_grants(&resolved)? {
        let verdict = match grant.verdict {
            lazaret_protocol::EntryVerdict::Allow => "allow",
            lazaret_protocol::EntryVerdict::Deny => "deny",
        };
        let name = lazaret_core::terminal_text::name;
        println!(
            "network_grant    {verdict} {} for the profile, by {} ({})",
            name(&grant.destination),
            name(&grant.decided_by.to_string()),
            grant.id
        );
    }
    if !resolved.allow_egress.is_empty() || resolved.ask {
        let upstreams: Vec<String> = resolved.dns_upstream.iter().map(ToString::to_string).collect();
        let upstreams = if upstreams.is_empty() { "(podman's nameservers for the sidecar)".to_owned() } else { upstreams.join(" ") };
        println!("dns_upstream     {upstreams}");
        println!("private_answers  {}", resolved.private_answers);
    }
    for (key, value) in &resolved.env {
        println!("env              {key}={}", value.value);
    }
    for credential in &resolved.credentials {
        let scheme = if credential.bearer { " (Bearer)" } else { "" };
        println!(
            "credential       {} at {}: {}{scheme} from {} (the key is read at start and kept by the Network Sidecar only)",
            credential.origin,
            credential.endpoint_url(),
            credential.header,
            credential.source
        );
    }
    for volume in &resolved.volumes {
        let missing = if volume.host_exists { "" } else { "  (host path does not exist yet)" };
        println!("volume           {}{missing}", volume.podman_argument());
    }
    Ok(0)
}

fn describe_source(config: &Config) -> String {
    match &config.source {
        ConfigSource::File(path) => format!("configuration {}", path.display()),
        ConfigSource::BuiltIn { looked_at } => format!("built-in defaults (no file at {})", looked_at.display()),
    }
}

/// Values pulled from host variables never reach the terminal.
fn redact_host_values(resolved: &mut ResolvedProfile) {
    for value in resolved.env.values_mut() {
        if let Some(variable) = &value.from_host {
            value.value = format!("<redacted: from host ${variable}>");
        }
    }
}

/// The network grants kept for the profile in the domain's Domain Root
/// (answers to network requests "for the profile"); none before the first.
fn kept_grants(resolved: &lazaret_core::config::ResolvedProfile) -> Result<Vec<lazaret_protocol::NetworkGrant>> {
    let path = lazaret_coordinator::network_requests::profile_file::path(&resolved.domain.domain_dir);
    lazaret_coordinator::network_requests::profile_file::read(&path).map_err(anyhow::Error::msg)
}
