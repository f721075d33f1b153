//! The broker's typed errors, and the one place in the server where they become Kafka error
//! codes. Handlers and the parts below them return a [`BrokerError`]; no other file of this crate
//! names a Kafka error code (`errors_are_mapped_in_one_place` in `layout.rs` checks it).
//! Group answers are typed the same way by `oxbow_group::GroupError`, mapped in its crate.

use oxbow_log::{BatchError, LogError};
use oxbow_protocol::ResponseError;

/// Why a request (or one partition of it) failed. Each variant carries the message clients see
/// in `error_message` where the response has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    // Topics and partitions.
    /// A topic looked up by name (or one of its partitions) is not in the metadata.
    #[error("{0}")]
    UnknownTopic(String),
    /// A topic looked up by id is not in the metadata.
    #[error("unknown topic id")]
    UnknownTopicId,
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    TopicExists(String),
    #[error("delete.topic.enable is false")]
    TopicDeletionDisabled,
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// An operation the controller refuses as a whole (one too large for a single batch).
    #[error("{0}")]
    PolicyViolation(String),
    #[error("{0}")]
    NoReassignmentInProgress(String),
    #[error("{0}")]
    IneligibleReplica(String),
    #[error("{0}")]
    InvalidUpdateVersion(String),
    /// A partition whose leader is not known yet (Metadata).
    #[error("leader not available")]
    LeaderNotAvailable,

    // Leadership and replication.
    /// This broker does not lead the partition (or may not act as its leader right now).
    #[error("{0}")]
    NotLeader(String),
    /// This broker's controller has not confirmed it unfenced within its session timeout, so it
    /// acts as the leader of nothing (NOT_LEADER_OR_FOLLOWER, as [`BrokerError::NotLeader`]). A
    /// produce refused so closes its connection (`handlers::produce`).
    #[error("{0}")]
    SelfFenced(String),
    #[error("{0}")]
    FencedLeaderEpoch(String),
    #[error("{0}")]
    UnknownLeaderEpoch(String),
    #[error("{0}")]
    NotEnoughReplicas(String),
    #[error("Leader election not needed for topic partition.")]
    ElectionNotNeeded,
    #[error("{0}")]
    PreferredLeaderNotAvailable(String),
    #[error("{0}")]
    EligibleLeadersNotAvailable(String),

    // What the log refused (see `From<LogError>`).
    #[error("{0}")]
    CorruptRecords(String),
    #[error("{0}")]
    MessageTooLarge(String),
    #[error("{0}")]
    RecordListTooLarge(String),
    #[error("{0}")]
    InvalidRecord(String),
    #[error("{0}")]
    InvalidTimestamp(String),
    #[error("{0}")]
    OffsetOutOfRange(String),
    #[error("{0}")]
    OutOfOrderSequence(String),
    #[error("{0}")]
    InvalidProducerEpoch(String),
    /// A transaction marker from a coordinator older than the last one that wrote for the
    /// producer.
    #[error("{0}")]
    TransactionCoordinatorFenced(String),
    /// A write the producer's transaction state does not allow.
    #[error("{0}")]
    InvalidTxnState(String),
    #[error("{0}")]
    TransactionAbortable(String),
    #[error("{0}")]
    ConcurrentTransactions(String),
    #[error("{0}")]
    InvalidProducerIdMapping(String),
    /// An error code another broker answered with, passed on as it is.
    #[error("error code {0} from another broker")]
    FromPeer(i16),
    /// The log itself is unusable (I/O error, corruption on disk).
    #[error("{0}")]
    Storage(String),

    // Requests.
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("acks={0}")]
    InvalidRequiredAcks(i16),
    #[error("{0}")]
    UnsupportedVersion(String),
    #[error("{0}")]
    TimedOut(String),
    #[error("fetch session not found")]
    FetchSessionNotFound,
    #[error("the fetch session expects another epoch")]
    InvalidFetchSessionEpoch,
    #[error("offset metadata too large")]
    OffsetMetadataTooLarge,
    /// Transactional records without a transactional id (Kafka's answer when the producer may
    /// not use its transactional id).
    #[error("{0}")]
    TransactionalIdAuthorizationFailed(String),
    #[error("{0}")]
    CoordinatorNotAvailable(String),
    #[error("{0}")]
    CoordinatorLoadInProgress(String),
    /// A group coordinator's answer (as `oxbow_group` maps it).
    #[error("group coordinator: {0:?}")]
    Group(oxbow_group::GroupError),
    /// A partition of a request some of whose partitions failed, left alone.
    #[error("not attempted")]
    OperationNotAttempted,
    #[error("{0}")]
    InvalidRegularExpression(String),

    // The controller and the quorum.
    #[error("{0}")]
    NotController(String),
    #[error("{0}")]
    StaleBrokerEpoch(String),
    #[error("{0}")]
    BrokerNotRegistered(String),
    #[error("{0}")]
    DuplicateBrokerRegistration(String),
    #[error("node {0} is already a voter")]
    DuplicateVoter(i32),
    #[error("node {0} is not a voter")]
    VoterNotFound(i32),
    #[error("{0}")]
    InconsistentClusterId(String),

    // Security.
    #[error("Topic authorization failed.")]
    TopicAuthorizationFailed,
    #[error("Group authorization failed.")]
    GroupAuthorizationFailed,
    #[error("Cluster authorization failed.")]
    ClusterAuthorizationFailed,
    #[error("{0}")]
    SecurityDisabled(String),
    #[error("{0}")]
    SaslAuthenticationFailed(String),
    #[error("{0}")]
    UnsupportedSaslMechanism(String),
    #[error("{0}")]
    IllegalSaslState(String),
    /// A SCRAM user without a credential of the mechanism (DescribeUserScramCredentials).
    #[error("{0}")]
    ResourceNotFound(String),
    #[error("{0}")]
    DuplicateResource(String),
    #[error("{0}")]
    UnacceptableCredential(String),

    /// A bug or an impossible state: logged where it is built, UNKNOWN_SERVER_ERROR for clients.
    #[error("{0}")]
    Internal(String),
}

impl BrokerError {
    /// UNKNOWN_TOPIC_ID when the topic was named by id, UNKNOWN_TOPIC_OR_PARTITION by name.
    pub fn unknown_topic(by_id: bool) -> Self {
        if by_id { BrokerError::UnknownTopicId } else { BrokerError::UnknownTopic("unknown topic or partition".into()) }
    }

    /// NOT_LEADER_OR_FOLLOWER for a partition broker `node` does not lead (the client refreshes
    /// its metadata and retries at `leader`).
    pub fn not_leader(node: i32, topic: &str, index: i32, leader: i32) -> Self {
        BrokerError::NotLeader(format!("broker {node} does not lead {topic}-{index} (leader: {leader})"))
    }

    /// The controller answered a command with a reply of the wrong kind (a bug): logged, and
    /// UNKNOWN_SERVER_ERROR for the client.
    pub fn unexpected_reply(reply: &oxbow_meta::Reply) -> Self {
        tracing::error!(?reply, "unexpected controller reply");
        BrokerError::Internal("unexpected controller reply".into())
    }

    /// The message for a response's `error_message`.
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// The Kafka error code.
    pub fn code(&self) -> i16 {
        self.kafka().code()
    }

    fn kafka(&self) -> ResponseError {
        use BrokerError as B;
        use ResponseError as K;
        match self {
            B::UnknownTopic(_) => K::UnknownTopicOrPartition,
            B::UnknownTopicId => K::UnknownTopicId,
            B::InvalidTopic(_) => K::InvalidTopicException,
            B::TopicExists(_) => K::TopicAlreadyExists,
            B::TopicDeletionDisabled => K::TopicDeletionDisabled,
            B::InvalidPartitions(_) => K::InvalidPartitions,
            B::InvalidReplicationFactor(_) => K::InvalidReplicationFactor,
            B::InvalidReplicaAssignment(_) => K::InvalidReplicaAssignment,
            B::PolicyViolation(_) => K::PolicyViolation,
            B::NoReassignmentInProgress(_) => K::NoReassignmentInProgress,
            B::IneligibleReplica(_) => K::IneligibleReplica,
            B::InvalidUpdateVersion(_) => K::InvalidUpdateVersion,
            B::LeaderNotAvailable => K::LeaderNotAvailable,
            B::NotLeader(_) | B::SelfFenced(_) => K::NotLeaderOrFollower,
            B::FencedLeaderEpoch(_) => K::FencedLeaderEpoch,
            B::UnknownLeaderEpoch(_) => K::UnknownLeaderEpoch,
            B::NotEnoughReplicas(_) => K::NotEnoughReplicas,
            B::ElectionNotNeeded => K::ElectionNotNeeded,
            B::PreferredLeaderNotAvailable(_) => K::PreferredLeaderNotAvailable,
            B::EligibleLeadersNotAvailable(_) => K::EligibleLeadersNotAvailable,
            B::CorruptRecords(_) => K::CorruptMessage,
            B::MessageTooLarge(_) => K::MessageTooLarge,
            B::RecordListTooLarge(_) => K::RecordListTooLarge,
            B::InvalidRecord(_) => K::InvalidRecord,
            B::InvalidTimestamp(_) => K::InvalidTimestamp,
            B::OffsetOutOfRange(_) => K::OffsetOutOfRange,
            B::OutOfOrderSequence(_) => K::OutOfOrderSequenceNumber,
            B::InvalidProducerEpoch(_) => K::InvalidProducerEpoch,
            B::TransactionCoordinatorFenced(_) => K::TransactionCoordinatorFenced,
            B::InvalidTxnState(_) => K::InvalidTxnState,
            B::TransactionAbortable(_) => K::TransactionAbortable,
            B::ConcurrentTransactions(_) => K::ConcurrentTransactions,
            B::InvalidProducerIdMapping(_) => K::InvalidProducerIdMapping,
            B::FromPeer(code) => ResponseError::try_from_code(*code).unwrap_or(K::UnknownServerError),
            B::Storage(_) => K::KafkaStorageError,
            B::InvalidRequest(_) => K::InvalidRequest,
            B::InvalidConfig(_) => K::InvalidConfig,
            B::InvalidRequiredAcks(_) => K::InvalidRequiredAcks,
            B::UnsupportedVersion(_) => K::UnsupportedVersion,
            B::TimedOut(_) => K::RequestTimedOut,
            B::FetchSessionNotFound => K::FetchSessionIdNotFound,
            B::InvalidFetchSessionEpoch => K::InvalidFetchSessionEpoch,
            B::OffsetMetadataTooLarge => K::OffsetMetadataTooLarge,
            B::TransactionalIdAuthorizationFailed(_) => K::TransactionalIdAuthorizationFailed,
            B::CoordinatorNotAvailable(_) => K::CoordinatorNotAvailable,
            B::CoordinatorLoadInProgress(_) => K::CoordinatorLoadInProgress,
            B::Group(e) => e.kafka(),
            B::OperationNotAttempted => K::OperationNotAttempted,
            B::InvalidRegularExpression(_) => K::InvalidRegularExpression,
            B::NotController(_) => K::NotController,
            B::StaleBrokerEpoch(_) => K::StaleBrokerEpoch,
            B::BrokerNotRegistered(_) => K::BrokerIdNotRegistered,
            B::DuplicateBrokerRegistration(_) => K::DuplicateBrokerRegistration,
            B::DuplicateVoter(_) => K::DuplicateVoter,
            B::VoterNotFound(_) => K::VoterNotFound,
            B::InconsistentClusterId(_) => K::InconsistentClusterId,
            B::TopicAuthorizationFailed => K::TopicAuthorizationFailed,
            B::GroupAuthorizationFailed => K::GroupAuthorizationFailed,
            B::ClusterAuthorizationFailed => K::ClusterAuthorizationFailed,
            B::SecurityDisabled(_) => K::SecurityDisabled,
            B::SaslAuthenticationFailed(_) => K::SaslAuthenticationFailed,
            B::UnsupportedSaslMechanism(_) => K::UnsupportedSaslMechanism,
            B::IllegalSaslState(_) => K::IllegalSaslState,
            B::ResourceNotFound(_) => K::ResourceNotFound,
            B::DuplicateResource(_) => K::DuplicateResource,
            B::UnacceptableCredential(_) => K::UnacceptableCredential,
            B::Internal(_) => K::UnknownServerError,
        }
    }
}

impl BrokerError {
    /// The produce error for a transaction coordinator's verdict on a partition (`None`: the
    /// coordinator did not answer), as Kafka's `AddPartitionsToTxnManager` and
    /// `ReplicaManager` translate it for `produce_version`: an unavailable coordinator is
    /// NOT_ENOUGH_REPLICAS (the producer retries), a partition outside the transaction
    /// INVALID_TXN_STATE before v11 and TRANSACTION_ABORTABLE from it, a fenced producer
    /// INVALID_PRODUCER_EPOCH. `Ok` when the partition is in the transaction.
    pub fn from_txn_verdict(code: Option<i16>, produce_version: i16) -> Result<(), BrokerError> {
        use ResponseError as K;
        let Some(code) = code else {
            return Err(BrokerError::NotEnoughReplicas("the transaction coordinator did not answer".into()));
        };
        let unavailable = || BrokerError::NotEnoughReplicas("the transaction coordinator is not available".into());
        match ResponseError::try_from_code(code) {
            None => Ok(()),
            Some(
                K::NetworkException | K::CoordinatorLoadInProgress | K::CoordinatorNotAvailable | K::NotCoordinator,
            ) => Err(unavailable()),
            Some(K::ConcurrentTransactions) if produce_version <= 11 => Err(unavailable()),
            Some(K::ConcurrentTransactions) => {
                Err(BrokerError::ConcurrentTransactions("the transaction is completing".into()))
            }
            Some(K::TransactionAbortable) if produce_version <= 10 => {
                Err(BrokerError::InvalidTxnState("the partition is not in the producer's transaction".into()))
            }
            Some(K::TransactionAbortable) => {
                Err(BrokerError::TransactionAbortable("the partition is not in the producer's transaction".into()))
            }
            Some(K::ProducerFenced | K::InvalidProducerEpoch) => {
                Err(BrokerError::InvalidProducerEpoch("the producer was fenced by a newer one".into()))
            }
            Some(K::InvalidProducerIdMapping) => {
                Err(BrokerError::InvalidProducerIdMapping("the transactional id has another producer id".into()))
            }
            Some(K::InvalidTxnState) => Err(BrokerError::InvalidTxnState("invalid transaction state".into())),
            Some(_) => Err(BrokerError::FromPeer(code)),
        }
    }
}

impl BrokerError {
    /// TxnOffsetCommit's error for a transaction coordinator's verdict on the group's
    /// `__consumer_offsets` partition, as Kafka's group coordinator answers: the verdict as for
    /// a produce of the same generation (v3 and older as Produce v10, v4 as v11, v5 as v12),
    /// then NOT_ENOUGH_REPLICAS becomes COORDINATOR_NOT_AVAILABLE and no answer at all
    /// COORDINATOR_LOAD_IN_PROGRESS (its NETWORK_EXCEPTION, which clients retry in place).
    pub fn from_txn_offset_verdict(code: Option<i16>, txn_offset_commit_version: i16) -> Result<(), BrokerError> {
        if code.is_none() {
            return Err(BrokerError::CoordinatorLoadInProgress("the transaction coordinator did not answer".into()));
        }
        let produce_version = match txn_offset_commit_version {
            ..=3 => 10,
            4 => 11,
            _ => 12,
        };
        match Self::from_txn_verdict(code, produce_version) {
            Err(BrokerError::NotEnoughReplicas(m)) => Err(BrokerError::CoordinatorNotAvailable(m)),
            r => r,
        }
    }
}

impl From<LogError> for BrokerError {
    fn from(e: LogError) -> Self {
        use BrokerError as B;
        let m = e.to_string();
        match e {
            LogError::Batch(b) => b.into(),
            LogError::OffsetOutOfRange { .. } => B::OffsetOutOfRange(m),
            LogError::OutOfOrderSequence { .. } => B::OutOfOrderSequence(m),
            LogError::ProducerFenced { .. } => B::InvalidProducerEpoch(m),
            LogError::CoordinatorFenced { .. } => B::TransactionCoordinatorFenced(m),
            LogError::InvalidTxnState { .. } => B::InvalidTxnState(m),
            LogError::BatchLargerThanSegment { .. } => B::RecordListTooLarge(m),
            LogError::Io { .. } | LogError::Corrupt { .. } => {
                tracing::error!(error = %m, "storage error");
                B::Storage(m)
            }
        }
    }
}

impl From<BatchError> for BrokerError {
    fn from(e: BatchError) -> Self {
        let m = e.to_string();
        match e {
            BatchError::Corrupt(_) => BrokerError::CorruptRecords(m),
            BatchError::TooLarge { .. } | BatchError::Inflated { .. } => BrokerError::MessageTooLarge(m),
            BatchError::InvalidRecord(_) => BrokerError::InvalidRecord(m),
            BatchError::InvalidTimestamp { .. } => BrokerError::InvalidTimestamp(m),
        }
    }
}

impl From<crate::topic_config::InvalidTopicConfig> for BrokerError {
    fn from(e: crate::topic_config::InvalidTopicConfig) -> Self {
        BrokerError::InvalidConfig(e.0)
    }
}

/// A controller's refusal, or an unreachable quorum.
impl From<oxbow_meta::CommandError> for BrokerError {
    fn from(e: oxbow_meta::CommandError) -> Self {
        use BrokerError as B;
        use oxbow_meta::{CommandError as C, Refusal as R};
        match e {
            C::Refused(r) => {
                let m = r.to_string();
                match r {
                    R::TopicAlreadyExists(_) => B::TopicExists(m),
                    R::UnknownTopic(_) => B::UnknownTopic(m),
                    R::InvalidPartitions(_) => B::InvalidPartitions(m),
                    R::InvalidReplicationFactor(_) => B::InvalidReplicationFactor(m),
                    R::InvalidReplicaAssignment(_) => B::InvalidReplicaAssignment(m),
                    R::PolicyViolation(_) => B::PolicyViolation(m),
                    R::StaleBrokerEpoch(_) => B::StaleBrokerEpoch(m),
                    R::BrokerNotRegistered(_) => B::BrokerNotRegistered(m),
                    R::DuplicateBrokerRegistration(_) => B::DuplicateBrokerRegistration(m),
                    R::NotLeader(_) => B::NotLeader(m),
                    R::FencedLeaderEpoch(_) => B::FencedLeaderEpoch(m),
                    R::InvalidUpdateVersion(_) => B::InvalidUpdateVersion(m),
                    R::IneligibleReplica(_) => B::IneligibleReplica(m),
                    R::NoReassignmentInProgress(_) => B::NoReassignmentInProgress(m),
                }
            }
            e @ C::NotController { .. } => B::NotController(e.to_string()),
            // Both retriable for a client: the quorum comes back, the upgrade completes.
            e @ (C::Unavailable(_) | C::Unsupported(_)) => B::TimedOut(e.to_string()),
        }
    }
}

/// Why a connection was closed by the broker.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] oxbow_protocol::ProtocolError),
    #[error("{0}")]
    Refused(String),
}

/// What a peer's error code means to a follower fetching from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerError {
    None,
    /// The follower asked below the leader's log start (or past its end).
    OffsetOutOfRange,
    /// (A whole fetch answer's.) The leader has no such fetch session, or expected another
    /// epoch: the follower starts again with a full fetch.
    FetchSessionLost,
    /// Any other error, with its Kafka name for the logs.
    Other(ResponseError),
}

impl PeerError {
    pub fn from_code(code: i16) -> Self {
        match ResponseError::try_from_code(code) {
            None => PeerError::None,
            Some(ResponseError::OffsetOutOfRange) => PeerError::OffsetOutOfRange,
            Some(ResponseError::FetchSessionIdNotFound | ResponseError::InvalidFetchSessionEpoch) => {
                PeerError::FetchSessionLost
            }
            Some(other) => PeerError::Other(other),
        }
    }
}

/// What a partition leader's per-partition answer to WriteTxnMarkers means to the transaction
/// coordinator that sent it (Kafka's `TransactionMarkerRequestCompletionHandler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerReply {
    Written,
    /// Not written yet (no leader, not enough replicas, a timeout, ...): send it again.
    Retry,
    /// A newer coordinator or producer epoch wrote there: this coordinator stops, the one that
    /// replaced it completes the transaction.
    Fenced,
}

impl MarkerReply {
    pub fn from_code(code: i16) -> Self {
        match ResponseError::try_from_code(code) {
            None => MarkerReply::Written,
            Some(ResponseError::TransactionCoordinatorFenced | ResponseError::InvalidProducerEpoch) => {
                MarkerReply::Fenced
            }
            Some(_) => MarkerReply::Retry,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_map_to_kafka_codes() {
        assert_eq!(BrokerError::unknown_topic(false).code(), 3);
        assert_eq!(BrokerError::unknown_topic(true).code(), 100);
        assert_eq!(BrokerError::NotLeader(String::new()).code(), 6);
        assert_eq!(BrokerError::SelfFenced(String::new()).code(), 6);
        assert_eq!(BrokerError::TimedOut(String::new()).code(), 7);
        assert_eq!(BrokerError::InvalidRequest(String::new()).code(), 42);
        assert_eq!(BrokerError::from(LogError::OffsetOutOfRange { offset: 9, start: 0, end: 3 }).code(), 1);
        assert_eq!(BrokerError::TransactionalIdAuthorizationFailed(String::new()).code(), 53);
        assert_eq!(PeerError::from_code(0), PeerError::None);
        assert_eq!(PeerError::from_code(1), PeerError::OffsetOutOfRange);
        assert_eq!(PeerError::from_code(74), PeerError::Other(ResponseError::FencedLeaderEpoch));
    }
}
