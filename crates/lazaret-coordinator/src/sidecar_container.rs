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
use lazaret_protocol::sidecar::{CredentialEndpoint, SidecarEvent, SidecarReply, SidecarRequest};
use lazaret_protocol::NetworkPolicy;
use sha2::{Digest, Sha256};

use crate::bail;
use crate::bounded_process::output_bounded_blocking as bounded;
use crate::error::{Context, Result};
use crate::podman::Podman;
use lazaret_core::bounds;

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
    let mut build = podman.command();
    build.args(["build", "--quiet", "--tag", &tag]).arg(&context);
    let output = bounded(build, bounds::SIDECAR_IMAGE_BUILD, &format!("podman build of the sidecar image {tag}"));
    crate::cleanup::remove_dir_all(&context);
    let output = output?;
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
    /// Networks out of reach as a whole (`address/length`, host bits
    /// cleared): rootless podman's user-mode network.
    pub blocked: Vec<String>,
    /// `address/length` with the host bits cleared.
    pub networks: Vec<String>,
}

impl HostProtection {
    /// The sidecar's `protect` request.
    pub fn request(&self) -> SidecarRequest {
        SidecarRequest::Protect { addresses: self.protected(), networks: self.networks.clone() }
    }

    /// What the sidecar keeps out of reach: the addresses, then the blocked networks.
    pub fn protected(&self) -> Vec<String> {
        self.addresses.iter().map(ToString::to_string).chain(self.blocked.iter().cloned()).collect()
    }

    /// Adds what `other` protects.
    fn merge(&mut self, other: &HostProtection) {
        self.add_addresses(other.addresses.iter().copied());
        for network in &other.blocked {
            if !self.blocked.contains(network) {
                self.blocked.push(network.clone());
            }
        }
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
        if is_loopback_or_link_local(address) {
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

/// Addresses of a namespace's own: the sandbox's namespace has its own, and
/// the sidecar never opens them.
fn is_loopback_or_link_local(address: IpAddr) -> bool {
    let link_local = match address {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    address.is_loopback() || link_local
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
/// host's interfaces every [`PROTECTION_REFRESH`] and sends them, with what
/// stays protected for the sidecar's life (`fixed`: the network's gateways,
/// rootless podman's namespace), whenever they changed since `sent`. Runs
/// until the task is aborted; a failed read or send is tried again at the
/// next tick.
pub async fn refresh_protection(socket: PathBuf, fixed: HostProtection, mut sent: HostProtection) {
    let mut ticks = tokio::time::interval(PROTECTION_REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(now) = protection_now(&fixed) else { continue };
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

/// What the sidecar must protect now: the host's interfaces and `fixed`
/// (`None` when the interfaces cannot be listed).
pub fn protection_now(fixed: &HostProtection) -> Option<HostProtection> {
    let mut now = host_protection()?;
    now.merge(fixed);
    Some(now)
}

/// The gateway addresses of a podman network's subnets.
fn network_gateways(podman: &Podman, network: &str) -> Vec<IpAddr> {
    let mut command = podman.command();
    command.args(["network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}} {{end}}", network]);
    let output = bounded(command, bounds::PODMAN_QUERY, &format!("podman network inspect {network}"));
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
#[derive(Clone)]
pub struct StartedSidecar {
    /// Its control socket.
    pub socket: PathBuf,
    /// What stays protected for its life: the podman network's gateways
    /// (like the host's addresses) and, rootless, podman's network namespace.
    pub fixed: HostProtection,
    /// What it was told to protect (`fixed` included).
    pub protection: HostProtection,
    /// Its credential endpoints, keys included: given again to a sidecar
    /// that was started again.
    pub credentials: Vec<CredentialEndpoint>,
}

/// Where CA bundles usually are (Debian and Ubuntu, Fedora and RHEL,
/// openSUSE, Alpine and Arch).
const CA_BUNDLES: [&str; 4] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"];

/// The CA bundle credential origins are checked against: `[network]
/// ca_bundle`, else the first of [`CA_BUNDLES`] that exists.
pub fn ca_bundle(resolved: &ResolvedProfile) -> Result<PathBuf> {
    ca_bundle_from(resolved.ca_bundle.as_deref())
}

/// How many PEM certificates the bundle at `path` holds (`lazaret doctor`).
pub fn certificates_in(path: &Path) -> Result<usize> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|error| crate::format_err!("cannot read {}: {error}", path.display()))?;
    Ok(rustls::pki_types::CertificateDer::pem_slice_iter(&pem).filter(Result::is_ok).count())
}

/// As [`ca_bundle`], given `[network] ca_bundle` (`lazaret doctor`).
pub fn ca_bundle_from(configured: Option<&Path>) -> Result<PathBuf> {
    if let Some(configured) = configured {
        return Ok(configured.to_path_buf());
    }
    CA_BUNDLES.iter().map(PathBuf::from).find(|path| path.is_file()).ok_or_else(|| {
        crate::format_err!("no CA bundle found for the credential endpoints (looked at {}); set [network] ca_bundle", CA_BUNDLES.join(", "))
    })
}

/// Starts the sidecar and waits until its policy is in force (its control
/// socket exists), then gives it the credential endpoints (`credentials`,
/// keys included: on the control socket, never in an argument).
/// `control_dir` is mounted into the sidecar only.
pub fn start(
    podman: &Podman,
    resolved: &ResolvedProfile,
    image: &str,
    control_dir: &Path,
    credentials: Vec<CredentialEndpoint>,
) -> Result<StartedSidecar> {
    crate::private_dirs::ensure_private_dir(control_dir)?;
    let socket = control_dir.join("control.sock");
    crate::cleanup::remove_file(&socket);
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
    if !credentials.is_empty() {
        let bundle = ca_bundle(resolved)?;
        command.arg(format!("--volume={}:{}:ro", bundle.display(), lazaret_protocol::sidecar::CA_BUNDLE_IN_SIDECAR));
    }
    // PID 1 supervises the sidecar proper, so that its death leaves the
    // network namespace (which the sandbox shares) in place.
    command.arg(image).arg("supervise");
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
    let mut fixed = HostProtection { addresses: gateways.clone(), ..HostProtection::default() };
    if !nix::unistd::geteuid().is_root() {
        fixed.merge(&rootless_namespace(podman, &gateways, &protection)?);
    }
    protection.merge(&fixed);
    for protected in protection.protected() {
        command.arg(format!("--protect={protected}"));
    }
    for network in &protection.networks {
        command.arg(format!("--protect-net={network}"));
    }
    command.arg("--control").arg(format!("{CONTROL_DIR_IN_SIDECAR}/control.sock"));
    let output = bounded(command, bounds::PODMAN_RUN, &format!("podman run of the Network Sidecar {}", domain.sidecar_name))?;
    if !output.status.success() {
        bail!("podman could not start the Network Sidecar: {}", crate::podman::explain(&output.stderr));
    }
    let started = Instant::now();
    let mut polls = 0u32;
    while !socket.exists() {
        polls += 1;
        let late = format!("did not come up within {} s", bounds::SIDECAR_START.as_secs());
        let problem = if started.elapsed() > bounds::SIDECAR_START {
            Some(late.as_str())
        } else if polls.is_multiple_of(25) && !podman.container_running(&domain.sidecar_name)? {
            Some("stopped")
        } else {
            None
        };
        if let Some(problem) = problem {
            let mut command = podman.command();
            command.args(["logs", &domain.sidecar_name]);
            let logs = bounded(command, bounds::PODMAN_QUERY, &format!("podman logs {}", domain.sidecar_name))
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            bail!("the Network Sidecar {problem}: {}", logs.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !credentials.is_empty() {
        control(&socket, &SidecarRequest::Credentials { endpoints: credentials.clone() })
            .map_err(|error| crate::format_err!("the Network Sidecar refused the credential endpoints: {}", error.chained()))?;
    }
    Ok(StartedSidecar { socket, fixed, protection, credentials })
}

/// What rootless podman's network namespace holds (issue 33 finding 4: under
/// `allow_egress = ["10.0.0.0/8"]` the sandbox reached slirp4netns's
/// resolver at 10.0.2.3, which answers any name from the host's resolver, and
/// the namespace's own 10.0.2.100): every address of its interfaces, the
/// networks of those that are not a podman network's bridge (`gateways`)
/// nor one of the host's own networks (with pasta the namespace copies the
/// host's, which stay internal only for a name's answers), and its
/// resolvers. Read from the namespace podman made, as podman configured it
/// (slirp4netns's `cidr`, pasta's options), at each start.
fn rootless_namespace(podman: &Podman, gateways: &[IpAddr], host: &HostProtection) -> Result<HostProtection> {
    let mut command = podman.command();
    command.args(["unshare", "--rootless-netns", "sh", "-c", "ip -o address show; cat /etc/resolv.conf"]);
    let output = bounded(command, bounds::PODMAN_QUERY, "podman unshare --rootless-netns")?;
    if !output.status.success() {
        bail!(
            "cannot read rootless podman's network namespace, so its resolver could not be kept out of the sandbox's reach: {}",
            crate::podman::explain(&output.stderr)
        );
    }
    Ok(namespace_protection(&String::from_utf8_lossy(&output.stdout), gateways, host))
}

/// What the sidecar keeps out of reach of rootless podman's namespace on
/// `podman_network` (`lazaret doctor` shows it, and warns when an allow entry
/// names it exactly).
pub fn rootless_namespace_on(podman: &Podman, podman_network: &str) -> Result<HostProtection> {
    let gateways = network_gateways(podman, podman_network);
    rootless_namespace(podman, &gateways, &host_protection().unwrap_or_default())
}

/// [`rootless_namespace`] from `ip -o address show` and `resolv.conf` text.
fn namespace_protection(text: &str, gateways: &[IpAddr], host: &HostProtection) -> HostProtection {
    let mut protection = HostProtection::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["nameserver", server, ..] = words.as_slice() {
            if let Ok(address) = server.parse::<IpAddr>() {
                protection.add_addresses([address]);
            }
            continue;
        }
        let Some(index) = words.iter().position(|word| *word == "inet" || *word == "inet6") else { continue };
        let Some((address, length)) = words.get(index + 1).and_then(|cidr| cidr.split_once('/')) else { continue };
        let (Ok(address), Ok(length)) = (address.parse::<IpAddr>(), length.parse::<u32>()) else { continue };
        if is_loopback_or_link_local(address) {
            continue;
        }
        protection.add_addresses([address]);
        let Some(network) = prefix_netmask(address, length).and_then(|netmask| network_of(address, netmask)) else { continue };
        if !gateways.contains(&address) && !host.networks.contains(&network) && !protection.blocked.contains(&network) {
            protection.blocked.push(network);
        }
    }
    // What a blocked network holds (an address, a smaller network) is
    // protected with it, so that an allow of exactly that network opens all
    // of it.
    let blocked = protection.blocked.clone();
    protection.addresses.retain(|address| !blocked.iter().any(|network| in_network(*address, network)));
    protection.blocked.retain(|inner| !blocked.iter().any(|outer| outer != inner && contains_network(outer, inner)));
    protection
}

/// Whether the network `outer` holds the network `inner` (both `address/length`).
fn contains_network(outer: &str, inner: &str) -> bool {
    let length = |network: &str| network.split_once('/').and_then(|(_, length)| length.parse::<u32>().ok());
    let address = inner.split_once('/').and_then(|(address, _)| address.parse::<IpAddr>().ok());
    match (length(outer), length(inner), address) {
        (Some(outer_length), Some(inner_length), Some(address)) => outer_length <= inner_length && in_network(address, outer),
        _ => false,
    }
}

/// Whether `address` lies in `network` (`address/length`).
fn in_network(address: IpAddr, network: &str) -> bool {
    let Some(length) = network.split_once('/').and_then(|(_, length)| length.parse().ok()) else { return false };
    prefix_netmask(address, length).and_then(|netmask| network_of(address, netmask)).as_deref() == Some(network)
}

/// The netmask of a prefix length.
fn prefix_netmask(address: IpAddr, length: u32) -> Option<IpAddr> {
    match address {
        IpAddr::V4(_) if length <= 32 => Some(IpAddr::V4(std::net::Ipv4Addr::from(u32::MAX.checked_shl(32 - length).unwrap_or(0)))),
        IpAddr::V6(_) if length <= 128 => Some(IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX.checked_shl(128 - length).unwrap_or(0)))),
        _ => None,
    }
}

/// The sidecar's event stream (a `watch` request): one event per line,
/// until the sidecar goes.
pub struct SidecarEvents {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::UnixStream>>,
}

impl SidecarEvents {
    pub async fn connect(socket: &Path) -> Result<SidecarEvents> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stream = tokio::net::UnixStream::connect(socket).await.with_context(|| format!("cannot reach {}", socket.display()))?;
        stream.write_all(format!("{}\n", serde_json::to_string(&SidecarRequest::Watch {})?).as_bytes()).await?;
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let first = lines.next_line().await?.unwrap_or_default();
        match serde_json::from_str::<SidecarReply>(&first) {
            Ok(SidecarReply::Watching) => Ok(SidecarEvents { lines }),
            Ok(SidecarReply::Error { message }) => bail!("the Network Sidecar refused to stream events: {message}"),
            _ => bail!("the Network Sidecar answered a watch request with {first:?}"),
        }
    }

    /// The next event; `None` when the stream ends. A line that is no event
    /// this coordinator knows is logged and skipped.
    pub async fn next(&mut self) -> Result<Option<SidecarEvent>> {
        while let Some(line) = self.lines.next_line().await? {
            match serde_json::from_str(&line) {
                Ok(event) => return Ok(Some(event)),
                Err(error) => tracing::warn!(%line, %error, "the Network Sidecar sent a line that is no event"),
            }
        }
        Ok(None)
    }
}

/// One request on the sidecar's control socket (a JSON line each way): the
/// policy in force after it, or the sidecar's reason for refusing it.
pub fn control(socket: &Path, request: &SidecarRequest) -> Result<NetworkPolicy> {
    let stream = UnixStream::connect(socket).with_context(|| format!("cannot reach the Network Sidecar at {}", socket.display()))?;
    stream.set_read_timeout(Some(bounds::SIDECAR_CONTROL))?;
    stream.set_write_timeout(Some(bounds::SIDECAR_CONTROL))?;
    let mut writer = stream.try_clone()?;
    writeln!(writer, "{}", serde_json::to_string(request)?)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    match serde_json::from_str::<SidecarReply>(&line)
        .with_context(|| format!("the Network Sidecar answered in an unexpected form: {line:?}"))?
    {
        SidecarReply::Policy(policy) => Ok(policy),
        SidecarReply::Error { message } => bail!("{message}"),
        SidecarReply::Watching => bail!("the Network Sidecar answered a request with an event stream"),
    }
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
            serde_json::to_string(&protection.request()).unwrap(),
            r#"{"type":"protect","addresses":["192.168.1.23","10.88.0.1","2001:db8:1:2::17","203.0.113.9","198.51.100.7","198.51.100.8","198.51.100.9","100.64.0.2"],"networks":["192.168.1.0/24","10.88.0.0/16","2001:db8:1:2::/64","100.64.0.2/32"]}"#
        );
    }

    #[test]
    fn rootless_podmans_namespace_is_protected_whole_but_for_bridges_and_the_hosts_networks() {
        let text = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever
1: lo    inet 10.0.2.3/32 scope global lo\\       valid_lft forever preferred_lft forever
2: tap0    inet 10.0.2.100/24 brd 10.0.2.255 scope global tap0\\       valid_lft forever preferred_lft forever
2: tap0    inet6 fd00::f880:6dff:fe48:682e/64 scope global dynamic mngtmpaddr \\       valid_lft 86391sec preferred_lft 14391sec
2: tap0    inet6 fe80::f880:6dff:fe48:682e/64 scope link \\       valid_lft forever preferred_lft forever
3: cni-podman1    inet 10.213.7.1/24 brd 10.213.7.255 scope global cni-podman1\\       valid_lft forever preferred_lft forever
4: eth0    inet 192.168.1.23/24 brd 192.168.1.255 scope global eth0\\       valid_lft forever preferred_lft forever
nameserver 10.0.2.3
nameserver 10.255.255.53
options edns0
";
        let host = HostProtection { networks: vec!["192.168.1.0/24".into()], ..HostProtection::default() };
        let protection = namespace_protection(text, &[ip("10.213.7.1")], &host);
        let addresses: Vec<String> = protection.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(addresses, ["10.213.7.1", "192.168.1.23", "10.255.255.53"], "what a blocked network holds goes with it");
        assert_eq!(protection.blocked, ["10.0.2.0/24", "fd00::/64"], "slirp4netns's networks; not the bridge's, not the host's");
        let SidecarRequest::Protect { addresses, .. } = protection.request() else { panic!("{:?}", protection.request()) };
        assert!(addresses.ends_with(&["10.255.255.53".to_owned(), "10.0.2.0/24".to_owned(), "fd00::/64".to_owned()]), "{addresses:?}");
        assert!(in_network(ip("10.0.2.3"), "10.0.2.0/24") && !in_network(ip("10.0.3.3"), "10.0.2.0/24"));
        assert!(contains_network("10.0.2.0/24", "10.0.2.3/32") && !contains_network("10.0.2.3/32", "10.0.2.0/24"));
    }

    #[test]
    fn this_hosts_interfaces_can_be_read() {
        let protection = host_protection().expect("getifaddrs");
        assert!(protection.addresses.iter().all(|address| !address.is_loopback()), "{protection:?}");
    }
}
