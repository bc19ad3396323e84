//! Which runsc runs the sandboxes, and what it can do, read from `runsc
//! --version` and `runsc flags` (no sandbox is started). `lazaret doctor`
//! reports it; the features Lazaret relies on are named here once.
//!
//! The choice, in order: `$LAZARET_RUNSC`, `[runtime] runsc` of the
//! configuration, else the newest (by the build date in its version) of
//! podman's default runsc and the builds `scripts/install-deps` makes in
//! `/usr/local/lib/lazaret/runsc-<date>/runsc`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The first runsc build seen to turn a typed ^C, ^Z or ^\\ on a terminal
/// inside the sandbox into a signal for its foreground job (issue 27,
/// tried by hand and in `e2e_terminal`): 20221219 (Debian 12's) does not,
/// 20260905 does. Builds between were not tried; they get the CLI's
/// stand-in for ^C, as older ones do.
pub const TERMINAL_SIGNALS_SINCE: u32 = 20260905;

impl Selected {
    /// Whether this runsc's terminals send the signals their control
    /// characters stand for (see [`TERMINAL_SIGNALS_SINCE`]).
    pub fn terminal_signals(&self) -> bool {
        self.date.is_some_and(|date| date >= TERMINAL_SIGNALS_SINCE)
    }
}

/// Chooses the runsc (see the module documentation).
pub fn select(configured: Option<&Path>) -> Result<Selected> {
    let mut probe = |path: &Path| run_runsc(path, "--version").map(|version| Features::parse(&version, ""));
    choose(configured, &mut probe).map(|(selected, _)| selected)
}

/// [`select`] and the chosen runsc's [`Features`], for a sandbox start: each
/// binary's `--version` and `flags` output is remembered in `memory` (a file
/// in the domain's private directory) under the binary's identity (device,
/// inode, size, modification and change times), so a cold start runs no
/// runsc probe until a runsc is installed, rebuilt or replaced. Each probe is
/// a Go program's start, 10-25 ms here, on the start's critical path.
pub fn select_remembered(configured: Option<&Path>, memory: &Path) -> Result<(Selected, Features)> {
    let mut remembered = Remembered::load(memory);
    let chosen = choose(configured, &mut |path| remembered.features(path));
    remembered.save(memory);
    chosen
}

fn choose(configured: Option<&Path>, probe: &mut dyn FnMut(&Path) -> Option<Features>) -> Result<(Selected, Features)> {
    let explicit =
        std::env::var_os("LAZARET_RUNSC").filter(|value| !value.is_empty()).map(|value| (PathBuf::from(value), "$LAZARET_RUNSC"));
    if let Some((path, why)) = explicit.or_else(|| configured.map(|path| (path.to_path_buf(), "[runtime] runsc"))) {
        let Some(features) = probe(&path) else {
            bail!("the runsc named by {why}, {}, does not run (`{} --version` failed)", path.display(), path.display());
        };
        return Ok((Selected { path, version: features.version.clone(), date: features.date, why }, features));
    }
    let mut best: Option<(Selected, Features)> = None;
    for path in candidates() {
        let Some(features) = probe(&path) else { continue };
        if best.as_ref().is_none_or(|(best, _)| features.date.unwrap_or(0) > best.date.unwrap_or(0)) {
            let selected = Selected { path, version: features.version.clone(), date: features.date, why: "the newest runsc found" };
            best = Some((selected, features));
        }
    }
    match best {
        Some(best) => Ok(best),
        None => {
            bail!("no runsc found (looked in podman's paths and {BUILT_RUNSC_DIR}/runsc-*): apt-get install runsc, or scripts/install-deps")
        }
    }
}

/// What [`select_remembered`] keeps per runsc path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Probe {
    identity: [i64; 6],
    version: String,
    flags: String,
}

/// The remembered probes of one file, and the ones used this time.
#[derive(Default)]
struct Remembered {
    known: std::collections::BTreeMap<String, Probe>,
    used: std::collections::BTreeMap<String, Probe>,
}

impl Remembered {
    /// A missing or unreadable file is an empty memory.
    fn load(file: &Path) -> Remembered {
        let known = std::fs::read(file).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
        Remembered { known, used: Default::default() }
    }

    /// The binary's features: remembered if it is the same file, else probed.
    fn features(&mut self, path: &Path) -> Option<Features> {
        let identity = identity(path)?;
        let key = path.to_string_lossy().into_owned();
        let probe = match self.known.get(&key) {
            Some(probe) if probe.identity == identity => probe.clone(),
            _ => {
                let version = run_runsc(path, "--version")?;
                let flags = run_runsc(path, "flags").unwrap_or_default();
                Probe { identity, version, flags }
            }
        };
        let features = Features::parse(&probe.version, &probe.flags);
        self.used.insert(key, probe);
        Some(features)
    }

    /// Writes what was used (a new file, renamed into place), if it changed;
    /// a failure only costs the next start its probes.
    fn save(&self, file: &Path) {
        if self.used == self.known {
            return;
        }
        let Ok(text) = serde_json::to_vec(&self.used) else { return };
        let partial = file.with_extension("partial");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .and_then(|mut out| std::io::Write::write_all(&mut out, &text))
            .and_then(|()| std::fs::rename(&partial, file));
        if let Err(error) = written {
            tracing::debug!(%error, file = %file.display(), "cannot remember the runsc probes");
            crate::cleanup::remove_file(&partial);
        }
    }
}

/// A binary's identity: device, inode, size, modification and change times
/// (nanoseconds). A rebuilt or replaced runsc has another.
fn identity(path: &Path) -> Option<[i64; 6]> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let nanos = |seconds: i64, nanos: i64| seconds.saturating_mul(1_000_000_000).saturating_add(nanos);
    Some([
        meta.dev() as i64,
        meta.ino() as i64,
        meta.size() as i64,
        nanos(meta.mtime(), meta.mtime_nsec()),
        nanos(meta.ctime(), meta.ctime_nsec()),
        i64::from(meta.mode()),
    ])
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
    /// each mount the host changes (see `backend::sandbox`). Debian 12's
    /// runsc (20221219) and the current one both can.
    pub fn per_mount_file_access(&self) -> bool {
        self.file_access_mounts
    }
}

/// The output (stdout, then stderr) of `runsc ARGUMENT`; `None` if it does
/// not run or fails.
fn run_runsc(runsc: &std::path::Path, argument: &str) -> Option<String> {
    let mut command = Command::new(runsc);
    command.arg(argument);
    let what = format!("{} {argument}", runsc.display());
    let output = match crate::bounded_process::output_bounded_blocking(command, lazaret_core::bounds::RUNSC_PROBE, &what) {
        Ok(output) => output,
        Err(error) => {
            tracing::debug!(error = %error.chained(), "runsc probe failed");
            return None;
        }
    };
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

    /// A stand-in runsc that logs each probe to `probes` in its directory.
    fn fake_runsc(dir: &Path, date: &str) -> PathBuf {
        let script = format!(
            "#!/bin/sh\ncase \"$1\" in\n--version) echo v >> \"$(dirname \"$0\")/probes\"; echo 'runsc version 0.0~{date}' ;;\nflags) echo f >> \"$(dirname \"$0\")/probes\"; printf '  -directfs\\n  -host-uds value\\n' ;;\nesac\n"
        );
        let partial = dir.join("runsc.partial");
        std::fs::write(&partial, script).expect("write");
        std::fs::set_permissions(&partial, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let runsc = dir.join("runsc");
        std::fs::rename(&partial, &runsc).expect("rename");
        // Another test's fork can hold the written file open for a moment
        // (ETXTBSY): wait until it runs, with an argument that logs nothing.
        for _ in 0..100 {
            if Command::new(&runsc).arg("warm-up").status().is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        runsc
    }

    fn probes_run(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("probes")).unwrap_or_default().lines().count()
    }

    #[test]
    fn probes_are_remembered_until_the_binary_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let memory = dir.path().join("runsc-probes.json");
        let runsc = fake_runsc(dir.path(), "20260905");

        let mut remembered = Remembered::load(&memory);
        let features = remembered.features(&runsc).expect("runs");
        remembered.save(&memory);
        assert_eq!((features.date, features.directfs, features.host_uds), (Some(20260905), true, true));
        assert_eq!(probes_run(dir.path()), 2, "--version and flags, once each");
        let mode = std::fs::metadata(&memory).expect("saved").permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);

        let mut remembered = Remembered::load(&memory);
        assert_eq!(remembered.features(&runsc), Some(features), "the same answer from memory");
        remembered.save(&memory);
        assert_eq!(probes_run(dir.path()), 2, "the same binary is not probed again");

        // Replaced (a new file renamed over it): probed again, and remembered anew.
        let runsc = fake_runsc(dir.path(), "20270101");
        let mut remembered = Remembered::load(&memory);
        assert_eq!(remembered.features(&runsc).and_then(|features| features.date), Some(20270101));
        remembered.save(&memory);
        assert_eq!(probes_run(dir.path()), 4);
        assert_eq!(Remembered::load(&memory).features(&runsc).and_then(|features| features.date), Some(20270101));
        assert_eq!(probes_run(dir.path()), 4);

        // A memory that is not ours to read is no memory; a binary that does not run is not remembered.
        std::fs::write(&memory, "not json").expect("write");
        assert!(Remembered::load(&memory).features(&runsc).is_some());
        assert_eq!(probes_run(dir.path()), 6);
        assert_eq!(Remembered::load(&memory).features(&dir.path().join("missing")), None);
    }
}
