//! Resource limits of an agent sandbox (attack review finding 5): the values
//! of `[limits]` and `[profiles.<name>.limits]` (`memory`, `processes`,
//! `cpus`), their defaults and their syntax. How each one is enforced
//! depends on the mode (rootful or rootless) and the runtime, and is decided
//! by `lazaret_coordinator::resource_limits`.

/// Tasks (processes and threads) in the sandbox when nothing is configured
/// (gVisor counts them per user; no task in the sandbox can change its user,
/// so that is the whole sandbox): far above what an agent, `git`, `node` or
/// a `cargo build` on a few cores use (a few hundred), far below a fork bomb.
pub const DEFAULT_PROCESSES: u64 = 4096;
/// The smallest `processes` accepted: below it the sandbox's own init,
/// shells and `podman exec` sessions do not fit.
pub const MIN_PROCESSES: u64 = 32;
/// The largest `processes` accepted (Linux's `pid_max` ceiling).
pub const MAX_PROCESSES: u64 = 4_194_304;
/// The smallest `memory` accepted: gVisor's sentry alone needs tens of MiB.
pub const MIN_MEMORY: u64 = 64 << 20;
/// The default memory limit is the host's memory divided by this: the agent
/// gets room for builds, the user's own work on the host keeps the rest.
pub const DEFAULT_MEMORY_DIVISOR: u64 = 2;
/// The range of `cpus`.
pub const CPUS_RANGE: std::ops::RangeInclusive<f64> = 0.01..=1024.0;

/// Limits as configured: `None` where neither the profile nor `[limits]`
/// sets a value (then the default applies: [`Limits::processes`],
/// [`default_memory`], no CPU limit).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Limits {
    /// Bytes of memory for the whole sandbox.
    pub memory: Option<u64>,
    /// Tasks in the sandbox (gVisor's `RLIMIT_NPROC`, per user; the sandbox
    /// has no `CAP_SETUID`, so all its tasks keep their user).
    pub processes: Option<u64>,
    /// CPUs (fractions allowed).
    pub cpus: Option<f64>,
}

impl Limits {
    /// These limits, each key that is not set taken from `base` (a profile's
    /// `limits` over the global `[limits]`).
    pub fn or(self, base: Limits) -> Limits {
        Limits { memory: self.memory.or(base.memory), processes: self.processes.or(base.processes), cpus: self.cpus.or(base.cpus) }
    }

    /// The process limit in force: configured, else [`DEFAULT_PROCESSES`].
    pub fn processes(&self) -> u64 {
        self.processes.unwrap_or(DEFAULT_PROCESSES)
    }

    /// The memory limit in force on a host with `host_memory` bytes.
    pub fn memory(&self, host_memory: u64) -> u64 {
        self.memory.unwrap_or_else(|| default_memory(host_memory))
    }
}

/// The default memory limit on a host with `host_memory` bytes (half of it,
/// at least [`MIN_MEMORY`]).
pub fn default_memory(host_memory: u64) -> u64 {
    (host_memory / DEFAULT_MEMORY_DIVISOR).max(MIN_MEMORY)
}

/// Parses a memory size: digits with an optional binary unit `K`, `M`, `G`
/// or `T` (e.g. `512M`, `4G`; no unit: bytes). The message names the
/// problem; the caller adds the field.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let not_a_size = || format!("`{text}` is not a memory size (a whole number with K, M, G or T, e.g. \"4G\")");
    let digits = trimmed.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(not_a_size());
    }
    let shift = match trimmed[digits.len()..].to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        unit => return Err(format!("`{text}`: unknown unit `{unit}` (use K, M, G or T, e.g. \"4G\")")),
    };
    let bytes =
        digits.parse::<u64>().ok().and_then(|number| number.checked_mul(1u64 << shift)).ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes < MIN_MEMORY {
        return Err(format!("`{text}` is below the minimum of {}", format_bytes(MIN_MEMORY)));
    }
    Ok(bytes)
}

/// Bytes for people: the largest binary unit that divides them, else GiB or
/// MiB with one decimal.
pub fn format_bytes(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    for (shift, unit) in [(30, "G"), (20, "M")] {
        if bytes >= 1 << shift {
            return format!("{:.1}{unit}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes}B")
}

/// Checks `processes`; the message names the problem.
pub fn check_processes(value: i64) -> Result<u64, String> {
    u64::try_from(value)
        .ok()
        .filter(|value| (MIN_PROCESSES..=MAX_PROCESSES).contains(value))
        .ok_or_else(|| format!("`{value}` is out of range ({MIN_PROCESSES} to {MAX_PROCESSES})"))
}

/// Checks `cpus`; the message names the problem.
pub fn check_cpus(value: f64) -> Result<f64, String> {
    if CPUS_RANGE.contains(&value) {
        Ok(value)
    } else {
        Err(format!("`{value}` is out of range ({} to {} CPUs)", CPUS_RANGE.start(), CPUS_RANGE.end()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_take_binary_units() {
        assert_eq!(parse_memory("4G"), Ok(4 << 30));
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("1T"), Ok(1 << 40));
        assert_eq!(parse_memory("1048576K"), Ok(1 << 30));
        assert_eq!(parse_memory("134217728"), Ok(128 << 20));
        for bad in ["", "G", "4.5G", "-1G", "4GB", "4X", "lots", "99999999999999999999T"] {
            assert!(parse_memory(bad).is_err(), "{bad} must be refused");
        }
        assert!(parse_memory("1M").expect_err("too small").contains("minimum of 64M"));
    }

    #[test]
    fn bytes_are_shown_in_the_largest_whole_unit() {
        assert_eq!(format_bytes(4 << 30), "4G");
        assert_eq!(format_bytes(1536 << 20), "1536M");
        assert_eq!(format_bytes(12_341_792_768), "11.5G");
        assert_eq!(format_bytes(1536 << 10), "1.5M");
        assert_eq!(format_bytes(512), "512B");
    }

    #[test]
    fn a_profile_overrides_the_global_limits_key_by_key() {
        let global = Limits { memory: Some(8 << 30), processes: Some(2048), cpus: None };
        let profile = Limits { memory: None, processes: Some(512), cpus: Some(1.5) };
        assert_eq!(profile.or(global), Limits { memory: Some(8 << 30), processes: Some(512), cpus: Some(1.5) });
        assert_eq!(Limits::default().processes(), DEFAULT_PROCESSES);
        assert_eq!(Limits::default().memory(16 << 30), 8 << 30);
        assert_eq!(default_memory(0), MIN_MEMORY);
    }

    #[test]
    fn processes_and_cpus_have_ranges() {
        assert_eq!(check_processes(4096), Ok(4096));
        assert!(check_processes(31).is_err() && check_processes(-1).is_err() && check_processes(5_000_000).is_err());
        assert_eq!(check_cpus(0.5), Ok(0.5));
        assert!(check_cpus(0.0).is_err() && check_cpus(-2.0).is_err() && check_cpus(f64::NAN).is_err());
    }
}
