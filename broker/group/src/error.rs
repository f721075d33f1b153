//! The answers a group gives, and the one place they become Kafka error codes.

use oxbow_protocol::ResponseError;

macro_rules! group_errors {
    ($($v:ident),* $(,)?) => {
        /// What a group operation answers: success, or one of the Kafka errors the group
        /// coordinator uses.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum GroupError {
            None,
            $($v,)*
        }

        impl GroupError {
            /// The Kafka error, `None` for success.
            pub fn kafka(self) -> Option<ResponseError> {
                match self {
                    GroupError::None => None,
                    $(GroupError::$v => Some(ResponseError::$v),)*
                }
            }

            /// The Kafka error code (0 for success).
            pub fn code(self) -> i16 {
                self.kafka().map_or(0, |e| e.code())
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
);
