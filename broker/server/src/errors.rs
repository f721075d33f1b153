//! The one place where internal errors become Kafka error codes. Handlers never pick codes for
//! storage or validation failures inline; they call [`code`] (or build an [`ApiError`]).

use oxbow_log::{BatchError, LogError};
use oxbow_protocol::ResponseError;

/// A per-request failure with the Kafka error it maps to and an optional message for clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error:?}: {message}")]
pub struct ApiError {
    pub error: ResponseError,
    pub message: String,
}

impl ApiError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self { error, message: message.into() }
    }
    pub fn code(&self) -> i16 {
        self.error.code()
    }
    /// The controller answered a command with a reply of the wrong kind (a bug): logged, and
    /// UNKNOWN_SERVER_ERROR for the client.
    pub fn unexpected_reply(reply: &oxbow_meta::Reply) -> Self {
        tracing::error!(?reply, "unexpected controller reply");
        ApiError::new(ResponseError::UnknownServerError, "unexpected controller reply")
    }
}

/// Kafka's error for a log error.
pub fn log_error(e: &LogError) -> ResponseError {
    match e {
        LogError::Batch(BatchError::Corrupt(_)) => ResponseError::CorruptMessage,
        LogError::Batch(BatchError::TooLarge { .. }) => ResponseError::MessageTooLarge,
        LogError::Batch(BatchError::InvalidRecord(_)) => ResponseError::InvalidRecord,
        LogError::Batch(BatchError::InvalidTimestamp { .. }) => ResponseError::InvalidTimestamp,
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        LogError::ProducerFenced { .. } => ResponseError::InvalidProducerEpoch,
        LogError::BatchLargerThanSegment { .. } => ResponseError::RecordListTooLarge,
        LogError::Io { .. } | LogError::Corrupt { .. } => ResponseError::KafkaStorageError,
    }
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> Self {
        if e.is_storage_error() {
            tracing::error!(error = %e, "storage error");
        }
        ApiError { error: log_error(&e), message: e.to_string() }
    }
}

impl From<BatchError> for ApiError {
    fn from(e: BatchError) -> Self {
        LogError::Batch(e).into()
    }
}

impl From<crate::topic_config::InvalidTopicConfig> for ApiError {
    fn from(e: crate::topic_config::InvalidTopicConfig) -> Self {
        ApiError::new(ResponseError::InvalidConfig, e.0)
    }
}

/// Kafka's error for a controller's refusal or an unreachable quorum.
impl From<oxbow_meta::CommandError> for ApiError {
    fn from(e: oxbow_meta::CommandError) -> Self {
        use oxbow_meta::{CommandError as C, Refusal as R};
        let error = match &e {
            C::Refused(r) => match r {
                R::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
                R::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
                R::InvalidPartitions(_) => ResponseError::InvalidPartitions,
                R::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
                R::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
                R::StaleBrokerEpoch(_) => ResponseError::StaleBrokerEpoch,
                R::BrokerNotRegistered(_) => ResponseError::BrokerIdNotRegistered,
                R::DuplicateBrokerRegistration(_) => ResponseError::DuplicateBrokerRegistration,
                R::NotLeader(_) => ResponseError::NotLeaderOrFollower,
                R::FencedLeaderEpoch(_) => ResponseError::FencedLeaderEpoch,
                R::InvalidUpdateVersion(_) => ResponseError::InvalidUpdateVersion,
                R::IneligibleReplica(_) => ResponseError::IneligibleReplica,
                R::NoReassignmentInProgress(_) => ResponseError::NoReassignmentInProgress,
            },
            C::NotController { .. } => ResponseError::NotController,
            C::Unavailable(_) => ResponseError::RequestTimedOut,
        };
        let message = match e {
            C::Refused(r) => r.to_string(),
            other => other.to_string(),
        };
        ApiError { error, message }
    }
}

/// Shorthand for the code of a [`ResponseError`].
pub fn code(e: ResponseError) -> i16 {
    e.code()
}
