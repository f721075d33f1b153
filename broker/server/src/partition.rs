//! A partition this broker hosts (leading it or following its leader): its log and replica
//! state behind one lock, and one watch channel carrying its [`Marks`]: the high watermark to
//! waiting producers (acks=all) and consumers (long poll), the log end to followers' long polls,
//! the low watermark to DeleteRecords, and the leader to all of them.
//!
//! The lock is held for in-memory work and page-cache writes; fetch reads are planned under it
//! and executed outside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use oxbow_log::batch::ValidBatch;
use oxbow_log::log::PlannedFlush;
use oxbow_log::{AppendResult, Flush, Log, LogConfig, ReadStart};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::errors::BrokerError;
use crate::replica::ReplicaState;
use crate::verification::Verifications;

struct Inner {
    log: Log,
    replica: ReplicaState,
    /// Leader: transactional producers being verified with their coordinator (KIP-890).
    verifications: Verifications,
}

impl Inner {
    fn offsets(&self) -> Offsets {
        Offsets {
            log_start: self.log.log_start_offset(),
            high_watermark: self.log.high_watermark(),
            log_end: self.log.log_end_offset(),
            last_stable: self.log.last_stable_offset(),
            leader_epoch: self.replica.leader_epoch,
        }
    }

    /// Whether `producer_id` has a transaction open in this partition at `epoch` (Kafka's
    /// `hasOngoingTransaction`): its next batches need no verification.
    fn txn_ongoing(&self, producer_id: i64, epoch: i16) -> bool {
        self.log.producer_state().get(producer_id).is_some_and(|e| e.txn_first_offset.is_some() && e.epoch == epoch)
    }

    /// A write from a client or a coordinator: only while this replica leads, checked under the
    /// partition lock as Kafka's `appendRecordsToLeader` does under its leader lock. The
    /// request was routed by the published metadata view, which a new image replaces only after
    /// every partition took its replica state: a write that passed the view's check while this
    /// broker was losing the leadership must not land in what is now a follower's log, under
    /// the new leader's epoch.
    fn check_leader(&self, node: i32, topic: &str, index: i32) -> Result<(), BrokerError> {
        if self.replica.leader == node {
            Ok(())
        } else {
            Err(BrokerError::not_leader(node, topic, index, self.replica.leader))
        }
    }

    /// A follower's change from what the leader sent: only while this replica still follows
    /// `from`, at the leader and leader epoch the request was sent under. A fetch or an epoch
    /// check in flight across a leadership change is dropped, as Kafka's fetcher drops the
    /// answers for partitions removed from it.
    fn check_following(&self, from: Following) -> Result<(), BrokerError> {
        if self.replica.leader == from.leader && self.replica.leader_epoch == from.leader_epoch {
            Ok(())
        } else {
            Err(BrokerError::FencedLeaderEpoch(format!(
                "asked leader {} at leader epoch {}; the leader is now {} at leader epoch {}",
                from.leader, from.leader_epoch, self.replica.leader, self.replica.leader_epoch
            )))
        }
    }

    /// acks=all: the ISR must have at least `min_insync` replicas before a write.
    fn check_min_insync(&self, min_insync: Option<i32>) -> Result<(), BrokerError> {
        match min_insync {
            Some(m) if !self.replica.enough_in_sync(m) => Err(BrokerError::NotEnoughReplicas(format!(
                "{} in-sync replicas, min.insync.replicas={m}",
                self.replica.isr.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Leader: DeleteRecords' low watermark (see [`ReplicaState::low_watermark`]).
    fn low_watermark(&self) -> i64 {
        self.replica.low_watermark(self.log.log_start_offset())
    }
}

/// What waiters watch on a partition. One channel carries all four: a watch channel costs
/// about 350 bytes (its notifier array), which at 10,000 partitions is megabytes per channel.
/// Each waiter waits for the field it needs ([`watch::Receiver::wait_for`]); a change to another
/// field wakes it only to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    pub high_watermark: i64,
    pub log_end: i64,
    /// Leader: the smallest log start offset among the in-sync replicas (DeleteRecords waits
    /// on it); -1 while a follower's is unknown.
    pub low_watermark: i64,
    /// The leader as this replica knows it (-1 once the log is taken out): writes waiting for
    /// the ISR give up as soon as this broker no longer leads.
    pub leader: i32,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    /// Index into `log.dirs` of the directory holding this partition.
    pub root: usize,
    /// This broker's node id.
    node: i32,
    inner: Mutex<Option<Inner>>,
    marks: watch::Sender<Marks>,
    /// The log's `flush.messages` is set, so an append may fsync: kept beside the lock so that
    /// deciding where an append runs ([`Partition::may_fsync`]) does not take it.
    may_sync: AtomicBool,
}

/// Why a wait for the high watermark ended without reaching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwWait {
    TimedOut,
    /// This broker stopped leading the partition (a new leader, a reassignment that removed
    /// it, a deletion): the write may never be replicated; the client retries at the new leader.
    NotLeader,
}

/// An ISR change this partition's leader asks the controller for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub isr: Vec<i32>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// A follower joins (an expand); otherwise some leave (a shrink).
    pub grows: bool,
}

/// The transactional producer of a write, and its verification guard (`None`: verification is
/// off for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnWrite {
    pub producer_id: i64,
    pub epoch: i16,
    pub guard: Option<u64>,
}

/// A transaction marker to write (WriteTxnMarkers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
}

/// The leader and leader epoch a follower sent a request under (see
/// [`Partition::append_replicated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    pub leader: i32,
    pub leader_epoch: i32,
}

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    pub log_end: i64,
    /// How far a read_committed consumer may read: the high watermark, or the first offset of
    /// a transaction not yet decided (or whose marker is not replicated yet) below it.
    pub last_stable: i64,
    pub leader_epoch: i32,
}

/// Marks an ISR change as sent and describes it for the controller.
fn propose(replica: &mut ReplicaState, isr: Vec<i32>) -> IsrChange {
    let grows = isr.len() > replica.isr.len();
    replica.propose(isr.clone());
    IsrChange { isr, leader_epoch: replica.leader_epoch, partition_epoch: replica.partition_epoch, grows }
}

fn gone() -> BrokerError {
    BrokerError::UnknownTopic("partition was deleted".into())
}

/// Whether appends under `config` may fsync (`flush.messages` set).
fn syncs_appends(config: &LogConfig) -> bool {
    config.flush_messages != i64::MAX
}

impl Partition {
    pub fn new(topic: Arc<str>, index: i32, root: usize, node: i32, log: Log, replica: ReplicaState) -> Self {
        let (marks, _) = watch::channel(Marks {
            high_watermark: log.high_watermark(),
            log_end: log.log_end_offset(),
            low_watermark: replica.low_watermark(log.log_start_offset()),
            leader: replica.leader,
        });
        Self {
            topic,
            index,
            root,
            node,
            may_sync: AtomicBool::new(syncs_appends(log.config())),
            inner: Mutex::new(Some(Inner { log, replica, verifications: Verifications::default() })),
            marks,
        }
    }

    /// Changes the marks, waking waiters only if they changed.
    fn mark(&self, f: impl FnOnce(&mut Marks)) {
        self.marks.send_if_modified(|m| {
            let before = *m;
            f(m);
            *m != before
        });
    }

    fn publish(&self, hw: i64, leo: i64) {
        self.mark(|m| {
            m.high_watermark = hw;
            m.log_end = leo;
        });
    }

    /// The leader's high watermark rule, applied after any change to the ISR or a follower.
    fn advance_hw(&self, i: &mut Inner) -> (i64, i64) {
        let leo = i.log.log_end_offset();
        if i.replica.leader == self.node {
            let hw = i.replica.high_watermark(leo);
            i.log.set_high_watermark(hw);
        }
        (i.log.high_watermark(), leo)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> Result<R, BrokerError>) -> Result<R, BrokerError> {
        let mut g = self.inner.lock();
        let inner = g.as_mut().ok_or_else(gone)?;
        f(inner)
    }

    /// Runs `f` on the log (for admin operations and background jobs).
    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> Result<R, BrokerError> {
        self.with(|i| Ok(f(&mut i.log)))
    }

    pub fn offsets(&self) -> Result<Offsets, BrokerError> {
        self.with(|i| Ok(i.offsets()))
    }

    pub fn leader_epoch(&self) -> Result<i32, BrokerError> {
        self.with(|i| Ok(i.replica.leader_epoch))
    }

    pub fn replica(&self) -> Result<ReplicaState, BrokerError> {
        self.with(|i| Ok(i.replica.clone()))
    }

    /// Checks a client's `current_leader_epoch` (-1: not given).
    pub fn check_leader_epoch(&self, client_epoch: i32) -> Result<(), BrokerError> {
        let ours = self.leader_epoch()?;
        if client_epoch < 0 || client_epoch == ours {
            Ok(())
        } else if client_epoch < ours {
            Err(BrokerError::FencedLeaderEpoch(format!("leader epoch {client_epoch} is older than {ours}")))
        } else {
            Err(BrokerError::UnknownLeaderEpoch(format!("leader epoch {client_epoch} is newer than {ours}")))
        }
    }

    /// Syncs what appends left owed ([`Flush::Owed`]) on the blocking pool, without holding
    /// the partition, then lets the high watermark pass it. Nothing owed: returns at once. The
    /// flushes of a request's partitions run side by side, and the connection's next request
    /// appends meanwhile (docs/benchmarks.md, Durability, has the variants measured). The sync
    /// and its report run to the end even if the caller is dropped (its connection closed),
    /// so that no owed flush is left behind holding the high watermark.
    pub async fn flush_owed(self: &Arc<Self>) -> Result<(), BrokerError> {
        let Some(owed) = self.with(|i| Ok(i.log.owed_flush()?))? else {
            return Ok(());
        };
        let p = Arc::clone(self);
        match tokio::task::spawn_blocking(move || p.complete_flush(&owed)).await {
            Ok(r) => r,
            Err(e) => Err(BrokerError::Storage(format!("log flush did not run: {e}"))),
        }
    }

    fn complete_flush(&self, owed: &PlannedFlush) -> Result<(), BrokerError> {
        if let Err(e) = owed.sync() {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "log flush failed");
            return Err(BrokerError::Storage(format!("log flush failed: {e}")));
        }
        let hw = self.with(|i| {
            i.log.flushed(owed, crate::clock::now_ms());
            Ok(self.advance_hw(i))
        })?;
        self.publish(hw.0, hw.1);
        Ok(())
    }

    /// The background flush: flushes the log if `flush.ms` says it is due, or if a flush has
    /// been owed for `stale_ms` (its sync failed), and lets the high watermark follow. A
    /// partition whose log was taken out has nothing to flush.
    pub fn flush_if_due(&self, now_ms: i64, stale_ms: i64) -> Result<(), oxbow_log::LogError> {
        let mut g = self.inner.lock();
        let Some(i) = g.as_mut() else { return Ok(()) };
        if !(i.log.flush_due(now_ms) || i.log.owed_flush_stale(now_ms, stale_ms)) {
            return Ok(());
        }
        i.log.flush(now_ms)?;
        let (hw, leo) = self.advance_hw(i);
        drop(g);
        self.publish(hw, leo);
        Ok(())
    }

    /// Leader: before the first transactional batch of `producer_id`'s transaction, a guard to
    /// append it with once the coordinator has verified (or added) this partition; `None` when
    /// the transaction is already open here at `epoch` (nothing to verify). An epoch older than
    /// the producer's is refused at once.
    pub fn start_txn_verification(
        &self,
        producer_id: i64,
        epoch: i16,
        epoch_bump: bool,
        now_ms: i64,
    ) -> Result<Option<u64>, BrokerError> {
        self.with(|i| {
            if let Some(e) = i.log.producer_state().get(producer_id)
                && epoch < e.epoch
            {
                return Err(BrokerError::InvalidProducerEpoch(format!(
                    "producer {producer_id}: epoch {epoch} is older than the current epoch {}",
                    e.epoch
                )));
            }
            if i.txn_ongoing(producer_id, epoch) {
                return Ok(None);
            }
            Ok(Some(i.verifications.start(producer_id, epoch, epoch_bump, now_ms)))
        })
    }

    /// The sequence `producer_id`'s next batch at `epoch` starts at here (the group coordinator
    /// writes a producer's offset commits as its batches).
    pub fn next_sequence(&self, producer_id: i64, epoch: i16) -> Result<i32, BrokerError> {
        self.with(|i| Ok(i.log.producer_state().next_sequence(producer_id, epoch)))
    }

    /// Appends a producer's validated batches. `min_insync`: for acks=all, the ISR must be at
    /// least this big. `txn`: a transactional producer's; with a `guard` (verification is on), a
    /// batch that would open a transaction here needs the guard still in place: a marker in
    /// between voids it (INVALID_TXN_STATE, as Kafka's `batchMissingRequiredVerification`).
    /// `flush`: with [`Flush::Owed`] the caller then calls [`Partition::flush_owed`]; with
    /// [`Flush::Now`] and `flush.messages` set the append may fsync, and runs where the async
    /// runtime allows blocking.
    pub fn append(
        &self,
        records: &[u8],
        batches: &[ValidBatch],
        min_insync: Option<i32>,
        now_ms: i64,
        txn: Option<TxnWrite>,
        flush: Flush,
    ) -> Result<AppendResult, BrokerError> {
        let append = || {
            let (result, hw) = self.with(|i| {
                i.check_leader(self.node, &self.topic, self.index)?;
                i.check_min_insync(min_insync)?;
                if let Some(t) = txn
                    && let Some(guard) = t.guard
                    && !i.txn_ongoing(t.producer_id, t.epoch)
                    && !i.verifications.holds(t.producer_id, guard)
                {
                    return Err(BrokerError::InvalidTxnState("Record was not part of an ongoing transaction".into()));
                }
                let epoch = i.replica.leader_epoch;
                let r = i.log.append(records, batches, epoch, now_ms, flush)?;
                if let Some(t) = txn {
                    i.verifications.batch_appended(t.producer_id);
                }
                Ok((r, self.advance_hw(i)))
            })?;
            self.publish(hw.0, hw.1);
            Ok(result)
        };
        if flush == Flush::Now { self.may_fsync(append) } else { append() }
    }

    /// Runs `append`, which fsyncs if `flush.messages` calls for it, where the async runtime
    /// allows blocking when that is set (the runtime's worker is not held up otherwise).
    fn may_fsync<R>(&self, append: impl FnOnce() -> R) -> R {
        if self.may_sync.load(Ordering::Relaxed) { tokio::task::block_in_place(append) } else { append() }
    }

    /// Leader: drops verification guards older than `max_age_ms`.
    pub fn expire_verifications(&self, now_ms: i64, max_age_ms: i64) {
        let _ = self.with(|i| {
            i.verifications.expire(now_ms, max_age_ms);
            Ok(())
        });
    }

    /// Leader: appends the COMMIT or ABORT marker of `producer_id`'s transaction
    /// (WriteTxnMarkers). `min_insync` as for [`Self::append`].
    pub fn append_marker(
        &self,
        marker: Marker,
        min_insync: Option<i32>,
        now_ms: i64,
    ) -> Result<AppendResult, BrokerError> {
        let (result, hw) = self.may_fsync(|| {
            self.with(|i| {
                i.check_leader(self.node, &self.topic, self.index)?;
                i.check_min_insync(min_insync)?;
                let epoch = i.replica.leader_epoch;
                let Marker { producer_id, producer_epoch, coordinator_epoch, commit } = marker;
                let r = i.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, epoch, now_ms)?;
                i.verifications.marker_appended(producer_id, producer_epoch);
                Ok((r, self.advance_hw(i)))
            })
        })?;
        self.publish(hw.0, hw.1);
        Ok(result)
    }

    /// The aborted transactions `(producer id, first offset)` a read_committed fetch from
    /// `fetch_offset` needs, up to `upper_bound` (exclusive).
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_bound: i64) -> Result<Vec<(i64, i64)>, BrokerError> {
        self.with(|i| Ok(i.log.aborted_transactions(fetch_offset, upper_bound)?))
    }

    /// Leader: a follower fetched at `offset`. Moves the high watermark; returns the ISR change
    /// to ask the controller for if the follower has caught up enough to join.
    /// `log_start`: the follower's own log start offset, as it reported it.
    pub fn follower_fetched(
        &self,
        replica: i32,
        offset: i64,
        log_start: i64,
        now_ms: i64,
    ) -> Result<Option<IsrChange>, BrokerError> {
        let (change, hw, low) = self.with(|i| {
            let leo = i.log.log_end_offset();
            let hw = i.log.high_watermark();
            let epoch_start = match i.log.latest_epoch() {
                Some((e, start)) if e == i.replica.leader_epoch => start,
                _ => leo,
            };
            let isr = i.replica.follower_fetched(replica, offset, log_start, leo, hw, epoch_start, now_ms);
            let change = isr.map(|isr| propose(&mut i.replica, isr));
            Ok((change, self.advance_hw(i), i.low_watermark()))
        })?;
        self.mark(|m| {
            (m.high_watermark, m.log_end) = hw;
            m.low_watermark = low;
        });
        Ok(change)
    }

    /// Leader: DeleteRecords. Moves the log start to `offset` (-1: the high watermark) and
    /// returns it.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, BrokerError> {
        let (start, low) = self.with(|i| {
            let target = if offset == -1 { i.log.high_watermark() } else { offset };
            let start = i.log.delete_records_before(target)?;
            Ok((start, i.low_watermark()))
        })?;
        self.mark(|m| m.low_watermark = low);
        Ok(start)
    }

    /// Leader: waits up to `timeout` until every in-sync replica's log starts at `offset` or
    /// later (DeleteRecords' low watermark, as Kafka's delayed DeleteRecords); returns whether it
    /// did, and the low watermark.
    pub async fn wait_low_watermark(&self, offset: i64, timeout: std::time::Duration) -> (bool, i64) {
        let mut rx = self.marks.subscribe();
        let reached =
            matches!(tokio::time::timeout(timeout, rx.wait_for(|m| m.low_watermark >= offset)).await, Ok(Ok(_)));
        let low = rx.borrow().low_watermark;
        (reached, low)
    }

    /// Leader: the ISR without followers that have not caught up for `lag_ms`, if any is to go.
    pub fn lagging_followers(&self, now_ms: i64, lag_ms: i64) -> Option<IsrChange> {
        self.with(|i| {
            if i.replica.leader != self.node {
                return Ok(None);
            }
            Ok(i.replica.lagging(now_ms, lag_ms).map(|isr| propose(&mut i.replica, isr)))
        })
        .ok()
        .flatten()
    }

    /// The controller refused or did not answer an ISR change: a later fetch may ask again.
    pub fn isr_change_failed(&self) {
        let _ = self.with(|i| {
            i.replica.proposal_failed();
            Ok(())
        });
    }

    /// Leader: plans a follower's read, up to the log end (not the high watermark).
    pub fn read_for_follower(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<(ReadStart, Offsets), (BrokerError, Option<Offsets>)> {
        self.plan_read(offset, max_bytes, true, |o| o.log_end)
    }

    /// Follower: appends what the leader sent and takes its high watermark (never past the
    /// local log end), if this replica still follows `from` (FENCED_LEADER_EPOCH if not, and
    /// nothing changes). Returns the new log end.
    ///
    /// The leader's log start offset moves this one's too (DeleteRecords, retention), up to
    /// this replica's high watermark, as Kafka's follower does: records deleted on the leader
    /// do not come back when this replica leads.
    pub fn append_replicated(
        &self,
        from: Following,
        records: &[u8],
        leader_hw: i64,
        leader_log_start: i64,
        now_ms: i64,
    ) -> Result<i64, BrokerError> {
        let (hw, leo) = self.may_fsync(|| self.with(|i| {
            i.check_following(from)?;
            i.log.append_as_follower(records, now_ms)?;
            let leo = i.log.log_end_offset();
            i.log.set_high_watermark(leader_hw.min(leo));
            let start = leader_log_start.min(i.log.high_watermark());
            if start > i.log.log_start_offset()
                && let Err(e) = i.log.delete_records_before(start)
            {
                tracing::warn!(topic = %self.topic, partition = self.index, start, error = %e, "cannot move the log start to the leader's");
            }
            Ok((i.log.high_watermark(), leo))
        }))?;
        self.publish(hw, leo);
        Ok(leo)
    }

    /// Follower: the leader answered OFFSET_OUT_OF_RANGE and its log starts at
    /// `leader_log_start`. If this log ends below that, it cannot catch up by fetching: it
    /// starts again, empty, at the leader's log start (Kafka's follower does the same), if this
    /// replica still follows `from`. Returns whether it did.
    pub fn restart_below_leader_start(
        &self,
        from: Following,
        leader_log_start: i64,
        now_ms: i64,
    ) -> Result<bool, BrokerError> {
        let moved = self.with(|i| {
            i.check_following(from)?;
            if i.log.log_end_offset() >= leader_log_start {
                return Ok(None);
            }
            i.log.truncate_fully_and_start_at(leader_log_start, now_ms)?;
            Ok(Some((i.log.high_watermark(), i.log.log_end_offset())))
        })?;
        if let Some((hw, leo)) = moved {
            self.marks.send_modify(|m| (m.high_watermark, m.log_end) = (hw, leo));
        }
        Ok(moved.is_some())
    }

    /// Follower: the log end and the newest leader epoch in the log.
    pub fn log_end_and_epoch(&self) -> Result<(i64, Option<i32>), BrokerError> {
        self.with(|i| Ok((i.log.log_end_offset(), i.log.latest_epoch().map(|(e, _)| e))))
    }

    /// OffsetsForLeaderEpoch: the largest epoch at most `epoch` in this log and where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<(i32, i64), BrokerError> {
        self.with(|i| Ok(i.log.end_offset_for_epoch(epoch)))
    }

    /// Follower: drops the log from `offset` on (it diverged from the leader's), if this replica
    /// still follows `from`.
    pub fn truncate_to(&self, from: Following, offset: i64, now_ms: i64) -> Result<i64, BrokerError> {
        let (hw, leo) = self.with(|i| {
            i.check_following(from)?;
            let leo = i.log.truncate_to(offset, now_ms)?;
            Ok((i.log.high_watermark(), leo))
        })?;
        // The marks only go forward for waiters; a truncated follower has none.
        self.marks.send_modify(|m| (m.high_watermark, m.log_end) = (hw, leo));
        Ok(leo)
    }

    /// Leader: waits until the high watermark reaches `offset` (acks=all), as long as this
    /// broker leads (Kafka's delayed produce answers NOT_LEADER_OR_FOLLOWER at once when the
    /// leadership moves).
    pub async fn wait_for_hw(&self, offset: i64, timeout: std::time::Duration) -> Result<(), HwWait> {
        let mut rx = self.marks.subscribe();
        let node = self.node;
        let wait = async {
            match rx.wait_for(|m| m.high_watermark >= offset || m.leader != node).await {
                Ok(m) if m.high_watermark >= offset => Ok(()),
                _ => Err(HwWait::NotLeader),
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(Err(HwWait::TimedOut))
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> i64 {
        self.marks.borrow().high_watermark
    }

    pub fn subscribe(&self) -> watch::Receiver<Marks> {
        self.marks.subscribe()
    }

    /// Plans a fetch read up to the high watermark (`committed`: the last stable offset, for
    /// read_committed consumers); also returns the offsets at that instant.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        committed: bool,
    ) -> Result<(ReadStart, Offsets), (BrokerError, Option<Offsets>)> {
        if committed {
            self.plan_read(offset, max_bytes, min_one, |o| o.last_stable)
        } else {
            self.plan_read(offset, max_bytes, min_one, |o| o.high_watermark)
        }
    }

    /// Plans a read up to the offset `upto` picks from the offsets at that instant.
    fn plan_read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        upto: fn(&Offsets) -> i64,
    ) -> Result<(ReadStart, Offsets), (BrokerError, Option<Offsets>)> {
        let g = self.inner.lock();
        let Some(i) = g.as_ref() else { return Err((gone(), None)) };
        let offsets = i.offsets();
        match i.log.read(offset, max_bytes, upto(&offsets), min_one) {
            Ok(r) => Ok((r, offsets)),
            Err(e) => Err((e.into(), Some(offsets))),
        }
    }

    /// Takes the leader, leader epoch, replicas and ISR the metadata image gives (a smaller
    /// ISR may move the high watermark on the leader).
    pub fn set_replica(&self, next: ReplicaState, now_ms: i64) {
        let leader = next.leader;
        if let Ok(((hw, leo), low)) = self.with(|i| {
            if next.leader == self.node
                && (i.replica.leader != self.node || i.replica.leader_epoch != next.leader_epoch)
                && let Err(e) = i.log.assign_epoch(next.leader_epoch)
            {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "cannot record the leader epoch");
            }
            i.replica.update(next, now_ms);
            Ok((self.advance_hw(i), i.low_watermark()))
        }) {
            self.mark(|m| {
                (m.high_watermark, m.log_end) = (hw, leo);
                m.low_watermark = low;
                m.leader = leader;
            });
        }
    }

    pub fn set_config(&self, config: Arc<LogConfig>) {
        let _ = self.with(|i| {
            self.may_sync.store(syncs_appends(&config), Ordering::Relaxed);
            i.log.set_config(config);
            Ok(())
        });
    }

    /// Takes the log out (topic deletion or shutdown); later calls answer UNKNOWN_TOPIC_OR_PARTITION.
    pub fn take_log(&self) -> Option<Log> {
        let log = self.inner.lock().take().map(|i| i.log);
        self.marks.send_modify(|m| m.leader = -1);
        log
    }
}
