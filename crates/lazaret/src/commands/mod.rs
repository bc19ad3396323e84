//! Command handlers. Each returns the process exit status on success;
//! errors are mapped to statuses in `main`.

mod agent_image;
mod approvals;
mod audit;
mod config;
mod diff;
mod doctor;
mod domain;
mod generate;
pub mod image;
mod init;
mod merge;
mod net;
mod run;
mod state;
mod status;

use anyhow::Result;
use lazaret_protocol::Decision;

use crate::cli::{AuditCommand, Cli, Command, ConfigCommand, DomainCommand, ImageCommand, NetCommand, StateCommand};

pub fn dispatch(cli: Cli) -> Result<u8> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Domain { action: None, target, json } => domain::run(config_path, &target, json),
        Command::Domain { action: Some(DomainCommand::Rm { target }), .. } => domain::remove(config_path, &target),
        Command::Config(ConfigCommand::Check { workspace }) => config::check(config_path, workspace.as_deref()),
        Command::Config(ConfigCommand::Show { target, json }) => config::show(config_path, &target, json),
        Command::Config(ConfigCommand::Path) => config::path(config_path),
        Command::Doctor { json } => doctor::run(config_path, json),
        Command::Image(ImageCommand::Build { force, agent: None, tag }) => {
            image::build(tag.as_deref().unwrap_or(lazaret_core::config::DEFAULT_IMAGE), force)
        }
        Command::Image(ImageCommand::Build { force, agent: Some(agent), tag }) => agent_image::build(agent, tag.as_deref(), force),
        Command::Init { agent, profile, workspace, print, force } => {
            init::run(config_path, &init::InitOptions { agent, profile: profile.as_deref(), workspace: workspace.as_deref(), print, force })
        }
        Command::Run { target, mount_workspace, command } => run::run(config_path, &target, mount_workspace, command),
        Command::Diff { target, stat, json } => diff::run(config_path, &target, stat, json),
        Command::Merge { target, expect, yes } => merge::run(config_path, &target, expect.as_deref(), yes),
        Command::State(StateCommand::Diff { target, dir, json }) => state::diff(config_path, &target, dir.as_deref(), json),
        Command::State(StateCommand::Reset { target, dir, yes }) => state::reset(config_path, &target, dir.as_deref(), yes),
        Command::Net(NetCommand::Show { target, json }) => net::call(config_path, &target, net::Change::Show, json),
        Command::Net(NetCommand::Allow { rule, target }) => net::call(config_path, &target, net::Change::Allow(rule), false),
        Command::Net(NetCommand::Deny { rule, target }) => net::call(config_path, &target, net::Change::Deny(rule), false),
        Command::Net(NetCommand::Reload { target }) => net::call(config_path, &target, net::Change::Reload, false),
        Command::Pending { json, full } => approvals::pending(config_path, json, full),
        Command::Approve { request_id, scope } => approvals::respond(config_path, &request_id, Decision::Approve, None, None, &scope),
        Command::Deny { request_id, reason, scope } => approvals::respond(config_path, &request_id, Decision::Deny, None, reason, &scope),
        Command::Edit { request_id, argv } => {
            approvals::respond(config_path, &request_id, Decision::Edit, Some(argv), None, &Default::default())
        }
        Command::Rules { command: None, json } => approvals::rules(config_path, json),
        Command::Rules { command: Some(crate::cli::RulesCommand::Revoke { id }), json: _ } => approvals::revoke(config_path, &id),
        Command::EditorInfo { json, workspaces } => approvals::editor_info(config_path, json, &workspaces),
        Command::Completions { shell } => generate::completions(shell),
        Command::Man { dir } => generate::man_pages(&dir),
        Command::Audit { action: None, target, limit, json } => audit::list(config_path, &target, limit, json),
        Command::Audit { action: Some(AuditCommand::Verify { target }), .. } => audit::verify(config_path, &target),
        Command::Status { target, json } => status::status(config_path, &target, json),
        Command::Sessions { target, limit, json } => status::sessions(config_path, &target, limit, json),
        Command::StateAnchorOpaque { xattr, dirs } => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for dir in dirs {
                let opaque = anyhow::Context::with_context(lazaret_coordinator::state_anchor::has_opaque_xattr(&dir, &xattr), || {
                    format!("cannot read the xattrs of {}", dir.display())
                })?;
                if opaque {
                    out.write_all(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))?;
                    out.write_all(b"\0")?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        Command::TerminalGuard => crate::session::guard_terminal(),
        Command::PodExec { kubeconfig, context, namespace, pod, pass, command } => {
            let target = crate::pod_exec::PodTarget { kubeconfig, context, namespace, pod };
            crate::pod_exec::run(&target, &pass, &command)
        }
        Command::Coordinator { target, mount_workspace } => {
            let config = crate::workspace::load_config(config_path)?;
            let resolved = crate::workspace::resolve_target(&config, &target)?;
            let mode =
                if mount_workspace { lazaret_coordinator::WorkspaceMode::Direct } else { lazaret_coordinator::WorkspaceMode::AgentBranch };
            // `network/reload` re-reads the same file for the same domain.
            let reload_path = config_path.map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
            let domain_hash = resolved.domain.domain_hash.clone();
            let reloader: lazaret_coordinator::EgressReloader = std::sync::Arc::new(move || {
                let reload = || -> Result<_> {
                    let config = crate::workspace::load_config(reload_path.as_deref())?;
                    let reloaded = crate::workspace::resolve_target(&config, &target)?;
                    if reloaded.domain.domain_hash != domain_hash {
                        anyhow::bail!("the configuration now gives this workspace another domain ({})", reloaded.domain.domain_hash);
                    }
                    Ok((reloaded.allow_egress, reloaded.private_answers))
                };
                // The coordinator reports the whole chain, as one line.
                reload().map_err(|error| lazaret_coordinator::Error::msg(format!("{error:#}")))
            });
            Ok(lazaret_coordinator::run(resolved, mode, reloader)?)
        }
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
