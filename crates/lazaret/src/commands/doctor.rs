//! `lazaret doctor`: one line per prerequisite, each pass, warn or fail with
//! a one-line fix. Version strings are not trusted alone: doctor starts a
//! throwaway gVisor sandbox with exactly the podman arguments the
//! coordinator uses and, when a profile allows egress, a throwaway container
//! shaped like the Network Sidecar, and reports podman's own error with a fix.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;
use lazaret_coordinator::helper_binaries::{self, Linkage};
use lazaret_coordinator::podman::Podman;
use lazaret_core::config::DEFAULT_IMAGE;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check { name, status: Status::Pass, detail: detail.into(), fix: None }
    }
    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }
    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

pub fn run(config_path: Option<&Path>, json: bool) -> Result<u8> {
    let checks = all_checks(config_path);
    let failed = checks.iter().any(|check| check.status == Status::Fail);
    if json {
        super::print_json(&serde_json::json!({ "ok": !failed, "checks": checks }))?;
    } else {
        for check in &checks {
            let label = match check.status {
                Status::Pass => "pass",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
            };
            println!("[{label}] {:<22} {}", check.name, check.detail);
            if let Some(fix) = &check.fix {
                println!("       {:<22} fix: {fix}", "");
            }
        }
        println!("{}", if failed { "some checks failed" } else { "all required checks passed" });
    }
    Ok(if failed { 1 } else { 0 })
}

fn all_checks(config_path: Option<&Path>) -> Vec<Check> {
    let uid = nix::unistd::getuid().as_raw();
    let config = crate::workspace::load_config(config_path);
    let selected = lazaret_coordinator::runsc::select(config.as_ref().ok().and_then(|config| config.runsc.as_deref()));
    let mut checks = vec![
        tool("podman", &["--version"], "apt-get install podman"),
        runsc_choice(&selected),
        runsc_features(selected.as_ref().ok()),
        netstack(selected.as_ref().ok().map(|selected| selected.version.as_str())),
        tool("runc", &["--version"], "apt-get install runc"),
        tool("fuse-overlayfs", &["--version"], "apt-get install fuse-overlayfs"),
        state_anchor_overlay(),
        git(),
    ];
    checks.extend(rootless(uid));
    checks.extend(helpers());
    checks.push(default_image());
    if let Err(error) = &config {
        checks.push(Check::fail("configuration", format!("{error:#}"), "lazaret config check"));
    }
    let host = lazaret_coordinator::resource_limits::Host::probe();
    let global_limits = config.as_ref().map(|config| config.limits).unwrap_or_default();
    let plan = lazaret_coordinator::resource_limits::plan(&global_limits, &host);
    checks.extend(limits(&plan, None));
    if let Ok(config) = &config {
        for profile in config.profiles.values().filter(|profile| profile.limits != Default::default()) {
            checks
                .extend(limits(&lazaret_coordinator::resource_limits::plan(&profile.limits.or(config.limits), &host), Some(&profile.name)));
        }
    }
    if let Ok(config) = &config {
        if config.profiles.values().any(|profile| !profile.credentials.is_empty()) {
            checks.push(credential_ca_bundle(config.ca_bundle.as_deref()));
        }
    }
    checks.extend(probes(config.ok().as_ref(), selected.ok().as_ref(), &plan));
    checks
}

/// With credential endpoints configured: the CA bundle the sidecar checks
/// their origins against exists and holds certificates.
fn credential_ca_bundle(configured: Option<&Path>) -> Check {
    let fix = "set [network] ca_bundle to the system's CA certificates (PEM), e.g. /etc/ssl/certs/ca-certificates.crt";
    let path = match lazaret_coordinator::sidecar_container::ca_bundle_from(configured) {
        Ok(path) => path,
        Err(error) => return Check::fail("credential CA bundle", error.to_string(), fix),
    };
    match lazaret_coordinator::sidecar_container::certificates_in(&path) {
        Ok(0) => Check::fail("credential CA bundle", format!("{} holds no PEM certificate", path.display()), fix),
        Ok(count) => Check::pass("credential CA bundle", format!("{count} certificates in {}", path.display())),
        Err(error) => Check::fail("credential CA bundle", error.to_string(), fix),
    }
}

/// One check per resource limit (`[limits]`, or a profile's own): its value
/// and whether this host enforces it, and how or why not.
fn limits(plan: &lazaret_coordinator::resource_limits::Plan, profile: Option<&str>) -> Vec<Check> {
    use lazaret_coordinator::resource_limits::Enforcement;
    let scope = profile.map_or_else(String::new, |profile| format!("profile `{profile}`: "));
    plan.reports()
        .into_iter()
        .map(|report| {
            let name = match report.name {
                "memory" => "limit: memory",
                "processes" => "limit: processes",
                _ => "limit: cpus",
            };
            match &report.enforcement {
                Enforcement::Enforced(how) => Check::pass(name, format!("{scope}{}: enforced by {how}", report.value)),
                Enforcement::Unlimited(why) => Check::pass(name, format!("{scope}no limit ({why})")),
                Enforcement::NotEnforceable(why) => Check::warn(
                    name,
                    format!("{scope}{}: not enforceable here: {why}", report.value),
                    "run Lazaret as root (rootful podman with host cgroups) where this limit matters",
                ),
            }
        })
        .collect()
}

/// Which overlay new persistent directories get here: kernel overlayfs when
/// a probe mount succeeds, else fuse-overlayfs (with the kernel's reason).
fn state_anchor_overlay() -> Check {
    match lazaret_coordinator::state_anchor::probe_overlay() {
        (kind, None) => Check::pass("state anchor overlay", format!("{} overlayfs", kind.name())),
        (kind, Some(reason)) => {
            Check::pass("state anchor overlay", format!("{} overlayfs (kernel overlayfs not usable: {reason})", kind.name()))
        }
    }
}

/// Which runsc the sandboxes run with, and why (`$LAZARET_RUNSC`,
/// `[runtime] runsc`, or the newest found).
fn runsc_choice(selected: &lazaret_coordinator::Result<lazaret_coordinator::runsc::Selected>) -> Check {
    match selected {
        Ok(selected) => Check::pass("runsc", format!("{} ({}; {})", selected.path.display(), selected.version, selected.why)),
        Err(error) => Check::fail("runsc", error.chained(), "apt-get install runsc, or scripts/install-deps for a current one"),
    }
}

/// The features of the chosen runsc that Lazaret relies on.
fn runsc_features(selected: Option<&lazaret_coordinator::runsc::Selected>) -> Check {
    const NAME: &str = "runsc features";
    let Some(path) = selected.map(|selected| selected.path.clone()) else {
        return Check::fail(NAME, "no usable runsc", "apt-get install runsc");
    };
    let Some(features) = lazaret_coordinator::runsc::Features::probe(&path) else {
        return Check::fail(NAME, format!("{} does not run", path.display()), "reinstall runsc");
    };
    let platform = features.default_platform.clone().unwrap_or_else(|| "unknown".to_owned());
    let detail = format!(
        "{}: {} (platform {platform}; available: {}; directfs: {}; rootfs overlay: {}; host-uds: {})",
        path.display(),
        features.version,
        if features.platforms.is_empty() { "unknown".to_owned() } else { features.platforms.join(", ") },
        yes_no(features.directfs),
        yes_no(features.overlay2),
        yes_no(features.host_uds),
    );
    if !features.host_uds || !features.ignore_cgroups {
        return Check::fail(
            NAME,
            format!("{detail}: Lazaret needs --host-uds (Escalation Socket) and --ignore-cgroups"),
            "install a newer runsc (scripts/install-deps builds one)",
        );
    }
    if !features.fast_file_access() {
        return Check::warn(
            NAME,
            format!("{detail}: file-heavy work (git status, builds, package installs) will be slow, about 100x the host"),
            "install a current runsc with systrap and directfs: scripts/install-deps builds one from the Go module gvisor.dev/gvisor",
        );
    }
    Check::pass(NAME, detail)
}

fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

/// Real starts, one each: a gVisor sandbox with the coordinator's podman
/// arguments and, when some profile allows egress, a runc container with the
/// sidecar's. Both run the static sidecar binary's `--version` from the
/// sidecar image (`FROM scratch`, which Lazaret builds anyway), under a
/// throwaway name, removed afterwards.
fn probes(
    config: Option<&lazaret_core::config::Config>,
    runsc: Option<&lazaret_coordinator::runsc::Selected>,
    limits: &lazaret_coordinator::resource_limits::Plan,
) -> Vec<Check> {
    let Some(runsc) = runsc else {
        return vec![Check::fail("sandbox start", "no usable runsc to start a sandbox with", "apt-get install runsc")];
    };
    let podman = Podman::default();
    let image = match lazaret_coordinator::sidecar_container::ensure_image(&podman) {
        Ok(image) => image,
        Err(error) => {
            let message = error.chained();
            let fix = match lazaret_coordinator::podman::hint(&message) {
                Some(hint) => hint.to_owned(),
                None => "scripts/build, then run doctor again".to_owned(),
            };
            return vec![Check::fail("sandbox start", format!("cannot build the probe image: {message}"), fix)];
        }
    };
    let mut sandbox = lazaret_coordinator::backend::sandbox::runtime_arguments(&runsc.path, None, limits);
    sandbox.push(lazaret_coordinator::backend::sandbox::HOST_UDS_ARGUMENT.to_owned());
    let mut checks = vec![probe(&podman, "sandbox start", "a gVisor sandbox (runsc, --init, limits, no network)", &sandbox, &image)];
    let egress_network = config.and_then(|config| {
        let any_egress = !config.allow_egress.is_empty() || config.profiles.values().any(|profile| !profile.allow_egress.is_empty());
        any_egress.then(|| config.podman_network.clone())
    });
    match egress_network {
        Some(network) => {
            let arguments = lazaret_coordinator::sidecar_container::container_arguments(&network);
            checks.push(probe(
                &podman,
                "sidecar start",
                &format!("a Network Sidecar (runc, NET_ADMIN, network {network})"),
                &arguments,
                &image,
            ));
            if !nix::unistd::geteuid().is_root() {
                checks.extend(config.map(|config| rootless_namespace(config, &podman, &network)));
            }
        }
        None => checks.push(Check::pass("sidecar start", "not needed: no profile allows egress")),
    }
    checks
}

/// Rootless: what the sidecar keeps out of the sandbox's reach of podman's
/// own network namespace, and a warning for an allow entry that names it
/// exactly (only such an entry opens it).
fn rootless_namespace(config: &lazaret_core::config::Config, podman: &Podman, network: &str) -> Check {
    const NAME: &str = "rootless network namespace";
    let protection = match lazaret_coordinator::sidecar_container::rootless_namespace_on(podman, network) {
        Ok(protection) => protection,
        Err(error) => return Check::fail(NAME, error.chained(), "podman unshare --rootless-netns ip address show"),
    };
    let entries = config.allow_egress.iter().chain(config.profiles.values().flat_map(|profile| profile.allow_egress.iter()));
    let mut exact: Vec<String> = entries
        .filter_map(|entry| match entry {
            lazaret_core::egress::EgressRule::Cidr(net) => {
                let host = net.prefix_len() == net.max_prefix_len() && protection.addresses.contains(&net.addr());
                (host || protection.blocked.contains(&net.trunc().to_string())).then(|| net.to_string())
            }
            lazaret_core::egress::EgressRule::Domain(_) => None,
        })
        .collect();
    exact.sort();
    exact.dedup();
    if exact.is_empty() {
        return Check::pass(NAME, format!("kept out of the sandbox's reach: {}", protection.protected().join(", ")));
    }
    Check::warn(
        NAME,
        format!(
            "allow_egress names {} exactly, so the sandbox can reach rootless podman's own network namespace (slirp4netns's \
             resolver answers any name, around the name allowlist)",
            exact.join(", ")
        ),
        "remove that entry unless a sandbox must reach podman's network namespace",
    )
}

fn probe(podman: &Podman, name: &'static str, what: &str, arguments: &[String], image: &str) -> Check {
    let container = match lazaret_core::ids::random_hex(6) {
        Ok(suffix) => format!("lazaret-doctor-{suffix}"),
        Err(error) => return Check::fail(name, format!("{error:#}"), "check /dev/urandom"),
    };
    let started = std::time::Instant::now();
    let output = podman
        .command()
        .args(["run", "--rm", "--name", &container])
        .args(arguments)
        .args(["--entrypoint", "/lazaret-sidecar", image, "--version"])
        .stdin(Stdio::null())
        .output();
    // `--rm` removes it; a start that failed half-way can leave it created.
    let _ = podman.command().args(["rm", "--force", "--time=0", "--ignore", &container]).stdin(Stdio::null()).output();
    let elapsed = started.elapsed();
    match output {
        Err(error) => Check::fail(name, format!("cannot run {}: {error}", podman.program()), "apt-get install podman"),
        Ok(output) if output.status.success() => Check::pass(name, format!("{what} started and ran in {:.2} s", elapsed.as_secs_f64())),
        Ok(output) => {
            let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            let message = if message.is_empty() { format!("exit status {}", output.status) } else { message };
            Check::fail(name, format!("podman could not start {what}: {message}"), advice_for_podman_error(&message))
        }
    }
}

/// A one-line fix for what podman said when a container did not start.
pub fn advice_for_podman_error(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    if let Some(hint) = lazaret_coordinator::podman::hint(message) {
        return hint.to_owned();
    }
    let advice = if lower.contains("container-init binary not found") || lower.contains("catatonit") {
        "podman's --init needs catatonit: apt-get install catatonit (a Recommends of podman, left out by --no-install-recommends), \
         or set init_path in containers.conf to an existing catatonit"
    } else if lower.contains("cannot run with network enabled in root network namespace") {
        "this runsc's netstack does not work on this kernel (DECISIONS D5): Lazaret must pass network=none or network=host; report this"
    } else if lower.contains("setrlimit") {
        "podman's ulimits exceed this machine's hard limits: raise them (ulimit -Hn, -Hu) or report this"
    } else if lower.contains("runsc") && (lower.contains("not found") || lower.contains("no such file")) {
        "apt-get install runsc"
    } else if lower.contains("runc") && (lower.contains("not found") || lower.contains("no such file")) {
        "apt-get install runc"
    } else if lower.contains("newuidmap") || lower.contains("newgidmap") {
        "apt-get install uidmap, and give the user /etc/subuid and /etc/subgid entries"
    } else if lower.contains("slirp4netns") || lower.contains("/dev/net/tun") {
        "apt-get install slirp4netns, and make /dev/net/tun readable and writable for the user (chmod 0666 /dev/net/tun)"
    } else if lower.contains("conmon") {
        "apt-get install conmon"
    } else if lower.contains("network") && (lower.contains("not found") || lower.contains("unable to find")) {
        "create the podman network named by [network] podman_network, or name an existing one"
    } else if lower.contains("cni") || lower.contains("plugin") {
        "apt-get install containernetworking-plugins"
    } else if lower.contains("cgroup") {
        "rootless on hybrid cgroups: keep runc as podman's runtime for the sidecar, or use --cgroups=disabled"
    } else {
        "see podman's message above; `lazaret doctor` ran exactly what a sandbox start runs"
    };
    advice.to_owned()
}

/// First non-empty line of a command's output (stdout, else stderr).
fn first_line_of(program: &str, arguments: &[&str]) -> Option<String> {
    let output = Command::new(program).args(arguments).stdin(Stdio::null()).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = [output.stdout, output.stderr].concat();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines.iter().find(|line| line.contains(program)).or(lines.first()).map(|line| (*line).to_owned())
}

fn tool(name: &'static str, arguments: &[&str], fix: &str) -> Check {
    match first_line_of(name, arguments) {
        Some(version) => Check::pass(name, version),
        None => Check::fail(name, format!("`{name}` not found on PATH or not runnable"), fix),
    }
}

/// DECISIONS D5: Debian's runsc (dated 2024-07-29 or older) refuses netstack
/// mode on kernels that expose `net.core.rmem_default` per namespace.
/// Lazaret does not need netstack: the sandbox uses hostinet inside the
/// sidecar's namespace, so this is informational.
fn netstack(runsc_version: Option<&str>) -> Check {
    const NAME: &str = "runsc netstack (D5)";
    let Some(version) = runsc_version else {
        return Check::fail(NAME, "runsc missing", "apt-get install runsc");
    };
    let date = version.split(|c: char| !c.is_ascii_digit()).find(|part| part.len() == 8).and_then(|part| part.parse::<u32>().ok());
    let per_namespace_rmem = Path::new("/proc/sys/net/core/rmem_default").exists();
    match date {
        Some(date) if date <= 20_240_729 && per_namespace_rmem => Check::pass(
            NAME,
            format!(
                "netstack unavailable here (runsc {date}, gVisor issue 10704); Lazaret uses network=host inside the sidecar's namespace"
            ),
        ),
        Some(date) => Check::pass(NAME, format!("runsc {date}: netstack expected to work; Lazaret still routes through the sidecar")),
        None => Check::warn(NAME, format!("cannot read a build date from `{version}`"), "check `runsc --version`"),
    }
}

/// Git releases with the fixes for CVE-2024-32002/32004/32465 (the
/// 2.39.4 series): the minimum patched release of each minor line.
const PATCHED_GIT: [(u32, u32, u32); 7] = [(2, 39, 4), (2, 40, 2), (2, 41, 1), (2, 42, 2), (2, 43, 4), (2, 44, 1), (2, 45, 1)];

pub fn git_is_patched(version: (u32, u32, u32)) -> bool {
    let (major, minor, _) = version;
    if (major, minor) > (2, 45) {
        return true;
    }
    PATCHED_GIT.iter().any(|&(pm, pn, pp)| (major, minor) == (pm, pn) && version >= (pm, pn, pp))
}

fn parse_git_version(line: &str) -> Option<(u32, u32, u32)> {
    let number = line.split_whitespace().nth(2)?;
    let mut parts = number.split('.').map(|part| part.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0)))
}

fn git() -> Check {
    const NAME: &str = "git";
    let Some(line) = first_line_of("git", &["--version"]) else {
        return Check::fail(NAME, "git not found", "apt-get install git");
    };
    match parse_git_version(&line) {
        Some(version) if git_is_patched(version) => Check::pass(NAME, line),
        Some(_) => Check::warn(
            NAME,
            format!("{line} predates the 2.39.4 security series"),
            "upgrade git (apt-get install git from bookworm-security)",
        ),
        None => Check::warn(NAME, format!("cannot parse `{line}`"), "check `git --version`"),
    }
}

fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|user| user.name)
}

fn has_subid_entry(file: &str, uid: u32, name: Option<&str>) -> bool {
    std::fs::read_to_string(file).is_ok_and(|text| {
        text.lines().any(|line| {
            let owner = line.split(':').next().unwrap_or("");
            owner == uid.to_string() || Some(owner) == name
        })
    })
}

fn accessible(path: &str) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK).is_ok()
}

fn rootless(uid: u32) -> Vec<Check> {
    let mut checks = Vec::new();
    if uid == 0 {
        checks.push(Check::pass("rootless", "running as root: subuid/subgid and device access are not needed"));
    } else {
        let name = user_name(uid);
        for (check, file) in [("subuid", "/etc/subuid"), ("subgid", "/etc/subgid")] {
            if has_subid_entry(file, uid, name.as_deref()) {
                checks.push(Check::pass(check, format!("{file} has an entry for uid {uid}")));
            } else {
                let who = name.clone().unwrap_or_else(|| uid.to_string());
                checks.push(Check::fail(
                    check,
                    format!("{file} has no entry for {who}"),
                    format!("usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {who}"),
                ));
            }
        }
        for (check, device, why) in [
            ("/dev/net/tun", "/dev/net/tun", "rootless networking (slirp4netns, pasta)"),
            ("/dev/fuse", "/dev/fuse", "State Anchor overlays (fuse-overlayfs)"),
        ] {
            if accessible(device) {
                checks.push(Check::pass(check, format!("readable and writable ({why})")));
            } else {
                checks.push(Check::warn(
                    check,
                    format!("not readable and writable by uid {uid}: needed for {why}"),
                    format!("chmod 0666 {device} (as root)"),
                ));
            }
        }
    }
    checks.push(match std::env::var("XDG_RUNTIME_DIR") {
        Ok(dir) if Path::new(&dir).is_dir() => Check::pass("XDG_RUNTIME_DIR", dir),
        Ok(dir) => Check::warn("XDG_RUNTIME_DIR", format!("{dir} does not exist"), format!("mkdir -m 0700 {dir} (owned by uid {uid})")),
        Err(_) if uid == 0 => Check::pass("XDG_RUNTIME_DIR", format!("unset; sockets go to /tmp/lazaret-{uid}")),
        Err(_) => Check::warn(
            "XDG_RUNTIME_DIR",
            format!("unset; sockets go to /tmp/lazaret-{uid}"),
            format!("export XDG_RUNTIME_DIR=/run/user/{uid} (a 0700 directory you own)"),
        ),
    });
    let max_namespaces =
        std::fs::read_to_string("/proc/sys/user/max_user_namespaces").ok().and_then(|text| text.trim().parse::<u64>().ok());
    let unprivileged_clone = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone").ok().map(|text| text.trim() == "1");
    checks.push(match (max_namespaces, unprivileged_clone) {
        (Some(0), _) => Check::fail("user namespaces", "user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces=15000"),
        (_, Some(false)) if uid != 0 => {
            Check::fail("user namespaces", "kernel.unprivileged_userns_clone is 0", "sysctl -w kernel.unprivileged_userns_clone=1")
        }
        (Some(count), _) => Check::pass("user namespaces", format!("enabled (max {count})")),
        (None, _) => {
            Check::warn("user namespaces", "cannot read /proc/sys/user/max_user_namespaces", "check that the kernel has CONFIG_USER_NS")
        }
    });
    checks
}

/// Each helper: found, static, and from the same build as this `lazaret`
/// (same version and commit), so the sandbox and the sidecar speak what the
/// coordinator speaks.
fn helpers() -> Vec<Check> {
    helper_binaries::HELPER_NAMES.iter().map(|&name| helper(name, crate::cli::VERSION)).collect()
}

fn helper(name: &'static str, expected_version: &str) -> Check {
    let Some(path) = helper_binaries::find(name) else {
        return Check::fail(
            name,
            "not found beside lazaret, in ../lib/lazaret, or in a source checkout's build directory",
            "reinstall Lazaret (the .deb or scripts/install), or build it: scripts/build",
        );
    };
    match helper_binaries::linkage(&path) {
        Ok(Linkage::Static) => {}
        Ok(Linkage::Dynamic) => {
            return Check::fail(name, format!("{} is dynamically linked", path.display()), "rebuild for x86_64-unknown-linux-musl");
        }
        Ok(Linkage::NotElf) | Err(_) => {
            return Check::fail(name, format!("{} is not a readable ELF executable", path.display()), "rebuild it");
        }
    }
    let expected = format!("{name} {expected_version}");
    match helper_binaries::version(&path) {
        Some(version) if version == expected => Check::pass(name, format!("{} (static, same build: {expected_version})", path.display())),
        Some(version) => Check::fail(
            name,
            format!(
                "{} says `{version}`, but this lazaret is {expected_version}: the helpers must come from the same build",
                path.display()
            ),
            "reinstall Lazaret (the .deb or scripts/install), or rebuild everything: scripts/build",
        ),
        None => Check::fail(name, format!("{} --version does not run", path.display()), "reinstall Lazaret or rebuild: scripts/build"),
    }
}

fn default_image() -> Check {
    const NAME: &str = "default image";
    match Podman::default().image_exists(DEFAULT_IMAGE) {
        Ok(true) => Check::pass(NAME, DEFAULT_IMAGE),
        Ok(false) => Check::warn(NAME, format!("{DEFAULT_IMAGE} is not built"), "lazaret image build"),
        Err(error) => {
            let message = error.to_string();
            let fix = advice_for_podman_error(&message);
            // The fix is shown once, as the fix.
            Check::fail(NAME, message.replace(&fix, "").trim_end().to_owned(), fix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podman_errors_get_a_fix_that_names_the_missing_piece() {
        let init = "Error: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory";
        assert!(advice_for_podman_error(init).contains("apt-get install catatonit"));
        let runtime = "Error: default OCI runtime \"runsc\" not found: invalid argument";
        assert_eq!(advice_for_podman_error(runtime), "apt-get install runsc");
        let limits = "Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied";
        assert!(advice_for_podman_error(limits).contains("hard limits"));
        assert!(advice_for_podman_error("something new").contains("podman's message"));
        let pause = "level=error msg=\"invalid internal status, try resetting the pause process with \\\"podman system migrate\\\": could not find any running process: no such process\"";
        assert!(advice_for_podman_error(pause).starts_with("rootless podman lost its pause process"), "{}", advice_for_podman_error(pause));
        assert!(lazaret_coordinator::podman::explain(pause.as_bytes()).ends_with("the next podman command starts a new pause process"));
    }

    #[test]
    fn the_credential_ca_bundle_must_hold_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let check = credential_ca_bundle(Some(&empty));
        assert!(check.detail.contains("holds no PEM certificate") && check.fix.is_some(), "{check:?}");
        let missing = credential_ca_bundle(Some(&dir.path().join("missing.pem")));
        assert!(missing.detail.contains("cannot read") && missing.fix.is_some(), "{missing:?}");
        if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file() {
            let system = credential_ca_bundle(None);
            assert!(system.fix.is_none() && system.detail.contains(" certificates in "), "{system:?}");
        }
    }

    #[test]
    fn git_security_series() {
        assert!(!git_is_patched((2, 39, 3)));
        assert!(git_is_patched((2, 39, 4)));
        assert!(git_is_patched((2, 39, 5)));
        assert!(!git_is_patched((2, 40, 1)));
        assert!(git_is_patched((2, 45, 1)));
        assert!(git_is_patched((2, 47, 3)));
        assert!(!git_is_patched((2, 30, 9)));
        assert!(!git_is_patched((1, 9, 0)));
        assert_eq!(parse_git_version("git version 2.39.5"), Some((2, 39, 5)));
        assert_eq!(parse_git_version("git version 2.47.3.windows.1"), Some((2, 47, 3)));
    }
}
