//! Everything one partition of `__consumer_offsets` coordinates: its groups and their committed
//! offsets. Rebuilt by replaying the partition's records when this broker becomes its leader;
//! changed by requests, each change returned as [`Write`]s that the runtime appends to the
//! partition before it acknowledges (and then applies with [`Shard::apply`]).

use std::collections::{BTreeMap, HashMap};

use crate::error::{Answer, GroupError as E};

use crate::classic::{ClassicGroup, GroupConfig, GroupState, JoinRequest, JoinResponse, Out, SyncRequest, Ticket};
use crate::consumer::{Catalog, ConsumerConfig, ConsumerGroup, Expired, HeartbeatRequest, HeartbeatResponse};
use crate::records::{ConsumerKey, ConsumerValue, GroupValue, Key, OffsetValue, RecordError, subscribed_topics};
use crate::txn_offsets::{Committed, TxnOffsets, merge};

/// One record to append to the shard's partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupValue> },
    Consumer { group: String, record: ConsumerKey, value: Option<ConsumerValue> },
}

impl Write {
    pub fn key(&self) -> Key {
        match self {
            Write::Offset { group, topic, partition, .. } => {
                Key::Offset { group: group.clone(), topic: topic.clone(), partition: *partition }
            }
            Write::Group { group, .. } => Key::Group { group: group.clone() },
            Write::Consumer { group, record, .. } => Key::Consumer { group: group.clone(), record: record.clone() },
        }
    }

    /// The record value; `None` is a tombstone.
    pub fn value(&self) -> Option<bytes::Bytes> {
        match self {
            Write::Offset { value, .. } => value.as_ref().map(OffsetValue::encode),
            Write::Group { value, .. } => value.as_ref().map(GroupValue::encode),
            Write::Consumer { value, .. } => value.as_ref().map(ConsumerValue::encode),
        }
    }
}

/// Settings of the offsets side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetConfig {
    /// `offsets.retention.minutes`, in ms.
    pub retention_ms: i64,
    /// `offset.metadata.max.bytes`
    pub metadata_max_bytes: usize,
}

impl Default for OffsetConfig {
    fn default() -> Self {
        Self { retention_ms: 7 * 24 * 3600 * 1000, metadata_max_bytes: 4096 }
    }
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub group: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// `classic` or `consumer`.
    pub group_type: &'static str,
}

/// A completed rebalance: a classic group made Stable by its leader's assignment, or a consumer
/// protocol group whose members all reconciled to a new target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalance {
    pub group: String,
    pub kind: RebalanceKind,
    /// From its start (a member joined, left or changed its subscription) to its end.
    pub duration_ms: i64,
}

/// The group types rebalances are told apart by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceKind {
    Classic,
    Consumer,
}

impl RebalanceKind {
    /// Every kind, in the order of their discriminants (`kind as usize` indexes an array).
    pub const ALL: [RebalanceKind; 2] = [RebalanceKind::Classic, RebalanceKind::Consumer];

    /// The group type's name, as ListGroups and the metrics' `type` label have it.
    pub fn label(self) -> &'static str {
        match self {
            RebalanceKind::Classic => "classic",
            RebalanceKind::Consumer => "consumer",
        }
    }
}

#[derive(Debug, Default)]
pub struct Shard {
    groups: HashMap<String, ClassicGroup>,
    /// Groups of the consumer group protocol (KIP-848). A group id is in at most one of the
    /// two maps: an empty group changes protocol when a member of the other one joins.
    consumer: HashMap<String, ConsumerGroup>,
    /// Committed offsets, each with the log offset of its record.
    offsets: HashMap<String, BTreeMap<(String, i32), Committed>>,
    /// Offsets committed by open transactions (TxnOffsetCommit), until their marker.
    txn: TxnOffsets,
    /// Stored group values seen while loading, turned into groups by [`Shard::finish_load`].
    loading: HashMap<String, Option<GroupValue>>,
    /// Consumer protocol group records seen while loading (tombstones remove).
    loading_consumer: HashMap<String, BTreeMap<ConsumerKey, ConsumerValue>>,
    /// Records the shard's last operations want written; see [`Shard::take_writes`].
    pending: Vec<Write>,
    /// Rebalances completed since [`Shard::take_rebalances`] was last called.
    rebalances: Vec<Rebalance>,
    cfg: GroupConfig,
    consumer_cfg: ConsumerConfig,
    offset_cfg: OffsetConfig,
}

impl Shard {
    pub fn new(cfg: GroupConfig, offset_cfg: OffsetConfig) -> Self {
        Shard { cfg, offset_cfg, ..Default::default() }
    }

    /// The settings of consumer protocol groups (defaults otherwise).
    pub fn with_consumer_config(mut self, c: ConsumerConfig) -> Self {
        self.consumer_cfg = c;
        self
    }

    /// Replays one record of the partition (loading), at log offset `record_offset`. Records
    /// this coordinator does not use are skipped; a malformed one is an error the caller logs
    /// and skips.
    pub fn replay(&mut self, record_offset: i64, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordError> {
        let Some(key) = Key::decode(key)? else { return Ok(()) };
        match key {
            Key::Offset { group, topic, partition } => {
                let value = value.map(OffsetValue::decode).transpose()?;
                self.apply_offset(group, topic, partition, value, record_offset);
            }
            Key::Group { group } => {
                let value = value.map(GroupValue::decode).transpose()?;
                self.loading.insert(group, value);
            }
            Key::Consumer { group, record } => {
                let records = self.loading_consumer.entry(group).or_default();
                match value {
                    Some(v) => {
                        let v = ConsumerValue::decode(&record, v)?;
                        records.insert(record, v);
                    }
                    None => {
                        records.remove(&record);
                    }
                }
            }
        }
        Ok(())
    }

    /// Replays a record of a transactional batch of `producer_id`: an offset commit waits for
    /// the transaction's marker ([`Self::end_txn`]). Other records are not written in
    /// transactions and are skipped.
    pub fn replay_txn(
        &mut self,
        record_offset: i64,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), RecordError> {
        if let (Some(Key::Offset { group, topic, partition }), Some(v)) = (Key::decode(key)?, value) {
            let value = OffsetValue::decode(v)?;
            self.txn.add(producer_id, &group, &topic, partition, Committed { value, record_offset });
        }
        Ok(())
    }

    /// Transactional offset commits just appended for `producer_id`, the first at log offset
    /// `first_offset`: pending until the transaction's marker.
    pub fn stage_txn(&mut self, producer_id: i64, first_offset: i64, writes: &[Write]) {
        for (i, w) in writes.iter().enumerate() {
            if let Write::Offset { group, topic, partition, value: Some(value) } = w {
                let c = Committed { value: value.clone(), record_offset: first_offset + i as i64 };
                self.txn.add(producer_id, group, topic, *partition, c);
            }
        }
    }

    /// The COMMIT or ABORT marker of `producer_id`'s transaction (replayed, or covered by the
    /// high watermark): its offsets become committed, or are dropped.
    pub fn end_txn(&mut self, producer_id: i64, commit: bool) {
        for (group, parts) in self.txn.end(producer_id, commit) {
            merge(self.offsets.entry(group).or_default(), parts);
        }
    }

    /// Whether an open transaction commits an offset of the partition (OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for it).
    pub fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.txn.has_pending(group, topic, partition)
    }

    /// The offset commit (or tombstone) a record holds, as a [`Write`]; `None` for other records.
    pub fn offset_write(key: &[u8], value: Option<&[u8]>) -> Result<Option<Write>, RecordError> {
        match Key::decode(key)? {
            Some(Key::Offset { group, topic, partition }) => {
                let value = value.map(OffsetValue::decode).transpose()?;
                Ok(Some(Write::Offset { group, topic, partition, value }))
            }
            _ => Ok(None),
        }
    }

    /// Ends loading: stored groups become live groups (members get a fresh session from
    /// `now`); groups with offsets and no stored state are Empty.
    pub fn finish_load(&mut self, now: i64) {
        for (id, v) in self.loading.drain() {
            match v {
                Some(v) => {
                    self.groups.insert(id.clone(), ClassicGroup::from_stored(&id, &v, self.cfg, now));
                }
                None => {
                    self.groups.remove(&id);
                }
            }
        }
        for (id, records) in std::mem::take(&mut self.loading_consumer) {
            if let Some(g) = ConsumerGroup::restore(&id, &records, &self.consumer_cfg, now) {
                self.groups.remove(&id);
                self.consumer.insert(id, g);
            }
        }
        for id in self.offsets.keys().chain(self.txn.groups()) {
            if !self.groups.contains_key(id) && !self.consumer.contains_key(id) {
                self.groups.insert(id.clone(), ClassicGroup::new(id, self.cfg, now));
            }
        }
    }

    /// Applies writes that have been appended (and acknowledged) to the partition, each with
    /// the log offset of its record.
    pub fn apply(&mut self, writes: &[(i64, Write)]) {
        for (at, w) in writes {
            match w {
                Write::Offset { group, topic, partition, value } => {
                    self.apply_offset(group.clone(), topic.clone(), *partition, value.clone(), *at);
                }
                // Group state lives in the group itself; its records are only for reloading.
                Write::Group { .. } | Write::Consumer { .. } => {}
            }
        }
    }

    fn apply_offset(
        &mut self,
        group: String,
        topic: String,
        partition: i32,
        value: Option<OffsetValue>,
        record_offset: i64,
    ) {
        match value {
            Some(value) => {
                self.offsets.entry(group).or_default().insert((topic, partition), Committed { value, record_offset });
            }
            None => {
                self.txn.remove(&group, &topic, partition);
                if let Some(o) = self.offsets.get_mut(&group) {
                    o.remove(&(topic, partition));
                    if o.is_empty() {
                        self.offsets.remove(&group);
                    }
                }
            }
        }
    }

    pub fn group(&self, id: &str) -> Option<&ClassicGroup> {
        self.groups.get(id)
    }

    pub fn group_mut(&mut self, id: &str) -> Option<&mut ClassicGroup> {
        self.groups.get_mut(id)
    }

    /// The record that stores group `id` as it is now.
    pub fn group_write(&self, id: &str) -> Write {
        Write::Group { group: id.to_string(), value: self.groups.get(id).map(ClassicGroup::stored) }
    }

    /// JoinGroup, with the checks Kafka makes before it looks at the group.
    pub fn join(&mut self, group: &str, req: JoinRequest, ticket: Ticket, new_member_id: String, now: i64) -> Vec<Out> {
        let fail = |e: E| vec![Out::Join(ticket, JoinResponse::error(e, &req.member_id))];
        if group.is_empty() {
            return fail(E::InvalidGroupId);
        }
        if req.session_timeout_ms < self.cfg.min_session_timeout_ms
            || req.session_timeout_ms > self.cfg.max_session_timeout_ms
        {
            return fail(E::InvalidSessionTimeout);
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() {
            return fail(E::InconsistentGroupProtocol);
        }
        if let Some(c) = self.consumer.get(group) {
            // Members of both protocols in one group are not supported: an empty group changes
            // protocol, one with members refuses the classic member.
            if c.has_members() {
                return fail(E::InconsistentGroupProtocol);
            }
            let gone = consumer_writes(group, &c.stored(), &BTreeMap::new());
            self.pending.extend(gone);
            self.consumer.remove(group);
        }
        if !self.groups.contains_key(group) {
            if !req.member_id.is_empty() {
                return fail(E::UnknownMemberId);
            }
            self.groups.insert(group.to_string(), ClassicGroup::new(group, self.cfg, now));
        }
        match self.groups.get_mut(group) {
            Some(g) => g.join(req, ticket, new_member_id, now),
            None => fail(E::UnknownMemberId),
        }
    }

    pub fn sync(&mut self, group: &str, req: SyncRequest, ticket: Ticket, now: i64) -> Vec<Out> {
        match self.groups.get_mut(group) {
            Some(g) => {
                let out = g.sync(req, ticket, now);
                if let Some(duration_ms) = g.take_completed_rebalance(now) {
                    self.rebalances.push(Rebalance {
                        group: group.to_string(),
                        kind: RebalanceKind::Classic,
                        duration_ms,
                    });
                }
                out
            }
            None => vec![Out::Sync(ticket, crate::classic::SyncResponse::error(E::UnknownMemberId))],
        }
    }

    pub fn heartbeat(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Answer {
        match self.groups.get_mut(group) {
            Some(g) => g.heartbeat(member, instance, generation, now),
            None => Err(E::UnknownMemberId),
        }
    }

    /// LeaveGroup: each member's answer, or the group's error.
    pub fn leave(
        &mut self,
        group: &str,
        members: &[(String, Option<String>)],
        now: i64,
    ) -> Result<(Vec<Answer>, Vec<Out>), E> {
        match self.groups.get_mut(group) {
            None => Ok((vec![Err(E::UnknownMemberId); members.len()], Vec::new())),
            Some(g) => g.leave(members, now),
        }
    }

    /// Checks an OffsetCommit against the group (creating an Empty group for a commit without
    /// a generation, as `assign()` consumers and admin tools do).
    pub fn validate_commit(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
        api_version: i16,
        now: i64,
    ) -> Result<(), E> {
        if group.is_empty() {
            return Err(E::InvalidGroupId);
        }
        if let Some(c) = self.consumer.get(group) {
            return c.validate_commit(member, generation, api_version);
        }
        match self.groups.get_mut(group) {
            Some(g) => g.validate_commit(member, instance, generation, now),
            None if generation < 0 => {
                self.groups.insert(group.to_string(), ClassicGroup::new(group, self.cfg, now));
                Ok(())
            }
            None if api_version >= 9 => Err(E::GroupIdNotFound),
            None => Err(E::IllegalGeneration),
        }
    }

    /// Checks a TxnOffsetCommit against the group, as Kafka's `validateTransactionalOffsetCommit`:
    /// an OffsetCommit check in which a consumer protocol member may use any version and a
    /// stale member epoch is ILLEGAL_GENERATION (what transactional producers expect).
    pub fn validate_txn_commit(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Result<(), E> {
        const ANY_VERSION: i16 = 9;
        match self.validate_commit(group, member, instance, generation, ANY_VERSION, now) {
            Err(E::StaleMemberEpoch | E::GroupIdNotFound) => Err(E::IllegalGeneration),
            r => r,
        }
    }

    /// Whether `metadata` fits `offset.metadata.max.bytes`.
    pub fn metadata_fits(&self, metadata: &str) -> bool {
        metadata.len() <= self.offset_cfg.metadata_max_bytes
    }

    /// The committed offset of one partition.
    pub fn offset(&self, group: &str, topic: &str, partition: i32) -> Option<&OffsetValue> {
        self.offsets.get(group).and_then(|o| o.get(&(topic.to_string(), partition))).map(|c| &c.value)
    }

    /// The groups with committed offsets (a group that only commits, with `assign()`, has no
    /// group state but offsets).
    pub fn groups_with_offsets(&self) -> impl Iterator<Item = &str> {
        self.offsets.iter().filter(|(_, o)| !o.is_empty()).map(|(g, _)| g.as_str())
    }

    /// Every committed offset of a group, by topic and partition.
    pub fn offsets(&self, group: &str) -> impl Iterator<Item = (&(String, i32), &OffsetValue)> {
        self.offsets.get(group).into_iter().flatten().map(|(k, c)| (k, &c.value))
    }

    /// OffsetDelete: per partition, the error, and the tombstones to write. Offsets of topics
    /// the group's members are subscribed to cannot be deleted while it has members.
    pub fn delete_offsets(&self, group: &str, partitions: &[(String, i32)]) -> Result<(Vec<Answer>, Vec<Write>), E> {
        let subscribed: Vec<String> = if let Some(c) = self.consumer.get(group) {
            c.subscribed_topics()
        } else {
            self.classic_subscriptions(group)?
        };
        let mut errors = Vec::with_capacity(partitions.len());
        let mut writes = Vec::new();
        for (topic, p) in partitions {
            if subscribed.contains(topic) {
                errors.push(Err(E::GroupSubscribedToTopic));
                continue;
            }
            errors.push(Ok(()));
            if self.offset(group, topic, *p).is_some() {
                writes.push(Write::Offset { group: group.into(), topic: topic.clone(), partition: *p, value: None });
            }
        }
        Ok((errors, writes))
    }

    /// The topics the members of a classic group subscribe to (OffsetDelete's check).
    fn classic_subscriptions(&self, group: &str) -> Result<Vec<String>, E> {
        let g = self.groups.get(group).filter(|g| g.state() != GroupState::Dead).ok_or(E::GroupIdNotFound)?;
        Ok(if g.has_members() && g.protocol_type() == Some("consumer") {
            g.member_metadata().iter().filter_map(|m| subscribed_topics(m)).flatten().collect()
        } else if g.has_members() {
            return Err(E::NonEmptyGroup);
        } else {
            Vec::new()
        })
    }

    /// DeleteGroups for one group: the tombstones to write (offsets, then the group).
    pub fn delete_group(&self, group: &str) -> Result<Vec<Write>, E> {
        let mut stored = Vec::new();
        if let Some(c) = self.consumer.get(group) {
            if c.has_members() {
                return Err(E::NonEmptyGroup);
            }
            stored = consumer_writes(group, &c.stored(), &BTreeMap::new());
        } else {
            let g = self.groups.get(group).ok_or(E::GroupIdNotFound)?;
            match g.state() {
                GroupState::Dead => return Err(E::GroupIdNotFound),
                GroupState::Empty => {}
                _ => return Err(E::NonEmptyGroup),
            }
        }
        let mut writes: Vec<Write> = self
            .offsets(group)
            .map(|((t, p), _)| Write::Offset { group: group.into(), topic: t.clone(), partition: *p, value: None })
            .collect();
        if stored.is_empty() {
            writes.push(Write::Group { group: group.into(), value: None });
        }
        writes.extend(stored);
        Ok(writes)
    }

    /// Forgets a deleted group once its tombstones are written.
    pub fn remove_group(&mut self, group: &str, now: i64) -> Vec<Out> {
        let out = self.groups.get_mut(group).map(|g| g.mark_dead(now)).unwrap_or_default();
        self.groups.remove(group);
        self.consumer.remove(group);
        self.offsets.remove(group);
        out
    }

    pub fn list(&self) -> Vec<Listing> {
        let mut v: Vec<Listing> = self
            .groups
            .values()
            .filter(|g| g.state() != GroupState::Dead)
            .map(|g| Listing {
                group: g.id().to_string(),
                protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                state: g.state().name(),
                group_type: "classic",
            })
            .chain(self.consumer.values().map(|c| Listing {
                group: c.id().to_string(),
                protocol_type: "consumer".to_string(),
                state: c.state().name(),
                group_type: "consumer",
            }))
            .collect();
        v.sort_by(|a, b| a.group.cmp(&b.group));
        v
    }

    /// Group timers; see [`ClassicGroup::tick`] and [`ConsumerGroup::tick`]. Returns what to
    /// deliver, and the consumer group members removed (group, member, why).
    pub fn tick(&mut self, now: i64) -> (Vec<Out>, Vec<(String, Expired)>) {
        let mut out = Vec::new();
        for g in self.groups.values_mut() {
            if g.next_deadline().is_some_and(|d| d <= now) {
                out.extend(g.tick(now));
            }
        }
        let mut expired = Vec::new();
        for c in self.consumer.values_mut() {
            if c.next_deadline().is_some_and(|d| d <= now) {
                let before = c.stored();
                expired.extend(c.tick(&self.consumer_cfg, now).into_iter().map(|e| (c.id().to_string(), e)));
                self.pending.extend(consumer_writes(c.id(), &before, &c.stored()));
            }
        }
        (out, expired)
    }

    pub fn next_deadline(&self) -> Option<i64> {
        let classic = self.groups.values().filter_map(ClassicGroup::next_deadline);
        classic.chain(self.consumer.values().filter_map(ConsumerGroup::next_deadline)).min()
    }

    /// ConsumerGroupHeartbeat. A group that does not exist is created by a join; an empty
    /// classic group (committed offsets only) becomes a consumer group; a classic group with
    /// members refuses it.
    pub fn consumer_heartbeat(
        &mut self,
        group: &str,
        req: &HeartbeatRequest,
        catalog: &Catalog,
        now: i64,
    ) -> (HeartbeatResponse, Undo) {
        let undo = self.snapshot(group);
        if !self.consumer.contains_key(group) {
            if let Some(g) = self.groups.get(group)
                && g.state() != GroupState::Empty
                && g.state() != GroupState::Dead
            {
                let msg = format!("Group {group} is not a consumer group.");
                return (HeartbeatResponse::error(E::GroupIdNotFound, msg), undo);
            }
            if req.member_epoch != crate::consumer::JOIN_EPOCH {
                let msg = format!("Member {} is not a member of group {group}.", req.member_id);
                return (HeartbeatResponse::error(E::UnknownMemberId, msg), undo);
            }
            if self.groups.remove(group).is_some() {
                // The empty classic group's stored state goes; its offsets stay.
                self.pending.push(Write::Group { group: group.into(), value: None });
            }
            self.consumer.insert(group.to_string(), ConsumerGroup::new(group, &self.consumer_cfg, now));
        }
        let Some(c) = self.consumer.get_mut(group) else {
            return (HeartbeatResponse::error(E::UnknownServerError, "group vanished"), undo);
        };
        // Without a new group or target epoch a heartbeat changes only the group-level records
        // and those of its member (and of the static member it replaces): diff just those.
        let mut scope = vec![req.member_id.clone()];
        scope.extend(req.instance_id.as_deref().and_then(|i| c.instance_holder(i)).cloned());
        let epochs = (c.epoch(), c.target_epoch());
        let before = c.stored_for(&scope);
        let r = c.heartbeat(req, &self.consumer_cfg, catalog, now);
        if let Some(duration_ms) = c.take_completed_rebalance(now) {
            self.rebalances.push(Rebalance { group: group.to_string(), kind: RebalanceKind::Consumer, duration_ms });
        }
        let writes = if (c.epoch(), c.target_epoch()) == epochs {
            consumer_writes(group, &before, &c.stored_for(&scope))
        } else {
            let before = undo.consumer.as_ref().map(ConsumerGroup::stored).unwrap_or_default();
            consumer_writes(group, &before, &c.stored())
        };
        self.pending.extend(writes);
        (r, undo)
    }

    /// The records the last operations want written (consumer protocol group changes,
    /// tombstones of a group that changed protocol). The runtime appends them, then answers.
    pub fn take_writes(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.pending)
    }

    /// The rebalances completed since the last call (the broker counts them).
    pub fn take_rebalances(&mut self) -> Vec<Rebalance> {
        std::mem::take(&mut self.rebalances)
    }

    /// A copy of everything `group` is, to put back with [`Shard::undo`] if the records of a
    /// change cannot be written.
    pub fn snapshot(&self, group: &str) -> Undo {
        Undo {
            group: group.to_string(),
            classic: self.groups.get(group).cloned(),
            consumer: self.consumer.get(group).cloned(),
        }
    }

    /// Puts a group back as [`Shard::snapshot`] saw it and drops the unwritten records.
    pub fn undo(&mut self, u: Undo) {
        self.pending.clear();
        match u.classic {
            Some(g) => self.groups.insert(u.group.clone(), g),
            None => self.groups.remove(&u.group),
        };
        match u.consumer {
            Some(g) => self.consumer.insert(u.group, g),
            None => self.consumer.remove(&u.group),
        };
    }

    pub fn consumer_group(&self, id: &str) -> Option<&ConsumerGroup> {
        self.consumer.get(id)
    }

    /// OffsetFetch with a member id and epoch (v9+): a consumer group checks them.
    pub fn validate_fetch(&self, group: &str, member: Option<&str>, epoch: i32) -> Result<(), E> {
        // Other groups (and unknown ones: no offsets, no error) are not checked, as Kafka.
        self.consumer.get(group).map_or(Ok(()), |c| c.validate_fetch(member, epoch))
    }

    /// Offsets past `offsets.retention.minutes`: of an Empty group, counted from when it
    /// became empty (or from the commit, for groups that never had members); of a group with
    /// members, only for topics none of them subscribes to. Groups left Empty with no offsets
    /// are removed. Returns the tombstones to write; apply them with [`Shard::apply`] and
    /// [`Shard::remove_group`].
    pub fn expired(&self, now: i64) -> (Vec<Write>, Vec<String>) {
        let retention = self.offset_cfg.retention_ms;
        let mut writes = Vec::new();
        let mut groups_gone = Vec::new();
        for (id, g) in &self.groups {
            let offsets = self.offsets.get(id);
            let empty = g.state() == GroupState::Empty;
            // With members, subscriptions are only known when Stable (as Kafka): a rebalancing
            // group keeps every offset.
            if !empty && g.state() != GroupState::Stable {
                continue;
            }
            let subscribed: Vec<String> = if !empty && g.protocol_type() == Some("consumer") {
                g.member_metadata().iter().filter_map(|m| subscribed_topics(m)).flatten().collect()
            } else {
                Vec::new()
            };
            let mut left = 0;
            for ((t, p), Committed { value: v, .. }) in offsets.into_iter().flatten() {
                // An offset an open transaction is committing stays, as in Kafka.
                if self.txn.has_pending(id, t, *p) {
                    left += 1;
                    continue;
                }
                let base = if empty && g.protocol_type().is_some() {
                    g.state_since()
                } else if empty || (g.protocol_type() == Some("consumer") && !subscribed.contains(t)) {
                    v.commit_timestamp
                } else {
                    left += 1;
                    continue;
                };
                let expire_at = v.expire_timestamp.unwrap_or(base.saturating_add(retention));
                if now >= expire_at {
                    writes.push(Write::Offset { group: id.clone(), topic: t.clone(), partition: *p, value: None });
                } else {
                    left += 1;
                }
            }
            if empty && left == 0 && !self.txn.has_group(id) {
                writes.push(Write::Group { group: id.clone(), value: None });
                groups_gone.push(id.clone());
            }
        }
        for (id, c) in &self.consumer {
            let empty = !c.has_members();
            let subscribed = c.subscribed_topics();
            let mut left = 0;
            for ((t, p), Committed { value: v, .. }) in self.offsets.get(id).into_iter().flatten() {
                // As Kafka's consumer groups: counted from the commit, for an empty group or a
                // topic no member subscribes to.
                let base = if self.txn.has_pending(id, t, *p) {
                    left += 1;
                    continue;
                } else if empty || !subscribed.contains(t) {
                    v.commit_timestamp
                } else {
                    left += 1;
                    continue;
                };
                if now >= v.expire_timestamp.unwrap_or(base.saturating_add(retention)) {
                    writes.push(Write::Offset { group: id.clone(), topic: t.clone(), partition: *p, value: None });
                } else {
                    left += 1;
                }
            }
            if empty && left == 0 && !self.txn.has_group(id) {
                writes.extend(consumer_writes(id, &c.stored(), &BTreeMap::new()));
                groups_gone.push(id.clone());
            }
        }
        (writes, groups_gone)
    }
}

/// A group as it was before a change; see [`Shard::snapshot`].
#[derive(Debug, Clone)]
pub struct Undo {
    group: String,
    classic: Option<ClassicGroup>,
    consumer: Option<ConsumerGroup>,
}

/// The records that turn a consumer group's stored state `before` into `after`: changed
/// values, then tombstones (a member's current assignment, target and metadata, in that order,
/// as Kafka removes a member).
fn consumer_writes(
    group: &str,
    before: &BTreeMap<ConsumerKey, ConsumerValue>,
    after: &BTreeMap<ConsumerKey, ConsumerValue>,
) -> Vec<Write> {
    let mut out: Vec<Write> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| Write::Consumer { group: group.into(), record: k.clone(), value: Some(v.clone()) })
        .collect();
    out.extend(before.keys().rev().filter(|k| !after.contains_key(*k)).map(|k| Write::Consumer {
        group: group.into(),
        record: k.clone(),
        value: None,
    }));
    out
}

/// The `__consumer_offsets` partition that coordinates `group`: Kafka's
/// `Utils.abs(groupId.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    oxbow_protocol::schema::coordinator_partition(group, partitions)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "shard_tests.rs"]
mod tests;
