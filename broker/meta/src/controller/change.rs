//! One partition's change toward target replicas, ISR and reassignment state, in the role of
//! Kafka's `PartitionChangeBuilder`: a reassignment whose target replicas are all in sync
//! completes (the removing replicas leave replicas and ISR), a leader that is no longer valid is
//! replaced, and the result is the smallest `PartitionChange` that gets there (or none).

use uuid::Uuid;

use crate::image::MetadataImage;
use crate::records::{NodeId, PartitionChange, PartitionRecord};

/// How a new leader may be chosen when the current one is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elect {
    /// From the target ISR only.
    Online,
    /// From the target ISR, else any active target replica (the ISR becomes that replica
    /// alone: records it lacks are lost).
    Unclean,
}

/// Where a change should take a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
    pub adding: Vec<NodeId>,
    pub removing: Vec<NodeId>,
    pub elect: Elect,
}

impl Target {
    /// The partition as it is (a change then only follows from completion or election).
    pub fn current(p: &PartitionRecord, elect: Elect) -> Target {
        Target {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            adding: p.adding.clone(),
            removing: p.removing.clone(),
            elect,
        }
    }
}

/// The replicas, ISR and reassignment state a move reaches once complete: every target
/// replica (replicas without the removing ones) in the ISR without the removing ones. `None`
/// while a target replica is still catching up, or if nothing would be left.
fn completed(t: &Target) -> Option<(Vec<NodeId>, Vec<NodeId>)> {
    if t.adding.is_empty() && t.removing.is_empty() {
        return None;
    }
    let isr: Vec<NodeId> = t.isr.iter().copied().filter(|r| !t.removing.contains(r)).collect();
    let replicas: Vec<NodeId> = t.replicas.iter().copied().filter(|r| !t.removing.contains(r)).collect();
    if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
        return None;
    }
    Some((replicas, isr))
}

/// The change that takes `p` to `t`, or `None` if it is there already. `unavailable`: a
/// broker that may not lead even if the image still calls it active (it is being fenced or
/// shut down in the same step).
pub fn build(
    img: &MetadataImage,
    topic_id: Uuid,
    p: &PartitionRecord,
    mut t: Target,
    unavailable: Option<NodeId>,
) -> Option<PartitionChange> {
    if let Some((replicas, isr)) = completed(&t) {
        t.replicas = replicas;
        t.isr = isr;
        t.adding.clear();
        t.removing.clear();
    }
    let acceptable = |r: NodeId| img.is_active(r) && Some(r) != unavailable;
    let valid = |r: NodeId, isr: &[NodeId]| isr.contains(&r) && acceptable(r);
    // The current leader stays if it can; else the first valid replica in target order (the
    // preferred one first).
    let mut leader = if p.leader >= 0 && valid(p.leader, &t.isr) {
        p.leader
    } else {
        t.replicas.iter().copied().find(|r| valid(*r, &t.isr)).unwrap_or(-1)
    };
    if leader == -1
        && t.elect == Elect::Unclean
        && let Some(r) = t.replicas.iter().copied().find(|r| acceptable(*r))
    {
        leader = r;
        t.isr = vec![r];
    }
    let mut change = PartitionChange { topic_id, partition: p.partition, ..PartitionChange::default() };
    if leader != p.leader {
        change.leader = Some(leader);
    } else if leader >= 0 && p.replicas.iter().any(|r| !t.replicas.contains(r)) {
        // A replica leaves: a new leader epoch, so its fetches are fenced (Kafka does this).
        change.leader = Some(leader);
    }
    // An empty ISR is never written: the last member stays, so the partition can come back.
    if t.isr != p.isr && !t.isr.is_empty() {
        change.isr = Some(t.isr);
    }
    if t.replicas != p.replicas {
        change.replicas = Some(t.replicas);
    }
    if t.adding != p.adding {
        change.adding = Some(t.adding);
    }
    if t.removing != p.removing {
        change.removing = Some(t.removing);
    }
    let unchanged = change.leader.is_none()
        && change.isr.is_none()
        && change.replicas.is_none()
        && change.adding.is_none()
        && change.removing.is_none();
    (!unchanged).then_some(change)
}
