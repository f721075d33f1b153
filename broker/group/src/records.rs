//! The records of `__consumer_offsets`, in Apache Kafka's own key and value schemas, so tools
//! that read the topic (and a future Kafka-compatible reader) understand them.
//!
//! Keys start with an int16 record type: 0 and 1 are `OffsetCommitKey` (group, topic, partition),
//! 2 is `GroupMetadataKey` (group), 3 to 8 are the consumer group protocol's (KIP-848) records
//! of a group, its members, its target assignment and its members' current assignments. Values
//! start with their own version. Oxbow writes `OffsetCommitValue` v3 and `GroupMetadataValue` v3
//! and reads versions 0 to 3 of both (and the flexible v4 of offsets); the consumer group
//! records are Kafka 4's v0 (flexible: compact strings and arrays, tagged fields, which are
//! skipped on read). A null value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_protocol::schema::{
    SchemaError, get_bytes, get_compact_nullable_str, get_i16, get_i32, get_i64, get_nullable_str, get_str,
    get_uvarint, need, put_bytes, put_compact_nullable_str, put_compact_str, put_nullable_str, put_str, put_uvarint,
    skip_tagged,
};
use uuid::Uuid;

use crate::assignor::Assignment;

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

/// The key of a `__consumer_offsets` record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// One of a consumer protocol group's records (types 3 to 8).
    Consumer {
        group: String,
        record: ConsumerKey,
    },
}

/// Which consumer protocol group record a key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsumerKey {
    /// 3: the group epoch.
    Metadata,
    /// 4: subscribed topics' metadata (Kafka 4.0; read and ignored).
    PartitionMetadata,
    /// 5: a member's subscription and details.
    Member(String),
    /// 6: the target assignment's epoch.
    TargetMetadata,
    /// 7: a member's target assignment.
    TargetMember(String),
    /// 8: a member's epochs, state and current assignment.
    CurrentAssignment(String),
}

impl ConsumerKey {
    fn record_type(&self) -> i16 {
        match self {
            ConsumerKey::Metadata => 3,
            ConsumerKey::PartitionMetadata => 4,
            ConsumerKey::Member(_) => 5,
            ConsumerKey::TargetMetadata => 6,
            ConsumerKey::TargetMember(_) => 7,
            ConsumerKey::CurrentAssignment(_) => 8,
        }
    }

    fn member(&self) -> Option<&str> {
        match self {
            ConsumerKey::Member(m) | ConsumerKey::TargetMember(m) | ConsumerKey::CurrentAssignment(m) => Some(m),
            _ => None,
        }
    }
}

impl Key {
    pub fn group(&self) -> &str {
        match self {
            Key::Offset { group, .. } | Key::Group { group } | Key::Consumer { group, .. } => group,
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
            Key::Consumer { group, record } => {
                b.put_i16(record.record_type());
                put_str(&mut b, group);
                if let Some(m) = record.member() {
                    put_str(&mut b, m);
                }
            }
        }
        b.freeze()
    }

    /// Decodes a key. `Ok(None)`: a record type this coordinator does not use (regular
    /// expression resolutions, share and streams groups), skipped when loading.
    pub fn decode(mut b: &[u8]) -> Result<Option<Key>> {
        let version = get_i16(&mut b)?;
        let consumer = |record: ConsumerKey| Ok(Some(Key::Consumer { group: String::new(), record }));
        let key: Result<Option<Key>> = match version {
            0 | 1 => {
                return Ok(Some(Key::Offset {
                    group: get_str(&mut b)?,
                    topic: get_str(&mut b)?,
                    partition: get_i32(&mut b)?,
                }));
            }
            2 => return Ok(Some(Key::Group { group: get_str(&mut b)? })),
            3 => consumer(ConsumerKey::Metadata),
            4 => consumer(ConsumerKey::PartitionMetadata),
            5 => consumer(ConsumerKey::Member(String::new())),
            6 => consumer(ConsumerKey::TargetMetadata),
            7 => consumer(ConsumerKey::TargetMember(String::new())),
            8 => consumer(ConsumerKey::CurrentAssignment(String::new())),
            v if v > 8 => return Ok(None),
            v => return Err(RecordError::UnknownVersion { what: "key", version: v }),
        };
        let Some(Key::Consumer { record, .. }) = key? else { return Ok(None) };
        let group = get_str(&mut b)?;
        let record = match record {
            ConsumerKey::Member(_) => ConsumerKey::Member(get_str(&mut b)?),
            ConsumerKey::TargetMember(_) => ConsumerKey::TargetMember(get_str(&mut b)?),
            ConsumerKey::CurrentAssignment(_) => ConsumerKey::CurrentAssignment(get_str(&mut b)?),
            other => other,
        };
        Ok(Some(Key::Consumer { group, record }))
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

/// A consumer protocol member as stored (`ConsumerGroupMemberMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// A member's place in its reconciliation (`ConsumerGroupCurrentMemberAssignmentValue`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's `MemberState`: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// The value of a consumer protocol group record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerValue {
    /// `ConsumerGroupMetadataValue`: the group epoch, and (tagged field 0) a hash of the
    /// subscribed topics' metadata.
    Metadata {
        epoch: i32,
        metadata_hash: i64,
    },
    /// `ConsumerGroupPartitionMetadataValue`: not used by Oxbow (its content is not decoded).
    PartitionMetadata,
    Member(MemberValue),
    /// `ConsumerGroupTargetAssignmentMetadataValue`.
    TargetMetadata {
        assignment_epoch: i32,
    },
    /// `ConsumerGroupTargetAssignmentMemberValue`.
    TargetMember(Assignment),
    CurrentAssignment(CurrentValue),
}

impl ConsumerValue {
    /// Version 0 of the value, flexible encoding, no tagged fields.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        match self {
            ConsumerValue::Metadata { epoch, metadata_hash } => {
                b.put_i32(*epoch);
                if *metadata_hash != 0 {
                    // One tagged field: tag 0, 8 bytes.
                    put_uvarint(&mut b, 1);
                    put_uvarint(&mut b, 0);
                    put_uvarint(&mut b, 8);
                    b.put_i64(*metadata_hash);
                    return b.freeze();
                }
            }
            ConsumerValue::PartitionMetadata => put_uvarint(&mut b, 1),
            ConsumerValue::Member(m) => {
                put_compact_nullable_str(&mut b, m.instance_id.as_deref());
                put_compact_nullable_str(&mut b, m.rack_id.as_deref());
                put_compact_str(&mut b, &m.client_id);
                put_compact_str(&mut b, &m.client_host);
                put_uvarint(&mut b, m.subscribed_topic_names.len() as u64 + 1);
                for n in &m.subscribed_topic_names {
                    put_compact_str(&mut b, n);
                }
                put_compact_nullable_str(&mut b, m.subscribed_topic_regex.as_deref());
                b.put_i32(m.rebalance_timeout_ms);
                put_compact_nullable_str(&mut b, m.server_assignor.as_deref());
            }
            ConsumerValue::TargetMetadata { assignment_epoch } => b.put_i32(*assignment_epoch),
            ConsumerValue::TargetMember(a) => put_assignment(&mut b, a),
            ConsumerValue::CurrentAssignment(c) => {
                b.put_i32(c.member_epoch);
                b.put_i32(c.previous_member_epoch);
                b.put_i8(c.state);
                put_assignment(&mut b, &c.assigned);
                put_assignment(&mut b, &c.pending_revocation);
            }
        }
        // The value's tagged fields: none.
        put_uvarint(&mut b, 0);
        b.freeze()
    }

    /// Decodes the value of a record of type `key`.
    pub fn decode(key: &ConsumerKey, mut b: &[u8]) -> Result<ConsumerValue> {
        let version = get_i16(&mut b)?;
        if version != 0 {
            return Err(RecordError::UnknownVersion { what: "consumer group record", version });
        }
        let v = match key {
            ConsumerKey::Metadata => {
                let epoch = get_i32(&mut b)?;
                let mut metadata_hash = 0;
                let n = get_uvarint(&mut b)?;
                for _ in 0..n {
                    let tag = get_uvarint(&mut b)?;
                    let size = usize::try_from(get_uvarint(&mut b)?).map_err(|_| RecordError::Truncated)?;
                    need(b, size)?;
                    if tag == 0 && size == 8 {
                        metadata_hash = (&b[..8]).get_i64();
                    }
                    b.advance(size);
                }
                return Ok(ConsumerValue::Metadata { epoch, metadata_hash });
            }
            ConsumerKey::PartitionMetadata => return Ok(ConsumerValue::PartitionMetadata),
            ConsumerKey::Member(_) => {
                let instance_id = get_compact_nullable_str(&mut b)?;
                let rack_id = get_compact_nullable_str(&mut b)?;
                let client_id = get_compact_str(&mut b)?;
                let client_host = get_compact_str(&mut b)?;
                let n = get_compact_len(&mut b)?;
                let mut subscribed_topic_names = Vec::with_capacity(n.min(b.len()));
                for _ in 0..n {
                    subscribed_topic_names.push(get_compact_str(&mut b)?);
                }
                ConsumerValue::Member(MemberValue {
                    instance_id,
                    rack_id,
                    client_id,
                    client_host,
                    subscribed_topic_names,
                    subscribed_topic_regex: get_compact_nullable_str(&mut b)?,
                    rebalance_timeout_ms: get_i32(&mut b)?,
                    server_assignor: get_compact_nullable_str(&mut b)?,
                })
            }
            ConsumerKey::TargetMetadata => ConsumerValue::TargetMetadata { assignment_epoch: get_i32(&mut b)? },
            ConsumerKey::TargetMember(_) => ConsumerValue::TargetMember(get_assignment(&mut b)?),
            ConsumerKey::CurrentAssignment(_) => {
                let member_epoch = get_i32(&mut b)?;
                let previous_member_epoch = get_i32(&mut b)?;
                need(b, 1)?;
                let state = b.get_i8();
                ConsumerValue::CurrentAssignment(CurrentValue {
                    member_epoch,
                    previous_member_epoch,
                    state,
                    assigned: get_assignment(&mut b)?,
                    pending_revocation: get_assignment(&mut b)?,
                })
            }
        };
        skip_tagged(&mut b)?;
        Ok(v)
    }
}

/// `[TopicId uuid, Partitions []int32]`, compact, each element with (empty) tagged fields.
fn put_assignment(b: &mut BytesMut, a: &Assignment) {
    put_uvarint(b, a.len() as u64 + 1);
    for (topic, ps) in a {
        b.put_slice(topic.as_bytes());
        put_uvarint(b, ps.len() as u64 + 1);
        for p in ps {
            b.put_i32(*p);
        }
        put_uvarint(b, 0);
    }
}

fn get_assignment(b: &mut &[u8]) -> Result<Assignment> {
    let n = get_compact_len(b)?;
    let mut a = Assignment::new();
    for _ in 0..n {
        need(b, 16)?;
        let topic = Uuid::from_slice(&b[..16]).map_err(|_| RecordError::Truncated)?;
        b.advance(16);
        let k = get_compact_len(b)?;
        let mut ps = std::collections::BTreeSet::new();
        for _ in 0..k {
            ps.insert(get_i32(b)?);
        }
        skip_tagged(b)?;
        if !ps.is_empty() {
            a.entry(topic).or_default().extend(ps);
        }
    }
    Ok(a)
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

fn get_compact_str(b: &mut &[u8]) -> Result<String> {
    Ok(get_compact_nullable_str(b)?.unwrap_or_default())
}

/// A compact array's length (null counts as empty), bounded by what is left to read.
fn get_compact_len(b: &mut &[u8]) -> Result<usize> {
    let n = get_uvarint(b)?;
    let n = usize::try_from(n.saturating_sub(1)).map_err(|_| RecordError::Truncated)?;
    if n > b.len() {
        return Err(RecordError::Truncated);
    }
    Ok(n)
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
        assert_eq!(Key::decode(&[0, 9, 0, 0]).unwrap(), None);
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
    fn consumer_group_records() {
        let t = Uuid::from_u128(0xabc);
        let key = Key::Consumer { group: "g".into(), record: ConsumerKey::CurrentAssignment("m1".into()) };
        // Kafka's bytes: type 8, then group and member as int16-length strings.
        assert_eq!(&key.encode()[..], &[0, 8, 0, 1, b'g', 0, 2, b'm', b'1']);
        assert_eq!(Key::decode(&key.encode()).unwrap(), Some(key));
        for record in [ConsumerKey::Metadata, ConsumerKey::TargetMetadata, ConsumerKey::Member("x".into())] {
            let k = Key::Consumer { group: "grp".into(), record };
            assert_eq!(Key::decode(&k.encode()).unwrap(), Some(k));
        }
        assert_eq!(Key::decode(&[0, 16, 0, 1, b'g']).unwrap(), None);
        let a: Assignment = [(t, [0, 3].into_iter().collect())].into_iter().collect();
        let values = [
            (ConsumerKey::Metadata, ConsumerValue::Metadata { epoch: 7, metadata_hash: 0 }),
            (ConsumerKey::Metadata, ConsumerValue::Metadata { epoch: 7, metadata_hash: -42 }),
            (ConsumerKey::TargetMetadata, ConsumerValue::TargetMetadata { assignment_epoch: 7 }),
            (ConsumerKey::TargetMember("m".into()), ConsumerValue::TargetMember(a.clone())),
            (
                ConsumerKey::CurrentAssignment("m".into()),
                ConsumerValue::CurrentAssignment(CurrentValue {
                    member_epoch: 7,
                    previous_member_epoch: 6,
                    state: 1,
                    assigned: a.clone(),
                    pending_revocation: Assignment::new(),
                }),
            ),
            (
                ConsumerKey::Member("m".into()),
                ConsumerValue::Member(MemberValue {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["t1".into(), "t2".into()],
                    subscribed_topic_regex: None,
                    rebalance_timeout_ms: 300_000,
                    server_assignor: Some("uniform".into()),
                }),
            ),
        ];
        for (k, v) in values {
            assert_eq!(ConsumerValue::decode(&k, &v.encode()).unwrap(), v);
        }
        // ConsumerGroupMetadataValue with Kafka 4.1's tagged MetadataHash (tag 0, int64).
        let with_tag = [0, 0, 0, 0, 0, 9, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 42];
        assert_eq!(
            ConsumerValue::decode(&ConsumerKey::Metadata, &with_tag).unwrap(),
            ConsumerValue::Metadata { epoch: 9, metadata_hash: 42 }
        );
        assert!(ConsumerValue::decode(&ConsumerKey::TargetMember("m".into()), &[0, 0, 5]).is_err());
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
