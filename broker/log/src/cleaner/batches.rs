//! Batches as the cleaner rewrites them, in Kafka's way (`MemoryRecords.filterTo`,
//! `DefaultRecordBatch.writeEmptyHeader`): a batch that loses records keeps its base offset,
//! last offset delta, producer id, epoch and base sequence, leader epoch, codec, timestamp
//! type and transactional and control flags, so the producer's last sequence and the offsets
//! it covers survive; a batch that loses all of them can stay as an empty batch (no records)
//! with the same fields. The kept records are copied byte for byte (their offset and timestamp
//! deltas are relative to the unchanged base), unless a delete horizon moves the base
//! timestamp, which re-encodes their timestamp deltas only.

use bytes::Bytes;

use crate::batch::{BatchHeader, HEADER_LEN, next_record, write_batch};
use crate::compression::{self, Inflate};

/// Attributes bit 6: the base timestamp is the batch's delete horizon (KIP-534).
const DELETE_HORIZON: i16 = 0x40;

/// One record of a batch, as stored.
pub(crate) struct RawRecord<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub has_value: bool,
    /// The record's attributes byte.
    attributes: u8,
    /// The whole record, its length prefix included.
    raw: &'a [u8],
    /// The record from its offset delta on.
    after_timestamp: &'a [u8],
}

/// The delete horizon a batch carries, if any.
pub(crate) fn delete_horizon(h: &BatchHeader) -> Option<i64> {
    (h.attributes & DELETE_HORIZON != 0).then_some(h.base_timestamp)
}

/// The records section of `batch`, decompressed. (A stored batch was accepted whole: no bound
/// but the address space.)
pub(crate) fn records_payload(batch: &[u8], h: &BatchHeader) -> Result<Bytes, String> {
    let body = batch.get(HEADER_LEN..).unwrap_or_default();
    let codec = h.codec().ok_or_else(|| format!("unknown compression codec {}", h.attributes & 0x7))?;
    match compression::decompress(codec, body, usize::MAX) {
        Ok(records) => Ok(Bytes::from(records)),
        Err(Inflate::Corrupt(why)) => Err(why),
        Err(Inflate::Over) => Err("records larger than the address space".into()),
    }
}

/// The `h.record_count` records of a decompressed records section.
pub(crate) fn parse_records<'a>(payload: &'a [u8], h: &BatchHeader) -> Result<Vec<RawRecord<'a>>, String> {
    let count = usize::try_from(h.record_count).map_err(|_| format!("record count {}", h.record_count))?;
    let mut out = Vec::with_capacity(count.min(payload.len()));
    let mut rest = payload;
    for i in 0..count {
        let r = next_record(&mut rest)
            .map_err(|why| format!("record {i} of the batch at offset {}: {why}", h.base_offset))?;
        out.push(RawRecord {
            offset: h.base_offset + r.offset_delta,
            timestamp: h.base_timestamp + r.timestamp_delta,
            key: r.key,
            has_value: r.value.is_some(),
            attributes: r.attributes,
            raw: r.raw,
            after_timestamp: r.after_timestamp,
        });
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last record of the batch at offset {}", rest.len(), h.base_offset));
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// The batch `h` holding only `kept` (some of its records, in order), written as Kafka's cleaner
/// writes a batch it filtered. With `horizon`, the batch gets that delete horizon as its base
/// timestamp. The max timestamp is the kept records' (CreateTime) or the batch's append time.
pub(crate) fn rebuild(h: &BatchHeader, kept: &[RawRecord<'_>], horizon: Option<i64>) -> Result<Vec<u8>, String> {
    let codec = h.codec().ok_or_else(|| format!("unknown compression codec {}", h.attributes & 0x7))?;
    let base_timestamp = horizon.unwrap_or(h.base_timestamp);
    let mut raw = Vec::with_capacity(kept.iter().map(|r| r.raw.len() + 10).sum());
    for r in kept {
        if base_timestamp == h.base_timestamp {
            raw.extend_from_slice(r.raw);
            continue;
        }
        let mut body = vec![r.attributes];
        put_varint(&mut body, r.timestamp - base_timestamp);
        body.extend_from_slice(r.after_timestamp);
        put_varint(&mut raw, body.len() as i64);
        raw.extend_from_slice(&body);
    }
    let max_timestamp = if h.is_log_append_time() {
        h.max_timestamp
    } else {
        kept.iter().map(|r| r.timestamp).max().unwrap_or(h.max_timestamp)
    };
    let attributes = h.attributes | if horizon.is_some() { DELETE_HORIZON } else { 0 };
    write_batch(h, attributes, base_timestamp, max_timestamp, kept.len(), &compression::compress(codec, raw)?)
}

/// The batch `h` with no records (Kafka's `RetainEmpty`): offsets, producer fields, leader
/// epoch, timestamp type and transactional and control flags kept, no codec, both timestamps
/// the batch's max timestamp.
pub(crate) fn empty(h: &BatchHeader) -> Result<Vec<u8>, String> {
    write_batch(h, h.attributes & 0x38, h.max_timestamp, h.max_timestamp, 0, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Codec, compute_crc};
    use kafka_protocol::records::{Compression, RecordBatchDecoder};

    fn header(b: &[u8]) -> BatchHeader {
        BatchHeader::parse(b).unwrap_or_else(|| panic!("a batch header"))
    }

    /// (offset, timestamp, key, value, header count) of a record.
    type Decoded = (i64, i64, Option<Bytes>, Option<Bytes>, usize);

    /// Every record of `b`, as Kafka clients read them.
    fn decoded(b: &[u8]) -> Vec<Decoded> {
        let sets = RecordBatchDecoder::decode_all(&mut Bytes::copy_from_slice(b)).unwrap_or_default();
        sets.into_iter()
            .flat_map(|s| s.records)
            .map(|r| (r.offset, r.timestamp, r.key, r.value, r.headers.len()))
            .collect()
    }

    #[test]
    fn filtered_batches_keep_their_offsets_sequences_and_records() -> Result<(), String> {
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            // Producer 9, epoch 2, sequences 40..45 at offsets 100..105.
            let mut b = crate::testing::batch(6, 1_000, 0, c, Some((9, 2, 40))).to_vec();
            crate::batch::patch_offset_and_epoch(&mut b, 100, 7);
            let h = header(&b);
            let all = decoded(&b);
            let payload = records_payload(&b, &h)?;
            let records = parse_records(&payload, &h)?;
            assert_eq!(
                records.iter().map(|r| (r.offset, r.timestamp)).collect::<Vec<_>>(),
                (0..6).map(|i| (100 + i, 1_000 + i)).collect::<Vec<_>>()
            );
            assert!(records.iter().all(|r| r.key.is_some() && r.has_value));
            // Keep records 1 and 3: the batch still covers 100..=105 with sequences 40..=45.
            let kept: Vec<_> =
                records.into_iter().enumerate().filter(|(i, _)| *i == 1 || *i == 3).map(|(_, r)| r).collect();
            let out = rebuild(&h, &kept, None)?;
            let o = header(&out);
            assert_eq!((o.base_offset, o.last_offset(), o.base_sequence, o.last_sequence()), (100, 105, 40, 45));
            assert_eq!((o.producer_id, o.producer_epoch, o.leader_epoch, o.codec()), (9, 2, 7, h.codec()));
            assert_eq!((o.record_count, o.base_timestamp, o.max_timestamp), (2, 1_000, 1_003));
            assert_eq!(o.crc, compute_crc(&out));
            assert_eq!(decoded(&out), vec![all[1].clone(), all[3].clone()], "{c:?}");
            // A delete horizon moves the base timestamp; the records' timestamps stay.
            let out = rebuild(&h, &kept, Some(50_000))?;
            let o = header(&out);
            assert_eq!((delete_horizon(&o), o.max_timestamp), (Some(50_000), 1_003));
            assert_eq!(decoded(&out), vec![all[1].clone(), all[3].clone()], "{c:?}");
            // Nothing kept: an empty batch over the same offsets and sequences.
            let out = empty(&h)?;
            let o = header(&out);
            assert_eq!(out.len(), HEADER_LEN);
            assert_eq!(
                (o.base_offset, o.last_offset(), o.base_sequence, o.last_sequence(), o.record_count),
                (100, 105, 40, 45, 0)
            );
            assert_eq!(
                (o.codec(), o.base_timestamp, o.max_timestamp, o.crc),
                (Some(Codec::None), 1_005, 1_005, compute_crc(&out))
            );
            assert!(decoded(&out).is_empty());
            assert_eq!(crate::batch::BatchIter::new(&out).verify_crc().count(), 1, "stored and served like any batch");
        }
        Ok(())
    }

    #[test]
    fn damaged_records_are_refused() {
        let b = crate::testing::batch(2, 0, 0, Compression::None, None).to_vec();
        let h = header(&b);
        let payload = &b[HEADER_LEN..];
        assert!(parse_records(&payload[..payload.len() - 1], &h).is_err());
        let mut extra = payload.to_vec();
        extra.push(0);
        assert!(parse_records(&extra, &h).is_err());
        assert!(parse_records(payload, &BatchHeader { record_count: 3, ..h }).is_err());
    }
}
