//! The states of a transactional id, with Apache Kafka's ids (the `TransactionStatus` byte of
//! `__transaction_state` values), names (what DescribeTransactions and ListTransactions show and
//! filter on) and the transitions Kafka allows (`TransactionState.validPreviousStates`).

/// Where the transaction of one transactional id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction: after InitProducerId, or never started.
    Empty,
    /// Partitions have been added; the producer may write to them.
    Ongoing,
    /// The commit is decided (and stored); markers are being written.
    PrepareCommit,
    /// The abort is decided (and stored); markers are being written.
    PrepareAbort,
    /// Every partition has its commit marker.
    CompleteCommit,
    /// Every partition has its abort marker.
    CompleteAbort,
    /// The transactional id expired and is being removed. Never stored: its record is a
    /// tombstone.
    Dead,
    /// The coordinator is bumping the epoch to fence a producer before it aborts an ongoing
    /// transaction. Never stored either: the abort is.
    PrepareEpochFence,
}

use TxnState::*;

impl TxnState {
    pub const ALL: [TxnState; 8] =
        [Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence];

    /// Kafka's id of the state, as stored in `TransactionLogValue.TransactionStatus`.
    pub fn id(self) -> i8 {
        match self {
            Empty => 0,
            Ongoing => 1,
            PrepareCommit => 2,
            PrepareAbort => 3,
            CompleteCommit => 4,
            CompleteAbort => 5,
            Dead => 6,
            PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions and ListTransactions show (and ListTransactions filters on).
    pub fn name(self) -> &'static str {
        match self {
            Empty => "Empty",
            Ongoing => "Ongoing",
            PrepareCommit => "PrepareCommit",
            PrepareAbort => "PrepareAbort",
            CompleteCommit => "CompleteCommit",
            CompleteAbort => "CompleteAbort",
            Dead => "Dead",
            PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states this state may be entered from. PrepareAbort may follow Empty and the two
    /// Complete states because a transaction version 2 client may abort without knowing
    /// whether a transaction is open.
    pub fn valid_previous(self) -> &'static [TxnState] {
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether a transactional id in state `from` may move to this state.
    pub fn may_follow(self, from: TxnState) -> bool {
        self.valid_previous().contains(&from)
    }

    /// Whether `transactional.id.expiration.ms` may remove an id in this state: only when no
    /// transaction is open or being completed.
    pub fn expiration_allowed(self) -> bool {
        matches!(self, Empty | CompleteCommit | CompleteAbort)
    }

    /// PrepareCommit or PrepareAbort: markers are (or must be) on their way.
    pub fn is_prepare(self) -> bool {
        matches!(self, PrepareCommit | PrepareAbort)
    }
}

impl std::fmt::Display for TxnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kafkas_and_round_trip() {
        let ids: Vec<i8> = TxnState::ALL.iter().map(|s| s.id()).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6, 7]);
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_id(s.id()), Some(s));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_id(-1), None);
    }

    #[test]
    fn names_are_what_describe_transactions_shows() {
        assert_eq!(PrepareEpochFence.name(), "PrepareEpochFence");
        assert_eq!(CompleteCommit.to_string(), "CompleteCommit");
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        // ListTransactions reports unknown filters: names are case-sensitive.
        assert_eq!(TxnState::from_name("ongoing"), None);
    }

    #[test]
    fn transitions_follow_kafkas_valid_previous_states() {
        let allowed =
            |to: TxnState| -> Vec<TxnState> { TxnState::ALL.into_iter().filter(|f| to.may_follow(*f)).collect() };
        assert_eq!(allowed(Empty), [Empty, CompleteCommit, CompleteAbort]);
        assert_eq!(allowed(Ongoing), [Empty, Ongoing, CompleteCommit, CompleteAbort]);
        assert_eq!(allowed(PrepareCommit), [Ongoing]);
        assert_eq!(allowed(PrepareAbort), [Empty, Ongoing, CompleteCommit, CompleteAbort, PrepareEpochFence]);
        assert_eq!(allowed(CompleteCommit), [PrepareCommit]);
        assert_eq!(allowed(CompleteAbort), [PrepareAbort]);
        assert_eq!(allowed(Dead), [Empty, CompleteCommit, CompleteAbort]);
        assert_eq!(allowed(PrepareEpochFence), [Ongoing]);
        // Nothing leaves Dead, and a commit cannot be decided without a transaction.
        assert!(TxnState::ALL.iter().all(|to| !to.may_follow(Dead)));
        assert!(!PrepareCommit.may_follow(Empty));
    }

    #[test]
    fn only_idle_states_may_expire() {
        let expirable: Vec<TxnState> = TxnState::ALL.into_iter().filter(|s| s.expiration_allowed()).collect();
        assert_eq!(expirable, [Empty, CompleteCommit, CompleteAbort]);
        assert!(PrepareAbort.is_prepare() && PrepareCommit.is_prepare() && !Ongoing.is_prepare());
    }
}
