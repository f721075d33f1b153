//! EndTxn under transaction versions 0/1 and 2, markers, completion, and loading.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::test_support::*;
use super::*;
use crate::error::TxnApi;

fn value(c: &Command) -> TxnValue {
    match c {
        Command::Append(w) => w.value.clone().unwrap(),
        c => panic!("{c:?}"),
    }
}

#[test]
fn end_txn_commit_stores_the_decision_answers_then_completes_after_markers() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0), tp("b", 1)], 0).unwrap();
    let cmds = h.end_cmds(p, TxnResult::Commit, 0);
    assert_eq!(cmds.len(), 1, "only the decision, no answer yet");
    let v = value(&cmds[0]);
    assert_eq!((v.state, v.producer_epoch, v.partitions.len()), (TxnState::PrepareCommit, 0, 2));
    let out = h.s.appended(T, Ok(()), h.now);
    let markers = Markers {
        transactional_id: T.into(),
        producer_id: 100,
        producer_epoch: 0,
        result: TxnResult::Commit,
        coordinator_epoch: 3,
        partitions: vec![tp("a", 0), tp("b", 1)],
    };
    // Answered before the markers are written: the decision is durable.
    let ticket = Ticket(3);
    assert_eq!(
        out,
        vec![Command::Answer(ticket, Answer::EndTxn(Ok(ProducerIdAndEpoch::NONE))), Command::SendMarkers(markers)]
    );
    assert!(h.s.marker_written(T, 100, 0, &tp("a", 0)).is_empty());
    let done = h.s.marker_written(T, 100, 0, &tp("b", 1));
    let v = value(&done[0]);
    assert_eq!((v.state, v.producer_epoch, v.partitions.len()), (TxnState::CompleteCommit, 0, 0));
    assert!(h.s.appended(T, Ok(()), h.now).is_empty());
    assert_eq!((h.state(), h.meta().partitions.len()), (TxnState::CompleteCommit, 0));
}

#[test]
fn end_txn_commit_retry_after_complete_is_answered_ok() {
    for tv in [0, 2] {
        let mut h = H::new();
        let p = h.init(T, None).unwrap();
        let next = h.committed(p, tv);
        let written = h.log.len();
        // The retry carries the epoch of the original request.
        let (r, markers) = h.end(p, TxnResult::Commit, tv);
        let expect = if tv >= 2 { next } else { ProducerIdAndEpoch::NONE };
        assert_eq!((r, markers.len(), h.log.len()), (Ok(expect), 0, written), "tv {tv}");
        assert_eq!(h.end(p, TxnResult::Abort, tv).0, Err(TxnError::InvalidTxnState), "tv {tv}");
    }
}

#[test]
fn end_txn_while_markers_are_pending_is_concurrent_transactions() {
    for tv in [0, 2] {
        let mut h = H::new();
        let p = h.init(T, None).unwrap();
        h.add(p, &[tp("a", 0)], tv).unwrap();
        let (next, _markers) = h.end(p, TxnResult::Commit, tv);
        let retry_epoch = if tv >= 2 { next.unwrap() } else { p };
        assert_eq!(h.end(p, TxnResult::Commit, tv).0, Err(TxnError::ConcurrentTransactions), "tv {tv}");
        assert_eq!(h.end(retry_epoch, TxnResult::Abort, tv).0, Err(TxnError::ConcurrentTransactions), "tv {tv}");
    }
}

#[test]
fn end_txn_v1_without_a_transaction_is_invalid_txn_state() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    assert_eq!(h.end(p, TxnResult::Commit, 0).0, Err(TxnError::InvalidTxnState));
    assert_eq!(h.end(p, TxnResult::Abort, 0).0, Err(TxnError::InvalidTxnState));
}

#[test]
fn end_txn_refuses_unknown_ids_other_producers_and_stale_epochs() {
    let mut h = H::new();
    assert_eq!(h.end(pe(1, 0), TxnResult::Commit, 0).0, Err(TxnError::InvalidProducerIdMapping));
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 0).unwrap();
    for tv in [0, 2] {
        assert_eq!(h.end(pe(7, 0), TxnResult::Commit, tv).0, Err(TxnError::InvalidProducerIdMapping));
        assert_eq!(h.end(pe(100, 3), TxnResult::Commit, tv).0, Err(TxnError::ProducerFenced));
    }
    let t = h.ticket();
    let req = EndTxn {
        transactional_id: String::new(),
        producer_id: 100,
        producer_epoch: 0,
        result: TxnResult::Abort,
        client_transaction_version: 2,
    };
    let out = h.s.end_txn(t, &req, h.now, &mut h.pids);
    assert_eq!(out, vec![Command::Answer(t, Answer::EndTxn(Err(TxnError::InvalidRequest)))]);
    assert_eq!(TxnError::ProducerFenced.for_version(TxnApi::EndTxn, 1).code(), 47);
}

#[test]
fn end_txn_v2_commit_bumps_the_epoch_and_answers_it() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 2).unwrap();
    let (r, markers) = h.end(p, TxnResult::Commit, 2);
    assert_eq!(r, Ok(pe(100, 1)));
    // Markers carry the bumped epoch, so the partition refuses the old one afterwards.
    assert_eq!((markers[0].producer_epoch, markers[0].result), (1, TxnResult::Commit));
    h.write_markers(&markers);
    let v = h.last_value();
    assert_eq!((v.state, v.producer_epoch, v.client_transaction_version), (TxnState::CompleteCommit, 1, 2));
    assert_eq!(h.meta().last_producer_epoch, 0);
    // The next transaction runs at the new epoch; the old one is fenced.
    assert_eq!(h.add(p, &[tp("a", 0)], 2), Err(TxnError::ProducerFenced));
    h.add(pe(100, 1), &[tp("a", 0)], 2).unwrap();
    assert_eq!(h.meta().start_timestamp, h.now);
}

#[test]
fn end_txn_v2_abort_without_a_transaction_bumps_the_epoch_with_no_markers() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    assert_eq!(h.end(p, TxnResult::Commit, 2).0, Err(TxnError::InvalidTxnState));
    h.now = 2_000;
    let cmds = h.end_cmds(p, TxnResult::Abort, 2);
    let v = value(&cmds[0]);
    assert_eq!(
        (v.state, v.producer_epoch, v.start_timestamp, v.partitions.len()),
        (TxnState::PrepareAbort, 1, 2_000, 0)
    );
    let out = h.run(cmds);
    assert_eq!((H::only(&out), out.markers.len()), (&Answer::EndTxn(Ok(pe(100, 1))), 0));
    assert_eq!(h.last_value().state, TxnState::CompleteAbort);
    // Its retry is answered as done; an abort at the current epoch bumps again.
    assert_eq!(h.end(p, TxnResult::Abort, 2).0, Ok(pe(100, 1)));
    assert_eq!(h.end(pe(100, 1), TxnResult::Abort, 2).0, Ok(pe(100, 2)));
    // After a commit, an abort at the current epoch is a new (empty) transaction's abort.
    let mut c = H::new();
    let p = c.init(T, None).unwrap();
    let next = c.committed(p, 2);
    assert_eq!(c.end(next, TxnResult::Commit, 2).0, Err(TxnError::InvalidTxnState));
    assert_eq!(c.end(next, TxnResult::Abort, 2).0, Ok(pe(100, 2)));
}

#[test]
fn end_txn_v2_on_empty_with_the_previous_epoch_is_producer_fenced() {
    let mut h = H::new();
    let old = h.init(T, None).unwrap();
    h.init(T, None).unwrap();
    assert_eq!(h.end(old, TxnResult::Abort, 2).0, Err(TxnError::ProducerFenced));
    assert_eq!(h.end(old, TxnResult::Commit, 2).0, Err(TxnError::ProducerFenced));
}

#[test]
fn end_txn_v2_at_exhausted_epoch_moves_to_the_next_producer_id_across_a_reload() {
    let mut h = H::new();
    let exhausted = pe(55, i16::MAX - 1);
    h.load(stored(TxnState::Empty, 55, i16::MAX - 1));
    h.add(exhausted, &[tp("a", 0)], 2).unwrap();
    let cmds = h.end_cmds(exhausted, TxnResult::Commit, 2);
    let v = value(&cmds[0]);
    assert_eq!((v.producer_id, v.producer_epoch, v.next_producer_id), (55, i16::MAX, 100));
    let out = h.run(cmds);
    assert_eq!(H::only(&out), &Answer::EndTxn(Ok(pe(100, 0))));
    assert_eq!((out.markers[0].producer_id, out.markers[0].producer_epoch), (55, i16::MAX));
    // The producer already uses its new id: it waits rather than being fenced.
    assert_eq!(h.add(pe(100, 0), &[tp("a", 0)], 2), Err(TxnError::ConcurrentTransactions));
    assert_eq!(h.end(pe(100, 0), TxnResult::Abort, 2).0, Err(TxnError::ConcurrentTransactions));
    // The coordinator moves; the next one finds NextProducerId in the Prepare record.
    let (s, cmds) = h.reload(h.now);
    h.s = s;
    assert_eq!(h.meta().next_producer_id, 100);
    let resent = h.run(cmds).markers;
    assert_eq!((resent[0].producer_id, resent[0].coordinator_epoch), (55, 4));
    h.write_markers(&resent);
    let v = h.last_value();
    assert_eq!(
        (v.state, v.producer_id, v.producer_epoch, v.previous_producer_id),
        (TxnState::CompleteCommit, 100, 0, 55)
    );
    // A retry of the overflowing commit is recognised through the replaced producer id.
    assert_eq!(h.end(exhausted, TxnResult::Commit, 2).0, Ok(pe(100, 0)));
    h.add(pe(100, 0), &[tp("a", 0)], 2).unwrap();
}

#[test]
fn reload_rebuilds_state_and_resends_markers_of_a_decided_transaction() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0), tp("b", 2)], 2).unwrap();
    let (r, _lost) = h.end(p, TxnResult::Abort, 2);
    assert_eq!(r, Ok(pe(100, 1)));
    let (mut s, cmds) = h.reload(9_000);
    let [Command::SendMarkers(m)] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!((m.producer_id, m.producer_epoch, m.result), (100, 1, TxnResult::Abort));
    assert_eq!(m.partitions, vec![tp("a", 0), tp("b", 2)]);
    let meta = s.get(T).unwrap();
    assert_eq!(
        (meta.state, meta.last_producer_epoch, meta.client_transaction_version),
        (TxnState::PrepareAbort, -1, 2)
    );
    assert_eq!(s.pending_state(T), Some(TxnState::CompleteAbort));
    s.marker_written(T, 100, 1, &tp("a", 0));
    let done = s.marker_written(T, 100, 1, &tp("b", 2));
    let v = value(&done[0]);
    assert_eq!((v.state, v.last_update_timestamp), (TxnState::CompleteAbort, 9_000));
    // Ids with nothing to complete load quietly.
    let mut q = H::new();
    let p = q.init(T, None).unwrap();
    q.add(p, &[tp("a", 0)], 2).unwrap();
    let (s, cmds) = q.reload(0);
    assert!(cmds.is_empty());
    assert_eq!(s.get(T).unwrap().partitions.len(), 1);
}

#[test]
fn reload_completes_a_decided_abort_without_partitions_by_writing_its_completion() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    let cmds = h.end_cmds(p, TxnResult::Abort, 2);
    let Command::Append(prepare) = &cmds[0] else { panic!() };
    h.log.push(prepare.clone());
    // The completion asked for next is lost with the coordinator.
    let out = h.s.appended(T, Ok(()), h.now);
    assert!(matches!(&out[1], Command::Append(_)));
    let (_s, cmds) = h.reload(5_000);
    assert_eq!(value(&cmds[0]).state, TxnState::CompleteAbort);
}

#[test]
fn completion_write_is_retried_while_the_coordinator_is_not_available() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    h.add(p, &[tp("a", 0)], 2).unwrap();
    let (_, markers) = h.end(p, TxnResult::Commit, 2);
    let cmds = h.s.marker_written(T, 100, 1, &markers[0].partitions[0]);
    let again = h.s.appended(T, Err(TxnError::CoordinatorNotAvailable), h.now);
    assert_eq!(again, cmds, "the same completion is asked for again");
    assert!(h.s.appended(T, Ok(()), h.now).is_empty());
    assert_eq!(h.state(), TxnState::CompleteCommit);
}

#[test]
fn stale_marker_acknowledgements_are_ignored() {
    let mut h = H::new();
    let p = h.init(T, None).unwrap();
    assert!(h.s.marker_written(T, 100, 0, &tp("a", 0)).is_empty(), "no transaction to complete");
    h.add(p, &[tp("a", 0), tp("b", 0)], 2).unwrap();
    let _ = h.end(p, TxnResult::Commit, 2);
    // An earlier transaction's marker (old epoch), another producer, an unknown partition.
    assert!(h.s.marker_written(T, 100, 0, &tp("a", 0)).is_empty());
    assert!(h.s.marker_written(T, 7, 1, &tp("a", 0)).is_empty());
    assert!(h.s.marker_written(T, 100, 1, &tp("c", 0)).is_empty());
    assert_eq!(h.meta().partitions.len(), 2);
    assert!(h.s.appended("nope", Ok(()), h.now).is_empty());
}

#[test]
fn records_are_written_in_the_version_the_cluster_finalized() {
    let mut h = H::with(TxnConfig { transaction_version: 0, ..TxnConfig::default() });
    let p = h.init(T, None).unwrap();
    h.committed(p, 0);
    assert!(h.log.iter().all(|w| w.version == 0 && w.value().unwrap()[1] == 0));
    let (s, cmds) = h.reload(0);
    assert!(cmds.is_empty());
    let m = s.get(T).unwrap();
    assert_eq!((m.state, m.producer_epoch, m.prev_producer_id), (TxnState::CompleteCommit, 0, -1));
}

#[test]
fn replay_skips_unknown_keys_and_reports_corrupt_values() {
    let mut s = TxnShard::new(TxnConfig::default(), 0);
    assert_eq!(s.replay(&[0, 5, 0, 0], Some(&[0])), Ok(()));
    let bad = s.replay(&crate::records::encode_key(T), Some(&[0, 1, 0]));
    assert_eq!(bad, Err(RecordError::Truncated));
    assert!(s.iter().next().is_none());
}
