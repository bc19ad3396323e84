//! Giving the allocator's free memory back to the system at a
//! coordinator's quiet points.
//!
//! A coordinator lives as long as its domain and mostly waits. What its
//! start allocated for a moment (the configuration, podman's JSON, the
//! agent branch's seed) is freed but stays resident: glibc returns only the
//! top of a heap by itself, and each worker thread has an arena of its own.
//! In an idle coordinator that was 1.7 MiB of its 3.3 MiB of anonymous
//! memory (docs/performance.md). `malloc_trim` hands every free
//! page of every arena back; it is called after the sandbox is up, after an
//! export of the agent branch (its ref files changed; the export loop's
//! look every 500 ms that finds them unchanged trims nothing) and
//! when a connection closes (a session's or an editor's), never on a timer:
//! an idle coordinator makes no `malloc_trim` call (it made two a second,
//! each some `madvise` calls, while the export loop trimmed after every
//! look; docs/performance.md, "Idle coordinators and busy domains").

/// Returns the free pages of every allocator arena to the system (glibc's
/// `malloc_trim(0)`); a no-op where the C library has none.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer of ours; it walks glibc's own
    // arenas under their locks and may be called from any thread at any
    // time, concurrently with allocations on other threads.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// This process's resident anonymous memory (`RssAnon`), in KiB.
    fn anonymous_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status.lines().find(|line| line.starts_with("RssAnon:")).expect("RssAnon");
        line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("a number of KiB")
    }

    #[test]
    fn memory_freed_below_a_live_block_goes_back_to_the_system() {
        // 32 MiB of small blocks, then one kept above them: once freed they
        // lie below the top of the heap, which glibc never trims by itself.
        let blocks: Vec<Vec<u8>> = (0..32 * 1024).map(|_| vec![1u8; 1024]).collect();
        let kept = vec![1u8; 1024];
        drop(blocks);
        let before = anonymous_kib();
        release_free_memory();
        let after = anonymous_kib();
        assert!(before.saturating_sub(after) > 16 * 1024, "RssAnon {before} KiB before, {after} KiB after");
        assert_eq!(kept[0], 1);
    }
}
