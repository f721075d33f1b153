//! The planner on fixtures and on random clusters (proptest): every constraint holds, a single
//! broker added or removed costs the fewest moves, the same input gives the same plan.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn brokers(ids: &[i32]) -> Vec<Broker> {
    ids.iter().map(|id| Broker { id: *id, rack: None }).collect()
}

fn racked(ids: &[i32], racks: usize) -> Vec<Broker> {
    ids.iter().map(|id| Broker { id: *id, rack: Some(format!("zone-{}", (*id as usize) % racks)) }).collect()
}

/// `n` partitions of topic `t` placed round robin on `on` with replication factor `rf`.
fn striped(on: &[i32], n: i32, rf: usize) -> Vec<Assignment> {
    (0..n)
        .map(|p| Assignment {
            topic: "t".into(),
            partition: p,
            replicas: (0..rf).map(|k| on[(p as usize + k) % on.len()]).collect(),
        })
        .collect()
}

fn apply(parts: &[Assignment], moves: &[Move]) -> Vec<Assignment> {
    let mut out = parts.to_vec();
    for m in moves {
        let a = out.iter_mut().find(|a| a.topic == m.topic && a.partition == m.partition).expect("moved partition");
        assert_eq!(a.replicas, m.from, "a move starts from the current replicas");
        a.replicas = m.to.clone();
    }
    out
}

fn counts(brokers: &[Broker], parts: &[Assignment], leaders_only: bool) -> BTreeMap<i32, usize> {
    let mut c: BTreeMap<i32, usize> = brokers.iter().map(|b| (b.id, 0)).collect();
    for a in parts {
        let replicas = if leaders_only { &a.replicas[..1] } else { &a.replicas[..] };
        for r in replicas {
            *c.entry(*r).or_default() += 1;
        }
    }
    c
}

fn spread(c: &BTreeMap<i32, usize>) -> usize {
    c.values().max().unwrap_or(&0) - c.values().min().unwrap_or(&0)
}

/// Constraints 1 and 2 of the module docs, and 3 and 4 when `balanced` is asked for.
fn check(brokers: &[Broker], before: &[Assignment], after: &[Assignment], balanced: bool) {
    let ids: BTreeSet<i32> = brokers.iter().map(|b| b.id).collect();
    let rack: BTreeMap<i32, Option<&str>> = brokers.iter().map(|b| (b.id, b.rack.as_deref())).collect();
    let racks: BTreeSet<Option<&str>> = rack.values().copied().collect();
    for (b, a) in before.iter().zip(after) {
        assert_eq!(b.replicas.len(), a.replicas.len(), "replication factor kept: {a:?}");
        let set: BTreeSet<i32> = a.replicas.iter().copied().collect();
        assert_eq!(set.len(), a.replicas.len(), "no duplicate replica: {a:?}");
        assert!(set.is_subset(&ids), "every replica on a kept broker: {a:?}");
        let spanned: BTreeSet<Option<&str>> = a.replicas.iter().map(|r| rack[r]).collect();
        assert_eq!(spanned.len(), a.replicas.len().min(racks.len()), "rack spread: {a:?}");
    }
    if balanced {
        assert!(spread(&counts(brokers, after, false)) <= 1, "replicas {:?}", counts(brokers, after, false));
        // A partition with one replica leads where its replica is: leaders are balanced by
        // reordering only where every partition has a choice.
        if after.iter().all(|a| a.replicas.len() >= 2) {
            assert!(spread(&counts(brokers, after, true)) <= 1, "leaders {:?}", counts(brokers, after, true));
        }
    }
}

#[test]
fn a_new_broker_gets_its_share_and_nothing_else_moves() {
    let old = [1, 2, 3];
    let parts = striped(&old, 12, 3);
    let all = brokers(&[1, 2, 3, 4]);
    let moves = plan(&all, &parts).expect("plan");
    let after = apply(&parts, &moves);
    check(&all, &parts, &after, true);
    let c = counts(&all, &after, false);
    assert_eq!(c[&4], 9, "36 replicas over 4 brokers");
    assert_eq!(moves.iter().filter(|m| m.copies_data()).count(), 9, "one data move per replica it gets");
    assert!(moves.iter().all(|m| m.adding().iter().all(|r| *r == 4)), "replicas only move onto the new broker");
}

#[test]
fn a_departing_broker_is_drained_with_one_move_per_replica() {
    let parts = striped(&[1, 2, 3, 4], 8, 2);
    let kept = brokers(&[1, 2, 3]);
    let moves = plan(&kept, &parts).expect("plan");
    let after = apply(&parts, &moves);
    check(&kept, &parts, &after, true);
    let held = parts.iter().filter(|a| a.replicas.contains(&4)).count();
    assert_eq!(moves.iter().filter(|m| m.copies_data()).count(), held);
}

#[test]
fn a_balanced_cluster_needs_no_move_and_the_plan_is_deterministic() {
    let parts = striped(&[1, 2, 3], 9, 2);
    let all = brokers(&[1, 2, 3]);
    assert_eq!(plan(&all, &parts).expect("plan"), vec![]);
    let parts = striped(&[1, 2], 7, 2);
    let all = brokers(&[1, 2, 3, 4, 5]);
    assert_eq!(plan(&all, &parts), plan(&all, &parts));
}

#[test]
fn too_few_brokers_for_the_replication_factor_is_refused() {
    let parts = striped(&[1, 2, 3], 3, 3);
    let e = plan(&brokers(&[1, 2]), &parts).expect_err("infeasible");
    assert_eq!(e, Infeasible::ReplicationFactor { topic: "t".into(), rf: 3, brokers: 2 });
    assert_eq!(e.to_string(), "t has replication factor 3 but only 2 broker(s) would remain");
}

#[test]
fn replicas_spread_over_racks() {
    // Created before racks were known: both replicas of some partitions in one zone.
    let parts = striped(&[0, 2, 1, 3], 8, 2);
    let zones = racked(&[0, 1, 2, 3], 2);
    let moves = plan(&zones, &parts).expect("plan");
    let after = apply(&parts, &moves);
    check(&zones, &parts, &after, true);
}

#[test]
fn leaders_follow_when_a_broker_holds_only_followers() {
    // Broker 3 holds replicas but leads nothing: reorders, no data move.
    let pairs = [[1, 3], [2, 3], [1, 2], [1, 3], [2, 3], [2, 1]];
    let parts: Vec<Assignment> =
        (0..6).map(|p| Assignment { topic: "t".into(), partition: p, replicas: pairs[p as usize].to_vec() }).collect();
    let all = brokers(&[1, 2, 3]);
    let moves = plan(&all, &parts).expect("plan");
    let after = apply(&parts, &moves);
    assert!(spread(&counts(&all, &after, true)) <= 1, "{:?}", counts(&all, &after, true));
    assert_eq!(counts(&all, &after, false), counts(&all, &parts, false), "replica counts were balanced enough");
}

/// A random cluster: brokers `1..=n`, topics of random sizes and replication factors, placed
/// on a random subset of the brokers (so some hold nothing, some too much).
fn cluster() -> impl Strategy<Value = (usize, Vec<Assignment>)> {
    cluster_of(2, 0)
}

/// As [`cluster`], with at least `min_brokers` brokers and every replication factor at most
/// the broker count less `spare`.
fn cluster_of(min_brokers: usize, spare: usize) -> impl Strategy<Value = (usize, Vec<Assignment>)> {
    (min_brokers..7).prop_flat_map(move |n| {
        let topic = (1usize..=(n - spare).min(3), 1i32..12, proptest::collection::vec(any::<u32>(), 12));
        (Just(n), proptest::collection::vec(topic, 1..4)).prop_map(|(n, topics)| {
            let mut parts = Vec::new();
            for (t, (rf, count, seeds)) in topics.into_iter().enumerate() {
                for p in 0..count {
                    // The first `rf` of a permutation of the brokers shuffled by the seed.
                    let mut ids: Vec<i32> = (1..=n as i32).collect();
                    let mut k = u64::from(seeds[p as usize % seeds.len()]) ^ (p as u64) << 32;
                    for i in (1..ids.len()).rev() {
                        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        ids.swap(i, (k >> 33) as usize % (i + 1));
                    }
                    parts.push(Assignment { topic: format!("t{t}"), partition: p, replicas: ids[..rf].to_vec() });
                }
            }
            (n, parts)
        })
    })
}

proptest! {
    #[test]
    fn every_constraint_holds((n, parts) in cluster()) {
        let ids: Vec<i32> = (1..=n as i32).collect();
        let all = brokers(&ids);
        let moves = plan(&all, &parts).expect("plan");
        let after = apply(&parts, &moves);
        check(&all, &parts, &after, true);
        prop_assert_eq!(plan(&all, &after).expect("again"), vec![], "a plan's result needs no further move");
    }

    #[test]
    fn every_constraint_holds_with_racks((n, parts) in cluster(), racks in 2usize..4) {
        let ids: Vec<i32> = (1..=n as i32).collect();
        let zones = racked(&ids, racks.min(n));
        let moves = plan(&zones, &parts).expect("plan");
        let after = apply(&parts, &moves);
        // Racks of equal size (every broker id modulo the rack count) can always be balanced.
        let even = n % racks.min(n) == 0;
        check(&zones, &parts, &after, even);
    }

    #[test]
    fn draining_the_highest_broker_moves_only_its_replicas((n, parts) in cluster_of(3, 1)) {
        let ids: Vec<i32> = (1..=n as i32).collect();
        let all = brokers(&ids);
        let balanced = apply(&parts, &plan(&all, &parts).expect("plan"));
        let kept = brokers(&ids[..n - 1]);
        let moves = plan(&kept, &balanced).expect("drain");
        let after = apply(&balanced, &moves);
        check(&kept, &balanced, &after, false);
        let held = balanced.iter().filter(|a| a.replicas.contains(&(n as i32))).count();
        let copies = moves.iter().filter(|m| m.copies_data()).count();
        // Each replica on the departing broker moves; a few more only when its partitions'
        // other replicas crowd the brokers left (never more than it held again).
        prop_assert!(copies >= held && copies <= 2 * held, "{} moves for {} replicas", copies, held);
    }

    #[test]
    fn adding_a_broker_moves_only_onto_it((n, parts) in cluster()) {
        let ids: Vec<i32> = (1..=n as i32).collect();
        let all = brokers(&ids);
        let balanced = apply(&parts, &plan(&all, &parts).expect("plan"));
        let grown: Vec<i32> = (1..=n as i32 + 1).collect();
        let more = brokers(&grown);
        let moves = plan(&more, &balanced).expect("grow");
        let after = apply(&balanced, &moves);
        check(&more, &balanced, &after, true);
        let new = n as i32 + 1;
        let got = counts(&more, &after, false)[&new];
        prop_assert_eq!(moves.iter().filter(|m| m.copies_data()).count(), got);
        prop_assert!(moves.iter().all(|m| m.adding().iter().all(|r| *r == new)));
    }
}
