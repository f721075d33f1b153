//! Tests of [`super`]: stored groups, transactional offsets, replay and expiry.

use super::*;

/// Replays writes into a fresh shard, as a new coordinator loads the partition.
fn reload(writes: &[Write], now: i64) -> Shard {
    let mut s = Shard::new(GroupConfig::default(), OffsetConfig::default());
    for w in writes {
        s.replay(0, &w.key().encode(), w.value().as_deref()).unwrap();
    }
    s.finish_load(now);
    s
}

#[test]
fn consumer_groups_are_stored_and_reloaded_without_a_rebalance() {
    use crate::assignor::TopicInfo;
    use crate::consumer::{Catalog, HeartbeatRequest};
    let topic = uuid::Uuid::from_u128(5);
    let catalog = Catalog {
        version: 1,
        topics: [("t".to_string(), TopicInfo { id: topic, partitions: 4 })].into_iter().collect(),
    };
    let join = |m: &str| HeartbeatRequest {
        member_id: m.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Default::default()),
        ..Default::default()
    };
    let beat = |m: &str, epoch: i32, owned: Option<crate::assignor::Assignment>| HeartbeatRequest {
        member_id: m.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned,
        ..Default::default()
    };
    let mut s = Shard::new(GroupConfig::default(), OffsetConfig::default());
    // An empty classic group (offsets only) becomes a consumer group: its record goes.
    s.validate_commit("g", "", None, -1, 9, 0).unwrap();
    let mut log = Vec::new();
    let a = s.consumer_heartbeat("g", &join("a"), &catalog, 0).0;
    log.extend(s.take_writes());
    assert!(log.contains(&Write::Group { group: "g".into(), value: None }));
    s.consumer_heartbeat("g", &join("b"), &catalog, 0);
    log.extend(s.take_writes());
    let r = s.consumer_heartbeat("g", &beat("a", 1, a.assignment.clone()), &catalog, 0).0;
    log.extend(s.take_writes());
    let kept = r.assignment.unwrap();
    s.consumer_heartbeat("g", &beat("a", 1, Some(kept.clone())), &catalog, 0);
    log.extend(s.take_writes());
    let rb = s.consumer_heartbeat("g", &beat("b", 2, Some(Default::default())), &catalog, 0).0;
    assert_eq!(rb.assignment.map(|a| crate::assignor::count(&a)), Some(2));
    log.extend(s.take_writes());
    // Both members reconciled to the target: the rebalances that got them there are counted.
    let done = s.take_rebalances();
    assert!(
        !done.is_empty() && done.iter().all(|r| r.kind == crate::shard::RebalanceKind::Consumer && r.duration_ms == 0),
        "{done:?}"
    );
    // What was written reproduces the group exactly.
    assert_eq!(reload(&log, 0).consumer_group("g").unwrap().stored(), s.consumer_group("g").unwrap().stored());
    // A static member's replacement: the old incarnation's records become tombstones.
    let mut st = join("s1");
    st.instance_id = Some("i".into());
    s.consumer_heartbeat("g", &st, &catalog, 0);
    let mut leave = beat("s1", s.consumer_group("g").unwrap().member("s1").unwrap().epoch, None);
    leave.instance_id = Some("i".into());
    s.consumer_heartbeat("g", &leave.clone_with_epoch(-2), &catalog, 0);
    st.member_id = "s2".into();
    let epochs = (s.consumer_group("g").unwrap().epoch(), s.consumer_group("g").unwrap().target_epoch());
    s.consumer_heartbeat("g", &st, &catalog, 0);
    assert_eq!(epochs, (s.consumer_group("g").unwrap().epoch(), s.consumer_group("g").unwrap().target_epoch()));
    log.extend(s.take_writes());
    let replayed = reload(&log, 0);
    assert!(replayed.consumer_group("g").unwrap().member("s1").is_none());
    assert_eq!(replayed.consumer_group("g").unwrap().stored(), s.consumer_group("g").unwrap().stored());
    // s2 leaves for good; the group is back to a and b.
    let e = s.consumer_group("g").unwrap().member("s2").unwrap().epoch;
    let mut gone = beat("s2", e, None).clone_with_epoch(-1);
    gone.instance_id = Some("i".into());
    s.consumer_heartbeat("g", &gone, &catalog, 0);
    log.extend(s.take_writes());
    // a and b heartbeat (acknowledging what they are told) until the group is stable.
    for _ in 0..4 {
        for m in ["a", "b"] {
            let e = s.consumer_group("g").unwrap().member(m).unwrap().epoch;
            let owned = s.consumer_group("g").unwrap().member(m).unwrap().assigned.clone();
            s.consumer_heartbeat("g", &beat(m, e, Some(owned)), &catalog, 0);
            log.extend(s.take_writes());
        }
    }
    assert_eq!(reload(&log, 0).consumer_group("g").unwrap().stored(), s.consumer_group("g").unwrap().stored());
    let before = s.consumer_group("g").unwrap().clone();
    assert_eq!(before.state(), crate::consumer::ConsumerGroupState::Stable);
    let (ea, eb) = (before.member("a").unwrap().epoch, before.member("b").unwrap().epoch);
    // A steady heartbeat writes nothing.
    s.consumer_heartbeat("g", &beat("b", eb, None), &catalog, 0);
    assert!(s.take_writes().is_empty());

    let mut t = reload(&log, 100);
    let g = t.consumer_group("g").unwrap();
    assert_eq!((g.epoch(), g.target_epoch()), (before.epoch(), before.target_epoch()));
    assert_eq!(g.member("a").unwrap().assigned, before.member("a").unwrap().assigned);
    assert_eq!(g.member("b").unwrap().assigned, before.member("b").unwrap().assigned);
    assert_eq!(crate::assignor::count(&g.member("a").unwrap().assigned), 2);
    assert_eq!(t.list()[0].group_type, "consumer");
    // Members carry on at their epochs: no new group epoch, no rebalance.
    let r = t.consumer_heartbeat("g", &beat("a", ea, None), &catalog, 200).0;
    assert_eq!((r.error, r.member_epoch, r.assignment), (None, ea, None));
    assert_eq!(t.consumer_group("g").unwrap().epoch(), before.epoch());
    // Leaving: the member's records become tombstones; a reload no longer has it.
    t.consumer_heartbeat("g", &beat("b", eb, None).clone_with_epoch(-1), &catalog, 300);
    let w = t.take_writes();
    assert!(
        w.iter().any(|x| matches!(x, Write::Consumer { record: ConsumerKey::Member(m), value: None, .. } if m == "b"))
    );
    log.extend(w);
    let u = reload(&log, 400);
    assert!(u.consumer_group("g").unwrap().member("b").is_none());
    // Deleting the empty group tombstones all of it.
    let mut v = reload(&log, 400);
    v.consumer_heartbeat("g", &beat("a", ea, None).clone_with_epoch(-1), &catalog, 500);
    log.extend(v.take_writes());
    log.extend(v.delete_group("g").unwrap());
    assert!(reload(&log, 600).list().is_empty());
}

trait Epoch {
    fn clone_with_epoch(&self, e: i32) -> Self;
}

impl Epoch for crate::consumer::HeartbeatRequest {
    fn clone_with_epoch(&self, e: i32) -> Self {
        let mut r = self.clone();
        r.member_epoch = e;
        r
    }
}

#[test]
fn transactional_offsets_wait_for_their_marker_and_survive_a_reload() {
    let v = |offset| OffsetValue {
        offset,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp: 100,
        expire_timestamp: None,
    };
    let commit =
        |p: i32, o: i64| Write::Offset { group: "g".into(), topic: "t".into(), partition: p, value: Some(v(o)) };
    let mut s = Shard::new(GroupConfig::default(), OffsetConfig { retention_ms: 1000, metadata_max_bytes: 10 });
    s.validate_txn_commit("g", "", None, -1, 0).unwrap();
    s.stage_txn(7, 10, &[commit(0, 5), commit(1, 6)]);
    assert!(s.has_pending_txn_offset("g", "t", 0) && s.has_pending_txn_offset("g", "t", 1));
    assert!(s.offset("g", "t", 0).is_none(), "invisible before the marker");
    // Pending offsets do not expire, nor does their group go.
    assert!(s.expired(10_000).0.is_empty());
    // A plain commit of t-1 after the transactional one: it wins when the transaction commits.
    s.apply(&[(12, commit(1, 60))]);
    s.end_txn(7, true);
    assert_eq!(s.offset("g", "t", 0).map(|o| o.offset), Some(5));
    assert_eq!(s.offset("g", "t", 1).map(|o| o.offset), Some(60));
    assert!(!s.has_pending_txn_offset("g", "t", 0));
    // An aborted transaction leaves nothing.
    s.stage_txn(8, 20, &[commit(0, 99)]);
    s.end_txn(8, false);
    assert_eq!(s.offset("g", "t", 0).map(|o| o.offset), Some(5));

    // The same from the log: records of producer 9, one still open at the end.
    let mut r = Shard::new(GroupConfig::default(), OffsetConfig::default());
    let key = |p: i32| Key::Offset { group: "h".into(), topic: "t".into(), partition: p }.encode();
    r.replay_txn(0, 9, &key(0), Some(&v(1).encode())).unwrap();
    r.end_txn(9, true);
    r.replay_txn(2, 9, &key(0), Some(&v(2).encode())).unwrap();
    r.finish_load(0);
    assert_eq!(r.offset("h", "t", 0).map(|o| o.offset), Some(1));
    assert!(r.has_pending_txn_offset("h", "t", 0));
    assert_eq!(r.validate_txn_commit("h", "m", None, 3, 0), Err(E::UnknownMemberId));
    assert_eq!(r.list().len(), 1, "a group with only transactional offsets exists");
}

#[test]
fn replay_and_expiry() {
    let mut s = Shard::new(GroupConfig::default(), OffsetConfig { retention_ms: 1000, metadata_max_bytes: 10 });
    let v = OffsetValue {
        offset: 5,
        leader_epoch: 0,
        metadata: String::new(),
        commit_timestamp: 100,
        expire_timestamp: None,
    };
    let k = Key::Offset { group: "g".into(), topic: "t".into(), partition: 0 }.encode();
    s.replay(0, &k, Some(&v.encode())).unwrap();
    s.replay(1, &Key::Offset { group: "g".into(), topic: "t".into(), partition: 1 }.encode(), Some(&v.encode()))
        .unwrap();
    s.replay(2, &Key::Offset { group: "g".into(), topic: "t".into(), partition: 1 }.encode(), None).unwrap();
    s.finish_load(50);
    assert_eq!(s.offset("g", "t", 0).map(|o| o.offset), Some(5));
    assert!(s.offset("g", "t", 1).is_none());
    assert_eq!(s.group("g").map(ClassicGroup::state), Some(GroupState::Empty));
    // No protocol type (assign-mode commits): retention counts from the commit.
    assert!(s.expired(1099).0.is_empty());
    let (w, gone) = s.expired(1100);
    assert_eq!(w.len(), 2);
    assert_eq!(gone, vec!["g".to_string()]);
    s.apply(&w.into_iter().map(|w| (3, w)).collect::<Vec<_>>());
    s.remove_group("g", 1100);
    assert!(s.list().is_empty());
    assert!(!s.metadata_fits("01234567890"));
}
