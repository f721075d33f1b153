//! One consumer group under the classic rebalance protocol (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup), as Apache Kafka's group coordinator runs it: states Empty, PreparingRebalance,
//! CompletingRebalance, Stable and Dead; generations; KIP-394 member ids on first join; KIP-345
//! static members; the initial rebalance delay; pending syncs.
//!
//! Pure: every method takes the current time and returns what the runtime must do ([`Out`]):
//! answer a parked JoinGroup or SyncGroup, or store the group and then answer. Long-polled
//! requests are parked as [`Ticket`]s the runtime maps to its channels.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{Answer, GroupError as E};
use bytes::Bytes;

use crate::records::{GroupValue, StoredMember};

/// How long a new member's JoinGroup may stay parked before it is dropped (Kafka's
/// `NewMemberJoinTimeoutMs`): a client that gave up and retried must not leave a defunct member.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// The broker settings a group follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's tools show and ListGroups filters on.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A parked request, answered later through an [`Out`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// Empty on a member's first join.
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394).
    pub require_known_member: bool,
    /// JoinGroup v9+: a static leader rejoining a stable group may skip the assignment.
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: Option<E>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Every member with its metadata for the chosen protocol: for the leader only.
    pub members: Vec<JoinedMember>,
}

impl JoinResponse {
    pub fn error(error: E, member_id: &str) -> Self {
        JoinResponse {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
    /// SyncGroup v5+.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// From the leader: each member's assignment.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResponse {
    pub error: Option<E>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub fn error(error: E) -> Self {
        SyncResponse { error: Some(error), protocol_type: None, protocol_name: None, assignment: Bytes::new() }
    }
}

/// What the runtime must do after an event, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Join(Ticket, JoinResponse),
    Sync(Ticket, SyncResponse),
    /// Store the group as it is now (its [`ClassicGroup::stored`] value), then deliver `then`.
    /// If the write fails, answer `then`'s tickets with the write's error instead and call
    /// [`ClassicGroup::store_failed`].
    Store {
        group: String,
        generation: i32,
        then: Vec<Out>,
    },
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSummary {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Metadata for the chosen protocol and the assignment: only in the Stable state.
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    join: Option<Ticket>,
    sync: Option<Ticket>,
    last_heartbeat: i64,
    is_new: bool,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// When this member is dropped for silence, if nothing it sent is parked.
    fn expires_at(&self) -> Option<i64> {
        if self.join.is_some() {
            return self.is_new.then_some(self.last_heartbeat + NEW_MEMBER_JOIN_TIMEOUT_MS);
        }
        if self.sync.is_some() {
            return None;
        }
        Some(self.last_heartbeat + i64::from(self.session_timeout_ms))
    }
}

/// The initial rebalance delay of a group leaving Empty (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    remaining: i64,
}

#[derive(Debug, Clone)]
pub struct ClassicGroup {
    id: String,
    cfg: GroupConfig,
    state: GroupState,
    state_since: i64,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// group.instance.id -> member id of static members.
    instances: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pending: HashMap<String, i64>,
    /// Members that have not sent SyncGroup for the current generation.
    pending_sync: HashSet<String>,
    join_deadline: Option<i64>,
    initial: Option<InitialDelay>,
    new_member_added: bool,
    sync_deadline: Option<i64>,
    /// When the rebalance under way started (PreparingRebalance from Stable, CompletingRebalance
    /// or Empty); it ends when the leader's assignment makes the group Stable.
    rebalance_started: Option<i64>,
}

impl ClassicGroup {
    pub fn new(id: &str, cfg: GroupConfig, now: i64) -> Self {
        ClassicGroup {
            id: id.to_string(),
            cfg,
            state: GroupState::Empty,
            state_since: now,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            instances: HashMap::new(),
            pending: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline: None,
            initial: None,
            new_member_added: false,
            sync_deadline: None,
            rebalance_started: None,
        }
    }

    /// A group as loaded from `__consumer_offsets`: Stable if it has members (they must
    /// heartbeat within their session timeout from `now`), else Empty.
    pub fn from_stored(id: &str, v: &GroupValue, cfg: GroupConfig, now: i64) -> Self {
        let mut g = ClassicGroup::new(id, cfg, now);
        g.generation = v.generation;
        g.protocol_type = (!v.protocol_type.is_empty()).then(|| v.protocol_type.clone());
        g.protocol = v.protocol.clone();
        g.state_since = if v.current_state_timestamp > 0 { v.current_state_timestamp } else { now };
        for m in &v.members {
            let protocols = match &v.protocol {
                Some(p) => vec![(p.clone(), m.subscription.clone())],
                None => Vec::new(),
            };
            if let Some(i) = &m.instance_id {
                g.instances.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols,
                    assignment: m.assignment.clone(),
                    join: None,
                    sync: None,
                    last_heartbeat: now,
                    is_new: false,
                },
            );
        }
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
            g.leader = v.leader.clone().filter(|l| g.members.contains_key(l));
            if g.leader.is_none() {
                g.leader = g.members.keys().next().cloned();
            }
        }
        g
    }

    /// The group as stored in `__consumer_offsets`.
    pub fn stored(&self) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: self.state_since,
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn state(&self) -> GroupState {
        self.state
    }
    /// When the group entered its current state (ms).
    pub fn state_since(&self) -> i64 {
        self.state_since
    }
    pub fn generation(&self) -> i32 {
        self.generation
    }
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }
    pub fn member_ids(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// Members for DescribeGroups (metadata and assignment only when Stable, as Kafka shows).
    pub fn describe(&self) -> Vec<MemberSummary> {
        let stable = self.state == GroupState::Stable;
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| MemberSummary {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable { m.metadata(&protocol) } else { Bytes::new() },
                assignment: if stable { m.assignment.clone() } else { Bytes::new() },
            })
            .collect()
    }

    /// The metadata each member sent for the chosen protocol (for subscriptions).
    pub fn member_metadata(&self) -> Vec<Bytes> {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members.values().map(|m| m.metadata(&protocol)).collect()
    }

    /// Marks the group deleted; parked requests are answered so clients rediscover.
    pub fn mark_dead(&mut self, now: i64) -> Vec<Out> {
        let mut out = Vec::new();
        for m in self.members.values_mut() {
            if let Some(t) = m.join.take() {
                out.push(Out::Join(t, JoinResponse::error(E::CoordinatorNotAvailable, &m.id)));
            }
            if let Some(t) = m.sync.take() {
                out.push(Out::Sync(t, SyncResponse::error(E::CoordinatorNotAvailable)));
            }
        }
        self.set_state(GroupState::Dead, now);
        out
    }

    /// Answers every parked request with `error` (the coordinator is moving away).
    pub fn abandon(&mut self, error: E) -> Vec<Out> {
        let mut out = Vec::new();
        for m in self.members.values_mut() {
            if let Some(t) = m.join.take() {
                out.push(Out::Join(t, JoinResponse::error(error, &m.id)));
            }
            if let Some(t) = m.sync.take() {
                out.push(Out::Sync(t, SyncResponse::error(error)));
            }
        }
        out
    }

    fn set_state(&mut self, s: GroupState, now: i64) {
        self.state = s;
        self.state_since = now;
    }

    /// Whether a member with these protocols can join.
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == name)))
    }

    fn accepts(&self, member_id: &str) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members.get(member_id).is_some_and(|m| m.join.is_some())
                    || self.members.values().filter(|m| m.join.is_some()).count() < self.cfg.max_size
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < self.cfg.max_size
            }
        }
    }

    /// Kafka's `validateCurrentMember`: the instance id (if any) must map to `member_id`, and
    /// the member must exist.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), E> {
        if let Some(i) = instance_id {
            return match self.instances.get(i) {
                Some(current) if current != member_id => Err(E::FencedInstanceId),
                Some(_) => Ok(()),
                None => Err(E::UnknownMemberId),
            };
        }
        if self.members.contains_key(member_id) { Ok(()) } else { Err(E::UnknownMemberId) }
    }

    fn rebalance_timeout(&self) -> i64 {
        self.members.values().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0)
    }

    /// JoinGroup. `new_member_id` is the id this member gets if it has none yet.
    pub fn join(&mut self, req: JoinRequest, ticket: Ticket, new_member_id: String, now: i64) -> Vec<Out> {
        let mut out = Vec::new();
        let fail = |e: E, id: &str| vec![Out::Join(ticket, JoinResponse::error(e, id))];
        if self.state == GroupState::Dead {
            return fail(E::CoordinatorNotAvailable, &req.member_id);
        }
        if !self.supports(&req.protocol_type, &req.protocols) {
            return fail(E::InconsistentGroupProtocol, &req.member_id);
        }
        if !self.accepts(&req.member_id) && !self.pending.contains_key(&req.member_id) {
            return fail(E::GroupMaxSizeReached, &req.member_id);
        }
        if req.member_id.is_empty() {
            let id = new_member_id;
            match req.instance_id.clone().and_then(|i| self.instances.get(&i).cloned()) {
                Some(old) => self.replace_static(&old, id, req, ticket, now, &mut out),
                None if req.instance_id.is_none() && req.require_known_member => {
                    self.pending.insert(id.clone(), now + i64::from(req.session_timeout_ms));
                    let mut r = JoinResponse::error(E::MemberIdRequired, &id);
                    r.member_id = id;
                    out.push(Out::Join(ticket, r));
                }
                None => self.add_member(id, req, ticket, now, &mut out),
            }
        } else if self.pending.remove(&req.member_id).is_some() {
            let id = req.member_id.clone();
            self.add_member(id, req, ticket, now, &mut out);
        } else if let Err(e) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return fail(e, &req.member_id);
        } else {
            let id = req.member_id.clone();
            let matches = self.members.get(&id).is_some_and(|m| m.matches(&req.protocols));
            match self.state {
                GroupState::PreparingRebalance => self.update_member(&req, ticket, now, &mut out),
                GroupState::CompletingRebalance if matches => {
                    // The member lost the JoinGroup response: answer it again.
                    let r = self.join_response(&id, false);
                    out.push(Out::Join(ticket, r));
                }
                GroupState::Stable if matches && self.leader.as_deref() != Some(&id) => {
                    let mut r = self.join_response(&id, false);
                    r.members.clear();
                    out.push(Out::Join(ticket, r));
                }
                GroupState::CompletingRebalance | GroupState::Stable => self.update_member(&req, ticket, now, &mut out),
                GroupState::Empty | GroupState::Dead => return fail(E::UnknownMemberId, &id),
            }
        }
        if self.state == GroupState::PreparingRebalance {
            self.try_complete_join(now, &mut out);
        }
        out
    }

    /// The JoinGroup answer for `member_id` in the current generation.
    fn join_response(&self, member_id: &str, skip_assignment: bool) -> JoinResponse {
        let protocol = self.protocol.clone().unwrap_or_default();
        let is_leader = self.leader.as_deref() == Some(member_id);
        JoinResponse {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment,
            member_id: member_id.to_string(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| JoinedMember {
                        member_id: m.id.clone(),
                        instance_id: m.instance_id.clone(),
                        metadata: m.metadata(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn add_member(&mut self, id: String, req: JoinRequest, ticket: Ticket, now: i64, out: &mut Vec<Out>) {
        if self.state == GroupState::PreparingRebalance && self.generation == 0 {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(i) = &req.instance_id {
            self.instances.insert(i.clone(), id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        self.members.insert(
            id.clone(),
            Member {
                id,
                instance_id: req.instance_id,
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols,
                assignment: Bytes::new(),
                join: Some(ticket),
                sync: None,
                last_heartbeat: now,
                is_new: true,
            },
        );
        self.maybe_prepare_rebalance(now, out);
    }

    fn update_member(&mut self, req: &JoinRequest, ticket: Ticket, now: i64, out: &mut Vec<Out>) {
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.protocols = req.protocols.clone();
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.client_id = req.client_id.clone();
            m.client_host = req.client_host.clone();
            if let Some(old) = m.join.replace(ticket) {
                // A second JoinGroup while the first is parked: the first is superseded.
                out.push(Out::Join(old, JoinResponse::error(E::UnknownMemberId, &req.member_id)));
            }
            m.last_heartbeat = now;
        }
        self.maybe_prepare_rebalance(now, out);
    }

    /// KIP-345: a static member rejoining with a new member id replaces its old incarnation.
    fn replace_static(
        &mut self,
        old: &str,
        new_id: String,
        req: JoinRequest,
        ticket: Ticket,
        now: i64,
        out: &mut Vec<Out>,
    ) {
        let Some(mut m) = self.members.remove(old) else {
            out.push(Out::Join(ticket, JoinResponse::error(E::UnknownMemberId, &new_id)));
            return;
        };
        if let Some(t) = m.join.take() {
            out.push(Out::Join(t, JoinResponse::error(E::FencedInstanceId, old)));
        }
        if let Some(t) = m.sync.take() {
            out.push(Out::Sync(t, SyncResponse::error(E::FencedInstanceId)));
        }
        let was_leader = self.leader.as_deref() == Some(old);
        let old_leader = self.leader.clone().unwrap_or_default();
        if was_leader {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old) {
            self.pending_sync.insert(new_id.clone());
        }
        let protocols_changed = !m.matches(&req.protocols);
        m.id = new_id.clone();
        m.protocols = req.protocols.clone();
        m.session_timeout_ms = req.session_timeout_ms;
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.client_id = req.client_id.clone();
        m.client_host = req.client_host.clone();
        m.last_heartbeat = now;
        m.join = Some(ticket);
        if let Some(i) = &req.instance_id {
            self.instances.insert(i.clone(), new_id.clone());
        }
        self.members.insert(new_id.clone(), m);
        match self.state {
            GroupState::Stable => {
                let next = self.select_protocol();
                if !protocols_changed || self.protocol.as_deref() == next.as_deref() {
                    // No rebalance: store the new member id, then answer with the current
                    // generation (KIP-345).
                    let mut r = self.join_response(&new_id, req.supports_skip_assignment && was_leader);
                    if !req.supports_skip_assignment {
                        // Before v9 the old leader id is returned so that the member does not
                        // run an assignment a stable group would ignore.
                        r.members.clear();
                        r.leader = old_leader;
                    }
                    if let Some(m) = self.members.get_mut(&new_id) {
                        m.join = None;
                    }
                    out.push(Out::Store {
                        group: self.id.clone(),
                        generation: self.generation,
                        then: vec![Out::Join(ticket, r)],
                    });
                } else {
                    self.prepare_rebalance(now, out);
                }
            }
            GroupState::CompletingRebalance => self.prepare_rebalance(now, out),
            GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn maybe_prepare_rebalance(&mut self, now: i64, out: &mut Vec<Out>) {
        if matches!(self.state, GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty) {
            self.prepare_rebalance(now, out);
        }
    }

    fn prepare_rebalance(&mut self, now: i64, out: &mut Vec<Out>) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_assignments(E::RebalanceInProgress, out);
        }
        self.sync_deadline = None;
        self.pending_sync.clear();
        if self.state == GroupState::Empty {
            let delay = self.cfg.initial_rebalance_delay_ms;
            self.initial = Some(InitialDelay { remaining: (self.rebalance_timeout() - delay).max(0) });
            self.join_deadline = Some(now + delay);
        } else {
            self.initial = None;
            self.join_deadline = Some(now + self.rebalance_timeout());
        }
        self.set_state(GroupState::PreparingRebalance, now);
        self.rebalance_started.get_or_insert(now);
        self.try_complete_join(now, out);
    }

    /// How long the rebalance that has just made the group Stable took; once per rebalance.
    pub fn take_completed_rebalance(&mut self, now: i64) -> Option<i64> {
        if self.state != GroupState::Stable {
            return None;
        }
        self.rebalance_started.take().map(|started| now - started)
    }

    /// Clears assignments and answers parked SyncGroups with `error`.
    fn reset_assignments(&mut self, error: E, out: &mut Vec<Out>) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some(t) = m.sync.take() {
                out.push(Out::Sync(t, SyncResponse::error(error)));
            }
        }
    }

    fn all_joined(&self) -> bool {
        self.members.values().all(|m| m.join.is_some()) && self.pending.is_empty()
    }

    fn try_complete_join(&mut self, now: i64, out: &mut Vec<Out>) {
        if self.state == GroupState::PreparingRebalance && self.initial.is_none() && self.all_joined() {
            self.complete_join(now, out);
        }
    }

    /// The protocol most members prefer among those all of them support.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .collect();
        let mut votes: Vec<usize> = vec![0; candidates.len()];
        for m in self.members.values() {
            if let Some(i) = m.protocols.iter().find_map(|(p, _)| candidates.iter().position(|c| *c == p)) {
                votes[i] += 1;
            }
        }
        let best = votes.iter().enumerate().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?.0;
        candidates.get(best).map(|s| s.to_string())
    }

    fn complete_join(&mut self, now: i64, out: &mut Vec<Out>) {
        self.join_deadline = None;
        self.initial = None;
        // The leader must be a member that rejoined.
        if self.leader.as_ref().and_then(|l| self.members.get(l)).is_none_or(|m| m.join.is_none())
            && let Some(m) = self.members.values().find(|m| m.join.is_some())
        {
            self.leader = Some(m.id.clone());
        }
        // Dynamic members that did not rejoin leave; static ones stay until their session ends.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            self.drop_member(&id);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            // Everyone left: no assignment came of it.
            self.rebalance_started = None;
            self.set_state(GroupState::Empty, now);
            out.push(Out::Store { group: self.id.clone(), generation: self.generation, then: Vec::new() });
            return;
        }
        self.protocol = self.select_protocol();
        self.set_state(GroupState::CompletingRebalance, now);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in &ids {
            let r = self.join_response(id, false);
            if let Some(m) = self.members.get_mut(id) {
                if let Some(t) = m.join.take() {
                    out.push(Out::Join(t, r));
                }
                m.last_heartbeat = now;
                m.is_new = false;
            }
        }
        self.pending_sync = ids.into_iter().collect();
        self.sync_deadline = Some(now + self.rebalance_timeout());
    }

    /// Removes a member's bookkeeping (no answers, no state change).
    fn drop_member(&mut self, id: &str) -> Option<Member> {
        let m = self.members.remove(id)?;
        if let Some(i) = &m.instance_id
            && self.instances.get(i).map(String::as_str) == Some(id)
        {
            self.instances.remove(i);
        }
        self.pending_sync.remove(id);
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(m)
    }

    /// A member leaves (LeaveGroup, session expiry): answer what it has parked, rebalance.
    fn remove_member(&mut self, id: &str, now: i64, out: &mut Vec<Out>) {
        let Some(mut m) = self.drop_member(id) else { return };
        if let Some(t) = m.join.take() {
            out.push(Out::Join(t, JoinResponse::error(E::UnknownMemberId, id)));
        }
        if let Some(t) = m.sync.take() {
            out.push(Out::Sync(t, SyncResponse::error(E::UnknownMemberId)));
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.maybe_prepare_rebalance(now, out),
            GroupState::PreparingRebalance => self.try_complete_join(now, out),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// SyncGroup.
    pub fn sync(&mut self, req: SyncRequest, ticket: Ticket, now: i64) -> Vec<Out> {
        let fail = |e: E| vec![Out::Sync(ticket, SyncResponse::error(e))];
        if self.state == GroupState::Dead {
            return fail(E::CoordinatorNotAvailable);
        }
        if let Err(e) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return fail(e);
        }
        if req.generation != self.generation {
            return fail(E::IllegalGeneration);
        }
        if req.protocol_type.as_ref().is_some_and(|p| self.protocol_type.as_ref() != Some(p))
            || req.protocol_name.as_ref().is_some_and(|p| self.protocol.as_ref() != Some(p))
        {
            return fail(E::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => fail(E::UnknownMemberId),
            GroupState::PreparingRebalance => fail(E::RebalanceInProgress),
            GroupState::Stable => {
                self.pending_sync.remove(&req.member_id);
                let Some(m) = self.members.get_mut(&req.member_id) else { return fail(E::UnknownMemberId) };
                m.last_heartbeat = now;
                let r = SyncResponse {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    assignment: m.assignment.clone(),
                };
                vec![Out::Sync(ticket, r)]
            }
            GroupState::CompletingRebalance => {
                self.pending_sync.remove(&req.member_id);
                let mut out = Vec::new();
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    if let Some(old) = m.sync.replace(ticket) {
                        out.push(Out::Sync(old, SyncResponse::error(E::UnknownMemberId)));
                    }
                    m.last_heartbeat = now;
                }
                if self.leader.as_deref() == Some(req.member_id.as_str()) {
                    let given: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                    let mut replies = Vec::new();
                    for m in self.members.values_mut() {
                        m.assignment = given.get(&m.id).cloned().unwrap_or_default();
                        if let Some(t) = m.sync.take() {
                            replies.push(Out::Sync(
                                t,
                                SyncResponse {
                                    error: None,
                                    protocol_type: self.protocol_type.clone(),
                                    protocol_name: self.protocol.clone(),
                                    assignment: m.assignment.clone(),
                                },
                            ));
                        }
                    }
                    self.set_state(GroupState::Stable, now);
                    out.push(Out::Store { group: self.id.clone(), generation: self.generation, then: replies });
                }
                out
            }
        }
    }

    /// Storing the group for `generation` failed: forget the assignment and rebalance.
    pub fn store_failed(&mut self, generation: i32, now: i64) -> Vec<Out> {
        let mut out = Vec::new();
        if generation == self.generation && self.state == GroupState::Stable {
            self.reset_assignments(E::CoordinatorNotAvailable, &mut out);
            self.prepare_rebalance(now, &mut out);
        }
        out
    }

    /// Heartbeat: what to answer.
    pub fn heartbeat(&mut self, member_id: &str, instance_id: Option<&str>, generation: i32, now: i64) -> Answer {
        if self.state == GroupState::Dead {
            return Err(E::CoordinatorNotAvailable);
        }
        self.validate_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(E::IllegalGeneration);
        }
        let state = self.state;
        let Some(m) = self.members.get_mut(member_id) else { return Err(E::UnknownMemberId) };
        match state {
            GroupState::Empty | GroupState::Dead => Err(E::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.last_heartbeat = now;
                Ok(())
            }
            GroupState::PreparingRebalance => {
                m.last_heartbeat = now;
                Err(E::RebalanceInProgress)
            }
        }
    }

    /// LeaveGroup for (member id, instance id) pairs; a member may be named by instance id
    /// alone (an empty member id), as admin tools do. Returns each member's error.
    pub fn leave(&mut self, leaving: &[(String, Option<String>)], now: i64) -> Result<(Vec<Answer>, Vec<Out>), E> {
        if self.state == GroupState::Dead {
            return Err(E::CoordinatorNotAvailable);
        }
        let mut out = Vec::new();
        let mut errors = Vec::with_capacity(leaving.len());
        for (member_id, instance_id) in leaving {
            let e = if member_id.is_empty() {
                match instance_id.as_ref().and_then(|i| self.instances.get(i).cloned()) {
                    Some(current) => {
                        self.remove_member(&current, now, &mut out);
                        Ok(())
                    }
                    None => Err(E::UnknownMemberId),
                }
            } else if self.pending.remove(member_id).is_some() {
                if self.state == GroupState::PreparingRebalance {
                    self.try_complete_join(now, &mut out);
                }
                Ok(())
            } else {
                match self.validate_member(member_id, instance_id.as_deref()) {
                    Ok(()) => {
                        self.remove_member(member_id, now, &mut out);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            };
            errors.push(e);
        }
        Ok((errors, out))
    }

    /// Whether an OffsetCommit from this member may be applied now. A commit with no
    /// generation (-1) is accepted only while the group has no members (admin tools, `assign`).
    pub fn validate_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Result<(), E> {
        if self.state == GroupState::Dead {
            return Err(E::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if let Some(i) = instance_id
            && self.instances.get(i).is_some_and(|m| m != member_id)
        {
            return Err(E::FencedInstanceId);
        }
        let state = self.state;
        let Some(m) = self.members.get_mut(member_id) else { return Err(E::UnknownMemberId) };
        if generation != self.generation {
            return Err(E::IllegalGeneration);
        }
        if state == GroupState::CompletingRebalance {
            return Err(E::RebalanceInProgress);
        }
        m.last_heartbeat = now;
        Ok(())
    }

    /// Timers: the join phase ending, silent members, expired pending ids, missing syncs.
    pub fn tick(&mut self, now: i64) -> Vec<Out> {
        let mut out = Vec::new();
        if self.state == GroupState::Dead {
            return out;
        }
        let expired: Vec<String> = self.pending.iter().filter(|(_, d)| **d <= now).map(|(id, _)| id.clone()).collect();
        for id in expired {
            self.pending.remove(&id);
            self.try_complete_join(now, &mut out);
        }
        let silent: Vec<String> =
            self.members.values().filter(|m| m.expires_at().is_some_and(|d| d <= now)).map(|m| m.id.clone()).collect();
        for id in silent {
            self.remove_member(&id, now, &mut out);
        }
        if self.state == GroupState::PreparingRebalance && self.join_deadline.is_some_and(|d| d <= now) {
            match self.initial {
                Some(init) if self.new_member_added && init.remaining > 0 => {
                    // Members are still arriving: wait another delay, within the rebalance timeout.
                    self.new_member_added = false;
                    let delay = self.cfg.initial_rebalance_delay_ms.min(init.remaining);
                    self.initial = Some(InitialDelay { remaining: (init.remaining - delay).max(0) });
                    self.join_deadline = Some(now + delay);
                }
                _ => self.complete_join(now, &mut out),
            }
        }
        if matches!(self.state, GroupState::CompletingRebalance | GroupState::Stable)
            && self.sync_deadline.is_some_and(|d| d <= now)
        {
            self.sync_deadline = None;
            let missing: Vec<String> = self.pending_sync.drain().collect();
            if !missing.is_empty() {
                for id in &missing {
                    if let Some(mut m) = self.drop_member(id)
                        && let Some(t) = m.join.take()
                    {
                        out.push(Out::Join(t, JoinResponse::error(E::UnknownMemberId, id)));
                    }
                }
                self.maybe_prepare_rebalance(now, &mut out);
            }
        }
        out
    }

    /// The next time [`ClassicGroup::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.state == GroupState::Dead {
            return None;
        }
        let members = self.members.values().filter_map(Member::expires_at);
        let pending = self.pending.values().copied();
        let sync = self.sync_deadline.filter(|_| !self.pending_sync.is_empty());
        members.chain(pending).chain(self.join_deadline).chain(sync).min()
    }
}

#[cfg(test)]
#[path = "classic_tests.rs"]
mod tests;
