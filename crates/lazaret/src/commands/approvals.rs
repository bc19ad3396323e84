//! Plain-terminal clients of the approval API across every running domain
//! of this user: `lazaret editor-info`, `lazaret pending`, `lazaret
//! approve|deny|edit` (host commands and network requests), `lazaret
//! rules [revoke ID]`. Domains are found by their control sockets under the
//! socket directory (`<socket_dir>/<hash>/control.sock`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lazaret_core::bounds;
use lazaret_core::config::DEFAULT_PROFILE;
use lazaret_core::domain::{DomainAnchor, DomainResources};
use lazaret_protocol::{
    Decision, EditorInfo, EntryVerdict, FolderDomain, GrantScope, LazaretApiClient, NetworkDecision, PendingItem, Rules, RunningDomain,
    API_VERSION,
};

use crate::cli::ScopeArguments;

use crate::hold_to_bind::socket_is_live;
use crate::workspace::{load_config, workspace_path};

/// The live control sockets under the configured socket directory.
async fn live_sockets(socket_root: &Path) -> Vec<PathBuf> {
    let mut sockets = Vec::new();
    let Ok(entries) = std::fs::read_dir(socket_root) else { return sockets };
    for entry in entries.flatten() {
        let socket = entry.path().join(lazaret_protocol::socket::CONTROL_SOCKET_FILE);
        if socket_is_live(&socket).await {
            sockets.push(socket);
        }
    }
    sockets.sort();
    sockets
}

/// Characters of a command or justification `lazaret pending` prints
/// before it cuts (without --full).
const SHOWN_CHARACTERS: usize = 300;

/// Asks every domain at `sockets` at once, each for at most
/// [`bounds::DOMAIN_ANSWER`]: an editor's discovery
/// and `lazaret pending` must not wait on one stuck domain, nor one domain
/// after another. `call` names the client method `ask` calls, for the error
/// of a domain that does not answer. Answers come sorted by socket.
async fn ask_every_domain<T, Answer>(
    sockets: Vec<PathBuf>,
    call: &'static str,
    ask: fn(lazaret_rpc::client::Client) -> Answer,
) -> Vec<(PathBuf, Result<T>)>
where
    T: Send + 'static,
    Answer: std::future::Future<Output = Result<T, lazaret_rpc::client::CallError>> + Send + 'static,
{
    let mut asked = tokio::task::JoinSet::new();
    for socket in sockets {
        asked.spawn(async move {
            let answer = async {
                let client = lazaret_rpc::client::connect(&socket, bounds::DOMAIN_ANSWER).await?;
                lazaret_rpc::client::within(call, bounds::DOMAIN_ANSWER, ask(client)).await
            }
            .await
            .map_err(anyhow::Error::from);
            let domain = socket.parent().and_then(Path::file_name).map(|hash| hash.to_string_lossy().into_owned()).unwrap_or_default();
            (socket, answer.map_err(|error: anyhow::Error| error.context(format!("domain {domain}"))))
        });
    }
    let mut answers = asked.join_all().await;
    answers.sort_by(|(one, _), (other, _)| one.cmp(other));
    answers
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub fn editor_info(config_path: Option<&Path>, json: bool, workspaces: &[PathBuf]) -> Result<u8> {
    let config = load_config(config_path)?;
    let mut folders = Vec::new();
    for workspace in workspaces {
        let workspace = workspace_path(Some(workspace))?;
        let anchor = DomainAnchor::new(DEFAULT_PROFILE, &workspace)?;
        let resources = DomainResources::new(&anchor, &config.data_root, &config.socket_root);
        folders.push(FolderDomain {
            workspace: workspace.display().to_string(),
            profile: DEFAULT_PROFILE.to_owned(),
            domain_hash: resources.domain_hash.clone(),
            control_socket: resources.control_socket.display().to_string(),
            running: false,
        });
    }
    let domains: Vec<RunningDomain> = runtime()?.block_on(async {
        for folder in &mut folders {
            folder.running = socket_is_live(Path::new(&folder.control_socket)).await;
        }
        let mut domains = Vec::new();
        let sockets = live_sockets(&config.socket_root).await;
        // A domain that does not answer is left out (the editors connect
        // to every control socket themselves and show its failure).
        for (socket, status) in ask_every_domain(sockets, "domain_status", |client| async move { client.domain_status().await }).await {
            match status {
                Ok(status) => domains.push(RunningDomain { control_socket: socket.display().to_string(), status }),
                Err(error) => tracing::warn!("{error:#}"),
            }
        }
        domains
    });
    let info = EditorInfo {
        api_version: API_VERSION,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        framing: lazaret_protocol::socket::FRAMING.to_owned(),
        socket_root: config.socket_root.display().to_string(),
        control_socket_pattern: format!("{}/<domainHash>/{}", config.socket_root.display(), lazaret_protocol::socket::CONTROL_SOCKET_FILE),
        default_profile: DEFAULT_PROFILE.to_owned(),
        profiles: config.profiles.keys().cloned().collect(),
        domains,
        folders,
    };
    if json {
        super::print_json(&info)?;
        return Ok(0);
    }
    println!("control sockets: {} (JSON-RPC 2.0, {} framing, API {API_VERSION})", info.control_socket_pattern, info.framing);
    for domain in &info.domains {
        println!("  {}  {} on {}  ({})", domain.status.domain_hash, domain.status.profile, domain.status.workspace, domain.control_socket);
    }
    if info.domains.is_empty() {
        println!("  (no running domain)");
    }
    for folder in &info.folders {
        let state = if folder.running { "running" } else { "not running" };
        println!("folder {}: domain {} ({state}) at {}", folder.workspace, folder.domain_hash, folder.control_socket);
    }
    Ok(0)
}

/// What waits for a human in every running domain, with its socket, and a
/// message for each domain that could not be asked (never silently
/// dropped: an empty list must mean nothing waits, attack review finding 15).
async fn all_pending(socket_root: &Path) -> (Vec<(PathBuf, PendingItem)>, Vec<String>) {
    let mut pending = Vec::new();
    let mut failures = Vec::new();
    let sockets = live_sockets(socket_root).await;
    for (socket, listed) in ask_every_domain(sockets, "pending_list", |client| async move { client.pending_list().await }).await {
        match listed {
            Ok(list) => pending.extend(list.into_iter().map(|item| (socket.clone(), item))),
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

pub fn pending(config_path: Option<&Path>, json: bool, full: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let (pending, failures) = runtime()?.block_on(all_pending(&config.socket_root));
    if json {
        super::print_json(&pending.iter().map(|(_, item)| item).collect::<Vec<_>>())?;
        return Ok(report_failures(&failures));
    }
    if pending.is_empty() && failures.is_empty() {
        println!("nothing is pending");
    }
    // The agent's text, escaped and (without --full) cut after its start;
    // `cut` remembers whether anything was.
    let mut cut = false;
    let mut shown = |text: &str| -> String {
        let safe = lazaret_core::terminal_text::name(text);
        let start = lazaret_core::terminal_text::cut(&safe, if full { usize::MAX } else { SHOWN_CHARACTERS });
        cut |= start.len() != safe.len();
        start.into_owned()
    };
    let name = lazaret_core::terminal_text::name;
    for (_, item) in &pending {
        match item {
            PendingItem::Command(escalation) => {
                // The command first: its start is what a reader must see.
                let command = shown(&escalation.display);
                let justification = escalation.justification.as_deref().map(&mut shown);
                println!("{}  {} ({})  {}", name(&escalation.request_id), escalation.profile, escalation.domain_hash, command);
                println!("    in {}", name(&escalation.cwd));
                if let Some(justification) = justification {
                    println!("    justification: {justification}");
                }
                for note in &escalation.risk_notes {
                    println!("    RISK: {}", name(note));
                }
            }
            PendingItem::Network(request) => {
                // A name is cut in the middle: its end decides who controls it (D19).
                let safe = name(&request.destination);
                let destination =
                    if full { safe } else { lazaret_core::terminal_text::cut_middle(&safe, SHOWN_CHARACTERS).into_owned().into() };
                let types = request.record_types.iter().map(|kind| name(kind)).collect::<Vec<_>>().join(", ");
                println!("{}  {} ({})  network: {destination} ({types})", name(&request.request_id), request.profile, request.domain_hash);
                if request.repeats > 0 {
                    println!("    asked {} more times", request.repeats);
                }
                match &request.service {
                    Some(service) => {
                        println!(
                            "    approve opens {} only: lazaret approve {} [--for 30m | --profile]",
                            name(service),
                            name(&request.request_id)
                        );
                        println!("    every protocol and port of the address instead (wider): add --every-port");
                        println!("    deny: lazaret deny {}", name(&request.request_id));
                    }
                    None => println!(
                        "    approve: lazaret approve {0} [--for 30m | --profile]; deny: lazaret deny {0}",
                        name(&request.request_id)
                    ),
                }
            }
        }
    }
    if cut {
        println!("(long text was cut: lazaret pending --full prints it whole)");
    }
    Ok(report_failures(&failures))
}

/// The one pending item `request_id` (a unique prefix is enough) names,
/// with its domain's socket.
async fn find_pending(socket_root: &Path, request_id: &str) -> Result<(PathBuf, PendingItem)> {
    let (pending, failures) = all_pending(socket_root).await;
    let mut matching: Vec<(PathBuf, PendingItem)> =
        pending.into_iter().filter(|(_, item)| item.request_id().starts_with(request_id)).collect();
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 if !failures.is_empty() => {
            bail!("no pending request `{request_id}` found, but some domains could not be asked: {}", failures.join("; "))
        }
        0 => bail!("no pending request `{request_id}` (lazaret pending lists them)"),
        count => bail!("`{request_id}` matches {count} pending requests; give more of the id"),
    }
}

/// The scope the flags ask for (this session without them).
fn scope_of(scope: &ScopeArguments) -> GrantScope {
    match (scope.for_minutes, scope.profile) {
        (Some(minutes), _) => GrantScope::Minutes { minutes },
        (None, true) => GrantScope::Profile,
        (None, false) => GrantScope::Session,
    }
}

/// Answers request `request_id` (a unique prefix is enough) in whichever
/// domain has it: a host command with `decision`, a network destination
/// with allow (approve) or deny for `scope`.
pub fn respond(
    config_path: Option<&Path>,
    request_id: &str,
    decision: Decision,
    argv: Option<Vec<String>>,
    reason: Option<String>,
    scope: &ScopeArguments,
) -> Result<u8> {
    let config = load_config(config_path)?;
    runtime()?.block_on(async {
        let (socket, item) = find_pending(&config.socket_root, request_id).await?;
        let client = lazaret_rpc::client::connect(&socket, bounds::ORDINARY_CALL).await?;
        let name = lazaret_core::terminal_text::name;
        match item {
            PendingItem::Command(escalation) => {
                if scope.for_minutes.is_some() || scope.profile || scope.every_port {
                    bail!(
                        "{} is a host command: --for, --profile and --every-port only apply to network requests",
                        name(&escalation.request_id)
                    );
                }
                let respond = client.escalation_respond(escalation.request_id.clone(), decision, argv, reason, Some("cli".to_owned()));
                lazaret_rpc::client::within("escalation_respond", bounds::ORDINARY_CALL, respond).await?;
                let done = match decision {
                    Decision::Approve => "approved",
                    Decision::Deny => "denied",
                    Decision::Edit => "edited",
                    Decision::Abort => "aborted",
                };
                println!("{done}: {} ({})", name(&escalation.request_id), name(&escalation.display));
            }
            PendingItem::Network(request) => {
                let network_decision = match (decision, scope.every_port) {
                    (Decision::Approve, false) => NetworkDecision::Allow,
                    (Decision::Approve, true) if request.service.is_none() => {
                        bail!("{} is a request for a name: --every-port applies to an address", name(&request.request_id))
                    }
                    (Decision::Approve, true) => NetworkDecision::AllowEveryPort,
                    (Decision::Deny, false) => NetworkDecision::Deny,
                    (Decision::Deny, true) => bail!("--every-port widens an approval; a denial refuses the protocol and port shown"),
                    (Decision::Edit | Decision::Abort, _) => {
                        bail!("{} is a network request: approve or deny it", name(&request.request_id))
                    }
                };
                let scope = scope_of(scope);
                let respond = client.network_respond(request.request_id.clone(), network_decision, scope, Some("cli".to_owned()));
                lazaret_rpc::client::within("network_respond", bounds::ORDINARY_CALL, respond).await?;
                let what = match (network_decision, &request.service) {
                    (NetworkDecision::AllowEveryPort, _) => format!("{} (every protocol and port)", name(&request.destination)),
                    (_, Some(service)) => format!("{} {}", name(&request.destination), name(service)),
                    (_, None) => name(&request.destination).into_owned(),
                };
                let done = match network_decision {
                    NetworkDecision::Allow | NetworkDecision::AllowEveryPort => "allowed",
                    NetworkDecision::Deny => "denied",
                };
                println!("{done} for {scope}: {what} ({})", name(&request.request_id));
            }
        }
        Ok(0)
    })
}

/// The rules and grants of every running domain, with its socket, and a
/// message for each domain that could not be asked.
async fn all_rules(socket_root: &Path) -> (Vec<(PathBuf, Rules)>, Vec<String>) {
    let mut listed = Vec::new();
    let mut failures = Vec::new();
    let sockets = live_sockets(socket_root).await;
    for (socket, answer) in ask_every_domain(sockets, "rules_list", |client| async move { client.rules_list().await }).await {
        match answer {
            Ok(rules) => listed.push((socket, rules)),
            Err(error) => failures.push(format!("cannot list the rules of {}: {error:#}", socket.display())),
        }
    }
    (listed, failures)
}

/// The domain hash a control socket belongs to (its directory's name).
fn domain_of(socket: &Path) -> String {
    socket.parent().and_then(Path::file_name).map(|hash| hash.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `lazaret rules`: every running domain's rules and grants.
pub fn rules(config_path: Option<&Path>, json: bool) -> Result<u8> {
    let config = load_config(config_path)?;
    let (listed, failures) = runtime()?.block_on(all_rules(&config.socket_root));
    if json {
        let by_domain: std::collections::BTreeMap<String, &Rules> =
            listed.iter().map(|(socket, rules)| (domain_of(socket), rules)).collect();
        super::print_json(&by_domain)?;
        return Ok(report_failures(&failures));
    }
    let name = lazaret_core::terminal_text::name;
    if listed.is_empty() && failures.is_empty() {
        println!("no running domain");
    }
    let now = lazaret_core::time::now_ms();
    for (socket, rules) in &listed {
        println!("domain {}", domain_of(socket));
        if rules.auto_approve.is_empty() && rules.network.is_empty() {
            println!("  (no rules or grants)");
        }
        for rule in &rules.auto_approve {
            println!("  {}  auto-approve `{}`  from {}", rule.id, name(&rule.entry), name(&rule.source));
        }
        for grant in &rules.network {
            let verdict = match grant.verdict {
                EntryVerdict::Allow => "allow",
                EntryVerdict::Deny => "deny",
            };
            let left = match grant.expires_at_ms {
                Some(end) => format!(", {} s left", end.saturating_sub(now) / 1000),
                None => String::new(),
            };
            let destination = lazaret_core::terminal_text::cut_middle(&name(&grant.destination), SHOWN_CHARACTERS).into_owned();
            let reach = match (&grant.service, grant.every_port) {
                (Some(service), _) => format!(" {} only", name(service)),
                (None, true) => " (every protocol and port)".to_owned(),
                (None, false) => String::new(),
            };
            println!(
                "  {}  {verdict} {destination}{reach}  for {}{left}  by {}, {} hits",
                name(&grant.id),
                grant.scope,
                name(&grant.decided_by.to_string()),
                grant.hits
            );
        }
    }
    Ok(report_failures(&failures))
}

/// `lazaret rules revoke ID`: in whichever running domain has it.
pub fn revoke(config_path: Option<&Path>, id: &str) -> Result<u8> {
    let config = load_config(config_path)?;
    runtime()?.block_on(async {
        let (listed, failures) = all_rules(&config.socket_root).await;
        let holders: Vec<&PathBuf> = listed
            .iter()
            .filter(|(_, rules)| rules.auto_approve.iter().any(|rule| rule.id == id) || rules.network.iter().any(|grant| grant.id == id))
            .map(|(socket, _)| socket)
            .collect();
        let socket = match holders.as_slice() {
            [one] => *one,
            [] if !failures.is_empty() => bail!("no rule `{id}` found, but some domains could not be asked: {}", failures.join("; ")),
            [] => bail!("no rule or grant `{id}` in any running domain (lazaret rules lists them)"),
            _ => bail!(
                "`{id}` names a rule in {} domains (auto-approve ids repeat across domains): revoke it from an editor, or stop the other domains",
                holders.len()
            ),
        };
        let client = lazaret_rpc::client::connect(socket, bounds::ORDINARY_CALL).await?;
        let revoke = client.rules_revoke(id.to_owned(), Some("cli".to_owned()));
        lazaret_rpc::client::within("rules_revoke", bounds::ORDINARY_CALL, revoke).await?;
        println!("revoked: {}", lazaret_core::terminal_text::name(id));
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two domains whose coordinators accept but never answer: both are
    /// reported, by hash and with the call and its bound, after one bound,
    /// not one after the other.
    #[tokio::test]
    async fn stuck_domains_are_asked_at_once_and_reported_by_name() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut listeners = Vec::new();
        let mut sockets = Vec::new();
        for hash in ["aaaaaaaaaaaa", "bbbbbbbbbbbb"] {
            let dir = root.path().join(hash);
            std::fs::create_dir(&dir).expect("mkdir");
            let socket = dir.join(lazaret_protocol::socket::CONTROL_SOCKET_FILE);
            listeners.push(tokio::net::UnixListener::bind(&socket).expect("bind"));
            sockets.push(socket);
        }
        // Accepted (so connecting succeeds), never read.
        let mut held = Vec::new();
        let accepting = async {
            loop {
                for listener in &listeners {
                    if let Ok((stream, _)) = listener.accept().await {
                        held.push(stream);
                    }
                }
            }
        };
        let started = std::time::Instant::now();
        let answers = tokio::select! {
            answers = ask_every_domain(sockets, "escalation_list", |client| async move { client.escalation_list().await }) => answers,
            _ = accepting => unreachable!("accepting never ends"),
        };
        let elapsed = started.elapsed();
        assert!(elapsed < bounds::DOMAIN_ANSWER * 2 - std::time::Duration::from_secs(1), "asked at once, took {elapsed:?}");
        assert_eq!(answers.len(), 2);
        for ((socket, answer), hash) in answers.iter().zip(["aaaaaaaaaaaa", "bbbbbbbbbbbb"]) {
            assert!(socket.starts_with(root.path().join(hash)));
            let message = format!("{:#}", answer.as_ref().expect_err("no answer"));
            assert!(message.contains(&format!("domain {hash}")), "{message}");
            assert!(message.contains("escalation_list within 5 s"), "{message}");
        }
    }
}
