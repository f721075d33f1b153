//! The controller's rules, on images built by its own decisions.

use super::*;

pub(super) const T: u64 = 9000;

pub(super) fn endpoint(id: NodeId) -> Vec<Endpoint> {
    vec![Endpoint {
        name: "PLAINTEXT".into(),
        host: format!("127.0.1.{id}"),
        port: 9092,
        security_protocol: "PLAINTEXT".into(),
    }]
}

/// Applies a decision's records at consecutive indexes.
pub(super) fn commit(img: &mut MetadataImage, d: &Decision) {
    for r in &d.records {
        let next = img.version + 1;
        img.apply(next, r);
    }
}

/// A cluster of `racks.len()` registered, unfenced brokers with ids 1..=n.
pub(super) fn cluster(racks: &[Option<&str>]) -> (Controller, MetadataImage) {
    let mut c = Controller::new(T, false);
    let mut img = MetadataImage::default();
    for (i, rack) in racks.iter().enumerate() {
        let id = i as NodeId + 1;
        let reg = Command::RegisterBroker {
            node_id: id,
            incarnation_id: Uuid::new_v4(),
            listeners: endpoint(id),
            rack: rack.map(str::to_string),
        };
        let d = c.decide(&img, &reg, 0).expect("register");
        commit(&mut img, &d);
        let epoch = img.brokers[&id].epoch;
        let d = c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, 0).expect("hb");
        commit(&mut img, &d);
        assert!(img.is_active(id));
    }
    (c, img)
}

pub(super) fn create(
    c: &mut Controller,
    img: &mut MetadataImage,
    name: &str,
    partitions: i32,
    rf: i16,
) -> Result<(), Refusal> {
    let cmd = Command::CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: rf,
        assignments: None,
        configs: Configs::new(),
        topic_id: None,
        validate_only: false,
    };
    let d = c.decide(img, &cmd, 0)?;
    commit(img, &d);
    Ok(())
}

/// A broker comes back: registers a new incarnation and heartbeats (unfenced).
pub(super) fn rejoin(c: &mut Controller, img: &mut MetadataImage, id: NodeId) {
    let reg =
        Command::RegisterBroker { node_id: id, incarnation_id: Uuid::new_v4(), listeners: endpoint(id), rack: None };
    let d = c.decide(img, &reg, T + 2).expect("register");
    commit(img, &d);
    let epoch = img.brokers[&id].epoch;
    let d = c.decide(img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T + 3).expect("hb");
    commit(img, &d);
}

#[test]
fn placement_spreads_leaders_and_followers() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    create(&mut c, &mut img, "t", 6, 3).expect("create");
    let t = img.topic("t").expect("t");
    let leaders: Vec<NodeId> = t.partitions.iter().map(|p| p.leader).collect();
    assert_eq!(leaders, vec![1, 2, 3, 1, 2, 3]);
    for p in &t.partitions {
        let mut r = p.replicas.clone();
        r.sort_unstable();
        assert_eq!(r, vec![1, 2, 3], "{p:?}");
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
    }
    // Followers differ between the two rounds (the shift grows).
    assert_ne!(t.partitions[0].replicas, t.partitions[3].replicas);
}

#[test]
fn placement_alternates_racks() {
    let (mut c, mut img) = cluster(&[Some("a"), Some("a"), Some("b"), Some("b")]);
    create(&mut c, &mut img, "t", 8, 2).expect("create");
    let rack = |id: NodeId| img.brokers[&id].rack.clone();
    for p in &img.topic("t").expect("t").partitions {
        assert_ne!(rack(p.replicas[0]), rack(p.replicas[1]), "both replicas on one rack: {p:?}");
    }
}

#[test]
fn a_retried_command_that_took_effect_succeeds() {
    let (mut c, mut img) = cluster(&[None, None]);
    let id = random_topic_id();
    let cmd = |topic_id| Command::CreateTopic {
        name: "t".into(),
        partitions: 2,
        replication_factor: 2,
        assignments: None,
        configs: Configs::new(),
        topic_id: Some(topic_id),
        validate_only: false,
    };
    let first = c.decide(&img, &cmd(id), 0).expect("create");
    commit(&mut img, &first);
    // The same request again (its answer was lost): nothing more to write, the same topic.
    let again = c.decide(&img, &cmd(id), 0).expect("retry");
    assert!(again.records.is_empty());
    assert_eq!(again.reply, first.reply);
    // Another request for the name (another id) is refused as ever.
    assert!(matches!(c.decide(&img, &cmd(random_topic_id()), 0), Err(Refusal::TopicAlreadyExists(_))));

    // A deletion or growth whose refusal says it is done already, only then.
    let grow = Command::CreatePartitions { name: "t".into(), count: 2, assignments: None, validate_only: false };
    let refused = c.decide(&img, &grow, 0).expect_err("no growth");
    assert!(done_before(&img, &grow, &refused));
    let grow3 = Command::CreatePartitions { name: "t".into(), count: 3, assignments: None, validate_only: false };
    let shrink = Command::CreatePartitions { name: "t".into(), count: 1, assignments: None, validate_only: false };
    let refused = c.decide(&img, &shrink, 0).expect_err("no shrink");
    assert!(!done_before(&img, &shrink, &refused));
    assert!(c.decide(&img, &grow3, 0).is_ok());
    let delete = Command::DeleteTopic { name: "t".into() };
    let d = c.decide(&img, &delete, 0).expect("delete");
    commit(&mut img, &d);
    let refused = c.decide(&img, &delete, 0).expect_err("gone");
    assert!(done_before(&img, &delete, &refused));
    let other = Command::DeleteTopic { name: "never".into() };
    assert!(done_before(&img, &other, &unknown_topic("never")));
    assert!(!done_before(&img, &grow, &unknown_topic("t")));
}

#[test]
fn random_topic_ids_are_ones_kafka_would_make() {
    for _ in 0..10_000 {
        let id = random_topic_id();
        assert!(id.as_u128() > 1);
        // The base64 alphabet's 63rd letter is '-' in Kafka's URL-safe encoding.
        assert_ne!(id.as_bytes()[0] >> 2, 62, "{id}");
    }
}

#[test]
fn create_refusals() {
    let (mut c, mut img) = cluster(&[None, None]);
    assert!(matches!(create(&mut c, &mut img, "t", 1, 3), Err(Refusal::InvalidReplicationFactor(_))));
    assert!(matches!(create(&mut c, &mut img, "t", 0, 1), Err(Refusal::InvalidPartitions(_))));
    create(&mut c, &mut img, "t", 1, 2).expect("create");
    assert!(matches!(create(&mut c, &mut img, "t", 1, 1), Err(Refusal::TopicAlreadyExists(_))));
    let grow = |count| Command::CreatePartitions { name: "t".into(), count, assignments: None, validate_only: false };
    assert!(matches!(c.decide(&img, &grow(1), 0), Err(Refusal::InvalidPartitions(_))));
    let d = c.decide(&img, &grow(3), 0).expect("grow");
    commit(&mut img, &d);
    let t = img.topic("t").expect("t");
    assert_eq!(t.partitions.len(), 3);
    assert!(t.partitions.iter().all(|p| p.replicas.len() == 2));

    // Explicit replica lists of the new partitions are kept as given, once checked.
    let with = |count, a: Vec<Vec<NodeId>>| Command::CreatePartitions {
        name: "t".into(),
        count,
        assignments: Some(a),
        validate_only: false,
    };
    for bad in [with(5, vec![vec![2, 1]]), with(4, vec![vec![1]]), with(4, vec![vec![1, 1]]), with(4, vec![vec![1, 9]])]
    {
        assert!(matches!(c.decide(&img, &bad, 0), Err(Refusal::InvalidReplicaAssignment(_))), "{bad:?}");
    }
    let d = c.decide(&img, &with(4, vec![vec![2, 1]]), 0).expect("grow by one");
    commit(&mut img, &d);
    assert_eq!(img.topic("t").expect("t").partitions[3].replicas, vec![2, 1]);
}

/// Kafka refuses an explicit replica list whose brokers are all fenced (or in controlled
/// shutdown), in CreateTopics and CreatePartitions alike; with one active replica, that one
/// leads and is the ISR.
#[test]
fn explicit_replicas_need_an_active_broker() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    for id in [1, 2] {
        let epoch = img.brokers[&id].epoch;
        c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T - 1).expect("hb");
    }
    let records = c.expire_sessions(&img, T + 1);
    commit(&mut img, &Decision::new(records, Reply::Done));
    assert!(img.brokers[&3].fenced && img.is_active(1) && img.is_active(2));
    let topic = |name: &str, a: Vec<Vec<NodeId>>| Command::CreateTopic {
        name: name.into(),
        partitions: -1,
        replication_factor: -1,
        assignments: Some(a),
        configs: Configs::new(),
        topic_id: None,
        validate_only: false,
    };
    match c.decide(&img, &topic("t", vec![vec![1], vec![3]]), 0) {
        Err(Refusal::InvalidReplicaAssignment(m)) => assert_eq!(
            m,
            "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
        ),
        other => panic!("{other:?}"),
    }
    let d = c.decide(&img, &topic("t", vec![vec![3, 2]]), 0).expect("one active replica");
    commit(&mut img, &d);
    let p = &img.topic("t").expect("t").partitions[0];
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    let d = c.decide(&img, &topic("u", vec![vec![1]]), 0).expect("u");
    commit(&mut img, &d);
    let grow = |a| Command::CreatePartitions { name: "u".into(), count: 3, assignments: Some(a), validate_only: false };
    match c.decide(&img, &grow(vec![vec![2], vec![3]]), 0) {
        Err(Refusal::InvalidReplicaAssignment(m)) => assert_eq!(
            m,
            "All brokers specified in the manual partition assignment for partition 2 are fenced or in controlled shutdown."
        ),
        other => panic!("{other:?}"),
    }
    let d = c.decide(&img, &grow(vec![vec![2], vec![1]]), 0).expect("grow");
    commit(&mut img, &d);
    assert_eq!(img.topic("u").expect("u").partitions.len(), 3);
}

#[test]
fn fencing_moves_leaders_within_the_isr_and_back() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    create(&mut c, &mut img, "t", 3, 2).expect("create");
    create(&mut c, &mut img, "single", 1, 1).expect("create");
    // Brokers 2 and 3 heartbeat; broker 1 goes silent.
    for id in [2, 3] {
        let epoch = img.brokers[&id].epoch;
        c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T - 1).expect("hb");
    }
    let records = c.expire_sessions(&img, T + 1);
    commit(&mut img, &Decision::new(records, Reply::Done));
    assert!(img.brokers[&1].fenced);
    assert!(!img.brokers[&2].fenced && !img.brokers[&3].fenced);
    for p in &img.topic("t").expect("t").partitions {
        assert_ne!(p.leader, 1, "{p:?}");
        assert!(!p.isr.contains(&1), "{p:?}");
        assert!(p.leader > 0);
    }
    let moved = img.topic("t").expect("t").partitions.iter().find(|p| p.replicas[0] == 1).expect("p0").clone();
    assert_eq!(moved.leader_epoch, 1);
    // Single replica on the fenced broker: offline, ISR kept.
    let s = img.topic("single").expect("s").partitions[0].clone();
    if s.replicas == vec![1] {
        assert_eq!((s.leader, s.isr.clone()), (-1, vec![1]));
    }
    // Broker 1 comes back (re-registers, heartbeats): unfenced; a leaderless partition it
    // holds in its ISR gets it back.
    rejoin(&mut c, &mut img, 1);
    assert!(img.is_active(1));
    let s = &img.topic("single").expect("s").partitions[0];
    assert!(s.leader > 0, "{s:?}");
}

/// Two brokers, a topic with replicas [1, 2] whose follower 2 fell out of the ISR, then
/// leader 1 stops heartbeating and its session expires: partition 0 as it ends up.
fn fence_leader_with_lone_isr(unclean: bool) -> PartitionRecord {
    let (_, img) = fenced_leader_with_lone_isr(unclean);
    img.topic("t").expect("t").partitions[0].clone()
}

fn fenced_leader_with_lone_isr(unclean: bool) -> (Controller, MetadataImage) {
    let (mut c, mut img) = cluster(&[None, None]);
    c.unclean_leader_election = unclean;
    let cmd = Command::CreateTopic {
        name: "t".into(),
        partitions: 1,
        replication_factor: 2,
        assignments: Some(vec![vec![1, 2]]),
        configs: Configs::new(),
        topic_id: None,
        validate_only: false,
    };
    let d = c.decide(&img, &cmd, 0).expect("create");
    commit(&mut img, &d);
    let id = img.topic("t").expect("t").id;
    let shrink = Record::PartitionChange(PartitionChange {
        topic_id: id,
        partition: 0,
        leader: None,
        isr: Some(vec![1]),
        ..PartitionChange::default()
    });
    commit(&mut img, &Decision::new(vec![shrink], Reply::Done));
    let epoch2 = img.brokers[&2].epoch;
    c.decide(&img, &Command::Heartbeat { node_id: 2, epoch: epoch2, shutting_down: false }, T).expect("hb");
    let records = c.expire_sessions(&img, T + 1);
    commit(&mut img, &Decision::new(records, Reply::Done));
    (c, img)
}

fn elect(c: &mut Controller, img: &mut MetadataImage, e: Election, parts: Option<&[(&str, i32)]>) -> Reply {
    let partitions = parts.map(|p| p.iter().map(|(t, i)| (t.to_string(), *i)).collect());
    let d = c.decide(img, &Command::ElectLeaders { election: e, partitions }, T + 5).expect("elect");
    commit(img, &d);
    d.reply
}

#[test]
fn preferred_election_returns_leadership_to_the_first_replica_once_in_sync() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    create(&mut c, &mut img, "t", 3, 3).expect("create");
    // Broker 1 leaves; its partition moves; it comes back, out of the ISR.
    let epoch = img.brokers[&1].epoch;
    let d = c.decide(&img, &Command::Heartbeat { node_id: 1, epoch, shutting_down: true }, 1).expect("hb");
    commit(&mut img, &d);
    rejoin(&mut c, &mut img, 1);
    let p0 = img.topic("t").expect("t").partitions[0].clone();
    assert_eq!(p0.replicas[0], 1);
    assert_ne!(p0.leader, 1);
    let one = [("t", 0)];
    let r = elect(&mut c, &mut img, Election::Preferred, Some(&one));
    assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::PreferredNotAvailable)]));
    // Broker 1 catches up and is back in the ISR (replication's job): now it can lead.
    let id = img.topic("t").expect("t").id;
    let back = Record::PartitionChange(PartitionChange {
        topic_id: id,
        partition: 0,
        leader: None,
        isr: Some(vec![p0.leader, 1]),
        ..PartitionChange::default()
    });
    commit(&mut img, &Decision::new(vec![back], Reply::Done));
    let r = elect(&mut c, &mut img, Election::Preferred, Some(&one));
    assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::Elected)]));
    let p = &img.topic("t").expect("t").partitions[0];
    assert_eq!((p.leader, p.leader_epoch), (1, p0.leader_epoch + 1));
    let r = elect(&mut c, &mut img, Election::Preferred, Some(&[("t", 0), ("t", 1), ("t", 7), ("nope", 0)]));
    assert_eq!(
        r,
        Reply::Elections(vec![
            ("t".into(), 0, ElectionOutcome::NotNeeded),
            ("t".into(), 1, ElectionOutcome::NotNeeded),
            ("t".into(), 7, ElectionOutcome::Unknown("No such partition as t-7".into())),
            ("nope".into(), 0, ElectionOutcome::Unknown("No such topic as nope".into())),
        ])
    );
    // All partitions: only those an election was tried for are reported.
    assert_eq!(elect(&mut c, &mut img, Election::Preferred, None), Reply::Elections(vec![]));
}

#[test]
fn alter_partition_checks_the_leaders_view() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    create(&mut c, &mut img, "t", 1, 3).expect("create");
    let p = img.topic("t").expect("t").partitions[0].clone();
    let id = img.topic("t").expect("t").id;
    let alter = |img: &MetadataImage, node: NodeId, le: i32, pe: i32, isr: Vec<NodeId>| Command::AlterPartition {
        node_id: node,
        broker_epoch: img.brokers[&node].epoch,
        topic_id: id,
        partition: 0,
        leader_epoch: le,
        partition_epoch: pe,
        isr,
    };
    let l = p.leader;
    let shrunk: Vec<NodeId> = vec![l];
    let d = c.decide(&img, &alter(&img, l, p.leader_epoch, p.partition_epoch, shrunk.clone()), 1).expect("shrink");
    commit(&mut img, &d);
    let now = img.topic("t").expect("t").partitions[0].clone();
    assert_eq!(
        (now.isr.clone(), now.leader_epoch, now.partition_epoch),
        (shrunk, p.leader_epoch, p.partition_epoch + 1)
    );
    assert_eq!(
        d.reply,
        Reply::Partition {
            leader: l,
            leader_epoch: now.leader_epoch,
            partition_epoch: now.partition_epoch,
            isr: vec![l]
        }
    );
    let stale = alter(&img, l, p.leader_epoch, p.partition_epoch, p.replicas.clone());
    assert!(matches!(c.decide(&img, &stale, 2), Err(Refusal::InvalidUpdateVersion(_))));
    let fenced = alter(&img, l, p.leader_epoch + 1, now.partition_epoch, p.replicas.clone());
    assert!(matches!(c.decide(&img, &fenced, 2), Err(Refusal::FencedLeaderEpoch(_))));
    let other = *p.replicas.iter().find(|r| **r != l).expect("follower");
    let not_leader = alter(&img, other, now.leader_epoch, now.partition_epoch, p.replicas.clone());
    assert!(matches!(c.decide(&img, &not_leader, 2), Err(Refusal::NotLeader(_))));
    let d =
        c.decide(&img, &alter(&img, l, now.leader_epoch, now.partition_epoch, p.replicas.clone()), 3).expect("expand");
    commit(&mut img, &d);
    assert_eq!(img.topic("t").expect("t").partitions[0].isr, p.replicas);
}

#[test]
fn unclean_election_on_request_picks_a_live_replica_outside_the_isr() {
    let (mut c, mut img) = fenced_leader_with_lone_isr(false);
    assert_eq!(img.topic("t").expect("t").partitions[0].leader, -1);
    let r = elect(&mut c, &mut img, Election::Preferred, None);
    assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::PreferredNotAvailable)]));
    let r = elect(&mut c, &mut img, Election::Unclean, None);
    assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::Elected)]));
    let p = &img.topic("t").expect("t").partitions[0];
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    let r = elect(&mut c, &mut img, Election::Unclean, Some(&[("t", 0)]));
    assert_eq!(r, Reply::Elections(vec![("t".into(), 0, ElectionOutcome::NotNeeded)]));
}

#[test]
fn brokers_fenced_together_lead_nothing_and_leave_every_isr() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    create(&mut c, &mut img, "t", 3, 3).expect("create");
    let epoch3 = img.brokers[&3].epoch;
    c.decide(&img, &Command::Heartbeat { node_id: 3, epoch: epoch3, shutting_down: false }, T).expect("hb");
    let records = c.expire_sessions(&img, T + 1);
    commit(&mut img, &Decision::new(records, Reply::Done));
    assert!(img.brokers[&1].fenced && img.brokers[&2].fenced && !img.brokers[&3].fenced);
    for p in &img.topic("t").expect("t").partitions {
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3]), "{p:?}");
    }
}

#[test]
fn unclean_election_only_when_enabled() {
    assert_eq!(fence_leader_with_lone_isr(false).leader, -1, "clean election has no candidate");
    let p = fence_leader_with_lone_isr(true);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

#[test]
fn controlled_shutdown_hands_over_leadership() {
    let (mut c, mut img) = cluster(&[None, None]);
    create(&mut c, &mut img, "t", 2, 2).expect("create");
    let epoch = img.brokers[&1].epoch;
    let hb = Command::Heartbeat { node_id: 1, epoch, shutting_down: true };
    let d = c.decide(&img, &hb, 1).expect("hb");
    commit(&mut img, &d);
    assert!(img.topic("t").expect("t").partitions.iter().all(|p| p.leader == 2));
    let d = c.decide(&img, &hb, 2).expect("hb");
    assert_eq!(d.reply, Reply::Heartbeat { fenced: true, shutdown_complete: true });
    commit(&mut img, &d);
    // Done: fenced and its session over, so its next incarnation registers at once; a late
    // ordinary heartbeat of the old one does not bring it back.
    assert!(img.brokers[&1].fenced);
    let late = Command::Heartbeat { node_id: 1, epoch, shutting_down: false };
    let d = c.decide(&img, &late, 3).expect("hb");
    assert!(d.records.is_empty() && d.reply == Reply::Heartbeat { fenced: true, shutdown_complete: false });
    let next =
        Command::RegisterBroker { node_id: 1, incarnation_id: Uuid::new_v4(), listeners: endpoint(1), rack: None };
    assert!(c.decide(&img, &next, 4).is_ok());
}

#[test]
fn stale_heartbeats_and_duplicate_ids_are_refused() {
    let (mut c, img) = cluster(&[None]);
    let epoch = img.brokers[&1].epoch;
    let stale = Command::Heartbeat { node_id: 1, epoch: epoch - 1, shutting_down: false };
    assert!(matches!(c.decide(&img, &stale, 1), Err(Refusal::StaleBrokerEpoch(_))));
    let other =
        Command::RegisterBroker { node_id: 1, incarnation_id: Uuid::new_v4(), listeners: endpoint(1), rack: None };
    assert!(matches!(c.decide(&img, &other, 1), Err(Refusal::DuplicateBrokerRegistration(_))));
    // Once its session expired, a new incarnation may take the id.
    assert!(c.decide(&img, &other, T + 10).is_ok());
    let unknown = Command::Heartbeat { node_id: 7, epoch: 1, shutting_down: false };
    assert!(matches!(c.decide(&img, &unknown, 1), Err(Refusal::BrokerNotRegistered(_))));
}

#[test]
fn producer_id_blocks_never_repeat() {
    let (mut c, mut img) = cluster(&[None]);
    let mut starts = Vec::new();
    for _ in 0..3 {
        let d = c.decide(&img, &Command::AllocateProducerIds { node_id: 1 }, 0).expect("alloc");
        let Reply::ProducerIds { start, len } = d.reply else { panic!("reply {:?}", d.reply) };
        assert_eq!(len, PRODUCER_ID_BLOCK);
        starts.push(start);
        commit(&mut img, &d);
    }
    assert_eq!(starts, vec![0, 1000, 2000]);
}

#[test]
fn config_changes_are_diffs() {
    let (mut c, mut img) = cluster(&[None]);
    let set = |configs: &[(&str, &str)]| Command::SetBrokerConfigs {
        node: None,
        configs: configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let d = c.decide(&img, &set(&[("a", "1"), ("b", "2")]), 0).expect("set");
    commit(&mut img, &d);
    let d = c.decide(&img, &set(&[("a", "1"), ("c", "3")]), 0).expect("set");
    assert_eq!(d.records.len(), 2, "{:?}", d.records);
    commit(&mut img, &d);
    assert_eq!(img.cluster_configs.keys().collect::<Vec<_>>(), vec!["a", "c"]);
}

#[test]
fn the_first_registration_finalizes_transaction_version_2_once() {
    let (mut c, mut img) = cluster(&[None]);
    assert_eq!(img.features.get(TRANSACTION_VERSION), Some(&2));
    // Later registrations write no feature record again.
    let reg =
        Command::RegisterBroker { node_id: 2, incarnation_id: Uuid::new_v4(), listeners: endpoint(2), rack: None };
    let d = c.decide(&img, &reg, 0).expect("register");
    assert!(!d.records.iter().any(|r| matches!(r, Record::FeatureLevel { .. })), "{:?}", d.records);
    commit(&mut img, &d);
    assert_eq!(img.features.get(TRANSACTION_VERSION), Some(&2));
}

#[test]
fn an_operation_of_more_than_ten_thousand_records_is_refused_whole_as_kafka_does() {
    let (mut c, mut img) = cluster(&[None]);
    let policy =
        |r: Result<(), Refusal>| matches!(r, Err(Refusal::PolicyViolation(m)) if m.contains("excessively large"));
    // A topic record and 10,000 partition records: one too many.
    assert!(policy(create(&mut c, &mut img, "big", 10_000, 1)));
    assert!(img.topic("big").is_none());
    // 9,999 partitions: 10,000 records, the most one operation may write.
    create(&mut c, &mut img, "t", 9_999, 1).expect("at the limit");
    // Partitions added count the same way.
    create(&mut c, &mut img, "small", 1, 1).expect("create");
    let mut grow = |count| {
        c.decide(
            &img,
            &Command::CreatePartitions { name: "small".into(), count, assignments: None, validate_only: true },
            0,
        )
    };
    assert!(matches!(grow(10_002), Err(Refusal::PolicyViolation(_))));
    assert!(grow(10_001).is_ok());
}
