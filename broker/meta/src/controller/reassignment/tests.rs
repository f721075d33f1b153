//! Reassignment rules, on images built by the controller's own decisions.

use crate::controller::tests::{T, cluster, commit};
use crate::controller::{Command, Controller, Decision, Refusal, Reply};
use crate::image::MetadataImage;
use crate::records::{ConfigResource, Configs, NodeId, PartitionRecord, Record};

use super::{Ongoing, Reassignment};

/// A topic `t` whose partitions have exactly these replicas (all in sync, first leads).
fn topic(c: &mut Controller, img: &mut MetadataImage, assignments: &[&[NodeId]]) {
    let cmd = Command::CreateTopic {
        name: "t".into(),
        partitions: assignments.len() as i32,
        replication_factor: assignments[0].len() as i16,
        assignments: Some(assignments.iter().map(|a| a.to_vec()).collect()),
        configs: Configs::new(),
        topic_id: None,
        validate_only: false,
    };
    let d = c.decide(img, &cmd, 0).expect("create");
    commit(img, &d);
}

fn part(img: &MetadataImage, p: usize) -> PartitionRecord {
    img.topic("t").expect("t").partitions[p].clone()
}

fn move_to(p: i32, replicas: Option<&[NodeId]>) -> Reassignment {
    Reassignment { topic: "t".into(), partition: p, replicas: replicas.map(<[NodeId]>::to_vec) }
}

/// Decides one AlterPartitionReassignments, commits it, returns the per-partition refusals.
fn alter(c: &mut Controller, img: &mut MetadataImage, moves: Vec<Reassignment>, rf: bool) -> Vec<Option<Refusal>> {
    let d = c.decide(img, &Command::AlterReassignments { partitions: moves, allow_rf_change: rf }, T).expect("alter");
    commit(img, &d);
    let Reply::Reassignments(r) = d.reply else { panic!("reply {:?}", d.reply) };
    r.into_iter().map(|(_, _, e)| e).collect()
}

fn list(c: &mut Controller, img: &MetadataImage, which: Option<Vec<(String, Vec<i32>)>>) -> Vec<Ongoing> {
    let d = c.decide(img, &Command::ListReassignments { partitions: which }, T).expect("list");
    assert!(d.records.is_empty(), "listing writes nothing");
    let Reply::Reassigning(r) = d.reply else { panic!("reply {:?}", d.reply) };
    r
}

/// The leader of partition `p` asks for `isr`; returns the reply's leader.
fn isr_change(c: &mut Controller, img: &mut MetadataImage, p: usize, isr: &[NodeId]) -> NodeId {
    let now = part(img, p);
    let id = img.topic("t").expect("t").id;
    let cmd = Command::AlterPartition {
        node_id: now.leader,
        broker_epoch: img.brokers[&now.leader].epoch,
        topic_id: id,
        partition: p as i32,
        leader_epoch: now.leader_epoch,
        partition_epoch: now.partition_epoch,
        isr: isr.to_vec(),
    };
    let d = c.decide(img, &cmd, T).expect("alter partition");
    commit(img, &d);
    let Reply::Partition { leader, .. } = d.reply else { panic!("reply {:?}", d.reply) };
    leader
}

#[test]
fn a_move_adds_then_completes_when_every_target_replica_is_in_sync() {
    let (mut c, mut img) = cluster(&[None, None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2]]);
    let before = part(&img, 0);
    assert_eq!(alter(&mut c, &mut img, vec![move_to(0, Some(&[3, 2]))], true), vec![None]);
    let p = part(&img, 0);
    // Kafka's order: the target, then the removing replicas; the leader stays while it can.
    assert_eq!((p.replicas.clone(), p.adding.clone(), p.removing.clone()), (vec![3, 2, 1], vec![3], vec![1]));
    assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (1, vec![1, 2], before.leader_epoch));
    let listed = list(&mut c, &img, None);
    assert_eq!(
        listed,
        vec![Ongoing { topic: "t".into(), partition: 0, replicas: vec![3, 2, 1], adding: vec![3], removing: vec![1] }]
    );
    // The new replica catches up and the leader adds it to the ISR: the move completes, the
    // removed leader hands over to the first target replica in sync.
    let leader = isr_change(&mut c, &mut img, 0, &[1, 2, 3]);
    let p = part(&img, 0);
    assert_eq!((p.replicas.clone(), p.isr.clone()), (vec![3, 2], vec![2, 3]));
    assert!(p.adding.is_empty() && p.removing.is_empty());
    assert_eq!((leader, p.leader, p.leader_epoch), (3, 3, before.leader_epoch + 1));
    assert!(list(&mut c, &img, None).is_empty());
}

#[test]
fn a_move_that_only_removes_completes_at_once_with_a_new_leader_epoch() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2, 3]]);
    let before = part(&img, 0);
    assert_eq!(alter(&mut c, &mut img, vec![move_to(0, Some(&[1, 2]))], true), vec![None]);
    let p = part(&img, 0);
    assert_eq!((p.replicas.clone(), p.isr.clone(), p.leader), (vec![1, 2], vec![1, 2], 1));
    assert!(!p.is_reassigning());
    assert_eq!(p.leader_epoch, before.leader_epoch + 1, "the removed replica's fetches are fenced");
    // The same target again changes nothing.
    let d = c
        .decide(
            &img,
            &Command::AlterReassignments { partitions: vec![move_to(0, Some(&[1, 2]))], allow_rf_change: true },
            T,
        )
        .expect("again");
    assert!(d.records.is_empty());
}

#[test]
fn cancel_drops_the_adding_replicas() {
    let (mut c, mut img) = cluster(&[None, None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2], &[2, 1]]);
    alter(&mut c, &mut img, vec![move_to(0, Some(&[3, 4])), move_to(1, Some(&[2, 3]))], true);
    assert_eq!(list(&mut c, &img, Some(vec![("t".into(), vec![1, 7]), ("nope".into(), vec![0])])).len(), 1);
    let r = alter(&mut c, &mut img, vec![move_to(0, None)], true);
    assert_eq!(r, vec![None]);
    let p = part(&img, 0);
    assert_eq!((p.replicas.clone(), p.isr.clone(), p.leader), (vec![1, 2], vec![1, 2], 1));
    assert!(!p.is_reassigning());
    let r = alter(&mut c, &mut img, vec![move_to(0, None)], true);
    assert!(
        matches!(&r[0], Some(Refusal::NoReassignmentInProgress(m)) if m == "No partition reassignment is in progress.")
    );
    assert_eq!(list(&mut c, &img, None).len(), 1, "partition 1 still moves");
}

#[test]
fn a_new_target_replaces_the_move_in_flight() {
    let (mut c, mut img) = cluster(&[None, None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2]]);
    alter(&mut c, &mut img, vec![move_to(0, Some(&[3, 4]))], true);
    alter(&mut c, &mut img, vec![move_to(0, Some(&[1, 3]))], true);
    let p = part(&img, 0);
    // What the first move was adding counts as current: 3 stays, 4 and 2 go once 3 is in sync.
    assert_eq!((p.replicas.clone(), p.adding.clone(), p.removing.clone()), (vec![1, 3, 2, 4], vec![], vec![2, 4]));
    isr_change(&mut c, &mut img, 0, &[1, 2, 3]);
    let p = part(&img, 0);
    assert_eq!((p.replicas.clone(), p.isr.clone(), p.leader), (vec![1, 3], vec![1, 3], 1));
}

#[test]
fn refusals_carry_kafkas_messages() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2]]);
    let r = alter(
        &mut c,
        &mut img,
        vec![
            Reassignment { topic: "nope".into(), partition: 0, replicas: Some(vec![1]) },
            move_to(5, Some(&[1, 2])),
            move_to(0, Some(&[])),
            move_to(0, Some(&[1, 9])),
            move_to(0, Some(&[2, 2])),
            move_to(0, Some(&[1, 2, 3])),
        ],
        false,
    );
    let messages: Vec<String> = r.iter().map(|e| e.as_ref().map(ToString::to_string).unwrap_or_default()).collect();
    assert_eq!(
        messages,
        vec![
            "Unable to find a topic named nope.",
            "Unable to find partition t:5.",
            "The manual partition assignment includes an empty replica list.",
            "The manual partition assignment includes broker 9, but no such broker is registered.",
            "The manual partition assignment includes the broker 2 more than once.",
            "The replication factor is changed from 2 to 3",
        ]
    );
    assert!(matches!(r[0], Some(Refusal::UnknownTopic(_))) && matches!(r[1], Some(Refusal::UnknownTopic(_))));
    assert!(matches!(r[3], Some(Refusal::InvalidReplicaAssignment(_))));
    assert!(matches!(r[5], Some(Refusal::InvalidReplicationFactor(_))));
    assert!(!part(&img, 0).is_reassigning(), "nothing refused took effect");
    // KIP-860: with the change allowed, the replication factor grows.
    assert_eq!(alter(&mut c, &mut img, vec![move_to(0, Some(&[1, 2, 3]))], true), vec![None]);
    assert_eq!(part(&img, 0).adding, vec![3]);
}

/// `t-0` moving from [1, 2] to [3, 4] with only 3 in sync, brokers 1 and 2 fenced: the ISR
/// holds nothing but an adding replica.
fn isr_of_adding_replicas_only(unclean: bool) -> (Controller, MetadataImage) {
    let (mut c, mut img) = cluster(&[None, None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2]]);
    if unclean {
        let set = Record::Config {
            resource: ConfigResource::Topic("t".into()),
            key: "unclean.leader.election.enable".into(),
            value: Some("true".into()),
        };
        commit(&mut img, &Decision::new(vec![set], Reply::Done));
    }
    alter(&mut c, &mut img, vec![move_to(0, Some(&[3, 4]))], true);
    isr_change(&mut c, &mut img, 0, &[1, 2, 3]);
    for id in [3, 4] {
        let epoch = img.brokers[&id].epoch;
        c.decide(&img, &Command::Heartbeat { node_id: id, epoch, shutting_down: false }, T).expect("hb");
    }
    let records = c.expire_sessions(&img, T + 1);
    commit(&mut img, &Decision::new(records, Reply::Done));
    let p = part(&img, 0);
    assert_eq!((p.leader, p.isr.clone()), (3, vec![3]), "{p:?}");
    (c, img)
}

#[test]
fn cancel_that_needs_an_unclean_election_is_refused_unless_allowed() {
    let (mut c, mut img) = isr_of_adding_replicas_only(false);
    let r = alter(&mut c, &mut img, vec![move_to(0, None)], true);
    assert_eq!(
        r[0].as_ref().map(ToString::to_string).as_deref(),
        Some("Unable to revert partition assignment for t:0 because it would require an unclean leader election.")
    );
    assert!(matches!(r[0], Some(Refusal::InvalidReplicaAssignment(_))));
    let (mut c, mut img) = isr_of_adding_replicas_only(true);
    assert_eq!(alter(&mut c, &mut img, vec![move_to(0, None)], true), vec![None]);
    let p = part(&img, 0);
    // Back on [1, 2], both fenced: no leader, the first original replica holds the ISR.
    assert_eq!((p.replicas.clone(), p.isr.clone(), p.leader), (vec![1, 2], vec![1], -1));
}

#[test]
fn unregistered_brokers_leave_the_metadata() {
    let (mut c, mut img) = cluster(&[None, None, None]);
    topic(&mut c, &mut img, &[&[1, 2], &[2, 3]]);
    let unknown = c.decide(&img, &Command::UnregisterBroker { node_id: 7 }, T);
    assert!(
        matches!(&unknown, Err(Refusal::BrokerNotRegistered(m)) if m == "Broker ID 7 is not currently registered"),
        "{unknown:?}"
    );
    let d = c.decide(&img, &Command::UnregisterBroker { node_id: 2 }, T).expect("unregister");
    commit(&mut img, &d);
    assert!(!img.brokers.contains_key(&2));
    for p in &img.topic("t").expect("t").partitions {
        assert_ne!(p.leader, 2, "{p:?}");
        assert!(!p.isr.contains(&2), "{p:?}");
        assert!(p.replicas.contains(&2), "its id stays in replica lists until they move: {p:?}");
    }
    // Moving its replicas away needs no registration of the broker that leaves.
    assert_eq!(alter(&mut c, &mut img, vec![move_to(1, Some(&[3, 1]))], true), vec![None]);
    isr_change(&mut c, &mut img, 1, &[3, 1]);
    assert_eq!(part(&img, 1).replicas, vec![3, 1]);
}
