//! Reopening a log: clean and after a crash (torn tails, recovery points, owed flushes,
//! snapshots, damaged indexes, the checkpointed high watermark), and its file descriptors.

use super::*;

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
