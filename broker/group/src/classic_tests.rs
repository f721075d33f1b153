#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

fn cfg() -> GroupConfig {
    GroupConfig { initial_rebalance_delay_ms: 3_000, ..GroupConfig::default() }
}

fn req(member: &str, protocols: &[(&str, &str)]) -> JoinRequest {
    JoinRequest {
        member_id: member.into(),
        instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from(m.to_string()))).collect(),
        require_known_member: true,
        supports_skip_assignment: false,
    }
}

fn range() -> Vec<(&'static str, &'static str)> {
    vec![("range", "sub")]
}

fn joins(out: &[Out]) -> Vec<(Ticket, JoinResponse)> {
    out.iter()
        .filter_map(|o| match o {
            Out::Join(t, r) => Some((*t, r.clone())),
            _ => None,
        })
        .collect()
}

fn only_join(out: &[Out], t: u64) -> JoinResponse {
    joins(out).into_iter().find(|(x, _)| x.0 == t).map(|(_, r)| r).expect("join answered")
}

fn sync_req(member: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncRequest {
    SyncRequest {
        member_id: member.into(),
        instance_id: None,
        generation,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments.iter().map(|(m, a)| (m.to_string(), Bytes::from(a.to_string()))).collect(),
    }
}

/// Replies inside a Store, as the runtime delivers them after a successful write.
fn stored_syncs(out: &[Out]) -> Vec<(Ticket, SyncResponse)> {
    let mut v = Vec::new();
    for o in out {
        match o {
            Out::Sync(t, r) => v.push((*t, r.clone())),
            Out::Store { then, .. } => v.extend(stored_syncs(then)),
            Out::Join(..) => {}
        }
    }
    v
}

/// A one-member Stable group "m1" at generation 1 (the initial delay passed at t=3000).
fn stable_one() -> ClassicGroup {
    let mut g = ClassicGroup::new("g", cfg(), 0);
    let out = g.join(req("", &range()), Ticket(1), "m1".into(), 0);
    assert_eq!(only_join(&out, 1).error, Some(E::MemberIdRequired));
    assert_eq!(only_join(&out, 1).member_id, "m1");
    let out = g.join(req("m1", &range()), Ticket(2), "unused".into(), 10);
    assert!(out.is_empty(), "parked during the initial delay");
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert!(g.tick(2_999).is_empty());
    let out = g.tick(3_010);
    let r = only_join(&out, 2);
    assert_eq!((r.error, r.generation, r.leader.as_str()), (None, 1, "m1"));
    assert_eq!(r.members.len(), 1, "the leader gets the member list");
    assert_eq!(g.state(), GroupState::CompletingRebalance);
    let out = g.sync(sync_req("m1", 1, &[("m1", "p0,p1")]), Ticket(3), 3_020);
    assert!(matches!(&out[0], Out::Store { generation: 1, .. }));
    let s = stored_syncs(&out);
    assert_eq!(s[0].1.assignment, Bytes::from("p0,p1"));
    assert_eq!(g.state(), GroupState::Stable);
    g
}

#[test]
fn first_member_and_initial_delay() {
    let g = stable_one();
    assert_eq!(g.generation(), 1);
    assert_eq!(g.stored().members[0].assignment, Bytes::from("p0,p1"));
}

#[test]
fn a_rebalance_is_timed_from_its_start_to_the_stable_assignment() {
    let mut g = stable_one();
    // m1's second join started it at t=10 (the first, MEMBER_ID_REQUIRED, added nobody); the
    // leader's sync at t=3_020 ended it.
    assert_eq!(g.take_completed_rebalance(3_020), Some(3_010));
    assert_eq!(g.take_completed_rebalance(3_030), None, "counted once");
}

#[test]
fn initial_delay_extends_while_members_arrive() {
    let mut g = ClassicGroup::new("g", cfg(), 0);
    let mut j = req("", &range());
    j.require_known_member = false;
    assert!(g.join(j.clone(), Ticket(1), "a".into(), 0).is_empty());
    assert!(g.join(j.clone(), Ticket(2), "b".into(), 2_000).is_empty());
    // A member arrived during the delay: wait one more delay.
    assert!(g.tick(3_000).is_empty());
    let out = g.tick(6_000);
    assert_eq!(joins(&out).len(), 2);
    assert_eq!(g.generation(), 1);
}

#[test]
fn second_member_rebalances_and_heartbeats_see_it() {
    let mut g = stable_one();
    assert_eq!(g.heartbeat("m1", None, 1, 4_000), Ok(()));
    let out = g.join(req("", &range()), Ticket(10), "m2".into(), 4_000);
    assert_eq!(only_join(&out, 10).error, Some(E::MemberIdRequired));
    assert!(g.join(req("m2", &range()), Ticket(11), String::new(), 4_010).is_empty());
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.heartbeat("m1", None, 1, 4_020), Err(E::RebalanceInProgress));
    // Commits of the current generation are still accepted while preparing.
    assert_eq!(g.validate_commit("m1", None, 1, 4_020), Ok(()));
    let out = g.join(req("m1", &range()), Ticket(12), String::new(), 4_030);
    let (r1, r2) = (only_join(&out, 12), only_join(&out, 11));
    assert_eq!((r1.generation, r2.generation), (2, 2));
    assert_eq!(r1.leader, "m1");
    assert_eq!(r1.members.len(), 2);
    assert!(r2.members.is_empty());
    assert_eq!(g.validate_commit("m1", None, 2, 4_040), Err(E::RebalanceInProgress));
    assert_eq!(g.heartbeat("m2", None, 2, 4_040), Ok(()));
    // A follower's sync parks until the leader's.
    assert!(g.sync(sync_req("m2", 2, &[]), Ticket(13), 4_050).is_empty());
    assert_eq!(stored_syncs(&g.sync(sync_req("m2", 1, &[]), Ticket(14), 4_050))[0].1.error, Some(E::IllegalGeneration));
    let out = g.sync(sync_req("m1", 2, &[("m1", "a"), ("m2", "b")]), Ticket(15), 4_060);
    let s = stored_syncs(&out);
    assert_eq!(s.len(), 2);
    assert!(s.iter().any(|(t, r)| t.0 == 13 && r.assignment == "b"));
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(g.validate_commit("m2", None, 2, 4_070), Ok(()));
    assert_eq!(g.validate_commit("m2", None, 1, 4_070), Err(E::IllegalGeneration));
    assert_eq!(g.validate_commit("zz", None, 2, 4_070), Err(E::UnknownMemberId));
    assert_eq!(g.validate_commit("", None, -1, 4_070), Err(E::UnknownMemberId));
}

#[test]
fn silent_member_is_removed_after_its_session() {
    let mut g = stable_one();
    let last = 3_020;
    assert_eq!(g.next_deadline(), Some(last + i64::from(SESSION)));
    assert!(g.tick(last + i64::from(SESSION) - 1).is_empty());
    let out = g.tick(last + i64::from(SESSION));
    // The only member left: the group becomes Empty with a new generation, and is stored.
    assert!(matches!(&out[..], [Out::Store { generation: 2, .. }]));
    assert_eq!(g.state(), GroupState::Empty);
    assert_eq!(g.heartbeat("m1", None, 1, last + 20_000), Err(E::UnknownMemberId));
}

#[test]
fn leave_group_rebalances_the_rest() {
    let mut g = stable_one();
    g.join(req("", &range()), Ticket(10), "m2".into(), 4_000);
    g.join(req("m2", &range()), Ticket(11), String::new(), 4_000);
    let out = g.join(req("m1", &range()), Ticket(12), String::new(), 4_000);
    assert_eq!(joins(&out).len(), 2);
    g.sync(sync_req("m1", 2, &[("m1", "a"), ("m2", "b")]), Ticket(13), 4_000);
    g.sync(sync_req("m2", 2, &[]), Ticket(14), 4_000);
    let (errors, out) = g.leave(&[("m2".into(), None), ("nope".into(), None)], 5_000).unwrap();
    assert_eq!(errors, vec![Ok(()), Err(E::UnknownMemberId)]);
    assert!(out.is_empty());
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    let out = g.join(req("m1", &range()), Ticket(15), String::new(), 5_010);
    assert_eq!(only_join(&out, 15).generation, 3);
}

#[test]
fn errors_where_kafka_answers_them() {
    let mut g = stable_one();
    // Unknown member ids and wrong generations.
    assert_eq!(g.heartbeat("x", None, 1, 4_000), Err(E::UnknownMemberId));
    assert_eq!(g.heartbeat("m1", None, 7, 4_000), Err(E::IllegalGeneration));
    assert_eq!(
        only_join(&g.join(req("x", &range()), Ticket(1), String::new(), 4_000), 1).error,
        Some(E::UnknownMemberId)
    );
    // A protocol no member supports, or another protocol type.
    let out = g.join(req("", &[("roundrobin", "")]), Ticket(2), "m9".into(), 4_000);
    assert_eq!(only_join(&out, 2).error, Some(E::InconsistentGroupProtocol));
    let mut other = req("", &range());
    other.protocol_type = "connect".into();
    assert_eq!(only_join(&g.join(other, Ticket(3), "m9".into(), 4_000), 3).error, Some(E::InconsistentGroupProtocol));
    let mut s = sync_req("m1", 1, &[]);
    s.protocol_name = Some("roundrobin".into());
    assert_eq!(stored_syncs(&g.sync(s, Ticket(4), 4_000))[0].1.error, Some(E::InconsistentGroupProtocol));
    // Rejoining with the same metadata while Stable (the leader): a rebalance.
    g.join(req("m1", &range()), Ticket(5), String::new(), 4_000);
    assert_eq!(g.generation(), 2);
    assert_eq!(stored_syncs(&g.sync(sync_req("m1", 1, &[]), Ticket(6), 4_000))[0].1.error, Some(E::IllegalGeneration));
}

#[test]
fn max_size_is_enforced() {
    let mut g = ClassicGroup::new("g", GroupConfig { max_size: 1, ..cfg() }, 0);
    let mut j = req("", &range());
    j.require_known_member = false;
    g.join(j.clone(), Ticket(1), "a".into(), 0);
    g.tick(3_000);
    let out = g.join(j, Ticket(2), "b".into(), 3_001);
    assert_eq!(only_join(&out, 2).error, Some(E::GroupMaxSizeReached));
}

fn static_req(member: &str, instance: &str) -> JoinRequest {
    JoinRequest { instance_id: Some(instance.into()), ..req(member, &range()) }
}

#[test]
fn static_member_restart_does_not_rebalance() {
    let mut g = ClassicGroup::new("g", cfg(), 0);
    // Static members never get MEMBER_ID_REQUIRED.
    assert!(g.join(static_req("", "i1"), Ticket(1), "i1-a".into(), 0).is_empty());
    assert!(g.join(static_req("", "i2"), Ticket(2), "i2-a".into(), 0).is_empty());
    assert!(g.tick(3_000).is_empty(), "a second member arrived during the delay");
    let out = g.tick(6_000);
    assert_eq!(joins(&out).len(), 2);
    let leader = only_join(&out, 1).leader;
    assert_eq!(leader, "i1-a");
    g.sync(sync_req("i1-a", 1, &[("i1-a", "A"), ("i2-a", "B")]), Ticket(3), 3_000);
    g.sync(SyncRequest { instance_id: Some("i2".into()), ..sync_req("i2-a", 1, &[]) }, Ticket(4), 3_000);
    assert_eq!(g.state(), GroupState::Stable);
    // i2 restarts (no LeaveGroup) and rejoins with the same instance id within its session.
    let out = g.join(static_req("", "i2"), Ticket(5), "i2-b".into(), 5_000);
    let Out::Store { generation, then, .. } = &out[0] else { panic!("expected a store: {out:?}") };
    assert_eq!(*generation, 1);
    let r = only_join(then, 5);
    assert_eq!((r.error, r.generation, r.member_id.as_str()), (None, 1, "i2-b"));
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(g.generation(), 1);
    // Its assignment is kept, and the old incarnation is fenced.
    let s = stored_syncs(&g.sync(
        SyncRequest { instance_id: Some("i2".into()), ..sync_req("i2-b", 1, &[]) },
        Ticket(6),
        5_010,
    ));
    assert_eq!(s[0].1.assignment, Bytes::from("B"));
    assert_eq!(g.heartbeat("i2-a", Some("i2"), 1, 5_020), Err(E::FencedInstanceId));
    assert_eq!(g.validate_commit("i2-a", Some("i2"), 1, 5_020), Err(E::FencedInstanceId));
    // A static member that does not come back within its session is removed.
    assert_eq!(g.heartbeat("i1-a", Some("i1"), 1, 6_000), Ok(()));
    g.tick(5_010 + i64::from(SESSION));
    assert_eq!(g.state(), GroupState::PreparingRebalance);
}

#[test]
fn static_members_that_do_not_rejoin_keep_their_place() {
    let mut g = ClassicGroup::new("g", cfg(), 0);
    g.join(static_req("", "i1"), Ticket(1), "i1-a".into(), 0);
    g.join(req("", &range()), Ticket(2), "d".into(), 0);
    g.join(req("d", &range()), Ticket(3), String::new(), 0);
    g.tick(3_000);
    assert_eq!(joins(&g.tick(6_000)).len(), 2);
    g.sync(sync_req("i1-a", 1, &[]), Ticket(4), 3_000);
    g.sync(sync_req("d", 1, &[]), Ticket(5), 3_000);
    // The dynamic member rejoins with a new subscription; the static one stays silent: the
    // join completes at the rebalance timeout and keeps the static member.
    let out = g.join(req("d", &[("range", "new")]), Ticket(6), String::new(), 7_000);
    assert!(out.is_empty());
    for t in (10_000..37_000).step_by(5_000) {
        assert_eq!(g.heartbeat("i1-a", Some("i1"), 1, t), Err(E::RebalanceInProgress));
        assert!(g.tick(t).is_empty());
    }
    let out = g.tick(7_000 + i64::from(REBALANCE));
    let r = only_join(&out, 6);
    assert_eq!(r.generation, 2);
    assert!(g.member_ids().any(|m| m == "i1-a"));
}

#[test]
fn members_that_never_sync_are_removed() {
    let mut g = stable_one();
    g.join(req("", &range()), Ticket(10), "m2".into(), 4_000);
    g.join(req("m2", &range()), Ticket(11), String::new(), 4_000);
    g.join(req("m1", &range()), Ticket(12), String::new(), 4_000);
    let out = g.sync(sync_req("m1", 2, &[("m1", "a"), ("m2", "b")]), Ticket(13), 4_000);
    assert_eq!(stored_syncs(&out).len(), 1);
    // m2 keeps heartbeating but never syncs: removed after the rebalance timeout.
    for t in (5_000..34_000).step_by(3_000) {
        let _ = g.heartbeat("m2", None, 2, t);
        let _ = g.heartbeat("m1", None, 2, t);
    }
    g.tick(4_000 + i64::from(REBALANCE));
    assert!(!g.member_ids().any(|m| m == "m2"));
    assert_eq!(g.state(), GroupState::PreparingRebalance);
}

#[test]
fn pending_member_ids_expire() {
    let mut g = stable_one();
    let out = g.join(req("", &range()), Ticket(10), "m2".into(), 4_000);
    assert_eq!(only_join(&out, 10).error, Some(E::MemberIdRequired));
    // Never rejoins: the id is forgotten after the session timeout.
    let _ = g.heartbeat("m1", None, 1, 13_000);
    g.tick(4_000 + i64::from(SESSION));
    assert_eq!(
        only_join(&g.join(req("m2", &range()), Ticket(11), String::new(), 15_000), 11).error,
        Some(E::UnknownMemberId)
    );
}

#[test]
fn store_failure_rebalances() {
    let mut g = ClassicGroup::new("g", cfg(), 0);
    let mut j = req("", &range());
    j.require_known_member = false;
    g.join(j, Ticket(1), "a".into(), 0);
    g.tick(3_000);
    g.sync(sync_req("a", 1, &[("a", "x")]), Ticket(2), 3_000);
    let out = g.store_failed(1, 3_001);
    assert!(out.is_empty());
    assert_eq!(g.state(), GroupState::PreparingRebalance);
}

#[test]
fn stored_group_reloads_stable() {
    let g = stable_one();
    let v = g.stored();
    let r = ClassicGroup::from_stored("g", &v, cfg(), 100_000);
    assert_eq!((r.state(), r.generation(), r.leader()), (GroupState::Stable, 1, Some("m1")));
    assert_eq!(r.describe()[0].assignment, Bytes::from("p0,p1"));
}
