//! Small helpers shared by handlers.

use oxbow_protocol::StrBytes;
use oxbow_protocol::messages::TopicName;
use uuid::Uuid;

pub fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}

/// Kafka prints topic ids as URL-safe base64 without padding.
pub fn kafka_uuid_string(id: Uuid) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b = id.into_bytes();
    let mut out = String::with_capacity(22);
    let (mut acc, mut bits) = (0u32, 0);
    for byte in b {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(A[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(A[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

/// Parses [`kafka_uuid_string`]'s form back (22 characters of URL-safe base64).
pub fn parse_kafka_uuid(text: &str) -> Option<Uuid> {
    if text.len() != 22 {
        return None;
    }
    let mut bytes = Vec::with_capacity(17);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
        }
    }
    Uuid::from_slice(&bytes[..16]).ok()
}

/// "All operations" bitfield for authorized-operations fields when asked (no authorizer).
pub const ALL_TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const ALL_CLUSTER_OPERATIONS: i32 =
    (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);
/// Kafka's "not requested" value for authorized operations.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_uuid_roundtrip() {
        for _ in 0..100 {
            let id = Uuid::new_v4();
            assert_eq!(parse_kafka_uuid(&kafka_uuid_string(id)), Some(id));
        }
        assert_eq!(parse_kafka_uuid("short"), None);
    }
}
