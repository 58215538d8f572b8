//! # onepipe-testalloc
//!
//! Test-only tools for the property tests of every decoder reachable from the network — the 1Pipe
//! wire format, the baselines' packets, the datagram framing, the JSON control lines, the
//! controller's log entries and every application codec (docs/TESTING.md, "Decoders under random
//! and mutated input"):
//!
//! * [`CountingAlloc`], a global allocator over [`std::alloc::System`] that counts, per thread,
//!   what a closure allocates ([`measure`]): the most bytes live at once, counted from zero when
//!   the closure starts, including what it returns;
//! * [`fuzz`], a seeded loop of cases — random buffers and mutated valid encodings — that never
//!   stops at a panic without saying how to replay the case.
//!
//! It is not a coverage-guided fuzzer (cargo-fuzz is STYLE.md's optional layer 5) and it is part
//! of no build but the tests: only `[dev-dependencies]` name it. A test binary installs the
//! allocator itself, once:
//!
//! ```text
//! #[global_allocator]
//! static ALLOC: onepipe_testalloc::CountingAlloc = onepipe_testalloc::CountingAlloc;
//! ```
//!
//! The workspace forbids `unsafe_code`; this crate does not inherit the workspace's lints because
//! a `GlobalAlloc` cannot be written without `unsafe`. Its only unsafe code is that impl, which
//! hands every call unchanged to `System` and only adds up sizes on the side.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod fuzz;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// A global allocator that forwards to [`System`] and, while [`measure`] runs on a thread,
/// counts that thread's allocations. Other threads, and the same thread outside `measure`, are
/// not counted (and cost one thread-local read per call).
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

/// What a closure allocated ([`measure`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The most bytes live at once, counted from zero when the closure started (memory freed
    /// that was allocated before it makes the count go down, never below what the closure holds).
    /// A reallocation counts as its new block allocated before its old one is freed: what a
    /// moving `realloc` holds at its worst.
    pub peak_bytes: usize,
    /// Allocations and reallocations made.
    pub allocations: usize,
}

/// One thread's counters. `const`-initialised and without `Drop`, so reading it from inside the
/// allocator never allocates and never registers a destructor.
struct Meter {
    armed: Cell<bool>,
    live: Cell<isize>,
    peak: Cell<isize>,
    allocations: Cell<usize>,
}

thread_local! {
    static METER: Meter = const {
        Meter {
            armed: Cell::new(false),
            live: Cell::new(0),
            peak: Cell::new(0),
            allocations: Cell::new(0),
        }
    };
}

/// Counts `alloc` bytes allocated, then `free` bytes freed, if this thread is being measured.
fn record(alloc: usize, free: usize) {
    // `try_with`: the thread may be tearing down its thread-locals; nothing is measured then.
    let _ = METER.try_with(|m| {
        if !m.armed.get() {
            return;
        }
        let grown = m.live.get() + alloc as isize;
        m.peak.set(m.peak.get().max(grown));
        m.live.set(grown - free as isize);
        if alloc > 0 {
            m.allocations.set(m.allocations.get() + 1);
        }
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counting beside it neither allocates nor touches the blocks.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract (a non-zero size).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size(), 0);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size(), 0);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a block this allocator (that is, `System`) gave with
        // `layout`.
        unsafe { System.dealloc(ptr, layout) };
        record(0, layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a block `System` gave with `layout`, and a valid new size.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            record(new_size, layout.size());
        }
        p
    }
}

/// Runs `f` on this thread and returns what it returned and what it allocated, the returned
/// value's memory included. Not reentrant: a `measure` inside `f` restarts the count.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Usage) {
    /// Stops counting even if `f` unwinds.
    struct Disarm;
    impl Drop for Disarm {
        fn drop(&mut self) {
            METER.with(|m| m.armed.set(false));
        }
    }
    METER.with(|m| {
        m.live.set(0);
        m.peak.set(0);
        m.allocations.set(0);
        m.armed.set(true);
    });
    let disarm = Disarm;
    let r = f();
    drop(disarm);
    let usage = METER.with(|m| Usage {
        peak_bytes: usize::try_from(m.peak.get()).unwrap_or(0),
        allocations: m.allocations.get(),
    });
    (r, usage)
}

/// Whether this binary's global allocator is a [`CountingAlloc`]: without it every
/// [`measure`] reads zero, and a bound would hold vacuously.
pub fn installed() -> bool {
    let (v, usage) = measure(|| std::hint::black_box(vec![0u8; 64]));
    drop(v);
    usage.peak_bytes >= 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: CountingAlloc = CountingAlloc;

    #[test]
    fn measure_counts_the_peak_and_what_is_returned() {
        assert!(installed());
        let (v, u) = measure(|| {
            let scratch = std::hint::black_box(vec![1u8; 1000]);
            drop(scratch);
            std::hint::black_box(vec![2u8; 100])
        });
        assert_eq!(v.len(), 100);
        assert_eq!(u.peak_bytes, 1000);
        assert_eq!(u.allocations, 2);
        let (_, u) = measure(|| std::hint::black_box(1 + 1));
        assert_eq!(u, Usage::default());
    }

    #[test]
    fn a_growing_vector_counts_both_blocks_of_a_reallocation() {
        let (v, u) = measure(|| {
            let mut v: Vec<u8> = Vec::with_capacity(64);
            v.extend(std::hint::black_box([0u8; 65]));
            v
        });
        assert!(v.capacity() >= 65);
        assert_eq!(u.peak_bytes, 64 + v.capacity());
    }
}
