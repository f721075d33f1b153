//! Kafka wire protocol for Oxbow, without I/O.
//!
//! - [`frame`]: the 4-byte size prefix and the request header peek that decides how a frame is
//!   decoded (and how it is answered when it cannot be).
//! - [`versions`]: the table of APIs and versions this broker advertises in ApiVersions. Only
//!   versions whose handlers fully work are listed.
//! - [`client`]: request frames and response decoding for clients (the operator, replica
//!   fetchers, test helpers).
//! - [`connection`] (feature `io`, the only part that does I/O): one client connection over TCP,
//!   a request at a time, each exchange bounded in time and in response size.
//! - [`ids`]: Kafka's 22-character text form of topic, cluster and directory ids.
//! - [`schema`]: the primitives of Kafka's message schemas (bounded readers, strings, varints,
//!   tagged fields) for the internal-topic records Oxbow encodes, and the coordinator partition hash.
//! - [`scram`]: SCRAM-SHA-256/512 credentials and both sides of the exchange; [`secret`]: a
//!   value that prints as `[hidden]`.
//! - [`codec`]: decoding request bodies and encoding responses with the right header version, on
//!   top of the `kafka-protocol` crate.
//!
//! Message types are re-exported from `kafka-protocol` as [`messages`].

pub mod client;
pub mod codec;
#[cfg(feature = "io")]
pub mod connection;
pub mod frame;
pub mod ids;
pub mod schema;
pub mod scram;
pub mod secret;
pub mod versions;

pub use kafka_protocol::error::ResponseError;
pub use kafka_protocol::messages;
pub use kafka_protocol::messages::ApiKey;
pub use kafka_protocol::protocol::StrBytes;
pub use kafka_protocol::records;

/// The name of `api` in Kafka's protocol (`Produce`, `Fetch`, ...): the request metrics' `api`
/// label and the request spans' name.
pub fn api_name(api: ApiKey) -> &'static str {
    // Indexed by key; built once, so the names live as long as the process without leaking.
    static NAMES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let mut names = Vec::new();
        for a in ApiKey::iter() {
            let k = a as i16 as usize;
            if names.len() <= k {
                names.resize(k + 1, String::new());
            }
            names[k] = format!("{a:?}");
        }
        names
    });
    NAMES.get(api as i16 as usize).map_or("Unknown", String::as_str)
}

/// Errors raised while framing or decoding a request.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The size prefix is negative or larger than `socket.request.max.bytes`.
    #[error("frame size {size} is outside 0..={max} (socket.request.max.bytes)")]
    FrameSize { size: i64, max: usize },
    /// The frame is too short to hold a request header.
    #[error("frame of {len} bytes is too short for a request header")]
    ShortFrame { len: usize },
    /// The request body or header did not decode at this API version.
    #[error("cannot decode {api:?} v{version}: {reason}")]
    Decode { api: ApiKey, version: i16, reason: String },
    /// A response could not be encoded (a bug, or a field not representable in that version).
    #[error("cannot encode {api:?} v{version} response: {reason}")]
    Encode { api: ApiKey, version: i16, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_has_its_protocol_name() {
        assert_eq!(api_name(ApiKey::Produce), "Produce");
        assert_eq!(api_name(ApiKey::DescribeCluster), "DescribeCluster");
        for a in ApiKey::iter() {
            assert_eq!(api_name(a), format!("{a:?}"));
        }
    }
}
