//! Compaction of transactional logs: aborted batches dropped, markers kept until their
//! transaction's data is gone and `delete.retention.ms` has passed, each producer's last batch
//! kept (empty if need be) so that its sequences and epoch survive a replay of the log.

use std::path::Path;

use super::tests::{KeyValue, R, end, hand_rolled, open, produce, raw_from, records, txn_index_path};
use crate::batch::{BatchHeader, BatchIter};
use crate::cleaner::CleanStats;
use crate::testing;
use crate::{Log, LogConfig};

fn compacted() -> LogConfig {
    LogConfig {
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 1_000,
        ..hand_rolled()
    }
}

/// One batch of a single keyed record, from `producer` (id, epoch, sequence) if given.
fn keyed(k: &str, v: &str, producer: Option<(i64, i16, i32)>, transactional: bool) -> bytes::Bytes {
    testing::keyed_batch(&[(k, Some(v))], 0, producer, transactional)
}

/// A whole cleaner pass at `now`: plan, clean, install.
fn pass(log: &mut Log, now: i64) -> R<CleanStats> {
    let plan = log.plan_clean(now).ok_or("dirty enough")?;
    let cleaned = crate::cleaner::clean(&plan, now)?;
    let stats = cleaned.stats;
    log.install_cleaned(cleaned)?;
    Ok(stats)
}

/// The batch headers of the log, from its start, segment after segment.
fn headers(log: &Log) -> R<Vec<BatchHeader>> {
    let mut out: Vec<BatchHeader> = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let before = out.len();
        out.extend(BatchIter::new(&raw_from(log, next)?).map(|(_, h)| h));
        match out.last() {
            Some(h) if out.len() > before => next = h.next_offset(),
            _ => break,
        }
    }
    Ok(out)
}

/// Data records, as (offset, key, value).
fn data(log: &Log) -> R<Vec<KeyValue>> {
    Ok(records(log)?.into_iter().filter(|r| !r.3).map(|r| (r.0, r.1, r.2)).collect())
}

/// Offsets of the markers (control records) in the log.
fn markers(log: &Log) -> R<Vec<i64>> {
    Ok(records(log)?.into_iter().filter(|r| r.3).map(|r| r.0).collect())
}

fn kv(o: i64, k: &str, v: &str) -> KeyValue {
    (o, k.to_string(), v.to_string())
}

/// Reopens the log after a crash with no producer snapshot: producer state comes from a replay
/// of the whole log.
fn reopen_from_the_log_alone(log: Log, dir: &Path) -> R<Log> {
    drop(log);
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.path().extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(open(dir, compacted(), false, 0)?)
}

#[test]
fn compaction_drops_aborted_batches_and_stops_at_the_last_stable_offset() -> R {
    let d = tempfile::tempdir()?;
    let config =
        LogConfig { cleanup_compact: true, cleanup_delete: false, min_cleanable_dirty_ratio: 0.0, ..hand_rolled() };
    let mut log = open(d.path(), config.clone(), true, 0)?;
    let keyed = |k: &'static str, v: &'static str, producer: Option<(i64, i16, i32)>| {
        testing::keyed_batch(&[(k, Some(v))], 0, producer, producer.is_some())
    };
    produce(&mut log, &testing::keyed_batch(&[("k1", Some("v1")), ("k2", Some("v2"))], 0, None, false))?; // 0..=1
    produce(&mut log, &keyed("k1", "aborted", Some((1, 0, 0))))?; // 2
    end(&mut log, 1, 0, false)?; // 3
    produce(&mut log, &keyed("k2", "committed", Some((2, 0, 0))))?; // 4
    end(&mut log, 2, 0, true)?; // 5
    log.roll(0)?;
    produce(&mut log, &keyed("k3", "v3", None))?; // 6
    log.roll(0)?;
    produce(&mut log, &keyed("k3", "open", Some((3, 0, 0))))?; // 7, open
    log.roll(0)?;
    produce(&mut log, &keyed("k4", "v4", None))?; // 8
    log.set_high_watermark(9);

    let plan = log.plan_clean(0).ok_or("dirty enough")?;
    assert_eq!(plan.end, 7, "stops below the open transaction");
    let cleaned = crate::cleaner::clean(&plan, 0)?;
    assert_eq!(cleaned.stats.records_removed, 2, "k2=v2 superseded, k1=aborted dropped");
    log.install_cleaned(cleaned)?;
    let data = |log: &Log| -> R<Vec<KeyValue>> {
        Ok(records(log)?.into_iter().filter(|r| !r.3).map(|r| (r.0, r.1, r.2)).collect())
    };
    let s = |o: i64, k: &str, v: &str| (o, k.to_string(), v.to_string());
    let want = vec![s(0, "k1", "v1"), s(4, "k2", "committed"), s(6, "k3", "v3"), s(7, "k3", "open"), s(8, "k4", "v4")];
    assert_eq!(data(&log)?, want, "the aborted value never shadows the committed one");
    let markers: Vec<i64> = records(&log)?.into_iter().filter(|r| r.3).map(|r| r.0).collect();
    assert_eq!(markers, vec![3, 5], "markers are kept");
    assert_eq!(log.aborted_transactions(0, 9)?, vec![(1, 2)], "the cleaned segment keeps its index");
    let rp = log.close(0)?;
    let log = open(d.path(), config, true, rp)?;
    assert_eq!(data(&log)?, want);
    assert_eq!(log.aborted_transactions(0, 9)?, vec![(1, 2)]);
    Ok(())
}

#[test]
fn compaction_finds_aborted_transactions_whose_marker_is_past_the_cleaned_range() -> R {
    let d = tempfile::tempdir()?;
    let config =
        LogConfig { cleanup_compact: true, cleanup_delete: false, min_cleanable_dirty_ratio: 0.0, ..hand_rolled() };
    let mut log = open(d.path(), config, true, 0)?;
    let keyed =
        |k: &'static str, v: &'static str, p: (i64, i16, i32)| testing::keyed_batch(&[(k, Some(v))], 0, Some(p), true);
    produce(&mut log, &keyed("k1", "aborted", (1, 0, 0)))?; // 0: producer 1's transaction A
    produce(&mut log, &keyed("k1", "committed", (2, 0, 0)))?; // 1
    end(&mut log, 2, 0, true)?; // 2
    log.roll(0)?;
    produce(&mut log, &keyed("k2", "aborted", (1, 0, 1)))?; // 3: still A
    log.roll(0)?;
    end(&mut log, 1, 0, false)?; // 4: A aborted, indexed in the active segment
    produce(&mut log, &keyed("k2", "committed", (1, 0, 2)))?; // 5: producer 1's next transaction
    end(&mut log, 1, 0, true)?; // 6
    log.set_high_watermark(7);
    let plan = log.plan_clean(0).ok_or("dirty enough")?;
    assert_eq!(plan.end, 4, "the sealed segments: A's marker is past them");
    // The plan holds the index open: it is read while cleaning, without the log.
    std::fs::remove_file(txn_index_path(&log, 4))?;
    let cleaned = crate::cleaner::clean(&plan, 0)?;
    assert_eq!(cleaned.stats.records_removed, 2, "both batches of A");
    log.install_cleaned(cleaned)?;
    let data: Vec<KeyValue> = records(&log)?.into_iter().filter(|r| !r.3).map(|r| (r.0, r.1, r.2)).collect();
    let s = |o: i64, k: &str, v: &str| (o, k.to_string(), v.to_string());
    assert_eq!(data, vec![s(1, "k1", "committed"), s(5, "k2", "committed")]);
    Ok(())
}

#[test]
fn compaction_keeps_each_producers_last_batch_so_its_sequences_survive() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), compacted(), true, 0)?;
    produce(&mut log, &keyed("k1", "a", Some((1, 0, 0)), false))?; // 0: producer 1's only batch
    produce(&mut log, &keyed("k1", "b", None, false))?; // 1
    produce(&mut log, &keyed("k2", "aborted", Some((2, 0, 0)), true))?; // 2: producer 2's only batch
    end(&mut log, 2, 0, false)?; // 3
    produce(&mut log, &keyed("k3", "c", Some((3, 0, 0)), false))?; // 4
    produce(&mut log, &keyed("k3", "d", Some((3, 0, 1)), false))?; // 5: producer 3's last batch
    produce(&mut log, &keyed("k4", "e", None, false))?; // 6
    log.roll(0)?;
    produce(&mut log, &keyed("k5", "f", None, false))?; // 7
    log.set_high_watermark(8);
    let stats = pass(&mut log, 0)?;
    assert_eq!(stats.records_removed, 3, "k1=a and k3=c superseded, k2 aborted");
    // Producer 1's superseded batch and producer 2's aborted one stay, empty, with their
    // offsets and sequences; producer 3's older batch goes.
    let got: Vec<_> = headers(&log)?
        .iter()
        .map(|h| (h.base_offset, h.last_offset(), h.producer_id, h.base_sequence, h.record_count))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 0, 1, 0, 0),
            (1, 1, -1, -1, 1),
            (2, 2, 2, 0, 0),
            (3, 3, 2, -1, 1),
            (5, 5, 3, 1, 1),
            (6, 6, -1, -1, 1),
            (7, 7, -1, -1, 1)
        ]
    );
    assert_eq!(data(&log)?, vec![kv(1, "k1", "b"), kv(5, "k3", "d"), kv(6, "k4", "e"), kv(7, "k5", "f")]);
    assert_eq!(markers(&log)?, vec![3], "producer 2's batch was still there: its abort stays");
    assert_eq!(log.aborted_transactions(0, 8)?, vec![(2, 2)]);
    // Producer state rebuilt from the cleaned log alone still knows every sequence.
    let mut log = reopen_from_the_log_alone(log, d.path())?;
    assert!(produce(&mut log, &keyed("k1", "a", Some((1, 0, 0)), false))?.duplicate, "a retry is still recognised");
    assert!(produce(&mut log, &keyed("k3", "d", Some((3, 0, 1)), false))?.duplicate);
    assert_eq!(produce(&mut log, &keyed("k1", "g", Some((1, 0, 1)), false))?.base_offset, 8);
    assert_eq!(produce(&mut log, &keyed("k2", "h", Some((2, 0, 1)), true))?.base_offset, 9);
    assert_eq!(log.producer_state().ongoing_transactions(), vec![(9, 2)], "the aborted one is closed");
    Ok(())
}

#[test]
fn markers_go_once_their_data_is_gone_and_delete_retention_has_passed() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), compacted(), true, 0)?;
    produce(&mut log, &keyed("k1", "v1", Some((1, 0, 0)), true))?; // 0: producer 1's transaction
    end(&mut log, 1, 0, true)?; // 1: committed
    produce(&mut log, &keyed("k1", "v2", None, false))?; // 2: supersedes its only record
    produce(&mut log, &keyed("k2", "x", Some((2, 0, 0)), true))?; // 3: producer 2's transaction
    end(&mut log, 2, 0, false)?; // 4: aborted
    produce(&mut log, &keyed("k3", "y", Some((3, 0, 0)), true))?; // 5: producer 3's transaction
    log.append_marker(3, 1, 0, false, 0, 0)?; // 6: aborted by a coordinator that bumped the epoch
    produce(&mut log, &keyed("k9", "z", None, false))?; // 7
    log.roll(0)?;
    // Producers 1 and 2 write again: their old batches are not their last ones.
    produce(&mut log, &keyed("k4", "p", Some((1, 0, 1)), false))?; // 8
    produce(&mut log, &keyed("k5", "q", Some((2, 0, 1)), false))?; // 9
    log.set_high_watermark(10);
    let more = |log: &mut Log, k: &str| -> R {
        produce(log, &keyed(k, "more", None, false))?;
        log.roll(0)?;
        log.set_high_watermark(log.log_end_offset());
        Ok(())
    };
    // Pass 1: the transactions' batches go (superseded, aborted), their markers stay: a reader
    // may have read the batches. The index keeps the aborts.
    more(&mut log, "m1")?; // 10
    pass(&mut log, 10_000)?;
    assert_eq!(markers(&log)?, vec![1, 4, 6]);
    assert_eq!(log.aborted_transactions(0, 11)?, vec![(2, 3), (3, 5)]);
    // Pass 2: nothing of them left; each marker gets a delete horizon of now +
    // delete.retention.ms, and the index lets the aborts go (no batch of theirs is left).
    more(&mut log, "m2")?; // 11
    pass(&mut log, 10_000)?;
    assert_eq!(markers(&log)?, vec![1, 4, 6]);
    assert!(log.aborted_transactions(0, 12)?.is_empty());
    assert!(!txn_index_path(&log, 0).exists());
    let horizons: Vec<_> = headers(&log)?
        .iter()
        .filter(|h| h.is_control())
        .map(|h| (h.base_offset, h.attributes & 0x40, h.base_timestamp))
        .collect();
    assert_eq!(horizons, vec![(1, 0x40, 11_000), (4, 0x40, 11_000), (6, 0x40, 11_000)]);
    // Pass 3, before the horizon: they stay.
    more(&mut log, "m3")?; // 12
    pass(&mut log, 10_999)?;
    assert_eq!(markers(&log)?, vec![1, 4, 6]);
    // Pass 4, at the horizon: they go, except producer 3's, which is the last it wrote (its
    // epoch 1 has no data batch): it stays as an empty control batch.
    more(&mut log, "m4")?; // 13
    pass(&mut log, 11_000)?;
    assert!(markers(&log)?.is_empty());
    let control: Vec<_> = headers(&log)?
        .iter()
        .filter(|h| h.is_control())
        .map(|h| (h.base_offset, h.producer_id, h.producer_epoch, h.record_count))
        .collect();
    assert_eq!(control, vec![(6, 3, 1, 0)]);
    let want = vec![
        kv(2, "k1", "v2"),
        kv(7, "k9", "z"),
        kv(8, "k4", "p"),
        kv(9, "k5", "q"),
        kv(10, "m1", "more"),
        kv(11, "m2", "more"),
        kv(12, "m3", "more"),
        kv(13, "m4", "more"),
    ];
    assert_eq!(data(&log)?, want);
    // From the log alone: nothing is open, and producer 3's epoch 1 still fences epoch 0.
    let mut log = reopen_from_the_log_alone(log, d.path())?;
    log.set_high_watermark(14);
    assert_eq!(data(&log)?, want);
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.producer_state().get(3).map(|e| e.epoch), Some(1));
    assert!(matches!(
        produce(&mut log, &keyed("k3", "zombie", Some((3, 0, 1)), true)),
        Err(crate::LogError::ProducerFenced { current: 1, got: 0, .. })
    ));
    Ok(())
}
