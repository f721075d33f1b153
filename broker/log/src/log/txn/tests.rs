//! Transactions on a real log: markers, the first unstable and last stable offsets, aborted
//! transactions across segments, truncation, restarts (clean and killed), followers, expiry
//! and compaction.

use std::error::Error;
use std::path::{Path, PathBuf};

use kafka_protocol::records::{Compression, RecordBatchDecoder};

use crate::batch::{BatchHeader, validate_produce};
use crate::control::{self, EndTxnMarker};
use crate::segment::file_name;
use crate::testing;
use crate::txn_index::TxnIndex;
use crate::{AppendResult, Log, LogConfig, LogError, OpenOptions, ReadStart};

pub(super) type R<T = ()> = Result<T, Box<dyn Error>>;
/// A record read back: (offset, key, value, is control).
pub(super) type Rec = (i64, String, String, bool);
/// A data record read back: (offset, key, value).
pub(super) type KeyValue = (i64, String, String);

pub(super) fn opts(clean: bool, recovery_point: i64) -> OpenOptions {
    OpenOptions { clean_shutdown: clean, recovery_point, log_start_offset: None, high_watermark: None, now_ms: 0 }
}

pub(super) fn open(dir: &Path, config: LogConfig, clean: bool, recovery_point: i64) -> Result<Log, LogError> {
    Log::open(dir, config, opts(clean, recovery_point)).map(|(log, _)| log)
}

/// Segments large enough to roll only where a test calls [`Log::roll`].
pub(super) fn hand_rolled() -> LogConfig {
    LogConfig { segment_bytes: 1 << 20, index_interval_bytes: 256, segment_index_bytes: 4096, ..LogConfig::default() }
}

pub(super) fn produce(log: &mut Log, b: &[u8]) -> Result<AppendResult, LogError> {
    let v = validate_produce(b, 1 << 20)?;
    log.append(b, &v, 0, 0, crate::log::Flush::Now)
}

/// A transactional batch of `n` records from producer `pid`.
pub(super) fn txn(log: &mut Log, pid: i64, epoch: i16, seq: i32, n: i64) -> Result<AppendResult, LogError> {
    produce(log, &testing::txn_batch(n, 0, (pid, epoch, seq)))
}

/// `n` records without a producer id.
pub(super) fn plain(log: &mut Log, n: i64) -> Result<AppendResult, LogError> {
    produce(log, &testing::batch(n, 0, 0, Compression::None, None))
}

/// The coordinator's marker (coordinator epoch 0, leader epoch 0).
pub(super) fn end(log: &mut Log, pid: i64, epoch: i16, commit: bool) -> Result<AppendResult, LogError> {
    log.append_marker(pid, epoch, 0, commit, 0, 0)
}

pub(super) fn txn_index_path(log: &Log, base: i64) -> PathBuf {
    log.dir().join(file_name(base, "txnindex"))
}

pub(super) fn index_entries(log: &Log, base: i64) -> Result<Vec<crate::txn_index::AbortedTxn>, LogError> {
    TxnIndex::open(&txn_index_path(log, base), base)?.0.entries()
}

/// The bytes from `from` to the log end, as a fetch (or a follower) gets them.
pub(super) fn raw_from(log: &Log, from: i64) -> Result<Vec<u8>, LogError> {
    Ok(match log.read(from, 1 << 24, log.log_end_offset(), true)? {
        ReadStart::Empty => Vec::new(),
        ReadStart::Plan(p) => p.execute()?.to_vec(),
    })
}

/// Every record from the log start, segment after segment: (offset, key, value, is control).
pub(super) fn records(log: &Log) -> R<Vec<Rec>> {
    let s = |b: &Option<bytes::Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).to_string()).unwrap_or_default();
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let raw = raw_from(log, next)?;
        let Some((_, last)) = crate::batch::BatchIter::new(&raw).last() else { break };
        next = last.next_offset();
        for set in RecordBatchDecoder::decode_all(&mut bytes::Bytes::from(raw))? {
            for r in set.records {
                out.push((r.offset, s(&r.key), s(&r.value), r.control));
            }
        }
    }
    Ok(out)
}

#[test]
fn open_transactions_and_markers_of_two_producers() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0)?;
    plain(&mut log, 3)?;
    assert_eq!(txn(&mut log, 1, 0, 0, 2)?.base_offset, 3);
    assert_eq!(txn(&mut log, 2, 0, 0, 3)?.base_offset, 5);
    assert_eq!(txn(&mut log, 1, 0, 2, 1)?.base_offset, 8);
    log.set_high_watermark(9);
    assert_eq!(log.producer_state().ongoing_transactions(), vec![(3, 1), (5, 2)]);
    assert_eq!(log.first_unstable_offset(), Some(3));
    assert_eq!(log.last_stable_offset(), 3);

    let r = end(&mut log, 1, 0, true)?;
    assert_eq!((r.base_offset, r.last_offset, r.records, r.duplicate), (9, 9, 1, false));
    assert_eq!(log.first_unstable_offset(), Some(3), "unstable until the marker is below the high watermark");
    log.set_high_watermark(10);
    assert_eq!(log.first_unstable_offset(), Some(5));
    assert_eq!(log.last_stable_offset(), 5);
    assert!(!txn_index_path(&log, 0).exists(), "a commit indexes nothing: no file yet");

    end(&mut log, 2, 0, false)?;
    log.set_high_watermark(11);
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(), 11);
    assert_eq!(log.aborted_transactions(0, 11)?, vec![(2, 5)]);
    assert_eq!(log.aborted_transactions(11, 20)?, vec![], "the abort ended before the fetch");
    assert_eq!(log.aborted_transactions(0, 5)?, vec![], "the range ends before it starts");
    // Kafka's entry: version 0, producer 2, offsets 5..=10, LSO 11 (nothing else open).
    let bytes = std::fs::read(txn_index_path(&log, 0))?;
    let mut want = vec![0u8, 0];
    for v in [2i64, 5, 10, 11] {
        want.extend_from_slice(&v.to_be_bytes());
    }
    assert_eq!(bytes, want);
    // The marker on disk: a control batch of producer 2 at offset 10.
    let raw = raw_from(&log, 10)?;
    let h = BatchHeader::parse(&raw).ok_or("no batch at 10")?;
    assert_eq!((h.base_offset, h.attributes, h.producer_id, h.base_sequence), (10, 0x30, 2, -1));
    assert_eq!(control::parse_marker(&raw)?, Some(EndTxnMarker { commit: false, coordinator_epoch: 0 }));
    Ok(())
}

#[test]
fn markers_are_fenced_by_producer_and_coordinator_epochs() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0)?;
    txn(&mut log, 1, 3, 0, 2)?;
    assert!(matches!(log.append_marker(1, 2, 0, true, 0, 0), Err(LogError::ProducerFenced { current: 3, got: 2, .. })));
    log.append_marker(1, 3, 5, true, 0, 0)?;
    assert!(matches!(
        log.append_marker(1, 3, 4, false, 0, 0),
        Err(LogError::CoordinatorFenced { current: 5, got: 4, .. })
    ));
    assert_eq!(log.log_end_offset(), 3, "refused markers write nothing");
    // Same epoch after a commit: sequences go on, and a new transaction opens.
    assert_eq!(txn(&mut log, 1, 3, 2, 1)?.base_offset, 3);
    let idempotent = testing::batch(1, 0, 0, Compression::None, Some((1, 3, 3)));
    assert!(matches!(produce(&mut log, &idempotent), Err(LogError::InvalidTxnState { .. })));
    assert!(matches!(txn(&mut log, 1, 2, 0, 1), Err(LogError::ProducerFenced { .. })));
    // A coordinator that bumped the epoch aborts it; the new epoch starts at sequence 0.
    log.append_marker(1, 4, 5, false, 0, 0)?;
    log.set_high_watermark(5);
    assert_eq!(log.aborted_transactions(0, 5)?, vec![(1, 3)]);
    assert!(matches!(txn(&mut log, 1, 4, 3, 1), Err(LogError::OutOfOrderSequence { expected: 0, .. })));
    assert_eq!(txn(&mut log, 1, 4, 0, 1)?.base_offset, 5);
    // A marker for a producer with nothing open is written, and completes nothing.
    assert_eq!(log.append_marker(77, 0, 0, false, 0, 0)?.base_offset, 6);
    log.set_high_watermark(7);
    assert_eq!(log.aborted_transactions(0, 7)?, vec![(1, 3)]);
    assert_eq!(log.first_unstable_offset(), Some(5));
    Ok(())
}

#[test]
fn aborted_transactions_across_segment_rolls() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), hand_rolled(), true, 0)?;
    txn(&mut log, 1, 0, 0, 2)?; // A: 0..=1
    plain(&mut log, 3)?; // 2..=4
    log.roll(0)?;
    txn(&mut log, 2, 0, 0, 2)?; // B: 5..=6
    plain(&mut log, 2)?; // 7..=8
    log.roll(0)?;
    end(&mut log, 1, 0, false)?; // A aborted at 9, B still open: LSO 5
    txn(&mut log, 3, 0, 0, 2)?; // C: 10..=11
    end(&mut log, 2, 0, true)?; // B committed at 12
    log.roll(0)?;
    end(&mut log, 3, 0, false)?; // C aborted at 13: LSO 14
    plain(&mut log, 2)?; // 14..=15
    log.set_high_watermark(16);
    assert_eq!(log.segment_base_offsets(), vec![0, 5, 9, 13]);
    assert_eq!(index_entries(&log, 9)?.iter().map(|t| t.last_stable_offset).collect::<Vec<_>>(), vec![5]);
    assert_eq!(index_entries(&log, 13)?.iter().map(|t| t.last_stable_offset).collect::<Vec<_>>(), vec![14]);
    assert!(!txn_index_path(&log, 0).exists() && !txn_index_path(&log, 5).exists());

    // A started two segments before its marker: a fetch from its start still finds it.
    assert_eq!(log.aborted_transactions(0, 16)?, vec![(1, 0), (3, 10)]);
    // A's LSO (5) reaches the upper bound 5: the search stops after its segment.
    assert_eq!(log.aborted_transactions(0, 5)?, vec![(1, 0)]);
    // From inside B: A overlaps (its marker is after the fetch offset), C starts after 9.
    assert_eq!(log.aborted_transactions(6, 9)?, vec![(1, 0)]);
    assert_eq!(log.aborted_transactions(10, 16)?, vec![(3, 10)]);
    assert_eq!(log.aborted_transactions(14, 16)?, vec![]);
    // Segments deleted below the log start take their index with them.
    log.delete_records_before(13)?;
    assert!(!txn_index_path(&log, 9).exists());
    assert_eq!(log.aborted_transactions(13, 16)?, vec![(3, 10)]);
    Ok(())
}

#[test]
fn sealed_transaction_indexes_are_synced_by_the_flusher_before_the_recovery_point_passes() -> R {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), hand_rolled(), true, 0)?;
    txn(&mut log, 1, 0, 0, 2)?; // 0..=1
    end(&mut log, 1, 0, false)?; // 2, indexed in segment 0
    log.roll(0)?;
    plain(&mut log, 2)?; // 3..=4, nothing to index
    log.roll(0)?;
    let rp = log.recovery_point();
    // Sealing synced nothing (it runs under the partition lock): the flusher gets both files of
    // segment 0 and the log file of segment 3, to sync outside the lock.
    let plan = log.pending_flush().ok_or("two segments to flush")?;
    assert_eq!(plan.upto, 5);
    let inode = |p: PathBuf| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let mut got: Vec<(u64, u64)> =
        plan.files.iter().map(|f| f.metadata().map(|m| (m.dev(), m.ino()))).collect::<Result<_, _>>()?;
    let mut want = vec![
        inode(d.path().join(file_name(0, "log")))?,
        inode(txn_index_path(&log, 0))?,
        inode(d.path().join(file_name(3, "log")))?,
    ];
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(log.recovery_point(), rp, "nothing below it is on disk yet");
    plan.sync()?;
    log.flushed(&plan, 0);
    assert_eq!(log.recovery_point(), 5);
    assert!(log.pending_flush().is_none(), "the index counts as synced too");
    // Log::flush syncs a sealed segment's index as well.
    end(&mut log, 1, 0, false)?; // 5: nothing open, nothing indexed
    txn(&mut log, 2, 0, 0, 1)?; // 6
    end(&mut log, 2, 0, false)?; // 7
    log.roll(0)?;
    log.flush(0)?;
    assert!(log.pending_flush().is_none());
    assert_eq!(log.recovery_point(), 8);
    Ok(())
}

#[test]
fn the_last_stable_offset_follows_the_high_watermark() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0)?;
    plain(&mut log, 3)?;
    txn(&mut log, 1, 0, 0, 3)?; // 3..=5
    log.set_high_watermark(1);
    assert_eq!(log.last_stable_offset(), 1, "the high watermark is below the transaction");
    log.set_high_watermark(4);
    assert_eq!(log.last_stable_offset(), 3);
    log.set_high_watermark(6);
    assert_eq!(log.last_stable_offset(), 3);
    end(&mut log, 1, 0, true)?; // 6
    assert_eq!(log.last_stable_offset(), 3, "the commit is not replicated yet");
    log.set_high_watermark(7);
    assert_eq!(log.last_stable_offset(), 7);
    // An open transaction whose start was deleted: the first unstable offset is the log start.
    txn(&mut log, 2, 0, 0, 2)?; // 7..=8
    log.set_high_watermark(9);
    log.delete_records_before(8)?;
    assert_eq!(log.first_unstable_offset(), Some(8));
    assert_eq!(log.last_stable_offset(), 8);
    Ok(())
}

#[test]
fn truncation_drops_index_entries_and_reopens_transactions() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), hand_rolled(), true, 0)?;
    txn(&mut log, 1, 0, 0, 2)?; // 0..=1
    end(&mut log, 1, 0, false)?; // 2
    log.roll(0)?;
    txn(&mut log, 2, 0, 0, 2)?; // 3..=4
    end(&mut log, 2, 0, false)?; // 5
    log.set_high_watermark(6);
    assert_eq!(log.aborted_transactions(0, 6)?, vec![(1, 0), (2, 3)]);
    assert_eq!(log.first_unstable_offset(), None);

    // Cut the second marker (active segment): its entry goes, producer 2's transaction reopens
    // (producer state is reloaded from the snapshot at 3 and the batches after it).
    assert_eq!(log.truncate_to(5, 0)?, 5);
    assert_eq!(log.aborted_transactions(0, 5)?, vec![(1, 0)]);
    assert_eq!(log.first_unstable_offset(), Some(3));
    assert!(index_entries(&log, 3)?.is_empty());
    // Cut inside the sealed segment: the later segment goes with its index, the first marker
    // with its entry, and producer 1's transaction is open again.
    assert_eq!(log.truncate_to(2, 0)?, 2);
    assert_eq!(log.segment_base_offsets(), vec![0]);
    assert!(!txn_index_path(&log, 3).exists());
    assert_eq!(log.aborted_transactions(0, 2)?, vec![]);
    assert_eq!(log.producer_state().ongoing_transactions(), vec![(0, 1)]);
    assert_eq!(log.first_unstable_offset(), Some(0));
    // The coordinator's marker completes it again.
    end(&mut log, 1, 0, true)?;
    log.set_high_watermark(3);
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.aborted_transactions(0, 3)?, vec![]);
    Ok(())
}

#[test]
fn a_clean_restart_keeps_open_transactions_and_coordinator_epochs() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0)?;
    txn(&mut log, 1, 0, 0, 2)?; // 0..=1, left open
    txn(&mut log, 2, 0, 0, 1)?; // 2
    log.append_marker(2, 0, 3, false, 0, 0)?; // 3, LSO 0 (producer 1 is open)
    log.set_high_watermark(4);
    let before = (log.first_unstable_offset(), log.aborted_transactions(0, 4)?);
    assert_eq!(before, (Some(0), vec![(2, 2)]));
    let rp = log.close(0)?;
    let mut log = open(d.path(), LogConfig::default(), true, rp)?;
    assert_eq!((log.first_unstable_offset(), log.aborted_transactions(0, 4)?), before);
    assert_eq!(log.producer_state().ongoing_transactions(), vec![(0, 1)]);
    assert_eq!(index_entries(&log, 0)?[0].last_stable_offset, 0);
    // The coordinator epoch survived in the snapshot: an older coordinator is still fenced.
    assert!(matches!(log.append_marker(2, 0, 2, true, 0, 0), Err(LogError::CoordinatorFenced { .. })));
    log.append_marker(1, 0, 3, true, 0, 0)?;
    log.set_high_watermark(5);
    assert_eq!(log.first_unstable_offset(), None);
    Ok(())
}

#[test]
fn a_killed_broker_rebuilds_open_transactions_and_transaction_indexes() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), hand_rolled(), true, 0)?;
    txn(&mut log, 1, 0, 0, 2)?; // A: 0..=1, open across the flush
    txn(&mut log, 2, 0, 0, 2)?; // B: 2..=3
    end(&mut log, 2, 0, false)?; // 4: B aborted, LSO 0
    log.roll(0)?; // segment 5; its snapshot holds A open
    log.flush(0)?;
    let rp = log.recovery_point();
    assert_eq!(rp, 5);
    txn(&mut log, 3, 0, 0, 2)?; // C: 5..=6
    end(&mut log, 1, 0, false)?; // 7: A aborted, LSO 5 (C)
    log.roll(0)?; // segment 8
    end(&mut log, 3, 0, false)?; // 8: C aborted, LSO 9
    txn(&mut log, 4, 0, 0, 1)?; // D: 9, left open
    log.set_high_watermark(10);
    let state = |log: &Log| -> Result<_, LogError> {
        Ok((
            log.first_unstable_offset(),
            log.producer_state().ongoing_transactions(),
            log.aborted_transactions(0, 10)?,
            [0, 5, 8].map(|b| index_entries(log, b).unwrap_or_default()),
        ))
    };
    let before = state(&log)?;
    assert_eq!(before.2, vec![(2, 2), (1, 0), (3, 5)]);
    assert_eq!(before.3[1][0].last_stable_offset, 5);
    drop(log); // SIGKILL: no close, no snapshot at the log end

    // Segments past the recovery point are rescanned and their indexes rebuilt: one lost, one
    // with a torn entry.
    std::fs::remove_file(d.path().join(file_name(5, "txnindex")))?;
    let p8 = d.path().join(file_name(8, "txnindex"));
    let mut torn = std::fs::read(&p8)?;
    torn.extend_from_slice(&[0, 0, 7]);
    std::fs::write(&p8, torn)?;
    let log = open(d.path(), hand_rolled(), false, rp)?;
    assert_eq!(state(&log)?, before);
    assert_eq!(std::fs::metadata(&p8)?.len(), 34);

    // With no recovery point everything is rescanned and replayed from the log start.
    drop(log);
    std::fs::remove_file(d.path().join(file_name(0, "txnindex")))?;
    let mut log = open(d.path(), hand_rolled(), false, 0)?;
    assert_eq!(state(&log)?, before);
    // A trusted segment's damaged index is rebuilt too.
    log.flush(0)?;
    let rp = log.recovery_point();
    drop(log);
    let p0 = d.path().join(file_name(0, "txnindex"));
    let mut torn = std::fs::read(&p0)?;
    torn.push(9);
    std::fs::write(&p0, torn)?;
    let log = open(d.path(), hand_rolled(), false, rp)?;
    assert_eq!(state(&log)?, before);
    Ok(())
}

#[test]
fn a_failed_index_write_leaves_the_transaction_open_until_the_index_is_rebuilt() -> R {
    for crash in [true, false] {
        let d = tempfile::tempdir()?;
        let mut log = open(d.path(), hand_rolled(), true, 0)?;
        txn(&mut log, 1, 0, 0, 2)?; // 0..=1
        txn(&mut log, 2, 0, 0, 1)?; // 2
        log.flush(0)?;
        assert_eq!(log.recovery_point(), 3);
        // The index file cannot be created: its path is taken by a directory.
        let p = txn_index_path(&log, 0);
        std::fs::create_dir(&p)?;
        let err = end(&mut log, 1, 0, false).err().ok_or("the index write must fail")?; // 3
        assert!(err.is_storage_error(), "{err}");
        std::fs::remove_dir(&p)?;
        assert_eq!(log.log_end_offset(), 4, "the marker is in the log");
        log.set_high_watermark(4);
        // Open in the producer's entry as in the partition's transactions: the LSO stays at 0.
        assert_eq!(log.producer_state().get(1).and_then(|e| e.txn_first_offset), Some(0));
        assert_eq!(log.producer_state().ongoing_transactions(), vec![(0, 1), (2, 2)]);
        assert_eq!(log.last_stable_offset(), 0);
        assert_eq!(log.recovery_point(), 0, "a crash must rescan the segment");
        // The log goes on; flushes keep the recovery point at the segment.
        end(&mut log, 2, 0, true)?; // 4
        log.roll(0)?; // its snapshot holds producer 1 open
        plain(&mut log, 1)?; // 5
        log.flush(0)?;
        assert_eq!(log.recovery_point(), 0);
        let mut log = if crash {
            let rp = log.recovery_point();
            drop(log);
            open(d.path(), hand_rolled(), false, rp)?
        } else {
            let rp = log.close(0)?;
            open(d.path(), hand_rolled(), true, rp)?
        };
        // Rebuilt from the log: the abort is indexed and nothing is open.
        log.set_high_watermark(6);
        assert_eq!(log.aborted_transactions(0, 6)?, vec![(1, 0)], "crash: {crash}");
        assert_eq!(index_entries(&log, 0)?.iter().map(|t| t.last_stable_offset).collect::<Vec<_>>(), vec![2]);
        assert!(log.producer_state().ongoing_transactions().is_empty());
        assert_eq!(log.last_stable_offset(), 6);
        // And the snapshot that held producer 1 open is gone: a truncation reloads the truth.
        log.truncate_to(5, 0)?;
        assert!(log.producer_state().ongoing_transactions().is_empty());
        assert_eq!(log.aborted_transactions(0, 5)?, vec![(1, 0)]);
    }
    Ok(())
}

#[test]
fn followers_replay_markers_into_their_state_and_index() -> R {
    let (ld, fd) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut leader = open(ld.path(), LogConfig::default(), true, 0)?;
    let mut follower = open(fd.path(), LogConfig::default(), true, 0)?;
    txn(&mut leader, 1, 0, 0, 2)?; // 0..=1
    txn(&mut leader, 2, 0, 0, 2)?; // 2..=3
    end(&mut leader, 1, 0, false)?; // 4
    end(&mut leader, 2, 0, true)?; // 5
    txn(&mut leader, 3, 0, 0, 1)?; // 6, open
    follower.append_as_follower(&raw_from(&leader, 0)?, 0)?;
    for log in [&mut leader, &mut follower] {
        log.set_high_watermark(7);
    }
    assert_eq!(follower.aborted_transactions(0, 7)?, vec![(1, 0)]);
    assert_eq!(follower.aborted_transactions(0, 7)?, leader.aborted_transactions(0, 7)?);
    assert_eq!(follower.first_unstable_offset(), Some(6));
    assert_eq!(follower.producer_state().ongoing_transactions(), leader.producer_state().ongoing_transactions());
    assert_eq!(std::fs::read(txn_index_path(&follower, 0))?, std::fs::read(txn_index_path(&leader, 0))?);
    // A marker from a newer leader (control key version 9) is read as the version this
    // broker knows, as Kafka does: the follower replicates it and commits producer 3.
    let mut newer = control::encode_marker(3, 0, EndTxnMarker { commit: true, coordinator_epoch: 0 }, 0)?;
    crate::batch::patch_offset_and_epoch(&mut newer, 7, 0);
    newer[crate::batch::HEADER_LEN + 6] = 9;
    let crc = crate::batch::compute_crc(&newer);
    newer[17..21].copy_from_slice(&crc.to_be_bytes());
    follower.append_as_follower(&newer, 0)?;
    follower.set_high_watermark(8);
    assert_eq!(follower.first_unstable_offset(), None);
    // One Kafka refuses too (a negative key version) is refused before anything is written.
    let mut bad = control::encode_marker(4, 0, EndTxnMarker { commit: true, coordinator_epoch: 0 }, 0)?;
    crate::batch::patch_offset_and_epoch(&mut bad, 8, 0);
    bad[crate::batch::HEADER_LEN + 5] = 0xff;
    bad[crate::batch::HEADER_LEN + 6] = 0xff;
    let crc = crate::batch::compute_crc(&bad);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(follower.append_as_follower(&bad, 0).is_err());
    assert_eq!(follower.log_end_offset(), 8);
    Ok(())
}

#[test]
fn expiry_keeps_producers_with_an_open_transaction() -> R {
    let d = tempfile::tempdir()?;
    let config = LogConfig { producer_id_expiration_ms: 1_000, ..LogConfig::default() };
    let mut log = open(d.path(), config, true, 0)?;
    txn(&mut log, 1, 0, 0, 1)?;
    produce(&mut log, &testing::batch(1, 0, 0, Compression::None, Some((2, 0, 0))))?;
    log.expire_producers(5_000);
    assert_eq!(log.producer_state().entries().iter().map(|e| e.0).collect::<Vec<_>>(), vec![1]);
    log.append_marker(1, 0, 0, true, 0, 5_000)?;
    log.expire_producers(5_999);
    assert_eq!(log.producer_state().len(), 1, "idle for 999 ms since its marker");
    log.expire_producers(6_000);
    assert!(log.producer_state().is_empty());
    Ok(())
}

#[test]
fn a_version_1_snapshot_is_still_loaded() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0)?;
    let first = testing::batch(3, 0, 0, Compression::None, Some((9, 1, 0)));
    produce(&mut log, &first)?;
    let rp = log.close(0)?;
    // The snapshot as the broker wrote it before transactions.
    let mut v1 = b"OXPS".to_vec();
    v1.extend_from_slice(&1u16.to_be_bytes());
    v1.extend_from_slice(&1u32.to_be_bytes());
    v1.extend_from_slice(&9i64.to_be_bytes());
    v1.extend_from_slice(&1i16.to_be_bytes());
    v1.push(1);
    v1.extend_from_slice(&0i32.to_be_bytes());
    v1.extend_from_slice(&2i32.to_be_bytes());
    for v in [0i64, 2, 2] {
        v1.extend_from_slice(&v.to_be_bytes());
    }
    let crc = crc32c::crc32c(&v1);
    v1.extend_from_slice(&crc.to_be_bytes());
    std::fs::write(d.path().join(file_name(3, "snapshot")), v1)?;
    let mut log = open(d.path(), LogConfig::default(), true, rp)?;
    let e = log.producer_state().get(9).cloned().ok_or("producer 9 loaded")?;
    assert_eq!((e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp), (1, -1, None, 2));
    // The retry is recognised and the next batch follows on.
    assert!(produce(&mut log, &first)?.duplicate);
    let next = testing::batch(1, 0, 0, Compression::None, Some((9, 1, 3)));
    assert_eq!(produce(&mut log, &next)?.base_offset, 3);
    Ok(())
}
