//! The allocator's settings, applied before the broker's first allocation.
//!
//! The broker's allocator is mimalloc (feature `mimalloc`, on by default; `main.rs` makes it the
//! global allocator). Its defaults keep freed memory for a second (`purge_delay` 1000 ms) and
//! commit whole arenas eagerly on Linux, where a purge then only resets pages (`MADV_FREE`), which
//! still count as resident until the kernel needs them. Measured on the three-node,
//! 10,000-partition produce (docs/benchmarks.md, "The allocator"): defaults 452 MiB resident,
//! glibc's malloc 316–357 MiB, mimalloc with a 10 ms purge delay and lazily committed arenas
//! 267–275 MiB, at no cost elsewhere once fetch reads reuse their buffers (`oxbow_log::buffers`).
//! A `MIMALLOC_*` variable the operator sets wins over the value here.
//!
//! Without the feature (`--no-default-features`, the comparison build), glibc's malloc gets
//! thresholds for the same pattern: fetch responses and the log reads behind them are buffers of
//! a partition's `max.partition.fetch.bytes` (1 MiB by default) allocated and freed for every
//! fetch, and glibc's defaults trim the heap's top after a burst of such frees, so the next fetch
//! faults every page in again (page faults were a fifth of the broker's CPU when consuming).
#![allow(unsafe_code)]

/// mimalloc options set at startup: (option, value, the variables that override it). The
/// option numbers are mimalloc 3's `mi_option_t`, checked against the library by a test.
#[cfg(feature = "mimalloc")]
pub const MIMALLOC_OPTIONS: [(libmimalloc_sys::mi_option_t, std::ffi::c_long, &[&std::ffi::CStr]); 2] = [
    // mi_option_purge_delay: give freed pages back after 10 ms instead of 1 s.
    (15, 10, &[c"MIMALLOC_PURGE_DELAY", c"MIMALLOC_RESET_DELAY"]),
    // mi_option_arena_eager_commit: commit arena memory as it is used, so a purge decommits it.
    (4, 0, &[c"MIMALLOC_ARENA_EAGER_COMMIT", c"MIMALLOC_EAGER_REGION_COMMIT"]),
];

/// glibc: allocations up to this size come from the heap, not a mapping of their own (glibc's
/// dynamic threshold stops at 32 MiB too, but only after it has seen a free of that size).
pub const MMAP_THRESHOLD: usize = 32 << 20;
/// glibc: free memory a heap keeps at its top rather than returning it to the OS.
pub const TRIM_THRESHOLD: usize = 128 << 20;

/// Applies the settings. mimalloc reads an arena's commit mode when it reserves the arena, at the
/// first allocation, so `main.rs` calls this from the executable's constructors (`.init_array`),
/// before Rust's runtime allocates anything. It therefore must not allocate: the environment is
/// read with `getenv`, not `std::env`.
pub extern "C" fn tune() {
    #[cfg(feature = "mimalloc")]
    for (option, value, vars) in MIMALLOC_OPTIONS {
        // SAFETY: getenv reads the environment with a NUL-terminated name; nothing else changes
        // the environment this early (or, in tests, anywhere). mi_option_set stores a value in
        // mimalloc's static option table and does not allocate.
        unsafe {
            if vars.iter().all(|v| libc::getenv(v.as_ptr()).is_null()) {
                libmimalloc_sys::mi_option_set(option, value);
            }
        }
    }
    #[cfg(all(not(feature = "mimalloc"), target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: as above for getenv; mallopt only changes glibc's parameters, under its own
        // locks. Both values fit in a c_int.
        unsafe {
            let tunables = libc::getenv(c"GLIBC_TUNABLES".as_ptr());
            let own = !tunables.is_null()
                && std::ffi::CStr::from_ptr(tunables).to_bytes().windows(13).any(|w| w == b"glibc.malloc.");
            if !own {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
            }
        }
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use super::*;

    /// The option numbers name the options meant: their defaults are mimalloc 3's documented ones
    /// (a renumbered enum in a new mimalloc would read other options' defaults), and `tune`
    /// replaces them.
    #[test]
    fn tune_sets_mimalloc_options_by_their_numbers() {
        // SAFETY: mi_option_get/set only touch mimalloc's static option table.
        let get = |o| unsafe { libmimalloc_sys::mi_option_get(o) };
        if MIMALLOC_OPTIONS
            .iter()
            .any(|(_, _, vars)| vars.iter().any(|v| std::env::var_os(v.to_str().unwrap_or("")).is_some()))
        {
            panic!("unset the MIMALLOC_* variables of MIMALLOC_OPTIONS to run this test");
        }
        // The test binary has no constructor calling tune (it is main.rs's), so the defaults
        // are still there.
        assert_eq!(get(15), 1000, "mi_option_purge_delay's default");
        assert_eq!(get(4), 2, "mi_option_arena_eager_commit's default");
        assert_eq!(get(24), 1, "mi_option_arena_purge_mult's default (the enum's 24th)");
        tune();
        for (option, value, _) in MIMALLOC_OPTIONS {
            assert_eq!(get(option), value, "option {option}");
        }
    }
}
