//! Compaction: the latest value per key, and a crash during the segment swap.

use super::*;

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
