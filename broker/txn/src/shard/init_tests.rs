//! InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, timeouts and expiry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::test_support::*;
use super::*;
use crate::error::TxnApi;

#[test]
fn init_new_transactional_id_answers_only_after_its_record_is_committed() {
    let mut h = H::new();
    let cmds = h.init_cmds(T, None);
    let [Command::Append(w)] = &cmds[..] else { panic!("{cmds:?}") };
    let v = w.value.clone().unwrap();
    assert_eq!((v.producer_id, v.producer_epoch, v.state, v.start_timestamp), (100, 0, TxnState::Empty, -1));
    assert_eq!(w.version, 1, "transaction.version 2 writes flexible values");
    assert_eq!(h.s.pending_state(T), Some(TxnState::Empty));
    // Not applied until committed: the id has no epoch yet.
    assert_eq!(h.meta().producer_epoch, -1);
    let out = h.s.appended(T, Ok(()), h.now);
    assert_eq!(out, vec![Command::Answer(Ticket(1), Answer::InitProducerId(Ok(pe(100, 0))))]);
    assert_eq!(h.meta().producer_epoch, 0);
    assert_eq!(h.s.pending_state(T), None);
}

#[test]
fn init_again_bumps_the_epoch_and_forgets_the_last_one() {
    let mut h = H::new();
    h.init(T, None).unwrap();
    assert_eq!(h.init(T, None), Ok(pe(100, 1)));
    assert_eq!(h.meta().last_producer_epoch, -1);
    assert_eq!(h.meta().timeout_ms, 60_000);
}

#[test]
fn init_rejects_an_empty_transactional_id_and_bad_timeouts() {
    let mut h = H::new();
    assert_eq!(h.init("", None), Err(TxnError::InvalidRequest));
    for timeout in [0, -1, 900_001] {
        let (t, mut req) = (h.ticket(), h.init_req(T, None));
        req.transaction_timeout_ms = timeout;
        let out = h.s.init_producer_id(t, &req, h.now, &mut h.pids);
        assert_eq!(out, vec![Command::Answer(t, Answer::InitProducerId(Err(TxnError::InvalidTransactionTimeout)))]);
    }
    assert!(h.s.get(T).is_none(), "nothing is created for a refused request");
}

#[test]
fn init_while_a_record_is_being_written_is_concurrent_transactions() {
    let mut h = H::new();
    let _pending = h.init_cmds(T, None);
    assert_eq!(h.init(T, None), Err(TxnError::ConcurrentTransactions));
}

#[test]
fn init_failed_write_is_answered_with_its_error_and_can_be_retried() {
    let mut h = H::new();
    h.init_cmds(T, None);
    let out = h.s.appended(T, Err(TxnError::NotCoordinator), h.now);
    assert_eq!(out, vec![Command::Answer(Ticket(1), Answer::InitProducerId(Err(TxnError::NotCoordinator)))]);
    // The id keeps its producer id; the retry gets epoch 0 of it.
    assert_eq!(h.init(T, None), Ok(pe(100, 0)));
}

#[test]
fn init_producer_id_allocation_failure_is_answered() {
    let mut h = H::new();
    h.pids.fail = Some(TxnError::CoordinatorLoadInProgress);
    assert_eq!(h.init(T, None), Err(TxnError::CoordinatorLoadInProgress));
}

#[test]
fn init_with_ongoing_transaction_fences_aborts_and_answers_concurrent_transactions() {
    let mut h = H::new();
    let old = h.init(T, None).unwrap();
    h.add(old, &[tp("a", 0)], 2).unwrap();
    let cmds = h.init_cmds(T, None);
    let [Command::Append(w)] = &cmds[..] else { panic!("{cmds:?}") };
    let v = w.value.clone().unwrap();
    // One bump under transaction version 2 (Kafka 4.1 no longer bumps twice).
    assert_eq!((v.state, v.producer_epoch), (TxnState::PrepareAbort, 1));
    let out = h.run(cmds);
    assert_eq!(H::only(&out), &Answer::InitProducerId(Err(TxnError::ConcurrentTransactions)));
    assert_eq!(out.markers.len(), 1);
    let m = &out.markers[0];
    assert_eq!((m.producer_id, m.producer_epoch, m.result, m.coordinator_epoch), (100, 1, TxnResult::Abort, 3));
    assert_eq!(m.partitions, vec![tp("a", 0)]);
    // Until the markers are written, the retry waits.
    assert_eq!(h.init(T, None), Err(TxnError::ConcurrentTransactions));
    h.write_markers(&out.markers);
    assert_eq!(h.state(), TxnState::CompleteAbort);
    assert_eq!(h.init(T, None), Ok(pe(100, 2)));
    // The zombie is fenced.
    assert_eq!(h.add(old, &[tp("a", 1)], 2), Err(TxnError::ProducerFenced));
}

#[test]
fn init_fence_under_transaction_version_1_keeps_the_fenced_epoch_and_no_last_epoch() {
    let mut h = H::with(TxnConfig { transaction_version: 1, ..TxnConfig::default() });
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 0).unwrap();
    let cmds = h.init_cmds(T, None);
    let out = h.run(cmds);
    let v = h.last_value();
    assert_eq!((v.state, v.producer_epoch, v.client_transaction_version), (TxnState::PrepareAbort, 1, 0));
    assert_eq!(h.meta().last_producer_epoch, -1);
    h.write_markers(&out.markers);
    assert_eq!(h.init(T, None), Ok(pe(100, 2)));
}

#[test]
fn failed_fence_write_is_not_bumped_again_under_transaction_version_1() {
    let mut h = H::with(TxnConfig { transaction_version: 1, ..TxnConfig::default() });
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 0).unwrap();
    h.init_cmds(T, None);
    h.s.appended(T, Err(TxnError::CoordinatorNotAvailable), h.now);
    // The bump stays in memory (the old producer is refused) but was never answered.
    assert_eq!((h.state(), h.meta().producer_epoch), (TxnState::Ongoing, 1));
    assert_eq!(h.add(p, &[tp("b", 0)], 0), Err(TxnError::ProducerFenced));
    let cmds = h.init_cmds(T, None);
    let [Command::Append(w)] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!(w.value.as_ref().unwrap().producer_epoch, 1);
}

#[test]
fn failed_fence_write_leaves_the_epoch_under_transaction_version_2() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 2).unwrap();
    h.init_cmds(T, None);
    h.s.appended(T, Err(TxnError::CoordinatorNotAvailable), h.now);
    assert_eq!((h.state(), h.meta().producer_epoch), (TxnState::Ongoing, 0));
    let cmds = h.init_cmds(T, None);
    let [Command::Append(w)] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!(w.value.as_ref().unwrap().producer_epoch, 1);
}

#[test]
fn kip360_resume_with_current_epoch_bumps_and_remembers_the_last() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    assert_eq!(h.init(T, Some(p)), Ok(pe(100, 1)));
    assert_eq!(h.meta().last_producer_epoch, 0);
    // A retry of that call (its answer lost) gets the same epoch again.
    assert_eq!(h.init(T, Some(p)), Ok(pe(100, 1)));
    // A producer behind both epochs is fenced, as is an unknown producer id.
    assert_eq!(h.init(T, Some(pe(100, 5))), Err(TxnError::ProducerFenced));
    assert_eq!(h.init(T, Some(pe(7, 1))), Err(TxnError::ProducerFenced));
}

#[test]
fn kip360_expected_producer_on_a_new_id_gets_the_new_producer() {
    let mut h = H::new();
    assert_eq!(h.init(T, Some(pe(42, 3))), Ok(pe(100, 0)));
}

#[test]
fn init_at_exhausted_epoch_rotates_to_a_new_producer_id() {
    let mut h = H::new();
    h.load(stored(TxnState::CompleteCommit, 55, i16::MAX - 1));
    assert_eq!(h.init(T, None), Ok(pe(100, 0)));
    assert_eq!((h.meta().prev_producer_id, h.meta().last_producer_epoch), (55, -1));
}

#[test]
fn kip360_retry_after_rotation_is_answered_with_the_new_producer() {
    let mut h = H::new();
    h.load(stored(TxnState::Empty, 55, i16::MAX - 1));
    let old = pe(55, i16::MAX - 1);
    assert_eq!(h.init(T, Some(old)), Ok(pe(100, 0)));
    assert_eq!(h.meta().last_producer_epoch, i16::MAX - 1);
    // The same request again: the replaced producer id with its exhausted epoch.
    assert_eq!(h.init(T, Some(old)), Ok(pe(100, 0)));
    assert_eq!(h.pids.next, 101, "no second producer id");
}

#[test]
fn add_partitions_opens_the_transaction_at_the_time_of_the_first() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.now = 5_000;
    h.add(p, &[tp("a", 0), tp("a", 1)], 0).unwrap();
    let m = h.meta();
    assert_eq!((m.state, m.start_timestamp, m.last_update_timestamp), (TxnState::Ongoing, 5_000, 5_000));
    let v = h.last_value();
    assert_eq!(v.partitions, vec![crate::records::TopicPartitions { topic: "a".into(), partitions: vec![0, 1] }]);
    // More partitions later keep the start time.
    h.now = 6_000;
    h.add(p, &[tp("b", 0)], 0).unwrap();
    assert_eq!((h.meta().start_timestamp, h.meta().partitions.len()), (5_000, 3));
}

#[test]
fn add_partitions_already_in_the_transaction_answers_without_a_write() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0), tp("b", 0)], 0).unwrap();
    let written = h.log.len();
    let (t, req) = (h.ticket(), h.add_req(p, &[tp("b", 0)], 0));
    let out = h.s.add_partitions(t, &req, h.now);
    assert_eq!(out, vec![Command::Answer(t, Answer::AddPartitions(Ok(())))]);
    assert_eq!(h.log.len(), written);
}

#[test]
fn add_partitions_refuses_unknown_ids_other_producers_and_stale_epochs() {
    let mut h = H::new();
    assert_eq!(h.add(pe(1, 0), &[tp("a", 0)], 0), Err(TxnError::InvalidProducerIdMapping));
    let p = h.init(T, None).unwrap();
    assert_eq!(h.add(pe(101, 0), &[tp("a", 0)], 0), Err(TxnError::InvalidProducerIdMapping));
    h.init(T, None).unwrap();
    assert_eq!(h.add(p, &[tp("a", 0)], 0), Err(TxnError::ProducerFenced));
    // Clients before AddPartitionsToTxn v2 are told INVALID_PRODUCER_EPOCH instead.
    assert_eq!(TxnError::ProducerFenced.for_version(TxnApi::AddPartitionsToTxn, 1), TxnError::InvalidProducerEpoch);
}

#[test]
fn add_partitions_while_committing_is_concurrent_transactions() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 0).unwrap();
    let (r, markers) = h.end(p, TxnResult::Commit, 0);
    assert_eq!(r, Ok(ProducerIdAndEpoch::NONE));
    assert_eq!(h.add(p, &[tp("a", 0)], 0), Err(TxnError::ConcurrentTransactions));
    h.write_markers(&markers);
    // After completion the same producer starts its next transaction.
    h.add(p, &[tp("a", 0)], 0).unwrap();
    assert_eq!(h.state(), TxnState::Ongoing);
}

#[test]
fn add_offsets_adds_the_groups_offsets_partition_as_version_0() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    let t = h.ticket();
    let req = AddOffsets {
        transactional_id: T.into(),
        producer_id: p.producer_id,
        producer_epoch: p.epoch,
        offsets_partition: 12,
    };
    let cmds = h.s.add_offsets(t, &req, h.now);
    assert_eq!(H::only(&h.run(cmds)), &Answer::AddPartitions(Ok(())));
    assert!(h.meta().partitions.contains(&tp(GROUP_METADATA_TOPIC, 12)));
    assert_eq!(h.meta().client_transaction_version, 0);
}

#[test]
fn verify_partitions_reports_partitions_outside_the_transaction_as_abortable() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 2).unwrap();
    let got = h.s.verify_partitions(T, p.producer_id, p.epoch, &[tp("a", 0), tp("a", 1)]);
    assert_eq!(got, vec![Ok(()), Err(TxnError::TransactionAbortable)]);
    let fenced = h.s.verify_partitions(T, p.producer_id, 9, &[tp("a", 0)]);
    assert_eq!(fenced, vec![Err(TxnError::ProducerFenced)]);
    assert_eq!(h.s.verify_partitions("nope", 1, 0, &[tp("a", 0)]), vec![Err(TxnError::InvalidProducerIdMapping)]);
}

#[test]
fn timed_out_transaction_is_aborted_by_the_coordinator_with_a_new_epoch() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 2).unwrap();
    // Started at 1 000 with a 60 s timeout: due only after 61 000.
    assert!(h.s.tick(61_000).is_empty());
    h.now = 61_001;
    let cmds = h.s.tick(61_001);
    let out = h.run(cmds);
    assert!(out.answers.is_empty(), "nobody asked");
    assert_eq!(out.markers.len(), 1);
    assert_eq!((out.markers[0].producer_epoch, out.markers[0].result), (1, TxnResult::Abort));
    h.write_markers(&out.markers);
    assert_eq!((h.state(), h.meta().producer_epoch), (TxnState::CompleteAbort, 1));
    assert_eq!(h.add(p, &[tp("a", 0)], 2), Err(TxnError::ProducerFenced));
}

#[test]
fn transactional_id_expires_with_a_tombstone_once_idle_long_enough() {
    let cfg = TxnConfig { transactional_id_expiration_ms: 10_000, ..TxnConfig::default() };
    let mut h = H::with(cfg);
    let p = h.init(T, None).unwrap();
    h.committed(p, 2);
    let idle_since = h.meta().last_update_timestamp;
    assert!(h.s.tick(idle_since + 9_999).is_empty());
    let cmds = h.s.tick(idle_since + 10_000);
    let [Command::Append(w)] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!((w.key(), w.value()), (crate::records::encode_key(T), None));
    assert_eq!(h.s.pending_state(T), Some(TxnState::Dead));
    h.run(cmds);
    assert!(h.s.get(T).is_none());
    assert!(h.reload(0).0.get(T).is_none(), "the tombstone removes it on reload");
}

#[test]
fn ongoing_transaction_never_expires_and_a_failed_tombstone_keeps_the_id() {
    let cfg = TxnConfig { transactional_id_expiration_ms: 10, max_timeout_ms: i32::MAX, ..TxnConfig::default() };
    let mut h = H::with(cfg);
    let (t, mut req) = (h.ticket(), h.init_req(T, None));
    req.transaction_timeout_ms = i32::MAX;
    let cmds = h.s.init_producer_id(t, &req, h.now, &mut h.pids);
    let out = h.run(cmds);
    let Answer::InitProducerId(Ok(p)) = H::only(&out).clone() else { panic!("{out:?}") };
    h.add(p, &[tp("a", 0)], 2).unwrap();
    assert!(h.s.remove_expired(1_000_000).is_empty());
    let mut other = H::with(cfg);
    other.init(T, None).unwrap();
    other.s.remove_expired(1_000_000);
    assert!(other.s.appended(T, Err(TxnError::NotCoordinator), 0).is_empty());
    assert_eq!(other.s.pending_state(T), None);
    assert!(other.s.get(T).is_some());
}

#[test]
fn coordinator_partition_matches_java() {
    // Java's String.hashCode with Kafka's Utils.abs, as for groups.
    assert_eq!(partition_for("my-group", 50), 12);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(client_version_for_end_txn(4), 0);
    assert_eq!(client_version_for_end_txn(5), 2);
    assert_eq!(client_version_for_add_partitions(3), 0);
    assert_eq!(client_version_for_add_partitions(4), 2);
}
