//! The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.
//!
//! Both take the members' subscriptions, the subscribed topics' metadata and the previous target
//! assignment, and return the new target assignment. Neither looks at what members own right
//! now: moving from the current assignment to the target is the reconciliation's job.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// A topic as the assignors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: Uuid,
    pub partitions: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// The target assignment. `members`: member id -> subscribed topic names (only topics in
    /// `topics`, which holds every subscribed topic that exists).
    pub fn assign(
        self,
        members: &BTreeMap<String, BTreeSet<String>>,
        topics: &BTreeMap<String, TopicInfo>,
        previous: &HashMap<String, Assignment>,
    ) -> HashMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(members, topics, previous),
            Assignor::Range => range(members, topics),
        }
    }
}

type Tp = (Uuid, i32);

/// Balanced and sticky: every member keeps what it had in the previous target while that stays
/// within balance; the rest goes to the eligible member with the fewest partitions; then
/// partitions move from the most to the least loaded eligible member until no two eligible
/// members differ by more than one. For identical subscriptions this gives each member
/// `P / M` or `P / M + 1` partitions, as Kafka's uniform assignor does.
fn uniform(
    members: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, TopicInfo>,
    previous: &HashMap<String, Assignment>,
) -> HashMap<String, Assignment> {
    let mut owned: BTreeMap<&str, BTreeSet<Tp>> = members.keys().map(|m| (m.as_str(), BTreeSet::new())).collect();
    if members.is_empty() {
        return HashMap::new();
    }
    let by_id: HashMap<Uuid, &str> = topics.iter().map(|(n, t)| (t.id, n.as_str())).collect();
    let eligible = |m: &str, topic: Uuid| -> bool {
        by_id.get(&topic).is_some_and(|name| members.get(m).is_some_and(|s| s.contains(*name)))
    };
    let all: Vec<Tp> = topics
        .values()
        .filter(|t| members.values().any(|s| topics.iter().any(|(n, x)| x.id == t.id && s.contains(n))))
        .flat_map(|t| (0..t.partitions).map(move |p| (t.id, p)))
        .collect();
    let total = all.len();
    let members_n = members.len();
    // The balanced ceiling for identical subscriptions; with different subscriptions the move
    // pass below does the balancing.
    let ceil = total.div_ceil(members_n).max(1);
    let mut taken: BTreeSet<Tp> = BTreeSet::new();
    for m in members.keys() {
        let Some(prev) = previous.get(m) else { continue };
        for (topic, ps) in prev {
            let Some(t) = topics.values().find(|t| t.id == *topic) else { continue };
            if !eligible(m, *topic) {
                continue;
            }
            for p in ps.iter().filter(|p| **p < t.partitions) {
                let mine = owned.get_mut(m.as_str()).map(|s| s.len()).unwrap_or(0);
                if mine >= ceil || !taken.insert((*topic, *p)) {
                    continue;
                }
                if let Some(s) = owned.get_mut(m.as_str()) {
                    s.insert((*topic, *p));
                }
            }
        }
    }
    for tp in all.iter().filter(|tp| !taken.contains(tp)) {
        let best = owned.iter().filter(|(m, _)| eligible(m, tp.0)).min_by_key(|(m, s)| (s.len(), **m)).map(|(m, _)| *m);
        if let Some(m) = best
            && let Some(s) = owned.get_mut(m)
        {
            s.insert(*tp);
        }
    }
    // Move from heavy to light while any eligible pair differs by more than one.
    loop {
        let mut order: Vec<(&str, usize)> = owned.iter().map(|(m, s)| (*m, s.len())).collect();
        order.sort_by_key(|(m, n)| (*n, *m));
        let mut moved = None;
        'find: for (light, ln) in &order {
            for (heavy, hn) in order.iter().rev() {
                if hn <= &(ln + 1) {
                    break;
                }
                let candidate = owned.get(heavy).and_then(|s| s.iter().rev().find(|tp| eligible(light, tp.0)).copied());
                if let Some(tp) = candidate {
                    moved = Some((*heavy, *light, tp));
                    break 'find;
                }
            }
        }
        let Some((heavy, light, tp)) = moved else { break };
        if let Some(s) = owned.get_mut(heavy) {
            s.remove(&tp);
        }
        if let Some(s) = owned.get_mut(light) {
            s.insert(tp);
        }
    }
    owned.into_iter().map(|(m, tps)| (m.to_string(), to_assignment(tps))).collect()
}

/// Per topic, the members subscribed to it in member id order get consecutive ranges: `P / M`
/// partitions each and one more for the first `P % M`, so co-partitioned topics line up.
fn range(
    members: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, TopicInfo>,
) -> HashMap<String, Assignment> {
    let mut out: HashMap<String, Assignment> = members.keys().map(|m| (m.clone(), Assignment::new())).collect();
    for (name, t) in topics {
        let subs: Vec<&String> = members.iter().filter(|(_, s)| s.contains(name)).map(|(m, _)| m).collect();
        if subs.is_empty() {
            continue;
        }
        let n = usize::try_from(t.partitions).unwrap_or(0);
        let (each, extra) = (n / subs.len(), n % subs.len());
        let mut next = 0usize;
        for (i, m) in subs.into_iter().enumerate() {
            let count = each + usize::from(i < extra);
            if count > 0
                && let Some(a) = out.get_mut(m)
            {
                a.insert(t.id, (next..next + count).filter_map(|p| i32::try_from(p).ok()).collect());
            }
            next += count;
        }
    }
    out
}

fn to_assignment(tps: BTreeSet<Tp>) -> Assignment {
    let mut a = Assignment::new();
    for (t, p) in tps {
        a.entry(t).or_default().insert(p);
    }
    a
}

/// Number of partitions in an assignment.
pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn setup(n_members: usize, partitions: i32) -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, TopicInfo>) {
        let members =
            (0..n_members).map(|i| (format!("m{i}"), BTreeSet::from(["t".to_string()]))).collect::<BTreeMap<_, _>>();
        let topics = BTreeMap::from([("t".to_string(), TopicInfo { id: Uuid::from_u128(7), partitions })]);
        (members, topics)
    }

    #[test]
    fn uniform_is_balanced_and_sticky() {
        let mut prev = HashMap::new();
        let mut sizes = Vec::new();
        for n in [1, 2, 4, 5] {
            let (members, topics) = setup(n, 4);
            let next = Assignor::Uniform.assign(&members, &topics, &prev);
            let mut counts: Vec<usize> = next.values().map(count).collect();
            counts.sort_unstable();
            sizes.push(counts);
            // Sticky: a member that stays keeps as much of what it had as balance allows.
            for (m, a) in &next {
                if let Some(p) = prev.get(m) {
                    let kept = a.values().flatten().filter(|x| p.values().flatten().any(|y| y == *x)).count();
                    assert_eq!(kept, count(p).min(count(a)), "member {m}");
                }
            }
            let total: usize = next.values().map(count).sum();
            assert_eq!(total, 4);
            prev = next;
        }
        assert_eq!(sizes, vec![vec![4], vec![2, 2], vec![1, 1, 1, 1], vec![0, 1, 1, 1, 1]]);
    }

    #[test]
    fn uniform_moves_the_minimum() {
        let (members, topics) = setup(2, 4);
        let first = Assignor::Uniform.assign(&members, &topics, &HashMap::new());
        let (members3, _) = setup(3, 4);
        let second = Assignor::Uniform.assign(&members3, &topics, &first);
        // m0 and m1 each had 2; one of them gives one partition to m2, nothing else moves.
        let moved: usize = ["m0", "m1"]
            .iter()
            .map(|m| {
                count(&first[*m])
                    - second[*m].values().flatten().filter(|p| first[*m].values().flatten().any(|q| q == *p)).count()
            })
            .sum();
        assert_eq!(moved, 1);
        assert_eq!(count(&second["m2"]), 1);
    }

    #[test]
    fn uniform_respects_different_subscriptions() {
        let members = BTreeMap::from([
            ("a".to_string(), BTreeSet::from(["x".to_string()])),
            ("b".to_string(), BTreeSet::from(["x".to_string(), "y".to_string()])),
        ]);
        let topics = BTreeMap::from([
            ("x".to_string(), TopicInfo { id: Uuid::from_u128(1), partitions: 2 }),
            ("y".to_string(), TopicInfo { id: Uuid::from_u128(2), partitions: 2 }),
        ]);
        let a = Assignor::Uniform.assign(&members, &topics, &HashMap::new());
        assert!(a["a"].keys().all(|t| *t == Uuid::from_u128(1)));
        assert_eq!(count(&a["a"]) + count(&a["b"]), 4);
        assert_eq!(a["b"].get(&Uuid::from_u128(2)).map(BTreeSet::len), Some(2));
        assert_eq!(count(&a["a"]), 2);
    }

    #[test]
    fn range_gives_consecutive_ranges() {
        let (members, topics) = setup(3, 7);
        let a = Assignor::Range.assign(&members, &topics, &HashMap::new());
        let t = Uuid::from_u128(7);
        assert_eq!(a["m0"][&t], BTreeSet::from([0, 1, 2]));
        assert_eq!(a["m1"][&t], BTreeSet::from([3, 4]));
        assert_eq!(a["m2"][&t], BTreeSet::from([5, 6]));
    }
}
