//! The answers a group gives, and the one place they become Kafka error codes.

use oxbow_protocol::ResponseError;

macro_rules! group_errors {
    ($($v:ident),* $(,)?) => {
        /// Why a group operation failed: one of the Kafka errors the group coordinator uses.
        /// Operations return `Result<_, GroupError>`; answers that carry data beside their
        /// error (JoinGroup's, SyncGroup's) hold an `Option<GroupError>`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum GroupError {
            $($v,)*
        }

        impl GroupError {
            /// The Kafka error.
            pub fn kafka(self) -> ResponseError {
                match self {
                    $(GroupError::$v => ResponseError::$v,)*
                }
            }

            /// The Kafka error code.
            pub fn code(self) -> i16 {
                self.kafka().code()
            }
        }
    };
}

group_errors!(
    CoordinatorNotAvailable,
    NotCoordinator,
    CoordinatorLoadInProgress,
    InconsistentGroupProtocol,
    GroupMaxSizeReached,
    MemberIdRequired,
    UnknownMemberId,
    FencedInstanceId,
    RebalanceInProgress,
    IllegalGeneration,
    InvalidGroupId,
    InvalidSessionTimeout,
    GroupIdNotFound,
    NonEmptyGroup,
    GroupSubscribedToTopic,
    InvalidCommitOffsetSize,
    UnknownServerError,
    FencedMemberEpoch,
    UnreleasedInstanceId,
    UnsupportedAssignor,
    StaleMemberEpoch,
    UnsupportedVersion,
    InvalidRequest,
    InvalidRegularExpression,
    UnstableOffsetCommit,
    InvalidProducerEpoch,
    InvalidTxnState,
);

/// The outcome of an operation that answers with no data: the error code of a response
/// (0 for success).
pub type Answer = Result<(), GroupError>;

/// The Kafka error code of an optional error (0 for none).
pub fn code_of(e: Option<GroupError>) -> i16 {
    e.map_or(0, GroupError::code)
}

/// The Kafka error code of an [`Answer`] (0 for success).
pub fn answer_code(a: &Answer) -> i16 {
    code_of(a.err())
}
