//! The errors the transaction coordinator answers with, and the one place they become Kafka
//! error codes.

/// A Kafka error the transaction coordinator answers with. Named as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TxnError {
    #[error("UNKNOWN_SERVER_ERROR")]
    UnknownServerError,
    #[error("COORDINATOR_LOAD_IN_PROGRESS")]
    CoordinatorLoadInProgress,
    #[error("COORDINATOR_NOT_AVAILABLE")]
    CoordinatorNotAvailable,
    #[error("NOT_COORDINATOR")]
    NotCoordinator,
    #[error("INVALID_REQUEST")]
    InvalidRequest,
    /// What clients too old to know PRODUCER_FENCED get instead (see [`TxnError::for_version`]).
    #[error("INVALID_PRODUCER_EPOCH")]
    InvalidProducerEpoch,
    #[error("INVALID_TXN_STATE")]
    InvalidTxnState,
    #[error("INVALID_PRODUCER_ID_MAPPING")]
    InvalidProducerIdMapping,
    #[error("INVALID_TRANSACTION_TIMEOUT")]
    InvalidTransactionTimeout,
    #[error("CONCURRENT_TRANSACTIONS")]
    ConcurrentTransactions,
    #[error("PRODUCER_FENCED")]
    ProducerFenced,
    #[error("TRANSACTIONAL_ID_NOT_FOUND")]
    TransactionalIdNotFound,
    #[error("TRANSACTION_ABORTABLE")]
    TransactionAbortable,
}

/// The APIs whose answers carry a [`TxnError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

impl TxnError {
    /// The Kafka error code.
    pub fn code(self) -> i16 {
        match self {
            TxnError::UnknownServerError => -1,
            TxnError::CoordinatorLoadInProgress => 14,
            TxnError::CoordinatorNotAvailable => 15,
            TxnError::NotCoordinator => 16,
            TxnError::InvalidRequest => 42,
            TxnError::InvalidProducerEpoch => 47,
            TxnError::InvalidTxnState => 48,
            TxnError::InvalidProducerIdMapping => 49,
            TxnError::InvalidTransactionTimeout => 50,
            TxnError::ConcurrentTransactions => 51,
            TxnError::ProducerFenced => 90,
            TxnError::TransactionalIdNotFound => 105,
            TxnError::TransactionAbortable => 120,
        }
    }

    /// The error a client of `api` at `version` is told: PRODUCER_FENCED (KIP-588) is
    /// INVALID_PRODUCER_EPOCH below InitProducerId v4 and AddPartitionsToTxn, AddOffsetsToTxn
    /// and EndTxn v2, as Kafka's request handlers translate it.
    pub fn for_version(self, api: TxnApi, version: i16) -> TxnError {
        let knows_fenced = match api {
            TxnApi::InitProducerId => 4,
            TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
        };
        if self == TxnError::ProducerFenced && version < knows_fenced { TxnError::InvalidProducerEpoch } else { self }
    }

    /// The coordinator error for a failed append to `__transaction_state`, given the log's
    /// Kafka error code (Kafka's `TransactionStateManager.appendTransactionToLog`): lost
    /// replicas and timeouts make the coordinator unavailable (clients retry), a lost
    /// leadership or disk moves it, and anything else is a server error.
    pub fn from_append_error(code: i16) -> TxnError {
        match code {
            // UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND)
            3 | 7 | 19 | 20 => TxnError::CoordinatorNotAvailable,
            // NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR
            6 | 56 => TxnError::NotCoordinator,
            _ => TxnError::UnknownServerError,
        }
    }
}

/// The Kafka error code of an answer (0 for success).
pub fn code_of<T>(r: &Result<T, TxnError>) -> i16 {
    r.as_ref().err().map_or(0, |e| e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_kafkas() {
        // From Kafka's `Errors`.
        let codes = [
            (TxnError::UnknownServerError, -1),
            (TxnError::CoordinatorLoadInProgress, 14),
            (TxnError::CoordinatorNotAvailable, 15),
            (TxnError::NotCoordinator, 16),
            (TxnError::InvalidRequest, 42),
            (TxnError::InvalidProducerEpoch, 47),
            (TxnError::InvalidTxnState, 48),
            (TxnError::InvalidProducerIdMapping, 49),
            (TxnError::InvalidTransactionTimeout, 50),
            (TxnError::ConcurrentTransactions, 51),
            (TxnError::ProducerFenced, 90),
            (TxnError::TransactionalIdNotFound, 105),
            (TxnError::TransactionAbortable, 120),
        ];
        for (e, c) in codes {
            assert_eq!(e.code(), c, "{e}");
        }
        assert_eq!(code_of::<()>(&Ok(())), 0);
        assert_eq!(code_of::<()>(&Err(TxnError::ProducerFenced)), 90);
        assert_eq!(TxnError::ConcurrentTransactions.to_string(), "CONCURRENT_TRANSACTIONS");
    }

    #[test]
    fn old_clients_are_told_invalid_producer_epoch_instead_of_fenced() {
        let f = TxnError::ProducerFenced;
        assert_eq!(f.for_version(TxnApi::InitProducerId, 3), TxnError::InvalidProducerEpoch);
        assert_eq!(f.for_version(TxnApi::InitProducerId, 4), f);
        for api in [TxnApi::AddPartitionsToTxn, TxnApi::AddOffsetsToTxn, TxnApi::EndTxn] {
            assert_eq!(f.for_version(api, 1), TxnError::InvalidProducerEpoch);
            assert_eq!(f.for_version(api, 2), f);
        }
        assert_eq!(TxnError::InvalidTxnState.for_version(TxnApi::EndTxn, 0), TxnError::InvalidTxnState);
    }

    #[test]
    fn append_failures_map_as_kafkas_state_manager_maps_them() {
        assert_eq!(TxnError::from_append_error(19), TxnError::CoordinatorNotAvailable);
        assert_eq!(TxnError::from_append_error(7), TxnError::CoordinatorNotAvailable);
        assert_eq!(TxnError::from_append_error(6), TxnError::NotCoordinator);
        assert_eq!(TxnError::from_append_error(56), TxnError::NotCoordinator);
        assert_eq!(TxnError::from_append_error(10), TxnError::UnknownServerError);
    }
}
