//! The client's allocator: a bump arena in `.bss`, then the system's.
//!
//! `lazaret-escalate` lives for one request. Under musl every few
//! allocations cost an `mmap` or `munmap`, and inside gVisor each of those is
//! a trip to the Sentry and a change of the stub's address space (measured:
//! 19 `mmap` and 18 `munmap` of the client's 90 system calls per request).
//! Allocations are carved from a fixed zeroed arena instead and never given
//! back; what does not fit (a long command's streamed output) goes to the
//! system allocator as before, so memory stays bounded by the arena plus
//! what the system allocator holds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of the arena: a request's handshake and frames fit with room to
/// spare (it is `.bss`: pages cost nothing until touched).
const ARENA_BYTES: usize = 1 << 20;

pub struct Arena {
    bytes: UnsafeCell<[u8; ARENA_BYTES]>,
    /// Offset of the first free byte.
    next: AtomicUsize,
}

// SAFETY: the arena hands out disjoint ranges only: `next` advances with a
// compare-exchange, so two threads never get overlapping bytes, and the
// bytes are reached only through the pointers `alloc` returns.
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Arena {
        Arena { bytes: UnsafeCell::new([0; ARENA_BYTES]), next: AtomicUsize::new(0) }
    }

    fn base(&self) -> usize {
        self.bytes.get() as usize
    }

    fn contains(&self, pointer: *mut u8) -> bool {
        let address = pointer as usize;
        address >= self.base() && address < self.base() + ARENA_BYTES
    }

    /// A range of the arena for `layout`, if it still fits.
    fn carve(&self, layout: Layout) -> Option<*mut u8> {
        let base = self.base();
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + next).checked_next_multiple_of(layout.align())? - base;
            let end = start.checked_add(layout.size())?;
            if end > ARENA_BYTES {
                return None;
            }
            match self.next.compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed) {
                // `start + size <= ARENA_BYTES`, so the result stays inside the array.
                Ok(_) => return Some(self.bytes.get().cast::<u8>().wrapping_add(start)),
                Err(current) => next = current,
            }
        }
    }
}

// SAFETY: `alloc` returns either a range of the arena no other allocation
// shares, aligned as `layout` asks and `layout.size()` long (see `carve`),
// or what `System` returns; `dealloc` gives back to `System` exactly the
// pointers that came from it and leaves arena ranges alone (they are never
// reused, so no pointer can alias a later allocation).
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.carve(layout) {
            Some(pointer) => pointer,
            // SAFETY: the caller's contract for `layout` (non-zero size) is passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.carve(layout) {
            // Arena bytes start zeroed and are never handed out twice.
            Some(pointer) => pointer,
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if !self.contains(pointer) {
            // SAFETY: a pointer outside the arena came from `System.alloc`
            // with this layout (the caller's contract).
            unsafe { System.dealloc(pointer, layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_spill_to_the_system_allocator() {
        static ARENA: Arena = Arena::new();
        let arena = &ARENA;
        let mut taken: Vec<(usize, usize)> = Vec::new();
        for (size, align) in [(1, 1), (24, 8), (3, 1), (64, 64), (4096, 4096), (7, 2)] {
            let layout = Layout::from_size_align(size, align).expect("layout");
            // SAFETY: non-zero size.
            let pointer = unsafe { arena.alloc(layout) };
            assert!(arena.contains(pointer));
            assert_eq!(pointer as usize % align, 0, "aligned to {align}");
            let range = (pointer as usize, pointer as usize + size);
            assert!(taken.iter().all(|&(start, end)| range.1 <= start || range.0 >= end), "disjoint");
            taken.push(range);
        }
        let big = Layout::from_size_align(ARENA_BYTES, 8).expect("layout");
        // SAFETY: non-zero size; the pointer goes back with the same layout.
        unsafe {
            let pointer = arena.alloc_zeroed(big);
            assert!(!pointer.is_null() && !arena.contains(pointer), "what does not fit comes from the system");
            assert_eq!(*pointer.add(ARENA_BYTES - 1), 0);
            arena.dealloc(pointer, big);
        }
    }
}
