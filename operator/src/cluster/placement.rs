//! Where partition replicas should live: a pure planner from the brokers a cluster keeps (with
//! their racks) and every partition's current replicas to the fewest replica moves that reach
//! balance. It is what the Cluster controller runs to spread data onto new brokers (scale up) and
//! off departing ones (scale down), in place of Cruise Control.
//!
//! Constraints, strongest first:
//! 1. Every replica is on a kept broker, the replication factor of every partition stays.
//! 2. Rack spread: where brokers have racks, each partition spans as many racks as it can
//!    (`min(replication factor, racks)`).
//! 3. Replica counts per broker are within one of each other (as far as the racks allow).
//! 4. Preferred leaders (a partition's first replica, which a preferred election makes its
//!    leader) per broker are within one of each other, by reordering replicas (no data moves;
//!    a partition with a single replica leads where that replica is).
//!
//! Minimal: a replica moves only to repair 1 or 2, or from a broker above the balanced count
//! toward one below it (directly where the racks allow, else along the shortest chain), each
//! move closing the gap by one. Deterministic: the same input always gives the same plan
//! (brokers and partitions are visited in order).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A broker the cluster keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub id: i32,
    pub rack: Option<String>,
}

/// A partition and its replicas (for one being moved: where it is going).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// One partition's new replica list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub partition: i32,
    pub from: Vec<i32>,
    pub to: Vec<i32>,
}

impl Move {
    /// Whether data moves (the replica set changes), not only the order (preferred leader).
    pub fn copies_data(&self) -> bool {
        let a: BTreeSet<i32> = self.from.iter().copied().collect();
        let b: BTreeSet<i32> = self.to.iter().copied().collect();
        a != b
    }

    /// Replicas this move adds.
    pub fn adding(&self) -> Vec<i32> {
        self.to.iter().copied().filter(|r| !self.from.contains(r)).collect()
    }
}

/// Why no placement exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Infeasible {
    #[error("{topic} has replication factor {rf} but only {brokers} broker(s) would remain")]
    ReplicationFactor { topic: String, rf: usize, brokers: usize },
}

struct State<'a> {
    brokers: Vec<i32>,
    rack: BTreeMap<i32, &'a str>,
    racks: usize,
    parts: Vec<(String, i32, Vec<i32>)>,
    count: BTreeMap<i32, usize>,
}

impl State<'_> {
    fn distinct_racks(&self, replicas: &[i32]) -> usize {
        replicas.iter().map(|r| self.rack.get(r).copied().unwrap_or("")).collect::<BTreeSet<_>>().len()
    }

    /// Racks a partition of `rf` replicas should span.
    fn wanted_racks(&self, rf: usize) -> usize {
        rf.min(self.racks)
    }

    /// Whether replacing `from` by `to` in partition `i` keeps its rack spread.
    fn rack_ok(&self, i: usize, from: i32, to: i32) -> bool {
        let r = &self.parts[i].2;
        let after: Vec<i32> = r.iter().map(|x| if *x == from { to } else { *x }).collect();
        // A partition never spans more racks than it wants, so "keeps" is "never fewer".
        self.distinct_racks(&after) >= self.distinct_racks(r)
    }

    fn replace(&mut self, i: usize, from: i32, to: i32) {
        for r in &mut self.parts[i].2 {
            if *r == from {
                *r = to;
            }
        }
        if let Some(c) = self.count.get_mut(&from) {
            *c -= 1;
        }
        *self.count.entry(to).or_default() += 1;
    }

    /// The kept broker with the fewest replicas that can take `from`'s place in partition `i`
    /// (not already a replica; racks first: one the partition lacks, then any keeping its
    /// spread).
    fn best_target(&self, i: usize, from: i32) -> Option<i32> {
        let r = &self.parts[i].2;
        let present: BTreeSet<&str> =
            r.iter().filter(|x| **x != from).map(|x| self.rack.get(x).copied().unwrap_or("")).collect();
        self.brokers
            .iter()
            .copied()
            .filter(|b| !r.contains(b))
            .filter(|b| self.rack_ok(i, from, *b))
            .min_by_key(|b| (present.contains(self.rack.get(b).copied().unwrap_or("")), self.count[b], *b))
    }
}

/// The moves that take `partitions` to a balanced placement on `brokers` (in partition order).
pub fn plan(brokers: &[Broker], partitions: &[Assignment]) -> Result<Vec<Move>, Infeasible> {
    let mut ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    ids.dedup();
    let rack: BTreeMap<i32, &str> = brokers.iter().map(|b| (b.id, b.rack.as_deref().unwrap_or(""))).collect();
    let racks = if brokers.iter().any(|b| b.rack.is_some()) { rack.values().collect::<BTreeSet<_>>().len() } else { 1 };
    let mut parts: Vec<(String, i32, Vec<i32>)> =
        partitions.iter().map(|a| (a.topic.clone(), a.partition, a.replicas.clone())).collect();
    parts.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    for (topic, _, r) in &parts {
        if r.len() > ids.len() {
            return Err(Infeasible::ReplicationFactor { topic: topic.clone(), rf: r.len(), brokers: ids.len() });
        }
    }
    let mut count: BTreeMap<i32, usize> = ids.iter().map(|b| (*b, 0)).collect();
    for (_, _, r) in &parts {
        for b in r {
            *count.entry(*b).or_default() += 1;
        }
    }
    let original: Vec<Vec<i32>> = parts.iter().map(|p| p.2.clone()).collect();
    let mut st = State { brokers: ids.clone(), rack, racks, parts, count };

    // 1. Replicas on brokers that go (or duplicates, which no cluster should have) move first.
    for i in 0..st.parts.len() {
        loop {
            let r = &st.parts[i].2;
            let Some(&gone) = r.iter().find(|b| !st.brokers.contains(b)) else { break };
            let target = st.best_target(i, gone).or_else(|| {
                st.brokers.iter().copied().filter(|b| !st.parts[i].2.contains(b)).min_by_key(|b| (st.count[b], *b))
            });
            match target {
                Some(t) => st.replace(i, gone, t),
                None => {
                    let (topic, _, r) = &st.parts[i];
                    return Err(Infeasible::ReplicationFactor {
                        topic: topic.clone(),
                        rf: r.len(),
                        brokers: st.brokers.len(),
                    });
                }
            }
        }
    }

    // 2. Rack spread: a replica on a rack the partition already uses moves to a rack it lacks.
    if st.racks > 1 {
        for i in 0..st.parts.len() {
            while st.distinct_racks(&st.parts[i].2) < st.wanted_racks(st.parts[i].2.len()) {
                let r = st.parts[i].2.clone();
                let dup = r
                    .iter()
                    .copied()
                    .filter(|x| r.iter().filter(|y| st.rack[*y] == st.rack[x]).count() > 1)
                    .max_by_key(|x| (st.count[x], *x));
                let Some(dup) = dup else { break };
                let present: BTreeSet<&str> = r.iter().map(|x| st.rack[x]).collect();
                let to = st
                    .brokers
                    .iter()
                    .copied()
                    .filter(|b| !present.contains(st.rack[b]))
                    .min_by_key(|b| (st.count[b], *b));
                match to {
                    Some(t) => st.replace(i, dup, t),
                    None => break,
                }
            }
        }
    }

    // 3. Replica counts: from the fullest broker toward one that holds two fewer or less, by a
    //    direct move where one keeps the racks' spread, else by the shortest chain of moves that
    //    does (each broker on the way gives one and takes one), until all are within one.
    loop {
        let mut by_count: Vec<i32> = st.brokers.clone();
        by_count.sort_by_key(|b| (std::cmp::Reverse(st.count[b]), *b));
        let path = by_count.iter().find_map(|hi| replica_chain(&st, *hi));
        let Some(path) = path else { break };
        for (i, from, to) in path {
            st.replace(i, from, to);
        }
    }

    // 4. Preferred leaders: shift leadership along a chain of partitions (each led by one broker
    //    and holding the next) from the broker leading most to one leading fewest.
    balance_leaders(&mut st);

    Ok(st
        .parts
        .iter()
        .zip(original)
        .filter(|((_, _, to), from)| to != from)
        .map(|((topic, partition, to), from)| Move {
            topic: topic.clone(),
            partition: *partition,
            from,
            to: to.clone(),
        })
        .collect())
}

/// Breadth-first from `hi` over "a replica can move from a to b" (a partition holds a and not b,
/// and keeps its rack spread; a follower's replica preferred): the shortest chain of moves to a
/// broker holding at most `count[hi] - 2`, as (partition, from, to) steps.
fn replica_chain(st: &State<'_>, hi: i32) -> Option<Vec<(usize, i32, i32)>> {
    let target = st.count[&hi];
    let mut prev: BTreeMap<i32, (i32, usize)> = BTreeMap::new();
    let mut queue = VecDeque::from([hi]);
    let mut seen = BTreeSet::from([hi]);
    while let Some(a) = queue.pop_front() {
        let mut lows: Vec<i32> = st.brokers.iter().copied().filter(|b| !seen.contains(b)).collect();
        lows.sort_by_key(|b| (st.count[b], *b));
        for b in lows {
            let movable = (0..st.parts.len())
                .filter(|&i| st.parts[i].2.contains(&a) && !st.parts[i].2.contains(&b) && st.rack_ok(i, a, b))
                .min_by_key(|&i| (st.parts[i].2.first() == Some(&a), i));
            let Some(i) = movable else { continue };
            seen.insert(b);
            prev.insert(b, (a, i));
            if st.count[&b] + 2 <= target {
                let mut path = Vec::new();
                let mut at = b;
                while let Some(&(from, i)) = prev.get(&at) {
                    path.push((i, from, at));
                    at = from;
                }
                path.reverse();
                return Some(path);
            }
            queue.push_back(b);
        }
    }
    None
}

fn leaders(st: &State<'_>) -> BTreeMap<i32, usize> {
    let mut l: BTreeMap<i32, usize> = st.brokers.iter().map(|b| (*b, 0)).collect();
    for (_, _, r) in &st.parts {
        if let Some(f) = r.first() {
            *l.entry(*f).or_default() += 1;
        }
    }
    l
}

fn balance_leaders(st: &mut State<'_>) {
    // Each round moves one leadership from a broker above the rest; it ends when no chain
    // lowers the spread (at most one leadership per partition, so it terminates).
    for _ in 0..=st.parts.len() * st.brokers.len() {
        let l = leaders(st);
        let (Some(max), Some(min)) = (l.values().max().copied(), l.values().min().copied()) else { return };
        if max <= min + 1 {
            return;
        }
        let mut shifted = false;
        let mut tops: Vec<i32> = l.iter().filter(|(_, n)| **n == max).map(|(b, _)| *b).collect();
        tops.sort_unstable();
        for top in tops {
            if let Some(path) = chain(st, &l, top, max) {
                for (i, to) in path {
                    let r = &mut st.parts[i].2;
                    if let Some(pos) = r.iter().position(|x| *x == to) {
                        r.swap(0, pos);
                    }
                }
                shifted = true;
                break;
            }
        }
        if !shifted {
            return;
        }
    }
}

/// Breadth-first from `top` over "leads a partition that also holds": the shortest chain to a
/// broker leading at most `max - 2`, as (partition, new first replica) steps.
fn chain(st: &State<'_>, l: &BTreeMap<i32, usize>, top: i32, max: usize) -> Option<Vec<(usize, i32)>> {
    let mut prev: BTreeMap<i32, (i32, usize)> = BTreeMap::new();
    let mut queue = VecDeque::from([top]);
    let mut seen = BTreeSet::from([top]);
    while let Some(x) = queue.pop_front() {
        for (i, (_, _, r)) in st.parts.iter().enumerate() {
            if r.first() != Some(&x) {
                continue;
            }
            for &y in &r[1..] {
                if !seen.insert(y) {
                    continue;
                }
                prev.insert(y, (x, i));
                if l.get(&y).copied().unwrap_or(0) + 2 <= max {
                    let mut path = Vec::new();
                    let mut at = y;
                    while let Some(&(from, i)) = prev.get(&at) {
                        path.push((i, at));
                        at = from;
                    }
                    path.reverse();
                    return Some(path);
                }
                queue.push_back(y);
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
