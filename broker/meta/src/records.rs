//! Metadata records: the entries of the metadata log, in the role of KRaft's metadata records
//! (`RegisterBrokerRecord`, `TopicRecord`, `PartitionRecord`, `PartitionChangeRecord`,
//! `ConfigRecord`, `ProducerIdsRecord`, `FeatureLevelRecord`, ...).
//!
//! Records are facts the active controller decided; applying them ([`crate::image`]) never fails
//! and never decides anything. They are stored as JSON inside Raft entries: the metadata log is
//! not a hot path, and new optional fields (`#[serde(default)]`) stay readable by old logs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A node id (`node.id`), as Kafka's int32 broker id.
pub type NodeId = i32;

/// One listener a broker registered: what clients are told to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: String,
}

/// The resource a config record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigResource {
    Topic(String),
    /// `None` is the cluster-wide default (Kafka's BROKER resource named "").
    Broker(Option<NodeId>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic_id: Uuid,
    pub partition: i32,
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
    /// -1: no leader (offline).
    pub leader: NodeId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// A reassignment in flight (KIP-455): replicas being added (in `replicas`, catching up)
    /// and being removed (in `replicas` until the move completes). `replicas` is then the
    /// target followed by the removing ones, as Kafka orders them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<NodeId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<NodeId>,
}

impl PartitionRecord {
    /// Whether a reassignment is in flight.
    pub fn is_reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas the partition ends up with: during a move the target, else its replicas.
    pub fn target_replicas(&self) -> Vec<NodeId> {
        self.replicas.iter().copied().filter(|r| !self.removing.contains(r)).collect()
    }
}

/// A change of one partition's leader, ISR, replicas or reassignment. Applying it bumps the
/// partition epoch, and the leader epoch whenever `leader` is set, even to the same leader (as
/// Kafka's `PartitionChangeRecord`: a reassignment that removes a replica bumps it so that the
/// removed replica's fetches are fenced).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionChange {
    pub topic_id: Uuid,
    pub partition: i32,
    #[serde(default)]
    pub leader: Option<NodeId>,
    #[serde(default)]
    pub isr: Option<Vec<NodeId>>,
    #[serde(default)]
    pub replicas: Option<Vec<NodeId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adding: Option<Vec<NodeId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing: Option<Vec<NodeId>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A broker (re)registered. Its epoch is the log index of this record; it starts fenced
    /// until its first heartbeat after registration unfences it.
    RegisterBroker {
        node_id: NodeId,
        incarnation_id: Uuid,
        listeners: Vec<Endpoint>,
        #[serde(default)]
        rack: Option<String>,
    },
    UnregisterBroker {
        node_id: NodeId,
    },
    FenceBroker {
        node_id: NodeId,
        epoch: i64,
    },
    UnfenceBroker {
        node_id: NodeId,
        epoch: i64,
    },
    /// The broker asked for a controlled shutdown: it leads nothing from now on.
    BrokerShuttingDown {
        node_id: NodeId,
        epoch: i64,
    },
    Topic {
        name: String,
        id: Uuid,
    },
    Partition(PartitionRecord),
    PartitionChange(PartitionChange),
    RemoveTopic {
        id: Uuid,
    },
    /// Sets (`Some`) or removes (`None`) one config key of a resource.
    Config {
        resource: ConfigResource,
        key: String,
        value: Option<String>,
    },
    /// The next producer id block starts at `next` (the block before it went to `node_id`).
    ProducerIds {
        node_id: NodeId,
        next: i64,
    },
    FeatureLevel {
        name: String,
        level: i16,
    },
    /// Sets a user's SCRAM credential of one mechanism (Kafka's `UserScramCredentialRecord`).
    ScramCredential(ScramCredential),
    /// Removes a user's SCRAM credential of one mechanism.
    RemoveScramCredential {
        user: String,
        mechanism: i8,
    },
    /// An ACL binding (Kafka's `AccessControlEntryRecord`).
    Acl {
        id: Uuid,
        acl: crate::acl::Acl,
    },
    RemoveAcl {
        id: Uuid,
    },
}

/// A SCRAM credential: salt, stored key and server key of a salted password (never the
/// password). `mechanism` is Kafka's id (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub user: String,
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Cluster-wide config defaults keyed as Kafka's BROKER resource "".
pub type Configs = BTreeMap<String, String>;
