#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Partition log behaviour on a real filesystem: offsets, reads, rolling, retention, recovery
//! from torn tails and damaged indexes, timestamps.

use std::path::Path;

use kafka_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_log::batch::validate_produce;
use oxbow_log::{Log, LogConfig, OpenOptions, ReadStart};

type R = Result<(), Box<dyn std::error::Error>>;

fn batch(n: i64, ts0: i64, payload: usize) -> Vec<u8> {
    oxbow_log::testing::batch(n, ts0, payload, Compression::None, None).to_vec()
}

fn open(dir: &Path, config: LogConfig, clean: bool, recovery_point: i64) -> Log {
    let (log, _) = Log::open(
        dir,
        config,
        OpenOptions { clean_shutdown: clean, recovery_point, log_start_offset: None, now_ms: 0 },
    )
    .expect("open");
    log
}

fn append(log: &mut Log, n: i64, ts0: i64, payload: usize) -> i64 {
    let b = batch(n, ts0, payload);
    let v = validate_produce(&b, 1 << 20).expect("valid");
    let r = log.append(&b, &v, 0, ts0).expect("append");
    log.set_high_watermark(log.log_end_offset());
    r.base_offset
}

/// Reads every record offset from `from` to the end, decoding batches.
fn read_all(log: &Log, from: i64) -> Vec<(i64, i64)> {
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
                    out.push((r.offset, r.timestamp));
                    next = r.offset + 1;
                }
            }
        }
    }
    out
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
        let (log, report) = Log::open(
            d.path(),
            small(),
            OpenOptions { clean_shutdown: false, recovery_point: 0, log_start_offset: None, now_ms: 0 },
        )?;
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
