//! The active controller's decisions: a command and the current image in, records (or a
//! refusal) out. Pure: no I/O, time comes in as milliseconds, so every rule here is unit-tested
//! without a quorum. The quorum runtime ([`crate::quorum`]) runs one command at a time against
//! the latest committed image and writes the records through Raft.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::image::MetadataImage;
use crate::records::{ConfigResource, Configs, Endpoint, NodeId, PartitionChange, PartitionRecord, Record};

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
            Command::CreatePartitions { name, count, validate_only } => {
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
                let rf = t.partitions.first().map_or(1, |p| p.replicas.len()) as i16;
                let placed = place(img, current, *count - current, rf)?;
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
                *node_id,
                *broker_epoch,
                *topic_id,
                *partition,
                *leader_epoch,
                *partition_epoch,
                isr,
            ),
            Command::ElectLeaders { election, partitions } => Ok(elect_leaders(img, *election, partitions.as_deref())),
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
            return Ok(Decision::new(records, Reply::Heartbeat { fenced: b.fenced, shutdown_complete: leads_nothing }));
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
    /// rest of the ISR that is active; none left: leaderless (the ISR keeps its last member, as
    /// Kafka keeps it, so the partition can come back when that broker returns), or with unclean
    /// election any active replica.
    fn leave_leadership(&self, img: &MetadataImage, node: NodeId) -> Vec<Record> {
        let mut out = Vec::new();
        for t in img.topics.values() {
            let unclean =
                t.configs.get("unclean.leader.election.enable").map_or(self.unclean_leader_election, |v| v == "true");
            for p in &t.partitions {
                if !p.replicas.contains(&node) {
                    continue;
                }
                let others: Vec<NodeId> = p.isr.iter().copied().filter(|r| *r != node && img.is_active(*r)).collect();
                if p.leader == node {
                    let change = if let Some(&l) = others.first() {
                        Some((l, shrink(&p.isr, node)))
                    } else if unclean {
                        p.replicas.iter().copied().find(|r| *r != node && img.is_active(*r)).map(|l| (l, vec![l]))
                    } else {
                        None
                    };
                    let (leader, isr) = change.unwrap_or((-1, p.isr.clone()));
                    out.push(leader_change(t.id, p, leader, isr));
                } else if p.isr.contains(&node) && p.isr.len() > 1 {
                    out.push(Record::PartitionChange(PartitionChange {
                        topic_id: t.id,
                        partition: p.partition,
                        leader: None,
                        isr: Some(shrink(&p.isr, node)),
                        replicas: None,
                    }));
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
                        isr: None,
                        replicas: None,
                    }));
                }
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn create_topic(
        &self,
        img: &MetadataImage,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignments: Option<&[Vec<NodeId>]>,
        configs: &Configs,
        validate_only: bool,
    ) -> Result<Decision, Refusal> {
        if img.topic(name).is_some() {
            return Err(Refusal::TopicAlreadyExists(format!("Topic '{name}' already exists.")));
        }
        let placed = match assignments {
            Some(a) => {
                for (i, replicas) in a.iter().enumerate() {
                    let mut seen = replicas.clone();
                    seen.sort_unstable();
                    seen.dedup();
                    if replicas.is_empty() || seen.len() != replicas.len() {
                        return Err(Refusal::InvalidReplicaAssignment(format!(
                            "Partition {i} has an empty or duplicate replica list {replicas:?}."
                        )));
                    }
                    if let Some(r) = replicas.iter().find(|r| !img.brokers.contains_key(r)) {
                        return Err(Refusal::InvalidReplicaAssignment(format!(
                            "Replica {r} of partition {i} is not a registered broker."
                        )));
                    }
                }
                a.to_vec()
            }
            None => {
                if partitions <= 0 {
                    return Err(Refusal::InvalidPartitions(format!(
                        "Number of partitions must be larger than 0 (got {partitions})."
                    )));
                }
                if replication_factor <= 0 {
                    return Err(Refusal::InvalidReplicationFactor(
                        "Replication factor must be larger than 0.".to_string(),
                    ));
                }
                place(img, 0, partitions, replication_factor)?
            }
        };
        if validate_only {
            return Ok(Decision::new(Vec::new(), Reply::Done));
        }
        let id = fresh_topic_id(img);
        let mut records = vec![Record::Topic { name: name.to_string(), id }];
        records.extend(configs.iter().map(|(k, v)| Record::Config {
            resource: ConfigResource::Topic(name.to_string()),
            key: k.clone(),
            value: Some(v.clone()),
        }));
        let parts: Vec<PartitionRecord> =
            placed.into_iter().enumerate().map(|(i, r)| new_partition(id, i as i32, r, img)).collect();
        records.extend(parts.iter().cloned().map(Record::Partition));
        Ok(Decision::new(records, Reply::TopicCreated { id, partitions: parts }))
    }
}

/// Whether `refusal` of a retried `cmd` only says that an earlier attempt of it took effect
/// (committed, but its answer lost to a leader change or a timeout): the topic it deleted is
/// gone, the partitions it added are there. The caller then answers success, as the first
/// attempt would have. (A topic creation needs no such guess: it carries its own id.)
pub fn done_before(img: &MetadataImage, cmd: &Command, refusal: &Refusal) -> bool {
    match (cmd, refusal) {
        (Command::DeleteTopic { name }, Refusal::UnknownTopic(_)) => img.topic(name).is_none(),
        (Command::CreatePartitions { name, count, validate_only: false }, Refusal::InvalidPartitions(_)) => {
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
    let mut records = Vec::new();
    if isr != p.isr.as_slice() {
        records.push(Record::PartitionChange(PartitionChange {
            topic_id,
            partition,
            leader: None,
            isr: Some(isr.to_vec()),
            replicas: None,
        }));
    }
    let partition_epoch = p.partition_epoch + i32::from(!records.is_empty());
    Ok(Decision::new(
        records,
        Reply::Partition { leader: node, leader_epoch: p.leader_epoch, partition_epoch, isr: isr.to_vec() },
    ))
}

/// ElectLeaders over the named partitions, or all of them.
fn elect_leaders(img: &MetadataImage, election: Election, partitions: Option<&[(String, i32)]>) -> Decision {
    let all: Vec<(String, i32)>;
    let wanted = match partitions {
        Some(p) => p,
        None => {
            all =
                img.topics.values().flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.partition))).collect();
            &all
        }
    };
    let mut records = Vec::new();
    let mut results = Vec::new();
    for (topic, partition) in wanted {
        let outcome = match img.topic(topic) {
            None => ElectionOutcome::Unknown(format!("No such topic as {topic}")),
            Some(t) => match t.partitions.get(*partition as usize).filter(|_| *partition >= 0) {
                None => ElectionOutcome::Unknown(format!("No such partition as {topic}-{partition}")),
                Some(p) => match elect(img, election, p) {
                    Ok(Some((leader, isr))) => {
                        records.push(leader_change(t.id, p, leader, isr));
                        ElectionOutcome::Elected
                    }
                    Ok(None) => ElectionOutcome::NotNeeded,
                    Err(e) => e,
                },
            },
        };
        if partitions.is_some() || outcome != ElectionOutcome::NotNeeded {
            results.push((topic.clone(), *partition, outcome));
        }
    }
    Decision::new(records, Reply::Elections(results))
}

/// One partition's election: `Ok(None)` when none is needed, else the new leader and ISR.
fn elect(
    img: &MetadataImage,
    election: Election,
    p: &PartitionRecord,
) -> Result<Option<(NodeId, Vec<NodeId>)>, ElectionOutcome> {
    match election {
        Election::Preferred => {
            let preferred = p.replicas.first().copied().unwrap_or(-1);
            if p.leader == preferred {
                Ok(None)
            } else if p.isr.contains(&preferred) && img.is_active(preferred) {
                Ok(Some((preferred, p.isr.clone())))
            } else {
                Err(ElectionOutcome::PreferredNotAvailable)
            }
        }
        Election::Unclean => {
            if p.leader != -1 {
                return Ok(None);
            }
            if let Some(l) = p.isr.iter().copied().find(|r| img.is_active(*r)) {
                return Ok(Some((l, p.isr.clone())));
            }
            match p.replicas.iter().copied().find(|r| img.is_active(*r)) {
                Some(l) => Ok(Some((l, vec![l]))),
                None => Err(ElectionOutcome::NoEligibleLeader),
            }
        }
    }
}

/// A new leader (and ISR, if it changes) for partition `p`.
fn leader_change(topic_id: Uuid, p: &PartitionRecord, leader: NodeId, isr: Vec<NodeId>) -> Record {
    Record::PartitionChange(PartitionChange {
        topic_id,
        partition: p.partition,
        leader: Some(leader),
        isr: (isr != p.isr).then_some(isr),
        replicas: None,
    })
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
/// A random topic id as Kafka makes them (`Uuid.randomUuid`): never the zero id or the
/// metadata topic's (1), and never one whose base64 form starts with '-' (the first six bits
/// 62), which command-line tools would take for an option.
pub fn random_topic_id() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if id.as_u128() > 1 && id.as_bytes()[0] >> 2 != 62 {
            return id;
        }
    }
}

fn fresh_topic_id(img: &MetadataImage) -> Uuid {
    loop {
        let id = random_topic_id();
        if img.topic_by_id(id).is_none() {
            return id;
        }
    }
}

/// A new partition: the first replica that is active leads; the ISR is the replicas that are
/// active (all of them are empty, so all are in sync). With no active replica it is leaderless.
fn new_partition(topic_id: Uuid, partition: i32, replicas: Vec<NodeId>, img: &MetadataImage) -> PartitionRecord {
    let isr: Vec<NodeId> = replicas.iter().copied().filter(|r| img.is_active(*r)).collect();
    let leader = isr.first().copied().unwrap_or(-1);
    let isr = if isr.is_empty() { replicas.clone() } else { isr };
    PartitionRecord { topic_id, partition, replicas, isr, leader, leader_epoch: 0, partition_epoch: 0 }
}

/// Rack-aware round robin over the active brokers (Kafka's `StripedReplicaPlacer` idea): brokers
/// are ordered by alternating racks, partition `p`'s first replica is broker `(start + p) % n`,
/// and the others follow in that order with a shift that grows every `n` partitions so that
/// followers spread too. `first` is the index of the first new partition.
pub fn place(
    img: &MetadataImage,
    first: i32,
    count: i32,
    replication_factor: i16,
) -> Result<Vec<Vec<NodeId>>, Refusal> {
    let brokers = rack_alternating(img);
    let n = brokers.len();
    let rf = replication_factor.max(0) as usize;
    if rf > n {
        return Err(Refusal::InvalidReplicationFactor(format!(
            "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {n} broker(s) are registered."
        )));
    }
    let rack_of: BTreeMap<NodeId, Option<&str>> =
        img.brokers.values().map(|b| (b.node_id, b.rack.as_deref())).collect();
    let mut out = Vec::with_capacity(count.max(0) as usize);
    for p in first..first + count {
        let p = p as usize;
        let lead = p % n;
        let shift = 1 + (p / n) % (n - 1).max(1);
        let mut replicas = vec![brokers[lead]];
        // Followers in order from `lead + shift`: first on racks not used yet, then any.
        let order: Vec<NodeId> = (0..n).map(|i| brokers[(lead + shift + i) % n]).collect();
        for new_racks_only in [true, false] {
            for b in &order {
                if replicas.len() >= rf {
                    break;
                }
                let used = replicas.iter().any(|r| rack_of.get(r) == rack_of.get(b));
                if !(replicas.contains(b) || new_racks_only && used) {
                    replicas.push(*b);
                }
            }
        }
        out.push(replicas);
    }
    Ok(out)
}

/// Active brokers ordered so that consecutive ones are on different racks where possible
/// (rack A's first, rack B's first, ..., rack A's second, ...); no racks: by node id.
fn rack_alternating(img: &MetadataImage) -> Vec<NodeId> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<NodeId>> = BTreeMap::new();
    for b in img.active_brokers() {
        by_rack.entry(b.rack.as_deref()).or_default().push(b.node_id);
    }
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let before = out.len();
        for ids in by_rack.values() {
            if let Some(id) = ids.get(i) {
                out.push(*id);
            }
        }
        if out.len() == before {
            return out;
        }
        i += 1;
    }
}

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
mod tests {
    use super::*;

    const T: u64 = 9000;

    fn endpoint(id: NodeId) -> Vec<Endpoint> {
        vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: format!("127.0.1.{id}"),
            port: 9092,
            security_protocol: "PLAINTEXT".into(),
        }]
    }

    /// Applies a decision's records at consecutive indexes.
    fn commit(img: &mut MetadataImage, d: &Decision) {
        for r in &d.records {
            let next = img.version + 1;
            img.apply(next, r);
        }
    }

    /// A cluster of `racks.len()` registered, unfenced brokers with ids 1..=n.
    fn cluster(racks: &[Option<&str>]) -> (Controller, MetadataImage) {
        let mut c = Controller::new(T, false);
        let mut img = MetadataImage::default();
        for (i, rack) in racks.iter().enumerate() {
            let id = i as NodeId + 1;
            let reg = Command::RegisterBroker {
                node_id: id,
                incarnation_id: Uuid::new_v4(),
                listeners: endpoint(id),
                rack: rack.map(str::to_string),
            };
            let d = c.decide(&img, &reg, 0).expect("register");
            commit(&mut img, &d);
            let epoch = img.brokers[&id].epoch;
            let d = c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, 0).expect("hb");
            commit(&mut img, &d);
            assert!(img.is_active(id));
        }
        (c, img)
    }

    fn create(
        c: &mut Controller,
        img: &mut MetadataImage,
        name: &str,
        partitions: i32,
        rf: i16,
    ) -> Result<(), Refusal> {
        let cmd = Command::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: rf,
            assignments: None,
            configs: Configs::new(),
            topic_id: None,
            validate_only: false,
        };
        let d = c.decide(img, &cmd, 0)?;
        commit(img, &d);
        Ok(())
    }

    /// A broker comes back: registers a new incarnation and heartbeats (unfenced).
    fn rejoin(c: &mut Controller, img: &mut MetadataImage, id: NodeId) {
        let reg = Command::RegisterBroker {
            node_id: id,
            incarnation_id: Uuid::new_v4(),
            listeners: endpoint(id),
            rack: None,
        };
        let d = c.decide(img, &reg, T + 2).expect("register");
        commit(img, &d);
        let epoch = img.brokers[&id].epoch;
        let d = c.decide(img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T + 3).expect("hb");
        commit(img, &d);
    }

    #[test]
    fn placement_spreads_leaders_and_followers() {
        let (mut c, mut img) = cluster(&[None, None, None]);
        create(&mut c, &mut img, "t", 6, 3).expect("create");
        let t = img.topic("t").expect("t");
        let leaders: Vec<NodeId> = t.partitions.iter().map(|p| p.leader).collect();
        assert_eq!(leaders, vec![1, 2, 3, 1, 2, 3]);
        for p in &t.partitions {
            let mut r = p.replicas.clone();
            r.sort_unstable();
            assert_eq!(r, vec![1, 2, 3], "{p:?}");
            assert_eq!(p.isr, p.replicas);
            assert_eq!(p.leader, p.replicas[0]);
        }
        // Followers differ between the two rounds (the shift grows).
        assert_ne!(t.partitions[0].replicas, t.partitions[3].replicas);
    }

    #[test]
    fn placement_alternates_racks() {
        let (mut c, mut img) = cluster(&[Some("a"), Some("a"), Some("b"), Some("b")]);
        create(&mut c, &mut img, "t", 8, 2).expect("create");
        let rack = |id: NodeId| img.brokers[&id].rack.clone();
        for p in &img.topic("t").expect("t").partitions {
            assert_ne!(rack(p.replicas[0]), rack(p.replicas[1]), "both replicas on one rack: {p:?}");
        }
    }

    #[test]
    fn a_retried_command_that_took_effect_succeeds() {
        let (mut c, mut img) = cluster(&[None, None]);
        let id = random_topic_id();
        let cmd = |topic_id| Command::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replication_factor: 2,
            assignments: None,
            configs: Configs::new(),
            topic_id: Some(topic_id),
            validate_only: false,
        };
        let first = c.decide(&img, &cmd(id), 0).expect("create");
        commit(&mut img, &first);
        // The same request again (its answer was lost): nothing more to write, the same topic.
        let again = c.decide(&img, &cmd(id), 0).expect("retry");
        assert!(again.records.is_empty());
        assert_eq!(again.reply, first.reply);
        // Another request for the name (another id) is refused as ever.
        assert!(matches!(c.decide(&img, &cmd(random_topic_id()), 0), Err(Refusal::TopicAlreadyExists(_))));

        // A deletion or growth whose refusal says it is done already, only then.
        let grow = Command::CreatePartitions { name: "t".into(), count: 2, validate_only: false };
        let refused = c.decide(&img, &grow, 0).expect_err("no growth");
        assert!(done_before(&img, &grow, &refused));
        let grow3 = Command::CreatePartitions { name: "t".into(), count: 3, validate_only: false };
        let shrink = Command::CreatePartitions { name: "t".into(), count: 1, validate_only: false };
        let refused = c.decide(&img, &shrink, 0).expect_err("no shrink");
        assert!(!done_before(&img, &shrink, &refused));
        assert!(c.decide(&img, &grow3, 0).is_ok());
        let delete = Command::DeleteTopic { name: "t".into() };
        let d = c.decide(&img, &delete, 0).expect("delete");
        commit(&mut img, &d);
        let refused = c.decide(&img, &delete, 0).expect_err("gone");
        assert!(done_before(&img, &delete, &refused));
        let other = Command::DeleteTopic { name: "never".into() };
        assert!(done_before(&img, &other, &unknown_topic("never")));
        assert!(!done_before(&img, &grow, &unknown_topic("t")));
    }

    #[test]
    fn random_topic_ids_are_ones_kafka_would_make() {
        for _ in 0..10_000 {
            let id = random_topic_id();
            assert!(id.as_u128() > 1);
            // The base64 alphabet's 63rd letter is '-' in Kafka's URL-safe encoding.
            assert_ne!(id.as_bytes()[0] >> 2, 62, "{id}");
        }
    }

    #[test]
    fn create_refusals() {
        let (mut c, mut img) = cluster(&[None, None]);
        assert!(matches!(create(&mut c, &mut img, "t", 1, 3), Err(Refusal::InvalidReplicationFactor(_))));
        assert!(matches!(create(&mut c, &mut img, "t", 0, 1), Err(Refusal::InvalidPartitions(_))));
        create(&mut c, &mut img, "t", 1, 2).expect("create");
        assert!(matches!(create(&mut c, &mut img, "t", 1, 1), Err(Refusal::TopicAlreadyExists(_))));
        let grow = |count| Command::CreatePartitions { name: "t".into(), count, validate_only: false };
        assert!(matches!(c.decide(&img, &grow(1), 0), Err(Refusal::InvalidPartitions(_))));
        let d = c.decide(&img, &grow(3), 0).expect("grow");
        commit(&mut img, &d);
        let t = img.topic("t").expect("t");
        assert_eq!(t.partitions.len(), 3);
        assert!(t.partitions.iter().all(|p| p.replicas.len() == 2));
    }

    #[test]
    fn fencing_moves_leaders_within_the_isr_and_back() {
        let (mut c, mut img) = cluster(&[None, None, None]);
        create(&mut c, &mut img, "t", 3, 2).expect("create");
        create(&mut c, &mut img, "single", 1, 1).expect("create");
        // Brokers 2 and 3 heartbeat; broker 1 goes silent.
        for id in [2, 3] {
            let epoch = img.brokers[&id].epoch;
            c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T - 1).expect("hb");
        }
        let records = c.expire_sessions(&img, T + 1);
        commit(&mut img, &Decision::new(records, Reply::Done));
        assert!(img.brokers[&1].fenced);
        assert!(!img.brokers[&2].fenced && !img.brokers[&3].fenced);
        for p in &img.topic("t").expect("t").partitions {
            assert_ne!(p.leader, 1, "{p:?}");
            assert!(!p.isr.contains(&1), "{p:?}");
            assert!(p.leader > 0);
        }
        let moved = img.topic("t").expect("t").partitions.iter().find(|p| p.replicas[0] == 1).expect("p0").clone();
        assert_eq!(moved.leader_epoch, 1);
        // Single replica on the fenced broker: offline, ISR kept.
        let s = img.topic("single").expect("s").partitions[0].clone();
        if s.replicas == vec![1] {
            assert_eq!((s.leader, s.isr.clone()), (-1, vec![1]));
        }
        // Broker 1 comes back (re-registers, heartbeats): unfenced; a leaderless partition it
        // holds in its ISR gets it back.
        rejoin(&mut c, &mut img, 1);
        assert!(img.is_active(1));
        let s = &img.topic("single").expect("s").partitions[0];
        assert!(s.leader > 0, "{s:?}");
    }

    /// Two brokers, a topic with replicas [1, 2] whose follower 2 fell out of the ISR, then
    /// leader 1 stops heartbeating and its session expires: partition 0 as it ends up.
    fn fence_leader_with_lone_isr(unclean: bool) -> PartitionRecord {
        let (_, img) = fenced_leader_with_lone_isr(unclean);
        img.topic("t").expect("t").partitions[0].clone()
    }

    fn fenced_leader_with_lone_isr(unclean: bool) -> (Controller, MetadataImage) {
        let (mut c, mut img) = cluster(&[None, None]);
        c.unclean_leader_election = unclean;
        let cmd = Command::CreateTopic {
            name: "t".into(),
            partitions: 1,
            replication_factor: 2,
            assignments: Some(vec![vec![1, 2]]),
            configs: Configs::new(),
            topic_id: None,
            validate_only: false,
        };
        let d = c.decide(&img, &cmd, 0).expect("create");
        commit(&mut img, &d);
        let id = img.topic("t").expect("t").id;
        let shrink = Record::PartitionChange(PartitionChange {
            topic_id: id,
            partition: 0,
            leader: None,
            isr: Some(vec![1]),
            replicas: None,
        });
        commit(&mut img, &Decision::new(vec![shrink], Reply::Done));
        let epoch2 = img.brokers[&2].epoch;
        c.decide(&img, &Command::Heartbeat { node_id: 2, epoch: epoch2, shutting_down: false }, T).expect("hb");
        let records = c.expire_sessions(&img, T + 1);
        commit(&mut img, &Decision::new(records, Reply::Done));
        (c, img)
    }

    fn elect(c: &mut Controller, img: &mut MetadataImage, e: Election, parts: Option<&[(&str, i32)]>) -> Reply {
        let partitions = parts.map(|p| p.iter().map(|(t, i)| (t.to_string(), *i)).collect());
        let d = c.decide(img, &Command::ElectLeaders { election: e, partitions }, T + 5).expect("elect");
        commit(img, &d);
        d.reply
    }

    #[test]
    fn preferred_election_returns_leadership_to_the_first_replica_once_in_sync() {
        let (mut c, mut img) = cluster(&[None, None, None]);
        create(&mut c, &mut img, "t", 3, 3).expect("create");
        // Broker 1 leaves; its partition moves; it comes back, out of the ISR.
        let epoch = img.brokers[&1].epoch;
        let d = c.decide(&img, &Command::Heartbeat { node_id: 1, epoch, shutting_down: true }, 1).expect("hb");
        commit(&mut img, &d);
        rejoin(&mut c, &mut img, 1);
        let p0 = img.topic("t").expect("t").partitions[0].clone();
        assert_eq!(p0.replicas[0], 1);
        assert_ne!(p0.leader, 1);
        let one = [("t", 0)];
        let r = elect(&mut c, &mut img, Election::Preferred, Some(&one));
        assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::PreferredNotAvailable)]));
        // Broker 1 catches up and is back in the ISR (replication's job): now it can lead.
        let id = img.topic("t").expect("t").id;
        let back = Record::PartitionChange(PartitionChange {
            topic_id: id,
            partition: 0,
            leader: None,
            isr: Some(vec![p0.leader, 1]),
            replicas: None,
        });
        commit(&mut img, &Decision::new(vec![back], Reply::Done));
        let r = elect(&mut c, &mut img, Election::Preferred, Some(&one));
        assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::Elected)]));
        let p = &img.topic("t").expect("t").partitions[0];
        assert_eq!((p.leader, p.leader_epoch), (1, p0.leader_epoch + 1));
        let r = elect(&mut c, &mut img, Election::Preferred, Some(&[("t", 0), ("t", 1), ("t", 7), ("nope", 0)]));
        assert_eq!(
            r,
            Reply::Elections(vec![
                ("t".into(), 0, ElectionOutcome::NotNeeded),
                ("t".into(), 1, ElectionOutcome::NotNeeded),
                ("t".into(), 7, ElectionOutcome::Unknown("No such partition as t-7".into())),
                ("nope".into(), 0, ElectionOutcome::Unknown("No such topic as nope".into())),
            ])
        );
        // All partitions: only those an election was tried for are reported.
        assert_eq!(elect(&mut c, &mut img, Election::Preferred, None), Reply::Elections(vec![]));
    }

    #[test]
    fn alter_partition_checks_the_leaders_view() {
        let (mut c, mut img) = cluster(&[None, None, None]);
        create(&mut c, &mut img, "t", 1, 3).expect("create");
        let p = img.topic("t").expect("t").partitions[0].clone();
        let id = img.topic("t").expect("t").id;
        let alter = |img: &MetadataImage, node: NodeId, le: i32, pe: i32, isr: Vec<NodeId>| Command::AlterPartition {
            node_id: node,
            broker_epoch: img.brokers[&node].epoch,
            topic_id: id,
            partition: 0,
            leader_epoch: le,
            partition_epoch: pe,
            isr,
        };
        let l = p.leader;
        let shrunk: Vec<NodeId> = vec![l];
        let d = c.decide(&img, &alter(&img, l, p.leader_epoch, p.partition_epoch, shrunk.clone()), 1).expect("shrink");
        commit(&mut img, &d);
        let now = img.topic("t").expect("t").partitions[0].clone();
        assert_eq!(
            (now.isr.clone(), now.leader_epoch, now.partition_epoch),
            (shrunk, p.leader_epoch, p.partition_epoch + 1)
        );
        assert_eq!(
            d.reply,
            Reply::Partition {
                leader: l,
                leader_epoch: now.leader_epoch,
                partition_epoch: now.partition_epoch,
                isr: vec![l]
            }
        );
        let stale = alter(&img, l, p.leader_epoch, p.partition_epoch, p.replicas.clone());
        assert!(matches!(c.decide(&img, &stale, 2), Err(Refusal::InvalidUpdateVersion(_))));
        let fenced = alter(&img, l, p.leader_epoch + 1, now.partition_epoch, p.replicas.clone());
        assert!(matches!(c.decide(&img, &fenced, 2), Err(Refusal::FencedLeaderEpoch(_))));
        let other = *p.replicas.iter().find(|r| **r != l).expect("follower");
        let not_leader = alter(&img, other, now.leader_epoch, now.partition_epoch, p.replicas.clone());
        assert!(matches!(c.decide(&img, &not_leader, 2), Err(Refusal::NotLeader(_))));
        let d = c
            .decide(&img, &alter(&img, l, now.leader_epoch, now.partition_epoch, p.replicas.clone()), 3)
            .expect("expand");
        commit(&mut img, &d);
        assert_eq!(img.topic("t").expect("t").partitions[0].isr, p.replicas);
    }

    #[test]
    fn unclean_election_on_request_picks_a_live_replica_outside_the_isr() {
        let (mut c, mut img) = fenced_leader_with_lone_isr(false);
        assert_eq!(img.topic("t").expect("t").partitions[0].leader, -1);
        let r = elect(&mut c, &mut img, Election::Preferred, None);
        assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::PreferredNotAvailable)]));
        let r = elect(&mut c, &mut img, Election::Unclean, None);
        assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::Elected)]));
        let p = &img.topic("t").expect("t").partitions[0];
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        let r = elect(&mut c, &mut img, Election::Unclean, Some(&[("t", 0)]));
        assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::NotNeeded)]));
    }

    #[test]
    fn brokers_fenced_together_lead_nothing_and_leave_every_isr() {
        let (mut c, mut img) = cluster(&[None, None, None]);
        create(&mut c, &mut img, "t", 3, 3).expect("create");
        let epoch3 = img.brokers[&3].epoch;
        c.decide(&img, &Command::Heartbeat { node_id: 3, epoch: epoch3, shutting_down: false }, T).expect("hb");
        let records = c.expire_sessions(&img, T + 1);
        commit(&mut img, &Decision::new(records, Reply::Done));
        assert!(img.brokers[&1].fenced && img.brokers[&2].fenced && !img.brokers[&3].fenced);
        for p in &img.topic("t").expect("t").partitions {
            assert_eq!((p.leader, p.isr.clone()), (3, vec![3]), "{p:?}");
        }
    }

    #[test]
    fn unclean_election_only_when_enabled() {
        assert_eq!(fence_leader_with_lone_isr(false).leader, -1, "clean election has no candidate");
        let p = fence_leader_with_lone_isr(true);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn controlled_shutdown_hands_over_leadership() {
        let (mut c, mut img) = cluster(&[None, None]);
        create(&mut c, &mut img, "t", 2, 2).expect("create");
        let epoch = img.brokers[&1].epoch;
        let hb = Command::Heartbeat { node_id: 1, epoch, shutting_down: true };
        let d = c.decide(&img, &hb, 1).expect("hb");
        commit(&mut img, &d);
        assert!(img.topic("t").expect("t").partitions.iter().all(|p| p.leader == 2));
        let d = c.decide(&img, &hb, 2).expect("hb");
        assert_eq!(d.reply, Reply::Heartbeat { fenced: false, shutdown_complete: true });
    }

    #[test]
    fn stale_heartbeats_and_duplicate_ids_are_refused() {
        let (mut c, img) = cluster(&[None]);
        let epoch = img.brokers[&1].epoch;
        let stale = Command::Heartbeat { node_id: 1, epoch: epoch - 1, shutting_down: false };
        assert!(matches!(c.decide(&img, &stale, 1), Err(Refusal::StaleBrokerEpoch(_))));
        let other =
            Command::RegisterBroker { node_id: 1, incarnation_id: Uuid::new_v4(), listeners: endpoint(1), rack: None };
        assert!(matches!(c.decide(&img, &other, 1), Err(Refusal::DuplicateBrokerRegistration(_))));
        // Once its session expired, a new incarnation may take the id.
        assert!(c.decide(&img, &other, T + 10).is_ok());
        let unknown = Command::Heartbeat { node_id: 7, epoch: 1, shutting_down: false };
        assert!(matches!(c.decide(&img, &unknown, 1), Err(Refusal::BrokerNotRegistered(_))));
    }

    #[test]
    fn producer_id_blocks_never_repeat() {
        let (mut c, mut img) = cluster(&[None]);
        let mut starts = Vec::new();
        for _ in 0..3 {
            let d = c.decide(&img, &Command::AllocateProducerIds { node_id: 1 }, 0).expect("alloc");
            let Reply::ProducerIds { start, len } = d.reply else { panic!("reply {:?}", d.reply) };
            assert_eq!(len, PRODUCER_ID_BLOCK);
            starts.push(start);
            commit(&mut img, &d);
        }
        assert_eq!(starts, vec![0, 1000, 2000]);
    }

    #[test]
    fn config_changes_are_diffs() {
        let (mut c, mut img) = cluster(&[None]);
        let set = |configs: &[(&str, &str)]| Command::SetBrokerConfigs {
            node: None,
            configs: configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let d = c.decide(&img, &set(&[("a", "1"), ("b", "2")]), 0).expect("set");
        commit(&mut img, &d);
        let d = c.decide(&img, &set(&[("a", "1"), ("c", "3")]), 0).expect("set");
        assert_eq!(d.records.len(), 2, "{:?}", d.records);
        commit(&mut img, &d);
        assert_eq!(img.cluster_configs.keys().collect::<Vec<_>>(), vec!["a", "c"]);
    }
}
