//! Reads: offsets, byte and offset limits, rolling, retention, log start, timestamps, and
//! `locate` finding the batches `execute` reads.

use super::*;

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
                        // from the header window when it held the slice, and from the file
                        assert_eq!(slice.read()?, bytes, "{at}");
                        assert_eq!(FileSlice { held: None, ..slice.clone() }.read()?, bytes, "{at}");
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
