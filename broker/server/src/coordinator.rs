//! The group coordinator's runtime: one [`Shard`] (from `oxbow-group`) per partition of
//! `__consumer_offsets` this broker leads, loaded by replaying the partition when leadership
//! arrives and dropped when it leaves.
//!
//! Each shard is behind one async lock: an event runs the pure state machine and appends the
//! records it asks for to the partition under the lock, then releases it while the ISR
//! acknowledges them (`offsets.commit.timeout.ms`), then answers. So a slow ISR delays the
//! answers of the writes waiting on it, not every group of the partition. Offsets appended but
//! not yet under the high watermark wait in [`SlotState::pending`] and are applied in log order
//! once they are: OffsetFetch shows only what the ISR has. Parked JoinGroup and SyncGroup
//! requests wait on oneshot channels keyed by [`Ticket`]. One timer task runs group deadlines
//! (sessions, rebalance and sync timeouts, the initial delay) and offset expiry.
//!
//! Durability: a commit or a group change is answered after its record is in the partition's
//! log and covered by the high watermark; it is on disk when the partition's flush policy says.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use oxbow_group::assignor::TopicInfo;
use oxbow_group::classic::{JoinRequest, JoinResponse, SyncRequest, SyncResponse};
use oxbow_group::consumer::{Catalog, ConsumerGroup, HeartbeatRequest, HeartbeatResponse};
use oxbow_group::shard::{Listing, Rebalance, RebalanceKind};
use oxbow_group::{Answer, GroupError, Out, Shard, Ticket, Write, partition_for};
use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::now_ms;
use crate::config::GroupSettings;
use crate::metadata_view::{MetadataView, Topic};
use crate::partition::Partition;

mod offsets;
mod store;

pub use offsets::{CommitEntry, Committer, FetchedOffset, TxnCommitter};

use store::{Stored, group_of};

/// The internal topic holding committed offsets and group state.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// What a write in the log does to the shard once the high watermark passes it.
enum Settle {
    /// Offset commits (or tombstones), each with the log offset of its record.
    Offsets(Vec<(i64, Write)>),
    /// The COMMIT or ABORT marker of a producer's transaction: the offsets it committed
    /// (TxnOffsetCommit) become the group's, or are dropped.
    TxnEnd { producer_id: i64, commit: bool },
}

impl Settle {
    /// Whether applying it may change `group`'s offsets (a marker may change any group's).
    fn touches(&self, group: &str) -> bool {
        match self {
            Settle::Offsets(ws) => ws.iter().any(|(_, w)| group_of(w) == group),
            Settle::TxnEnd { .. } => true,
        }
    }
}

/// Writes in the log and not yet under the high watermark, each with the offset after it.
type Pending = VecDeque<(i64, Settle)>;

/// A parked request's answer, with the shard's last written offset when it was given: the
/// request answers once the ISR has that much.
enum Waiter {
    Join(oneshot::Sender<(JoinResponse, i64)>),
    Sync(oneshot::Sender<(SyncResponse, i64)>),
}

struct SlotState {
    shard: Shard,
    waiters: HashMap<Ticket, Waiter>,
    /// Offset writes in the log, in log order, each with the offset after its last record:
    /// applied to the shard once the high watermark passes them ([`Coordinator::settle`]).
    pending: Pending,
    /// The offset after the last record this shard wrote (the log end when it was loaded).
    last_written: i64,
    /// False once leadership moved away: requests holding this slot answer NOT_COORDINATOR.
    alive: bool,
}

/// One loaded coordinator partition.
struct Slot {
    index: i32,
    partition: Arc<Partition>,
    leader_epoch: i32,
    state: Arc<AsyncMutex<SlotState>>,
}

/// A group coordinated here and its committed offsets: (topic, partition, offset).
pub struct GroupOffsets {
    pub group: String,
    pub offsets: Vec<(String, i32, i64)>,
}

/// A group described by DescribeGroups.
pub struct Described {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<oxbow_group::classic::MemberSummary>,
}

pub struct Coordinator {
    settings: GroupSettings,
    slots: parking_lot::Mutex<HashMap<i32, Arc<Slot>>>,
    next_ticket: AtomicU64,
    wake: Notify,
    /// Serialises loading.
    loading: AsyncMutex<()>,
    /// The topics consumer protocol groups subscribe to, built once per metadata image.
    catalog: parking_lot::Mutex<(u64, Arc<Catalog>)>,
    /// The group operations running as their own tasks ([`Self::detached`]).
    tasks: TaskTracker,
    /// Rebalances completed here, by [`RebalanceKind`]: (count, total ms).
    rebalances: [(AtomicU64, AtomicU64); RebalanceKind::ALL.len()],
}

impl Coordinator {
    pub fn new(settings: GroupSettings) -> Self {
        Coordinator {
            settings,
            slots: parking_lot::Mutex::new(HashMap::new()),
            next_ticket: AtomicU64::new(1),
            wake: Notify::new(),
            loading: AsyncMutex::new(()),
            catalog: parking_lot::Mutex::new((u64::MAX, Arc::new(Catalog::default()))),
            tasks: TaskTracker::new(),
            rebalances: Default::default(),
        }
    }

    /// Counts completed rebalances (taken from the shard once what completed them was stored:
    /// a change undone or reloaded is not counted, nor counted again when it completes anew).
    fn count_rebalances(&self, done: &[Rebalance]) {
        for r in done {
            let (count, ms) = &self.rebalances[r.kind as usize];
            count.fetch_add(1, Ordering::Relaxed);
            ms.fetch_add(u64::try_from(r.duration_ms).unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Rebalances completed by the groups coordinated here since the broker started, by type:
    /// (kind, count, total duration in ms).
    pub fn rebalance_stats(&self) -> [(RebalanceKind, u64, u64); RebalanceKind::ALL.len()] {
        RebalanceKind::ALL.map(|k| {
            let (count, ms) = &self.rebalances[k as usize];
            (k, count.load(Ordering::Relaxed), ms.load(Ordering::Relaxed))
        })
    }

    /// Runs `f` as its own task and waits for it: a coordinator operation must finish (append,
    /// then apply; store, then answer the parked members) even if the client that asked hangs
    /// up and its request future is dropped. The task is the coordinator's: [`Self::shutdown`]
    /// waits for it.
    pub async fn detached<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        self.tasks.spawn(f).await.ok()
    }

    /// At shutdown, once no request is read any more: unloads every shard (parked JoinGroup and
    /// SyncGroup requests answer NOT_COORDINATOR) and waits for the operations still running.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Slot>> = self.slots.lock().drain().map(|(_, s)| s).collect();
        for s in all {
            self.unload(s).await;
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// `group.consumer.*`
    pub fn consumer_config(&self) -> &oxbow_group::consumer::ConsumerConfig {
        &self.settings.consumer
    }

    /// Whether ConsumerGroupHeartbeat is served (`group.coordinator.rebalance.protocols`).
    pub fn consumer_protocol(&self) -> bool {
        self.settings.consumer_protocol
    }

    /// The topic catalog of the current metadata image.
    fn catalog(&self, view: &MetadataView) -> Arc<Catalog> {
        let image = view.image();
        let mut c = self.catalog.lock();
        if c.0 != image.version {
            let topics = image
                .topics
                .values()
                .map(|t| {
                    let partitions = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
                    (t.name.clone(), TopicInfo { id: t.id, partitions })
                })
                .collect();
            *c = (image.version, Arc::new(Catalog { version: image.version, topics }));
        }
        c.1.clone()
    }

    fn ticket(&self) -> Ticket {
        Ticket(self.next_ticket.fetch_add(1, Ordering::Relaxed))
    }

    /// How `__consumer_offsets` is created: partitions, replication factor and configs
    /// (`offsets.topic.*`).
    pub fn offsets_topic_spec(&self) -> (i32, i16, BTreeMap<String, String>) {
        let configs = [
            ("cleanup.policy", "compact".to_string()),
            ("segment.bytes", self.settings.topic_segment_bytes.to_string()),
            ("compression.type", "producer".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        (self.settings.topic_partitions, self.settings.topic_replication_factor, configs)
    }

    /// The slot coordinating `group`, loading it if this broker just became its leader.
    async fn slot(&self, view: &MetadataView, group: &str) -> Result<Arc<Slot>, GroupError> {
        let topic = view.topic(OFFSETS_TOPIC).ok_or(GroupError::CoordinatorNotAvailable)?;
        let index = partition_for(group, topic.meta.partitions);
        self.slot_for(&topic, index).await
    }

    /// The live shard coordinating `group`, locked.
    async fn locked(
        &self,
        view: &MetadataView,
        group: &str,
    ) -> Result<(Arc<Slot>, OwnedMutexGuard<SlotState>), GroupError> {
        let slot = self.slot(view, group).await?;
        let mut st = slot.state.clone().lock_owned().await;
        if !st.alive {
            return Err(GroupError::NotCoordinator);
        }
        Self::settle(&slot, &mut st);
        Ok((slot, st))
    }

    async fn slot_for(&self, topic: &Topic, index: i32) -> Result<Arc<Slot>, GroupError> {
        let part = topic.led(index).map_err(|_| GroupError::NotCoordinator)?.clone();
        let epoch = part.leader_epoch().map_err(|_| GroupError::NotCoordinator)?;
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
        // The old incarnation goes first: once its lock is taken and it is marked dead, no
        // request can append through it behind the replay's back.
        let old = self.slots.lock().remove(&index);
        if let Some(old) = old {
            self.unload(old).await;
        }
        let started = std::time::Instant::now();
        let (shard, pending, log_end) = tokio::task::block_in_place(|| self.replay(&part))?;
        let groups = shard.list().len();
        let slot = Arc::new(Slot {
            index,
            partition: part,
            leader_epoch: epoch,
            state: Arc::new(AsyncMutex::new(SlotState {
                shard,
                waiters: HashMap::new(),
                pending,
                last_written: log_end,
                alive: true,
            })),
        });
        self.slots.lock().insert(index, slot.clone());
        tracing::info!(
            partition = index,
            leader_epoch = epoch,
            groups,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded group coordinator partition"
        );
        self.wake.notify_one();
        Ok(slot)
    }

    async fn unload(&self, slot: Arc<Slot>) {
        let mut st = slot.state.lock().await;
        Self::close(&mut st);
        tracing::info!(partition = slot.index, "unloaded group coordinator partition");
    }

    /// Drops a loaded shard whose memory no longer matches its log (its lock is held).
    fn invalidate(&self, slot: &Slot, st: &mut SlotState) {
        {
            let mut slots = self.slots.lock();
            if slots.get(&slot.index).is_some_and(|s| Arc::ptr_eq(&s.state, &slot.state)) {
                slots.remove(&slot.index);
            }
        }
        Self::close(st);
    }

    /// Marks a shard dead and answers its parked requests NOT_COORDINATOR.
    fn close(st: &mut SlotState) {
        st.alive = false;
        for (_, w) in st.waiters.drain() {
            match w {
                Waiter::Join(tx) => {
                    let _ = tx.send((JoinResponse::error(GroupError::NotCoordinator, ""), 0));
                }
                Waiter::Sync(tx) => {
                    let _ = tx.send((SyncResponse::error(GroupError::NotCoordinator), 0));
                }
            }
        }
    }

    /// Delivers what the state machine returned, storing groups on the way (first the records
    /// the shard asked for: consumer group changes from timers, a group changing protocol).
    /// The lock is released while each store waits for the ISR; the shard is returned locked.
    async fn run(
        &self,
        view: &MetadataView,
        slot: &Arc<Slot>,
        st: OwnedMutexGuard<SlotState>,
        outs: Vec<Out>,
    ) -> OwnedMutexGuard<SlotState> {
        let mut st = st;
        // A classic group's rebalance ends with its Store below: counted if that write succeeds.
        let mut done = st.shard.take_rebalances();
        let writes = st.shard.take_writes();
        let (again, r) = self.store(view, slot, st, &writes).await;
        st = again;
        match r {
            Ok(()) => {}
            Err(Stored::NotAppended(e)) => {
                // The shard is ahead of its log: drop it, so the next request reloads it from
                // the log (as after a leadership change) instead of building on unwritten state.
                tracing::warn!(partition = slot.index, records = writes.len(), error = ?e, "storing group changes failed; reloading the shard");
                self.invalidate(slot, &mut st);
            }
            // In the log: the answers that depend on them wait for the ISR themselves.
            Err(Stored::NotReplicated(e)) => {
                tracing::warn!(partition = slot.index, records = writes.len(), error = ?e, "group changes not replicated in time");
            }
        }
        let mut queue: VecDeque<Out> = outs.into();
        while let Some(o) = queue.pop_front() {
            if !st.alive {
                // Dropped (its parked requests were answered NOT_COORDINATOR): nothing to deliver.
                break;
            }
            match o {
                Out::Join(t, r) => {
                    if let Some(Waiter::Join(tx)) = st.waiters.remove(&t) {
                        let _ = tx.send((r, st.last_written));
                    }
                }
                Out::Sync(t, r) => {
                    if let Some(Waiter::Sync(tx)) = st.waiters.remove(&t) {
                        let _ = tx.send((r, st.last_written));
                    }
                }
                Out::Store { group, generation, then } => {
                    let w = st.shard.group_write(&group);
                    let (again, r) = self.store(view, slot, st, &[w]).await;
                    st = again;
                    match r {
                        Ok(()) => {
                            for x in then.into_iter().rev() {
                                queue.push_front(x);
                            }
                        }
                        Err(e) => {
                            let e = e.error();
                            tracing::warn!(group = %group, generation, error = ?e, "storing the group failed");
                            done.retain(|r| r.group != group);
                            for x in then {
                                match x {
                                    Out::Join(t, r) => {
                                        queue.push_back(Out::Join(t, JoinResponse::error(e, &r.member_id)))
                                    }
                                    Out::Sync(t, _) => queue.push_back(Out::Sync(t, SyncResponse::error(e))),
                                    Out::Store { .. } => {}
                                }
                            }
                            if let Some(g) = st.shard.group_mut(&group) {
                                queue.extend(g.store_failed(generation, now_ms()));
                            }
                        }
                    }
                }
            }
        }
        if st.alive {
            self.count_rebalances(&done);
        }
        st
    }

    /// JoinGroup; waits until the group answers (end of the join phase).
    pub async fn join(&self, view: &MetadataView, group: &str, req: JoinRequest) -> JoinResponse {
        let member = req.member_id.clone();
        let (tx, rx) = oneshot::channel();
        let slot = {
            let (slot, mut st) = match self.locked(view, group).await {
                Ok(x) => x,
                Err(e) => return JoinResponse::error(e, &member),
            };
            let ticket = self.ticket();
            st.waiters.insert(ticket, Waiter::Join(tx));
            let prefix = req.instance_id.clone().unwrap_or_else(|| req.client_id.clone());
            let new_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
            let outs = st.shard.join(group, req, ticket, new_id, now_ms());
            self.run(view, &slot, st, outs).await;
            slot
        };
        self.wake.notify_one();
        let (r, end) = rx.await.unwrap_or_else(|_| (JoinResponse::error(GroupError::NotCoordinator, &member), 0));
        match self.answerable(&slot, r.error, end).await {
            Ok(()) => r,
            Err(e) => JoinResponse::error(e, &member),
        }
    }

    /// Whether an answer given with the shard's log at `end` may go out: at once for an error,
    /// once the ISR has `end` for a success (Kafka's deferred write result).
    async fn answerable(&self, slot: &Slot, error: Option<GroupError>, end: i64) -> Result<(), GroupError> {
        if error.is_some() { Ok(()) } else { self.replicated(slot, end).await }
    }

    /// SyncGroup; followers wait for the leader's assignment.
    pub async fn sync(&self, view: &MetadataView, group: &str, req: SyncRequest) -> SyncResponse {
        let (tx, rx) = oneshot::channel();
        let slot = {
            let (slot, mut st) = match self.locked(view, group).await {
                Ok(x) => x,
                Err(e) => return SyncResponse::error(e),
            };
            let ticket = self.ticket();
            st.waiters.insert(ticket, Waiter::Sync(tx));
            let outs = st.shard.sync(group, req, ticket, now_ms());
            self.run(view, &slot, st, outs).await;
            slot
        };
        self.wake.notify_one();
        let (r, end) = rx.await.unwrap_or_else(|_| (SyncResponse::error(GroupError::NotCoordinator), 0));
        match self.answerable(&slot, r.error, end).await {
            Ok(()) => r,
            Err(e) => SyncResponse::error(e),
        }
    }

    pub async fn heartbeat(
        &self,
        view: &MetadataView,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> Answer {
        let (slot, mut st) = self.locked(view, group).await?;
        st.shard.heartbeat(group, member, instance, generation, now_ms())?;
        self.caught_up(&slot, st).await
    }

    /// LeaveGroup: each member's answer, or the group's error.
    pub async fn leave(
        &self,
        view: &MetadataView,
        group: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Answer>, GroupError> {
        let answers = {
            let (slot, mut st) = self.locked(view, group).await?;
            let (answers, outs) = st.shard.leave(group, members, now_ms())?;
            let st = self.run(view, &slot, st, outs).await;
            (answers, slot, st)
        };
        self.wake.notify_one();
        let (answers, slot, st) = answers;
        self.caught_up(&slot, st).await?;
        Ok(answers)
    }

    /// DeleteGroups for one group.
    pub async fn delete_group(&self, view: &MetadataView, group: &str) -> Answer {
        let (slot, st) = self.locked(view, group).await?;
        let mut st = self.drained(&slot, st, group).await?;
        let writes = st.shard.delete_group(group)?;
        let end = self.write_offsets(view, &slot, &mut st, writes)?;
        // The group goes from memory now, as any group change does; its offsets' tombstones
        // are applied with the other pending offset writes.
        let outs = st.shard.remove_group(group, now_ms());
        let st = self.run(view, &slot, st, outs).await;
        if let Some(end) = end {
            self.replicated_unlocked(&slot, st, end).await.1?;
        }
        tracing::info!(group, "deleted group");
        Ok(())
    }

    pub async fn describe(&self, view: &MetadataView, group: &str) -> Result<Option<Described>, GroupError> {
        let (_, st) = self.locked(view, group).await?;
        if st.shard.consumer_group(group).is_some() {
            // Not a classic group: DescribeGroups answers as for a missing one.
            return Err(GroupError::GroupIdNotFound);
        }
        Ok(st.shard.group(group).map(|g| Described {
            state: g.state().name(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol: if g.state() == oxbow_group::GroupState::Stable {
                g.protocol().unwrap_or_default().to_string()
            } else {
                String::new()
            },
            members: g.describe(),
        }))
    }

    /// ConsumerGroupHeartbeat (KIP-848). What changed is written as Kafka's consumer group
    /// records before the answer; if they cannot be appended the group is put back as it was
    /// and the member gets the error. Once appended they stay, as in Kafka: if the ISR does
    /// not acknowledge them in time the member gets the error and retries at its previous
    /// epoch, which the group accepts.
    pub async fn consumer_heartbeat(
        &self,
        view: &MetadataView,
        group: &str,
        req: HeartbeatRequest,
    ) -> HeartbeatResponse {
        let catalog = self.catalog(view);
        let failed = |e: GroupError| HeartbeatResponse { message: None, ..HeartbeatResponse::error(e, "") };
        let r = match self.locked(view, group).await {
            Ok((slot, mut st)) => {
                let (r, undo) = st.shard.consumer_heartbeat(group, &req, &catalog, now_ms());
                let done = st.shard.take_rebalances();
                let writes = st.shard.take_writes();
                let written = self.write(view, &slot, &mut st, &writes);
                if written.is_ok() {
                    self.count_rebalances(&done);
                }
                match written {
                    Ok(None) => match self.caught_up(&slot, st).await {
                        Ok(()) => r,
                        Err(e) => failed(e),
                    },
                    Ok(Some(end)) => match self.replicated_unlocked(&slot, st, end).await.1 {
                        Ok(()) => r,
                        Err(e) => {
                            tracing::warn!(group, error = ?e, "the consumer group's records were not replicated in time");
                            failed(e)
                        }
                    },
                    Err(e) => {
                        tracing::warn!(group, error = ?e, "storing the consumer group failed");
                        st.shard.undo(undo);
                        failed(e)
                    }
                }
            }
            Err(e) => failed(e),
        };
        // No timer wake-up: session and revocation deadlines only move later here, and the
        // timer task looks at least once a second.
        r
    }

    /// ConsumerGroupDescribe of one group: the group and the catalog to name its topics, or
    /// the error and message Kafka gives.
    pub async fn describe_consumer(
        &self,
        view: &MetadataView,
        group: &str,
    ) -> Result<(ConsumerGroup, Arc<Catalog>), (GroupError, Option<String>)> {
        let catalog = self.catalog(view);
        let (_, st) = self.locked(view, group).await.map_err(|e| (e, None))?;
        if let Some(g) = st.shard.consumer_group(group) {
            return Ok((g.clone(), catalog));
        }
        let live = st.shard.group(group).is_some_and(|g| g.state() != oxbow_group::GroupState::Dead);
        let msg =
            if live { format!("Group {group} is not a consumer group.") } else { format!("Group {group} not found.") };
        Err((GroupError::GroupIdNotFound, Some(msg)))
    }

    /// Every group this broker coordinates.
    pub async fn list(&self, view: &MetadataView) -> Result<Vec<Listing>, GroupError> {
        self.sync_leadership(view).await;
        let slots: Vec<Arc<Slot>> = self.slots.lock().values().cloned().collect();
        let mut out = Vec::new();
        for s in slots {
            let st = s.state.lock().await;
            if st.alive {
                out.extend(st.shard.list());
            }
        }
        out.sort_by(|a, b| a.group.cmp(&b.group));
        Ok(out)
    }

    /// The groups of the shards loaded here, and the committed offsets of every group that has
    /// some (for the metrics: groups by state, consumer lag), with the commits the high
    /// watermark has passed applied first, as OffsetFetch sees them (a commit followed by
    /// nothing else on its shard would otherwise stay pending). Loads nothing: a shard not
    /// loaded yet is left out.
    pub async fn committed(&self) -> (Vec<Listing>, Vec<GroupOffsets>) {
        let slots: Vec<Arc<Slot>> = self.slots.lock().values().cloned().collect();
        let (mut listings, mut offsets) = (Vec::new(), Vec::new());
        for s in slots {
            let mut st = s.state.lock().await;
            if !st.alive {
                continue;
            }
            Self::settle(&s, &mut st);
            listings.extend(st.shard.list());
            for group in st.shard.groups_with_offsets() {
                let committed = st.shard.offsets(group).map(|((t, p), v)| (t.clone(), *p, v.offset)).collect();
                offsets.push(GroupOffsets { group: group.to_string(), offsets: committed });
            }
        }
        (listings, offsets)
    }

    /// Loads the partitions this broker leads and drops those it no longer leads.
    async fn sync_leadership(&self, view: &MetadataView) {
        let Some(topic) = view.topic(OFFSETS_TOPIC) else {
            let all: Vec<Arc<Slot>> = self.slots.lock().drain().map(|(_, s)| s).collect();
            for s in all {
                self.unload(s).await;
            }
            return;
        };
        for index in 0..topic.meta.partitions {
            let led = topic.led(index).is_ok();
            let loaded = self.slots.lock().get(&index).cloned();
            if led {
                if let Err(e) = self.slot_for(&topic, index).await {
                    tracing::warn!(partition = index, error = ?e, "cannot load group coordinator partition");
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
                    self.unload(s).await;
                }
            }
        }
    }

    /// The timer task: group deadlines, leadership changes, offset expiry.
    pub async fn run_timers(self: Arc<Self>, view: Arc<MetadataView>, stop: CancellationToken) {
        let mut last_version = u64::MAX;
        let mut next_expiry = now_ms() + self.settings.retention_check_interval_ms as i64;
        loop {
            let version = view.image().version;
            if version != last_version {
                self.sync_leadership(&view).await;
                last_version = version;
            }
            let now = now_ms();
            let expire = now >= next_expiry;
            if expire {
                next_expiry = now + self.settings.retention_check_interval_ms as i64;
            }
            let mut next = now + 1000;
            let slots: Vec<Arc<Slot>> = self.slots.lock().values().cloned().collect();
            for slot in slots {
                let mut st = slot.state.clone().lock_owned().await;
                if !st.alive {
                    continue;
                }
                if st.shard.next_deadline().is_some_and(|d| d <= now) {
                    let (outs, expired) = st.shard.tick(now);
                    for (group, e) in expired {
                        tracing::info!(group = %group, member = %e.member_id, reason = e.reason, "removed consumer group member");
                    }
                    st = self.run(&view, &slot, st, outs).await;
                }
                if expire && st.alive {
                    st = self.expire(&view, &slot, st, now).await;
                }
                if st.alive
                    && let Some(d) = st.shard.next_deadline()
                {
                    next = next.min(d);
                }
            }
            if expire {
                next = next.min(next_expiry);
            }
            let wait = Duration::from_millis(u64::try_from(next - now_ms()).unwrap_or(0).max(1));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Writes tombstones for expired offsets and removes the groups left with nothing. The
    /// tombstones are applied with the other pending offset writes; the timer does not wait
    /// for the ISR. A group with an offset write still pending has newer offsets than the
    /// shard shows: it is left for the next check.
    async fn expire(
        &self,
        view: &MetadataView,
        slot: &Arc<Slot>,
        mut st: OwnedMutexGuard<SlotState>,
        now: i64,
    ) -> OwnedMutexGuard<SlotState> {
        Self::settle(slot, &mut st);
        let busy: HashSet<String> = st
            .pending
            .iter()
            .flat_map(|(_, s)| match s {
                Settle::Offsets(ws) => ws.iter().map(|(_, w)| group_of(w).to_string()).collect(),
                // Its offsets are still pending in the shard, which does not expire them.
                Settle::TxnEnd { .. } => Vec::new(),
            })
            .collect();
        let (mut writes, mut gone) = st.shard.expired(now);
        writes.retain(|w| !busy.contains(group_of(w)));
        gone.retain(|g| !busy.contains(g));
        if writes.is_empty() {
            return st;
        }
        let count = writes.len();
        if let Err(e) = self.write_offsets(view, slot, &mut st, writes) {
            tracing::warn!(partition = slot.index, error = ?e, "cannot write offset expiry");
            return st;
        }
        for g in &gone {
            let outs = st.shard.remove_group(g, now);
            st = self.run(view, slot, st, outs).await;
        }
        tracing::info!(
            partition = slot.index,
            offsets = count - gone.len(),
            groups = gone.len(),
            "expired committed offsets"
        );
        st
    }

    /// The leader of the coordinator partition of `group`: (node id, partition).
    pub fn coordinator_of(&self, topic: &Topic, group: &str) -> (i32, i32) {
        let index = partition_for(group, topic.meta.partitions);
        let leader = usize::try_from(index).ok().and_then(|i| topic.states.get(i)).map_or(-1, |s| s.leader);
        (leader, index)
    }
}
