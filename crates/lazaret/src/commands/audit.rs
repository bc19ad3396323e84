//! `lazaret audit` and `lazaret audit verify`: the escalation audit trail,
//! through the coordinator when it runs, else from the store under the
//! domain lock.

use std::path::Path;

use anyhow::Result;
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_core::bounds;
use lazaret_protocol::{AuditRecord, AuditVerification, LazaretApiClient};
use lazaret_rpc::client::Client;
use lazaret_store::Store;

use crate::cli::DomainTarget;
use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, resolve_target};

/// Runs `online` over RPC when the domain runs, else `offline` on the
/// store, opened while holding the domain lock (so no coordinator starts).
fn query<T>(
    config_path: Option<&Path>,
    target: &DomainTarget,
    online: impl AsyncFnOnce(&Client) -> Result<T, lazaret_rpc::Error>,
    offline: impl FnOnce(&Store) -> Result<T>,
) -> Result<T> {
    let config = load_config(config_path)?;
    let domain = resolve_target(&config, target)?.domain;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if let Some(result) = runtime.block_on(async {
        if !socket_is_live(&domain.control_socket).await {
            return Ok::<_, anyhow::Error>(None);
        }
        // A coordinator that ends between the look and the answer leaves the
        // store to this command: the domain lock below waits for its teardown.
        let answer = match lazaret_rpc::client::connect(&domain.control_socket, bounds::SLOW_CALL).await {
            Ok(client) => online(&client).await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(result) => Ok(Some(result)),
            Err(error) if error.connection_gone() || error.code() == Some(lazaret_protocol::error_code::SHUTTING_DOWN) => {
                tracing::debug!(%error, "the coordinator went away; reading the store");
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    })? {
        return Ok(result);
    }
    let store_path = domain.domain_dir.join(lazaret_coordinator::coordinator::STORE_FILE);
    if !store_path.exists() {
        anyhow::bail!("domain {} has no state store yet (no session has run)", domain.domain_hash);
    }
    let mut lock = DomainLock::open(&domain.lockfile)?;
    lock.lock()?;
    let result = Store::open(&store_path).map_err(anyhow::Error::from).and_then(|store| offline(&store));
    lock.unlock();
    result
}

pub fn list(config_path: Option<&Path>, target: &DomainTarget, limit: usize, json: bool) -> Result<u8> {
    let records: Vec<AuditRecord> = query(
        config_path,
        target,
        async |client: &Client| {
            // The coordinator answers in pages; walk back until `limit`.
            let mut records: Vec<AuditRecord> = Vec::new();
            while records.len() < limit {
                let before = records.first().map(|record| record.sequence);
                let page = lazaret_rpc::client::within(
                    "audit_list",
                    bounds::ORDINARY_CALL,
                    client.audit_list(Some(limit - records.len()), before),
                )
                .await?;
                if page.is_empty() {
                    break;
                }
                records.splice(0..0, page);
                if records.first().is_some_and(|record| record.sequence <= 1) {
                    break;
                }
            }
            Ok(records)
        },
        |store| Ok(store.audit_records(limit)?),
    )?;
    if json {
        super::print_json(&records)?;
        return Ok(0);
    }
    for record in &records {
        let argv = record.executed_argv.as_ref().unwrap_or(&record.requested_argv);
        let status = record.exit_status.map(|s| format!("exit {s}")).unwrap_or_default();
        println!(
            "#{:<4} {:<9} {:<14} {:<8} {}{}",
            record.sequence,
            record.outcome.as_str(),
            record
                .decided_by
                .as_ref()
                .map(|source| lazaret_core::terminal_text::name(&source.to_string()).into_owned())
                .unwrap_or_else(|| "-".to_owned()),
            status,
            lazaret_core::policy::display_command(argv),
            record.reason.as_deref().map(|reason| format!("  ({})", lazaret_core::terminal_text::name(reason))).unwrap_or_default()
        );
    }
    if records.is_empty() {
        println!("no escalation requests recorded");
    }
    Ok(0)
}

pub fn verify(config_path: Option<&Path>, target: &DomainTarget) -> Result<u8> {
    let verification: AuditVerification = query(
        config_path,
        target,
        async |client: &Client| lazaret_rpc::client::within("audit_verify", bounds::SLOW_CALL, client.audit_verify()).await,
        |store| Ok(store.verify_audit()?),
    )?;
    for note in &verification.notes {
        println!("note: {note}");
    }
    if verification.intact {
        // What this proves, and no more (docs/security.md, "The audit trail").
        println!(
            "audit trail intact: {} records, each hashing to its stored hash and linked to the one before it from the first, the last one the head kept beside the store",
            verification.records
        );
        Ok(0)
    } else {
        let at = verification.problem_at.map(|at| format!(" at record {at}")).unwrap_or_default();
        println!("audit trail BROKEN{at}: {}", verification.problem.unwrap_or_default());
        Ok(1)
    }
}
