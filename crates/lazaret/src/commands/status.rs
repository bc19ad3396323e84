//! `lazaret status` and `lazaret sessions`: clients of the coordinator's
//! JSON-RPC API. Nothing here opens the state store while a coordinator
//! runs; with none running, `sessions` opens it under the domain lock.

use std::path::Path;

use anyhow::{Context, Result};
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_core::bounds;
use lazaret_protocol::LazaretApiClient;
use lazaret_protocol::{CompletedSession, DomainStatus, StatusReport};
use lazaret_store::Store;

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

pub fn status(config_path: Option<&Path>, target: &DomainTarget, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let socket = resolved.domain.control_socket.clone();
    let status: Option<DomainStatus> = runtime()?.block_on(async {
        if !socket_is_live(&socket).await {
            return Ok::<_, anyhow::Error>(None);
        }
        let client = lazaret_rpc::client::connect(&socket, bounds::ORDINARY_CALL).await?;
        Ok(Some(lazaret_rpc::client::within("domain_status", bounds::ORDINARY_CALL, client.domain_status()).await?))
    })?;
    match (status, json) {
        (status, true) => {
            super::print_json(&StatusReport { running: status.is_some(), domain_hash: resolved.domain.domain_hash.clone(), status })?
        }
        (None, false) => {
            println!("domain {} ({} on {}): not running", resolved.domain.domain_hash, resolved.profile, resolved.workspace.display())
        }
        (Some(status), false) => {
            println!("domain      {} ({} on {})", status.domain_hash, status.profile, status.workspace);
            println!("container   {} ({:?})", status.container_name, status.container_state);
            if let Some(error) = &status.container_error {
                println!("error       {error}");
            }
            println!("image       {}", status.image);
            if let Some(error) = &status.network_error {
                println!("network     NONE: {}", lazaret_core::terminal_text::name(error));
            }
            println!("coordinator pid {}", status.coordinator_pid);
            println!("sessions    {}", status.sessions.len());
            for session in &status.sessions {
                println!(
                    "  {}  pid {:<7} {:<6} {}",
                    &session.session_id[..12.min(session.session_id.len())],
                    session.pid,
                    lazaret_core::terminal_text::name(&session.client),
                    lazaret_core::policy::display_command(&session.command)
                );
            }
        }
    }
    Ok(0)
}

pub fn sessions(config_path: Option<&Path>, target: &DomainTarget, limit: usize, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let domain = resolved.domain.clone();
    let sessions: Vec<CompletedSession> = runtime()?.block_on(async {
        if socket_is_live(&domain.control_socket).await {
            let client = lazaret_rpc::client::connect(&domain.control_socket, bounds::ORDINARY_CALL).await?;
            return Ok::<_, anyhow::Error>(
                lazaret_rpc::client::within("session_list", bounds::ORDINARY_CALL, client.session_list(Some(limit))).await?,
            );
        }
        // No coordinator: hold the domain lock (so none can start meanwhile)
        // and read the store ourselves.
        let store_path = domain.domain_dir.join(lazaret_coordinator::coordinator::STORE_FILE);
        if !store_path.exists() {
            return Ok(Vec::new());
        }
        let mut lock = DomainLock::open(&domain.lockfile)?;
        lock.lock()?;
        let records = Store::open(&store_path).and_then(|store| store.sessions(limit));
        lock.unlock();
        Ok(records?)
    })?;
    if json {
        super::print_json(&sessions)?;
        return Ok(0);
    }
    if sessions.is_empty() {
        println!("no completed sessions in domain {}", domain.domain_hash);
    }
    for session in &sessions {
        let status = session.exit_status.map(|s| s.to_string()).unwrap_or_else(|| "-".to_owned());
        let seconds = session.ended_at_ms.saturating_sub(session.started_at_ms) as f64 / 1000.0;
        println!(
            "{}  {:>7.1}s  exit {:<4} {:<12} {}",
            &session.session_id[..12.min(session.session_id.len())],
            seconds,
            status,
            lazaret_core::terminal_text::name(&session.end_reason),
            lazaret_core::policy::display_command(&session.command)
        );
    }
    Ok(0)
}
