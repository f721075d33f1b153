//! Where new topics and partitions go: the placement of their replicas over the active brokers,
//! the checks of replica lists a request gives, and the records of a new topic.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Controller, Decision, Refusal, Reply, bounded};
use crate::image::MetadataImage;
use crate::records::{ConfigResource, Configs, NodeId, PartitionRecord, Record};

impl Controller {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_topic(
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
                check_assignments(img, 0, a)?;
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
                bounded(1 + configs.len() + partitions as usize)?;
                place(img, 0, partitions, replication_factor)?
            }
        };
        bounded(1 + configs.len() + placed.len())?;
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

/// Explicit replica lists of partitions `first..`: none empty, no broker twice in one, every
/// broker registered, at least one of them active.
pub(super) fn check_assignments(img: &MetadataImage, first: i32, a: &[Vec<NodeId>]) -> Result<(), Refusal> {
    for (i, replicas) in a.iter().enumerate() {
        let partition = first + i as i32;
        let mut seen = replicas.clone();
        seen.sort_unstable();
        seen.dedup();
        if replicas.is_empty() || seen.len() != replicas.len() {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "Partition {partition} has an empty or duplicate replica list {replicas:?}."
            )));
        }
        if let Some(r) = replicas.iter().find(|r| !img.brokers.contains_key(r)) {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "Replica {r} of partition {partition} is not a registered broker."
            )));
        }
        // As Kafka: the partition starts with its active replicas as ISR and the first of them
        // as leader, so it needs one.
        if !replicas.iter().any(|r| img.is_active(*r)) {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
            )));
        }
    }
    Ok(())
}

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
pub(super) fn new_partition(
    topic_id: Uuid,
    partition: i32,
    replicas: Vec<NodeId>,
    img: &MetadataImage,
) -> PartitionRecord {
    let isr: Vec<NodeId> = replicas.iter().copied().filter(|r| img.is_active(*r)).collect();
    let leader = isr.first().copied().unwrap_or(-1);
    let isr = if isr.is_empty() { replicas.clone() } else { isr };
    PartitionRecord {
        topic_id,
        partition,
        replicas,
        isr,
        leader,
        leader_epoch: 0,
        partition_epoch: 0,
        adding: Vec::new(),
        removing: Vec::new(),
    }
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
