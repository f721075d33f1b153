//! The active controller's decisions: a command and the current image in, records (or a
//! refusal) out. Pure: no I/O, time comes in as milliseconds, so every rule here is unit-tested
//! without a quorum. The quorum runtime ([`crate::quorum`]) runs one command at a time against
//! the latest committed image and writes the records through Raft.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::image::MetadataImage;
use crate::records::{ConfigResource, Configs, Endpoint, NodeId, PartitionChange, PartitionRecord, Record};

pub mod change;
mod election;
mod placement;
pub mod reassignment;

use change::{Elect, Target};
use election::elect_leaders;
use placement::{check_assignments, new_partition};
pub use placement::{place, random_topic_id};
pub use reassignment::{Ongoing, Reassignment};

/// Producer ids are handed to brokers in blocks of this many (as Kafka's `ProducerIdsBlock`).
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// A request to the active controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    RegisterBroker {
        node_id: NodeId,
        incarnation_id: Uuid,
        listeners: Vec<Endpoint>,
        rack: Option<String>,
    },
    /// `shutting_down`: the broker is in controlled shutdown and wants to lead nothing.
    Heartbeat {
        node_id: NodeId,
        epoch: i64,
        shutting_down: bool,
    },
    CreateTopic {
        name: String,
        partitions: i32,
        replication_factor: i16,
        /// Explicit replica lists per partition (CreateTopics' `assignments`), else placed here.
        assignments: Option<Vec<Vec<NodeId>>>,
        configs: Configs,
        /// Give the topic this id (an imported topic keeps its own; a broker chooses one per
        /// request, which makes a retry of a committed creation succeed); else a fresh one.
        #[serde(default)]
        topic_id: Option<Uuid>,
        validate_only: bool,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
        /// The new partitions' replica lists (CreatePartitions' `assignments`), else placed here.
        #[serde(default)]
        assignments: Option<Vec<Vec<NodeId>>>,
        validate_only: bool,
    },
    /// Replaces a topic's config overrides (validated by the caller).
    SetTopicConfigs {
        name: String,
        configs: Configs,
    },
    /// Replaces the cluster-wide (`node: None`) or one broker's dynamic configs.
    SetBrokerConfigs {
        node: Option<NodeId>,
        configs: Configs,
    },
    AllocateProducerIds {
        node_id: NodeId,
    },
    /// AlterUserScramCredentials, checked by the broker: credentials to set, then (user,
    /// mechanism) pairs to remove (those already gone are skipped).
    /// CreateAcls: bindings with the ids the broker chose; one equal to an existing binding is
    /// skipped (as Kafka, creating it again succeeds and changes nothing).
    CreateAcls {
        acls: Vec<(Uuid, crate::acl::Acl)>,
    },
    /// DeleteAcls: the bindings with these ids (those already gone are skipped).
    DeleteAcls {
        ids: Vec<Uuid>,
    },
    AlterScramCredentials {
        upserts: Vec<crate::records::ScramCredential>,
        deletions: Vec<(String, i8)>,
        /// Bootstrap credentials (`format --add-scram`): a user that already has a credential of
        /// the mechanism keeps it.
        #[serde(default)]
        only_new: bool,
    },
    /// Never hand out producer ids below `below` (ids an imported single-node store used).
    ReserveProducerIds {
        below: i64,
    },
    /// A partition leader changes its ISR (Kafka's AlterPartition): followers that caught up
    /// join, followers that fell behind leave. Checked against the leader's epochs as Kafka's
    /// controller checks them.
    AlterPartition {
        node_id: NodeId,
        broker_epoch: i64,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<NodeId>,
    },
    /// ElectLeaders (KIP-460): `partitions: None` means every partition, and then the reply
    /// leaves out those that needed no election (as Kafka).
    ElectLeaders {
        election: Election,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// AlterPartitionReassignments (KIP-455): per partition a target replica list, or `None`
    /// to cancel its move. `allow_rf_change` (KIP-860): a target of another size is allowed.
    AlterReassignments {
        partitions: Vec<Reassignment>,
        allow_rf_change: bool,
    },
    /// ListPartitionReassignments: every move in flight (`None`), or those of these
    /// partitions. Answered by the active controller from its image, so a move just started
    /// through any broker is listed.
    ListReassignments {
        partitions: Option<Vec<(String, Vec<i32>)>>,
    },
    /// UnregisterBroker: the broker leaves the metadata for good (it leads nothing and leaves
    /// every ISR first); its id may stay in replica lists until they are moved.
    UnregisterBroker {
        node_id: NodeId,
    },
    /// Changes nothing. Its answer's version covers every record committed before it, so a
    /// broker that waits to apply that version sees what the active controller saw: a read
    /// barrier for admin requests that look a topic up before changing it (Kafka answers them
    /// on the controller, so a topic created through another broker a moment ago is there).
    Barrier,
}

/// Kafka's `ElectionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Election {
    /// Give leadership back to the first replica, if it is active and in the ISR.
    Preferred,
    /// Give a leaderless partition a leader: from the ISR if any member is active, else any
    /// active replica (which may lose acknowledged records), whatever
    /// `unclean.leader.election.enable` says.
    Unclean,
}

/// What an election did for one partition (Kafka's per-partition error codes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionOutcome {
    Elected,
    /// ELECTION_NOT_NEEDED: the preferred replica leads already (preferred) or the partition
    /// has a leader (unclean).
    NotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE
    PreferredNotAvailable,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE
    NoEligibleLeader,
    /// UNKNOWN_TOPIC_OR_PARTITION, with Kafka's message.
    Unknown(String),
}

/// What a command returns besides the version of the image that holds its effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Done,
    Registered {
        epoch: i64,
    },
    Heartbeat {
        fenced: bool,
        shutdown_complete: bool,
    },
    TopicCreated {
        id: Uuid,
        partitions: Vec<PartitionRecord>,
    },
    ProducerIds {
        start: i64,
        len: i64,
    },
    /// ElectLeaders: (topic, partition, outcome), in request order.
    Elections(Vec<(String, i32, ElectionOutcome)>),
    /// AlterPartitionReassignments: each partition's refusal, if any, in request order.
    Reassignments(Vec<(String, i32, Option<Refusal>)>),
    /// ListPartitionReassignments.
    Reassigning(Vec<Ongoing>),
    /// AlterPartition: the partition as it now is.
    Partition {
        leader: NodeId,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<NodeId>,
    },
}

/// Why a command was refused. The broker maps these onto Kafka error codes in one place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    TopicAlreadyExists(String),
    #[error("{0}")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// A user operation of more than [`MAX_RECORDS_PER_USER_OP`] records.
    #[error("{0}")]
    PolicyViolation(String),
    #[error("{0}")]
    StaleBrokerEpoch(String),
    #[error("{0}")]
    BrokerNotRegistered(String),
    #[error("{0}")]
    DuplicateBrokerRegistration(String),
    #[error("{0}")]
    NotLeader(String),
    #[error("{0}")]
    FencedLeaderEpoch(String),
    #[error("{0}")]
    InvalidUpdateVersion(String),
    #[error("{0}")]
    IneligibleReplica(String),
    #[error("{0}")]
    NoReassignmentInProgress(String),
}

/// The most metadata records one topic creation or partition increase may write, as Kafka's
/// controller (`MAX_RECORDS_PER_USER_OP`): larger ones are refused whole, so that no single
/// Raft entry grows without bound. Kafka counts a CreateTopics request's topics together;
/// here each topic is its own command (docs/compatibility.md).
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// Refuses a user operation that would write `records` records.
fn bounded(records: usize) -> Result<(), Refusal> {
    if records > MAX_RECORDS_PER_USER_OP {
        return Err(Refusal::PolicyViolation("Unable to perform excessively large batch operation.".into()));
    }
    Ok(())
}

/// The outcome of one command: records to write, and the reply once they are committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub records: Vec<Record>,
    pub reply: Reply,
}

impl Decision {
    fn new(records: Vec<Record>, reply: Reply) -> Self {
        Self { records, reply }
    }
}

/// Soft state of the active controller: when each broker last heartbeated. Not in the log (as in
/// Kafka); a new active controller starts every broker's session afresh.
#[derive(Debug, Default)]
pub struct Controller {
    last_heartbeat_ms: HashMap<NodeId, u64>,
    pub session_timeout_ms: u64,
    /// `unclean.leader.election.enable` of the cluster (topics can override it).
    pub unclean_leader_election: bool,
}

/// `transaction.version`: 2 (KIP-890: the coordinator bumps the producer epoch at every
/// transaction end, and partition leaders add partitions to transactions).
pub const TRANSACTION_VERSION: &str = "transaction.version";
/// The feature levels a cluster runs at, as a freshly formatted Kafka 4.1 cluster finalizes
/// them.
pub const FINALIZED_FEATURES: &[(&str, i16)] = &[(TRANSACTION_VERSION, 2)];

/// The feature levels the image lacks, finalized when a broker registers (the first broker of
/// a new cluster, or the first of an upgraded one whose log predates them). Oxbow serves no
/// UpdateFeatures, so these are the levels a cluster keeps.
fn missing_features(img: &MetadataImage) -> Vec<Record> {
    FINALIZED_FEATURES
        .iter()
        .filter(|(name, _)| !img.features.contains_key(*name))
        .map(|(name, level)| Record::FeatureLevel { name: (*name).to_string(), level: *level })
        .collect()
}

impl Controller {
    pub fn new(session_timeout_ms: u64, unclean_leader_election: bool) -> Self {
        Self { last_heartbeat_ms: HashMap::new(), session_timeout_ms, unclean_leader_election }
    }

    /// Decides `cmd` against `img` at time `now_ms`.
    pub fn decide(&mut self, img: &MetadataImage, cmd: &Command, now_ms: u64) -> Result<Decision, Refusal> {
        match cmd {
            Command::RegisterBroker { node_id, incarnation_id, listeners, rack } => {
                if let Some(b) = img.brokers.get(node_id)
                    && b.incarnation_id != *incarnation_id
                    && !b.fenced
                    && self.alive(*node_id, now_ms)
                {
                    return Err(Refusal::DuplicateBrokerRegistration(format!(
                        "Another broker is registered with node id {node_id} and is still alive"
                    )));
                }
                self.last_heartbeat_ms.insert(*node_id, now_ms);
                let mut records = Vec::new();
                // Its old registration leads nothing any more: move leadership first.
                if img.brokers.contains_key(node_id) {
                    records.extend(self.leave_leadership(img, *node_id));
                }
                records.push(Record::RegisterBroker {
                    node_id: *node_id,
                    incarnation_id: *incarnation_id,
                    listeners: listeners.clone(),
                    rack: rack.clone(),
                });
                records.extend(missing_features(img));
                Ok(Decision::new(records, Reply::Done))
            }
            Command::Heartbeat { node_id, epoch, shutting_down } => {
                self.heartbeat(img, *node_id, *epoch, *shutting_down, now_ms)
            }
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                assignments,
                configs,
                topic_id,
                validate_only,
            } => {
                // The same name under the id this very request chose: an earlier attempt of it
                // was committed (its answer lost to a leader change or a timeout), so this
                // attempt succeeds with what that one created.
                if let Some(t) = topic_id.and_then(|id| img.topic(name).filter(|t| t.id == id)) {
                    let reply = Reply::TopicCreated { id: t.id, partitions: t.partitions.clone() };
                    return Ok(Decision::new(Vec::new(), if *validate_only { Reply::Done } else { reply }));
                }
                let d = self.create_topic(
                    img,
                    name,
                    *partitions,
                    *replication_factor,
                    assignments.as_deref(),
                    configs,
                    *validate_only,
                )?;
                match topic_id {
                    Some(id) if img.topic_by_id(*id).is_some() => {
                        Err(Refusal::TopicAlreadyExists(format!("Topic id {id} is in use.")))
                    }
                    Some(id) => Ok(with_topic_id(d, *id)),
                    None => Ok(d),
                }
            }
            Command::DeleteTopic { name } => {
                let t = img.topic(name).ok_or_else(|| unknown_topic(name))?;
                Ok(Decision::new(vec![Record::RemoveTopic { id: t.id }], Reply::Done))
            }
            Command::CreatePartitions { name, count, assignments, validate_only } => {
                let t = img.topic(name).ok_or_else(|| unknown_topic(name))?;
                let current = t.partitions.len() as i32;
                if *count < current {
                    return Err(Refusal::InvalidPartitions(format!(
                        "Topic currently has {current} partitions, which is higher than the requested {count}."
                    )));
                }
                if *count == current {
                    return Err(Refusal::InvalidPartitions(format!("Topic already has {current} partitions.")));
                }
                // During a move the first partition's replicas include those it is removing.
                let rf = t.partitions.first().map_or(1, |p| p.replicas.len() - p.removing.len()) as i16;
                bounded((*count - current) as usize)?;
                let placed = match assignments {
                    Some(a) => {
                        if a.len() as i32 != *count - current {
                            return Err(Refusal::InvalidReplicaAssignment(format!(
                                "Attempted to add {} additional partition(s), but only {} assignment(s) were specified.",
                                *count - current,
                                a.len()
                            )));
                        }
                        if let Some(r) = a.iter().find(|r| r.len() != rf as usize) {
                            return Err(Refusal::InvalidReplicaAssignment(format!(
                                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                                r.len()
                            )));
                        }
                        check_assignments(img, current, a)?;
                        a.clone()
                    }
                    None => place(img, current, *count - current, rf)?,
                };
                if *validate_only {
                    return Ok(Decision::new(Vec::new(), Reply::Done));
                }
                let records = placed
                    .into_iter()
                    .enumerate()
                    .map(|(i, replicas)| Record::Partition(new_partition(t.id, current + i as i32, replicas, img)))
                    .collect();
                Ok(Decision::new(records, Reply::Done))
            }
            Command::SetTopicConfigs { name, configs } => {
                let t = img.topic(name).ok_or_else(|| unknown_topic(name))?;
                Ok(Decision::new(config_diff(ConfigResource::Topic(name.clone()), &t.configs, configs), Reply::Done))
            }
            Command::SetBrokerConfigs { node, configs } => {
                let empty = Configs::new();
                let current = match node {
                    None => &img.cluster_configs,
                    Some(n) => img.node_configs.get(n).unwrap_or(&empty),
                };
                Ok(Decision::new(config_diff(ConfigResource::Broker(*node), current, configs), Reply::Done))
            }
            Command::CreateAcls { acls } => {
                let mut records = Vec::new();
                let mut seen: Vec<&crate::acl::Acl> = img.acls.values().collect();
                for (id, acl) in acls {
                    if !seen.contains(&acl) {
                        seen.push(acl);
                        records.push(Record::Acl { id: *id, acl: acl.clone() });
                    }
                }
                Ok(Decision::new(records, Reply::Done))
            }
            Command::DeleteAcls { ids } => {
                let records =
                    ids.iter().filter(|id| img.acls.contains_key(id)).map(|id| Record::RemoveAcl { id: *id }).collect();
                Ok(Decision::new(records, Reply::Done))
            }
            Command::AlterScramCredentials { upserts, deletions, only_new } => {
                let mut records: Vec<Record> = deletions
                    .iter()
                    .filter(|(u, m)| img.scram.get(u).is_some_and(|c| c.contains_key(m)))
                    .map(|(user, mechanism)| Record::RemoveScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                    })
                    .collect();
                let exists = |c: &crate::records::ScramCredential| {
                    img.scram.get(&c.user).is_some_and(|m| m.contains_key(&c.mechanism))
                };
                records
                    .extend(upserts.iter().filter(|c| !(*only_new && exists(c))).cloned().map(Record::ScramCredential));
                Ok(Decision::new(records, Reply::Done))
            }
            Command::ReserveProducerIds { below } => {
                let records = if *below > img.next_producer_id {
                    vec![Record::ProducerIds { node_id: -1, next: *below }]
                } else {
                    Vec::new()
                };
                Ok(Decision::new(records, Reply::Done))
            }
            Command::AlterPartition {
                node_id,
                broker_epoch,
                topic_id,
                partition,
                leader_epoch,
                partition_epoch,
                isr,
            } => alter_partition(
                img,
                self.unclean_leader_election,
                *node_id,
                *broker_epoch,
                *topic_id,
                *partition,
                *leader_epoch,
                *partition_epoch,
                isr,
            ),
            Command::ElectLeaders { election, partitions } => Ok(elect_leaders(img, *election, partitions.as_deref())),
            Command::AlterReassignments { partitions, allow_rf_change } => {
                let (records, results) =
                    reassignment::alter(img, partitions, *allow_rf_change, self.unclean_leader_election);
                Ok(Decision::new(records, Reply::Reassignments(results)))
            }
            Command::ListReassignments { partitions } => {
                Ok(Decision::new(Vec::new(), Reply::Reassigning(reassignment::list(img, partitions.as_deref()))))
            }
            Command::Barrier => Ok(Decision::new(Vec::new(), Reply::Done)),
            Command::UnregisterBroker { node_id } => {
                if !img.brokers.contains_key(node_id) {
                    return Err(Refusal::BrokerNotRegistered(format!(
                        "Broker ID {node_id} is not currently registered"
                    )));
                }
                self.last_heartbeat_ms.remove(node_id);
                let mut records = self.leave_leadership(img, *node_id);
                records.push(Record::UnregisterBroker { node_id: *node_id });
                Ok(Decision::new(records, Reply::Done))
            }
            Command::AllocateProducerIds { node_id } => {
                let start = img.next_producer_id;
                Ok(Decision::new(
                    vec![Record::ProducerIds { node_id: *node_id, next: start + PRODUCER_ID_BLOCK }],
                    Reply::ProducerIds { start, len: PRODUCER_ID_BLOCK },
                ))
            }
        }
    }

    fn alive(&self, node: NodeId, now_ms: u64) -> bool {
        self.last_heartbeat_ms.get(&node).is_some_and(|t| now_ms.saturating_sub(*t) < self.session_timeout_ms)
    }

    fn heartbeat(
        &mut self,
        img: &MetadataImage,
        node_id: NodeId,
        epoch: i64,
        shutting_down: bool,
        now_ms: u64,
    ) -> Result<Decision, Refusal> {
        let Some(b) = img.brokers.get(&node_id) else {
            return Err(Refusal::BrokerNotRegistered(format!("broker {node_id} is not registered")));
        };
        if b.epoch != epoch {
            return Err(Refusal::StaleBrokerEpoch(format!(
                "broker {node_id} heartbeated with epoch {epoch}, but its registration has epoch {}",
                b.epoch
            )));
        }
        self.last_heartbeat_ms.insert(node_id, now_ms);
        let mut records = Vec::new();
        if shutting_down {
            if !b.in_controlled_shutdown {
                records.push(Record::BrokerShuttingDown { node_id, epoch });
                records.extend(self.leave_leadership(img, node_id));
            }
            let leads_nothing =
                records.iter().all(|r| !matches!(r, Record::PartitionChange(_))) && !leads_any(img, node_id);
            // Done: fenced, and its session ends (as Kafka's SHUTDOWN_NOW), so the process that
            // replaces it registers at once instead of waiting out the session.
            if leads_nothing && !b.fenced {
                records.push(Record::FenceBroker { node_id, epoch });
                self.last_heartbeat_ms.remove(&node_id);
            }
            let fenced = b.fenced || leads_nothing;
            return Ok(Decision::new(records, Reply::Heartbeat { fenced, shutdown_complete: leads_nothing }));
        }
        // A broker that finished its controlled shutdown comes back only by registering again.
        if b.in_controlled_shutdown && b.fenced {
            return Ok(Decision::new(Vec::new(), Reply::Heartbeat { fenced: true, shutdown_complete: false }));
        }
        if b.fenced {
            records.push(Record::UnfenceBroker { node_id, epoch });
            records.extend(self.rejoin_leadership(img, node_id));
        }
        Ok(Decision::new(records, Reply::Heartbeat { fenced: false, shutdown_complete: false }))
    }

    /// Fences every active broker whose session expired; returns the records (empty if none).
    pub fn expire_sessions(&mut self, img: &MetadataImage, now_ms: u64) -> Vec<Record> {
        let expired: Vec<(NodeId, i64)> = img
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter(|b| {
                let last = *self.last_heartbeat_ms.entry(b.node_id).or_insert(now_ms);
                now_ms.saturating_sub(last) >= self.session_timeout_ms
            })
            .map(|b| (b.node_id, b.epoch))
            .collect();
        if expired.is_empty() {
            return Vec::new();
        }
        // Several brokers at once: each one's changes are decided on the image with the
        // previous ones applied, so no partition gets a leader (or ISR) among brokers fenced in
        // the same step.
        let mut scratch = img.clone();
        let mut records = Vec::new();
        for (node_id, epoch) in expired {
            let mut these = vec![Record::FenceBroker { node_id, epoch }];
            these.extend(self.leave_leadership(&scratch, node_id));
            for r in &these {
                scratch.apply(scratch.version, r);
            }
            records.extend(these);
        }
        records
    }

    /// Partition changes that take `node` out of leadership and ISRs: a new leader from the
    /// rest of the ISR that is active (the first in replica order); none left: leaderless (the
    /// ISR keeps its last member, as Kafka keeps it, so the partition can come back when that
    /// broker returns), or with unclean election any active replica. A smaller ISR may
    /// complete a reassignment in flight.
    fn leave_leadership(&self, img: &MetadataImage, node: NodeId) -> Vec<Record> {
        let mut out = Vec::new();
        for t in img.topics.values() {
            let elect = if reassignment::unclean_allowed(t, self.unclean_leader_election) {
                Elect::Unclean
            } else {
                Elect::Online
            };
            for p in &t.partitions {
                if !p.replicas.contains(&node) {
                    continue;
                }
                let others_active = p.isr.iter().any(|r| *r != node && img.is_active(*r));
                let shrinks = p.isr.contains(&node) && p.isr.len() > 1 && (p.leader != node || others_active);
                let isr = if shrinks { shrink(&p.isr, node) } else { p.isr.clone() };
                let want = Target { isr, ..Target::current(p, elect) };
                if let Some(c) = change::build(img, t.id, p, want, Some(node)) {
                    out.push(Record::PartitionChange(c));
                }
            }
        }
        out
    }

    /// Partition changes when `node` becomes active again: leaderless partitions whose ISR holds
    /// it get it as leader.
    fn rejoin_leadership(&self, img: &MetadataImage, node: NodeId) -> Vec<Record> {
        let mut out = Vec::new();
        for t in img.topics.values() {
            for p in &t.partitions {
                if p.leader == -1 && p.isr.contains(&node) {
                    out.push(Record::PartitionChange(PartitionChange {
                        topic_id: t.id,
                        partition: p.partition,
                        leader: Some(node),
                        ..PartitionChange::default()
                    }));
                }
            }
        }
        out
    }
}

/// Whether `refusal` of a retried `cmd` only says that an earlier attempt of it took effect
/// (committed, but its answer lost to a leader change or a timeout): the topic it deleted is
/// gone, the partitions it added are there. The caller then answers success, as the first
/// attempt would have. (A topic creation needs no such guess: it carries its own id.)
pub fn done_before(img: &MetadataImage, cmd: &Command, refusal: &Refusal) -> bool {
    match (cmd, refusal) {
        (Command::DeleteTopic { name }, Refusal::UnknownTopic(_)) => img.topic(name).is_none(),
        (Command::CreatePartitions { name, count, validate_only: false, .. }, Refusal::InvalidPartitions(_)) => {
            img.topic(name).is_some_and(|t| t.partitions.len() as i64 == i64::from(*count))
        }
        _ => false,
    }
}

/// The same decision with the new topic's id replaced by `id`.
fn with_topic_id(mut d: Decision, id: Uuid) -> Decision {
    for r in &mut d.records {
        match r {
            Record::Topic { id: t, .. } => *t = id,
            Record::Partition(p) => p.topic_id = id,
            _ => {}
        }
    }
    if let Reply::TopicCreated { id: t, partitions } = &mut d.reply {
        *t = id;
        for p in partitions {
            p.topic_id = id;
        }
    }
    d
}

/// AlterPartition: the leader's new ISR, if its view of the partition is current.
#[allow(clippy::too_many_arguments)]
fn alter_partition(
    img: &MetadataImage,
    unclean_default: bool,
    node: NodeId,
    broker_epoch: i64,
    topic_id: Uuid,
    partition: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[NodeId],
) -> Result<Decision, Refusal> {
    match img.brokers.get(&node) {
        Some(b) if b.epoch == broker_epoch => {}
        Some(b) => {
            return Err(Refusal::StaleBrokerEpoch(format!(
                "broker {node} sent epoch {broker_epoch}, its registration has {}",
                b.epoch
            )));
        }
        None => return Err(Refusal::BrokerNotRegistered(format!("broker {node} is not registered"))),
    }
    let t = img.topic_by_id(topic_id).ok_or_else(|| Refusal::UnknownTopic(format!("no topic with id {topic_id}")))?;
    let p = t
        .partitions
        .get(usize::try_from(partition).unwrap_or(usize::MAX))
        .ok_or_else(|| Refusal::UnknownTopic(format!("{}-{partition} does not exist", t.name)))?;
    let name = format!("{}-{partition}", t.name);
    if p.leader != node {
        return Err(Refusal::NotLeader(format!("broker {node} does not lead {name} (leader: {})", p.leader)));
    }
    if leader_epoch != p.leader_epoch {
        return Err(Refusal::FencedLeaderEpoch(format!(
            "{name}: leader epoch {leader_epoch} is not the current {}",
            p.leader_epoch
        )));
    }
    if partition_epoch != p.partition_epoch {
        return Err(Refusal::InvalidUpdateVersion(format!(
            "{name}: partition epoch {partition_epoch} is not the current {}",
            p.partition_epoch
        )));
    }
    if !isr.contains(&node) {
        return Err(Refusal::IneligibleReplica(format!("{name}: the leader must stay in the ISR")));
    }
    if let Some(r) = isr.iter().find(|r| !p.replicas.contains(r)) {
        return Err(Refusal::IneligibleReplica(format!("{name}: broker {r} is not a replica")));
    }
    // Only active brokers may join (a fenced or shutting-down broker may stay if it was in).
    if let Some(r) = isr.iter().find(|r| !p.isr.contains(r) && !img.is_active(**r)) {
        return Err(Refusal::IneligibleReplica(format!("{name}: broker {r} is fenced or shutting down")));
    }
    // The new ISR may complete a reassignment (every target replica in sync): the removing
    // replicas then leave, and if the leader was one of them another takes over (the
    // requester then sees a leader that is not itself, Kafka's NEW_LEADER_ELECTED).
    let elect = if reassignment::unclean_allowed(t, unclean_default) { Elect::Unclean } else { Elect::Online };
    let change = change::build(img, topic_id, p, Target { isr: isr.to_vec(), ..Target::current(p, elect) }, None);
    let mut after = p.clone();
    if let Some(c) = &change {
        crate::image::apply_change(&mut after, c);
    }
    Ok(Decision::new(
        change.map(Record::PartitionChange).into_iter().collect(),
        Reply::Partition {
            leader: after.leader,
            leader_epoch: after.leader_epoch,
            partition_epoch: after.partition_epoch,
            isr: after.isr,
        },
    ))
}

fn unknown_topic(name: &str) -> Refusal {
    Refusal::UnknownTopic(format!("Topic '{name}' does not exist."))
}

fn shrink(isr: &[NodeId], node: NodeId) -> Vec<NodeId> {
    isr.iter().copied().filter(|r| *r != node).collect()
}

fn leads_any(img: &MetadataImage, node: NodeId) -> bool {
    img.topics.values().any(|t| t.partitions.iter().any(|p| p.leader == node))
}

/// Topic ids are random, never the all-zero id, never one in use.
/// Records that turn `current` into `wanted`.
fn config_diff(resource: ConfigResource, current: &Configs, wanted: &Configs) -> Vec<Record> {
    let mut out = Vec::new();
    for (k, v) in wanted {
        if current.get(k) != Some(v) {
            out.push(Record::Config { resource: resource.clone(), key: k.clone(), value: Some(v.clone()) });
        }
    }
    for k in current.keys().filter(|k| !wanted.contains_key(*k)) {
        out.push(Record::Config { resource: resource.clone(), key: k.clone(), value: None });
    }
    out
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests;
