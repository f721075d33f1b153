//! Per-log settings, resolved by the server from topic configs over broker defaults.

/// What a log does with producers' compression (`compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetCompression {
    /// Keep batches exactly as the producer compressed them.
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl TargetCompression {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "producer" => Self::Producer,
            "uncompressed" | "none" => Self::Uncompressed,
            "gzip" => Self::Gzip,
            "snappy" => Self::Snappy,
            "lz4" => Self::Lz4,
            "zstd" => Self::Zstd,
            _ => return None,
        })
    }
}

/// Settings of one partition log. Defaults are Kafka's.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `segment.ms`
    pub segment_ms: i64,
    /// `retention.ms`, -1 for no limit
    pub retention_ms: i64,
    /// `retention.bytes`, -1 for no limit
    pub retention_bytes: i64,
    /// `index.interval.bytes`
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`
    pub segment_index_bytes: u64,
    /// `flush.messages`: fsync once this many records are unflushed (`i64::MAX`: never)
    pub flush_messages: i64,
    /// `flush.ms`: fsync when the oldest unflushed write is this old (`i64::MAX`: never)
    pub flush_ms: i64,
    /// `max.message.bytes`: largest batch accepted
    pub max_message_bytes: usize,
    /// `compression.type`
    pub compression: TargetCompression,
    /// `message.timestamp.type=LogAppendTime`
    pub log_append_time: bool,
    /// `cleanup.policy` contains `delete`
    pub cleanup_delete: bool,
    /// `cleanup.policy` contains `compact`
    pub cleanup_compact: bool,
    /// `delete.retention.ms`: how long a tombstone outlives the records it deletes
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty record older than this is compacted whatever the ratio
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`
    pub min_cleanable_dirty_ratio: f64,
    /// `producer.id.expiration.ms`
    pub producer_id_expiration_ms: i64,
    /// `message.timestamp.after.max.ms`: CreateTime batches further ahead are refused
    pub timestamp_after_max_ms: i64,
    /// `message.timestamp.before.max.ms`: CreateTime batches older than this are refused
    pub timestamp_before_max_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            max_message_bytes: 1_048_588,
            compression: TargetCompression::Producer,
            log_append_time: false,
            cleanup_delete: true,
            cleanup_compact: false,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            producer_id_expiration_ms: 86_400_000,
            timestamp_after_max_ms: 3_600_000,
            timestamp_before_max_ms: i64::MAX,
        }
    }
}
