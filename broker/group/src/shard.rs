//! Everything one partition of `__consumer_offsets` coordinates: its groups and their committed
//! offsets. Rebuilt by replaying the partition's records when this broker becomes its leader;
//! changed by requests, each change returned as [`Write`]s that the runtime appends to the
//! partition before it acknowledges (and then applies with [`Shard::apply`]).

use std::collections::{BTreeMap, HashMap};

use crate::error::GroupError as E;

use crate::classic::{ClassicGroup, GroupConfig, GroupState, JoinRequest, JoinResponse, Out, SyncRequest, Ticket};
use crate::consumer::{Catalog, ConsumerConfig, ConsumerGroup, Expired, HeartbeatRequest, HeartbeatResponse};
use crate::records::{GroupValue, Key, OffsetValue, RecordError, subscribed_topics};

/// One record to append to the shard's partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupValue> },
}

impl Write {
    pub fn key(&self) -> Key {
        match self {
            Write::Offset { group, topic, partition, .. } => {
                Key::Offset { group: group.clone(), topic: topic.clone(), partition: *partition }
            }
            Write::Group { group, .. } => Key::Group { group: group.clone() },
        }
    }

    /// The record value; `None` is a tombstone.
    pub fn value(&self) -> Option<bytes::Bytes> {
        match self {
            Write::Offset { value, .. } => value.as_ref().map(OffsetValue::encode),
            Write::Group { value, .. } => value.as_ref().map(GroupValue::encode),
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

#[derive(Debug, Default)]
pub struct Shard {
    groups: HashMap<String, ClassicGroup>,
    /// Groups of the consumer group protocol (KIP-848). A group id is in at most one of the
    /// two maps: an empty group changes protocol when a member of the other one joins.
    consumer: HashMap<String, ConsumerGroup>,
    offsets: HashMap<String, BTreeMap<(String, i32), OffsetValue>>,
    /// Stored group values seen while loading, turned into groups by [`Shard::finish_load`].
    loading: HashMap<String, Option<GroupValue>>,
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

    /// Replays one record of the partition (loading). Records this coordinator does not use
    /// are skipped; a malformed one is an error the caller logs and skips.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordError> {
        let Some(key) = Key::decode(key)? else { return Ok(()) };
        match key {
            Key::Offset { group, topic, partition } => {
                let value = value.map(OffsetValue::decode).transpose()?;
                self.apply_offset(group, topic, partition, value);
            }
            Key::Group { group } => {
                let value = value.map(GroupValue::decode).transpose()?;
                self.loading.insert(group, value);
            }
        }
        Ok(())
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
        for id in self.offsets.keys() {
            if !self.groups.contains_key(id) {
                self.groups.insert(id.clone(), ClassicGroup::new(id, self.cfg, now));
            }
        }
    }

    /// Applies writes that have been appended (and acknowledged) to the partition.
    pub fn apply(&mut self, writes: &[Write]) {
        for w in writes {
            match w {
                Write::Offset { group, topic, partition, value } => {
                    self.apply_offset(group.clone(), topic.clone(), *partition, value.clone());
                }
                // Group state lives in the group itself; its record is only for reloading.
                Write::Group { .. } => {}
            }
        }
    }

    fn apply_offset(&mut self, group: String, topic: String, partition: i32, value: Option<OffsetValue>) {
        match value {
            Some(v) => {
                self.offsets.entry(group).or_default().insert((topic, partition), v);
            }
            None => {
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
            Some(g) => g.sync(req, ticket, now),
            None => vec![Out::Sync(ticket, crate::classic::SyncResponse::error(E::UnknownMemberId))],
        }
    }

    pub fn heartbeat(&mut self, group: &str, member: &str, instance: Option<&str>, generation: i32, now: i64) -> E {
        match self.groups.get_mut(group) {
            Some(g) => g.heartbeat(member, instance, generation, now),
            None => E::UnknownMemberId,
        }
    }

    /// LeaveGroup: the top-level error and each member's.
    pub fn leave(&mut self, group: &str, members: &[(String, Option<String>)], now: i64) -> (E, Vec<E>, Vec<Out>) {
        match self.groups.get_mut(group) {
            None => (E::None, vec![E::UnknownMemberId; members.len()], Vec::new()),
            Some(g) => match g.leave(members, now) {
                Ok((errors, out)) => (E::None, errors, out),
                Err(e) => (e, Vec::new(), Vec::new()),
            },
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

    /// Whether `metadata` fits `offset.metadata.max.bytes`.
    pub fn metadata_fits(&self, metadata: &str) -> bool {
        metadata.len() <= self.offset_cfg.metadata_max_bytes
    }

    /// The committed offset of one partition.
    pub fn offset(&self, group: &str, topic: &str, partition: i32) -> Option<&OffsetValue> {
        self.offsets.get(group).and_then(|o| o.get(&(topic.to_string(), partition)))
    }

    /// Every committed offset of a group, by topic and partition.
    pub fn offsets(&self, group: &str) -> impl Iterator<Item = (&(String, i32), &OffsetValue)> {
        self.offsets.get(group).into_iter().flatten()
    }

    /// OffsetDelete: per partition, the error, and the tombstones to write. Offsets of topics
    /// the group's members are subscribed to cannot be deleted while it has members.
    pub fn delete_offsets(&self, group: &str, partitions: &[(String, i32)]) -> Result<(Vec<E>, Vec<Write>), E> {
        let subscribed: Vec<String> = if let Some(c) = self.consumer.get(group) {
            c.subscribed_topics().map(str::to_string).collect()
        } else {
            self.classic_subscriptions(group)?
        };
        let mut errors = Vec::with_capacity(partitions.len());
        let mut writes = Vec::new();
        for (topic, p) in partitions {
            if subscribed.contains(topic) {
                errors.push(E::GroupSubscribedToTopic);
                continue;
            }
            errors.push(E::None);
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
        if let Some(c) = self.consumer.get(group) {
            if c.has_members() {
                return Err(E::NonEmptyGroup);
            }
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
        writes.push(Write::Group { group: group.into(), value: None });
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
                expired.extend(c.tick(&self.consumer_cfg, now).into_iter().map(|e| (c.id().to_string(), e)));
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
    ) -> HeartbeatResponse {
        if !self.consumer.contains_key(group) {
            if let Some(g) = self.groups.get(group)
                && g.state() != GroupState::Empty
                && g.state() != GroupState::Dead
            {
                return HeartbeatResponse::error(E::GroupIdNotFound, format!("Group {group} is not a consumer group."));
            }
            if req.member_epoch != crate::consumer::JOIN_EPOCH {
                return HeartbeatResponse::error(
                    E::UnknownMemberId,
                    format!("Member {} is not a member of group {group}.", req.member_id),
                );
            }
            self.groups.remove(group);
            self.consumer.insert(group.to_string(), ConsumerGroup::new(group, &self.consumer_cfg, now));
        }
        match self.consumer.get_mut(group) {
            Some(c) => c.heartbeat(req, &self.consumer_cfg, catalog, now),
            None => HeartbeatResponse::error(E::UnknownServerError, "group vanished"),
        }
    }

    pub fn consumer_group(&self, id: &str) -> Option<&ConsumerGroup> {
        self.consumer.get(id)
    }

    /// OffsetFetch with a member id and epoch (v9+): a consumer group checks them.
    pub fn validate_fetch(&self, group: &str, member: &str, epoch: i32) -> Result<(), E> {
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
            for ((t, p), v) in offsets.into_iter().flatten() {
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
            if empty && left == 0 {
                writes.push(Write::Group { group: id.clone(), value: None });
                groups_gone.push(id.clone());
            }
        }
        for (id, c) in &self.consumer {
            let empty = !c.has_members();
            let subscribed: Vec<&str> = c.subscribed_topics().collect();
            let mut left = 0;
            for ((t, p), v) in self.offsets.get(id).into_iter().flatten() {
                let base = if empty {
                    c.state_since()
                } else if !subscribed.contains(&t.as_str()) {
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
            if empty && left == 0 {
                groups_gone.push(id.clone());
            }
        }
        (writes, groups_gone)
    }
}

/// The `__consumer_offsets` partition that coordinates `group`: Kafka's
/// `Utils.abs(groupId.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_partition_matches_java() {
        // From Java: String.hashCode, Kafka's Utils.abs, % 50 and % 7.
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(partition_for("g", 50), 3);
        assert_eq!(partition_for("é-group", 7), 3);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's abs maps it to 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
    }

    #[test]
    fn replay_and_expiry() {
        let mut s = Shard::new(GroupConfig::default(), OffsetConfig { retention_ms: 1000, metadata_max_bytes: 10 });
        let v = OffsetValue {
            offset: 5,
            leader_epoch: 0,
            metadata: String::new(),
            commit_timestamp: 100,
            expire_timestamp: None,
        };
        let k = Key::Offset { group: "g".into(), topic: "t".into(), partition: 0 }.encode();
        s.replay(&k, Some(&v.encode())).unwrap();
        s.replay(&Key::Offset { group: "g".into(), topic: "t".into(), partition: 1 }.encode(), Some(&v.encode()))
            .unwrap();
        s.replay(&Key::Offset { group: "g".into(), topic: "t".into(), partition: 1 }.encode(), None).unwrap();
        s.finish_load(50);
        assert_eq!(s.offset("g", "t", 0).map(|o| o.offset), Some(5));
        assert!(s.offset("g", "t", 1).is_none());
        assert_eq!(s.group("g").map(ClassicGroup::state), Some(GroupState::Empty));
        // No protocol type (assign-mode commits): retention counts from the commit.
        assert!(s.expired(1099).0.is_empty());
        let (w, gone) = s.expired(1100);
        assert_eq!(w.len(), 2);
        assert_eq!(gone, vec!["g".to_string()]);
        s.apply(&w);
        s.remove_group("g", 1100);
        assert!(s.list().is_empty());
        assert!(!s.metadata_fits("01234567890"));
    }
}
