//! The agent sandbox container: the `podman run` arguments that put it under
//! gVisor on these machines, and its start and removal.
//!
//! File caching. runsc serves bind mounts `shared` by default: gVisor
//! revalidates its cached view against the host on every access, which is
//! what makes `git status` in a large checkout slow. The agent's checkout and
//! git directory are written by nothing but the sandbox while it runs
//! (DECISIONS D1: the host seeds them before the start and never runs git in
//! them), so they may be cached (`exclusive`). gVisor's per-mount hint for
//! that, `share=container`, cannot be used: current runsc turns such a bind
//! mount into a sandbox-local overlay whose writes never reach the host
//! (runsc/container/container.go, `IsSandboxLocal`; checked by hand). So
//! [`file_access_arguments`] does the reverse: the global
//! `--file-access-mounts=exclusive`, and a `share=shared` hint
//! (`dev.gvisor.spec.mount.<name>.{source,type,share}`, matched by mount
//! source) on every other bind mount of the invocation, so each mount the
//! host changes (the config mirror, State Anchor, escalation socket,
//! volumes, ...) stays `shared`. Mounts podman adds itself (`/etc/hosts`,
//! `/etc/hostname`, `/run/.containerenv`, `/dev/shm`) become `exclusive`;
//! podman writes them before the start. Anything the parser does not
//! recognise, and any other mount of a directory inside or around the
//! checkout, keeps every mount `shared`. [`Caching`] also sizes runsc's
//! dentry cache, without which 10,000 files do not stay cached.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use lazaret_core::bounds;
use lazaret_core::config::ResolvedProfile;

use crate::bail;
use crate::error::Result;
use crate::podman::Podman;

/// Label carrying the domain hash on every container Lazaret starts.
pub const DOMAIN_LABEL: &str = "io.lazaret.domain";

/// A `podman run` invocation: its arguments, and the environment podman
/// needs to fill `--env NAME` (values never appear on a command line).
pub struct RunInvocation {
    pub arguments: Vec<OsString>,
    pub environment: Vec<(String, String)>,
}

/// Which bind mounts gVisor may cache: the host directories that only the
/// sandbox writes while it runs, if the runsc can cache mounts one by one
/// (`crate::runsc::Features::per_mount_file_access`); and the size of its
/// dentry cache. The default caches nothing and keeps runsc's dentry caches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caching {
    pub sandbox_only: Vec<PathBuf>,
    /// runsc `--dcache`: one cache of this many unused dentries for all
    /// gofer mounts, instead of 1,000 per mount.
    pub dentry_cache: Option<u64>,
}

impl Caching {
    /// `sandbox_only` cached if the runsc (`features`, `None` if unknown)
    /// supports it. `nofile` is the sandbox's open-file limit, which is also
    /// runsc's budget of host descriptors (the sentry runs with this host's
    /// hard limit, which `nofile` never exceeds). A cached dentry holds up to
    /// two of them (its own and its file's: measured with directfs, 18,246
    /// open in the sentry with `--dcache=9500` after `git status` of 10,000
    /// files, and 16,968 with `--dcache=8000` after 15,000 files were
    /// written and read). The cache gets one fifth of the budget, so cached
    /// dentries take at most two fifths and three fifths stay for what the
    /// sandbox has open and the directories above the cached entries. Two
    /// fifths, tried before, left `npm ci` of 13,000 files (peak 13,090
    /// descriptors with a cache of 4,000) with EMFILE and the sandbox unable
    /// to start a process once the budget was gone (issue 31; the test
    /// `a_full_dentry_cache_leaves_the_sandbox_its_open_files`). (runsc's
    /// default, 1,000 per mount, allows as many over four directory mounts.)
    /// Below 1,000 it is left alone.
    pub fn new(features: Option<&crate::runsc::Features>, sandbox_only: Vec<PathBuf>, nofile: u64) -> Caching {
        let Some(features) = features.filter(|features| features.per_mount_file_access()) else {
            return Caching::default();
        };
        let dentry_cache = Some(nofile / 5).filter(|size| features.dcache && *size > 1000);
        Caching { sandbox_only, dentry_cache }
    }
}

/// What the sandbox is started with, besides its profile.
#[derive(Clone, Copy)]
pub struct SandboxSpec<'a> {
    /// The runtime `crate::runsc::select` chose.
    pub runsc: &'a std::path::Path,
    /// The podman arguments that provide `/workspace` (the agent's checkout,
    /// see `git_sentry`, or the workspace itself) and the other mounts.
    pub workspace_mounts: &'a [String],
    /// The sandbox's main process (`sleep infinity` when empty; the agent's
    /// repository is seeded by its own, `GitLayout::container_command`).
    pub command: &'a [String],
    /// The Network Sidecar's container, whose network the sandbox joins.
    pub sidecar: Option<&'a str>,
    /// How the profile's resource limits are enforced (`crate::resource_limits::plan`).
    pub limits: &'a crate::resource_limits::Plan,
    /// Which mounts gVisor may cache.
    pub caching: &'a Caching,
}

/// The `podman run` invocation of the sandbox of `resolved`.
pub fn run_arguments(resolved: &ResolvedProfile, spec: &SandboxSpec<'_>) -> Result<RunInvocation> {
    let SandboxSpec { runsc, workspace_mounts, command, sidecar, limits, caching } = *spec;
    let domain = &resolved.domain;
    let mut arguments: Vec<OsString> = Vec::new();
    let mut push = |argument: String| arguments.push(OsString::from(argument));
    push("run".into());
    push("--detach".into());
    // A container of this name can only be a leftover of a coordinator that
    // was killed: replace it.
    push("--replace".into());
    push(format!("--name={}", domain.container_name));
    push(format!("--label={DOMAIN_LABEL}={}", domain.domain_hash));
    push(format!("--label=io.lazaret.profile={}", resolved.profile));
    push(format!("--hostname=lazaret-{}", resolved.profile));
    for argument in runtime_arguments(runsc, sidecar, limits) {
        push(argument);
    }
    push("--workdir=/workspace".into());
    let mut mounts: Vec<String> = workspace_mounts.to_vec();
    for volume in &resolved.volumes {
        if !volume.host_exists {
            if volume.host.starts_with(&resolved.data_root) {
                crate::private_dirs::ensure_private_dir(&volume.host)?;
            } else {
                bail!("volume host path {} does not exist; create it or change the profile", volume.host.display());
            }
        }
        mounts.push(format!("--volume={}", volume.podman_argument()));
    }
    let file_access = file_access_arguments(&mounts, caching);
    for argument in mounts.into_iter().chain(file_access) {
        push(argument);
    }
    let mut environment = Vec::new();
    for (name, value) in &resolved.env {
        push(format!("--env={name}"));
        environment.push((name.clone(), value.value.clone()));
    }
    push(resolved.image.clone());
    if command.is_empty() {
        push("sleep".into());
        push("infinity".into());
    } else {
        for argument in command {
            push(argument.clone());
        }
    }
    Ok(RunInvocation { arguments, environment })
}

/// How every agent sandbox runs, whatever its profile: gVisor with the flags
/// these machines need, podman's init (catatonit) as PID 1, no privilege
/// gain, and the resource limits. `lazaret doctor` starts its probe sandbox
/// with exactly these.
pub fn runtime_arguments(runsc: &std::path::Path, sidecar: Option<&str>, limits: &crate::resource_limits::Plan) -> Vec<String> {
    let mut arguments = crate::podman::runsc_arguments(runsc, sidecar, limits);
    arguments.push("--init".into());
    arguments.push("--security-opt=no-new-privileges".into());
    arguments
}

/// The arguments that let gVisor cache the bind mounts whose source is in
/// `caching.sandbox_only` (see the module documentation), with its dentry
/// cache size: none unless one of `arguments` mounts such a source and every
/// bind mount in `arguments` can be named in a hint.
pub fn file_access_arguments(arguments: &[String], caching: &Caching) -> Vec<String> {
    let sandbox_only: Vec<PathBuf> = caching.sandbox_only.iter().map(|path| clean(path)).collect();
    let mut cached = false;
    let mut shared: Vec<String> = Vec::new();
    for argument in arguments {
        let source = match bind_source(argument) {
            Ok(Some(source)) => source,
            Ok(None) => continue,
            Err(why) => {
                tracing::warn!(%argument, why, "every bind mount stays uncached");
                return Vec::new();
            }
        };
        if sandbox_only.contains(&source) {
            cached = true;
            continue;
        }
        // The same files through a second, uncached mount (a volume inside
        // the checkout, or around it) would leave the cached one stale.
        if sandbox_only.iter().any(|cached| source.starts_with(cached) || cached.starts_with(&source)) {
            tracing::warn!(source = %source.display(), "a mount overlaps the agent's checkout: every bind mount stays uncached");
            return Vec::new();
        }
        // podman splits `--annotation` values on commas (and reads quotes).
        let Some(text) = source.to_str().filter(|text| !text.contains([',', '"']) && !text.contains(char::is_control)) else {
            tracing::warn!(source = %source.display(), "a mount source that cannot be named in a mount hint: every bind mount stays uncached");
            return Vec::new();
        };
        if !shared.iter().any(|known| known == text) {
            shared.push(text.to_owned());
        }
    }
    if !cached {
        return Vec::new();
    }
    let mut result = vec!["--runtime-flag=file-access-mounts=exclusive".to_owned()];
    if let Some(size) = caching.dentry_cache {
        result.push(format!("--runtime-flag=dcache={size}"));
    }
    for (index, source) in shared.iter().enumerate() {
        // The name may not contain dots; each source gets one hint (runsc
        // refuses two hints with the same source).
        let key = format!("--annotation=dev.gvisor.spec.mount.lazaret{index}");
        result.extend([format!("{key}.source={source}"), format!("{key}.type=bind"), format!("{key}.share=shared")]);
    }
    result
}

/// The host source of a bind mount argument as podman reads it (cleaned like
/// Go's `filepath.Clean`, as podman puts it into the OCI spec); `None` for
/// an argument that mounts no host path (`--mount=type=tmpfs`, or not a
/// mount at all); an error for a mount this module cannot name.
fn bind_source(argument: &str) -> std::result::Result<Option<PathBuf>, &'static str> {
    let source = if let Some(volume) = argument.strip_prefix("--volume=") {
        // podman's rule: SOURCE:DESTINATION[:OPTIONS], split at colons.
        volume.split(':').next().unwrap_or("")
    } else if let Some(mount) = argument.strip_prefix("--mount=") {
        let fields: Vec<(&str, &str)> = mount.split(',').map(|field| field.split_once('=').unwrap_or((field, ""))).collect();
        match fields.iter().find(|(key, _)| *key == "type").map(|(_, value)| *value) {
            Some("bind") => match fields.iter().find(|(key, _)| *key == "source" || *key == "src") {
                Some((_, source)) => *source,
                None => return Err("a bind mount without a source"),
            },
            Some("tmpfs") => return Ok(None),
            _ => return Err("a --mount of a type other than bind or tmpfs"),
        }
    } else if ["--volume", "-v", "--mount", "--tmpfs", "--volumes-from", "--image-volume"].iter().any(|flag| argument.starts_with(flag)) {
        return Err("a mount argument in a form this module does not read");
    } else {
        return Ok(None);
    };
    if !source.starts_with('/') {
        return Err("a mount whose source is not an absolute host path (a named volume?)");
    }
    Ok(Some(clean(Path::new(source))))
}

/// `path` cleaned lexically like Go's `filepath.Clean`: no `.`, no `..`
/// after a name, no repeated or trailing slash.
fn clean(path: &Path) -> PathBuf {
    let mut result = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                if !result.pop() && !path.is_absolute() {
                    result.push("..");
                }
            }
            Component::CurDir => {}
            other => result.push(other.as_os_str()),
        }
    }
    result
}

/// The runsc flag that lets the sandbox connect to the one host socket it
/// gets, the Escalation Socket (D10).
pub const HOST_UDS_ARGUMENT: &str = "--runtime-flag=host-uds=open";

/// Starts the sandbox and returns its container ID; fails with podman's
/// message.
pub async fn start(podman: &Podman, resolved: &ResolvedProfile, spec: &SandboxSpec<'_>) -> Result<String> {
    let invocation = run_arguments(resolved, spec)?;
    let mut command = tokio::process::Command::from(podman.command());
    command.args(&invocation.arguments).envs(invocation.environment);
    let what = format!("podman run of the sandbox {}", resolved.domain.container_name);
    let output = crate::bounded_process::output_bounded(command, bounds::PODMAN_RUN, &what).await?;
    if !output.status.success() {
        bail!("podman could not start the sandbox: {}", crate::podman::explain(&output.stderr));
    }
    // `podman run --detach` prints the new container's ID last.
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
}

/// Removes the container (any state) if it exists.
///
/// A sandbox whose sentry was just killed (by the host OOM killer at the
/// memory limit) can still look running to podman for a moment: `rm
/// --force` then fails to signal it ("container state improper"). Once
/// podman has seen it exit, a retry removes it; so a failure is retried a
/// few times before it is reported. Each attempt is bounded
/// ([`bounds::PODMAN_RM`]); one that times out is not retried (teardown
/// holds the domain lock meanwhile), and the error names the container.
pub async fn remove(podman: &Podman, name: &str) -> Result<()> {
    remove_within(podman, name, bounds::PODMAN_RM).await
}

/// [`remove`] with each attempt bounded by `bound`.
pub async fn remove_within(podman: &Podman, name: &str, bound: std::time::Duration) -> Result<()> {
    const ATTEMPTS: u32 = 6;
    let mut message = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let mut command = tokio::process::Command::from(podman.command());
        command.args(["rm", "--force", "--time=0", "--ignore", name]);
        let output = crate::bounded_process::output_bounded(command, bound, &format!("podman rm {name}")).await?;
        if output.status.success() {
            return Ok(());
        }
        message = crate::podman::explain(&output.stderr);
        tracing::debug!(attempt, %message, "podman rm failed; retrying");
    }
    bail!("podman could not remove {name}: {message}")
}

/// The image's default command (`CMD`), for sessions that name none;
/// `/bin/sh` for an image without one, and, logged with the reason, when
/// podman cannot say.
pub async fn default_command(podman: &Podman, image: &str) -> Vec<String> {
    let shell = || vec!["/bin/sh".to_owned()];
    let mut command = tokio::process::Command::from(podman.command());
    command.args(["image", "inspect", "--format", "{{json .Config.Cmd}}", image]);
    let output = match crate::bounded_process::output_bounded(command, bounds::PODMAN_QUERY, &format!("podman image inspect {image}")).await
    {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            let reason = crate::podman::explain(&output.stderr);
            tracing::warn!(%image, %reason, "cannot read the image's default command; sessions without a command run /bin/sh");
            return shell();
        }
        Err(error) => {
            let error = error.chained();
            tracing::warn!(%image, %error, "cannot run podman to read the image's default command; sessions without a command run /bin/sh");
            return shell();
        }
    };
    match serde_json::from_slice::<Option<Vec<String>>>(&output.stdout) {
        Ok(Some(cmd)) if !cmd.is_empty() => cmd,
        Ok(_) => shell(),
        Err(error) => {
            tracing::warn!(%image, %error, "the image's default command is not a list of strings; sessions without a command run /bin/sh");
            shell()
        }
    }
}

/// Waits for the seed that the sandbox's main process runs
/// (`GitLayout::container_command`): its result file, checked every 10 ms;
/// every 2 s also that the sandbox still runs.
pub async fn wait_for_seed(podman: &Podman, container: &str, layout: &crate::git_sentry::GitLayout) -> Result<()> {
    let started = std::time::Instant::now();
    let mut next_check = started + std::time::Duration::from_secs(2);
    loop {
        if layout.seed_done()? {
            return Ok(());
        }
        let now = std::time::Instant::now();
        if now.duration_since(started) > bounds::SEED {
            bail!("the agent's repository was not set up within {} s", bounds::SEED.as_secs());
        }
        if now > next_check {
            let (podman, name) = (podman.clone(), container.to_owned());
            let running = tokio::task::spawn_blocking(move || podman.container_running(&name))
                .await
                .map_err(|error| crate::Error::msg(format!("checking the sandbox failed: {error}")))??;
            // The result may have come just before the sandbox ended.
            if !running && !layout.seed_done()? {
                bail!("the sandbox stopped before the agent's repository was set up");
            }
            next_check = now + std::time::Duration::from_secs(2);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mounts of a git-mode sandbox with the State Anchor, Host
    /// Escalation and a profile volume, as the coordinator passes them.
    fn mounts() -> Vec<String> {
        [
            "--volume=/data/d/checkout:/workspace:rw",
            "--volume=/data/d/agent.git:/workspace/.git:rw",
            "--mount=type=tmpfs,destination=/workspace/.git/hooks,tmpfs-mode=0755",
            "--volume=/data/d/git-config:/workspace/.git/config:ro",
            "--volume=/data/d/transfer:/run/lazaret/transfer:ro",
            "--volume=/data/d/outbox:/run/lazaret/outbox:rw",
            "--mount=type=bind,source=/data/d/state/usr,destination=/usr",
            HOST_UDS_ARGUMENT,
            "--volume=/run/user/0/lazaret/h/escalate.sock:/run/lazaret/escalate.sock",
            "--volume=/home/u/cache/:/cache:rw,z",
            "--volume=/home/u/./cache:/cache2:ro",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn sandbox_only() -> Vec<PathBuf> {
        vec![PathBuf::from("/data/d/checkout"), PathBuf::from("/data/d/agent.git/")]
    }

    fn caching() -> Caching {
        Caching { sandbox_only: sandbox_only(), dentry_cache: Some(5000) }
    }

    #[test]
    fn the_agent_only_mounts_are_cached_and_every_other_bind_mount_stays_shared() {
        let arguments = file_access_arguments(&mounts(), &caching());
        let mut expected = vec!["--runtime-flag=file-access-mounts=exclusive".to_owned(), "--runtime-flag=dcache=5000".to_owned()];
        for (index, source) in [
            "/data/d/git-config",
            "/data/d/transfer",
            "/data/d/outbox",
            "/data/d/state/usr",
            "/run/user/0/lazaret/h/escalate.sock",
            "/home/u/cache",
        ]
        .iter()
        .enumerate()
        {
            expected.push(format!("--annotation=dev.gvisor.spec.mount.lazaret{index}.source={source}"));
            expected.push(format!("--annotation=dev.gvisor.spec.mount.lazaret{index}.type=bind"));
            expected.push(format!("--annotation=dev.gvisor.spec.mount.lazaret{index}.share=shared"));
        }
        // `/home/u/cache/` and `/home/u/./cache` are one source: one hint.
        assert_eq!(arguments, expected);
    }

    #[test]
    fn nothing_changes_without_a_sandbox_only_mount() {
        // `--mount-workspace`, or a runsc without per-mount file access.
        assert!(file_access_arguments(&mounts(), &Caching::default()).is_empty());
        let direct = ["--volume=/home/u/project:/workspace:rw".to_owned()];
        assert!(file_access_arguments(&direct, &caching()).is_empty());
        assert_eq!(Caching::new(None, sandbox_only(), 20_000), Caching::default());
        let debian = crate::runsc::Features { file_access_mounts: false, dcache: true, ..Default::default() };
        assert_eq!(Caching::new(Some(&debian), sandbox_only(), 20_000), Caching::default());
    }

    #[test]
    fn the_dentry_cache_gets_a_fifth_of_the_descriptor_budget() {
        let current = crate::runsc::Features { file_access_mounts: true, dcache: true, ..Default::default() };
        assert_eq!(
            Caching::new(Some(&current), sandbox_only(), 20_000),
            Caching { sandbox_only: sandbox_only(), dentry_cache: Some(4000) }
        );
        assert_eq!(Caching::new(Some(&current), sandbox_only(), 65_536).dentry_cache, Some(13_107));
        // Not below runsc's own 1,000 per mount; not without --dcache.
        assert_eq!(Caching::new(Some(&current), sandbox_only(), 5000).dentry_cache, None);
        let no_dcache = crate::runsc::Features { dcache: false, ..current };
        assert_eq!(Caching::new(Some(&no_dcache), sandbox_only(), 20_000).dentry_cache, None);
    }

    #[test]
    fn a_mount_that_cannot_be_named_in_a_hint_keeps_every_mount_shared() {
        for unreadable in [
            "--volume=named-volume:/data",
            "-v=/x:/y",
            "--volume /x:/y",
            "--mount=type=volume,source=v,destination=/v",
            "--mount=type=bind,destination=/v",
            "--volume=/home/u/a,b:/ab",
            "--mount=type=bind,source=/home/u/q\"uote,destination=/q",
            "--volume=/data/d/checkout/src:/src:rw",
            "--volume=/data:/data:ro",
        ] {
            let mut arguments = mounts();
            arguments.push(unreadable.to_owned());
            assert!(file_access_arguments(&arguments, &caching()).is_empty(), "{unreadable}");
        }
    }

    #[test]
    fn sources_are_cleaned_like_podman_cleans_them() {
        assert_eq!(clean(Path::new("/a/./b//c/../d/")), PathBuf::from("/a/b/d"));
        assert_eq!(clean(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(bind_source("--mount=type=bind,src=/a/b/,dst=/b"), Ok(Some(PathBuf::from("/a/b"))));
        assert_eq!(bind_source("--env=A"), Ok(None));
    }
}
