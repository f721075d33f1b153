//! The records of `__transaction_state`, in Apache Kafka's own schemas (`TransactionLogKey`,
//! `TransactionLogValue`), so a coordinator of either broker can load the other's log.
//!
//! The key is an int16 record type (0) and the transactional id as an int16-length string. The
//! value starts with its version: v0 is the classic layout; v1 (written once
//! `transaction.version` is 1 or more, as on every Kafka 4.1 cluster by default) is flexible:
//! compact strings and arrays, and tagged fields carrying `PreviousProducerId` (tag 0),
//! `NextProducerId` (tag 1) and `ClientTransactionVersion` (tag 2), each written only when it
//! differs from its default (-1, -1, 0). Unknown tags are skipped on read. A null value is a
//! tombstone: the transactional id expired.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_protocol::schema::{
    SchemaError, get_i16, get_i32, get_i64, get_str, get_uvarint, need, put_compact_str, put_str, put_uvarint,
    skip_tagged, take_utf8,
};

use crate::state::TxnState;

/// A malformed or unknown record in `__transaction_state`.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record is truncated")]
    Truncated,
    #[error("unknown TransactionLogValue version {0}")]
    UnknownVersion(i16),
    #[error("unknown transaction state id {0}")]
    UnknownState(i8),
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("negative length {0}")]
    BadLength(i64),
    #[error("tagged field {tag} has {size} bytes")]
    BadTaggedField { tag: u64, size: usize },
}

impl From<SchemaError> for RecordError {
    fn from(e: SchemaError) -> Self {
        match e {
            SchemaError::Truncated => RecordError::Truncated,
            SchemaError::NotUtf8 => RecordError::NotUtf8,
            SchemaError::BadLength(n) => RecordError::BadLength(n),
        }
    }
}

type Result<T> = std::result::Result<T, RecordError>;

/// The record type of `TransactionLogKey` (its only key version).
pub const KEY_VERSION: i16 = 0;

/// The version of `TransactionLogValue` Kafka 4.1 writes with `transaction.version` 1 or more.
pub const VALUE_VERSION: i16 = 1;

/// The key of the record that stores `transactional_id`.
pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(KEY_VERSION);
    put_str(&mut b, transactional_id);
    b.freeze()
}

/// The transactional id of a key; `Ok(None)` for a key version this coordinator does not know,
/// which loading skips (as Kafka does).
pub fn decode_key(mut b: &[u8]) -> Result<Option<String>> {
    match get_i16(&mut b)? {
        KEY_VERSION => Ok(Some(get_str(&mut b)?)),
        _ => Ok(None),
    }
}

/// The partitions of one topic in a transaction (`TransactionLogValue.PartitionsSchema`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// The stored state of one transactional id (`TransactionLogValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnValue {
    pub producer_id: i64,
    /// Tagged (v1+): the producer id before the transition that wrote this record; -1 unknown.
    pub previous_producer_id: i64,
    /// Tagged (v1+): the producer id the completing transaction hands over to when its epoch is
    /// exhausted (transaction version 2); -1 when none.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Written as null in the Empty state.
    pub partitions: Vec<TopicPartitions>,
    pub last_update_timestamp: i64,
    pub start_timestamp: i64,
    /// Tagged (v1+): the `transaction.version` the client used; 0 when unknown.
    pub client_transaction_version: i16,
}

impl TxnValue {
    /// Encodes the value as Kafka 4.1 does ([`VALUE_VERSION`]).
    pub fn encode(&self) -> Bytes {
        self.encode_version(VALUE_VERSION)
    }

    /// Encodes the value at `version` (0 when the cluster's `transaction.version` is 0; any
    /// other version writes 1). Version 0 has no tagged fields: they are lost.
    pub fn encode_version(&self, version: i16) -> Bytes {
        let flexible = version >= 1;
        let mut b = BytesMut::with_capacity(64);
        b.put_i16(if flexible { 1 } else { 0 });
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_i32(self.timeout_ms);
        b.put_i8(self.state.id());
        let null = self.state == TxnState::Empty;
        if flexible {
            if null {
                put_uvarint(&mut b, 0);
            } else {
                put_uvarint(&mut b, self.partitions.len() as u64 + 1);
                for tp in &self.partitions {
                    put_compact_str(&mut b, &tp.topic);
                    put_uvarint(&mut b, tp.partitions.len() as u64 + 1);
                    tp.partitions.iter().for_each(|p| b.put_i32(*p));
                    put_uvarint(&mut b, 0);
                }
            }
        } else if null {
            b.put_i32(-1);
        } else {
            b.put_i32(len_i32(self.partitions.len()));
            for tp in &self.partitions {
                put_str(&mut b, &tp.topic);
                b.put_i32(len_i32(tp.partitions.len()));
                tp.partitions.iter().for_each(|p| b.put_i32(*p));
            }
        }
        b.put_i64(self.last_update_timestamp);
        b.put_i64(self.start_timestamp);
        if flexible {
            let tags = [
                (0, self.previous_producer_id != -1, self.previous_producer_id.to_be_bytes().to_vec()),
                (1, self.next_producer_id != -1, self.next_producer_id.to_be_bytes().to_vec()),
                (2, self.client_transaction_version != 0, self.client_transaction_version.to_be_bytes().to_vec()),
            ];
            put_uvarint(&mut b, tags.iter().filter(|t| t.1).count() as u64);
            for (tag, _, data) in tags.iter().filter(|t| t.1) {
                put_uvarint(&mut b, *tag);
                put_uvarint(&mut b, data.len() as u64);
                b.put_slice(data);
            }
        }
        b.freeze()
    }

    /// Decodes a value of any version Kafka defines (0 and 1).
    pub fn decode(mut b: &[u8]) -> Result<TxnValue> {
        let version = get_i16(&mut b)?;
        let flexible = match version {
            0 => false,
            1 => true,
            v => return Err(RecordError::UnknownVersion(v)),
        };
        let producer_id = get_i64(&mut b)?;
        let producer_epoch = get_i16(&mut b)?;
        let timeout_ms = get_i32(&mut b)?;
        need(b, 1)?;
        let status = b.get_i8();
        let state = TxnState::from_id(status).ok_or(RecordError::UnknownState(status))?;
        let partitions = if flexible { get_compact_partitions(&mut b)? } else { get_partitions(&mut b)? };
        let mut v = TxnValue {
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch,
            timeout_ms,
            state,
            partitions,
            last_update_timestamp: get_i64(&mut b)?,
            start_timestamp: get_i64(&mut b)?,
            client_transaction_version: 0,
        };
        if flexible {
            let n = get_uvarint(&mut b)?;
            for _ in 0..n {
                let tag = get_uvarint(&mut b)?;
                let size = usize::try_from(get_uvarint(&mut b)?).map_err(|_| RecordError::Truncated)?;
                need(b, size)?;
                let mut field = &b[..size];
                let bad = RecordError::BadTaggedField { tag, size };
                match (tag, size) {
                    (0, 8) => v.previous_producer_id = field.get_i64(),
                    (1, 8) => v.next_producer_id = field.get_i64(),
                    (2, 2) => v.client_transaction_version = field.get_i16(),
                    (0..=2, _) => return Err(bad),
                    _ => {}
                }
                b.advance(size);
            }
        }
        Ok(v)
    }
}

/// A decoded `__transaction_state` record: the transactional id and its value (`None`: a
/// tombstone). `Ok(None)` for a key version this coordinator does not know.
pub fn decode_record(key: &[u8], value: Option<&[u8]>) -> Result<Option<(String, Option<TxnValue>)>> {
    let Some(id) = decode_key(key)? else { return Ok(None) };
    Ok(Some((id, value.map(TxnValue::decode).transpose()?)))
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn get_partitions(b: &mut &[u8]) -> Result<Vec<TopicPartitions>> {
    let n = get_i32(b)?;
    if n < 0 {
        return Ok(Vec::new());
    }
    // Each element takes at least 6 bytes: no length can make us allocate more than we read.
    let n = bounded(n as usize, b, 6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = get_str(b)?;
        let k = get_i32(b)?;
        let k = if k < 0 { return Err(RecordError::BadLength(k.into())) } else { bounded(k as usize, b, 4)? };
        let partitions = (0..k).map(|_| get_i32(b)).collect::<std::result::Result<_, _>>()?;
        out.push(TopicPartitions { topic, partitions });
    }
    Ok(out)
}

fn get_compact_partitions(b: &mut &[u8]) -> Result<Vec<TopicPartitions>> {
    let Some(n) = get_compact_len(b)? else { return Ok(Vec::new()) };
    let n = bounded(n, b, 3)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = get_compact_str(b)?;
        let k = get_compact_len(b)?.unwrap_or(0);
        let k = bounded(k, b, 4)?;
        let partitions = (0..k).map(|_| get_i32(b)).collect::<std::result::Result<_, _>>()?;
        skip_tagged(b)?;
        out.push(TopicPartitions { topic, partitions });
    }
    Ok(out)
}

/// `n` elements of at least `min` bytes each, if that many bytes are left.
fn bounded(n: usize, b: &[u8], min: usize) -> Result<usize> {
    if n.saturating_mul(min) > b.len() { Err(RecordError::Truncated) } else { Ok(n) }
}

/// A compact array or string length: `None` for null.
fn get_compact_len(b: &mut &[u8]) -> Result<Option<usize>> {
    match get_uvarint(b)? {
        0 => Ok(None),
        n => usize::try_from(n - 1).map(Some).map_err(|_| RecordError::Truncated),
    }
}

fn get_compact_str(b: &mut &[u8]) -> Result<String> {
    match get_compact_len(b)? {
        Some(n) => Ok(take_utf8(b, n)?),
        None => Err(RecordError::BadLength(-1)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ongoing() -> TxnValue {
        TxnValue {
            producer_id: 1000,
            previous_producer_id: 999,
            next_producer_id: 2000,
            producer_epoch: 5,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: vec![
                TopicPartitions { topic: "a".into(), partitions: vec![0, 2] },
                TopicPartitions { topic: "bb".into(), partitions: vec![7] },
            ],
            last_update_timestamp: 1_700_000_000_123,
            start_timestamp: 1_700_000_000_100,
            client_transaction_version: 2,
        }
    }

    #[test]
    fn key_is_record_type_zero_then_the_transactional_id() {
        assert_eq!(&encode_key("tx")[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&encode_key("é-tx")).unwrap(), Some("é-tx".to_string()));
        // Another record type (a future key) is skipped, not an error.
        assert_eq!(decode_key(&[0, 1, 0, 0]).unwrap(), None);
        assert_eq!(decode_key(&[0]), Err(RecordError::Truncated));
        assert_eq!(decode_key(&[0, 0, 0, 3, b'a']), Err(RecordError::Truncated));
        assert_eq!(decode_key(&[0, 0, 0xff, 0xff]), Err(RecordError::BadLength(-1)));
        assert_eq!(decode_key(&[0, 0, 0, 1, 0xff]), Err(RecordError::NotUtf8));
    }

    #[test]
    fn value_v1_matches_bytes_built_from_the_schema() {
        let v = ongoing();
        let mut b = vec![0, 1]; // version 1
        b.extend(1000i64.to_be_bytes()); // ProducerId
        b.extend(5i16.to_be_bytes()); // ProducerEpoch
        b.extend(60_000i32.to_be_bytes()); // TransactionTimeoutMs
        b.push(1); // TransactionStatus: Ongoing
        b.push(3); // TransactionPartitions: compact array of 2
        b.extend([2, b'a', 3, 0, 0, 0, 0, 0, 0, 0, 2, 0]); // "a", [0, 2], no tags
        b.extend([3, b'b', b'b', 2, 0, 0, 0, 7, 0]); // "bb", [7], no tags
        b.extend(1_700_000_000_123i64.to_be_bytes()); // TransactionLastUpdateTimestampMs
        b.extend(1_700_000_000_100i64.to_be_bytes()); // TransactionStartTimestampMs
        b.push(3); // three tagged fields, by tag
        b.extend([0, 8]);
        b.extend(999i64.to_be_bytes()); // PreviousProducerId
        b.extend([1, 8]);
        b.extend(2000i64.to_be_bytes()); // NextProducerId
        b.extend([2, 2, 0, 2]); // ClientTransactionVersion
        assert_eq!(&v.encode()[..], &b[..]);
        assert_eq!(TxnValue::decode(&b).unwrap(), v);
    }

    #[test]
    fn value_v1_writes_tagged_fields_only_when_not_default() {
        let mut v = ongoing();
        v.previous_producer_id = -1;
        v.next_producer_id = -1;
        v.client_transaction_version = 0;
        let e = v.encode();
        assert_eq!(e[e.len() - 1], 0, "no tagged fields");
        assert_eq!(TxnValue::decode(&e).unwrap(), v);
        v.next_producer_id = 7;
        let e = v.encode();
        assert_eq!(&e[e.len() - 11..e.len() - 8], &[1, 1, 8]);
        assert_eq!(TxnValue::decode(&e).unwrap(), v);
    }

    #[test]
    fn value_v0_matches_bytes_built_from_the_schema_and_drops_tagged_fields() {
        let v = ongoing();
        let mut b = vec![0, 0]; // version 0
        b.extend(1000i64.to_be_bytes());
        b.extend(5i16.to_be_bytes());
        b.extend(60_000i32.to_be_bytes());
        b.push(1);
        b.extend(2i32.to_be_bytes()); // two topics
        b.extend([0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        b.extend([0, 2, b'b', b'b', 0, 0, 0, 1, 0, 0, 0, 7]);
        b.extend(1_700_000_000_123i64.to_be_bytes());
        b.extend(1_700_000_000_100i64.to_be_bytes());
        assert_eq!(&v.encode_version(0)[..], &b[..]);
        let d = TxnValue::decode(&b).unwrap();
        assert_eq!((d.previous_producer_id, d.next_producer_id, d.client_transaction_version), (-1, -1, 0));
        assert_eq!(
            TxnValue { previous_producer_id: 999, next_producer_id: 2000, client_transaction_version: 2, ..d },
            v
        );
    }

    #[test]
    fn empty_state_writes_null_partitions_in_both_versions() {
        let v = TxnValue { state: TxnState::Empty, partitions: Vec::new(), ..ongoing() };
        let v1 = v.encode();
        assert_eq!(v1[17], 0, "compact null array");
        let v0 = v.encode_version(0);
        assert_eq!(&v0[17..21], &[0xff, 0xff, 0xff, 0xff], "int32 -1: null array");
        assert_eq!(TxnValue::decode(&v1).unwrap(), v);
        assert_eq!(TxnValue::decode(&v0).unwrap().partitions, vec![]);
        // A record with no transaction at all, and what a tombstone decodes to.
        assert_eq!(decode_record(&encode_key("t"), None).unwrap(), Some(("t".to_string(), None)));
        assert_eq!(decode_record(&encode_key("t"), Some(&v1)).unwrap(), Some(("t".to_string(), Some(v))));
        assert_eq!(decode_record(&[0, 9, 0, 0], Some(&[1])).unwrap(), None);
    }

    #[test]
    fn unknown_tags_from_later_kafkas_are_skipped() {
        let v = ongoing();
        let mut b = v.encode().to_vec();
        // Replace the tag section with one field of tag 3 (Kafka 4.2's NextProducerEpoch).
        let tags_at = b.len() - 25;
        b.truncate(tags_at);
        b.extend([1, 3, 2, 0, 9]);
        let d = TxnValue::decode(&b).unwrap();
        assert_eq!((d.previous_producer_id, d.next_producer_id, d.client_transaction_version), (-1, -1, 0));
        assert_eq!(d.partitions, v.partitions);
        // A known tag with the wrong size is corrupt.
        b.truncate(tags_at);
        b.extend([1, 2, 1, 0]);
        assert_eq!(TxnValue::decode(&b), Err(RecordError::BadTaggedField { tag: 2, size: 1 }));
    }

    #[test]
    fn unknown_versions_and_states_are_errors() {
        let mut b = ongoing().encode().to_vec();
        b[1] = 2;
        assert_eq!(TxnValue::decode(&b), Err(RecordError::UnknownVersion(2)));
        b[1] = 1;
        b[16] = 8;
        assert_eq!(TxnValue::decode(&b), Err(RecordError::UnknownState(8)));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for version in [0, 1] {
            let full = ongoing().encode_version(version);
            assert!(TxnValue::decode(&full).is_ok());
            for n in 0..full.len() {
                assert!(TxnValue::decode(&full[..n]).is_err(), "v{version} cut at {n}");
            }
        }
        let key = encode_key("transactional");
        for n in 0..key.len() {
            assert!(decode_key(&key[..n]).is_err());
        }
    }

    #[test]
    fn lengths_claiming_more_than_the_record_holds_are_rejected() {
        let mut b = vec![0, 0];
        b.extend([0; 15]);
        b[16] = 1; // Ongoing
        let mut huge = b.clone();
        huge.extend(i32::MAX.to_be_bytes());
        assert_eq!(TxnValue::decode(&huge), Err(RecordError::Truncated));
        let mut compact = b.clone();
        compact[1] = 1;
        compact.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(TxnValue::decode(&compact), Err(RecordError::Truncated));
        let mut negative = b;
        negative.extend(1i32.to_be_bytes());
        negative.extend([0, 1, b'a']);
        negative.extend((-2i32).to_be_bytes());
        assert_eq!(TxnValue::decode(&negative), Err(RecordError::BadLength(-2)));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small linear congruential generator: deterministic noise, no dependency.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let template = ongoing().encode();
        for round in 0..2000 {
            let mut b = template.to_vec();
            for _ in 0..(round % 6 + 1) {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let at = (x >> 33) as usize % b.len();
                b[at] = (x >> 17) as u8;
            }
            let _ = TxnValue::decode(&b);
            let _ = TxnValue::decode(&b[..(x as usize) % b.len()]);
            let _ = decode_key(&b);
        }
    }
}
