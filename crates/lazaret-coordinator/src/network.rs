//! The Network Sidecar, coordinator side (DECISIONS D5, D6): its `FROM
//! scratch` image (one file, the static `lazaret-sidecar`, rebuilt when the
//! binary changes), its container under runc with only CAP_NET_ADMIN and
//! CAP_NET_BIND_SERVICE on the configured podman network, and its control
//! socket, which is mounted into the sidecar only. The agent sandbox joins
//! the sidecar's network namespace with runsc's hostinet, so the sidecar's
//! routing policy decides what it reaches, and its `/etc/resolv.conf` names
//! only the sidecar's resolver (127.0.0.1 of that namespace). The sidecar's
//! event stream (refused DNS questions) is read by [`watch`].

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lazaret_core::config::ResolvedProfile;
use sha2::{Digest, Sha256};

use crate::bail;
use crate::error::{Context, Result};
use crate::podman::Podman;

/// Inside the sidecar: where its control socket lives.
const CONTROL_DIR_IN_SIDECAR: &str = "/run/lazaret-sidecar";

/// The sidecar image for the current binary: `localhost/lazaret-sidecar:<hash>`.
pub fn ensure_image(podman: &Podman) -> Result<String> {
    let binary = crate::helper_binaries::find("lazaret-sidecar")
        .filter(|path| crate::helper_binaries::linkage(path).is_ok_and(|linkage| linkage == crate::helper_binaries::Linkage::Static))
        .context("the static lazaret-sidecar binary was not found (build it: scripts/build)")?;
    let bytes = std::fs::read(&binary)?;
    let hash = lazaret_core::ids::hex(&Sha256::digest(&bytes)[..6]);
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
    let dir = std::env::temp_dir().join(format!("lazaret-sidecar-build-{}", lazaret_core::ids::random_hex(6)?));
    crate::private_dirs::ensure_private_dir(&dir)?;
    Ok(dir)
}

/// The resolv.conf the sandbox gets: the sidecar's resolver only.
pub const SANDBOX_RESOLV_CONF: &str =
    "# Written by Lazaret: the Network Sidecar answers allowlisted names only.\nnameserver 127.0.0.1\noptions attempts:2 timeout:3\n";

/// Writes the sandbox's resolv.conf into `dir` and returns the podman
/// argument that mounts it.
pub fn resolv_conf_argument(dir: &Path) -> Result<String> {
    crate::private_dirs::ensure_private_dir(dir)?;
    let path = dir.join("resolv.conf");
    std::fs::write(&path, SANDBOX_RESOLV_CONF).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    Ok(format!("--volume={}:/etc/resolv.conf:ro", path.display()))
}

/// Every address of this host's interfaces except loopback (which the
/// sandbox's namespace has its own of).
pub fn host_addresses() -> Vec<std::net::IpAddr> {
    let mut addresses = Vec::new();
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        tracing::warn!("cannot list this host's addresses; they are not protected beyond the allowlist");
        return addresses;
    };
    for interface in interfaces {
        let Some(address) = interface.address else { continue };
        let address = if let Some(v4) = address.as_sockaddr_in() {
            std::net::IpAddr::V4(v4.ip())
        } else if let Some(v6) = address.as_sockaddr_in6() {
            std::net::IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if !address.is_loopback() && !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    addresses
}

/// The gateway addresses of a podman network's subnets.
fn network_gateways(podman: &Podman, network: &str) -> Vec<std::net::IpAddr> {
    let output = podman
        .command()
        .args(["network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}} {{end}}", network])
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).split_whitespace().filter_map(|word| word.parse().ok()).collect()
        }
        // A missing network fails at `podman run` with its own, clearer error.
        _ => Vec::new(),
    }
}

/// How the sidecar container runs: runc, only the two capabilities it needs,
/// a read-only root, on the configured podman network. `lazaret doctor`
/// starts its probe sidecar with exactly these.
pub fn container_arguments(podman_network: &str) -> Vec<String> {
    let mut arguments: Vec<String> = [
        "--runtime=runc",
        "--cap-drop=all",
        "--cap-add=NET_ADMIN",
        "--cap-add=NET_BIND_SERVICE",
        "--security-opt=no-new-privileges",
        "--read-only",
        "--http-proxy=false",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    arguments.push(format!("--network={podman_network}"));
    arguments.extend(crate::podman::ulimit_arguments());
    arguments
}

/// Starts the sidecar and waits until its policy is in force (its control
/// socket exists). `control_dir` is mounted into the sidecar only.
pub fn start(podman: &Podman, resolved: &ResolvedProfile, image: &str, control_dir: &Path) -> Result<PathBuf> {
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
    ]);
    command.args(container_arguments(&resolved.podman_network));
    command.arg(format!("--volume={}:{CONTROL_DIR_IN_SIDECAR}:rw", control_dir.display()));
    command.arg(image);
    for rule in &resolved.allow_egress {
        command.arg(format!("--allow={rule}"));
    }
    for upstream in &resolved.dns_upstream {
        command.arg(format!("--dns-upstream={upstream}"));
    }
    // The host's own addresses and the network's gateways (the host, or
    // rootless podman's network namespace with its resolver) stay out of reach
    // even under a wide allow entry: 0.0.0.0/0 means "the network", not "this
    // machine's services".
    let mut protected = host_addresses();
    for gateway in network_gateways(podman, &resolved.podman_network) {
        if !protected.contains(&gateway) {
            protected.push(gateway);
        }
    }
    for address in protected {
        command.arg(format!("--protect={address}"));
    }
    command.arg("--control").arg(format!("{CONTROL_DIR_IN_SIDECAR}/control.sock"));
    let output = command.stdin(std::process::Stdio::null()).output().context("cannot run podman")?;
    if !output.status.success() {
        bail!("podman could not start the Network Sidecar: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let started = Instant::now();
    let mut polls = 0u32;
    while !socket.exists() {
        polls += 1;
        let problem = if started.elapsed() > Duration::from_secs(10) {
            Some("did not come up within 10 s")
        } else if polls.is_multiple_of(25) && !podman.container_running(&domain.sidecar_name) {
            Some("stopped")
        } else {
            None
        };
        if let Some(problem) = problem {
            let logs = podman
                .command()
                .args(["logs", &domain.sidecar_name])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            bail!("the Network Sidecar {problem}: {}", logs.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(socket)
}

/// The sidecar's event stream (`{"watch":true}`): one JSON object per line,
/// until the sidecar goes.
pub struct SidecarEvents {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::UnixStream>>,
}

impl SidecarEvents {
    pub async fn connect(socket: &Path) -> Result<SidecarEvents> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stream = tokio::net::UnixStream::connect(socket).await.with_context(|| format!("cannot reach {}", socket.display()))?;
        stream.write_all(b"{\"watch\":true}\n").await?;
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let first = lines.next_line().await?.unwrap_or_default();
        if !first.contains("\"watching\":true") {
            bail!("the Network Sidecar refused to stream events: {first}");
        }
        Ok(SidecarEvents { lines })
    }

    /// The next event; `None` when the stream ends. Lines that are not JSON are skipped.
    pub async fn next(&mut self) -> Result<Option<serde_json::Value>> {
        while let Some(line) = self.lines.next_line().await? {
            if let Ok(event) = serde_json::from_str(&line) {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }
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
