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
