//! `lazaret net show|allow|deny|reload`: the running domain's egress policy,
//! over JSON-RPC (the coordinator forwards to the Network Sidecar).

use std::path::Path;

use anyhow::{bail, Result};
use lazaret_core::bounds;
use lazaret_protocol::{LazaretApiClient, NetworkPolicy};

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

/// What to do with the policy.
pub enum Change {
    Show,
    Allow(String),
    Deny(String),
    Reload,
}

pub fn call(config_path: Option<&Path>, target: &DomainTarget, change: Change, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let domain = resolve_target(&config, target)?.domain;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let policy: NetworkPolicy = runtime.block_on(async {
        if !socket_is_live(&domain.control_socket).await {
            bail!(
                "domain {} is not running; the policy applies to a running sandbox (configure allow_egress for the next start)",
                domain.domain_hash
            );
        }
        let client = lazaret_rpc::client::connect(&domain.control_socket, bounds::ORDINARY_CALL).await?;
        let bound = bounds::ORDINARY_CALL;
        let answer = match change {
            Change::Show => lazaret_rpc::client::within("network_show", bound, client.network_show()).await,
            Change::Allow(rule) => lazaret_rpc::client::within("network_allow", bound, client.network_allow(rule)).await,
            Change::Deny(rule) => lazaret_rpc::client::within("network_deny", bound, client.network_deny(rule)).await,
            Change::Reload => lazaret_rpc::client::within("network_reload", bound, client.network_reload()).await,
        };
        Ok(answer?)
    })?;
    if json {
        super::print_json(&policy)?;
        return Ok(0);
    }
    println!("allow:     {}", policy.allow.join(", "));
    println!("deny:      {}", policy.deny.join(", "));
    println!("upstreams: {}", policy.upstreams.join(", "));
    println!("private answers: {}", policy.private_answers);
    for learned in &policy.learned {
        println!(
            "learned:   {} ({}; {} s left)",
            learned.address,
            lazaret_core::terminal_text::name(&learned.names.join(", ")),
            learned.expires_in_seconds
        );
    }
    for endpoint in &policy.credentials {
        let answered = endpoint.status_1xx + endpoint.status_2xx + endpoint.status_3xx + endpoint.status_4xx + endpoint.status_5xx;
        println!(
            "credential: {} at http://127.0.0.1:{} (the sidecar adds {}; {answered} requests: {} 2xx, {} 4xx, {} 5xx, {} refused keys, {} failed)",
            endpoint.origin,
            endpoint.port,
            endpoint.header,
            endpoint.status_2xx,
            endpoint.status_4xx,
            endpoint.status_5xx,
            endpoint.rejected,
            endpoint.failed
        );
    }
    Ok(0)
}
