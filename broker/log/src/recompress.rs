//! Recompression for topics whose `compression.type` is not `producer`: the only path that
//! reads the records of a batch on append. The records' bytes are kept as the producer wrote
//! them (keys, values, headers, timestamp and offset deltas), and so is the batch header (producer
//! id, epoch, base sequence, timestamps, transactional flag); only the codec, the length and
//! the CRC change.

use crate::batch::{BatchHeader, Codec, HEADER_LEN, check_uncompressed_records, write_batch};
use crate::compression::{self, Inflate};
use crate::config::TargetCompression;
use crate::error::BatchError;

/// How far a batch's records may inflate, in multiples of `max.message.bytes`, to be
/// recompressed with a codec: the decompression stops there, so a batch that would inflate to
/// gigabytes costs memory and work of this order instead (the decompressed records, up to
/// twice their size while the vector grows, and a copy the compressor takes: a few times the
/// bound at the peak). An uncompressed result is bounded by `max.message.bytes` itself.
pub const MAX_INFLATION: usize = 64;

fn target_codec(t: TargetCompression) -> Option<Codec> {
    Some(match t {
        TargetCompression::Producer => return None,
        TargetCompression::Uncompressed => Codec::None,
        TargetCompression::Gzip => Codec::Gzip,
        TargetCompression::Snappy => Codec::Snappy,
        TargetCompression::Lz4 => Codec::Lz4,
        TargetCompression::Zstd => Codec::Zstd,
    })
}

/// Returns the batch (whose header is `h`) re-encoded with the topic's codec, or `None` when it
/// already has it. `max_batch_bytes` is the topic's `max.message.bytes`: it bounds the
/// decompression (see [`MAX_INFLATION`]); the caller checks the result against it.
pub fn recompress(
    batch: &[u8],
    h: &BatchHeader,
    target: TargetCompression,
    max_batch_bytes: usize,
) -> Result<Option<Vec<u8>>, BatchError> {
    let Some(codec) = target_codec(target) else { return Ok(None) };
    let from =
        h.codec().ok_or_else(|| BatchError::Corrupt(format!("unknown compression codec {}", h.attributes & 7)))?;
    if from == codec {
        return Ok(None);
    }
    let payload = batch.get(HEADER_LEN..).ok_or_else(|| BatchError::Corrupt("short batch".into()))?;
    let limit = match codec {
        Codec::None => max_batch_bytes.saturating_sub(HEADER_LEN),
        _ => max_batch_bytes.saturating_mul(MAX_INFLATION),
    };
    let records = compression::decompress(from, payload, limit).map_err(|e| match e {
        Inflate::Over => BatchError::Inflated { limit },
        Inflate::Corrupt(why) => BatchError::Corrupt(format!("cannot decompress records: {why}")),
    })?;
    check_uncompressed_records(&records, h.record_count)?;
    let records = compression::compress(codec, records).map_err(BatchError::Corrupt)?;
    let attributes = (h.attributes & !7) | codec.bits();
    write_batch(h, attributes, h.base_timestamp, h.max_timestamp, h.record_count as usize, &records)
        .map(Some)
        .map_err(|_| BatchError::TooLarge { size: HEADER_LEN + records.len(), max: max_batch_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{tests::batch, validate_produce};
    use kafka_protocol::records::Compression;

    #[test]
    fn recompresses_to_one_valid_batch() {
        let b = batch(20, 5000, Compression::None);
        let v = validate_produce(&b, 1 << 20).unwrap_or_default();
        let out = recompress(&b, &v[0].header, TargetCompression::Zstd, 1 << 20).ok().flatten().unwrap_or_default();
        let v2 = validate_produce(&out, 1 << 20).unwrap_or_default();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].header.codec(), Some(Codec::Zstd));
        assert_eq!(v2[0].header.record_count, 20);
        assert_eq!(v2[0].header.base_sequence, -1);
        assert_eq!(v2[0].header.max_timestamp, 5019);
        assert_eq!(recompress(&out, &v2[0].header, TargetCompression::Zstd, 1 << 20).ok(), Some(None));
    }

    /// The batch's records, decoded by kafka-protocol (keys, values, headers, timestamps).
    fn records(b: &[u8]) -> Vec<kafka_protocol::records::Record> {
        let mut buf = bytes::Bytes::copy_from_slice(b);
        kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).map(|s| s.records).unwrap_or_default()
    }

    #[test]
    fn every_codec_to_every_other_keeps_records_and_producer_fields() {
        use kafka_protocol::records::Compression as C;
        let codecs = [
            (C::None, TargetCompression::Uncompressed),
            (C::Gzip, TargetCompression::Gzip),
            (C::Snappy, TargetCompression::Snappy),
            (C::Lz4, TargetCompression::Lz4),
            (C::Zstd, TargetCompression::Zstd),
        ];
        for (from, _) in codecs {
            let b = crate::testing::batch(50, 7000, 300, from, Some((42, 3, 100))).to_vec();
            let v = validate_produce(&b, 1 << 20).unwrap_or_default();
            let want = records(&b);
            assert_eq!(want.len(), 50);
            for (to_compression, to) in codecs {
                let got = recompress(&b, &v[0].header, to, 1 << 20);
                if to_compression == from {
                    assert_eq!(got, Ok(None), "{from:?} -> {to:?}");
                    continue;
                }
                let out = got.ok().flatten().unwrap_or_default();
                let v2 = validate_produce(&out, 1 << 20).unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
                let (h, h2) = (v[0].header, v2[0].header);
                assert_eq!(h2.codec(), target_codec(to), "{from:?} -> {to:?}");
                assert_eq!(
                    (h2.producer_id, h2.producer_epoch, h2.base_sequence, h2.record_count),
                    (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
                );
                assert_eq!((h2.base_timestamp, h2.max_timestamp), (h.base_timestamp, h.max_timestamp));
                assert_eq!(records(&out), want, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn a_batch_inflating_past_the_bound_is_too_large_after_bounded_work() {
        // 16 records of 1 MiB of zeros: a small zstd batch that inflates to 16 MiB.
        let b = crate::testing::batch(16, 0, 1 << 20, Compression::Zstd, None).to_vec();
        let max = 64 << 10;
        assert!(b.len() < max, "{}", b.len());
        let h = BatchHeader::parse(&b).unwrap_or_else(|| panic!("no header"));
        // A codec may hold 64 times max.message.bytes (4 MiB here); uncompressed, max itself.
        let limit = max * MAX_INFLATION;
        assert_eq!(recompress(&b, &h, TargetCompression::Gzip, max), Err(BatchError::Inflated { limit }));
        let limit = max - HEADER_LEN;
        assert_eq!(recompress(&b, &h, TargetCompression::Uncompressed, max), Err(BatchError::Inflated { limit }));
        assert!(recompress(&b, &h, TargetCompression::Gzip, 1 << 20).is_ok_and(|o| o.is_some()));
    }

    #[test]
    fn records_that_do_not_frame_are_corrupt() {
        let mut b = crate::testing::batch(3, 0, 10, Compression::None, None).to_vec();
        let h = BatchHeader::parse(&b).unwrap_or_else(|| panic!("no header"));
        b.truncate(b.len() - 2);
        assert!(matches!(recompress(&b, &h, TargetCompression::Lz4, 1 << 20), Err(BatchError::Corrupt(_))));
    }

    #[test]
    fn a_batch_claiming_more_records_than_it_holds_is_refused_without_a_huge_allocation() {
        // Produce validation refuses a count that disagrees with the offset delta; a batch that
        // lies in both (or a stored one) must still not make the decoder reserve 2^31 records.
        let mut b = batch(3, 0, Compression::Zstd);
        b[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crate::batch::compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap_or_else(|| panic!("no header"));
        assert!(recompress(&b, &h, TargetCompression::Lz4, 1 << 20).is_err());
    }
}
