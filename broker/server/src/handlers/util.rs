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

/// Kafka's "not requested" value for authorized operations.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;
