//! ElectLeaders: preferred elections (the first replica back to leader) and unclean ones (a
//! leaderless partition led by any active replica, accepting the loss of what it lacks).

use uuid::Uuid;

use super::{Decision, Election, ElectionOutcome, Reply};
use crate::image::MetadataImage;
use crate::records::{NodeId, PartitionChange, PartitionRecord, Record};

/// ElectLeaders over the named partitions, or all of them.
pub(super) fn elect_leaders(img: &MetadataImage, election: Election, partitions: Option<&[(String, i32)]>) -> Decision {
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
        ..PartitionChange::default()
    })
}
