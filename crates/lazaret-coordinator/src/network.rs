//! The Network Sidecar, coordinator side (DECISIONS D5, D6): its `FROM
//! scratch` image (one file, the static `lazaret-sidecar`, rebuilt when the
//! binary changes), its container under runc with only CAP_NET_ADMIN and
//! CAP_NET_BIND_SERVICE on the configured podman network, and its control
//! socket, which is mounted into the sidecar only. The agent sandbox joins
//! the sidecar's network namespace with runsc's hostinet, so the sidecar's
//! routing policy decides what it reaches, and its `/etc/resolv.conf` names
//! only the sidecar's resolver (127.0.0.1 of that namespace). The sidecar's
//! event stream (refused DNS questions and answers) is read by
//! [`SidecarEvents`]; what it protects of the host (the host's addresses and
//! networks) is kept current by [`refresh_protection`].

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
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
    if podman.image_exists(&tag)? {
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
        bail!("cannot build the sidecar image {tag}: {}", crate::podman::explain(&output.stderr));
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

/// What the sidecar keeps from the sandbox on the host's behalf: the host's
/// own addresses (host deny rules, even under `0.0.0.0/0`) and the networks
/// of its interfaces (a name's answer does not open them unless a CIDR entry
/// or `private_answers = "allow"` does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostProtection {
    pub addresses: Vec<IpAddr>,
    /// `address/length` with the host bits cleared.
    pub networks: Vec<String>,
}

impl HostProtection {
    /// The sidecar's `protect` request.
    pub fn request(&self) -> serde_json::Value {
        let addresses: Vec<String> = self.addresses.iter().map(ToString::to_string).collect();
        serde_json::json!({ "protect": { "addresses": addresses, "networks": self.networks } })
    }

    fn add_addresses(&mut self, addresses: impl IntoIterator<Item = IpAddr>) {
        for address in addresses {
            if !self.addresses.contains(&address) {
                self.addresses.push(address);
            }
        }
    }
}

/// The host's interfaces now (loopback and link-local left out: the sandbox's
/// namespace has its own, and the sidecar never opens them); `None` when they
/// cannot be listed.
pub fn host_protection() -> Option<HostProtection> {
    let ip = |address: &nix::sys::socket::SockaddrStorage| {
        address.as_sockaddr_in().map(|v4| IpAddr::V4(v4.ip())).or_else(|| address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
    };
    let interfaces = nix::ifaddrs::getifaddrs().ok()?;
    Some(protection_from(
        interfaces.filter_map(|interface| Some((interface.address.as_ref().and_then(ip)?, interface.netmask.as_ref().and_then(ip)))),
    ))
}

/// [`HostProtection`] from interface addresses with their netmasks.
fn protection_from(interfaces: impl IntoIterator<Item = (IpAddr, Option<IpAddr>)>) -> HostProtection {
    let mut protection = HostProtection::default();
    for (address, netmask) in interfaces {
        let link_local = match address {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
        };
        if address.is_loopback() || link_local {
            continue;
        }
        protection.add_addresses([address]);
        if let Some(network) = netmask.and_then(|netmask| network_of(address, netmask)) {
            if !protection.networks.contains(&network) {
                protection.networks.push(network);
            }
        }
    }
    protection
}

/// `address/length` of the network `address` lies in, with the host bits
/// cleared; `None` for a netmask of the other family, one that is not a
/// prefix, or a zero-length one (no network, the whole space).
fn network_of(address: IpAddr, netmask: IpAddr) -> Option<String> {
    let (value, mask, bits) = match (address, netmask) {
        (IpAddr::V4(a), IpAddr::V4(m)) => (u128::from(u32::from(a)), u128::from(u32::from(m)), 32),
        (IpAddr::V6(a), IpAddr::V6(m)) => (u128::from(a), u128::from(m), 128),
        _ => return None,
    };
    let length = mask.count_ones();
    let expected = if length == 0 { 0 } else { (u128::MAX << (128 - length)) >> (128 - bits) };
    if length == 0 || mask != expected {
        return None;
    }
    let network = match address {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from((value & mask) as u32)),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(value & mask)),
    };
    Some(format!("{network}/{length}"))
}

/// How often [`refresh_protection`] reads the host's interfaces again.
pub const PROTECTION_REFRESH: Duration = Duration::from_secs(2);

/// Keeps the running sidecar's [`HostProtection`] current (attack review
/// finding 17: it used to be read once, when the sidecar started): reads the
/// host's interfaces every [`PROTECTION_REFRESH`] and sends them, with the
/// network's `gateways`, whenever they changed since `sent`. Runs until the
/// task is aborted; a failed read or send is tried again at the next tick.
pub async fn refresh_protection(socket: PathBuf, gateways: Vec<IpAddr>, mut sent: HostProtection) {
    let mut ticks = tokio::time::interval(PROTECTION_REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(mut now) = host_protection() else { continue };
        now.add_addresses(gateways.iter().copied());
        if now == sent {
            continue;
        }
        let (socket, request) = (socket.clone(), now.request());
        match tokio::task::spawn_blocking(move || control(&socket, &request)).await {
            Ok(Ok(_)) => {
                tracing::info!(addresses = ?now.addresses, networks = ?now.networks, "the host's addresses changed; the Network Sidecar protects them now");
                sent = now;
            }
            Ok(Err(error)) => tracing::warn!(error = %error.chained(), "cannot update the Network Sidecar's host protection"),
            Err(error) => tracing::warn!(%error, "host protection task failed"),
        }
    }
}

/// The gateway addresses of a podman network's subnets.
fn network_gateways(podman: &Podman, network: &str) -> Vec<IpAddr> {
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

/// A sidecar that [`start`] started.
pub struct StartedSidecar {
    /// Its control socket.
    pub socket: PathBuf,
    /// The podman network's gateways (protected like the host's addresses).
    pub gateways: Vec<IpAddr>,
    /// What it was told to protect (gateways included).
    pub protection: HostProtection,
}

/// Starts the sidecar and waits until its policy is in force (its control
/// socket exists). `control_dir` is mounted into the sidecar only.
pub fn start(podman: &Podman, resolved: &ResolvedProfile, image: &str, control_dir: &Path) -> Result<StartedSidecar> {
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
    command.arg(format!("--private-answers={}", resolved.private_answers));
    // The host's own addresses and the network's gateways (the host, or
    // rootless podman's network namespace with its resolver) stay out of reach
    // even under a wide allow entry: 0.0.0.0/0 means "the network", not "this
    // machine's services". The host's networks are internal for a name's answers.
    let mut protection = host_protection().unwrap_or_else(|| {
        tracing::warn!("cannot list this host's addresses; they are not protected beyond the allowlist until they can be");
        HostProtection::default()
    });
    let gateways = network_gateways(podman, &resolved.podman_network);
    protection.add_addresses(gateways.iter().copied());
    for address in &protection.addresses {
        command.arg(format!("--protect={address}"));
    }
    for network in &protection.networks {
        command.arg(format!("--protect-net={network}"));
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
    Ok(StartedSidecar { socket, gateways, protection })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn the_hosts_addresses_and_networks_come_from_its_interfaces() {
        let interfaces = [
            (ip("127.0.0.1"), Some(ip("255.0.0.0"))),
            (ip("192.168.1.23"), Some(ip("255.255.255.0"))),
            (ip("10.88.0.1"), Some(ip("255.255.0.0"))),
            (ip("10.88.0.1"), Some(ip("255.255.0.0"))),
            (ip("169.254.3.4"), Some(ip("255.255.0.0"))),
            (ip("2001:db8:1:2::17"), Some(ip("ffff:ffff:ffff:ffff::"))),
            (ip("fe80::1"), Some(ip("ffff:ffff:ffff:ffff::"))),
            (ip("::1"), Some(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))),
            (ip("203.0.113.9"), None),
            (ip("198.51.100.7"), Some(ip("255.0.255.0"))),
            (ip("198.51.100.8"), Some(ip("0.0.0.0"))),
            (ip("198.51.100.9"), Some(ip("ffff::"))),
            (ip("100.64.0.2"), Some(ip("255.255.255.255"))),
        ];
        let protection = protection_from(interfaces);
        let addresses: Vec<String> = protection.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(
            addresses,
            ["192.168.1.23", "10.88.0.1", "2001:db8:1:2::17", "203.0.113.9", "198.51.100.7", "198.51.100.8", "198.51.100.9", "100.64.0.2"],
            "every address but loopback and link-local, once"
        );
        assert_eq!(
            protection.networks,
            ["192.168.1.0/24", "10.88.0.0/16", "2001:db8:1:2::/64", "100.64.0.2/32"],
            "host bits cleared; no network for a missing, non-prefix, empty or foreign netmask"
        );
        assert_eq!(
            protection.request().to_string(),
            r#"{"protect":{"addresses":["192.168.1.23","10.88.0.1","2001:db8:1:2::17","203.0.113.9","198.51.100.7","198.51.100.8","198.51.100.9","100.64.0.2"],"networks":["192.168.1.0/24","10.88.0.0/16","2001:db8:1:2::/64","100.64.0.2/32"]}}"#
        );
    }

    #[test]
    fn this_hosts_interfaces_can_be_read() {
        let protection = host_protection().expect("getifaddrs");
        assert!(protection.addresses.iter().all(|address| !address.is_loopback()), "{protection:?}");
    }
}
