//! Replication throttles (Kafka's `ReplicationQuotaManager`): one byte-rate limit for what this
//! broker sends as a leader and one for what it fetches as a follower, both applied only to the
//! replicas a topic lists as throttled (`topic_config::Throttled`) and only while the follower
//! is out of the ISR, so a throttle slows a reassignment's copy but never the ISR's own
//! replication.
//!
//! The rate is Kafka's `SimpleRate`: bytes are recorded into samples of one window each
//! (`replication.quota.window.size.seconds`), at most `replication.quota.window.num` of them
//! are kept, and the rate is their sum over the time since the oldest one started (at least one
//! window). The limit is exceeded while that rate is above it; then throttled partitions are
//! left out of fetches (follower) or answered without records (leader) until it falls again.
//! Pure arithmetic on the times given; the broker passes the clock in.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

/// One sample: bytes recorded from `start_ms` on.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    bytes: i64,
}

#[derive(Debug)]
struct Samples {
    window_ms: i64,
    max: usize,
    /// Oldest first; the last one is current.
    list: std::collections::VecDeque<Sample>,
}

impl Samples {
    /// Drops samples that ended a whole retention span ago (Kafka's purge of obsolete samples).
    fn purge(&mut self, now_ms: i64) {
        let span = self.window_ms.saturating_mul(self.max as i64);
        while self.list.front().is_some_and(|s| now_ms - s.start_ms >= span) {
            self.list.pop_front();
        }
    }

    fn record(&mut self, bytes: i64, now_ms: i64) {
        self.purge(now_ms);
        match self.list.back_mut() {
            Some(s) if now_ms - s.start_ms < self.window_ms => s.bytes += bytes,
            _ => {
                if self.list.len() >= self.max {
                    self.list.pop_front();
                }
                self.list.push_back(Sample { start_ms: now_ms, bytes });
            }
        }
    }

    /// Bytes per second over the retained samples.
    fn rate(&mut self, now_ms: i64) -> f64 {
        self.purge(now_ms);
        let Some(oldest) = self.list.front() else { return 0.0 };
        let elapsed = (now_ms - oldest.start_ms).max(self.window_ms);
        let total: i64 = self.list.iter().map(|s| s.bytes).sum();
        total as f64 * 1000.0 / elapsed as f64
    }
}

/// A byte-rate limit on throttled replication traffic.
#[derive(Debug)]
pub struct ReplicationQuota {
    /// Bytes per second; `i64::MAX`: no limit.
    limit: AtomicI64,
    samples: Mutex<Samples>,
}

impl ReplicationQuota {
    pub fn new(limit: i64, windows: u32, window_ms: i64) -> Self {
        Self {
            limit: AtomicI64::new(limit),
            samples: Mutex::new(Samples {
                window_ms: window_ms.max(1),
                max: windows.max(1) as usize,
                list: Default::default(),
            }),
        }
    }

    pub fn set_limit(&self, limit: i64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn limit(&self) -> i64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Counts throttled bytes sent (leader) or fetched (follower).
    pub fn record(&self, bytes: usize, now_ms: i64) {
        if bytes > 0 {
            self.samples.lock().record(i64::try_from(bytes).unwrap_or(i64::MAX), now_ms);
        }
    }

    /// Whether throttled replicas must wait: the measured rate is above the limit.
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let limit = self.limit();
        limit != i64::MAX && self.samples.lock().rate(now_ms) > limit as f64
    }

    /// The measured rate (bytes/s), for logs and tests.
    pub fn rate(&self, now_ms: i64) -> f64 {
        self.samples.lock().rate(now_ms)
    }
}

/// This broker's two replication throttles.
#[derive(Debug)]
pub struct Quotas {
    /// What it sends to throttled followers out of the ISR, as a leader.
    pub leader: ReplicationQuota,
    /// What it fetches for throttled replicas out of the ISR, as a follower.
    pub follower: ReplicationQuota,
}

impl Quotas {
    pub fn new(config: &crate::BrokerConfig) -> Self {
        let q = |limit| ReplicationQuota::new(limit, config.quota_windows, config.quota_window_ms);
        Self { leader: q(config.leader_throttle_rate), follower: q(config.follower_throttle_rate) }
    }

    /// Takes the limits of a (dynamically) changed configuration.
    pub fn update(&self, config: &crate::BrokerConfig) {
        for (q, limit, name) in [
            (&self.leader, config.leader_throttle_rate, "leader.replication.throttled.rate"),
            (&self.follower, config.follower_throttle_rate, "follower.replication.throttled.rate"),
        ] {
            if q.limit() != limit {
                tracing::info!(key = name, bytes_per_second = limit, "replication throttle changed");
                q.set_limit(limit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_is_never_exceeded() {
        let q = ReplicationQuota::new(i64::MAX, 11, 1000);
        q.record(usize::MAX / 2, 0);
        assert!(!q.exceeded(1));
    }

    #[test]
    fn rate_is_bytes_over_the_retained_samples() {
        let q = ReplicationQuota::new(1000, 11, 1000);
        // Within the first window the rate is measured over one whole window.
        q.record(800, 0);
        assert_eq!(q.rate(100), 800.0);
        assert!(!q.exceeded(100));
        q.record(300, 200);
        assert!(q.exceeded(300), "1100 B in the first second");
        // Time passes with nothing sent: the rate falls below the limit again.
        assert!(!q.exceeded(1200), "1100 B over 1.2 s");
        assert!((q.rate(2000) - 550.0).abs() < 1e-9);
        // After the whole retention span the old samples are gone.
        assert_eq!(q.rate(11_500), 0.0);
    }

    #[test]
    fn a_steady_sender_at_the_limit_stays_there() {
        // Send 100 B whenever the quota allows, every 10 ms, for a minute: the rate it reaches
        // stays near the limit (the coarse check lets it overshoot by one sample at most).
        let q = ReplicationQuota::new(10_000, 11, 1000);
        let mut sent = 0i64;
        for t in (0..60_000).step_by(10) {
            if !q.exceeded(t) {
                q.record(100, t);
                sent += 100;
            }
        }
        let rate = sent as f64 / 60.0;
        assert!((9_000.0..11_500.0).contains(&rate), "{rate}");
    }

    #[test]
    fn a_new_limit_applies_at_once() {
        let q = ReplicationQuota::new(i64::MAX, 11, 1000);
        q.record(5000, 0);
        assert!(!q.exceeded(10));
        q.set_limit(1000);
        assert!(q.exceeded(10));
    }
}
