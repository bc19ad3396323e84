//! Which runsc runs the sandboxes, and what it can do, read from `runsc
//! --version` and `runsc flags` (no sandbox is started). `lazaret doctor`
//! reports it; the features Lazaret relies on are named here once.
//!
//! The choice, in order: `$LAZARET_RUNSC`, `[runtime] runsc` of the
//! configuration, else the newest (by the build date in its version) of
//! podman's default runsc and the builds `scripts/install-deps` makes in
//! `/usr/local/lib/lazaret/runsc-<date>/runsc`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::bail;
use crate::error::Result;

/// Where `scripts/install-deps` puts the runsc it builds from the Go module.
pub const BUILT_RUNSC_DIR: &str = "/usr/local/lib/lazaret";

/// The runsc chosen, and why.
#[derive(Debug, Clone)]
pub struct Selected {
    pub path: PathBuf,
    pub version: String,
    pub date: Option<u32>,
    pub why: &'static str,
}

/// Chooses the runsc (see the module documentation).
pub fn select(configured: Option<&Path>) -> Result<Selected> {
    let explicit =
        std::env::var_os("LAZARET_RUNSC").filter(|value| !value.is_empty()).map(|value| (PathBuf::from(value), "$LAZARET_RUNSC"));
    if let Some((path, why)) = explicit.or_else(|| configured.map(|path| (path.to_path_buf(), "[runtime] runsc"))) {
        let Some((version, date)) = version_of(&path) else {
            bail!("the runsc named by {why}, {}, does not run (`{} --version` failed)", path.display(), path.display());
        };
        return Ok(Selected { path, version, date, why });
    }
    let mut best: Option<Selected> = None;
    for path in candidates() {
        let Some((version, date)) = version_of(&path) else { continue };
        if best.as_ref().is_none_or(|best| date.unwrap_or(0) > best.date.unwrap_or(0)) {
            best = Some(Selected { path, version, date, why: "the newest runsc found" });
        }
    }
    match best {
        Some(selected) => Ok(selected),
        None => {
            bail!("no runsc found (looked in podman's paths and {BUILT_RUNSC_DIR}/runsc-*): apt-get install runsc, or scripts/install-deps")
        }
    }
}

/// podman's default runsc, then the builds in [`BUILT_RUNSC_DIR`].
pub fn candidates() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = podman_default().into_iter().collect();
    let mut built: Vec<PathBuf> = std::fs::read_dir(BUILT_RUNSC_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.starts_with("runsc-")))
        .map(|entry| entry.path().join("runsc"))
        .filter(|path| path.is_file())
        .collect();
    built.sort();
    paths.extend(built);
    paths
}

fn version_of(path: &Path) -> Option<(String, Option<u32>)> {
    let features = Features::parse(&run_runsc(path, "--version")?, "");
    Some((features.version, features.date))
}

/// The runsc podman runs for `--runtime=runsc`: the first of podman's
/// built-in search paths that exists (containers.conf `[engine.runtimes]`).
pub const PODMAN_SEARCH_PATHS: [&str; 6] =
    ["/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc", "/usr/local/sbin/runsc", "/bin/runsc", "/sbin/runsc"];

pub fn podman_default() -> Option<std::path::PathBuf> {
    PODMAN_SEARCH_PATHS.iter().map(std::path::PathBuf::from).find(|path| path.is_file())
}

/// A runsc binary's version and the flags Lazaret cares about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Features {
    /// The first line of `runsc --version`, e.g. `runsc version 0.0~20221219.0`.
    pub version: String,
    /// The build date in the version (YYYYMMDD), where it has one.
    pub date: Option<u32>,
    /// The platform runsc uses unless told otherwise.
    pub default_platform: Option<String>,
    /// Every platform its `--platform` help names.
    pub platforms: Vec<String>,
    /// `--directfs`: the sentry opens container files itself (fast file access).
    pub directfs: bool,
    /// `--overlay2`: the root file system gets a sentry-side overlay.
    pub overlay2: bool,
    /// `--host-uds`: needed for the Escalation Socket.
    pub host_uds: bool,
    /// `--ignore-cgroups`: needed rootless on these machines.
    pub ignore_cgroups: bool,
    /// `--file-access-mounts` (gVisor 2021-03): how bind mounts are cached,
    /// overridable per mount by the `dev.gvisor.spec.mount.*` annotations
    /// (gVisor 2019-12), so a runsc with this flag has both. See
    /// [`Features::per_mount_file_access`].
    pub file_access_mounts: bool,
    /// `--dcache`: one dentry cache of a given size for all of the sandbox's
    /// gofer mounts instead of 1,000 per mount.
    pub dcache: bool,
}

impl Features {
    /// Runs `runsc --version` and `runsc flags`; `None` if it does not run.
    pub fn probe(runsc: &std::path::Path) -> Option<Features> {
        let version = run_runsc(runsc, "--version")?;
        Some(Features::probe_flags(runsc, &version))
    }

    /// Runs only `runsc flags`, for a runsc whose `--version` output is
    /// already known (`Selected::version`, read when it was chosen).
    pub fn probe_flags(runsc: &std::path::Path, version: &str) -> Features {
        Features::parse(version, &run_runsc(runsc, "flags").unwrap_or_default())
    }

    /// Reads the output of `runsc --version` and of `runsc flags`.
    pub fn parse(version_text: &str, flags_text: &str) -> Features {
        let version = version_text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("").to_owned();
        let date = version
            .split(|c: char| !c.is_ascii_digit())
            .find(|part| part.len() == 8 && part.starts_with("20"))
            .and_then(|part| part.parse().ok());
        let mut features = Features { version, date, ..Features::default() };
        let lines: Vec<&str> = flags_text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let Some(flag) = line.trim_start().strip_prefix('-') else { continue };
            let name = flag.split_whitespace().next().unwrap_or("");
            match name {
                "directfs" => features.directfs = true,
                "overlay2" => features.overlay2 = true,
                "host-uds" => features.host_uds = true,
                "ignore-cgroups" => features.ignore_cgroups = true,
                "file-access-mounts" => features.file_access_mounts = true,
                "dcache" => features.dcache = true,
                "platform" => {
                    // "specifies which platform to use: systrap (default), ptrace, kvm. (default "systrap")"
                    let help = lines.get(index + 1).copied().unwrap_or("");
                    if let Some(list) = help.split("platform to use:").nth(1) {
                        let list = list.split('.').next().unwrap_or("");
                        for entry in list.split(',') {
                            let platform = entry.trim().trim_end_matches("(default)").trim();
                            if !platform.is_empty() {
                                features.platforms.push(platform.to_owned());
                            }
                            if entry.contains("(default)") {
                                features.default_platform = Some(platform.to_owned());
                            }
                        }
                    }
                    if let Some(default) = help.split("(default \"").nth(1).and_then(|rest| rest.split('"').next()) {
                        features.default_platform = Some(default.to_owned());
                    }
                }
                _ => {}
            }
        }
        features
    }

    /// Whether file-heavy work will be near native: systrap (or kvm) as the
    /// platform and directfs. Debian 12's runsc (20221219) has neither.
    pub fn fast_file_access(&self) -> bool {
        self.directfs && self.default_platform.as_deref().is_some_and(|platform| platform != "ptrace")
    }

    /// Whether the sandbox's bind mounts can be cached one by one: the global
    /// `--file-access-mounts=exclusive` with a `share=shared` mount hint on
    /// each mount the host changes (see `coordinator::sandbox`). Debian 12's
    /// runsc (20221219) and the current one both can.
    pub fn per_mount_file_access(&self) -> bool {
        self.file_access_mounts
    }
}

/// The output (stdout, then stderr) of `runsc ARGUMENT`; `None` if it does
/// not run or fails.
fn run_runsc(runsc: &std::path::Path, argument: &str) -> Option<String> {
    let output = Command::new(runsc).arg(argument).stdin(Stdio::null()).output().ok()?;
    output.status.success().then(|| format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN_FLAGS: &str = "  -dcache int\n    \tSet the global dentry cache size. (default -1)\n  -file-access value\n    \tspecifies which filesystem validation to use for the root mount: exclusive (default), shared.\n  -file-access-mounts value\n    \tspecifies which filesystem validation to use for volumes other than the root mount: shared (default), exclusive. (default shared)\n  -host-uds value\n    \tcontrols permission to access host Unix-domain sockets. Values: none|open|create|all, default: none\n  -ignore-cgroups\n    \tdon't configure cgroups.\n  -overlay2 value\n    \twrap mounts with overlayfs.\n  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n";

    const CURRENT_FLAGS: &str = "  -dcache int\n    \tSet the global dentry cache size. (default -1)\n  -directfs\n    \tdirectly access the container filesystems from the sentry. (default true)\n  -file-access-mounts value\n    \tspecifies which filesystem validation to use for volumes other than the root mount: shared (default), exclusive. (default shared)\n  -host-uds value\n    \tcontrols permission\n  -ignore-cgroups\n    \tdon't configure cgroups.\n  -overlay2 value\n    \twrap mounts with overlayfs. Format is\n  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")\n  -platform_device_path string\n";

    #[test]
    fn debian_12_runsc_is_ptrace_without_directfs() {
        let features = Features::parse("runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n", DEBIAN_FLAGS);
        assert_eq!(features.version, "runsc version 0.0~20221219.0");
        assert_eq!(features.date, Some(20_221_219));
        assert_eq!(features.default_platform.as_deref(), Some("ptrace"));
        assert_eq!(features.platforms, vec!["ptrace", "kvm"]);
        assert!(!features.directfs && features.overlay2 && features.host_uds && features.ignore_cgroups);
        assert!(!features.fast_file_access());
        assert!(features.per_mount_file_access() && features.dcache);
    }

    #[test]
    fn a_current_runsc_has_systrap_and_directfs() {
        let features = Features::parse("runsc version release-20260905.0\nspec: 1.2.1\n", CURRENT_FLAGS);
        assert_eq!(features.date, Some(20_260_905));
        assert_eq!(features.default_platform.as_deref(), Some("systrap"));
        assert_eq!(features.platforms, vec!["systrap", "ptrace", "kvm"]);
        assert!(features.directfs && features.fast_file_access() && features.per_mount_file_access() && features.dcache);
    }

    #[test]
    fn a_runsc_without_flags_output_has_no_features() {
        let features = Features::parse("runsc version VERSION_MISSING\n", "");
        assert_eq!(features.date, None);
        assert!(!features.host_uds && !features.fast_file_access() && !features.per_mount_file_access() && !features.dcache);
    }
}
