//! Cluster metadata, in the role KRaft plays for Kafka.
//!
//! - [`records`]: the metadata log's records (broker registrations, topics, partitions,
//!   configs, producer id blocks, feature levels).
//! - [`image`]: the versioned in-memory image and the pure state machine that applies records.
//! - [`controller`]: the active controller's decisions (placement, fencing, leader election,
//!   config diffs), pure: command + image + time in, records out.
//! - [`raft`]: openraft's types and the RocksDB log store and state machine.
//! - [`network`] and [`rpc`]: controller-to-controller gRPC (tonic, JSON payloads).
//! - [`quorum`]: the runtime: Raft, the controller service, command routing, broker sessions,
//!   snapshots, and image following for broker-only nodes.
//!
//! This crate knows nothing of the Kafka protocol: the broker maps [`controller::Refusal`]s
//! onto Kafka error codes.

pub mod acl;
pub mod controller;
pub mod image;
pub mod network;
pub mod quorum;
pub mod raft;
pub mod records;

/// The generated gRPC client and server (see build.rs) and their one message type.
pub mod rpc {
    #![allow(clippy::all, clippy::unwrap_used, clippy::expect_used)]

    /// An opaque JSON message (openraft's request/response types, commands, images).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Payload {
        #[prost(bytes = "vec", tag = "1")]
        pub data: Vec<u8>,
    }

    include!(concat!(env!("OUT_DIR"), "/oxbow.meta.Quorum.rs"));
}

pub use controller::{Command, Election, ElectionOutcome, Refusal, Reply};
pub use image::MetadataImage;
pub use quorum::{
    AdminRefusal, AdminReply, CommandError, Quorum, QuorumAdmin, QuorumConfig, QuorumError, QuorumState,
    write_initial_voters,
};
