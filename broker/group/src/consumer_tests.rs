#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const T: Uuid = Uuid::from_u128(0x7);

fn cfg() -> ConsumerConfig {
    ConsumerConfig { session_timeout_ms: 10_000, heartbeat_interval_ms: 500, ..ConsumerConfig::default() }
}

fn catalog(partitions: i32) -> Catalog {
    Catalog {
        version: u64::try_from(partitions).unwrap_or(0),
        topics: BTreeMap::from([("t".to_string(), TopicInfo { id: T, partitions })]),
    }
}

fn parts(ps: &[i32]) -> Assignment {
    if ps.is_empty() { Assignment::new() } else { Assignment::from([(T, ps.iter().copied().collect())]) }
}

fn join(member: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

/// A steady heartbeat: only the epoch and, when given, what it owns.
fn beat(member: &str, epoch: i32, owned: Option<&[i32]>) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: owned.map(parts),
        ..Default::default()
    }
}

struct G {
    g: ConsumerGroup,
    cfg: ConsumerConfig,
    cat: Catalog,
    now: i64,
}

impl G {
    fn new() -> Self {
        G { g: ConsumerGroup::new("g", &cfg(), 0), cfg: cfg(), cat: catalog(4), now: 0 }
    }
    fn hb(&mut self, r: HeartbeatRequest) -> HeartbeatResponse {
        self.g.heartbeat(&r, &self.cfg, &self.cat, self.now)
    }
    /// Heartbeats `member` until it is stable at the target epoch, acknowledging every
    /// assignment it receives (as a client does). Returns its final epoch and partitions.
    fn settle(&mut self, member: &str) -> (i32, Vec<i32>) {
        let m = self.g.member(member).unwrap();
        let (mut epoch, mut owned): (i32, Vec<i32>) = (m.epoch, m.assigned.values().flatten().copied().collect());
        for _ in 0..4 {
            let r = self.hb(beat(member, epoch, Some(&owned)));
            assert_eq!(r.error, None, "{r:?}");
            epoch = r.member_epoch;
            if let Some(a) = r.assignment {
                owned = a.values().flatten().copied().collect();
            }
        }
        (epoch, owned)
    }
}

#[test]
fn first_member_gets_everything() {
    let mut g = G::new();
    let r = g.hb(join("a"));
    assert_eq!(r.error, None);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.heartbeat_interval_ms, 500);
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3])));
    assert_eq!(g.g.state(), ConsumerGroupState::Stable);
    // A steady heartbeat carries no assignment.
    let r = g.hb(beat("a", 1, None));
    assert_eq!((r.error, r.member_epoch, r.assignment), (None, 1, None));
}

#[test]
fn a_second_member_gets_partitions_only_after_they_are_revoked() {
    let mut g = G::new();
    g.hb(join("a"));
    let r = g.hb(join("b"));
    // b is at the new epoch but a still holds everything: nothing yet, and it is asked back
    // soon (a tenth of the interval) to pick the partitions up once a lets go.
    assert_eq!(r.member_epoch, 2);
    assert_eq!(r.assignment, Some(Assignment::new()));
    assert_eq!(r.heartbeat_interval_ms, HANDOFF_INTERVAL_MIN_MS);
    assert_eq!(g.g.member("b").unwrap().state, MemberState::UnreleasedPartitions);
    assert_eq!(g.g.state(), ConsumerGroupState::Reconciling);
    // a is asked to revoke two partitions and keeps its epoch until it does.
    let r = g.hb(beat("a", 1, Some(&[0, 1, 2, 3])));
    assert_eq!(r.member_epoch, 1);
    let kept = r.assignment.unwrap();
    assert_eq!(crate::assignor::count(&kept), 2);
    assert_eq!(g.g.member("a").unwrap().state, MemberState::UnrevokedPartitions);
    // b still waits while a has not acknowledged.
    let r = g.hb(beat("b", 2, Some(&[])));
    assert_eq!(r.assignment, None);
    let kept: Vec<i32> = kept.values().flatten().copied().collect();
    let r = g.hb(beat("a", 1, Some(&kept)));
    assert_eq!((r.member_epoch, r.assignment), (2, None));
    let r = g.hb(beat("b", 2, Some(&[])));
    assert_eq!(r.heartbeat_interval_ms, 500, "back to the configured interval");
    let b: Vec<i32> = r.assignment.unwrap().values().flatten().copied().collect();
    assert_eq!(b.len(), 2);
    assert!(b.iter().all(|p| !kept.contains(p)));
    assert_eq!(g.g.state(), ConsumerGroupState::Stable);
}

#[test]
fn one_two_four_five_members() {
    let mut g = G::new();
    let mut members = Vec::new();
    for (n, expect) in [(1, vec![4]), (2, vec![2, 2]), (4, vec![1, 1, 1, 1]), (5, vec![0, 1, 1, 1, 1])] {
        while members.len() < n {
            let id = format!("m{}", members.len());
            assert_eq!(g.hb(join(&id)).error, None);
            members.push(id);
        }
        // Everyone heartbeats until stable (order does not matter; two rounds suffice).
        let mut got = Vec::new();
        for _ in 0..2 {
            got = members.iter().map(|m| g.settle(m)).collect::<Vec<_>>();
        }
        let mut sizes: Vec<usize> = got.iter().map(|(_, p)| p.len()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, expect);
        let mut all: Vec<i32> = got.iter().flat_map(|(_, p)| p.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3], "every partition owned exactly once");
        assert!(got.iter().all(|(e, _)| *e == g.g.epoch()));
        assert_eq!(g.g.state(), ConsumerGroupState::Stable);
    }
}

#[test]
fn epochs_are_checked() {
    let mut g = G::new();
    g.hb(join("a"));
    assert_eq!(g.hb(beat("a", 5, None)).error, Some(E::FencedMemberEpoch));
    assert_eq!(g.hb(beat("x", 1, None)).error, Some(E::UnknownMemberId));
    g.hb(join("b"));
    g.settle("a");
    g.settle("b");
    // a moved from epoch 1 to 2; its previous epoch is accepted while it owns a subset.
    let owned: Vec<i32> = g.g.member("a").unwrap().assigned.values().flatten().copied().collect();
    assert_eq!(g.hb(beat("a", 1, Some(&owned))).error, None);
    assert_eq!(g.hb(beat("a", 1, Some(&[0, 1, 2, 3]))).error, Some(E::FencedMemberEpoch));
    assert_eq!(g.hb(beat("a", 1, None)).error, Some(E::FencedMemberEpoch));
    // A fenced member rejoins with the same id from nothing and gets its partitions back.
    let r = g.hb(join("a"));
    assert_eq!(r.error, None);
    assert_eq!(r.assignment.map(|a| crate::assignor::count(&a)), Some(2));
}

#[test]
fn leaving_hands_partitions_over_without_revocation() {
    let mut g = G::new();
    g.hb(join("a"));
    g.hb(join("b"));
    g.settle("a");
    g.settle("b");
    let epoch = g.g.epoch();
    let r = g.hb(beat("b", epoch, None).with_epoch(LEAVE_EPOCH));
    assert_eq!((r.error, r.member_epoch), (None, LEAVE_EPOCH));
    assert!(g.g.member("b").is_none());
    let r = g.hb(beat("a", epoch, None));
    assert_eq!(r.member_epoch, epoch + 1);
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3])));
    assert_eq!(g.g.state(), ConsumerGroupState::Stable);
}

#[test]
fn static_member_restart_within_the_session_is_not_a_rebalance() {
    let mut g = G::new();
    let with_instance = |mut r: HeartbeatRequest, i: &str| {
        r.instance_id = Some(i.into());
        r
    };
    g.hb(with_instance(join("a1"), "ia"));
    g.hb(with_instance(join("b"), "ib"));
    let (ea, pa) = g.settle("a1");
    g.settle("b");
    let epoch = g.g.epoch();
    // A second incarnation while the first is live is refused.
    assert_eq!(g.hb(with_instance(join("a2"), "ia")).error, Some(E::UnreleasedInstanceId));
    // The first leaves temporarily (epoch -2), the second takes its place.
    let r = g.hb(with_instance(beat("a1", ea, None), "ia").with_epoch(LEAVE_STATIC_EPOCH));
    assert_eq!(r.member_epoch, LEAVE_STATIC_EPOCH);
    let r = g.hb(with_instance(join("a2"), "ia"));
    assert_eq!(r.error, None);
    assert_eq!(r.member_epoch, ea);
    assert_eq!(r.assignment.map(|a| a.values().flatten().copied().collect::<Vec<_>>()), Some(pa));
    assert_eq!(g.g.epoch(), epoch, "no rebalance");
    // The old incarnation is fenced.
    assert_eq!(g.hb(with_instance(beat("a1", ea, None), "ia")).error, Some(E::FencedInstanceId));
}

#[test]
fn sessions_and_revocations_time_out() {
    let mut g = G::new();
    g.hb(join("a"));
    g.now = 5_000;
    g.hb(join("b"));
    // a never acknowledges the revocation it is asked for.
    g.hb(beat("a", 1, Some(&[0, 1, 2, 3])));
    assert_eq!(g.g.member("a").unwrap().state, MemberState::UnrevokedPartitions);
    assert_eq!(g.g.next_deadline(), Some(15_000));
    // b keeps heartbeating; a's session (10 s from its last heartbeat) ends first.
    g.now = 14_000;
    g.hb(beat("b", 2, Some(&[])));
    g.now = 15_000;
    let gone = g.g.tick(&g.cfg, g.now);
    assert_eq!(gone, vec![Expired { member_id: "a".into(), reason: "session timeout" }]);
    let r = g.hb(beat("b", 2, Some(&[])));
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3])));
    // Revocation timeout: shorter rebalance timeout than session.
    let mut r = join("c");
    r.rebalance_timeout_ms = 1_000;
    g.hb(r);
    let eb = g.g.member("b").unwrap().epoch;
    g.hb(beat("b", eb, Some(&[0, 1, 2, 3])));
    g.hb(beat("c", g.g.epoch(), Some(&[])));
    assert_eq!(g.g.member("b").unwrap().state, MemberState::UnrevokedPartitions);
    g.now += 30_001;
    let gone: Vec<String> = g.g.tick(&g.cfg, g.now).into_iter().map(|e| e.member_id).collect();
    assert!(gone.contains(&"b".to_string()));
}

#[test]
fn new_partitions_and_regex_subscriptions_start_a_new_epoch() {
    let mut g = G::new();
    g.hb(join("a"));
    g.cat = catalog(6);
    let r = g.hb(beat("a", 1, None));
    assert_eq!(r.member_epoch, 2);
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3, 4, 5])));
    // A regex subscriber sees every matching topic, internal ones included (as Kafka 4.x).
    g.cat.version += 1;
    g.cat.topics.insert("t2".into(), TopicInfo { id: Uuid::from_u128(9), partitions: 1 });
    g.cat.topics.insert("__consumer_offsets".into(), TopicInfo { id: Uuid::from_u128(10), partitions: 1 });
    let mut r = join("r");
    r.subscribed_topic_names = None;
    r.subscribed_topic_regex = Some("t2|__.*".into());
    let r = g.hb(r);
    assert_eq!(
        r.assignment,
        Some(Assignment::from([(Uuid::from_u128(9), BTreeSet::from([0])), (Uuid::from_u128(10), BTreeSet::from([0]))]))
    );
}

#[test]
fn commits_and_fetches_check_the_member_epoch() {
    let mut g = G::new();
    assert_eq!(g.g.validate_commit("", -1, 9), Ok(()));
    g.hb(join("a"));
    assert_eq!(g.g.validate_commit("", -1, 9), Err(E::UnknownMemberId));
    assert_eq!(g.g.validate_commit("a", 1, 9), Ok(()));
    assert_eq!(g.g.validate_commit("a", 0, 9), Err(E::StaleMemberEpoch));
    assert_eq!(g.g.validate_commit("a", 1, 8), Err(E::UnsupportedVersion));
    assert_eq!(g.g.validate_fetch(None, -1), Ok(()));
    assert_eq!(g.g.validate_fetch(None, 1), Err(E::UnknownMemberId));
    assert_eq!(g.g.validate_fetch(Some("a"), -1), Err(E::StaleMemberEpoch));
    assert_eq!(g.g.validate_fetch(Some("a"), 2), Err(E::StaleMemberEpoch));
    assert_eq!(g.g.validate_fetch(Some("a"), 1), Ok(()));
}

#[test]
fn max_size_and_range_assignor() {
    let mut g = G::new();
    g.cfg.max_size = 1;
    g.hb(join("a"));
    assert_eq!(g.hb(join("b")).error, Some(E::GroupMaxSizeReached));
    g.cfg.max_size = 10;
    let mut r = join("b");
    r.server_assignor = Some("range".into());
    g.hb(r);
    let mut r = beat("a", 1, Some(&[0, 1, 2, 3]));
    r.server_assignor = Some("range".into());
    g.hb(r);
    // Both asked for range: the next target is a range assignment (a: 0-1 after revoking).
    assert_eq!(g.g.assignor(), Assignor::Range);
    assert_eq!(g.g.target_of("a"), Some(&parts(&[0, 1])));
    assert_eq!(g.g.target_of("b"), Some(&parts(&[2, 3])));
}

trait WithEpoch {
    fn with_epoch(self, e: i32) -> Self;
}

impl WithEpoch for HeartbeatRequest {
    fn with_epoch(mut self, e: i32) -> Self {
        self.member_epoch = e;
        self
    }
}
