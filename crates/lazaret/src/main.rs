//! `lazaret`: the host CLI. Parses the command line, installs the tracing
//! subscriber, dispatches to `commands`, and maps errors to exit statuses.

mod agents;
mod cli;
mod commands;
mod hold_to_bind;
mod pod_exec;
mod process;
mod prompt;
mod session;
mod workspace;

use std::process::ExitCode;

use clap::Parser;
use lazaret_core::exit_status;

fn main() -> ExitCode {
    let arguments = cli::Cli::parse();
    let is_coordinator = matches!(arguments.command, cli::Command::Coordinator { .. });
    install_tracing(if is_coordinator { arguments.verbose.max(1) } else { arguments.verbose });
    match commands::dispatch(arguments) {
        Ok(status) => ExitCode::from(status),
        Err(error) => {
            let status = exit_status_of(&error);
            eprintln!("lazaret: error: {}", render(&error));
            if status == exit_status::SECURITY_ABORT {
                eprintln!("lazaret: aborted for safety before anything was created (exit status {status})");
            }
            ExitCode::from(status)
        }
    }
}

fn render(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    text
}

/// The exit status of the first configuration or security error in the
/// chain; the coordinator library's error carries one inside its context.
fn exit_status_of(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|cause| {
            if let Some(core) = cause.downcast_ref::<lazaret_core::Error>() {
                return Some(core.exit_status());
            }
            cause.downcast_ref::<lazaret_coordinator::Error>().and_then(lazaret_coordinator::Error::exit_status)
        })
        .unwrap_or(exit_status::FAILURE)
}

fn install_tracing(verbose: u8) {
    let default_level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("LAZARET_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).with_ansi(ansi).init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_security_error_under_coordinator_context_keeps_its_status_and_prints_once() {
        let core = lazaret_core::Error::security("directory", "/tmp is shared with other users", None);
        let coordinator = lazaret_coordinator::Error::Context { context: "cannot start".to_owned(), source: Box::new(core.into()) };
        let error = anyhow::Error::new(coordinator).context("outer");
        assert_eq!(exit_status_of(&error), exit_status::SECURITY_ABORT);
        let text = render(&error);
        assert_eq!(text.matches("shared with other users").count(), 1, "{text}");
        assert!(text.starts_with("outer\n  caused by: cannot start\n  caused by: "), "{text}");
    }
}
