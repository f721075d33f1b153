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

/// "All operations" bitfield for authorized-operations fields when asked (no authorizer).
pub const ALL_TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const ALL_CLUSTER_OPERATIONS: i32 =
    (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);
/// Kafka's "not requested" value for authorized operations.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;
