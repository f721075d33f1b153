#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Partition log behaviour on a real filesystem: offsets, reads, rolling, retention, recovery
//! from torn tails and damaged indexes, timestamps.

use std::path::Path;

use kafka_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_log::batch::validate_produce;
use oxbow_log::{Flush, Log, LogConfig, OpenOptions, ReadStart};

type R = Result<(), Box<dyn std::error::Error>>;

fn batch(n: i64, ts0: i64, payload: usize) -> Vec<u8> {
    oxbow_log::testing::batch(n, ts0, payload, Compression::None, None).to_vec()
}

/// How a log is opened: after a clean shutdown or a crash, with no checkpoint but the
/// recovery point.
fn opts(clean: bool, recovery_point: i64) -> OpenOptions {
    OpenOptions { clean_shutdown: clean, recovery_point, log_start_offset: None, high_watermark: None, now_ms: 0 }
}

fn open(dir: &Path, config: LogConfig, clean: bool, recovery_point: i64) -> Log {
    let (log, _) = Log::open(dir, config, opts(clean, recovery_point)).expect("open");
    log
}

fn append(log: &mut Log, n: i64, ts0: i64, payload: usize) -> i64 {
    let b = batch(n, ts0, payload);
    let v = validate_produce(&b, 1 << 20).expect("valid");
    let r = log.append(&b, &v, 0, ts0, Flush::Now).expect("append");
    log.set_high_watermark(log.log_end_offset());
    r.base_offset
}

/// Every record from `from` to the high watermark, decoded and mapped by `f`.
fn read_records<T>(log: &Log, from: i64, f: impl Fn(&kafka_protocol::records::Record) -> T) -> Vec<T> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let plan = match log.read(next, 1 << 16, log.high_watermark(), true).expect("read") {
            ReadStart::Empty => break,
            ReadStart::Plan(p) => p,
        };
        let mut bytes = plan.execute().expect("execute");
        if bytes.is_empty() {
            break;
        }
        for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode") {
            for r in set.records {
                if r.offset >= next {
                    out.push(f(&r));
                    next = r.offset + 1;
                }
            }
        }
    }
    out
}

/// Every record's (offset, timestamp) from `from` to the end.
fn read_all(log: &Log, from: i64) -> Vec<(i64, i64)> {
    read_records(log, from, |r| (r.offset, r.timestamp))
}

fn small() -> LogConfig {
    LogConfig { segment_bytes: 4096, index_interval_bytes: 512, segment_index_bytes: 4096, ..LogConfig::default() }
}

#[test]
fn offsets_reads_and_rolls() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    let mut expected = 0;
    for i in 0..100 {
        assert_eq!(append(&mut log, 5, 1000 + i * 10, 100), expected);
        expected += 5;
    }
    assert_eq!(log.log_end_offset(), 500);
    assert!(log.segment_count() > 10, "small segments must roll: {}", log.segment_count());
    // Segment files are named by their base offset, which is the first offset they hold.
    let bases = log.segment_base_offsets();
    assert_eq!(bases[0], 0);
    assert!(bases.windows(2).all(|w| w[0] < w[1] && (w[1] - w[0]) % 5 == 0));
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 500);
    assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
    // Reading from the middle of a batch returns the batch that contains the offset.
    let plan = match log.read(7, 1 << 16, 500, true)? {
        ReadStart::Plan(p) => p,
        ReadStart::Empty => panic!("empty"),
    };
    let mut bytes = plan.execute()?;
    let first = RecordBatchDecoder::decode_all(&mut bytes)?;
    assert_eq!(first[0].records[0].offset, 5);
    // Out of range.
    assert!(log.read(501, 100, 500, true).is_err());
    assert!(matches!(log.read(500, 100, 500, true)?, ReadStart::Empty));
    Ok(())
}

#[test]
fn max_bytes_and_high_watermark_bound_reads() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), LogConfig::default(), true, 0);
    for i in 0..10 {
        append(&mut log, 2, i * 10, 200);
    }
    let plan = match log.read(0, 100, log.high_watermark(), true)? {
        ReadStart::Plan(p) => p,
        ReadStart::Empty => panic!(),
    };
    let bytes = plan.execute()?;
    // One batch is bigger than 100 bytes; min_one returns it whole.
    assert!(bytes.len() > 100);
    assert_eq!(RecordBatchDecoder::decode_all(&mut bytes.clone())?.len(), 1);
    // Nothing at or above the high watermark is returned.
    let plan = match log.read(0, 1 << 20, 6, true)? {
        ReadStart::Plan(p) => p,
        ReadStart::Empty => panic!(),
    };
    let mut bytes = plan.execute()?;
    let sets = RecordBatchDecoder::decode_all(&mut bytes)?;
    assert_eq!(sets.iter().map(|s| s.records.len()).sum::<usize>(), 6);
    Ok(())
}

#[test]
fn retention_by_size_and_time_never_deletes_the_active_segment() -> R {
    let d = tempfile::tempdir()?;
    let mut cfg = small();
    cfg.retention_bytes = 10_000;
    let mut log = open(d.path(), cfg.clone(), true, 0);
    for i in 0..200 {
        append(&mut log, 5, 1000 + i, 100);
    }
    let before = log.segment_count();
    let deleted = log.apply_retention(10_000)?;
    assert!(deleted > 0);
    assert_eq!(log.segment_count(), before - deleted);
    assert!(log.size_bytes() < 10_000 + 4096);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    let all = read_all(&log, log.log_start_offset());
    assert_eq!(all.first().map(|r| r.0), Some(log.log_start_offset()));
    assert_eq!(all.last().map(|r| r.0), Some(999));
    // Time: everything older than retention.ms goes, but the active segment stays.
    cfg.retention_bytes = -1;
    cfg.retention_ms = 1;
    log.set_config(cfg);
    log.apply_retention(1_000_000)?;
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset(), 1000);
    // The data dir holds exactly the remaining segment.
    let logs: Vec<_> =
        std::fs::read_dir(d.path())?.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")).collect();
    assert_eq!(logs.len(), 1);
    Ok(())
}

#[test]
fn delete_records_moves_log_start() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for i in 0..50 {
        append(&mut log, 5, i, 100);
    }
    assert_eq!(log.delete_records_before(123)?, 123);
    assert!(log.read(122, 100, 250, true).is_err());
    let all = read_all(&log, 123);
    assert_eq!(all.first().map(|r| r.0), Some(123));
    assert!(log.delete_records_before(1000).is_err());
    Ok(())
}

#[test]
fn timestamps() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for i in 0..40 {
        append(&mut log, 5, 10_000 + i * 5, 100);
    }
    // Record i has timestamp 10_000 + i.
    assert_eq!(log.offset_for_timestamp(10_000)?, Some((0, 10_000)));
    assert_eq!(log.offset_for_timestamp(10_123)?, Some((123, 10_123)));
    assert_eq!(log.offset_for_timestamp(0)?, Some((0, 10_000)));
    assert_eq!(log.offset_for_timestamp(20_000)?, None);
    assert_eq!(log.max_timestamp_offset()?, Some((199, 10_199)));
    Ok(())
}

#[test]
fn clean_reopen_keeps_everything() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for i in 0..60 {
        append(&mut log, 5, i, 100);
    }
    let rp = log.close(0)?;
    assert_eq!(rp, 300);
    let log = open(d.path(), small(), true, rp);
    assert_eq!(log.log_end_offset(), 300);
    assert_eq!(read_all(&log, 0).len(), 300);
    // Batch i holds timestamps i..i+4: timestamp 30 is first reached by batch 26, record 4.
    assert_eq!(log.offset_for_timestamp(30)?, Some((134, 30)));
    Ok(())
}

fn last_log_file(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a log file")
}

#[test]
fn torn_and_corrupt_tails_are_cut_and_intact_batches_kept() -> R {
    for damage in ["garbage", "truncate", "flip"] {
        let d = tempfile::tempdir()?;
        let mut log = open(d.path(), small(), true, 0);
        for i in 0..30 {
            append(&mut log, 5, i, 100);
        }
        drop(log); // a crash: no close, no checkpoint
        let last = last_log_file(d.path());
        let mut bytes = std::fs::read(&last)?;
        let batch_len = batch(5, 0, 100).len();
        let intact_in_last = match damage {
            "garbage" => {
                bytes.extend_from_slice(&[0xab; 37]);
                bytes.len() / batch_len
            }
            "truncate" => {
                bytes.truncate(bytes.len() - 10);
                bytes.len() / batch_len
            }
            _ => {
                let n = bytes.len();
                bytes[n - 5] ^= 0xff; // CRC no longer matches the last batch
                n / batch_len - 1
            }
        };
        std::fs::write(&last, &bytes)?;
        let base: i64 = last.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse().ok()).expect("base");
        let (log, report) = Log::open(d.path(), small(), opts(false, 0))?;
        assert_eq!(report.truncated.len(), 1, "{damage}: {report:?}");
        let expected_end = base + 5 * intact_in_last as i64;
        assert_eq!(log.log_end_offset(), expected_end, "{damage}");
        let all = read_all(&log, 0);
        assert_eq!(all.len() as i64, expected_end, "{damage}");
        assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
        // Appends continue right after the cut.
        let mut log = log;
        assert_eq!(append(&mut log, 5, 0, 100), expected_end);
    }
    Ok(())
}

#[test]
fn after_a_crash_only_segments_past_the_recovery_point_are_rescanned() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for i in 0..60 {
        append(&mut log, 5, i, 100);
    }
    log.flush(0)?;
    let recovery_point = log.recovery_point();
    assert_eq!(recovery_point, 300);
    for i in 60..70 {
        append(&mut log, 5, i, 100);
    }
    let sealed_before =
        std::fs::read_dir(d.path())?.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")).count() - 1;
    drop(log); // a crash: no close, no checkpoint of the newer writes
    let (log, report) = Log::open(d.path(), small(), opts(false, recovery_point))?;
    // Sealed segments that end at or below the recovery point are trusted (as Kafka does); the
    // rest, the active one included, are scanned.
    assert!(report.segments_recovered >= 1 && report.segments_recovered < report.segments, "{report:?}");
    assert!(report.segments - report.segments_recovered <= sealed_before, "{report:?}");
    assert!(report.truncated.is_empty(), "{report:?}");
    assert_eq!(log.log_end_offset(), 350);
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 350);
    assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
    // With no recovery point everything is scanned.
    drop(log);
    let (_, report) = Log::open(d.path(), small(), opts(false, 0))?;
    assert_eq!(report.segments_recovered, report.segments, "{report:?}");
    Ok(())
}

/// `flush.messages=1` with `Flush::Owed` (the produce path): the high watermark stays below an append
/// until its owed flush is reported; flushes planned earlier, or before a truncation, do not
/// move it; appends that do not reach `flush.messages` owe nothing.
#[test]
fn an_owed_flush_holds_the_high_watermark_until_it_is_done() -> R {
    let d = tempfile::tempdir()?;
    let config = LogConfig { flush_messages: 1, ..small() };
    let mut log = open(d.path(), config, true, 0);
    let owe = |log: &mut Log, n: i64| {
        let b = batch(n, 0, 100);
        let v = validate_produce(&b, 1 << 20).expect("valid");
        let owed = log.append(&b, &v, 0, 0, Flush::Owed).expect("append").flush_owed;
        log.set_high_watermark(log.log_end_offset());
        owed
    };
    assert!(owe(&mut log, 5), "the append says it owes a flush");
    assert_eq!((log.log_end_offset(), log.high_watermark()), (5, 0));
    let first = log.owed_flush()?.expect("a flush is owed");
    assert_eq!(first.upto, 5);
    // A second append before the first flush is done: it plans its own, covering both.
    assert!(owe(&mut log, 3));
    let second = log.owed_flush()?.expect("still owed");
    assert_eq!(second.upto, 8);
    second.sync()?;
    log.flushed(&second, 0);
    log.set_high_watermark(log.log_end_offset());
    assert_eq!((log.high_watermark(), log.recovery_point()), (8, 8));
    assert!(log.owed_flush()?.is_none());
    // The first flush, done last, changes nothing.
    first.sync()?;
    log.flushed(&first, 0);
    assert_eq!((log.high_watermark(), log.recovery_point()), (8, 8));

    // Done while later appends wait: the high watermark passes what it covers, not them.
    owe(&mut log, 2);
    let third = log.owed_flush()?.expect("owed");
    owe(&mut log, 2);
    third.sync()?;
    log.flushed(&third, 0);
    log.set_high_watermark(log.log_end_offset());
    assert_eq!((log.log_end_offset(), log.high_watermark()), (12, 10));
    // A truncation syncs what is left and voids flushes planned before it.
    let stale = log.owed_flush()?.expect("owed");
    assert_eq!(log.truncate_to(10, 0)?, 10);
    assert!(log.owed_flush()?.is_none());
    owe(&mut log, 4);
    stale.sync()?;
    log.flushed(&stale, 0);
    log.set_high_watermark(log.log_end_offset());
    assert_eq!((log.log_end_offset(), log.high_watermark()), (14, 10));

    // A crash with a flush owed: the reopened log syncs its tail before anything reads it.
    assert!(log.owed_flush()?.is_some());
    drop(log);
    let (log, _) = Log::open(d.path(), LogConfig { flush_messages: 1, ..small() }, opts(false, 8))?;
    assert_eq!((log.log_end_offset(), log.recovery_point()), (14, 14));

    // Without flush.messages nothing is owed and the high watermark follows the log end.
    let d2 = tempfile::tempdir()?;
    let mut log = open(d2.path(), small(), true, 0);
    assert!(!owe(&mut log, 5));
    assert!(log.owed_flush()?.is_none());
    assert_eq!(log.high_watermark(), 5);
    Ok(())
}

#[test]
fn a_background_sync_planned_before_a_truncation_marks_nothing_synced() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    append(&mut log, 4, 0, 100);
    log.roll(0)?; // sealed [0, 4)
    append(&mut log, 4, 0, 100);
    log.roll(0)?; // sealed [4, 8)
    let rp = log.recovery_point();
    let plan = log.pending_flush().expect("two sealed segments to sync");
    assert_eq!(plan.upto, 8);
    // Meanwhile the log is cut back to the second segment's base and grows a new sealed
    // segment below the plan's end, which the plan's files do not hold.
    assert_eq!(log.truncate_to(4, 0)?, 4);
    append(&mut log, 3, 0, 100);
    log.roll(0)?; // sealed [4, 7)
    plan.sync()?;
    log.flushed(&plan, 0);
    assert_eq!(log.recovery_point(), rp, "the stale plan moved the recovery point past unsynced data");
    let again = log.pending_flush().expect("the new segment still needs its sync");
    assert_eq!(again.upto, 7);
    again.sync()?;
    log.flushed(&again, 0);
    assert!(log.pending_flush().is_none());
    assert_eq!(log.recovery_point(), 7);
    Ok(())
}

#[test]
fn a_segment_holds_one_descriptor_its_indexes_none() -> R {
    // Kafka closes an index file once it is mapped; the active segment's two indexes would
    // otherwise cost a broker with thousands of partitions two more descriptors per partition.
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for _ in 0..3 {
        append(&mut log, 4, 0, 100);
        log.roll(0)?;
    }
    append(&mut log, 4, 0, 100);
    let mut held: Vec<String> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|p| p.starts_with(d.path()))
        .filter_map(|p| p.extension().map(|x| x.to_string_lossy().into_owned()))
        .collect();
    held.sort();
    assert_eq!(held, ["log", "log", "log", "log"], "three sealed segments and the active one");
    // A clean close trims the active segment's indexes through their paths.
    let rp = log.close(0)?;
    let index = d.path().join(oxbow_log::segment::file_name(12, "index"));
    assert_eq!(std::fs::metadata(&index)?.len() % 8, 0);
    assert!(std::fs::metadata(&index)?.len() < 4096, "trimmed to its entries");
    let log = open(d.path(), small(), true, rp);
    assert_eq!(log.log_end_offset(), 16);
    Ok(())
}

/// Base offsets of the producer snapshots in `dir`.
fn snapshots(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".snapshot").and_then(|s| s.parse().ok()))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn snapshots_recovery_needs_are_kept_until_the_recovery_point_is_checkpointed() -> R {
    let d = tempfile::tempdir()?;
    let config = LogConfig { segment_bytes: 1 << 20, ..small() };
    let mut log = open(d.path(), config.clone(), true, 0);
    // Two records of idempotent producer 7 from sequence `seq`.
    let produce = |log: &mut Log, seq: i32| {
        let b = oxbow_log::testing::batch(2, 0, 0, Compression::None, Some((7, 0, seq)));
        let v = validate_produce(&b, 1 << 20).expect("valid");
        log.append(&b, &v, 0, 0, Flush::Now).expect("append")
    };
    produce(&mut log, 0); // 0..=1
    log.roll(0)?; // snapshot 2
    log.flush(0)?;
    // The checkpoint writer takes the recovery point, twice: the file holds 2.
    assert_eq!((log.recovery_point(), log.recovery_point()), (2, 2));
    for seq in [2, 4, 6, 8] {
        produce(&mut log, seq);
        log.roll(0)?;
        log.flush(0)?; // the recovery point in memory moves on, the checkpointed one does not
    }
    assert_eq!(log.log_end_offset(), 10);
    // A crash now recovers from 2: the snapshot there is what it needs, and it is kept.
    assert_eq!(snapshots(d.path()), vec![2, 4, 6, 8, 10]);
    drop(log);
    let (mut log, report) = Log::open(d.path(), config, opts(false, 2))?;
    assert_eq!(report.segments_recovered, 5, "segments 2, 4, 6, 8 and the active one");
    let retry = produce(&mut log, 8);
    assert!(retry.duplicate && retry.base_offset == 8, "producer 7's sequences survived: {retry:?}");
    // Once a later recovery point is checkpointed, what is older goes at the next roll.
    log.flush(0)?;
    assert_eq!((log.recovery_point(), log.recovery_point()), (10, 10));
    produce(&mut log, 10);
    log.roll(0)?;
    assert_eq!(snapshots(d.path()), vec![10, 12]);
    Ok(())
}

#[test]
fn damaged_index_is_rebuilt() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    for i in 0..60 {
        append(&mut log, 5, i, 100);
    }
    let rp = log.close(0)?;
    // Garbage in the middle of the first (sealed) segment's index.
    let idx = d.path().join(format!("{:020}.index", 0));
    let mut bytes = std::fs::read(&idx)?;
    assert!(bytes.len() >= 16);
    bytes[8..16].copy_from_slice(&[0xff, 0xee, 0xdd, 0xcc, 0x00, 0x00, 0x00, 0x01]);
    std::fs::write(&idx, &bytes)?;
    // And a truncated active index.
    let active = last_log_file(d.path()).with_extension("index");
    let len = std::fs::metadata(&active)?.len();
    std::fs::OpenOptions::new().write(true).open(&active)?.set_len(len.saturating_sub(3))?;
    let log = open(d.path(), small(), true, rp);
    assert_eq!(log.log_end_offset(), 300);
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 300);
    for o in [0, 17, 150, 299] {
        let plan = match log.read(o, 1 << 16, 300, true)? {
            ReadStart::Plan(p) => p,
            ReadStart::Empty => panic!(),
        };
        let mut b = plan.execute()?;
        let sets = RecordBatchDecoder::decode_all(&mut b)?;
        assert!(sets[0].records.iter().any(|r| r.offset == o), "offset {o}");
    }
    Ok(())
}

// ---- compaction -------------------------------------------------------------------------

/// A batch of keyed records (`None` value: a tombstone), all with timestamp `ts`.
fn keyed(entries: &[(&str, Option<&str>)], ts: i64, compression: Compression) -> Vec<u8> {
    let s = |v: &str| bytes::Bytes::from(v.to_string());
    let recs: Vec<_> = entries.iter().map(|(k, v)| (Some(s(k)), v.map(s))).collect();
    oxbow_log::batch::encode_plain(&recs, ts, compression).expect("encode").to_vec()
}

fn append_keyed(log: &mut Log, entries: &[(&str, Option<&str>)], ts: i64, compression: Compression) {
    let b = keyed(entries, ts, compression);
    let v = validate_produce(&b, 1 << 20).expect("valid");
    log.append(&b, &v, 0, ts, Flush::Now).expect("append");
    log.set_high_watermark(log.log_end_offset());
}

/// Every record from the log start: (offset, key, value).
fn read_keyed(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let s = |b: &bytes::Bytes| String::from_utf8_lossy(b).to_string();
    read_records(log, log.log_start_offset(), |r| {
        (r.offset, r.key.as_ref().map(s).unwrap_or_default(), r.value.as_ref().map(s))
    })
}

fn compacted() -> LogConfig {
    LogConfig {
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 1000,
        segment_bytes: 1024,
        ..small()
    }
}

/// Writes 10 rounds of updates to keys k0..k9 (k0 deleted early, k1 deleted recently) across
/// several segments, and returns what a compacted log must hold: key -> (offset, value).
fn write_updates(log: &mut Log, now: i64) -> std::collections::BTreeMap<String, (i64, Option<String>)> {
    let mut want = std::collections::BTreeMap::new();
    for round in 0..10 {
        let vals: Vec<(String, Option<String>)> =
            (0..10).map(|k| (format!("k{k}"), Some(format!("v{round}-{}", "x".repeat(40))))).collect();
        let entries: Vec<(&str, Option<&str>)> = vals.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
        let base = log.log_end_offset();
        let codec = if round % 2 == 0 { Compression::None } else { Compression::Lz4 };
        append_keyed(log, &entries, now - 10_000, codec);
        for (i, (k, v)) in vals.iter().enumerate() {
            want.insert(k.clone(), (base + i as i64, v.clone()));
        }
        if round == 3 {
            // An old tombstone (past delete.retention.ms): k0 disappears entirely.
            append_keyed(log, &[("k0", None)], now - 5_000, Compression::None);
        }
    }
    want.remove("k0");
    // k0 was written again after its tombstone: it comes back with its last value.
    let leo = log.log_end_offset();
    append_keyed(log, &[("k0", Some("again"))], now - 10_000, Compression::None);
    want.insert("k0".into(), (leo, Some("again".into())));
    // A recent tombstone is kept so consumers can see the delete.
    let leo = log.log_end_offset();
    append_keyed(log, &[("k1", None)], now, Compression::None);
    want.insert("k1".into(), (leo, None));
    log.roll(now).expect("roll");
    want
}

fn as_list(want: &std::collections::BTreeMap<String, (i64, Option<String>)>) -> Vec<(i64, String, Option<String>)> {
    let mut v: Vec<_> = want.iter().map(|(k, (o, val))| (*o, k.clone(), val.clone())).collect();
    v.sort();
    v
}

#[test]
fn compaction_keeps_the_latest_value_per_key() -> R {
    let d = tempfile::tempdir()?;
    let now = 1_000_000;
    let mut log = open(d.path(), compacted(), true, 0);
    let want = write_updates(&mut log, now);
    let (leo, before) = (log.log_end_offset(), read_keyed(&log).len());
    assert_eq!(before, 10 * 10 + 3);
    assert!(log.segment_count() > 3, "the test needs several segments");

    let plan = log.plan_clean(now).expect("dirty enough");
    // A read planned before the swap keeps reading the old segment.
    let early = match log.read(0, 1 << 16, log.high_watermark(), true)? {
        ReadStart::Plan(p) => p,
        ReadStart::Empty => panic!("empty"),
    };
    let cleaned = oxbow_log::cleaner::clean(&plan, now)?;
    assert!(cleaned.stats.records_removed > 80, "{:?}", cleaned.stats);
    log.install_cleaned(cleaned)?;
    assert!(!early.execute()?.is_empty(), "the old file is still readable by the planned read");

    assert_eq!(read_keyed(&log), as_list(&want));
    assert_eq!(log.log_end_offset(), leo, "offsets never change");
    assert!(log.plan_clean(now).is_none(), "nothing dirty after a pass");
    // Appends continue after the cleaned part; a second pass keeps the result.
    append_keyed(&mut log, &[("k2", Some("later"))], now, Compression::None);
    log.roll(now)?;
    let mut want2 = want.clone();
    want2.insert("k2".into(), (leo, Some("later".into())));
    let plan = log.plan_clean(now).expect("dirty again");
    let cleaned = oxbow_log::cleaner::clean(&plan, now)?;
    log.install_cleaned(cleaned)?;
    assert_eq!(read_keyed(&log), as_list(&want2));

    // Survives a clean restart and a crash restart (indexes rebuilt).
    log.close(now)?;
    let log = open(d.path(), compacted(), true, leo + 1);
    assert_eq!(read_keyed(&log), as_list(&want2));
    drop(log);
    let log = open(d.path(), compacted(), false, 0);
    assert_eq!(read_keyed(&log), as_list(&want2));
    assert!(log.plan_clean(now).is_none(), "the cleaner checkpoint survived");
    Ok(())
}

#[test]
fn a_crash_during_the_swap_leaves_a_valid_log() -> R {
    for committed in [false, true] {
        let d = tempfile::tempdir()?;
        let now = 1_000_000;
        let mut log = open(d.path(), compacted(), true, 0);
        let want = write_updates(&mut log, now);
        let all = read_keyed(&log);
        let plan = log.plan_clean(now).expect("dirty");
        let cleaned = oxbow_log::cleaner::clean(&plan, now)?;
        assert!(cleaned.stats.segments_rewritten > 0);
        if committed {
            // Crash right after the commit point: one cleaned log renamed to NNN.log.swap.
            let work = d.path().join(oxbow_log::cleaner::CLEANING_DIR);
            let first = std::fs::read_dir(&work)?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".log"))
                .min()
                .expect("a cleaned segment");
            std::fs::rename(work.join(&first), d.path().join(format!("{first}.swap")))?;
        }
        drop(cleaned);
        drop(log);
        let mut log = open(d.path(), compacted(), false, 0);
        assert!(!d.path().join(oxbow_log::cleaner::CLEANING_DIR).exists());
        let got = read_keyed(&log);
        // Whatever was swapped or not, every key reads its latest value and nothing else changed.
        let latest: std::collections::BTreeMap<String, (i64, Option<String>)> =
            got.iter().map(|(o, k, v)| (k.clone(), (*o, v.clone()))).collect();
        let mut want_latest = want.clone();
        if !committed {
            assert_eq!(got, all, "nothing was swapped");
            continue;
        }
        // k0's old tombstone may still be there if its segment was not swapped.
        want_latest.retain(|k, _| latest.contains_key(k));
        assert_eq!(latest, want_latest);
        // And a new pass finishes the job.
        let plan = log.plan_clean(now).expect("still dirty");
        let cleaned = oxbow_log::cleaner::clean(&plan, now)?;
        log.install_cleaned(cleaned)?;
        assert_eq!(read_keyed(&log), as_list(&want));
    }
    Ok(())
}

/// The bytes of the log from `from` to its end, as a follower's fetch would carry them.
fn raw_from(log: &Log, from: i64) -> Vec<u8> {
    match log.read(from, 1 << 24, log.log_end_offset(), true).expect("read") {
        ReadStart::Empty => Vec::new(),
        ReadStart::Plan(p) => p.execute().expect("execute").to_vec(),
    }
}

/// A leader and a follower (small segments) that both hold offsets 0..30 of epoch 0.
fn leader_and_follower(ld: &Path, fd: &Path) -> Result<(Log, Log), Box<dyn std::error::Error>> {
    let mut leader = open(ld, small(), true, 0);
    let mut follower = open(fd, small(), true, 0);
    for i in 0..3 {
        append_epoch(&mut leader, 10, 1_000 + i, 0);
    }
    follower.append_as_follower(&raw_from(&leader, 0), 2_000)?;
    Ok((leader, follower))
}

fn append_epoch(log: &mut Log, n: i64, ts0: i64, epoch: i32) {
    let b = batch(n, ts0, 100);
    let v = validate_produce(&b, 1 << 20).expect("valid");
    log.append(&b, &v, epoch, ts0, Flush::Now).expect("append");
}

#[test]
fn a_follower_copies_batches_diverges_and_truncates_to_its_leaders_epochs() -> R {
    let (ld, fd) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut leader = open(ld.path(), small(), true, 0);
    let mut follower = open(fd.path(), small(), true, 0);
    // Epoch 0: offsets 0..30 on both (the follower copies with offsets and epochs kept).
    for i in 0..3 {
        append_epoch(&mut leader, 10, 1_000 + i, 0);
    }
    let r = follower.append_as_follower(&raw_from(&leader, 0), 2_000)?;
    assert_eq!((r.base_offset, r.last_offset, follower.log_end_offset()), (0, 29, 30));
    assert!(follower.append_as_follower(&raw_from(&leader, 10), 2_000).is_err(), "offsets must continue the log");
    // The follower then leads epoch 1 alone and writes 30..60 (never replicated, small
    // segments: the cut will land in a sealed segment); the old leader comes back as leader of
    // epoch 2 with 30..45 of its own.
    for i in 0..3 {
        append_epoch(&mut follower, 10, 3_000 + i, 1);
    }
    assert!(follower.segment_count() > 1);
    append_epoch(&mut leader, 15, 4_000, 2);
    assert_eq!(follower.latest_epoch(), Some((1, 30)));
    // KIP-279: the follower asks for its latest epoch (1); the leader never had it and answers
    // with epoch 0, which ends at 30; the follower cuts there (its own end of epoch 0 is 30 too).
    let (epoch, end) = leader.end_offset_for_epoch(1);
    assert_eq!((epoch, end), (0, 30));
    let (_, own_end) = follower.end_offset_for_epoch(epoch);
    assert_eq!(follower.truncate_to(end.min(own_end), 5_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    follower.append_as_follower(&raw_from(&leader, 30), 5_000)?;
    assert_eq!(follower.log_end_offset(), 45);
    follower.set_high_watermark(45);
    leader.set_high_watermark(45);
    assert_eq!(read_all(&follower, 0), read_all(&leader, 0), "the follower now holds the leader's log");
    assert_eq!(follower.end_offset_for_epoch(0), (0, 30));
    assert_eq!(follower.end_offset_for_epoch(2), (2, 45));
    // The epochs survive a reopen; a mid-batch cut drops the whole batch.
    follower.close(6_000)?;
    let mut follower = open(fd.path(), small(), true, 45);
    assert_eq!(follower.latest_epoch(), Some((2, 30)));
    assert_eq!(follower.truncate_to(35, 7_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    // A leadership that wrote nothing leaves an epoch at the log end; truncating to the log end
    // drops it (the follower's next question uses an epoch the log holds).
    follower.assign_epoch(5)?;
    assert_eq!(follower.latest_epoch(), Some((5, 30)));
    assert_eq!(follower.truncate_to(30, 8_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    Ok(())
}

#[test]
fn a_follower_left_below_its_leaders_log_start_starts_again_there() -> R {
    let (ld, fd) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (mut leader, mut follower) = leader_and_follower(ld.path(), fd.path())?;
    // The follower is away; the leader writes on and deletes everything before 60.
    for i in 0..6 {
        append_epoch(&mut leader, 10, 2_000 + i, 1);
    }
    leader.set_high_watermark(leader.log_end_offset());
    leader.delete_records_before(60)?;
    assert!(leader.read(30, 1 << 16, 90, true).is_err(), "the follower's fetch offset is out of range");
    follower.truncate_fully_and_start_at(60, 3_000)?;
    assert_eq!((follower.log_start_offset(), follower.log_end_offset(), follower.high_watermark()), (60, 60, 60));
    assert_eq!(follower.latest_epoch(), None);
    assert_eq!(follower.segment_base_offsets(), vec![60]);
    follower.append_as_follower(&raw_from(&leader, 60), 3_000)?;
    assert_eq!(follower.log_end_offset(), 90);
    assert_eq!(follower.latest_epoch(), Some((1, 60)));
    // The new start survives a crash without any checkpoint (the segment is named by it).
    drop(follower);
    let mut follower = open(fd.path(), small(), false, 0);
    assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (60, 90));
    follower.set_high_watermark(90);
    assert_eq!(read_all(&follower, 60), read_all(&leader, 60));

    // The leader's start inside a batch (65, in 60..70): a follower at 65 gets the whole batch
    // from 60 and starts there; its log start is then moved up as the leader's.
    leader.delete_records_before(65)?;
    follower.truncate_fully_and_start_at(65, 4_000)?;
    assert_eq!(follower.segment_base_offsets(), vec![65]);
    follower.append_as_follower(&raw_from(&leader, 65), 4_000)?;
    assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (60, 90));
    follower.set_high_watermark(90);
    follower.delete_records_before(65)?;
    assert_eq!(read_all(&follower, 65), read_all(&leader, 65));
    Ok(())
}

#[test]
fn a_reopened_log_starts_at_its_checkpointed_high_watermark() -> R {
    let d = tempfile::tempdir()?;
    let mut log = open(d.path(), small(), true, 0);
    append_epoch(&mut log, 10, 1_000, 0);
    log.set_high_watermark(4);
    log.close(2_000)?;
    let reopen = |hw: Option<i64>| {
        Log::open(
            d.path(),
            small(),
            OpenOptions {
                clean_shutdown: true,
                recovery_point: 10,
                log_start_offset: None,
                high_watermark: hw,
                now_ms: 0,
            },
        )
        .map(|(l, _)| l.high_watermark())
    };
    // What was committed when it last checkpointed, never past the log end; without a
    // checkpoint (data from before it existed) the log end.
    assert_eq!(reopen(Some(4))?, 4);
    assert_eq!(reopen(Some(99))?, 10);
    assert_eq!(reopen(None)?, 10);
    Ok(())
}

/// `locate` (headers only, from the index's hint) finds exactly the batches `execute` reads, for
/// every start, byte limit, offset limit and both index densities, in sealed and active segments.
#[test]
fn locate_finds_the_batches_execute_reads() -> R {
    for interval in [256, 4096] {
        let d = tempfile::tempdir()?;
        let config = LogConfig { segment_bytes: 96 * 1024, index_interval_bytes: interval, ..LogConfig::default() };
        let mut log = open(d.path(), config, true, 0);
        let mut ends = Vec::new();
        for i in 0..120i64 {
            // batch sizes from ~100 B to ~12 KiB, irregular
            let (n, payload) = (1 + (i * 7) % 5, 20 + ((i * 613) % 2400) as usize);
            append(&mut log, n, 1000 + i, payload);
            ends.push(log.log_end_offset());
        }
        assert!(log.segment_count() > 2, "must span sealed segments");
        let leo = log.log_end_offset();
        for max_offset in [leo, ends[100], ends[57] - 1, ends[3]] {
            for offset in (0..leo).step_by(3) {
                for max_bytes in [1usize, 61, 700, 5_000, 20_000, 70_000, 1 << 20] {
                    for min_one in [false, true] {
                        let plan = match log.read(offset, max_bytes, max_offset, min_one)? {
                            ReadStart::Empty => continue,
                            ReadStart::Plan(p) => p,
                        };
                        let bytes = plan.execute()?;
                        let slice = plan.locate()?;
                        let at = format!(
                            "interval {interval} offset {offset} max_bytes {max_bytes} max_offset {max_offset} min_one {min_one}"
                        );
                        assert_eq!(slice.len, bytes.len(), "{at}");
                        assert_eq!(slice.read()?, bytes.to_vec(), "{at}");
                        if let Some((_, h)) = oxbow_log::batch::BatchIter::new(&bytes).last() {
                            assert_eq!(slice.next_offset, h.next_offset(), "{at}");
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
