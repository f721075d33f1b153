//! The transaction coordinator's runtime: one [`TxnShard`] (from `oxbow-txn`) per partition of
//! `__transaction_state` this broker leads, loaded by replaying the partition when leadership
//! arrives and dropped when it leaves (Kafka's `TransactionStateManager`).
//!
//! The shard decides; this module does its I/O. A request locks the shard, registers a
//! [`Ticket`] for its answer, runs the state machine and executes the [`Command`]s it returns
//! with the lock held, except the waits: a state change's record is appended under the lock and
//! its wait for the ISR runs as its own task, which locks the shard again to report the result
//! ([`TxnShard::appended`]). Meanwhile the shard answers CONCURRENT_TRANSACTIONS for that
//! transactional id, so nothing is answered from a state the ISR could lose. Markers go to the
//! partition leaders from a task per transaction (`txn_coordinator/markers.rs`), which reports
//! each written partition ([`TxnShard::marker_written`]) until the completion record follows.
//!
//! Durability: an answer goes out once its record is under the high watermark of its
//! `__transaction_state` partition; a transaction decided (PrepareCommit/PrepareAbort written)
//! is completed by whichever broker leads the partition next, from its log.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use oxbow_log::batch::{BatchIter, encode_plain, validate_produce};
use oxbow_log::{Flush, ReadStart};
use oxbow_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_txn::shard::TRANSACTION_STATE_TOPIC;
use oxbow_txn::{Answer, Command, Ticket, TxnError, TxnMetadata, TxnShard, TxnState, Write, partition_for};
use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::now_ms;
use crate::config::TxnSettings;
use crate::controller_client::ControllerClient;
use crate::errors::BrokerError;
use crate::metadata_view::{MetadataView, Topic};
use crate::partition::{HwWait, Partition};
use crate::peers::Peers;

mod markers;
mod verify;

pub use verify::Verdict;

/// How long a state change waits for the ISR of its `__transaction_state` partition (Kafka
/// uses the broker's `request.timeout.ms`, 30 s by default).
const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

struct SlotState {
    shard: TxnShard,
    waiters: HashMap<Ticket, oneshot::Sender<Answer>>,
    /// False once leadership moved away: waiters answer NOT_COORDINATOR, tasks stop.
    alive: bool,
    /// The load is finished: the markers of transactions decided before it were handed out.
    finished: bool,
}

/// One loaded coordinator partition.
struct Slot {
    index: i32,
    partition: Arc<Partition>,
    /// The partition's leader epoch when loaded: the coordinator epoch markers carry.
    leader_epoch: i32,
    state: Arc<AsyncMutex<SlotState>>,
}

/// A transaction as DescribeTransactions and ListTransactions show it.
#[derive(Debug, Clone)]
pub struct Described {
    pub transactional_id: String,
    pub meta: TxnMetadata,
}

pub struct TxnCoordinator {
    settings: TxnSettings,
    view: Arc<MetadataView>,
    peers: Arc<Peers>,
    slots: parking_lot::Mutex<HashMap<i32, Arc<Slot>>>,
    next_ticket: AtomicU64,
    /// Serialises loading.
    loading: AsyncMutex<()>,
    /// The writes' waits, the marker senders and requests ([`Self::detached`]).
    tasks: TaskTracker,
    /// Cancelled at shutdown: marker senders and waits stop.
    stop: CancellationToken,
    wake: Notify,
}

impl TxnCoordinator {
    pub fn new(settings: TxnSettings, view: Arc<MetadataView>, peers: Arc<Peers>) -> Self {
        TxnCoordinator {
            settings,
            view,
            peers,
            slots: parking_lot::Mutex::new(HashMap::new()),
            next_ticket: AtomicU64::new(1),
            loading: AsyncMutex::new(()),
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            wake: Notify::new(),
        }
    }

    /// How `__transaction_state` is created: partitions, replication factor and configs
    /// (`transaction.state.log.*`).
    pub fn topic_spec(&self) -> (i32, i16, BTreeMap<String, String>) {
        let s = &self.settings;
        let configs = [
            ("cleanup.policy", "compact".to_string()),
            ("segment.bytes", s.topic_segment_bytes.to_string()),
            ("compression.type", "uncompressed".to_string()),
            ("min.insync.replicas", s.topic_min_isr.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        (s.topic_partitions, s.topic_replication_factor, configs)
    }

    /// The leader of the coordinator partition of `transactional_id`: (node id, partition).
    pub fn coordinator_of(&self, topic: &Topic, transactional_id: &str) -> (i32, i32) {
        let index = partition_for(transactional_id, topic.meta.partitions);
        let leader = usize::try_from(index).ok().and_then(|i| topic.states.get(i)).map_or(-1, |s| s.leader);
        (leader, index)
    }

    /// At shutdown, once no request is read any more: unloads every shard (waiters answer
    /// NOT_COORDINATOR), stops the marker senders and waits for its tasks. Transactions whose
    /// markers were not all written are completed by the partition's next leader.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Slot>> = self.slots.lock().drain().map(|(_, s)| s).collect();
        for s in all {
            Self::unload(&s).await;
        }
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Runs `f` as the coordinator's own task and waits for it: a request's state change goes
    /// on (written, then answered to nobody) even if its client hangs up.
    pub async fn detached<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = Result<T, TxnError>> + Send + 'static,
    ) -> Result<T, TxnError> {
        self.tasks.spawn(f).await.unwrap_or(Err(TxnError::UnknownServerError))
    }

    fn ticket(&self) -> Ticket {
        Ticket(self.next_ticket.fetch_add(1, Ordering::Relaxed))
    }

    /// The live shard coordinating `transactional_id`, locked.
    async fn locked(
        self: &Arc<Self>,
        transactional_id: &str,
    ) -> Result<(Arc<Slot>, OwnedMutexGuard<SlotState>), TxnError> {
        let topic = self.view.topic(TRANSACTION_STATE_TOPIC).ok_or(TxnError::NotCoordinator)?;
        let index = partition_for(transactional_id, topic.meta.partitions);
        let slot = self.slot_for(&topic, index).await?;
        let mut st = slot.state.clone().lock_owned().await;
        if !st.alive {
            return Err(TxnError::NotCoordinator);
        }
        self.finish_load(&slot, &mut st);
        Ok((slot, st))
    }

    async fn slot_for(&self, topic: &Topic, index: i32) -> Result<Arc<Slot>, TxnError> {
        let part = topic.led(index).map_err(|_| TxnError::NotCoordinator)?.clone();
        let epoch = part.leader_epoch().map_err(|_| TxnError::NotCoordinator)?;
        let current = |slots: &HashMap<i32, Arc<Slot>>| {
            slots.get(&index).filter(|s| Arc::ptr_eq(&s.partition, &part) && s.leader_epoch == epoch).cloned()
        };
        if let Some(s) = current(&self.slots.lock()) {
            return Ok(s);
        }
        let _serial = self.loading.lock().await;
        if let Some(s) = current(&self.slots.lock()) {
            return Ok(s);
        }
        let old = self.slots.lock().remove(&index);
        if let Some(old) = old {
            Self::unload(&old).await;
        }
        let started = std::time::Instant::now();
        // The coordinator's own aborts follow the cluster's finalized transaction version.
        let mut cfg = self.settings.coordinator;
        cfg.transaction_version =
            self.view.image().features.get(oxbow_meta::controller::TRANSACTION_VERSION).copied().unwrap_or(0);
        let mut shard = TxnShard::new(cfg, epoch);
        tokio::task::block_in_place(|| replay(&part, &mut shard))?;
        let ids = shard.iter().count();
        let slot = Arc::new(Slot {
            index,
            partition: part,
            leader_epoch: epoch,
            state: Arc::new(AsyncMutex::new(SlotState {
                shard,
                waiters: HashMap::new(),
                alive: true,
                finished: false,
            })),
        });
        self.slots.lock().insert(index, slot.clone());
        tracing::info!(
            partition = index,
            leader_epoch = epoch,
            transactional_ids = ids,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded transaction coordinator partition"
        );
        Ok(slot)
    }

    /// Finishes a load (once, by whoever locks the new shard first): transactions the
    /// previous coordinator decided get their markers sent.
    fn finish_load(self: &Arc<Self>, slot: &Arc<Slot>, st: &mut SlotState) {
        if st.alive && !st.finished {
            st.finished = true;
            let cmds = st.shard.finish_load(now_ms());
            self.execute(slot, st, cmds);
        }
    }

    async fn unload(slot: &Slot) {
        let mut st = slot.state.lock().await;
        st.alive = false;
        st.waiters.clear();
        tracing::info!(partition = slot.index, "unloaded transaction coordinator partition");
    }

    /// Runs one request through the shard and waits for its answer.
    async fn request(
        self: &Arc<Self>,
        transactional_id: &str,
        run: impl FnOnce(&mut TxnShard, Ticket, i64) -> Vec<Command>,
    ) -> Result<Answer, TxnError> {
        let (tx, rx) = oneshot::channel();
        {
            let (slot, mut st) = self.locked(transactional_id).await?;
            let ticket = self.ticket();
            st.waiters.insert(ticket, tx);
            let cmds = run(&mut st.shard, ticket, now_ms());
            self.execute(&slot, &mut st, cmds);
        }
        rx.await.map_err(|_| TxnError::NotCoordinator)
    }

    /// InitProducerId with a transactional id. `ids` hands out new producer ids.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        req: oxbow_txn::InitProducerId,
        ids: &ControllerClient,
    ) -> Result<oxbow_txn::ProducerIdAndEpoch, TxnError> {
        ids.refill_producer_ids().await.map_err(|_| TxnError::CoordinatorLoadInProgress)?;
        let id = req.transactional_id.clone();
        let answer = self
            .request(&id, |shard, ticket, now| {
                let mut next = || ids.try_next_producer_id().ok_or(TxnError::CoordinatorLoadInProgress);
                shard.init_producer_id(ticket, &req, now, &mut next)
            })
            .await?;
        match answer {
            Answer::InitProducerId(r) => r,
            other => Err(unexpected(&other)),
        }
    }

    /// AddPartitionsToTxn for one transaction (and AddOffsetsToTxn, through [`Self::add_offsets`]).
    pub async fn add_partitions(self: &Arc<Self>, req: oxbow_txn::AddPartitions) -> Result<(), TxnError> {
        let id = req.transactional_id.clone();
        match self.request(&id, |shard, ticket, now| shard.add_partitions(ticket, &req, now)).await? {
            Answer::AddPartitions(r) => r,
            other => Err(unexpected(&other)),
        }
    }

    /// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
    pub async fn add_offsets(self: &Arc<Self>, req: oxbow_txn::AddOffsets) -> Result<(), TxnError> {
        let id = req.transactional_id.clone();
        match self.request(&id, |shard, ticket, now| shard.add_offsets(ticket, &req, now)).await? {
            Answer::AddPartitions(r) => r,
            other => Err(unexpected(&other)),
        }
    }

    /// AddPartitionsToTxn v4+ with `VerifyOnly`: whether each partition is in the producer's
    /// open transaction.
    pub async fn verify_partitions(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[oxbow_txn::TopicPartition],
    ) -> Vec<Result<(), TxnError>> {
        match self.locked(transactional_id).await {
            Ok((_, st)) => st.shard.verify_partitions(transactional_id, producer_id, producer_epoch, partitions),
            Err(e) => vec![Err(e); partitions.len()],
        }
    }

    /// EndTxn: answered once the decision (PrepareCommit/PrepareAbort) is written; the markers
    /// follow. The producer id and epoch to continue with (version 2 clients).
    pub async fn end_txn(
        self: &Arc<Self>,
        req: oxbow_txn::EndTxn,
        ids: &ControllerClient,
    ) -> Result<oxbow_txn::ProducerIdAndEpoch, TxnError> {
        if req.client_transaction_version >= 2 {
            // A version 2 commit may move an exhausted epoch to a new producer id.
            ids.refill_producer_ids().await.map_err(|_| TxnError::CoordinatorLoadInProgress)?;
        }
        let id = req.transactional_id.clone();
        let answer = self
            .request(&id, |shard, ticket, now| {
                let mut next = || ids.try_next_producer_id().ok_or(TxnError::CoordinatorLoadInProgress);
                shard.end_txn(ticket, &req, now, &mut next)
            })
            .await?;
        match answer {
            Answer::EndTxn(r) => r,
            other => Err(unexpected(&other)),
        }
    }

    /// DescribeTransactions of one id: its state, `TRANSACTIONAL_ID_NOT_FOUND` if unknown.
    pub async fn describe(self: &Arc<Self>, transactional_id: &str) -> Result<Described, TxnError> {
        let (_, st) = self.locked(transactional_id).await?;
        let meta = st.shard.get(transactional_id).ok_or(TxnError::TransactionalIdNotFound)?;
        Ok(Described { transactional_id: transactional_id.to_string(), meta: meta.clone() })
    }

    /// Every transactional id this broker coordinates (ListTransactions).
    pub async fn list(self: &Arc<Self>) -> Vec<Described> {
        self.sync_leadership().await;
        let slots: Vec<Arc<Slot>> = self.slots.lock().values().cloned().collect();
        let mut out = Vec::new();
        for s in slots {
            let st = s.state.lock().await;
            if st.alive {
                out.extend(
                    st.shard
                        .iter()
                        .filter(|(_, m)| m.state != TxnState::Dead)
                        .map(|(id, m)| Described { transactional_id: id.to_string(), meta: m.clone() }),
                );
            }
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// Executes what the shard returned, in order, with its lock held: answers are delivered,
    /// records appended (their waits run as tasks), markers handed to a sender task.
    fn execute(self: &Arc<Self>, slot: &Arc<Slot>, st: &mut SlotState, cmds: Vec<Command>) {
        let mut queue: std::collections::VecDeque<Command> = cmds.into();
        while let Some(c) = queue.pop_front() {
            match c {
                Command::Answer(ticket, answer) => {
                    if let Some(tx) = st.waiters.remove(&ticket) {
                        let _ = tx.send(answer);
                    }
                }
                Command::Append(w) => match self.append(slot, &w) {
                    Ok(end) => {
                        let (this, slot, stop) = (self.clone(), slot.clone(), self.stop.clone());
                        self.tasks.spawn(async move {
                            tokio::select! {
                                _ = stop.cancelled() => {}
                                _ = this.await_write(slot, w.transactional_id, end) => {}
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(partition = slot.index, transactional_id = %w.transactional_id, error = %e, "cannot write transaction state");
                        let err = TxnError::from_append_error(e.code());
                        queue.extend(st.shard.appended(&w.transactional_id, Err(err), now_ms()));
                    }
                },
                Command::SendMarkers(m) => {
                    let (this, slot, stop) = (self.clone(), slot.clone(), self.stop.clone());
                    self.tasks.spawn(async move {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = this.send_markers(slot, m) => {}
                        }
                    });
                }
            }
        }
    }

    /// Appends one record to the slot's partition (its lock held): the offset after it.
    fn append(&self, slot: &Slot, w: &Write) -> Result<i64, BrokerError> {
        let now = now_ms();
        let bytes = encode_plain(&[(Some(w.key()), w.value())], now, Compression::None)?;
        if slot.partition.leader_epoch()? != slot.leader_epoch {
            return Err(BrokerError::NotLeader("the transaction state partition has a new leader".into()));
        }
        let topic = self.view.topic(TRANSACTION_STATE_TOPIC).ok_or_else(|| BrokerError::unknown_topic(false))?;
        let batches = validate_produce(&bytes, topic.log_config.max_message_bytes)?;
        let r = slot.partition.append(&bytes, &batches, Some(topic.min_insync), now, None, Flush::Now)?;
        Ok(r.last_offset + 1)
    }

    /// Waits until the ISR has a state change's record, then tells the shard.
    async fn await_write(self: Arc<Self>, slot: Arc<Slot>, transactional_id: String, end: i64) {
        let result = match slot.partition.wait_for_hw(end, APPEND_TIMEOUT).await {
            Ok(()) => Ok(()),
            Err(HwWait::TimedOut) => Err(TxnError::CoordinatorNotAvailable),
            Err(HwWait::NotLeader) => Err(TxnError::NotCoordinator),
        };
        if let Err(e) = result {
            tracing::warn!(partition = slot.index, transactional_id = %transactional_id, error = %e, "transaction state not replicated");
        }
        let mut st = slot.state.clone().lock_owned().await;
        if !st.alive {
            return;
        }
        let cmds = st.shard.appended(&transactional_id, result, now_ms());
        self.execute(&slot, &mut st, cmds);
    }

    /// Loads the partitions this broker leads and drops those it no longer leads.
    async fn sync_leadership(self: &Arc<Self>) {
        let Some(topic) = self.view.topic(TRANSACTION_STATE_TOPIC) else {
            let all: Vec<Arc<Slot>> = self.slots.lock().drain().map(|(_, s)| s).collect();
            for s in all {
                Self::unload(&s).await;
            }
            return;
        };
        for index in 0..topic.meta.partitions {
            let loaded = self.slots.lock().get(&index).cloned();
            if topic.led(index).is_ok() {
                match self.slot_for(&topic, index).await {
                    Ok(s) => {
                        let mut st = s.state.clone().lock_owned().await;
                        self.finish_load(&s, &mut st);
                    }
                    Err(e) => {
                        tracing::warn!(partition = index, error = %e, "cannot load transaction coordinator partition")
                    }
                }
            } else if let Some(s) = loaded {
                let _serial = self.loading.lock().await;
                let still = {
                    let mut slots = self.slots.lock();
                    let same = slots.get(&index).is_some_and(|x| Arc::ptr_eq(x, &s));
                    if same {
                        slots.remove(&index);
                    }
                    same
                };
                if still {
                    Self::unload(&s).await;
                }
            }
        }
    }

    /// The timer task: leadership changes (loads, with their pending markers), aborts of
    /// timed-out transactions, expiry of idle transactional ids.
    pub async fn run_timers(self: Arc<Self>, stop: CancellationToken) {
        let mut last_version = u64::MAX;
        let (abort_every, expire_every) =
            (self.settings.abort_interval_ms as i64, self.settings.expire_interval_ms as i64);
        let mut next_abort = now_ms() + abort_every;
        let mut next_expire = now_ms() + expire_every;
        let mut applied = self.view.subscribe_applied();
        loop {
            let version = self.view.image().version;
            if version != last_version {
                self.sync_leadership().await;
                last_version = version;
            }
            let now = now_ms();
            let (abort, expire) = (now >= next_abort, now >= next_expire);
            if abort {
                next_abort = now + abort_every;
            }
            if expire {
                next_expire = now + expire_every;
            }
            if abort || expire {
                let slots: Vec<Arc<Slot>> = self.slots.lock().values().cloned().collect();
                for slot in slots {
                    let mut st = slot.state.clone().lock_owned().await;
                    if !st.alive {
                        continue;
                    }
                    let mut cmds = if abort { st.shard.abort_timed_out(now) } else { Vec::new() };
                    if expire {
                        cmds.extend(st.shard.remove_expired(now));
                    }
                    if !cmds.is_empty() {
                        tracing::debug!(partition = slot.index, commands = cmds.len(), "transaction timers");
                    }
                    self.execute(&slot, &mut st, cmds);
                }
            }
            let wait = Duration::from_millis(u64::try_from(next_abort.min(next_expire) - now_ms()).unwrap_or(0).max(1));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = applied.changed() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

fn unexpected(a: &Answer) -> TxnError {
    tracing::error!(answer = ?a, "the transaction coordinator answered a request with another request's answer");
    TxnError::UnknownServerError
}

/// Rebuilds a shard from its partition's records, to the log end.
fn replay(part: &Partition, shard: &mut TxnShard) -> Result<(), TxnError> {
    let at_load = part.offsets().map_err(|_| TxnError::NotCoordinator)?;
    let mut offset = at_load.log_start;
    let mut skipped = 0usize;
    let unreadable = |e: &dyn std::fmt::Display, offset: i64| {
        tracing::error!(partition = part.index, offset, error = %e, "cannot read the transaction state partition");
        TxnError::CoordinatorLoadInProgress
    };
    loop {
        let (start, _) = part.read_for_follower(offset, 1 << 20).map_err(|(e, _)| unreadable(&e, offset))?;
        let ReadStart::Plan(plan) = start else { break };
        let bytes = plan.execute().map_err(|e| unreadable(&e, offset))?;
        let next = BatchIter::new(&bytes).last().map(|(_, h)| h.next_offset());
        let Some(next) = next.filter(|n| *n > offset) else { break };
        let mut buf = bytes.clone();
        match RecordBatchDecoder::decode_all(&mut buf) {
            Ok(sets) => {
                for r in sets.iter().flat_map(|s| s.records.iter()) {
                    if r.control || r.offset < offset {
                        continue;
                    }
                    let Some(key) = &r.key else { continue };
                    if shard.replay(key, r.value.as_deref()).is_err() {
                        skipped += 1;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(partition = part.index, offset, error = %e, "skipping undecodable batches in the transaction state partition");
            }
        }
        offset = next;
    }
    if skipped > 0 {
        tracing::warn!(partition = part.index, skipped, "skipped malformed records in the transaction state partition");
    }
    Ok(())
}
