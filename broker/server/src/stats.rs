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
pub const API_SLOTS: usize = 128;

fn slot(api: ApiKey) -> usize {
    usize::try_from(api as i16).unwrap_or(0).min(API_SLOTS - 1)
}

/// Upper bounds (seconds) of the request duration histogram's buckets (then +Inf): from half a
/// millisecond, an in-memory answer, to 10 s, past a fetch's longest usual wait.
pub const REQUEST_SECONDS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// One API's request durations: requests per bucket of [`REQUEST_SECONDS`] (not cumulative; the
/// last is +Inf) and their sum.
#[derive(Clone, Debug, PartialEq)]
pub struct Durations {
    pub api: i16,
    pub buckets: [u64; REQUEST_SECONDS.len() + 1],
    pub sum_seconds: f64,
}

/// Where request durations also go when metrics are exported over OTLP: the SDK has no
/// asynchronous histogram to read [`Stats`] with, so a synchronous one records each request.
pub struct OtlpDurations {
    pub histogram: opentelemetry::metrics::Histogram<f64>,
    /// The `api` attribute of each slot, built once (recording then allocates nothing).
    pub attributes: Vec<[opentelemetry::KeyValue; 1]>,
}

/// Counters bumped on the request path (relaxed atomics: one add each).
pub struct Stats {
    requests: [AtomicU64; API_SLOTS],
    /// Per API slot: requests per duration bucket, and the sum of their durations in µs.
    durations: [[AtomicU64; REQUEST_SECONDS.len() + 1]; API_SLOTS],
    duration_sum_us: [AtomicU64; API_SLOTS],
    otlp_durations: std::sync::OnceLock<OtlpDurations>,
    produced_records: AtomicU64,
    produced_bytes: AtomicU64,
    fetched_bytes: AtomicU64,
    connections: AtomicI64,
    /// Requests parked in each [`Purgatory`] now.
    waiting: [AtomicI64; Purgatory::ALL.len()],
}

/// Where a request waits for something to happen (Kafka's delayed-operation purgatories).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purgatory {
    /// An acks=all produce request, for the in-sync replicas to have its writes.
    Produce,
    /// A fetch (a consumer's or a follower's) with less than `min_bytes` to answer, for data or
    /// `max_wait_ms`.
    Fetch,
}

impl Purgatory {
    pub const ALL: [Purgatory; 2] = [Purgatory::Produce, Purgatory::Fetch];

    /// Its label value (Kafka's `delayedOperation` tag, lower case).
    pub fn label(self) -> &'static str {
        match self {
            Purgatory::Produce => "produce",
            Purgatory::Fetch => "fetch",
        }
    }
}

/// A request counted in a purgatory until dropped.
pub struct Waiting<'a>(&'a AtomicI64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
            durations: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            duration_sum_us: std::array::from_fn(|_| AtomicU64::new(0)),
            otlp_durations: std::sync::OnceLock::new(),
            produced_records: AtomicU64::new(0),
            produced_bytes: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            waiting: std::array::from_fn(|_| AtomicI64::new(0)),
        }
    }
}

impl Stats {
    pub fn request(&self, api: ApiKey) {
        self.requests[slot(api)].fetch_add(1, Ordering::Relaxed);
    }

    /// A request of `api` was answered (or, without an answer, done) `took` after it arrived.
    pub fn request_done(&self, api: ApiKey, took: Duration) {
        let slot = slot(api);
        let seconds = took.as_secs_f64();
        let bucket = REQUEST_SECONDS.iter().position(|b| seconds <= *b).unwrap_or(REQUEST_SECONDS.len());
        self.durations[slot][bucket].fetch_add(1, Ordering::Relaxed);
        self.duration_sum_us[slot].fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        if let Some(otlp) = self.otlp_durations.get()
            && let Some(attributes) = otlp.attributes.get(slot)
        {
            otlp.histogram.record(seconds, attributes);
        }
    }

    /// From now on request durations are also recorded into `otlp` (once; later calls are ignored).
    pub fn export_durations(&self, otlp: OtlpDurations) {
        let _ = self.otlp_durations.set(otlp);
    }

    /// Request durations of every API answered at least once.
    pub fn request_durations(&self) -> Vec<Durations> {
        (0..API_SLOTS)
            .filter_map(|slot| {
                let buckets: [u64; REQUEST_SECONDS.len() + 1] =
                    std::array::from_fn(|i| self.durations[slot][i].load(Ordering::Relaxed));
                let sum_seconds = self.duration_sum_us[slot].load(Ordering::Relaxed) as f64 / 1e6;
                (buckets.iter().sum::<u64>() > 0).then_some(Durations { api: slot as i16, buckets, sum_seconds })
            })
            .collect()
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

    /// A request starts waiting in `purgatory`; it is counted there until the guard drops.
    pub fn waiting(&self, purgatory: Purgatory) -> Waiting<'_> {
        let n = &self.waiting[purgatory as usize];
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n)
    }

    /// Requests waiting in `purgatory` now.
    pub fn purgatory_size(&self, purgatory: Purgatory) -> u64 {
        u64::try_from(self.waiting[purgatory as usize].load(Ordering::Relaxed)).unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_in_its_purgatory_while_its_guard_lives() {
        let stats = Stats::default();
        let a = stats.waiting(Purgatory::Fetch);
        let b = stats.waiting(Purgatory::Fetch);
        let c = stats.waiting(Purgatory::Produce);
        assert_eq!((stats.purgatory_size(Purgatory::Produce), stats.purgatory_size(Purgatory::Fetch)), (1, 2));
        drop(b);
        drop(c);
        assert_eq!((stats.purgatory_size(Purgatory::Produce), stats.purgatory_size(Purgatory::Fetch)), (0, 1));
        drop(a);
        assert_eq!(stats.purgatory_size(Purgatory::Fetch), 0);
    }

    #[test]
    fn request_durations_fall_in_their_buckets_per_api() {
        let stats = Stats::default();
        stats.request_done(ApiKey::Produce, Duration::from_micros(300));
        stats.request_done(ApiKey::Produce, Duration::from_millis(2));
        stats.request_done(ApiKey::Produce, Duration::from_secs(60));
        stats.request_done(ApiKey::Fetch, Duration::from_millis(500));
        let got = stats.request_durations();
        assert_eq!(got.iter().map(|d| d.api).collect::<Vec<_>>(), [ApiKey::Produce as i16, ApiKey::Fetch as i16]);
        let produce = &got[0];
        let mut want = [0; REQUEST_SECONDS.len() + 1];
        want[0] = 1; // <= 0.5 ms
        want[2] = 1; // <= 2.5 ms
        want[REQUEST_SECONDS.len()] = 1; // +Inf
        assert_eq!(produce.buckets, want);
        assert!((produce.sum_seconds - 60.0023).abs() < 1e-9, "{}", produce.sum_seconds);
        let fetch = &got[1];
        assert_eq!(fetch.buckets[REQUEST_SECONDS.iter().position(|b| *b == 0.5).unwrap_or(0)], 1);
        assert_eq!(fetch.buckets.iter().sum::<u64>(), 1);
    }
}
