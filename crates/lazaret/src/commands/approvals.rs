//! Plain-terminal clients of the approval API across every running domain
//! of this user: `lazaret editor-info`, `lazaret pending`, `lazaret
//! approve|deny|edit`. Domains are found by their control sockets under the
//! socket directory (`<socket_dir>/<hash>/control.sock`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lazaret_protocol::{DomainStatus, PendingEscalation, API_VERSION};
use lazaret_rpc::client::RpcClient;

use crate::hold_to_bind::socket_is_live;
use crate::workspace::load_config;

/// The live control sockets under the configured socket directory.
async fn live_sockets(socket_root: &Path) -> Vec<PathBuf> {
    let mut sockets = Vec::new();
    let Ok(entries) = std::fs::read_dir(socket_root) else { return sockets };
    for entry in entries.flatten() {
        let socket = entry.path().join("control.sock");
        if socket_is_live(&socket).await {
            sockets.push(socket);
        }
    }
    sockets.sort();
    sockets
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub fn editor_info(config_path: Option<&Path>, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let domains: Vec<serde_json::Value> = runtime()?.block_on(async {
        let mut domains = Vec::new();
        for socket in live_sockets(&config.socket_root).await {
            let Ok((client, _)) = RpcClient::connect(&socket).await else { continue };
            if let Ok(status) = client.call::<_, DomainStatus>("domain/status", serde_json::json!({})).await {
                let mut value = serde_json::to_value(&status).unwrap_or_default();
                value["controlSocket"] = socket.display().to_string().into();
                domains.push(value);
            }
        }
        domains
    });
    let info = serde_json::json!({
        "apiVersion": API_VERSION,
        "framing": "Content-Length",
        "socketRoot": config.socket_root.display().to_string(),
        "controlSocketPattern": format!("{}/<domainHash>/control.sock", config.socket_root.display()),
        "domains": domains,
    });
    if json {
        super::print_json(&info)?;
    } else {
        println!(
            "control sockets: {}/<domainHash>/control.sock (JSON-RPC 2.0, Content-Length framing, API {API_VERSION})",
            config.socket_root.display()
        );
        for domain in &domains {
            println!(
                "  {}  {} on {}  ({})",
                domain["domainHash"].as_str().unwrap_or(""),
                domain["profile"].as_str().unwrap_or(""),
                domain["workspace"].as_str().unwrap_or(""),
                domain["controlSocket"].as_str().unwrap_or("")
            );
        }
        if domains.is_empty() {
            println!("  (no running domain)");
        }
    }
    Ok(0)
}

/// Every pending escalation of every running domain, with its socket.
/// The pending requests of every running domain, and a message for each
/// domain that could not be asked (never silently dropped: an empty list
/// must mean nothing waits, attack review finding 15).
async fn all_pending(socket_root: &Path) -> (Vec<(PathBuf, PendingEscalation)>, Vec<String>) {
    let mut pending = Vec::new();
    let mut failures = Vec::new();
    for socket in live_sockets(socket_root).await {
        let listed = match RpcClient::connect(&socket).await {
            Ok((client, _)) => client.call::<_, Vec<PendingEscalation>>("escalation/list", serde_json::json!({})).await,
            Err(error) => Err(error),
        };
        match listed {
            Ok(list) => pending.extend(list.into_iter().map(|escalation| (socket.clone(), escalation))),
            Err(error) => failures.push(format!("cannot list the pending requests of {}: {error:#}", socket.display())),
        }
    }
    (pending, failures)
}

/// Says every failure on stderr; the exit status for a listing with them.
fn report_failures(failures: &[String]) -> u8 {
    for failure in failures {
        eprintln!("lazaret: error: {failure}");
    }
    u8::from(!failures.is_empty())
}

pub fn pending(config_path: Option<&Path>, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let (pending, failures) = runtime()?.block_on(all_pending(&config.socket_root));
    if json {
        super::print_json(&pending.iter().map(|(_, escalation)| escalation).collect::<Vec<_>>())?;
        return Ok(report_failures(&failures));
    }
    if pending.is_empty() && failures.is_empty() {
        println!("no pending escalations");
    }
    for (_, escalation) in &pending {
        // The request id and the justification come from the sandbox.
        let name = lazaret_core::terminal_text::name;
        println!("{}  {} ({})  {}", name(&escalation.request_id), escalation.profile, escalation.domain_hash, name(&escalation.display));
        println!("    in {}", name(&escalation.cwd));
        if let Some(justification) = &escalation.justification {
            println!("    justification: {}", name(justification));
        }
        for note in &escalation.risk_notes {
            println!("    RISK: {}", name(note));
        }
    }
    Ok(report_failures(&failures))
}

/// Answers request `request_id` (a unique prefix is enough) in whichever
/// domain has it.
pub fn respond(
    config_path: Option<&Path>,
    request_id: &str,
    decision: &str,
    argv: Option<Vec<String>>,
    reason: Option<String>,
) -> Result<u8> {
    let config = load_config(config_path)?;
    runtime()?.block_on(async {
        let (pending, failures) = all_pending(&config.socket_root).await;
        let matching: Vec<&(PathBuf, PendingEscalation)> = pending.iter().filter(|(_, e)| e.request_id.starts_with(request_id)).collect();
        let (socket, escalation) = match matching.as_slice() {
            [one] => *one,
            [] if !failures.is_empty() => {
                bail!("no pending escalation `{request_id}` found, but some domains could not be asked: {}", failures.join("; "))
            }
            [] => bail!("no pending escalation `{request_id}` (lazaret pending lists them)"),
            _ => bail!("`{request_id}` matches {} pending escalations; give more of the id", matching.len()),
        };
        let (client, _) = RpcClient::connect(socket).await?;
        let params = serde_json::json!({ "requestId": escalation.request_id, "decision": decision, "argv": argv, "reason": reason, "client": "cli" });
        let _: bool = client.call("escalation/respond", params).await?;
        let name = lazaret_core::terminal_text::name;
        println!("{decision}: {} ({})", name(&escalation.request_id), name(&escalation.display));
        Ok(0)
    })
}
