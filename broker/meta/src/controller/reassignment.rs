//! Partition reassignment (KIP-455) as Kafka's controller decides it: AlterPartitionReassignments
//! starts, replaces or cancels moves, ListPartitionReassignments reports them. A move puts the
//! partition's replicas at target + removing (the adding ones catch up as followers); it
//! completes when every target replica is in the ISR ([`super::change::build`], also run on
//! every ISR change and fencing), and the removing replicas then leave replicas and ISR.

use serde::{Deserialize, Serialize};

use super::change::{Elect, Target, build};
use crate::image::{MetadataImage, TopicImage};
use crate::records::{NodeId, PartitionChange, PartitionRecord, Record};

use super::Refusal;

/// One partition of an AlterPartitionReassignments request: its target replicas, or `None` to
/// cancel the move in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<NodeId>>,
}

/// A partition being moved, as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ongoing {
    pub topic: String,
    pub partition: i32,
    /// Target followed by the removing replicas.
    pub replicas: Vec<NodeId>,
    pub adding: Vec<NodeId>,
    pub removing: Vec<NodeId>,
}

/// Whether the topic may elect a leader outside its ISR.
pub(super) fn unclean_allowed(t: &TopicImage, cluster_default: bool) -> bool {
    t.configs.get("unclean.leader.election.enable").map_or(cluster_default, |v| v == "true")
}

/// One partition's answer: topic, partition and its refusal (None: accepted).
pub(super) type Outcome = (String, i32, Option<Refusal>);

/// Decides every partition of one request, each on the image with the ones before it applied;
/// returns the records and, in request order, each partition's refusal (if any).
pub(super) fn alter(
    img: &MetadataImage,
    requests: &[Reassignment],
    allow_rf_change: bool,
    unclean_default: bool,
) -> (Vec<Record>, Vec<Outcome>) {
    let mut scratch = img.clone();
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(requests.len());
    for r in requests {
        let outcome = one(&scratch, r, allow_rf_change, unclean_default);
        let refusal = match outcome {
            Ok(Some(change)) => {
                let record = Record::PartitionChange(change);
                scratch.apply(scratch.version, &record);
                records.push(record);
                None
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        results.push((r.topic.clone(), r.partition, refusal));
    }
    (records, results)
}

fn one(
    img: &MetadataImage,
    r: &Reassignment,
    allow_rf_change: bool,
    unclean_default: bool,
) -> Result<Option<PartitionChange>, Refusal> {
    let t = img
        .topic(&r.topic)
        .ok_or_else(|| Refusal::UnknownTopic(format!("Unable to find a topic named {}.", r.topic)))?;
    let p = usize::try_from(r.partition)
        .ok()
        .and_then(|i| t.partitions.get(i))
        .ok_or_else(|| Refusal::UnknownTopic(format!("Unable to find partition {}:{}.", r.topic, r.partition)))?;
    match &r.replicas {
        Some(target) => change(img, t, p, target, allow_rf_change),
        None => cancel(img, t, p, unclean_allowed(t, unclean_default)),
    }
}

/// Kafka's checks of a replica list given by hand (its messages, in its order: ids sorted).
pub(super) fn validate_manual(img: &MetadataImage, replicas: &[NodeId]) -> Result<(), Refusal> {
    if replicas.is_empty() {
        return Err(Refusal::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    for (i, id) in sorted.iter().enumerate() {
        if !img.brokers.contains_key(id) {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered."
            )));
        }
        if i > 0 && sorted[i - 1] == *id {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {id} more than once."
            )));
        }
    }
    Ok(())
}

/// A new target for `p` (replacing any move in flight: what it was adding counts as current).
fn change(
    img: &MetadataImage,
    t: &TopicImage,
    p: &PartitionRecord,
    target: &[NodeId],
    allow_rf_change: bool,
) -> Result<Option<PartitionChange>, Refusal> {
    validate_manual(img, target)?;
    let current = p.replicas.len() - p.removing.len();
    if !allow_rf_change && current != target.len() {
        return Err(Refusal::InvalidReplicationFactor(format!(
            "The replication factor is changed from {current} to {}",
            target.len()
        )));
    }
    let mut removing: Vec<NodeId> = p.replicas.iter().copied().filter(|r| !target.contains(r)).collect();
    removing.sort_unstable();
    let mut adding: Vec<NodeId> = target.iter().copied().filter(|r| !p.replicas.contains(r)).collect();
    adding.sort_unstable();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    let want = Target { replicas, isr: p.isr.clone(), adding, removing, elect: Elect::Online };
    Ok(build(img, t.id, p, want, None))
}

/// Cancels the move in flight: the adding replicas go, the partition keeps the replicas it had.
fn cancel(
    img: &MetadataImage,
    t: &TopicImage,
    p: &PartitionRecord,
    unclean: bool,
) -> Result<Option<PartitionChange>, Refusal> {
    if !p.is_reassigning() {
        return Err(Refusal::NoReassignmentInProgress("No partition reassignment is in progress.".into()));
    }
    let replicas: Vec<NodeId> = p.replicas.iter().copied().filter(|r| !p.adding.contains(r)).collect();
    let Some(&first) = replicas.first() else {
        return Err(Refusal::InvalidReplicaAssignment(
            "Invalid replica assignment: addingReplicas contains all replicas.".into(),
        ));
    };
    let mut isr: Vec<NodeId> = p.isr.iter().copied().filter(|r| !p.adding.contains(r)).collect();
    if isr.is_empty() {
        if !unclean {
            return Err(Refusal::InvalidReplicaAssignment(format!(
                "Unable to revert partition assignment for {}:{} because it would require an unclean leader election.",
                t.name, p.partition
            )));
        }
        isr = vec![first];
    }
    let elect = if unclean { Elect::Unclean } else { Elect::Online };
    let want = Target { replicas, isr, adding: Vec::new(), removing: Vec::new(), elect };
    Ok(build(img, t.id, p, want, None))
}

/// The moves in flight: every one (`None`), or those of the named partitions (unknown topics
/// and partitions that are not moving are left out, as Kafka does).
pub(super) fn list(img: &MetadataImage, wanted: Option<&[(String, Vec<i32>)]>) -> Vec<Ongoing> {
    let ongoing = |t: &TopicImage, p: &PartitionRecord| Ongoing {
        topic: t.name.clone(),
        partition: p.partition,
        replicas: p.replicas.clone(),
        adding: p.adding.clone(),
        removing: p.removing.clone(),
    };
    match wanted {
        None => img
            .topics
            .values()
            .flat_map(|t| t.partitions.iter().filter(|p| p.is_reassigning()).map(move |p| ongoing(t, p)))
            .collect(),
        Some(w) => w
            .iter()
            .filter_map(|(name, parts)| img.topic(name).map(|t| (t, parts)))
            .flat_map(|(t, parts)| {
                parts
                    .iter()
                    .filter_map(|i| usize::try_from(*i).ok().and_then(|i| t.partitions.get(i)))
                    .filter(|p| p.is_reassigning())
                    .map(move |p| ongoing(t, p))
            })
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests;
