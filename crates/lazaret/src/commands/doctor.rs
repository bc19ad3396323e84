//! `lazaret doctor`: one line per prerequisite, each pass, warn or fail with
//! a one-line fix.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;
use lazaret_core::config::DEFAULT_IMAGE;
use serde::Serialize;

use crate::helper_binaries::{self, Linkage};
use crate::podman::Podman;

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

pub fn run(json: bool) -> Result<u8> {
    let checks = all_checks();
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

fn all_checks() -> Vec<Check> {
    let uid = nix::unistd::getuid().as_raw();
    let runsc = first_line_of("runsc", &["--version"]);
    let mut checks = vec![
        tool("podman", &["--version"], "apt-get install podman"),
        tool("runsc", &["--version"], "apt-get install runsc"),
        netstack(runsc.as_deref()),
        tool("runc", &["--version"], "apt-get install runc"),
        tool("fuse-overlayfs", &["--version"], "apt-get install fuse-overlayfs"),
        git(),
    ];
    checks.extend(rootless(uid));
    checks.extend(helpers());
    checks.push(default_image());
    checks
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

fn helpers() -> Vec<Check> {
    helper_binaries::HELPER_NAMES
        .iter()
        .map(|&name| match helper_binaries::find(name) {
            None => Check::fail(
                name,
                "not found",
                "cargo build --profile static --target x86_64-unknown-linux-musl -p lazaret-escalate -p lazaret-sidecar",
            ),
            Some(path) => match helper_binaries::linkage(&path) {
                Ok(Linkage::Static) => Check::pass(name, format!("{} (static)", path.display())),
                Ok(Linkage::Dynamic) => {
                    Check::fail(name, format!("{} is dynamically linked", path.display()), "rebuild for x86_64-unknown-linux-musl")
                }
                Ok(Linkage::NotElf) | Err(_) => {
                    Check::fail(name, format!("{} is not a readable ELF executable", path.display()), "rebuild it")
                }
            },
        })
        .collect()
}

fn default_image() -> Check {
    const NAME: &str = "default image";
    if Podman::default().image_exists(DEFAULT_IMAGE) {
        Check::pass(NAME, DEFAULT_IMAGE)
    } else {
        Check::warn(NAME, format!("{DEFAULT_IMAGE} is not built"), "lazaret image build")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
