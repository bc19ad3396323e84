//! How a sandbox's resource limits (`[limits]`, attack review finding 5)
//! are enforced here, and the podman arguments that do it.
//!
//! Measured on these machines (docs/security.md has the table), for Debian's
//! runsc and a current one alike:
//! - podman's `--memory`, `--pids-limit` and `--cpus` do nothing under
//!   `--runtime-flag=ignore-cgroups`: 1,000 processes and a 1.5 GiB memory
//!   hog ran inside a sandbox "limited" to 200 and 512 MiB.
//! - gVisor enforces `RLIMIT_NPROC` itself, per user inside the sandbox
//!   (fork fails with `EAGAIN`; the sandbox stays usable), rootful and
//!   rootless. Per user: with `CAP_SETUID` the agent (root inside) got a full
//!   allowance for each user id it switched to (`setpriv --reuid`: 58 + 4 ×
//!   64 = 318 processes under `processes = 64`, rootful and rootless). So the
//!   sandbox runs without `CAP_SETUID` and `CAP_SETGID` (`--cap-drop`; with
//!   `no-new-privileges` no set-user-ID or file-capability binary gives them
//!   back): every task stays with the user it started as, and `processes`
//!   bounds the whole sandbox (at most 64 live under 64). Raising the limit
//!   needs `CAP_SYS_RESOURCE`, which the sandbox never had.
//! - gVisor's own cgroups are no substitute: with the default in-sandbox
//!   cgroup v1, `pids.max` is writable from inside and a fork charges only
//!   one of the task's seven hierarchies, chosen at random, so 400 tasks
//!   started under `pids.max` = 30; the in-sandbox cgroup v2 of the current
//!   runsc (`--in-sandbox-cgroup=v2`) counts correctly but runsc never sets
//!   its `pids.max` from the OCI spec, and `runsc write-control` on it
//!   crashes the sandbox (runsc 20260905).
//! - Rootful, without `ignore-cgroups`, runsc puts the whole sandbox (sentry,
//!   gofer, the platform's stub threads) into podman's host cgroups: memory
//!   and CPU quota are enforced; past the memory limit the host OOM killer
//!   ends the sentry, i.e. the whole sandbox. Host pids count the sandbox's
//!   host threads (about 2 per task with systrap, 8 with ptrace) and the
//!   sentry dies when it cannot make one, so the pids cgroup is only a
//!   generous backstop behind `RLIMIT_NPROC`.
//! - Rootless on cgroup v1 (no delegation), runsc cannot create cgroups at
//!   all: only `RLIMIT_NPROC` applies; memory and CPU are not enforceable.

use lazaret_core::limits::{format_bytes, Limits};

/// Host pids allowed per sandbox task in the backstop (ptrace: 7.6 measured
/// first, then a fork bomb of 256 tasks peaked at 2,303 host threads: about 8.0
/// per task plus the base, so 10 leaves ptrace room before the backstop).
pub const HOST_PIDS_PER_TASK: u64 = 10;
/// Host pids for the sandbox itself (sentry, gofer, init) in the backstop.
pub const HOST_PIDS_BASE: u64 = 256;
/// The capabilities a sandbox never gets: `RLIMIT_NPROC` counts per user,
/// and these would let the agent (root inside) start tasks as other users.
pub const DROPPED_CAPABILITIES: [&str; 2] = ["--cap-drop=SETUID", "--cap-drop=SETGID"];

/// What this host offers for enforcing limits, read once.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Running as root (rootful podman).
    pub rootful: bool,
    /// `MemTotal`, bytes.
    pub memory: u64,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The hard `RLIMIT_NPROC` of this process (podman cannot go above it).
    pub nproc_hard: u64,
    /// `kernel.pid_max`: the host's pid space, shared by every process.
    pub pid_max: u64,
    pub cgroups: Cgroups,
}

/// The host's cgroup controllers Lazaret needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cgroups {
    /// `/sys/fs/cgroup` is a unified (v2) hierarchy.
    pub v2: bool,
    pub memory: bool,
    pub pids: bool,
    pub cpu: bool,
}

impl Cgroups {
    fn all(&self) -> bool {
        self.memory && self.pids && self.cpu
    }
}

impl Host {
    /// Reads this host: uid, `/proc/meminfo`, CPUs, rlimits, cgroups.
    pub fn probe() -> Host {
        use nix::sys::resource::{getrlimit, Resource};
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|line| line.starts_with("MemTotal:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024);
        Host {
            rootful: nix::unistd::geteuid().is_root(),
            memory,
            cpus: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            nproc_hard: getrlimit(Resource::RLIMIT_NPROC).map_or(1024, |(_, hard)| hard),
            pid_max: std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|text| text.trim().parse().ok()).unwrap_or(32_768),
            cgroups: Cgroups::probe(),
        }
    }
}

impl Cgroups {
    /// Which controllers are mounted (v1) or available (v2).
    pub fn probe() -> Cgroups {
        let root = std::path::Path::new("/sys/fs/cgroup");
        match std::fs::read_to_string(root.join("cgroup.controllers")) {
            Ok(controllers) => {
                let has = |name: &str| controllers.split_whitespace().any(|controller| controller == name);
                Cgroups { v2: true, memory: has("memory"), pids: has("pids"), cpu: has("cpu") }
            }
            Err(_) => {
                let has = |name: &str| root.join(name).join("tasks").exists();
                Cgroups { v2: false, memory: has("memory"), pids: has("pids"), cpu: has("cpu") }
            }
        }
    }
}

/// How one limit fares here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "how")]
pub enum Enforcement {
    /// Enforced, and by what.
    Enforced(String),
    /// Set, but nothing here can enforce it, and why.
    NotEnforceable(String),
    /// No limit is set (and none is needed).
    Unlimited(String),
}

/// One limit: its name as configured, its value in force, whether the
/// configuration set it, and how it is enforced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LimitReport {
    pub name: &'static str,
    pub value: String,
    pub configured: bool,
    pub enforcement: Enforcement,
}

impl LimitReport {
    /// The warning `lazaret run` prints for a configured limit that cannot
    /// be enforced here.
    pub fn warning(&self) -> Option<String> {
        match &self.enforcement {
            Enforcement::NotEnforceable(why) if self.configured => {
                Some(format!("limits.{} = {} cannot be enforced here: {why}", self.name, self.value))
            }
            _ => None,
        }
    }
}

/// The podman arguments that enforce the limits, and what each one gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub arguments: Vec<String>,
    pub memory: LimitReport,
    pub processes: LimitReport,
    pub cpus: LimitReport,
}

impl Plan {
    pub fn reports(&self) -> [&LimitReport; 3] {
        [&self.memory, &self.processes, &self.cpus]
    }

    pub fn warnings(&self) -> Vec<String> {
        self.reports().into_iter().filter_map(LimitReport::warning).collect()
    }
}

/// Why host cgroups cannot be used here, or `None` when they can.
fn no_host_cgroups(host: &Host) -> Option<String> {
    if !host.rootful {
        return Some(if host.cgroups.v2 {
            "rootless, runsc runs with ignore-cgroups (Lazaret does not use cgroup v2 delegation yet); run as root to enforce it".into()
        } else {
            "rootless on cgroup v1, which cannot delegate cgroups to an ordinary user, so runsc runs with ignore-cgroups; run as root to enforce it"
                .into()
        });
    }
    if !host.cgroups.all() {
        let missing: Vec<&str> = [("memory", host.cgroups.memory), ("pids", host.cgroups.pids), ("cpu", host.cgroups.cpu)]
            .into_iter()
            .filter_map(|(name, present)| (!present).then_some(name))
            .collect();
        return Some(format!("the host lacks the cgroup controller(s) {}, so runsc runs with ignore-cgroups", missing.join(", ")));
    }
    None
}

/// The arguments and reports for `limits` on `host`.
pub fn plan(limits: &Limits, host: &Host) -> Plan {
    let processes = limits.processes().min(host.nproc_hard);
    let memory = limits.memory(host.memory);
    let clamped = if processes < limits.processes() {
        format!(" (lowered from {} to this user's hard RLIMIT_NPROC)", limits.processes())
    } else {
        String::new()
    };
    let mut arguments = vec![format!("--ulimit=nproc={processes}:{processes}")];
    arguments.extend(DROPPED_CAPABILITIES.map(str::to_owned));
    let memory_value = if limits.memory.is_some() {
        format_bytes(memory)
    } else {
        format!("{} (default: half of the host's {})", format_bytes(memory), format_bytes(host.memory))
    };
    let cpus_value = limits.cpus.map_or_else(|| "none".to_owned(), |cpus| format!("{cpus}"));
    let in_gvisor = format!(
        "gVisor's RLIMIT_NPROC of {processes} tasks per user inside the sandbox{clamped}, and without CAP_SETUID and \
         CAP_SETGID no task changes its user: {processes} tasks in the whole sandbox (fork fails with EAGAIN, the sandbox stays usable)"
    );
    let (memory_enforcement, processes_enforcement, cpus_enforcement) = match no_host_cgroups(host) {
        Some(why) => {
            arguments.push("--runtime-flag=ignore-cgroups".into());
            let cpus = match limits.cpus {
                Some(_) => Enforcement::NotEnforceable(why.clone()),
                None => Enforcement::Unlimited("not configured".into()),
            };
            let processes = Enforcement::Enforced(in_gvisor);
            (Enforcement::NotEnforceable(why), processes, cpus)
        }
        None => {
            // Never more than half the host's pid space, whatever the platform needs.
            let backstop = processes.saturating_mul(HOST_PIDS_PER_TASK).saturating_add(HOST_PIDS_BASE).min(host.pid_max / 2);
            arguments.extend([format!("--memory={memory}"), format!("--memory-swap={memory}"), format!("--pids-limit={backstop}")]);
            let memory = Enforcement::Enforced(
                "the host memory cgroup (podman --memory): past it the host OOM killer ends the whole sandbox".into(),
            );
            let processes = Enforcement::Enforced(format!(
                "{in_gvisor}; behind it a host pids cgroup of {backstop} host threads ends the whole sandbox"
            ));
            let cpus = match limits.cpus {
                Some(cpus) if cpus < host.cpus as f64 => {
                    arguments.push(format!("--cpus={cpus}"));
                    Enforcement::Enforced("the host cpu cgroup's CFS quota (podman --cpus)".into())
                }
                Some(_) => Enforcement::Unlimited(format!("this host has only {} CPUs: nothing to limit", host.cpus)),
                None => Enforcement::Unlimited("not configured".into()),
            };
            (memory, processes, cpus)
        }
    };
    Plan {
        arguments,
        memory: LimitReport { name: "memory", value: memory_value, configured: limits.memory.is_some(), enforcement: memory_enforcement },
        processes: LimitReport {
            name: "processes",
            value: processes.to_string(),
            configured: limits.processes.is_some(),
            enforcement: processes_enforcement,
        },
        cpus: LimitReport { name: "cpus", value: cpus_value, configured: limits.cpus.is_some(), enforcement: cpus_enforcement },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(rootful: bool) -> Host {
        Host {
            rootful,
            memory: 24 << 30,
            cpus: 2,
            nproc_hard: 96_363,
            pid_max: 4_194_304,
            cgroups: Cgroups { v2: false, memory: true, pids: true, cpu: true },
        }
    }

    #[test]
    fn rootful_with_cgroups_enforces_everything_on_the_host_and_in_gvisor() {
        let limits = Limits { memory: Some(4 << 30), processes: Some(1024), cpus: Some(1.5) };
        let plan = plan(&limits, &host(true));
        assert_eq!(
            plan.arguments,
            [
                "--ulimit=nproc=1024:1024",
                "--cap-drop=SETUID",
                "--cap-drop=SETGID",
                "--memory=4294967296",
                "--memory-swap=4294967296",
                "--pids-limit=10496",
                "--cpus=1.5"
            ]
        );
        assert!(plan.reports().iter().all(|report| matches!(report.enforcement, Enforcement::Enforced(_))), "{plan:?}");
        assert!(plan.warnings().is_empty());
    }

    #[test]
    fn rootless_enforces_processes_only_and_says_why_the_rest_is_not() {
        let limits = Limits { memory: Some(4 << 30), processes: None, cpus: Some(1.0) };
        let plan = plan(&limits, &host(false));
        assert_eq!(plan.arguments, ["--ulimit=nproc=4096:4096", "--cap-drop=SETUID", "--cap-drop=SETGID", "--runtime-flag=ignore-cgroups"]);
        assert!(matches!(plan.processes.enforcement, Enforcement::Enforced(_)));
        let warnings = plan.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("limits.memory = 4G cannot be enforced here: rootless on cgroup v1"), "{warnings:?}");
        assert!(warnings[1].starts_with("limits.cpus = 1 cannot be enforced here"), "{warnings:?}");
    }

    #[test]
    fn the_process_limit_bounds_the_whole_sandbox_because_no_task_can_change_its_user() {
        for rootful in [true, false] {
            let plan = plan(&Limits { processes: Some(64), ..Limits::default() }, &host(rootful));
            for dropped in ["--cap-drop=SETUID", "--cap-drop=SETGID"] {
                assert!(plan.arguments.iter().any(|argument| argument == dropped), "rootful {rootful}: {:?}", plan.arguments);
            }
            let Enforcement::Enforced(how) = &plan.processes.enforcement else { panic!("{plan:?}") };
            assert!(how.starts_with("gVisor's RLIMIT_NPROC of 64 tasks per user"), "{how}");
            assert!(how.contains("without CAP_SETUID and CAP_SETGID") && how.contains("64 tasks in the whole sandbox"), "{how}");
            assert!(!how.contains("for each"), "no allowance per user id any more: {how}");
            assert!(plan.warnings().is_empty(), "{:?}", plan.warnings());
        }
        let Enforcement::Enforced(rootful) = plan(&Limits::default(), &host(true)).processes.enforcement else { panic!("rootful") };
        assert!(rootful.ends_with("behind it a host pids cgroup of 41216 host threads ends the whole sandbox"), "{rootful}");
    }

    #[test]
    fn defaults_apply_and_unconfigured_limits_give_no_warning() {
        let plan = plan(&Limits::default(), &host(false));
        assert!(plan.warnings().is_empty(), "the default memory limit is reported by doctor, not warned about at every run");
        assert!(matches!(plan.memory.enforcement, Enforcement::NotEnforceable(_)));
        assert_eq!(plan.memory.value, "12G (default: half of the host's 24G)");
        assert_eq!(plan.cpus.enforcement, Enforcement::Unlimited("not configured".into()));
        let rootful = super::plan(&Limits::default(), &host(true));
        assert!(rootful.arguments.contains(&"--memory=12884901888".to_owned()), "{:?}", rootful.arguments);
        assert!(rootful.arguments.contains(&"--pids-limit=41216".to_owned()), "{:?}", rootful.arguments);
        let small_pid_space = Host { pid_max: 32_768, ..host(true) };
        let capped = super::plan(&Limits::default(), &small_pid_space);
        assert!(capped.arguments.contains(&"--pids-limit=16384".to_owned()), "half of pid_max: {:?}", capped.arguments);
    }

    #[test]
    fn values_beyond_the_host_are_lowered_or_dropped() {
        let mut small = host(true);
        small.nproc_hard = 500;
        let plan = plan(&Limits { memory: None, processes: Some(4096), cpus: Some(8.0) }, &small);
        assert_eq!(plan.arguments[0], "--ulimit=nproc=500:500");
        assert!(!plan.arguments.iter().any(|argument| argument.starts_with("--cpus")), "podman refuses more CPUs than the host has");
        assert!(matches!(&plan.cpus.enforcement, Enforcement::Unlimited(why) if why.contains("only 2 CPUs")));
        let Enforcement::Enforced(how) = &plan.processes.enforcement else { panic!("{plan:?}") };
        assert!(how.contains("lowered from 4096"), "{how}");
    }

    #[test]
    fn rootful_without_a_controller_falls_back_to_gvisor_only() {
        let mut no_memory = host(true);
        no_memory.cgroups.memory = false;
        let plan = plan(&Limits { memory: Some(1 << 30), ..Limits::default() }, &no_memory);
        assert!(plan.arguments.contains(&"--runtime-flag=ignore-cgroups".to_owned()));
        assert!(plan.warnings()[0].contains("lacks the cgroup controller(s) memory"), "{:?}", plan.warnings());
    }
}
