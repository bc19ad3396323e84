//! `lazaret-escalate`: the in-sandbox client of Host Escalation.
//!
//! Built as a static binary (musl) and mounted read-only into the sandbox.
//! Until the escalation protocol lands it only answers `--version` and `--help`.

use std::process::ExitCode;

const USAGE: &str = "\
lazaret-escalate: ask the host to run a command (Lazaret Host Escalation)

Usage: lazaret-escalate [--justification TEXT] -- PROGRAM ARGS...
       lazaret-escalate --version

Host Escalation is not available in this build yet.";

fn main() -> ExitCode {
    let first = std::env::args().nth(1);
    match first.as_deref() {
        Some("--version") | Some("-V") => {
            println!("lazaret-escalate {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("--help") | Some("-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
