//! Counters bumped on the request path (relaxed atomics: one add each), read by the metric
//! exporter ([`crate::telemetry`]) at each collection.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kafka_protocol::messages::ApiKey;

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
