//! `lazaret-sidecar`: the Network Sidecar that owns the sandbox's network namespace.
//!
//! Built as a static binary (musl) and shipped alone in a `FROM scratch` image.
//! Until the Network Sidecar lands it only answers `--version` and `--help`.

use std::process::ExitCode;

const USAGE: &str = "\
lazaret-sidecar: Lazaret's Network Sidecar (egress policy for one sandbox)

Usage: lazaret-sidecar --version

The egress router is not available in this build yet.";

fn main() -> ExitCode {
    let first = std::env::args().nth(1);
    match first.as_deref() {
        Some("--version") | Some("-V") => {
            println!("lazaret-sidecar {}", env!("CARGO_PKG_VERSION"));
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
