//! glibc malloc's thresholds, set for a broker's allocation pattern at startup.
//!
//! Fetch responses and the log reads behind them are buffers of a partition's
//! `max.partition.fetch.bytes` (1 MiB by default) up to a request's `fetch.max.bytes`, allocated
//! and freed for every fetch. With glibc's defaults (its dynamic mmap threshold and a trim
//! threshold of twice that), a heap's top is trimmed back to the OS after a burst of such
//! frees, and the next fetch faults every page in again: measured, page faults were a fifth of
//! the broker's CPU when consuming, and keeping the memory raised consume throughput 1.55x
//! (docs/benchmarks.md, "Replicated, and where the time goes"). Peak RSS barely moves, since the
//! same memory is used again instead of returned and faulted back.
#![allow(unsafe_code)]

/// Allocations up to this size come from the heap, not a mapping of their own (glibc's dynamic
/// threshold stops at 32 MiB too, but only after it has seen a free of that size).
pub const MMAP_THRESHOLD: usize = 32 << 20;
/// Free memory a heap keeps at its top rather than returning it to the OS.
pub const TRIM_THRESHOLD: usize = 128 << 20;

/// Sets the thresholds, unless `GLIBC_TUNABLES` sets malloc parameters of its own (the
/// operator's choice wins). Call first in `main`, before any other thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return;
        }
        // SAFETY: mallopt only changes the allocator's parameters, which glibc reads under its
        // own locks; there is no pointer involved. Both values fit in a c_int.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
        }
    }
}
