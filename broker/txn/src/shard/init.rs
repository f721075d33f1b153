//! InitProducerId with a transactional id: a producer (re)starts, gets its producer id and a
//! new epoch, and every older producer with the same transactional id is fenced.

use super::{Answer, Command, Entry, ProducerIds, Reply, Then, Ticket, TxnShard};
use crate::error::TxnError;
use crate::metadata::{NO_PRODUCER_EPOCH, ProducerIdAndEpoch, TxnMetadata, is_epoch_exhausted};
use crate::state::TxnState;

/// An InitProducerId request that carries a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerId {
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    /// KIP-360 (v3+): the producer resuming after an error, from
    /// [`ProducerIdAndEpoch::expected`].
    pub expected: Option<ProducerIdAndEpoch>,
}

impl TxnShard {
    /// InitProducerId. A new transactional id gets a producer id at epoch 0; a known one the
    /// next epoch (or, its epochs exhausted, a new producer id). An ongoing transaction is
    /// aborted first and the request told CONCURRENT_TRANSACTIONS, so the client retries once
    /// the abort is decided.
    pub fn init_producer_id(
        &mut self,
        ticket: Ticket,
        req: &InitProducerId,
        now: i64,
        ids: &mut impl ProducerIds,
    ) -> Vec<Command> {
        self.try_init(ticket, req, now, ids)
            .unwrap_or_else(|e| vec![Command::Answer(ticket, Answer::InitProducerId(Err(e)))])
    }

    fn try_init(
        &mut self,
        ticket: Ticket,
        req: &InitProducerId,
        now: i64,
        ids: &mut impl ProducerIds,
    ) -> Result<Vec<Command>, TxnError> {
        let id = req.transactional_id.as_str();
        let timeout = req.transaction_timeout_ms;
        if id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        if timeout <= 0 || timeout > self.cfg.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        if !self.txns.contains_key(id) {
            // Kept even if its first record fails to be written: the next attempt reuses it.
            let meta = TxnMetadata::new(ids.next_producer_id()?, timeout, now);
            self.txns.insert(id.to_string(), Entry { meta, pending: None });
        }
        let e = self.txns.get(id).ok_or(TxnError::UnknownServerError)?;
        if e.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let m = &e.meta;
        if let Some(x) = req.expected {
            // Resuming is allowed for the current producer id (its epoch is checked below), on
            // an id that has no producer yet, or for the producer id a rotation just replaced
            // (a retry whose answer was lost).
            let known = m.producer_epoch == NO_PRODUCER_EPOCH
                || x.producer_id == m.producer_id
                || (x.producer_id == m.prev_producer_id && is_epoch_exhausted(x.epoch));
            if !known {
                return Err(TxnError::ProducerFenced);
            }
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let rotate = m.is_epoch_exhausted() && req.expected.is_none_or(|x| x.epoch == m.producer_epoch);
                let t = if rotate {
                    m.prepare_rotation(ids.next_producer_id()?, timeout, now, req.expected.is_some())?
                } else {
                    m.prepare_increment_epoch(timeout, req.expected.map(|x| x.epoch), now)?
                };
                Ok(self.begin(id, t, Then::InitProducerId(ticket)))
            }
            TxnState::Ongoing => Ok(self.fence_and_abort(id, now, Reply::InitProducerId(ticket))),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::UnknownServerError),
        }
    }
}
