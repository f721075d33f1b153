//! End-transaction markers: the control batches a partition leader writes on WriteTxnMarkers to
//! commit or abort a producer's transaction, in Kafka's format (`EndTransactionMarker`,
//! `ControlRecordType`).
//!
//! A marker is a v2 batch with the control (bit 5) and transactional (bit 4) attributes, the
//! producer's id and epoch, base sequence -1, no compression, CreateTime, and one record:
//! ```text
//! key   = version i16 (0) | type i16 (0 = ABORT, 1 = COMMIT)
//! value = version i16 (0) | coordinator epoch i32
//! ```

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::batch::BatchHeader;
use crate::error::BatchError;

/// The highest control record key version known (Kafka's `ControlRecordTypeSchema`); keys of a
/// later version are read as this one.
const CONTROL_KEY_VERSION: i16 = 0;
/// The highest end-transaction marker value version known (Kafka's `EndTxnMarker`); values of
/// a later version are read as this one.
const END_TXN_MARKER_VERSION: i16 = 0;
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// The outcome a marker writes for a producer's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub commit: bool,
    /// Epoch of the transaction coordinator that wrote the marker (fences zombie coordinators).
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    fn key(&self) -> Bytes {
        let mut k = Vec::with_capacity(4);
        k.extend_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
        k.extend_from_slice(&(if self.commit { COMMIT } else { ABORT }).to_be_bytes());
        Bytes::from(k)
    }
    fn value(&self) -> Bytes {
        let mut v = Vec::with_capacity(6);
        v.extend_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
        v.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        Bytes::from(v)
    }
}

/// The marker batch at base offset 0 with leader epoch -1 (both patched on append) and
/// `timestamp` as its record's and the batch's timestamps.
pub fn encode_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
    timestamp: i64,
) -> Result<Vec<u8>, BatchError> {
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp,
        key: Some(marker.key()),
        value: Some(marker.value()),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        std::slice::from_ref(&record),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .map_err(|e| BatchError::InvalidRecord(format!("cannot encode a transaction marker: {e}")))?;
    Ok(buf.to_vec())
}

fn be_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The end-transaction marker a control batch carries. `Ok(None)` for a batch that is not a
/// control batch, holds no record (the cleaner emptied it), or carries another control type
/// (Kafka's `UNKNOWN`, ignored); an error for a marker Kafka would refuse to parse.
///
/// As Kafka 4.1 (`ControlRecordType.parseTypeId`, `EndTransactionMarker.deserializeValue`), a
/// key or value version newer than the one this broker knows is read as the known one and its
/// trailing bytes are ignored (a newer version may only add fields), so a follower never stalls
/// on a marker from a newer leader. A negative version, a key shorter than 4 bytes or a value
/// shorter than 6 bytes is refused.
pub fn parse_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>, BatchError> {
    let h = BatchHeader::parse(batch).ok_or_else(|| BatchError::Corrupt("short control batch".into()))?;
    if !h.is_control() {
        return Ok(None);
    }
    let mut b = Bytes::copy_from_slice(batch);
    let set = RecordBatchDecoder::decode(&mut b)
        .map_err(|e| BatchError::Corrupt(format!("control batch at offset {}: {e}", h.base_offset)))?;
    let Some(record) = set.records.first() else { return Ok(None) };
    let bad = |why: String| BatchError::InvalidRecord(format!("control batch at offset {}: {why}", h.base_offset));
    let key = record.key.as_deref().unwrap_or_default();
    let (Some(version), Some(kind)) = (be_i16(key, 0), be_i16(key, 2)) else {
        return Err(bad(format!("control record key of {} bytes", key.len())));
    };
    if version < 0 {
        return Err(bad(format!("control record key version {version}")));
    }
    if version > CONTROL_KEY_VERSION {
        tracing::debug!(offset = h.base_offset, version, "newer control record key version; read as version 0");
    }
    let commit = match kind {
        ABORT => false,
        COMMIT => true,
        _ => return Ok(None),
    };
    let value = record.value.as_deref().unwrap_or_default();
    let (Some(version), Some(epoch)) = (be_i16(value, 0), value.get(2..6)) else {
        return Err(bad(format!("end transaction marker value of {} bytes", value.len())));
    };
    if version < 0 {
        return Err(bad(format!("end transaction marker version {version}")));
    }
    if version > END_TXN_MARKER_VERSION {
        tracing::debug!(offset = h.base_offset, version, "newer end transaction marker version; read as version 0");
    }
    let coordinator_epoch = i32::from_be_bytes([epoch[0], epoch[1], epoch[2], epoch[3]]);
    Ok(Some(EndTxnMarker { commit, coordinator_epoch }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchIter, HEADER_LEN, compute_crc};

    #[test]
    fn marker_batches_are_built_as_kafka_writes_them() -> Result<(), BatchError> {
        let m = EndTxnMarker { commit: true, coordinator_epoch: 7 };
        let b = encode_marker(4242, 3, m, 1_700_000_000_000)?;
        let h = BatchHeader::parse(&b).ok_or_else(|| BatchError::Corrupt("header".into()))?;
        assert_eq!(h.attributes, 0x30, "control and transactional, no compression, CreateTime");
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (4242, 3, -1));
        assert_eq!((h.record_count, h.last_offset_delta), (1, 0));
        assert_eq!((h.base_timestamp, h.max_timestamp), (1_700_000_000_000, 1_700_000_000_000));
        assert_eq!(h.crc, compute_crc(&b));
        // The record, byte for byte: length 16, attributes 0, timestamp and offset deltas 0,
        // key [0, 0, 0, 1] (COMMIT), value [0, 0, 0, 0, 0, 7], no headers.
        assert_eq!(&b[HEADER_LEN..], &[32, 0, 0, 0, 8, 0, 0, 0, 1, 12, 0, 0, 0, 0, 0, 7, 0]);
        assert_eq!(b.len(), HEADER_LEN + 17, "Kafka's marker batch is 78 bytes");
        assert_eq!(BatchIter::new(&b).verify_crc().count(), 1);
        assert_eq!(parse_marker(&b)?, Some(m));
        let abort = encode_marker(1, 0, EndTxnMarker { commit: false, coordinator_epoch: -1 }, 5)?;
        assert_eq!(&abort[HEADER_LEN + 5..HEADER_LEN + 9], &[0, 0, 0, 0], "ABORT is type 0");
        assert_eq!(parse_marker(&abort)?, Some(EndTxnMarker { commit: false, coordinator_epoch: -1 }));
        Ok(())
    }

    #[test]
    fn data_batches_and_other_control_types_are_not_markers() -> Result<(), BatchError> {
        let data = crate::testing::batch(2, 0, 0, Compression::None, Some((1, 0, 0)));
        assert_eq!(parse_marker(&data)?, None);
        // A control record of another type (KRaft's LEADER_CHANGE is 2) is ignored.
        let mut b = encode_marker(1, 0, EndTxnMarker { commit: true, coordinator_epoch: 0 }, 5)?;
        b[HEADER_LEN + 8] = 2;
        let crc = compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(parse_marker(&b)?, None);
        Ok(())
    }

    /// A marker whose record holds `key` and `value`, as a newer or broken writer might send it.
    fn marker_with(key: &[u8], value: &[u8]) -> Result<Vec<u8>, BatchError> {
        let b = encode_marker(1, 0, EndTxnMarker { commit: true, coordinator_epoch: 0 }, 5)?;
        let mut r = Bytes::from(b);
        let mut record =
            RecordBatchDecoder::decode(&mut r).map_err(|e| BatchError::Corrupt(e.to_string()))?.records.remove(0);
        record.key = Some(Bytes::copy_from_slice(key));
        record.value = Some(Bytes::copy_from_slice(value));
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            std::slice::from_ref(&record),
            &RecordEncodeOptions { version: 2, compression: Compression::None },
        )
        .map_err(|e| BatchError::Corrupt(e.to_string()))?;
        Ok(buf.to_vec())
    }

    #[test]
    fn newer_key_and_value_versions_are_read_as_the_known_one() -> Result<(), BatchError> {
        // Key version 3 with an extra field; value version 2 with extra bytes after the epoch.
        let b = marker_with(&[0, 3, 0, 0, 0xAB, 0xCD], &[0, 2, 0, 0, 0, 9, 1, 2, 3])?;
        assert_eq!(parse_marker(&b)?, Some(EndTxnMarker { commit: false, coordinator_epoch: 9 }));
        let b = marker_with(&[0x7f, 0, 0, 1], &[0x7f, 0, 0, 0, 0, 4])?;
        assert_eq!(parse_marker(&b)?, Some(EndTxnMarker { commit: true, coordinator_epoch: 4 }));
        // A newer key version of another control type is still not a marker.
        assert_eq!(parse_marker(&marker_with(&[0, 1, 0, 2], &[])?)?, None);
        // What Kafka refuses: negative versions, short keys and values.
        assert!(parse_marker(&marker_with(&[0xff, 0xff, 0, 1], &[0, 0, 0, 0, 0, 4])?).is_err());
        assert!(parse_marker(&marker_with(&[0, 0, 0, 1], &[0xff, 0xfe, 0, 0, 0, 4])?).is_err());
        assert!(parse_marker(&marker_with(&[0, 0, 0], &[0, 0, 0, 0, 0, 4])?).is_err());
        assert!(parse_marker(&marker_with(&[0, 0, 0, 1], &[0, 0, 0, 0, 4])?).is_err());
        Ok(())
    }
}
