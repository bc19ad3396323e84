//! `lazaret run`: join (or start) the domain and run one session in its
//! sandbox; the inner command's exit status becomes ours.

use std::path::Path;

use anyhow::{Context, Result};
use lazaret_core::config::DEFAULT_IMAGE;

use crate::cli::DomainTarget;
use crate::hold_to_bind::{self, CoordinatorLaunch};
use crate::podman::Podman;
use crate::session::{self, SessionCommand};
use crate::workspace::{load_config, resolve_target};

pub fn run(config_path: Option<&Path>, target: &DomainTarget, command: Vec<String>) -> Result<u8> {
    let config = load_config(config_path)?;
    let resolved = resolve_target(&config, target)?;
    ensure_image(&resolved.image)?;
    let session_id = new_session_id()?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let launch = CoordinatorLaunch { config_path, resolved: &resolved };
        let joined = hold_to_bind::join(&launch, &session_id, &command).await?;
        let argv = if command.is_empty() { joined.registration.default_command.clone() } else { command };
        let status =
            session::run(&SessionCommand { container: &joined.registration.container_name, session_id: &session_id, argv: &argv }).await?;
        let unregister: Result<bool, _> =
            joined.client.call("session/unregister", serde_json::json!({ "sessionId": session_id, "exitStatus": status })).await;
        if let Err(error) = unregister {
            tracing::warn!(%error, "could not unregister the session");
        }
        Ok(u8::try_from(status.clamp(0, 255)).unwrap_or(255))
    })
}

/// The built-in profile's image is built on first use; any other image
/// must exist locally (no registry is assumed reachable).
fn ensure_image(image: &str) -> Result<()> {
    let podman = Podman::default();
    if podman.image_exists(image) {
        return Ok(());
    }
    if image == DEFAULT_IMAGE {
        eprintln!("lazaret: the default image is not built yet; building it now (once)");
        super::image::build(image, false)?;
        return Ok(());
    }
    anyhow::bail!("image `{image}` is not available locally; build or pull it first (podman images lists what exists)")
}

/// 128 random bits as hex, from the kernel's CSPRNG.
fn new_session_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut bytes))
        .context("cannot read /dev/urandom")?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}
