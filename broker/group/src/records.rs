//! The records of `__consumer_offsets`, in Apache Kafka's own key and value schemas, so tools
//! that read the topic (and a future Kafka-compatible reader) understand them.
//!
//! Keys start with an int16 version: 0 and 1 are `OffsetCommitKey` (group, topic, partition),
//! 2 is `GroupMetadataKey` (group). Values start with their own version. Oxbow writes
//! `OffsetCommitValue` v3 and `GroupMetadataValue` v3 and reads versions 0 to 3 of both (and
//! the flexible v4 of offsets); a null value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// A malformed or unknown record in `__consumer_offsets`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record is truncated")]
    Truncated,
    #[error("unknown {what} version {version}")]
    UnknownVersion { what: &'static str, version: i16 },
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("negative length {0}")]
    BadLength(i64),
}

type Result<T> = std::result::Result<T, RecordError>;

/// The key of a `__consumer_offsets` record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Offset { group: String, topic: String, partition: i32 },
    Group { group: String },
}

impl Key {
    pub fn group(&self) -> &str {
        match self {
            Key::Offset { group, .. } | Key::Group { group } => group,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Key::Offset { group, topic, partition } => {
                b.put_i16(1);
                put_str(&mut b, group);
                put_str(&mut b, topic);
                b.put_i32(*partition);
            }
            Key::Group { group } => {
                b.put_i16(2);
                put_str(&mut b, group);
            }
        }
        b.freeze()
    }

    /// Decodes a key. `Ok(None)`: a record type this coordinator does not use (KIP-848's
    /// consumer group records, share groups), skipped when loading.
    pub fn decode(mut b: &[u8]) -> Result<Option<Key>> {
        let version = get_i16(&mut b)?;
        Ok(match version {
            0 | 1 => {
                Some(Key::Offset { group: get_str(&mut b)?, topic: get_str(&mut b)?, partition: get_i32(&mut b)? })
            }
            2 => Some(Key::Group { group: get_str(&mut b)? }),
            v if v > 2 => None,
            v => return Err(RecordError::UnknownVersion { what: "key", version: v }),
        })
    }
}

/// A committed offset (`OffsetCommitValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only in v1 records (clients of OffsetCommit v1 could set it); not written any more.
    pub expire_timestamp: Option<i64>,
}

impl OffsetValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(3);
        b.put_i64(self.offset);
        b.put_i32(self.leader_epoch);
        put_str(&mut b, &self.metadata);
        b.put_i64(self.commit_timestamp);
        b.freeze()
    }

    pub fn decode(mut b: &[u8]) -> Result<OffsetValue> {
        let version = get_i16(&mut b)?;
        let offset = get_i64(&mut b)?;
        let (leader_epoch, metadata) = match version {
            0..=2 => (-1, get_str(&mut b)?),
            3 => (get_i32(&mut b)?, get_str(&mut b)?),
            4 => (get_i32(&mut b)?, get_compact_str(&mut b)?),
            v => return Err(RecordError::UnknownVersion { what: "OffsetCommitValue", version: v }),
        };
        let commit_timestamp = get_i64(&mut b)?;
        let expire_timestamp = if version == 1 { Some(get_i64(&mut b)?) } else { None };
        Ok(OffsetValue { offset, leader_epoch, metadata, commit_timestamp, expire_timestamp })
    }
}

/// One member in a stored group (`GroupMetadataValue.MemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A classic group's state as stored (`GroupMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp: i64,
    pub members: Vec<StoredMember>,
}

impl GroupValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(3);
        put_str(&mut b, &self.protocol_type);
        b.put_i32(self.generation);
        put_nullable_str(&mut b, self.protocol.as_deref());
        put_nullable_str(&mut b, self.leader.as_deref());
        b.put_i64(self.current_state_timestamp);
        b.put_i32(self.members.len() as i32);
        for m in &self.members {
            put_str(&mut b, &m.member_id);
            put_nullable_str(&mut b, m.instance_id.as_deref());
            put_str(&mut b, &m.client_id);
            put_str(&mut b, &m.client_host);
            b.put_i32(m.rebalance_timeout_ms);
            b.put_i32(m.session_timeout_ms);
            put_bytes(&mut b, &m.subscription);
            put_bytes(&mut b, &m.assignment);
        }
        b.freeze()
    }

    pub fn decode(mut b: &[u8]) -> Result<GroupValue> {
        let version = get_i16(&mut b)?;
        if !(0..=3).contains(&version) {
            return Err(RecordError::UnknownVersion { what: "GroupMetadataValue", version });
        }
        let protocol_type = get_str(&mut b)?;
        let generation = get_i32(&mut b)?;
        let protocol = get_nullable_str(&mut b)?;
        let leader = get_nullable_str(&mut b)?;
        let current_state_timestamp = if version >= 2 { get_i64(&mut b)? } else { -1 };
        let n = get_i32(&mut b)?;
        let n = usize::try_from(n).map_err(|_| RecordError::BadLength(n.into()))?;
        if n > b.len() {
            return Err(RecordError::Truncated);
        }
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            let member_id = get_str(&mut b)?;
            let instance_id = if version >= 3 { get_nullable_str(&mut b)? } else { None };
            let client_id = get_str(&mut b)?;
            let client_host = get_str(&mut b)?;
            let rebalance_timeout_ms = if version >= 1 { get_i32(&mut b)? } else { -1 };
            let session_timeout_ms = get_i32(&mut b)?;
            let rebalance_timeout_ms = if rebalance_timeout_ms < 0 { session_timeout_ms } else { rebalance_timeout_ms };
            let subscription = get_bytes(&mut b)?;
            let assignment = get_bytes(&mut b)?;
            members.push(StoredMember {
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        Ok(GroupValue { protocol_type, generation, protocol, leader, current_state_timestamp, members })
    }
}

/// The topics in a consumer's subscription (`ConsumerProtocolSubscription`, any version: the
/// topic list comes first in all of them). `None` when the bytes are not one.
pub fn subscribed_topics(mut b: &[u8]) -> Option<Vec<String>> {
    let _version = get_i16(&mut b).ok()?;
    let n = usize::try_from(get_i32(&mut b).ok()?).ok()?;
    if n > b.len() {
        return None;
    }
    (0..n).map(|_| get_str(&mut b).ok()).collect()
}

fn put_str(b: &mut BytesMut, s: &str) {
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    b.put_i16(len);
    b.put_slice(&s.as_bytes()[..len as usize]);
}

fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

fn need(b: &[u8], n: usize) -> Result<()> {
    if b.len() < n { Err(RecordError::Truncated) } else { Ok(()) }
}

fn get_i16(b: &mut &[u8]) -> Result<i16> {
    need(b, 2)?;
    Ok(b.get_i16())
}

fn get_i32(b: &mut &[u8]) -> Result<i32> {
    need(b, 4)?;
    Ok(b.get_i32())
}

fn get_i64(b: &mut &[u8]) -> Result<i64> {
    need(b, 8)?;
    Ok(b.get_i64())
}

fn take_utf8(b: &mut &[u8], n: usize) -> Result<String> {
    need(b, n)?;
    let s = std::str::from_utf8(&b[..n]).map_err(|_| RecordError::NotUtf8)?.to_string();
    b.advance(n);
    Ok(s)
}

fn get_nullable_str(b: &mut &[u8]) -> Result<Option<String>> {
    let n = get_i16(b)?;
    if n < 0 {
        return Ok(None);
    }
    take_utf8(b, n as usize).map(Some)
}

fn get_str(b: &mut &[u8]) -> Result<String> {
    let n = get_i16(b)?;
    if n < 0 {
        return Err(RecordError::BadLength(n.into()));
    }
    take_utf8(b, n as usize)
}

fn get_uvarint(b: &mut &[u8]) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        need(b, 1)?;
        let byte = b.get_u8();
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(RecordError::Truncated)
}

fn get_compact_str(b: &mut &[u8]) -> Result<String> {
    let n = get_uvarint(b)?;
    if n == 0 {
        return Ok(String::new());
    }
    take_utf8(b, usize::try_from(n - 1).map_err(|_| RecordError::Truncated)?)
}

fn get_bytes(b: &mut &[u8]) -> Result<Bytes> {
    let n = get_i32(b)?;
    if n < 0 {
        return Ok(Bytes::new());
    }
    let n = n as usize;
    need(b, n)?;
    let v = Bytes::copy_from_slice(&b[..n]);
    b.advance(n);
    Ok(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let k = Key::Offset { group: "g".into(), topic: "t".into(), partition: 7 };
        assert_eq!(Key::decode(&k.encode()).unwrap(), Some(k));
        let k = Key::Group { group: "grp".into() };
        // Kafka's bytes: version 2, then the string.
        assert_eq!(&k.encode()[..], &[0, 2, 0, 3, b'g', b'r', b'p']);
        assert_eq!(Key::decode(&k.encode()).unwrap(), Some(k));
        assert_eq!(Key::decode(&[0, 3, 0, 0]).unwrap(), None);
        assert_eq!(Key::decode(&[0]), Err(RecordError::Truncated));
    }

    #[test]
    fn offset_values() {
        let v = OffsetValue {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp: 1000,
            expire_timestamp: None,
        };
        assert_eq!(OffsetValue::decode(&v.encode()).unwrap(), v);
        // v1, as old Kafka wrote it: offset, metadata, commit and expire timestamps.
        let mut b = BytesMut::new();
        b.put_i16(1);
        b.put_i64(5);
        put_str(&mut b, "x");
        b.put_i64(10);
        b.put_i64(20);
        let d = OffsetValue::decode(&b).unwrap();
        assert_eq!((d.offset, d.leader_epoch, d.metadata.as_str(), d.expire_timestamp), (5, -1, "x", Some(20)));
    }

    #[test]
    fn group_values() {
        let v = GroupValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp: 77,
            members: vec![StoredMember {
                member_id: "m1".into(),
                instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        assert_eq!(GroupValue::decode(&v.encode()).unwrap(), v);
        assert!(GroupValue::decode(&v.encode()[..20]).is_err());
    }

    #[test]
    fn subscriptions() {
        let mut b = BytesMut::new();
        b.put_i16(3);
        b.put_i32(2);
        put_str(&mut b, "a");
        put_str(&mut b, "bb");
        b.put_i32(-1);
        assert_eq!(subscribed_topics(&b), Some(vec!["a".to_string(), "bb".to_string()]));
        assert_eq!(subscribed_topics(&[0, 1, 0, 0, 0, 9]), None);
    }
}
