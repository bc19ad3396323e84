//! The Network Sidecar, coordinator side (DECISIONS D5, D6): its `FROM
//! scratch` image (one file, the static `lazaret-sidecar`, rebuilt when the
//! binary changes), its container under runc with only CAP_NET_ADMIN and
//! CAP_NET_BIND_SERVICE on the configured podman network, and its control
//! socket, which is mounted into the sidecar only. The agent sandbox joins
//! the sidecar's network namespace with runsc's hostinet, so the sidecar's
//! routing policy decides what it reaches.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lazaret_core::config::ResolvedProfile;
use lazaret_core::egress::EgressRule;
use sha2::{Digest, Sha256};

use crate::podman::Podman;

/// Inside the sidecar: where its control socket lives.
const CONTROL_DIR_IN_SIDECAR: &str = "/run/lazaret-sidecar";

/// The sidecar image for the current binary: `localhost/lazaret-sidecar:<hash>`.
pub fn ensure_image(podman: &Podman) -> Result<String> {
    let binary = crate::helper_binaries::find("lazaret-sidecar")
        .filter(|path| crate::helper_binaries::linkage(path).is_ok_and(|linkage| linkage == crate::helper_binaries::Linkage::Static))
        .context("the static lazaret-sidecar binary was not found (build it: scripts/build)")?;
    let bytes = std::fs::read(&binary)?;
    let hash: String = Sha256::digest(&bytes).iter().take(6).map(|byte| format!("{byte:02x}")).collect();
    let tag = format!("localhost/lazaret-sidecar:{hash}");
    if podman.image_exists(&tag) {
        return Ok(tag);
    }
    let context = tempfile_dir()?;
    std::fs::write(context.join("lazaret-sidecar"), &bytes)?;
    std::fs::set_permissions(context.join("lazaret-sidecar"), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    std::fs::write(
        context.join("Containerfile"),
        "FROM scratch\nCOPY lazaret-sidecar /lazaret-sidecar\nENTRYPOINT [\"/lazaret-sidecar\"]\n",
    )?;
    let output = podman.command().args(["build", "--quiet", "--tag", &tag]).arg(&context).stdin(std::process::Stdio::null()).output()?;
    let _ = std::fs::remove_dir_all(&context);
    if !output.status.success() {
        bail!("cannot build the sidecar image {tag}: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(tag)
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lazaret-sidecar-build-{}", crate::commands::random_hex(6)?));
    crate::private_dirs::ensure_private_dir(&dir)?;
    Ok(dir)
}

/// The CIDRs of the merged allowlist. Domain names need the sidecar's DNS,
/// which this build does not have: refused rather than silently dropped.
pub fn allowed_cidrs(resolved: &ResolvedProfile) -> Result<Vec<String>> {
    let mut cidrs = Vec::new();
    for rule in &resolved.allow_egress {
        match rule {
            EgressRule::Cidr(net) => cidrs.push(net.to_string()),
            EgressRule::Domain(name) => bail!(
                "allow_egress entry `{name}` is a domain name; this build of the Network Sidecar enforces CIDRs only (allowlist the addresses instead)"
            ),
        }
    }
    Ok(cidrs)
}

/// Starts the sidecar and waits until its policy is in force (its control
/// socket exists). `control_dir` is mounted into the sidecar only.
pub fn start(podman: &Podman, resolved: &ResolvedProfile, image: &str, control_dir: &Path) -> Result<PathBuf> {
    let cidrs = allowed_cidrs(resolved)?;
    crate::private_dirs::ensure_private_dir(control_dir)?;
    let socket = control_dir.join("control.sock");
    let _ = std::fs::remove_file(&socket);
    let domain = &resolved.domain;
    let mut command = podman.command();
    command.args([
        "run",
        "--detach",
        "--replace",
        &format!("--name={}", domain.sidecar_name),
        &format!("--label=io.lazaret.domain={}", domain.domain_hash),
        "--runtime=runc",
        "--cap-drop=all",
        "--cap-add=NET_ADMIN",
        "--cap-add=NET_BIND_SERVICE",
        "--security-opt=no-new-privileges",
        "--read-only",
        &format!("--network={}", resolved.podman_network),
        "--http-proxy=false",
        &format!("--volume={}:{CONTROL_DIR_IN_SIDECAR}:rw", control_dir.display()),
    ]);
    command.args(crate::podman::ulimit_arguments());
    command.arg(image);
    for cidr in &cidrs {
        command.arg("--allow").arg(cidr);
    }
    command.arg("--control").arg(format!("{CONTROL_DIR_IN_SIDECAR}/control.sock"));
    let output = command.stdin(std::process::Stdio::null()).output().context("cannot run podman")?;
    if !output.status.success() {
        bail!("podman could not start the Network Sidecar: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let started = Instant::now();
    while !socket.exists() {
        if started.elapsed() > Duration::from_secs(10) {
            let logs = podman
                .command()
                .args(["logs", &domain.sidecar_name])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            bail!("the Network Sidecar did not come up within 10 s: {}", logs.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(socket)
}

/// One request on the sidecar's control socket (a JSON line each way).
pub fn control(socket: &Path, request: &serde_json::Value) -> Result<serde_json::Value> {
    let stream = UnixStream::connect(socket).with_context(|| format!("cannot reach the Network Sidecar at {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut writer = stream.try_clone()?;
    writeln!(writer, "{request}")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    let answer: serde_json::Value = serde_json::from_str(&line).context("bad answer from the Network Sidecar")?;
    if answer["ok"] != true {
        bail!("{}", answer["error"].as_str().unwrap_or("the Network Sidecar refused the request"));
    }
    Ok(answer)
}
