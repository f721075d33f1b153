#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Partition log behaviour on a real filesystem, one test binary: reads (offsets, limits,
//! rolling, retention, timestamps, locating batches for zero copy), recovery (torn tails,
//! damaged indexes, crash points, flushes), compaction and a follower's replica.

mod compaction;
mod reads;
mod recovery;
mod replica;

use std::path::Path;

use kafka_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_log::batch::validate_produce;
use oxbow_log::{FileSlice, Flush, Log, LogConfig, OpenOptions, ReadStart};

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

fn append_epoch(log: &mut Log, n: i64, ts0: i64, epoch: i32) {
    let b = batch(n, ts0, 100);
    let v = validate_produce(&b, 1 << 20).expect("valid");
    log.append(&b, &v, epoch, ts0, Flush::Now).expect("append");
}
