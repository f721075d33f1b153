//! Errors of the log crate. Per-request errors (a bad batch, an offset out of range) are kept
//! apart from storage errors (I/O, corruption found on disk), which take a partition offline.

use std::path::PathBuf;

/// A producer batch that cannot be appended. Maps to a Kafka error code in the server's single
/// error mapping.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    #[error("record batch of {size} bytes exceeds the limit of {max}")]
    TooLarge { size: usize, max: usize },
    /// The records decompress to more than a recompressed batch may hold (Kafka's
    /// MESSAGE_TOO_LARGE, as for a batch too large as sent).
    #[error("the batch's records decompress to more than {limit} bytes, the most it may hold recompressed")]
    Inflated { limit: usize },
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    #[error("timestamp {timestamp} is out of range ({reason})")]
    InvalidTimestamp { timestamp: i64, reason: String },
}

/// Errors from log operations.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("offset {offset} is out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },
    #[error("producer {producer_id}: out of order sequence {got}, expected {expected}")]
    OutOfOrderSequence { producer_id: i64, expected: i32, got: i32 },
    #[error("producer {producer_id}: epoch {got} is older than the current epoch {current}")]
    ProducerFenced { producer_id: i64, current: i16, got: i16 },
    /// A marker from a transaction coordinator older than the last one that wrote for this
    /// producer (Kafka's TRANSACTION_COORDINATOR_FENCED).
    #[error("producer {producer_id}: coordinator epoch {got} is older than the last marker's {current}")]
    CoordinatorFenced { producer_id: i64, current: i32, got: i32 },
    /// A write the producer's transaction state does not allow (Kafka's INVALID_TXN_STATE).
    #[error("producer {producer_id}: {reason}")]
    InvalidTxnState { producer_id: i64, reason: String },
    #[error("segment full: a single batch of {size} bytes does not fit in segment.bytes={max}")]
    BatchLargerThanSegment { size: usize, max: u64 },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("log corrupt in {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { path, source }
    }
    /// Whether the error means the log itself is unusable (as opposed to a bad request).
    pub fn is_storage_error(&self) -> bool {
        matches!(self, LogError::Io { .. } | LogError::Corrupt { .. })
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
