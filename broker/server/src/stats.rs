//! Counters bumped on the request path (relaxed atomics: one add each), and the last consumer
//! lag round ([`crate::lag`]), read by the metrics ([`crate::metrics`]) at each collection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use parking_lot::Mutex;

use crate::clock::now_ms;

/// How long after the last read of the metrics consumer lag rounds keep running.
pub const WANTED_FOR: Duration = Duration::from_secs(300);

/// Highest Kafka API key counted (keys above share the last slot).
const API_SLOTS: usize = 128;

/// Counters bumped on the request path (relaxed atomics: one add each).
pub struct Stats {
    requests: [AtomicU64; API_SLOTS],
    produced_records: AtomicU64,
    produced_bytes: AtomicU64,
    fetched_bytes: AtomicU64,
    connections: AtomicI64,
}

/// Traffic of one topic on this broker (Kafka's BrokerTopicMetrics with a topic tag). The
/// topic's [`crate::broker::Topic`] holds it, so the request path adds to it without a lookup;
/// each new view of the same topic (name and id) takes it over, so the counts carry over
/// metadata changes and partitions moving away and back, and they go with the topic.
#[derive(Default, Debug)]
pub struct TopicCounters {
    produced_records: AtomicU64,
    produced_bytes: AtomicU64,
    fetched_bytes: AtomicU64,
}

impl TopicCounters {
    pub fn produced(&self, records: u64, bytes: u64) {
        self.produced_records.fetch_add(records, Ordering::Relaxed);
        self.produced_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn fetched(&self, bytes: u64) {
        self.fetched_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// (records produced, bytes produced, bytes fetched).
    pub fn read(&self) -> (u64, u64, u64) {
        (
            self.produced_records.load(Ordering::Relaxed),
            self.produced_bytes.load(Ordering::Relaxed),
            self.fetched_bytes.load(Ordering::Relaxed),
        )
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            produced_records: AtomicU64::new(0),
            produced_bytes: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            connections: AtomicI64::new(0),
        }
    }
}

impl Stats {
    pub fn request(&self, api: ApiKey) {
        let slot = usize::try_from(api as i16).unwrap_or(0).min(API_SLOTS - 1);
        self.requests[slot].fetch_add(1, Ordering::Relaxed);
    }

    pub fn produced(&self, records: u64, bytes: u64) {
        self.produced_records.fetch_add(records, Ordering::Relaxed);
        self.produced_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn fetched(&self, bytes: u64) {
        self.fetched_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn produced_records(&self) -> u64 {
        self.produced_records.load(Ordering::Relaxed)
    }

    pub fn produced_bytes(&self) -> u64 {
        self.produced_bytes.load(Ordering::Relaxed)
    }

    pub fn fetched_bytes(&self) -> u64 {
        self.fetched_bytes.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> i64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// (API key, requests) for every API asked at least once.
    pub fn requests(&self) -> Vec<(i16, u64)> {
        self.requests
            .iter()
            .enumerate()
            .map(|(k, n)| (k as i16, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// One group's lag on one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicLag {
    pub group: String,
    pub topic: String,
    /// Sum over the committed partitions whose high watermark is known this round.
    pub lag: u64,
}

/// What the last round found.
#[derive(Clone, Debug, Default)]
pub struct Round {
    pub lag: Vec<TopicLag>,
    /// Groups coordinated here by (type, state): `classic`/`consumer`, Kafka's state names.
    pub groups: BTreeMap<(&'static str, &'static str), u64>,
}

/// The last round of [`crate::lag`], and when the metrics last read it.
#[derive(Default)]
pub struct LagBoard {
    last: Mutex<Arc<Round>>,
    read_at_ms: AtomicI64,
}

impl LagBoard {
    /// The last round; marks the metrics as watched, which keeps rounds running.
    pub fn read(&self) -> Arc<Round> {
        self.read_at_ms.store(now_ms(), Ordering::Relaxed);
        self.last.lock().clone()
    }

    /// Whether the metrics were read within [`WANTED_FOR`] of `now` (ms).
    pub fn wanted(&self, now: i64) -> bool {
        let read = self.read_at_ms.load(Ordering::Relaxed);
        read > 0 && now - read <= WANTED_FOR.as_millis() as i64
    }

    /// Replaces the last round.
    pub fn publish(&self, round: Round) {
        *self.last.lock() = Arc::new(round);
    }
}
