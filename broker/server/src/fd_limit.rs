//! The open-files limit, raised at startup the way the JVM raises it for Kafka.
//!
//! A broker holds a descriptor per client connection and per open log segment file (and its
//! indexes while they are mapped or open), so 10,000 partitions and 1,000 clients need well
//! over the soft limit of 1,024 that a shell or systemd gives by default, while the hard limit
//! is usually far higher. HotSpot raises its soft limit to the hard one at startup
//! (`-XX:+MaxFDLimit`, on by default), which is why Kafka runs out of descriptors later than a
//! process that keeps the default: Oxbow does the same, so the two fail at the same place.
#![allow(unsafe_code)]

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the soft limit before and after
/// when it changed it, `None` when it was already at the hard limit or could not be read or set
/// (the broker then runs with what it was given, as before).
pub fn raise() -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit into the struct we own and pass by pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur >= lim.rlim_max {
            return None;
        }
        let before = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we pass; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return None;
        }
        Some((before, lim.rlim_cur))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        super::raise();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
        assert_eq!(super::raise(), None, "a second call has nothing to raise");
    }
}
