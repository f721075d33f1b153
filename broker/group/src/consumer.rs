//! One group under the consumer group protocol (KIP-848): ConsumerGroupHeartbeat, with the
//! assignment computed here by a server-side assignor and handed out incrementally.
//!
//! The group has an epoch, bumped whenever membership, a subscription or the subscribed topics'
//! metadata changes; each bump computes a new *target assignment*. Each member has its own epoch
//! and moves toward its target at its own pace, without a global barrier: partitions it must give
//! up are revoked first (it keeps its epoch until it acknowledges), partitions it gains are handed
//! over once their previous owner has released them. A member's epoch reaches the target epoch as
//! soon as nothing is left to revoke.
//!
//! Pure, like [`crate::classic`]: requests and the time in, answers out; the runtime supplies the
//! topic catalog and drives [`ConsumerGroup::tick`] for session and rebalance timeouts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::assignor::{Assignment, Assignor, TopicInfo};
use crate::error::GroupError as E;
use crate::records::{ConsumerKey, ConsumerValue, CurrentValue, MemberValue};

/// Member epoch of a request that joins (or rejoins) the group.
pub const JOIN_EPOCH: i32 = 0;
/// Member epoch of a request that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// Member epoch of a static member leaving temporarily: it keeps its assignment until its
/// session ends, so a restart within the session causes no rebalance.
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// The broker settings a consumer group follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// `group.consumer.session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`
    pub max_size: usize,
    /// `group.consumer.assignors`; the first is the default.
    pub assignors: Vec<Assignor>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![Assignor::Uniform, Assignor::Range],
        }
    }
}

/// The topics a group can subscribe to, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// The metadata image version it was built from: subscriptions are re-resolved only when
    /// it (or a subscription) changes.
    pub version: u64,
    pub topics: BTreeMap<String, TopicInfo>,
}

impl Catalog {
    pub fn name_of(&self, id: Uuid) -> Option<&str> {
        self.topics.iter().find(|(_, t)| t.id == id).map(|(n, _)| n.as_str())
    }
}

/// A ConsumerGroupHeartbeat, decoded. `None` fields are "unchanged since the last heartbeat".
#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now (`TopicPartitions`).
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

impl HeartbeatRequest {
    /// A request carrying every field (joins, and clients resending after an error): its
    /// answer always carries the assignment.
    fn is_full(&self) -> bool {
        self.rebalance_timeout_ms != -1
            && (self.subscribed_topic_names.is_some() || self.subscribed_topic_regex.is_some())
            && self.owned.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub error: Option<E>,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Present when the member's assignment changed, on joins and on full requests.
    pub assignment: Option<Assignment>,
}

impl HeartbeatResponse {
    pub fn error(error: E, message: impl Into<String>) -> Self {
        HeartbeatResponse {
            error: Some(error),
            message: Some(message.into()),
            member_id: None,
            member_epoch: 0,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }
}

/// Where a member is on its way to its target assignment (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// It has its target (or all of it that exists).
    Stable,
    /// It must give partitions up before it may move to the next epoch.
    UnrevokedPartitions,
    /// It is at the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

impl MemberState {
    /// Kafka's stored value (`MemberState`).
    fn code(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    fn from_code(code: i8) -> Self {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

/// The group's state as ConsumerGroupDescribe and ListGroups name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub subscribed_topic_regex: Option<String>,
    /// `subscribed_topic_regex`, compiled once.
    regex: Option<regex::Regex>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
    session_deadline: i64,
    /// Set while the member has partitions to revoke: it is fenced if it has not revoked them
    /// within its rebalance timeout.
    revocation_deadline: Option<i64>,
}

/// Why members left without asking (for the runtime's log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub member_id: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    id: String,
    epoch: i32,
    target_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    target: HashMap<String, Assignment>,
    /// Static members: instance id -> member id.
    instances: HashMap<String, String>,
    /// The subscribed topics' metadata the target was computed from; `None` after loading,
    /// until the first heartbeat resolves it (and compares it with `metadata_hash`).
    subscribed: Option<BTreeMap<String, TopicInfo>>,
    /// [`metadata_hash`] of `subscribed`, stored with the group epoch.
    metadata_hash: i64,
    /// The catalog version `subscribed` was resolved at.
    resolved_version: Option<u64>,
    assignor: Assignor,
    state_since: i64,
    /// When the rebalance under way started (the group epoch went up); it ends when every
    /// member has reconciled to the target (Stable).
    rebalance_started: Option<i64>,
}

impl ConsumerGroup {
    pub fn new(id: &str, cfg: &ConsumerConfig, now: i64) -> Self {
        ConsumerGroup {
            id: id.to_string(),
            epoch: 0,
            target_epoch: 0,
            members: BTreeMap::new(),
            target: HashMap::new(),
            instances: HashMap::new(),
            subscribed: Some(BTreeMap::new()),
            metadata_hash: metadata_hash(&BTreeMap::new()),
            resolved_version: None,
            rebalance_started: None,
            assignor: cfg.assignors.first().copied().unwrap_or(Assignor::Uniform),
            state_since: now,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn epoch(&self) -> i32 {
        self.epoch
    }
    pub fn target_epoch(&self) -> i32 {
        self.target_epoch
    }
    pub fn assignor(&self) -> Assignor {
        self.assignor
    }
    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }
    pub fn member(&self, id: &str) -> Option<&ConsumerMember> {
        self.members.get(id)
    }
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }
    /// When the group last became empty (or was created).
    pub fn state_since(&self) -> i64 {
        self.state_since
    }
    pub fn target_of(&self, member: &str) -> Option<&Assignment> {
        self.target.get(member)
    }

    /// Every topic some member subscribes to (by name or by regex), as last resolved.
    pub fn subscribed_topics(&self) -> Vec<String> {
        match &self.subscribed {
            Some(s) => s.keys().cloned().collect(),
            // Not resolved since loading: every name a member subscribes to.
            None => self.members.values().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect(),
        }
    }

    /// Every record that stores the group as it is now (Kafka's ConsumerGroup* records).
    pub fn stored(&self) -> BTreeMap<ConsumerKey, ConsumerValue> {
        let mut out = self.stored_group();
        for m in self.members.values() {
            self.stored_member(m, &mut out);
        }
        out
    }

    /// The group-level records and those of the named members (the part of [`Self::stored`] a
    /// heartbeat that moves no epoch can change).
    pub fn stored_for(&self, members: &[String]) -> BTreeMap<ConsumerKey, ConsumerValue> {
        let mut out = self.stored_group();
        for m in members.iter().filter_map(|id| self.members.get(id)) {
            self.stored_member(m, &mut out);
        }
        out
    }

    /// The member id holding a static instance id.
    pub fn instance_holder(&self, instance: &str) -> Option<&String> {
        self.instances.get(instance)
    }

    fn stored_group(&self) -> BTreeMap<ConsumerKey, ConsumerValue> {
        BTreeMap::from([
            (ConsumerKey::Metadata, ConsumerValue::Metadata { epoch: self.epoch, metadata_hash: self.metadata_hash }),
            (ConsumerKey::TargetMetadata, ConsumerValue::TargetMetadata { assignment_epoch: self.target_epoch }),
        ])
    }

    fn stored_member(&self, m: &ConsumerMember, out: &mut BTreeMap<ConsumerKey, ConsumerValue>) {
        {
            out.insert(
                ConsumerKey::Member(m.id.clone()),
                ConsumerValue::Member(MemberValue {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                    subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: m.server_assignor.clone(),
                }),
            );
            out.insert(
                ConsumerKey::CurrentAssignment(m.id.clone()),
                ConsumerValue::CurrentAssignment(CurrentValue {
                    member_epoch: m.epoch,
                    previous_member_epoch: m.previous_epoch,
                    state: m.state.code(),
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                }),
            );
            if let Some(t) = self.target.get(&m.id) {
                out.insert(ConsumerKey::TargetMember(m.id.clone()), ConsumerValue::TargetMember(t.clone()));
            }
        }
    }

    /// Rebuilds a group from its stored records (`None` without a group epoch record).
    /// Members get a fresh session from `now`; one with partitions to revoke, a fresh rebalance
    /// timeout.
    pub fn restore(
        id: &str,
        records: &BTreeMap<ConsumerKey, ConsumerValue>,
        cfg: &ConsumerConfig,
        now: i64,
    ) -> Option<Self> {
        let Some(ConsumerValue::Metadata { epoch, metadata_hash }) = records.get(&ConsumerKey::Metadata) else {
            return None;
        };
        let mut g = ConsumerGroup::new(id, cfg, now);
        g.epoch = *epoch;
        g.subscribed = None;
        g.metadata_hash = *metadata_hash;
        if let Some(ConsumerValue::TargetMetadata { assignment_epoch }) = records.get(&ConsumerKey::TargetMetadata) {
            g.target_epoch = *assignment_epoch;
        }
        let session = now.saturating_add(i64::from(cfg.session_timeout_ms));
        for (k, v) in records {
            match (k, v) {
                (ConsumerKey::Member(mid), ConsumerValue::Member(m)) => {
                    let current = match records.get(&ConsumerKey::CurrentAssignment(mid.clone())) {
                        Some(ConsumerValue::CurrentAssignment(c)) => c.clone(),
                        _ => CurrentValue::default(),
                    };
                    let state = MemberState::from_code(current.state);
                    if let Some(inst) = &m.instance_id {
                        g.instances.insert(inst.clone(), mid.clone());
                    }
                    g.members.insert(
                        mid.clone(),
                        ConsumerMember {
                            id: mid.clone(),
                            instance_id: m.instance_id.clone(),
                            rack_id: m.rack_id.clone(),
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                            subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                            regex: m.subscribed_topic_regex.as_deref().and_then(compile),
                            server_assignor: m.server_assignor.clone(),
                            rebalance_timeout_ms: m.rebalance_timeout_ms,
                            epoch: current.member_epoch,
                            previous_epoch: current.previous_member_epoch,
                            state,
                            assigned: current.assigned,
                            pending_revocation: current.pending_revocation,
                            session_deadline: session,
                            revocation_deadline: (state == MemberState::UnrevokedPartitions)
                                .then(|| now.saturating_add(i64::from(m.rebalance_timeout_ms.max(0)))),
                        },
                    );
                }
                (ConsumerKey::TargetMember(mid), ConsumerValue::TargetMember(a)) => {
                    g.target.insert(mid.clone(), a.clone());
                }
                _ => {}
            }
        }
        g.target.retain(|m, _| g.members.contains_key(m));
        g.assignor = g.preferred_assignor(cfg);
        Some(g)
    }

    /// How long the rebalance that has just made the group Stable took; once per rebalance.
    pub fn take_completed_rebalance(&mut self, now: i64) -> Option<i64> {
        if self.state() != ConsumerGroupState::Stable {
            return None;
        }
        self.rebalance_started.take().map(|started| now - started)
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.epoch > self.target_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| m.state != MemberState::Stable || m.epoch != self.target_epoch) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// One ConsumerGroupHeartbeat. `cfg` and `catalog` are the broker's settings and topics now.
    pub fn heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        cfg: &ConsumerConfig,
        catalog: &Catalog,
        now: i64,
    ) -> HeartbeatResponse {
        match req.member_epoch {
            LEAVE_EPOCH | LEAVE_STATIC_EPOCH => self.leave(req, cfg, now),
            _ => match self.join_or_heartbeat(req, cfg, catalog, now) {
                Ok(r) => r,
                Err((e, msg)) => HeartbeatResponse::error(e, msg),
            },
        }
    }

    fn leave(&mut self, req: &HeartbeatRequest, cfg: &ConsumerConfig, now: i64) -> HeartbeatResponse {
        let found = match &req.instance_id {
            Some(inst) => match self.instances.get(inst) {
                None => Err((E::UnknownMemberId, format!("Instance id {inst} is unknown."))),
                Some(m) if *m != req.member_id => Err((
                    E::FencedInstanceId,
                    format!("Static member {} with instance id {inst} was fenced by member {m}.", req.member_id),
                )),
                Some(m) => Ok(m.clone()),
            },
            None if self.members.contains_key(&req.member_id) => Ok(req.member_id.clone()),
            None => {
                Err((E::UnknownMemberId, format!("Member {} is not a member of group {}.", req.member_id, self.id)))
            }
        };
        let member = match found {
            Ok(m) => m,
            Err((e, msg)) => return HeartbeatResponse::error(e, msg),
        };
        if req.member_epoch == LEAVE_STATIC_EPOCH && req.instance_id.is_some() {
            // Temporarily gone: keeps its assignment and its place until the session ends.
            if let Some(m) = self.members.get_mut(&member) {
                m.previous_epoch = m.epoch;
                m.epoch = LEAVE_STATIC_EPOCH;
                // As Kafka: what it was revoking is released, what it owns it keeps.
                m.pending_revocation.clear();
                m.state = MemberState::Stable;
                m.revocation_deadline = None;
            }
        } else {
            self.remove(&member, cfg, now);
        }
        HeartbeatResponse {
            error: None,
            message: None,
            member_id: Some(req.member_id.clone()),
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }

    /// Removes a member (left, fenced or expired) and rebalances the rest.
    fn remove(&mut self, member: &str, cfg: &ConsumerConfig, now: i64) {
        let Some(m) = self.members.remove(member) else { return };
        if let Some(inst) = &m.instance_id
            && self.instances.get(inst).is_some_and(|x| x == member)
        {
            self.instances.remove(inst);
        }
        self.target.remove(member);
        self.epoch += 1;
        if self.members.is_empty() {
            self.state_since = now;
            self.rebalance_started = None;
        } else {
            self.rebalance_started.get_or_insert(now);
        }
        // What the others subscribe to can only shrink: resolve against what was subscribed.
        // Right after loading that is unknown: the next heartbeat computes the target.
        if let Some(known) = self.subscribed.clone() {
            self.refresh_subscriptions(&Catalog { version: 0, topics: known });
            self.compute_target(cfg);
        }
    }

    fn join_or_heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        cfg: &ConsumerConfig,
        catalog: &Catalog,
        now: i64,
    ) -> Result<HeartbeatResponse, (E, String)> {
        let joining = req.member_epoch == JOIN_EPOCH;
        let mut bump = false;
        let before: Option<Assignment>;
        if joining {
            before = None;
            bump |= self.admit(req, cfg)?;
        } else {
            self.check_member(req)?;
            before = self.members.get(&req.member_id).map(|m| m.assigned.clone());
        }
        let Some(m) = self.members.get_mut(&req.member_id) else {
            return Err((
                E::UnknownMemberId,
                format!("Member {} is not a member of group {}.", req.member_id, self.id),
            ));
        };
        // Subscription and member details.
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            if names != m.subscribed_topic_names {
                m.subscribed_topic_names = names;
                bump = true;
            }
        }
        if let Some(re) = &req.subscribed_topic_regex {
            let re = Some(re.clone()).filter(|r| !r.is_empty());
            if re != m.subscribed_topic_regex {
                m.regex = re.as_deref().and_then(compile);
                m.subscribed_topic_regex = re;
                bump = true;
            }
        }
        // The assignor a member asks for counts at the next target computation; as in Kafka,
        // changing it alone does not start one.
        if let Some(a) = &req.server_assignor {
            m.server_assignor = Some(a.clone());
        }
        if req.rebalance_timeout_ms != -1 {
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if req.rack_id.is_some() {
            m.rack_id = req.rack_id.clone();
        }
        m.client_id = req.client_id.clone();
        m.client_host = req.client_host.clone();
        m.session_deadline = now.saturating_add(i64::from(cfg.session_timeout_ms));
        // The subscribed topics' metadata: a new topic, more partitions or a deleted topic
        // changes the target as a subscription change does. Resolved again only when the
        // metadata image or a subscription changed.
        if bump || self.resolved_version != Some(catalog.version) {
            bump |= self.refresh_subscriptions(catalog);
            self.resolved_version = Some(catalog.version);
        }
        if bump {
            self.epoch += 1;
            self.rebalance_started.get_or_insert(now);
        }
        if self.epoch > self.target_epoch {
            self.compute_target(cfg);
        }
        self.reconcile(&req.member_id, req.owned.as_ref(), now);
        let m = self.members.get(&req.member_id).ok_or((E::UnknownServerError, String::new()))?;
        let changed = before.as_ref() != Some(&m.assigned);
        Ok(HeartbeatResponse {
            error: None,
            message: None,
            member_id: Some(m.id.clone()),
            member_epoch: m.epoch,
            heartbeat_interval_ms: heartbeat_interval(m.state, cfg.heartbeat_interval_ms),
            assignment: (joining || changed || req.is_full()).then(|| m.assigned.clone()),
        })
    }

    /// A join (member epoch 0): a new member, a member rejoining after it was fenced, or a
    /// static member replacing its previous incarnation. Returns whether the group epoch must
    /// move.
    fn admit(&mut self, req: &HeartbeatRequest, cfg: &ConsumerConfig) -> Result<bool, (E, String)> {
        if let Some(inst) = &req.instance_id
            && let Some(old_id) = self.instances.get(inst).cloned()
            && old_id != req.member_id
        {
            let old_epoch = self.members.get(&old_id).map_or(LEAVE_STATIC_EPOCH, |m| m.epoch);
            if old_epoch != LEAVE_STATIC_EPOCH {
                return Err((
                    E::UnreleasedInstanceId,
                    format!(
                        "Static member {} with instance id {inst} cannot join the group because the instance id is owned by {old_id} member.",
                        req.member_id
                    ),
                ));
            }
            // The replacement takes over the old incarnation's epoch and partitions: no rebalance.
            if let Some(mut m) = self.members.remove(&old_id) {
                m.id = req.member_id.clone();
                m.epoch = m.previous_epoch;
                m.client_id = req.client_id.clone();
                m.client_host = req.client_host.clone();
                if let Some(t) = self.target.remove(&old_id) {
                    self.target.insert(req.member_id.clone(), t);
                }
                self.members.insert(req.member_id.clone(), m);
            }
            self.instances.insert(inst.clone(), req.member_id.clone());
            return Ok(false);
        }
        if let Some(m) = self.members.get_mut(&req.member_id) {
            // Rejoining with the same id after it was fenced: it starts from nothing, and gets
            // its target partitions back as soon as nobody else holds them.
            m.epoch = JOIN_EPOCH;
            m.previous_epoch = JOIN_EPOCH;
            m.state = MemberState::Stable;
            m.assigned.clear();
            m.pending_revocation.clear();
            m.revocation_deadline = None;
            return Ok(false);
        }
        if self.members.len() >= cfg.max_size {
            return Err((
                E::GroupMaxSizeReached,
                format!("The consumer group has reached its maximum capacity of {} members.", cfg.max_size),
            ));
        }
        if let Some(inst) = &req.instance_id {
            self.instances.insert(inst.clone(), req.member_id.clone());
        }
        self.members.insert(
            req.member_id.clone(),
            ConsumerMember {
                id: req.member_id.clone(),
                instance_id: req.instance_id.clone(),
                rack_id: None,
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                subscribed_topic_names: BTreeSet::new(),
                subscribed_topic_regex: None,
                regex: None,
                server_assignor: None,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                epoch: JOIN_EPOCH,
                previous_epoch: JOIN_EPOCH,
                state: MemberState::Stable,
                assigned: Assignment::new(),
                pending_revocation: Assignment::new(),
                session_deadline: i64::MAX,
                revocation_deadline: None,
            },
        );
        Ok(true)
    }

    /// A heartbeat of a member that already joined: known id, owned instance id, valid epoch.
    fn check_member(&self, req: &HeartbeatRequest) -> Result<(), (E, String)> {
        if let Some(inst) = &req.instance_id {
            match self.instances.get(inst) {
                None => return Err((E::UnknownMemberId, format!("Instance id {inst} is unknown."))),
                Some(m) if *m != req.member_id => {
                    return Err((
                        E::FencedInstanceId,
                        format!("Static member {} with instance id {inst} was fenced by member {m}.", req.member_id),
                    ));
                }
                Some(_) => {}
            }
        }
        let Some(m) = self.members.get(&req.member_id) else {
            return Err((
                E::UnknownMemberId,
                format!("Member {} is not a member of group {}.", req.member_id, self.id),
            ));
        };
        let got = req.member_epoch;
        if got > m.epoch {
            return Err((
                E::FencedMemberEpoch,
                format!(
                    "The consumer group member has a greater member epoch ({got}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                    m.epoch
                ),
            ));
        }
        if got < m.epoch {
            // The answer that moved it to the current epoch may have been lost: the previous
            // epoch is accepted while what it owns is part of its assignment.
            let subset = req.owned.as_ref().is_some_and(|o| is_subset(o, &m.assigned));
            if got != m.previous_epoch || !subset {
                return Err((
                    E::FencedMemberEpoch,
                    format!(
                        "The consumer group member has a smaller member epoch ({got}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                        m.epoch
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Re-resolves every member's subscription against the catalog; true if the subscribed
    /// topics or their partition counts changed.
    fn refresh_subscriptions(&mut self, catalog: &Catalog) -> bool {
        let mut now: BTreeMap<String, TopicInfo> = BTreeMap::new();
        for m in self.members.values() {
            for (name, t) in resolve(m, catalog) {
                now.insert(name, t);
            }
        }
        let hash = metadata_hash(&now);
        let changed = match &self.subscribed {
            // First resolution since loading: compare with what the stored target saw.
            None => hash != self.metadata_hash,
            Some(s) => *s != now,
        };
        self.subscribed = Some(now);
        self.metadata_hash = hash;
        changed
    }

    /// The target assignment for the current group epoch.
    fn compute_target(&mut self, cfg: &ConsumerConfig) {
        self.assignor = self.preferred_assignor(cfg);
        let topics = self.subscribed.clone().unwrap_or_default();
        let catalog = Catalog { version: 0, topics };
        let subs: BTreeMap<String, BTreeSet<String>> =
            self.members.values().map(|m| (m.id.clone(), resolve(m, &catalog).into_keys().collect())).collect();
        self.target = self.assignor.assign(&subs, &catalog.topics, &self.target);
        self.target_epoch = self.epoch;
    }

    /// The assignor most members ask for (ties: the configured order), else the default.
    fn preferred_assignor(&self, cfg: &ConsumerConfig) -> Assignor {
        let mut votes: HashMap<Assignor, usize> = HashMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref().and_then(Assignor::from_name)
                && cfg.assignors.contains(&a)
            {
                *votes.entry(a).or_default() += 1;
            }
        }
        let best = votes.values().copied().max().unwrap_or(0);
        cfg.assignors
            .iter()
            .copied()
            .find(|a| best > 0 && votes.get(a) == Some(&best))
            .or_else(|| cfg.assignors.first().copied())
            .unwrap_or(Assignor::Uniform)
    }

    /// Moves one member toward its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, member: &str, owned: Option<&Assignment>, now: i64) {
        let target_epoch = self.target_epoch;
        let owns_any = |revoke: &Assignment| match owned {
            None => true,
            Some(o) => revoke.iter().any(|(t, ps)| o.get(t).is_some_and(|x| !x.is_disjoint(ps))),
        };
        match self.members.get(member) {
            None => return,
            Some(m) if m.state == MemberState::Stable && m.epoch == target_epoch => return,
            Some(m) if m.state == MemberState::UnrevokedPartitions && owns_any(&m.pending_revocation) => return,
            Some(_) => {}
        }
        let target = self.target.get(member).cloned().unwrap_or_default();
        // Partitions held (assigned or still being revoked) by the other members.
        let held: BTreeSet<(Uuid, i32)> = self
            .members
            .values()
            .filter(|m| m.id != member)
            .flat_map(|m| m.assigned.iter().chain(m.pending_revocation.iter()))
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .collect();
        let Some(m) = self.members.get_mut(member) else { return };
        let mut assigned = Assignment::new();
        let mut revoke = Assignment::new();
        let mut unreleased = false;
        let topics: BTreeSet<Uuid> = target.keys().chain(m.assigned.keys()).copied().collect();
        for t in topics {
            let want = target.get(&t).cloned().unwrap_or_default();
            let have = m.assigned.get(&t).cloned().unwrap_or_default();
            let keep: BTreeSet<i32> = have.intersection(&want).copied().collect();
            let gone: BTreeSet<i32> = have.difference(&keep).copied().collect();
            let mut gain: BTreeSet<i32> = want.difference(&keep).copied().collect();
            let before = gain.len();
            gain.retain(|p| !held.contains(&(t, *p)));
            unreleased |= gain.len() != before;
            let mut now_assigned = keep;
            if !gone.is_empty() {
                revoke.insert(t, gone);
            }
            // Gains are held back while anything is still to be revoked.
            now_assigned.extend(gain.iter().copied());
            if !now_assigned.is_empty() {
                assigned.insert(t, now_assigned);
            }
        }
        if !revoke.is_empty() && owns_any(&revoke) {
            // Revoke first, at the current epoch; nothing new until the member has let go.
            let kept: Assignment = assigned
                .iter()
                .filter_map(|(t, ps)| {
                    let had = m.assigned.get(t)?;
                    let k: BTreeSet<i32> = ps.intersection(had).copied().collect();
                    (!k.is_empty()).then_some((*t, k))
                })
                .collect();
            m.assigned = kept;
            m.pending_revocation = revoke;
            // Each new revocation gets the whole rebalance timeout (Kafka reschedules it).
            m.revocation_deadline = Some(now.saturating_add(i64::from(m.rebalance_timeout_ms.max(0))));
            m.previous_epoch = m.epoch;
            m.state = MemberState::UnrevokedPartitions;
            return;
        }
        if m.epoch != target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = target_epoch;
        }
        m.assigned = assigned;
        m.pending_revocation.clear();
        m.revocation_deadline = None;
        m.state = if unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
    }

    /// Session and revocation timeouts; returns the members removed.
    pub fn tick(&mut self, cfg: &ConsumerConfig, now: i64) -> Vec<Expired> {
        let mut gone = Vec::new();
        for m in self.members.values() {
            if m.session_deadline <= now {
                gone.push(Expired { member_id: m.id.clone(), reason: "session timeout" });
            } else if m.revocation_deadline.is_some_and(|d| d <= now) {
                gone.push(Expired {
                    member_id: m.id.clone(),
                    reason: "partitions not revoked within the rebalance timeout",
                });
            }
        }
        for e in &gone {
            self.remove(&e.member_id, cfg, now);
        }
        gone
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.members.values().flat_map(|m| [Some(m.session_deadline), m.revocation_deadline]).flatten().min()
    }

    /// OffsetCommit against this group: admin commits (negative epoch) only while it is
    /// empty; members commit with their current epoch, through OffsetCommit v9+.
    pub fn validate_commit(&self, member: &str, epoch: i32, api_version: i16) -> Result<(), E> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member).ok_or(E::UnknownMemberId)?;
        if api_version < 9 {
            return Err(E::UnsupportedVersion);
        }
        if epoch != m.epoch {
            return Err(E::StaleMemberEpoch);
        }
        Ok(())
    }

    /// OffsetFetch (v9+) names a member and its epoch; only a request with neither (admins,
    /// classic consumers: no member id, epoch -1) is not checked, as in Kafka.
    pub fn validate_fetch(&self, member: Option<&str>, epoch: i32) -> Result<(), E> {
        if member.is_none() && epoch < 0 {
            return Ok(());
        }
        let m = member.and_then(|id| self.members.get(id)).ok_or(E::UnknownMemberId)?;
        if epoch != m.epoch {
            return Err(E::StaleMemberEpoch);
        }
        Ok(())
    }
}

/// The heartbeat interval a member is given. A member waiting for partitions another member
/// still holds (UNRELEASED_PARTITIONS) is asked back after a tenth of the interval (at least
/// [`HANDOFF_INTERVAL_MIN_MS`]): the holder acknowledges its revocation at once, so the
/// partitions are usually free by then, and a scale-up completes in about one interval instead
/// of two. Clients take the interval from every answer (Kafka gives the configured one always).
fn heartbeat_interval(state: MemberState, interval: i32) -> i32 {
    match state {
        MemberState::UnreleasedPartitions => (interval / 10).max(HANDOFF_INTERVAL_MIN_MS).min(interval),
        _ => interval,
    }
}

/// The shortest heartbeat interval given to a member waiting for released partitions.
pub const HANDOFF_INTERVAL_MIN_MS: i32 = 50;

/// A member's subscribed topics that exist: by name, and by regex. A regex is matched against
/// every topic, internal ones included, as Kafka 4.x's coordinator resolves it
/// (`GroupMetadataManager.refreshRegularExpressions` scans every topic of the image).
fn resolve(m: &ConsumerMember, catalog: &Catalog) -> BTreeMap<String, TopicInfo> {
    let mut out = BTreeMap::new();
    for n in &m.subscribed_topic_names {
        if let Some(t) = catalog.topics.get(n) {
            out.insert(n.clone(), *t);
        }
    }
    if let Some(re) = &m.regex {
        for (n, t) in &catalog.topics {
            if re.is_match(n) {
                out.insert(n.clone(), *t);
            }
        }
    }
    out
}

/// The longest subscription regex accepted (Kafka has no limit; this bounds compile work).
pub const REGEX_MAX_LEN: usize = 4096;

/// A subscription regex, anchored as Java's `Pattern.matches` (RE2J) applies it, with bounded
/// compiled size.
pub fn compile(re: &str) -> Option<regex::Regex> {
    if re.len() > REGEX_MAX_LEN {
        return None;
    }
    regex::RegexBuilder::new(&format!("^(?:{re})$")).size_limit(1 << 20).dfa_size_limit(1 << 20).build().ok()
}

/// A fingerprint of the subscribed topics' metadata (names, ids, partition counts), stored with
/// the group epoch so a new coordinator can tell whether topics changed while none ran
/// (FNV-1a; Kafka 4.1 stores its own hash in the same tagged field).
pub fn metadata_hash(topics: &BTreeMap<String, TopicInfo>) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (name, t) in topics {
        eat(name.as_bytes());
        eat(&[0]);
        eat(t.id.as_bytes());
        eat(&t.partitions.to_be_bytes());
    }
    h as i64
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter().all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|x| ps.is_subset(x)))
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
