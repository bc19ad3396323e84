//! `lazaret net show|allow|deny|reload`: the running domain's egress policy,
//! over JSON-RPC (the coordinator forwards to the Network Sidecar).

use std::path::Path;

use anyhow::{bail, Result};
use lazaret_rpc::client::RpcClient;

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

pub fn call(config_path: Option<&Path>, target: &DomainTarget, method: &str, params: serde_json::Value, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let domain = resolve_target(&config, target)?.domain;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let answer: serde_json::Value = runtime.block_on(async {
        if !socket_is_live(&domain.control_socket).await {
            bail!(
                "domain {} is not running; the policy applies to a running sandbox (configure allow_egress for the next start)",
                domain.domain_hash
            );
        }
        let (client, _) = RpcClient::connect(&domain.control_socket).await?;
        Ok(client.call(method, params).await?)
    })?;
    let list = |key: &str| {
        answer[key].as_array().map(|items| items.iter().filter_map(|item| item.as_str()).collect::<Vec<_>>().join(", ")).unwrap_or_default()
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(0);
    }
    println!("allow:     {}", list("allow"));
    println!("deny:      {}", list("deny"));
    println!("upstreams: {}", list("upstreams"));
    for learned in answer["learned"].as_array().into_iter().flatten() {
        let names = learned["names"].as_array().map(|names| names.iter().filter_map(|name| name.as_str()).collect::<Vec<_>>().join(", "));
        println!(
            "learned:   {} ({}; {} s left)",
            learned["address"].as_str().unwrap_or_default(),
            lazaret_core::terminal_text::name(&names.unwrap_or_default()),
            learned["expiresInSeconds"]
        );
    }
    Ok(0)
}
