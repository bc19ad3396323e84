//! `lazaret run`: join (or start) the domain and run one session in its
//! sandbox; the inner command's exit status becomes ours.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use lazaret_coordinator::git_sentry::{agent_branch, HostRepository};
use lazaret_coordinator::podman::Podman;
use lazaret_coordinator::WorkspaceMode;
use lazaret_core::bounds;
use lazaret_core::config::DEFAULT_IMAGE;
use lazaret_protocol::{Decision, Event, LazaretApiClient, PendingItem, SequencedEvent};
use lazaret_rpc::client::{Client, Subscription};

use crate::cli::DomainTarget;
use crate::hold_to_bind::{self, CoordinatorLaunch};
use crate::session::{self, SessionCommand};
use crate::workspace::{load_config, resolve_target};

pub fn run(config_path: Option<&Path>, target: &DomainTarget, mount_workspace: bool, command: Vec<String>) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    let preflight = lazaret_coordinator::backend::preflight(&resolved, mount_workspace)?;
    // A configured limit that nothing can enforce is said, every run.
    for warning in &preflight.warnings {
        eprintln!("lazaret: warning: {warning}");
    }
    let (mode, repository) = workspace_mode(&resolved.workspace, &resolved.profile, mount_workspace)?;
    // Only when this session starts the domain: a running domain has its
    // image, and its agent checkout was seeded long ago. The note about the
    // host's working tree (a `git status`: 150-200 ms in a 10,000-file
    // repository) is made while the coordinator starts, and said once it is
    // up, before the session's own output.
    let note: std::sync::Mutex<Option<std::thread::JoinHandle<Option<String>>>> = std::sync::Mutex::new(None);
    let prepare = || -> Result<()> {
        // A key the new domain cannot read stops it here, before anything starts.
        for credential in &resolved.credentials {
            if let lazaret_core::config::CredentialSource::Env(variable) = &credential.source {
                if std::env::var_os(variable).is_none() {
                    anyhow::bail!(
                        "the credential for {} is read from `{variable}` in this shell, which is not set: export it \
                         (or give the profile's credential a file: or a command)",
                        credential.origin
                    );
                }
            }
        }
        if let (Some(repository), Ok(mut slot)) = (repository.clone(), note.lock()) {
            let profile = resolved.profile.clone();
            *slot = Some(std::thread::spawn(move || uncommitted_note(&repository, &profile)));
        }
        // A pod's image is the cluster's to pull.
        match &preflight.local_image {
            Some(image) => ensure_image(image),
            None => Ok(()),
        }
    };
    let session_id = new_session_id()?;
    // The Session Anchor: this process's key, registered with the
    // coordinator; the command inside gets a delegated key and credential.
    let session_key = ed25519_dalek::SigningKey::from_bytes(&random_key()?);
    let credential =
        lazaret_coordinator::escalation::verify::delegate::issue(&session_key, &session_id, random_key()?, credential_expiry_ms());
    let credential = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, serde_json::to_vec(&credential)?);
    let public_key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, session_key.verifying_key().to_bytes());
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        // A cluster that cannot be reached, or whose RuntimeClass does not
        // run gVisor, stops the run here, before anything is created.
        lazaret_coordinator::backend::check_reachable(&resolved).await?;
        let launch = CoordinatorLaunch { config_path, resolved: &resolved, mode, prepare: &prepare };
        let joined = hold_to_bind::join(&launch, &session_id, &public_key, &command).await?;
        let note = note.lock().ok().and_then(|mut slot| slot.take());
        if let Some(Ok(Some(note))) = note.map(std::thread::JoinHandle::join) {
            eprintln!("{note}");
        }
        let argv = match (command.is_empty(), resolved.command.is_empty()) {
            (false, _) => command,
            (true, false) => resolved.command.clone(),
            (true, true) => joined.registration.default_command.clone(),
        };
        // The coordinator says how to join; a pod's sessions get the
        // profile's env on their stdin (a local sandbox has it already).
        let profile_environment: Vec<(String, String)> = resolved.env.iter().map(|(name, env)| (name.clone(), env.value.clone())).collect();
        let join = session::Join::of(&joined.registration.target, &resolved.domain.domain_dir, profile_environment);
        let client = Arc::new(joined.client);
        let ui: session::SharedUi = std::sync::Arc::new(std::sync::Mutex::new(session::TerminalUi::new()));
        let (actions, action_receiver) = tokio::sync::mpsc::unbounded_channel();
        if session::is_interactive() {
            // Escalations of this session, and the domain's network
            // requests, are prompted for here.
            let events = lazaret_rpc::client::within("events_subscribe", bounds::ORDINARY_CALL, client.events_subscribe()).await?;
            tokio::spawn(show_escalations(events, client.clone(), ui.clone(), session_id.clone()));
            tokio::spawn(answer_escalations(action_receiver, client.clone()));
        }
        let session = SessionCommand { join, session_id: session_id.clone(), credential, argv };
        let status = session::run(&session, ui, actions).await?;
        let unregister = client.session_unregister(session_id.clone(), Some(status));
        if let Err(error) = lazaret_rpc::client::within("session_unregister", bounds::UNREGISTER_CALL, unregister).await {
            tracing::warn!(%error, "could not unregister the session");
        }
        Ok(u8::try_from(status.clamp(0, 255)).unwrap_or(255))
    })
}

/// Puts this session's pending escalations and the domain's network
/// requests on the prompt, and takes them off when they are answered (here,
/// in another session's prompt, in an editor, or by timeout). A network
/// request belongs to no one session (the sandbox's network is shared), so
/// every interactive session shows it and the first answer wins. What was
/// pending before this session subscribed, and everything after events were
/// lost, comes from `pending/list`.
async fn show_escalations(mut events: Subscription<SequencedEvent>, client: Arc<Client>, ui: session::SharedUi, session_id: String) {
    resync(&client, &ui, &session_id).await;
    while let Some(Ok(sequenced)) = events.next().await {
        match sequenced.event {
            Event::EscalationPending { escalation } if escalation.session_id == session_id => {
                session::lock_ui(&ui).show_pending(PendingItem::Command(escalation));
            }
            Event::NetworkRequestPending { request } => session::lock_ui(&ui).show_pending(PendingItem::Network(request)),
            Event::EscalationResolved { request_id, .. } | Event::NetworkRequestResolved { request_id, .. } => {
                session::lock_ui(&ui).resolved(&request_id)
            }
            Event::EventsLagged { dropped } => {
                tracing::warn!(dropped, "events were lost; listing the pending requests again");
                resync(&client, &ui, &session_id).await;
            }
            _ => {}
        }
    }
}

/// The prompt's queue becomes what the coordinator lists as pending: the
/// domain's network requests and this session's commands.
async fn resync(client: &Client, ui: &session::SharedUi, session_id: &str) {
    match lazaret_rpc::client::within("pending_list", bounds::ORDINARY_CALL, client.pending_list()).await {
        Ok(pending) => {
            let shown: Vec<PendingItem> = pending
                .into_iter()
                .filter(|item| match item {
                    PendingItem::Command(escalation) => escalation.session_id == session_id,
                    PendingItem::Network(_) => true,
                })
                .collect();
            session::lock_ui(ui).resync(&shown);
        }
        Err(error) => tracing::warn!(%error, "could not list the pending requests"),
    }
}

/// Sends the prompt's decisions; [Q] also tears the domain down.
async fn answer_escalations(mut actions: tokio::sync::mpsc::UnboundedReceiver<crate::prompt::PromptAction>, client: Arc<Client>) {
    use crate::prompt::PromptAction;
    while let Some(action) = actions.recv().await {
        let command = match &action {
            PromptAction::Approve { request_id } => (request_id, Decision::Approve, None),
            PromptAction::Deny { request_id } => (request_id, Decision::Deny, None),
            PromptAction::Edit { request_id, argv } => (request_id, Decision::Edit, Some(argv.clone())),
            PromptAction::Abort { request_id } => (request_id, Decision::Abort, None),
            PromptAction::Network { request_id, decision, scope } => {
                let respond = client.network_respond(request_id.clone(), *decision, *scope, Some("terminal".to_owned()));
                // Another session's prompt or an editor may have answered first.
                if let Err(error) = lazaret_rpc::client::within("network_respond", bounds::ORDINARY_CALL, respond).await {
                    tracing::warn!(%error, "could not answer the network request");
                }
                continue;
            }
        };
        let (request_id, decision, argv) = command;
        let respond = client.escalation_respond(request_id.clone(), decision, argv, None, Some("terminal".to_owned()));
        let answered = lazaret_rpc::client::within("escalation_respond", bounds::ORDINARY_CALL, respond).await;
        if let Err(error) = answered {
            tracing::warn!(%error, "could not answer the escalation");
        }
        if matches!(action, PromptAction::Abort { .. }) {
            let shutdown = client.domain_shutdown(Some("aborted at the terminal prompt".to_owned()));
            if let Err(error) = lazaret_rpc::client::within("domain_shutdown", bounds::ORDINARY_CALL, shutdown).await {
                tracing::warn!(%error, "could not shut the domain down");
            }
        }
    }
}

/// A git repository gets the agent-branch layout (and is returned for the
/// start's note); anything else needs the explicit `--mount-workspace`.
fn workspace_mode(workspace: &Path, profile: &str, mount_workspace: bool) -> Result<(WorkspaceMode, Option<HostRepository>)> {
    let repository = HostRepository::discover(workspace)?;
    match (repository, mount_workspace) {
        (Some(_), true) => anyhow::bail!(
            "{} is a git repository: Lazaret never mounts a repository into the sandbox (the agent would reach the host's .git). \
             Drop --mount-workspace: the agent then works on its own checkout of {}",
            workspace.display(),
            agent_branch(profile)
        ),
        (Some(repository), false) => Ok((WorkspaceMode::AgentBranch, Some(repository))),
        (None, true) => Ok((WorkspaceMode::Direct, None)),
        (None, false) => anyhow::bail!(
            "{} is not a git repository. Lazaret gives the agent its own branch of a repository, so that your files and history \
             are never at risk. Either make it one (git init && git add -A && git commit -m initial), or pass --mount-workspace \
             to let the agent read and write this directory as it is.",
            workspace.display()
        ),
    }
}

/// When a domain starts on a repository with uncommitted changes: a note
/// that the agent's checkout does not have them (it starts from HEAD).
fn uncommitted_note(repository: &HostRepository, profile: &str) -> Option<String> {
    let changes = repository.git_text(&["status", "--porcelain", "--untracked-files=normal"]).unwrap_or_default();
    let count = changes.lines().count();
    (count > 0).then(|| {
        format!(
            "lazaret: note: {count} uncommitted change(s) in {} are not in the agent's checkout of {}; it starts from HEAD ({})",
            repository.workdir.display(),
            agent_branch(profile),
            repository.resolve("HEAD").ok().flatten().map(|sha| sha[..12.min(sha.len())].to_owned()).unwrap_or_default()
        )
    })
}

/// The built-in profile's image is built on first use; any other image
/// must exist locally (no registry is assumed reachable).
fn ensure_image(image: &str) -> Result<()> {
    let podman = Podman::default();
    if podman.image_exists(image)? {
        return Ok(());
    }
    if image == DEFAULT_IMAGE {
        eprintln!("lazaret: the default image is not built yet; building it now (once)");
        super::image::build(image, false)?;
        return Ok(());
    }
    anyhow::bail!("image `{image}` is not available locally; build or pull it first (podman images lists what exists)")
}

fn credential_expiry_ms() -> u64 {
    lazaret_core::time::now_ms() + lazaret_protocol::escalation::CREDENTIAL_LIFETIME_MS
}

fn random_key() -> Result<[u8; 32]> {
    let bytes = lazaret_core::ids::random_bytes(32)?;
    bytes.try_into().map_err(|_| anyhow::anyhow!("short read from /dev/urandom"))
}

/// 128 random bits as hex, from the kernel's CSPRNG.
fn new_session_id() -> Result<String> {
    lazaret_core::ids::random_hex(16).context("cannot read /dev/urandom")
}
