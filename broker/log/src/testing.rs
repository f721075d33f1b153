//! Record batches for tests (feature `test-util`): producer-style batches built with the
//! kafka-protocol encoder, as clients build them.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// Record `i` of a batch: key `key-i`, value of `payload` bytes, timestamp `ts`.
pub fn record(i: i64, ts: i64, payload: usize) -> Record {
    let value = if payload == 0 { Bytes::from(format!("value-{i}")) } else { Bytes::from(vec![b'v'; payload]) };
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: i,
        // The encoder starts a new batch whenever offset - sequence changes.
        sequence: i as i32 - 1,
        timestamp: ts,
        key: Some(Bytes::from(format!("key-{i}"))),
        value: Some(value),
        headers: Default::default(),
    }
}

/// One batch of `n` records with timestamps `ts0..ts0+n`; `producer` = (id, epoch, base sequence).
pub fn batch(n: i64, ts0: i64, payload: usize, compression: Compression, producer: Option<(i64, i16, i32)>) -> Bytes {
    let recs: Vec<Record> = (0..n).map(|i| record(i, ts0 + i, payload)).collect();
    encode(recs, compression, producer, false)
}

/// One batch of `n` records whose record `i` carries the headers `headers(i)` (a `None` value is
/// a null one).
pub fn headers_batch(
    n: i64,
    payload: usize,
    compression: Compression,
    headers: impl Fn(i64) -> Vec<(String, Option<Bytes>)>,
) -> Bytes {
    let recs: Vec<Record> = (0..n)
        .map(|i| {
            let mut r = record(i, 1000 + i, payload);
            r.headers = headers(i).into_iter().map(|(k, v)| (k.into(), v)).collect();
            r
        })
        .collect();
    encode(recs, compression, None, false)
}

/// A transactional producer's batch (attributes bit 4) of `n` records with timestamps
/// `ts0..ts0+n`; `producer` = (id, epoch, base sequence).
pub fn txn_batch(n: i64, ts0: i64, producer: (i64, i16, i32)) -> Bytes {
    let recs: Vec<Record> = (0..n).map(|i| record(i, ts0 + i, 0)).collect();
    encode(recs, Compression::None, Some(producer), true)
}

/// One batch of keyed records (`None` value: a tombstone), all with timestamp `ts`, from
/// `producer` if given, transactional if `transactional`.
pub fn keyed_batch(
    entries: &[(&str, Option<&str>)],
    ts: i64,
    producer: Option<(i64, i16, i32)>,
    transactional: bool,
) -> Bytes {
    let recs: Vec<Record> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let mut r = record(i as i64, ts, 0);
            r.key = Some(Bytes::from(k.to_string()));
            r.value = v.map(|v| Bytes::from(v.to_string()));
            r
        })
        .collect();
    encode(recs, Compression::None, producer, transactional)
}

fn encode(
    mut recs: Vec<Record>,
    compression: Compression,
    producer: Option<(i64, i16, i32)>,
    transactional: bool,
) -> Bytes {
    for (i, r) in recs.iter_mut().enumerate() {
        r.transactional = transactional;
        if let Some((id, epoch, seq)) = producer {
            r.producer_id = id;
            r.producer_epoch = epoch;
            r.sequence = seq + i as i32;
        }
    }
    let mut buf = BytesMut::new();
    if let Err(e) = RecordBatchEncoder::encode(&mut buf, &recs, &RecordEncodeOptions { version: 2, compression }) {
        unreachable!("encoding test records cannot fail: {e}");
    }
    buf.freeze()
}
