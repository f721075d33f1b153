//! Recompression for topics whose `compression.type` is not `producer`. This is the only path
//! that decodes records on append; it keeps producer id, epoch, sequences, timestamps, keys,
//! values and headers.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions};

use crate::batch::{BatchHeader, Codec};
use crate::config::TargetCompression;
use crate::error::BatchError;

fn target_codec(t: TargetCompression) -> Option<(Codec, Compression)> {
    Some(match t {
        TargetCompression::Producer => return None,
        TargetCompression::Uncompressed => (Codec::None, Compression::None),
        TargetCompression::Gzip => (Codec::Gzip, Compression::Gzip),
        TargetCompression::Snappy => (Codec::Snappy, Compression::Snappy),
        TargetCompression::Lz4 => (Codec::Lz4, Compression::Lz4),
        TargetCompression::Zstd => (Codec::Zstd, Compression::Zstd),
    })
}

/// Returns the batch re-encoded with the topic's codec, or `None` when it already matches.
pub fn recompress(batch: &[u8], h: &BatchHeader, target: TargetCompression) -> Result<Option<Vec<u8>>, BatchError> {
    let Some((codec, compression)) = target_codec(target) else { return Ok(None) };
    if h.codec() == Some(codec) {
        return Ok(None);
    }
    let mut input = Bytes::copy_from_slice(batch);
    let mut set = RecordBatchDecoder::decode(&mut input)
        .map_err(|e| BatchError::Corrupt(format!("cannot decode records: {e}")))?;
    if set.records.len() != h.record_count as usize {
        return Err(BatchError::InvalidRecord(format!(
            "batch says {} records, holds {}",
            h.record_count,
            set.records.len()
        )));
    }
    // The encoder starts a new batch whenever offset - sequence changes: make sequences step
    // with offsets (non-idempotent batches keep base sequence -1).
    for (i, r) in set.records.iter_mut().enumerate() {
        r.sequence = h.base_sequence.wrapping_add(i as i32);
        r.offset = i as i64;
    }
    let mut out = BytesMut::with_capacity(batch.len());
    RecordBatchEncoder::encode(&mut out, &set.records, &RecordEncodeOptions { version: 2, compression })
        .map_err(|e| BatchError::Corrupt(format!("cannot re-encode records: {e}")))?;
    Ok(Some(out.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{tests::batch, validate_produce};

    #[test]
    fn recompresses_to_one_valid_batch() {
        let b = batch(20, 5000, Compression::None);
        let v = validate_produce(&b, 1 << 20).unwrap_or_default();
        let out = recompress(&b, &v[0].header, TargetCompression::Zstd).ok().flatten().unwrap_or_default();
        let v2 = validate_produce(&out, 1 << 20).unwrap_or_default();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].header.codec(), Some(Codec::Zstd));
        assert_eq!(v2[0].header.record_count, 20);
        assert_eq!(v2[0].header.base_sequence, -1);
        assert_eq!(v2[0].header.max_timestamp, 5019);
        assert_eq!(recompress(&out, &v2[0].header, TargetCompression::Zstd).ok(), Some(None));
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
        assert!(recompress(&b, &h, TargetCompression::Lz4).is_err());
    }
}
