//! When brokers come or go, what moves next: a pure function of the brokers the Cluster keeps,
//! the partitions as the cluster reports them, the moves in flight and the spec's limits. It runs
//! on every reconcile from the cluster's own metadata (never from memory), so a rebalance or a
//! drain interrupted by an operator restart carries on where the cluster is.
//!
//! The plan is [`placement::plan`] of the partitions as they will be once the moves in flight
//! complete; moves start at most `max_concurrent` at a time (reorders that only change the
//! preferred leader copy nothing and start at once). Throttles follow `kafka-reassign-partitions`:
//! a moving partition's current replicas are listed as leader-throttled, the ones it adds as
//! follower-throttled.

use std::collections::BTreeMap;

use super::placement::{self, Assignment, Broker, Move};
use crate::kafka::{Moving, PartitionInfo};

/// What the reconcile observed.
pub struct Observed<'a> {
    /// The brokers that should hold data (after a scale-down: those that stay).
    pub keep: Vec<Broker>,
    pub partitions: &'a [PartitionInfo],
    pub moving: &'a BTreeMap<(String, i32), Moving>,
    /// Each topic's effective `min.insync.replicas` (topics not listed: 1).
    pub min_insync: &'a BTreeMap<String, i32>,
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing to move and nothing moving.
    Balanced,
    /// Start these moves; `waiting` more data moves come after them, `in_flight` are moving.
    Move { start: Vec<Move>, in_flight: usize, waiting: usize },
    /// Moves are in flight; `waiting` more start once some complete.
    Moving { in_flight: usize, waiting: usize },
    /// No placement on the kept brokers exists.
    Infeasible(String),
}

/// The partitions as they will be once every move in flight completes.
pub fn assignments(partitions: &[PartitionInfo], moving: &BTreeMap<(String, i32), Moving>) -> Vec<Assignment> {
    partitions
        .iter()
        .map(|p| Assignment {
            topic: p.topic.clone(),
            partition: p.partition,
            replicas: moving.get(&(p.topic.clone(), p.partition)).map_or_else(|| p.replicas.clone(), Moving::target),
        })
        .collect()
}

/// Decides the next moves. `max_concurrent`: data moves in flight at once (at least one).
pub fn next(obs: &Observed<'_>, max_concurrent: usize) -> Next {
    let keep = obs.keep.len();
    for (topic, min) in obs.min_insync {
        if usize::try_from(*min).unwrap_or(0) > keep {
            return Next::Infeasible(format!(
                "{topic} needs min.insync.replicas={min} in-sync replicas but only {keep} broker(s) would remain"
            ));
        }
    }
    let planned = match placement::plan(&obs.keep, &assignments(obs.partitions, obs.moving)) {
        Ok(p) => p,
        Err(e) => return Next::Infeasible(e.to_string()),
    };
    let in_flight = obs.moving.len();
    let (reorders, data): (Vec<Move>, Vec<Move>) = planned
        .into_iter()
        .filter(|m| !obs.moving.contains_key(&(m.topic.clone(), m.partition)))
        .partition(|m| !m.copies_data());
    let room = max_concurrent.max(1).saturating_sub(in_flight);
    let waiting = data.len().saturating_sub(room);
    let mut start: Vec<Move> = data.into_iter().take(room).collect();
    // A reorder waits for moves in flight: their completion may change the leaders to balance.
    if in_flight == 0 || !start.is_empty() {
        start.extend(reorders);
    }
    if !start.is_empty() {
        Next::Move { start, in_flight, waiting }
    } else if in_flight > 0 {
        Next::Moving { in_flight, waiting }
    } else {
        Next::Balanced
    }
}

/// The topic configs `kafka-reassign-partitions --throttle` would set for these moves (in flight
/// and starting): per topic, `leader.replication.throttled.replicas` (each partition's current
/// replicas) and `follower.replication.throttled.replicas` (the replicas it adds).
pub fn throttled_replicas(
    partitions: &[PartitionInfo],
    moving: &BTreeMap<(String, i32), Moving>,
    starting: &[Move],
) -> BTreeMap<String, (String, String)> {
    let mut lists: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut add = |topic: &str, p: i32, sources: &[i32], adding: &[i32]| {
        let e = lists.entry(topic.to_string()).or_default();
        e.0.extend(sources.iter().map(|b| format!("{p}:{b}")));
        e.1.extend(adding.iter().map(|b| format!("{p}:{b}")));
    };
    for ((topic, p), m) in moving {
        let sources: Vec<i32> = m.replicas.iter().copied().filter(|r| !m.adding.contains(r)).collect();
        add(topic, *p, &sources, &m.adding);
    }
    for m in starting.iter().filter(|m| m.copies_data()) {
        let from = partitions
            .iter()
            .find(|p| p.topic == m.topic && p.partition == m.partition)
            .map_or_else(|| m.from.clone(), |p| p.replicas.clone());
        add(&m.topic, m.partition, &from, &m.adding());
    }
    lists
        .into_iter()
        .map(|(t, (mut l, mut f))| {
            l.sort();
            l.dedup();
            f.sort();
            f.dedup();
            (t, (l.join(","), f.join(",")))
        })
        .collect()
}

/// Partitions whose leader is not their preferred (first) replica although that replica is in
/// sync: a preferred election gives leadership back to balance.
pub fn off_preferred(partitions: &[PartitionInfo]) -> Vec<(String, i32)> {
    partitions
        .iter()
        .filter(|p| p.replicas.first().is_some_and(|f| *f != p.leader && p.isr.contains(f)))
        .map(|p| (p.topic.clone(), p.partition))
        .collect()
}

/// Bytes a move still has to copy: the leader's size for each replica it adds, less what the
/// adding replica already holds (`sizes`: (topic, partition, broker) -> bytes, where known).
pub fn bytes_left(
    partitions: &[PartitionInfo],
    moving: &BTreeMap<(String, i32), Moving>,
    waiting: &[Move],
    sizes: &BTreeMap<(String, i32, i32), i64>,
) -> i64 {
    let leader_size = |t: &str, p: i32| {
        partitions
            .iter()
            .find(|x| x.topic == t && x.partition == p)
            .and_then(|x| sizes.get(&(t.to_string(), p, x.leader)))
            .copied()
            .unwrap_or(0)
    };
    let mut left = 0i64;
    for ((t, p), m) in moving {
        let full = leader_size(t, *p);
        for a in &m.adding {
            left += (full - sizes.get(&(t.clone(), *p, *a)).copied().unwrap_or(0)).max(0);
        }
    }
    for m in waiting {
        left += leader_size(&m.topic, m.partition) * m.adding().len() as i64;
    }
    left
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn part(t: &str, p: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionInfo {
        PartitionInfo { topic: t.into(), partition: p, leader, replicas: replicas.to_vec(), isr: isr.to_vec() }
    }

    fn keep(ids: &[i32]) -> Vec<Broker> {
        ids.iter().map(|id| Broker { id: *id, rack: None }).collect()
    }

    #[test]
    fn a_drain_starts_at_most_the_concurrency_and_resumes_from_what_is_in_flight() {
        let parts: Vec<PartitionInfo> = (0..6).map(|p| part("t", p, 2, &[2, 0], &[0, 2])).collect();
        let none = BTreeMap::new();
        let min = BTreeMap::new();
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &none, min_insync: &min };
        let Next::Move { start, in_flight, waiting } = next(&obs, 2) else { panic!("{:?}", next(&obs, 2)) };
        assert_eq!((start.iter().filter(|m| m.copies_data()).count(), in_flight, waiting), (2, 0, 4));
        assert!(start.iter().all(|m| !m.to.contains(&2)));
        // As if the operator restarted with those two in flight: the same plan carries on.
        let moving: BTreeMap<(String, i32), Moving> = start
            .iter()
            .filter(|m| m.copies_data())
            .map(|m| {
                let mut replicas = m.to.clone();
                replicas.push(2);
                ((m.topic.clone(), m.partition), Moving { replicas, adding: m.adding(), removing: vec![2] })
            })
            .collect();
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &moving, min_insync: &min };
        assert_eq!(next(&obs, 2), Next::Moving { in_flight: 2, waiting: 4 });
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &moving, min_insync: &min };
        let Next::Move { start, .. } = next(&obs, 4) else { panic!() };
        assert_eq!(start.iter().filter(|m| m.copies_data()).count(), 2);
        assert!(start.iter().all(|m| !moving.contains_key(&(m.topic.clone(), m.partition))));
    }

    #[test]
    fn a_drain_that_cannot_be_done_says_why() {
        let parts = vec![part("t", 0, 0, &[0, 1, 2], &[0, 1, 2])];
        let none = BTreeMap::new();
        let min = BTreeMap::new();
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &none, min_insync: &min };
        assert_eq!(
            next(&obs, 5),
            Next::Infeasible("t has replication factor 3 but only 2 broker(s) would remain".into())
        );
        let parts = vec![part("t", 0, 0, &[0, 1], &[0, 1])];
        let min = BTreeMap::from([("t".to_string(), 3)]);
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &none, min_insync: &min };
        assert!(matches!(next(&obs, 5), Next::Infeasible(m) if m.contains("min.insync.replicas=3")));
    }

    #[test]
    fn balanced_means_nothing_to_do() {
        let parts = vec![part("t", 0, 0, &[0, 1], &[0, 1]), part("t", 1, 1, &[1, 0], &[0, 1])];
        let none = BTreeMap::new();
        let min = BTreeMap::new();
        let obs = Observed { keep: keep(&[0, 1]), partitions: &parts, moving: &none, min_insync: &min };
        assert_eq!(next(&obs, 5), Next::Balanced);
    }

    #[test]
    fn throttles_list_sources_and_new_replicas_as_the_tool_does() {
        let parts = vec![part("t", 0, 0, &[0, 1], &[0, 1]), part("t", 1, 1, &[3, 1, 0], &[0, 1])];
        let moving = BTreeMap::from([(
            ("t".to_string(), 1),
            Moving { replicas: vec![3, 1, 0], adding: vec![3], removing: vec![0] },
        )]);
        let starting = vec![Move { topic: "t".into(), partition: 0, from: vec![0, 1], to: vec![2, 1] }];
        let lists = throttled_replicas(&parts, &moving, &starting);
        assert_eq!(lists["t"], ("0:0,0:1,1:0,1:1".to_string(), "0:2,1:3".to_string()));
    }

    #[test]
    fn preferred_elections_only_where_the_preferred_replica_is_in_sync() {
        let parts =
            vec![part("t", 0, 1, &[0, 1], &[0, 1]), part("t", 1, 1, &[0, 1], &[1]), part("t", 2, 0, &[0, 1], &[0, 1])];
        assert_eq!(off_preferred(&parts), vec![("t".to_string(), 0)]);
    }

    #[test]
    fn bytes_left_counts_what_adding_replicas_still_lack() {
        let parts = vec![part("t", 0, 0, &[2, 0], &[0]), part("t", 1, 1, &[1, 0], &[0, 1])];
        let moving = BTreeMap::from([(
            ("t".to_string(), 0),
            Moving { replicas: vec![2, 0], adding: vec![2], removing: vec![] },
        )]);
        let sizes = BTreeMap::from([
            (("t".to_string(), 0, 0), 1000),
            (("t".to_string(), 0, 2), 400),
            (("t".to_string(), 1, 1), 50),
        ]);
        let waiting = vec![Move { topic: "t".into(), partition: 1, from: vec![1, 0], to: vec![2, 0] }];
        assert_eq!(bytes_left(&parts, &moving, &waiting, &sizes), 600 + 50);
    }
}
