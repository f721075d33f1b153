//! Small helpers shared by handlers.

use oxbow_protocol::StrBytes;
use oxbow_protocol::messages::TopicName;

pub fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}

/// The element of `list` that `is` picks, appended as `new()` first if there is none: responses
/// group partitions under their topic, topics in the order they first appear.
pub fn entry<T>(list: &mut Vec<T>, is: impl Fn(&T) -> bool, new: impl FnOnce() -> T) -> &mut T {
    let i = list.iter().position(is).unwrap_or_else(|| {
        list.push(new());
        list.len() - 1
    });
    &mut list[i]
}

/// "All operations" bitfield for authorized-operations fields when asked (no authorizer).
pub const ALL_TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const ALL_CLUSTER_OPERATIONS: i32 =
    (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);
/// Kafka's "not requested" value for authorized operations.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;
