//! `lazaret audit` and `lazaret audit verify`: the audit trail (host
//! escalations, refused connections, network changes, requests, grants and
//! refusals, credential endpoints), through the coordinator when it runs,
//! else from the store under the domain lock.

use std::path::Path;

use anyhow::Result;
use lazaret_coordinator::domain_lock::DomainLock;
use lazaret_core::bounds;
use lazaret_core::terminal_text;
use lazaret_protocol::{AuditEvent, AuditGrant, AuditRecord, AuditVerification, EntryVerdict, LazaretApiClient};
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
        println!("{}", line(record));
    }
    if records.is_empty() {
        println!("no audit records");
    }
    Ok(0)
}

/// One record on one line: its number, outcome, who decided, what it is
/// about and why. Every text that is not the CLI's own goes through
/// `terminal_text` (much of it is the agent's: argv, names, reasons).
fn line(record: &AuditRecord) -> String {
    let decided_by =
        record.decided_by.as_ref().map_or_else(|| "-".to_owned(), |source| terminal_text::name(&source.to_string()).into_owned());
    let reason = record.reason.as_deref().map(|reason| format!("  ({})", terminal_text::name(reason))).unwrap_or_default();
    format!("#{:<4} {:<18} {:<14} {}{reason}", record.sequence, record.outcome.as_str(), decided_by, what(&record.event))
}

/// A record's own fields, in words.
fn what(event: &AuditEvent) -> String {
    let name = |text: &str| terminal_text::name(text).into_owned();
    let list = |texts: &[String]| texts.iter().map(|text| name(text)).collect::<Vec<_>>().join(", ");
    let optional = |text: &Option<String>| text.as_deref().map(name);
    let left_out = |suppressed: &Option<u64>| suppressed.map(|count| format!("  (+{count} not recorded: rate limit)")).unwrap_or_default();
    match event {
        AuditEvent::Escalation(escalation) => {
            let argv = escalation.executed_argv.as_ref().unwrap_or(&escalation.requested_argv);
            let status = escalation.exit_status.map(|status| format!("exit {status}")).unwrap_or_default();
            format!("{status:<8} {}", lazaret_core::policy::display_command(argv))
        }
        AuditEvent::ConnectionRefused { connections: 1 } => "connection refused before a request (Escalation Socket)".to_owned(),
        AuditEvent::ConnectionRefused { connections } => format!("{connections} connections refused before a request (Escalation Socket)"),
        AuditEvent::DnsRefused { name: asked, record_type, refusal, suppressed } => {
            format!("dns refused  {} ({})  {refusal}{}", name(asked), name(record_type), left_out(suppressed))
        }
        AuditEvent::DnsAnswerRefused { name: asked, record_type, addresses, refusal, suppressed } => {
            format!("dns answer refused  {} ({}) -> {}  {refusal}{}", name(asked), name(record_type), list(addresses), left_out(suppressed))
        }
        AuditEvent::PolicyChanged { action, entries, private_answers } => {
            let private = private_answers.map(|answers| format!("  private answers: {answers}")).unwrap_or_default();
            format!("net {action}  {}{private}", if entries.is_empty() { "(no entries)".to_owned() } else { list(entries) })
        }
        AuditEvent::NetworkAsked { request_id, destination, record_type, service } => {
            let asked = optional(service).or_else(|| optional(record_type)).unwrap_or_default();
            format!("network asked  {} ({asked})  request {}", name(destination), name(request_id))
        }
        AuditEvent::NetworkAnswered { request_id, grant } => format!("network answered  {}  request {}", granted(grant), name(request_id)),
        AuditEvent::NetworkRequestExpired { request_id, destination, record_types, service: _ } => {
            format!("network request expired  {} ({})  request {}", name(destination), list(record_types), name(request_id))
        }
        AuditEvent::NetworkQueueFull { destination: Some(destination), record_type, service, more_refused: _ } => {
            let asked = optional(service).or_else(|| optional(record_type)).unwrap_or_default();
            format!("network queue full  {} ({asked}) refused without asking", name(destination))
        }
        AuditEvent::NetworkQueueFull { destination: None, more_refused, .. } => {
            format!("network queue full  {} more refused without asking", more_refused.unwrap_or_default())
        }
        AuditEvent::GrantExpired { grant } => format!("grant expired  {}", granted(grant)),
        AuditEvent::GrantRevoked { grant } => format!("grant revoked  {}", granted(grant)),
        AuditEvent::AutoApproveRevoked { rule_id, entry } => {
            format!("auto-approve revoked  {}{}", name(entry), optional(rule_id).map(|id| format!("  rule {id}")).unwrap_or_default())
        }
        AuditEvent::CredentialRejected { origin, status, suppressed } => {
            format!("credential rejected  {} answered {status}{}", name(origin), left_out(suppressed))
        }
        AuditEvent::CredentialWithheld { origin, method, status, part, suppressed } => {
            let status = status.map_or_else(|| "-".to_owned(), |status| status.to_string());
            format!("credential withheld  {} {} -> {status}, the key in its {part}{}", name(origin), name(method), left_out(suppressed))
        }
        AuditEvent::CredentialUse { session_id, endpoints } => {
            let used: Vec<String> = endpoints
                .iter()
                .map(|used| {
                    format!(
                        "{}: 1xx={} 2xx={} 3xx={} 4xx={} 5xx={} rejected={} failed={} sent={}B received={}B withheld={}",
                        name(&used.origin),
                        used.status_1xx,
                        used.status_2xx,
                        used.status_3xx,
                        used.status_4xx,
                        used.status_5xx,
                        used.rejected,
                        used.failed,
                        used.bytes_sent,
                        used.bytes_received,
                        used.withheld
                    )
                })
                .collect();
            format!("credential use  session {}  {}", name(session_id), used.join("; "))
        }
        AuditEvent::Legacy(legacy) => {
            format!(
                "legacy (layout v4)  {}",
                lazaret_core::policy::display_command(legacy.executed_argv.as_ref().unwrap_or(&legacy.requested_argv))
            )
        }
    }
}

/// A grant in words: `allow grant.test for 15 min`, `deny 10.9.0.7/32 tcp/8081 for this session`.
fn granted(grant: &AuditGrant) -> String {
    let verdict = match grant.verdict {
        EntryVerdict::Allow => "allow",
        EntryVerdict::Deny => "deny",
    };
    let service = match (&grant.service, grant.every_port) {
        (Some(service), _) => format!(" {}", terminal_text::name(service)),
        (None, true) => " (every protocol and port)".to_owned(),
        (None, false) => String::new(),
    };
    let id = grant.id.as_deref().map(|id| format!("  grant {}", terminal_text::name(id))).unwrap_or_default();
    format!("{verdict} {}{service} for {}{id}", terminal_text::name(&grant.destination), grant.scope)
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

#[cfg(test)]
mod tests {
    use lazaret_protocol::sidecar::DnsRefusal;
    use lazaret_protocol::{AuditEvent, AuditGrant, AuditRecord, DecisionSource, EntryVerdict, EscalationAudit, GrantScope, Outcome};

    use super::line;

    fn record(event: AuditEvent, outcome: Outcome, reason: Option<&str>) -> AuditRecord {
        let mut record = AuditRecord::at(1, event, outcome, DecisionSource::NetworkSidecar, reason.map(str::to_owned));
        record.sequence = 7;
        record
    }

    #[test]
    fn each_kind_reads_as_words_and_the_agents_text_stays_inert() {
        let refused = AuditEvent::DnsRefused {
            name: "evil.example".into(),
            record_type: "TXT".into(),
            refusal: DnsRefusal::RecordType,
            suppressed: Some(2),
        };
        assert_eq!(
            line(&record(refused, Outcome::DnsRefused, Some("record type TXT is not served (only A and AAAA)"))),
            "#7    dnsRefused         networkSidecar dns refused  evil.example (TXT)  recordType  (+2 not recorded: rate limit)  (record type TXT is not served (only A and AAAA))"
        );
        let grant = AuditGrant {
            id: Some("grant-3f9a1e2f44d0".into()),
            destination: "10.9.0.7/32".into(),
            service: Some("tcp/8081".into()),
            every_port: false,
            verdict: EntryVerdict::Allow,
            scope: GrantScope::Minutes { minutes: 15 },
        };
        let answered = AuditEvent::NetworkAnswered { request_id: "net-5d0c8b3f9a1e2f44".into(), grant };
        assert_eq!(
            line(&record(answered, Outcome::NetworkGranted, None)),
            "#7    networkGranted     networkSidecar network answered  allow 10.9.0.7/32 tcp/8081 for 15 min  grant grant-3f9a1e2f44d0  request net-5d0c8b3f9a1e2f44"
        );
        let mut escalation = EscalationAudit::request("r", "s");
        escalation.requested_argv = vec!["touch".into(), "x\u{1b}[2J".into()];
        escalation.exit_status = Some(0);
        let hostile = [
            record(AuditEvent::Escalation(escalation), Outcome::Auto, Some("why\u{1b}[1A")),
            record(
                AuditEvent::DnsRefused {
                    name: "a\u{1b}]0;title\u{7}.test".into(),
                    record_type: "A".into(),
                    refusal: DnsRefusal::BadCharacters,
                    suppressed: None,
                },
                Outcome::DnsRefused,
                None,
            ),
            record(AuditEvent::AutoApproveRevoked { rule_id: None, entry: "rm \u{202e}*".into() }, Outcome::NetworkRevoked, None),
        ];
        for record in hostile {
            let shown = line(&record);
            assert!(!shown.chars().any(lazaret_core::terminal_text::is_unsafe), "{shown:?}");
        }
    }
}
