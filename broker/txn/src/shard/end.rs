//! EndTxn, and the aborts the coordinator starts itself (a timed-out transaction, or an
//! InitProducerId that finds one ongoing), which go through the same decision with the
//! producer fenced first.
//!
//! Transaction version 0/1 (EndTxn v0-4): the epoch stays; a retry after completion is
//! answered NONE when it asks for the same result.
//!
//! Transaction version 2 (EndTxn v5, KIP-890): every commit and abort bumps the epoch, and the
//! answer carries the producer id and epoch to continue with (a new producer id at epoch 0
//! once the epoch is exhausted). A retry is recognised by its epoch being one behind (or by the
//! producer id a rotation replaced): from Empty, CompleteAbort and CompleteCommit,
//!
//! | state          | abort, retry | abort, current | commit, retry | commit, current |
//! |----------------|--------------|----------------|---------------|-----------------|
//! | Empty          | FENCED       | bump + abort   | FENCED        | INVALID_TXN     |
//! | CompleteAbort  | NONE         | bump + abort   | INVALID_TXN   | INVALID_TXN     |
//! | CompleteCommit | INVALID_TXN  | bump + abort   | NONE          | INVALID_TXN     |

use super::{Command, ProducerIds, Reply, Then, Ticket, TxnResult, TxnShard};
use crate::error::TxnError;
use crate::metadata::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdAndEpoch, Transit, TxnMetadata};
use crate::state::TxnState;

/// An EndTxn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub result: TxnResult,
    /// From [`super::client_version_for_end_txn`].
    pub client_transaction_version: i16,
}

/// What an end decides before anything is written.
enum Decision {
    /// Already so: answer with this producer, write nothing.
    Done(ProducerIdAndEpoch),
    /// Write this Prepare state; `fence_sticks` as in [`Then::Prepare`].
    Prepare(Transit, bool),
}

/// The producer ids of a coordinator abort: it never allocates one (Kafka 4.1 rotates an
/// exhausted producer on its next InitProducerId instead).
struct NoProducerIds;

impl ProducerIds for NoProducerIds {
    fn next_producer_id(&mut self) -> Result<i64, TxnError> {
        Err(TxnError::UnknownServerError)
    }
}

impl TxnShard {
    /// EndTxn: decide the commit or abort, answer once the decision is stored (markers are
    /// written after the answer).
    pub fn end_txn(&mut self, ticket: Ticket, req: &EndTxn, now: i64, ids: &mut impl ProducerIds) -> Vec<Command> {
        let reply = Reply::EndTxn { ticket, with_producer: req.client_transaction_version >= 2 };
        if req.transactional_id.is_empty() {
            return reply.failed(TxnError::InvalidRequest);
        }
        let (pid, epoch) = (req.producer_id, req.producer_epoch);
        let decision = if req.client_transaction_version >= 2 {
            self.decide_v2(
                &req.transactional_id,
                (pid, epoch),
                req.result,
                false,
                req.client_transaction_version,
                now,
                ids,
            )
        } else {
            self.decide_v1(&req.transactional_id, (pid, epoch), req.result, false, now)
        };
        self.enact(&req.transactional_id, decision, reply)
    }

    /// Fences the producer of an Ongoing transaction and aborts it, under the cluster's
    /// transaction version (no client asked).
    pub(super) fn fence_and_abort(&mut self, id: &str, now: i64, reply: Reply) -> Vec<Command> {
        let Some(e) = self.txns.get(id) else { return reply.failed(TxnError::UnknownServerError) };
        let fenced = (e.meta.producer_id, e.meta.fence_epoch());
        let version = self.cfg.transaction_version;
        let decision = if version >= 2 {
            self.decide_v2(id, fenced, TxnResult::Abort, true, version, now, &mut NoProducerIds)
        } else {
            self.decide_v1(id, fenced, TxnResult::Abort, true, now)
        };
        self.enact(id, decision, reply)
    }

    fn enact(&mut self, id: &str, decision: Result<Decision, TxnError>, reply: Reply) -> Vec<Command> {
        match decision {
            Err(e) => reply.failed(e),
            Ok(Decision::Done(pe)) => reply.done(pe),
            Ok(Decision::Prepare(t, failed_fence_sticks)) => {
                self.begin(id, t, Then::Prepare { reply, failed_fence_sticks })
            }
        }
    }

    /// Transaction version 0/1. `fence`: the coordinator's own abort at the fenced epoch.
    fn decide_v1(
        &mut self,
        id: &str,
        (pid, epoch): (i64, i16),
        result: TxnResult,
        fence: bool,
        now: i64,
    ) -> Result<Decision, TxnError> {
        let e = self.txns.get_mut(id).ok_or(TxnError::InvalidProducerIdMapping)?;
        let m = &mut e.meta;
        if m.producer_id != pid {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        // A client must hold the current epoch; the coordinator's fence holds a later one.
        if (!fence && epoch != m.producer_epoch) || epoch < m.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if e.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let commit = result == TxnResult::Commit;
        match m.state {
            TxnState::Ongoing => {
                let next = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
                if fence {
                    // The fenced epoch takes effect now, in memory, whether or not the abort
                    // is written: the old producer is refused from here on.
                    m.producer_epoch = epoch;
                    m.last_producer_epoch = NO_PRODUCER_EPOCH;
                }
                Ok(Decision::Prepare(m.prepare_abort_or_commit(next, 0, NO_PRODUCER_ID, now, false)?, fence))
            }
            TxnState::CompleteCommit if commit => Ok(Decision::Done(ProducerIdAndEpoch::NONE)),
            TxnState::CompleteAbort if !commit => Ok(Decision::Done(ProducerIdAndEpoch::NONE)),
            TxnState::PrepareCommit if commit => Err(TxnError::ConcurrentTransactions),
            TxnState::PrepareAbort if !commit => Err(TxnError::ConcurrentTransactions),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::UnknownServerError),
            _ => Err(TxnError::InvalidTxnState),
        }
    }

    /// Transaction version 2 and later (see the table above).
    #[allow(clippy::too_many_arguments)]
    fn decide_v2(
        &self,
        id: &str,
        (pid, epoch): (i64, i16),
        result: TxnResult,
        fence: bool,
        client_version: i16,
        now: i64,
        ids: &mut dyn ProducerIds,
    ) -> Result<Decision, TxnError> {
        let e = self.txns.get(id).ok_or(TxnError::InvalidProducerIdMapping)?;
        let m = &e.meta;
        let current = ProducerIdAndEpoch::new(m.producer_id, m.producer_epoch);
        // A retry of an end whose epoch overflowed: the producer moved to a new producer id.
        let retry_on_overflow = !fence && m.prev_producer_id == pid && epoch == i16::MAX - 1 && m.producer_epoch == 0;
        // A retry of an end that bumped the epoch.
        let retry_on_bump = !fence && i32::from(m.producer_epoch) == i32::from(epoch) + 1;
        let is_retry = retry_on_bump || retry_on_overflow;
        let valid_epoch = if fence {
            epoch >= m.producer_epoch
        } else {
            match m.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
                TxnState::CompleteCommit | TxnState::CompleteAbort => is_retry || epoch == m.producer_epoch,
                _ => epoch == m.producer_epoch,
            }
        };
        // First, as AddPartitionsToTxn does since KAFKA-18660: a producer already on the id its
        // exhausted epoch moves it to must wait for the completion, not be told its id is unknown
        // (fatal for a version 2 client), and a new transaction's abort must not fence itself
        // while the previous one is still completing.
        if e.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if m.producer_id != pid && !retry_on_overflow {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if !valid_epoch {
            return Err(TxnError::ProducerFenced);
        }
        let commit = result == TxnResult::Commit;
        let mut prepare =
            |state, no_partition_added| prepare_v2(m, state, no_partition_added, fence, client_version, now, ids);
        match m.state {
            TxnState::Ongoing => prepare(if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort }, false),
            TxnState::CompleteCommit if commit && is_retry => Ok(Decision::Done(current)),
            TxnState::CompleteCommit if !commit && !is_retry => prepare(TxnState::PrepareAbort, true),
            TxnState::CompleteAbort if !commit && is_retry => Ok(Decision::Done(current)),
            TxnState::CompleteAbort | TxnState::Empty if !commit => prepare(TxnState::PrepareAbort, true),
            TxnState::PrepareCommit if commit => Err(TxnError::ConcurrentTransactions),
            TxnState::PrepareAbort if !commit => Err(TxnError::ConcurrentTransactions),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::UnknownServerError),
            _ => Err(TxnError::InvalidTxnState),
        }
    }
}

/// A version 2 Prepare state: the epoch is bumped once (the coordinator's fence included), and
/// an exhausted producer gets the producer id it moves to on completion.
fn prepare_v2(
    m: &TxnMetadata,
    state: TxnState,
    no_partition_added: bool,
    fence: bool,
    client_version: i16,
    now: i64,
    ids: &mut dyn ProducerIds,
) -> Result<Decision, TxnError> {
    let next_producer_id = if !fence && m.is_epoch_exhausted() { ids.next_producer_id()? } else { NO_PRODUCER_ID };
    let t = m.prepare_abort_or_commit(state, client_version, next_producer_id, now, no_partition_added)?;
    Ok(Decision::Prepare(t, false))
}
