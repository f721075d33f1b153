//! A minimal Kafka admin client for the operator, on the kafka-protocol crate: the topic
//! operations a Topic resource needs (Metadata, CreateTopics, CreatePartitions, DeleteTopics,
//! DescribeConfigs, IncrementalAlterConfigs) and what a Cluster needs to restart and scale
//! safely (DescribeQuorum, where partitions live) and to move data when brokers come and go
//! (AlterPartitionReassignments, ListPartitionReassignments, per-broker throttle configs,
//! ElectLeaders, UnregisterBroker, DescribeLogDirs), one connection per reconcile, every call
//! bounded by a timeout. It speaks to brokers exactly as any Kafka admin client does.

mod users;
pub use users::AclBinding;

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::add_raft_voter_request::Listener as VoterListener;
use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_quorum_request::{PartitionData as QuorumPartition, TopicData as QuorumTopic};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AddRaftVoterRequest, AlterPartitionReassignmentsRequest, BrokerId, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeLogDirsRequest, DescribeQuorumRequest,
    ElectLeadersRequest, IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest, MetadataRequest,
    RemoveRaftVoterRequest, TopicName, UnregisterBrokerRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use oxbow_protocol::connection::{ClientSecurity, Connection, ConnectionError};

/// How long any one request may take, connect included.
const TIMEOUT: Duration = Duration::from_secs(15);
/// How long a voter change may take: a new voter first catches up as a learner (the broker
/// gives it 60 s).
const VOTER_CHANGE_TIMEOUT: Duration = Duration::from_secs(75);
/// Kafka's TOPIC resource type in config APIs.
const RESOURCE_TOPIC: i8 = 2;
/// Kafka's BROKER resource type in config APIs.
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs source of a config set on the topic itself.
const SOURCE_TOPIC: i8 = 1;

/// The metadata quorum, from DescribeQuorum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quorum {
    /// The active controller.
    pub leader: Option<i32>,
    pub high_watermark: i64,
    /// Each voter and its log end offset.
    pub voters: Vec<(i32, i64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// The broker could not be reached, did not answer in time, or answered something malformed.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    #[error("{addr}: malformed response: {reason}")]
    Protocol { addr: String, reason: String },
    /// The broker refused an operation with a Kafka error code.
    #[error("{operation} {topic}: error {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Refused { operation: &'static str, topic: String, code: i16, message: Option<String> },
}

/// What one IncrementalAlterConfigs must send to turn `have` into `want`: keys to set (new or
/// changed) and keys to delete (back to their default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigChanges {
    pub set: BTreeMap<String, String>,
    pub delete: Vec<String>,
}

impl ConfigChanges {
    pub fn between(want: &BTreeMap<String, String>, have: &BTreeMap<String, String>) -> ConfigChanges {
        ConfigChanges {
            set: want.iter().filter(|(k, v)| have.get(*k) != Some(*v)).map(|(k, v)| (k.clone(), v.clone())).collect(),
            delete: have.keys().filter(|k| !want.contains_key(*k)).cloned().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.delete.is_empty()
    }

    /// Every key that changes, set ones first.
    pub fn keys(self) -> Vec<String> {
        self.set.into_keys().chain(self.delete).collect()
    }
}

/// A replicated partition as the restart safety check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionIsr {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The topic's effective `min.insync.replicas`.
    pub min_insync: i32,
}

/// A partition as Metadata shows it (during a move, `replicas` is the target followed by the
/// replicas being removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub topic: String,
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A move in flight (ListPartitionReassignments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moving {
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

impl Moving {
    /// Where the partition is going: its replicas without the removing ones.
    pub fn target(&self) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| !self.removing.contains(r)).collect()
    }
}

/// A registered broker (DescribeCluster, fenced ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// A topic as the cluster has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    /// Kafka's display form (URL-safe base64, as `kafka-topics.sh` prints it).
    pub id: String,
    pub partitions: i32,
    pub replication_factor: i32,
}

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's TOPIC_ALREADY_EXISTS.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
/// Kafka's PREFERRED_LEADER_NOT_AVAILABLE.
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
/// Kafka's ELECTION_NOT_NEEDED.
pub const ELECTION_NOT_NEEDED: i16 = 84;

/// `Ok` for error code 0 (or one of `ok`), else the broker's refusal.
fn check(
    operation: &'static str,
    topic: &str,
    code: i16,
    message: Option<StrBytes>,
    ok: &[i16],
) -> Result<(), KafkaError> {
    if code == 0 || ok.contains(&code) {
        return Ok(());
    }
    Err(KafkaError::Refused { operation, topic: topic.into(), code, message: message.map(|m| m.to_string()) })
}

pub struct Admin {
    conn: Connection,
    /// TLS and login of the connection, for connections to other brokers of the cluster.
    security: ClientSecurity,
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl Admin {
    /// Connects to `addr` (`host:port`) as `security` says (TLS with the operator's
    /// certificate on a secured Cluster, clear text otherwise).
    pub async fn connect(addr: &str, security: &ClientSecurity) -> Result<Admin, KafkaError> {
        let conn = Connection::connect_secured(addr, "oxbow-operator", TIMEOUT, security).await?;
        Ok(Admin { conn, security: security.clone() })
    }

    /// Another connection, to `addr`, secured as this one.
    pub async fn sibling(&self, addr: &str) -> Result<Admin, KafkaError> {
        Admin::connect(addr, &self.security).await
    }

    fn protocol(&self, reason: impl std::fmt::Display) -> KafkaError {
        KafkaError::Protocol { addr: self.conn.addr().to_string(), reason: reason.to_string() }
    }

    async fn send<R: Request>(&mut self, version: i16, req: &R) -> Result<R::Response, KafkaError> {
        self.send_within(TIMEOUT, version, req).await
    }

    async fn send_within<R: Request>(
        &mut self,
        timeout: Duration,
        version: i16,
        req: &R,
    ) -> Result<R::Response, KafkaError> {
        Ok(self.conn.send(version, req, timeout).await?)
    }

    /// The metadata quorum as DescribeQuorum reports it (any broker forwards to the leader).
    pub async fn describe_quorum(&mut self) -> Result<Quorum, KafkaError> {
        let mut p = QuorumPartition::default();
        p.partition_index = 0;
        let mut t = QuorumTopic::default();
        t.topic_name = name("__cluster_metadata");
        t.partitions = vec![p];
        let mut req = DescribeQuorumRequest::default();
        req.topics = vec![t];
        let resp = self.send(1, &req).await?;
        check("describe quorum", "__cluster_metadata", resp.error_code, resp.error_message.clone(), &[])?;
        let p = resp
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| self.protocol("DescribeQuorum without a partition"))?;
        check("describe quorum", "__cluster_metadata", p.error_code, p.error_message.clone(), &[])?;
        Ok(Quorum {
            leader: Some(p.leader_id.0).filter(|l| *l >= 0),
            high_watermark: p.high_watermark,
            voters: p.current_voters.iter().map(|v| (v.replica_id.0, v.log_end_offset)).collect(),
        })
    }

    /// AddRaftVoter (KIP-853): makes node `id`, reachable at `host:port` on its CONTROLLER
    /// listener, a voter of the metadata quorum (a learner until it has caught up).
    pub async fn add_raft_voter(&mut self, cluster_id: &str, id: i32, host: &str, port: u16) -> Result<(), KafkaError> {
        let mut l = VoterListener::default();
        l.name = sb("CONTROLLER");
        l.host = sb(host);
        l.port = port;
        let mut req = AddRaftVoterRequest::default();
        req.cluster_id = Some(sb(cluster_id));
        req.timeout_ms = VOTER_CHANGE_TIMEOUT.as_millis() as i32;
        req.voter_id = id;
        req.listeners = vec![l];
        let resp = self.send_within(VOTER_CHANGE_TIMEOUT, 0, &req).await?;
        check("add voter", &format!("node {id}"), resp.error_code, resp.error_message, &[])
    }

    /// RemoveRaftVoter (KIP-853): node `id` stops being a voter of the metadata quorum.
    pub async fn remove_raft_voter(&mut self, cluster_id: &str, id: i32) -> Result<(), KafkaError> {
        let mut req = RemoveRaftVoterRequest::default();
        req.cluster_id = Some(sb(cluster_id));
        req.voter_id = id;
        let resp = self.send_within(VOTER_CHANGE_TIMEOUT, 0, &req).await?;
        check("remove voter", &format!("node {id}"), resp.error_code, resp.error_message, &[])
    }

    /// How many partition replicas each broker holds, over every topic.
    pub async fn replicas_per_broker(&mut self) -> Result<BTreeMap<i32, usize>, KafkaError> {
        let mut req = MetadataRequest::default();
        req.topics = None;
        req.allow_auto_topic_creation = false;
        let resp = self.send(12, &req).await?;
        let mut out: BTreeMap<i32, usize> = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                for r in &p.replica_nodes {
                    *out.entry(r.0).or_default() += 1;
                }
            }
        }
        Ok(out)
    }

    /// Every partition with its replicas, ISR and, for replicated ones (more than one replica),
    /// its topic's effective `min.insync.replicas` (1 for single-replica partitions, not asked),
    /// for the restart safety check.
    pub async fn partition_isrs(&mut self) -> Result<Vec<PartitionIsr>, KafkaError> {
        let mut req = MetadataRequest::default();
        req.topics = None;
        req.allow_auto_topic_creation = false;
        let resp = self.send(12, &req).await?;
        let mut out = Vec::new();
        let mut topics = Vec::new();
        for t in &resp.topics {
            let Some(topic) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
            let replicated = t.partitions.iter().any(|p| p.replica_nodes.len() > 1);
            for p in &t.partitions {
                out.push(PartitionIsr {
                    topic: topic.clone(),
                    partition: p.partition_index,
                    replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                    isr: p.isr_nodes.iter().map(|r| r.0).collect(),
                    min_insync: 1,
                });
            }
            if replicated {
                topics.push(topic);
            }
        }
        if topics.is_empty() {
            return Ok(out);
        }
        let mut req = DescribeConfigsRequest::default();
        req.resources = topics
            .iter()
            .map(|t| {
                let mut r = DescribeConfigsResource::default();
                r.resource_type = RESOURCE_TOPIC;
                r.resource_name = sb(t);
                r.configuration_keys = Some(vec![sb("min.insync.replicas")]);
                r
            })
            .collect();
        let resp = self.send(4, &req).await?;
        let mut min: BTreeMap<String, i32> = BTreeMap::new();
        for res in resp.results {
            check("describe configs of", &res.resource_name, res.error_code, res.error_message.clone(), &[])?;
            if let Some(v) =
                res.configs.iter().find(|c| c.name.as_str() == "min.insync.replicas").and_then(|c| c.value.as_ref())
            {
                min.insert(res.resource_name.to_string(), v.parse().unwrap_or(1));
            }
        }
        for p in &mut out {
            p.min_insync = min.get(&p.topic).copied().unwrap_or(1);
        }
        Ok(out)
    }

    /// Every partition with its leader, replicas (in order) and ISR.
    pub async fn partitions(&mut self) -> Result<Vec<PartitionInfo>, KafkaError> {
        let mut req = MetadataRequest::default();
        req.topics = None;
        req.allow_auto_topic_creation = false;
        let resp = self.send(12, &req).await?;
        let mut out = Vec::new();
        for t in resp.topics {
            let Some(topic) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
            for p in t.partitions {
                out.push(PartitionInfo {
                    topic: topic.clone(),
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                    isr: p.isr_nodes.iter().map(|r| r.0).collect(),
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// Every registered broker, fenced ones included (DescribeCluster v2).
    pub async fn brokers(&mut self) -> Result<Vec<BrokerInfo>, KafkaError> {
        let mut req = DescribeClusterRequest::default();
        req.include_fenced_brokers = true;
        let resp = self.send(2, &req).await?;
        check("describe cluster", "", resp.error_code, resp.error_message.clone(), &[])?;
        let mut out: Vec<BrokerInfo> = resp
            .brokers
            .iter()
            .map(|b| BrokerInfo {
                id: b.broker_id.0,
                rack: b.rack.as_ref().map(|r| r.to_string()),
                fenced: b.is_fenced,
            })
            .collect();
        out.sort_by_key(|b| b.id);
        Ok(out)
    }

    /// The moves in flight, by partition.
    pub async fn reassignments(&mut self) -> Result<BTreeMap<(String, i32), Moving>, KafkaError> {
        let mut req = ListPartitionReassignmentsRequest::default();
        req.topics = None;
        req.timeout_ms = 30_000;
        let resp = self.send(0, &req).await?;
        check("list reassignments", "", resp.error_code, resp.error_message.clone(), &[])?;
        let mut out = BTreeMap::new();
        for t in resp.topics {
            for p in t.partitions {
                let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
                out.insert(
                    (t.name.0.to_string(), p.partition_index),
                    Moving {
                        replicas: ids(&p.replicas),
                        adding: ids(&p.adding_replicas),
                        removing: ids(&p.removing_replicas),
                    },
                );
            }
        }
        Ok(out)
    }

    /// Starts (or, with `None`, cancels) moves; a partition the cluster refuses fails the call
    /// with its error (the others still take effect, as in Kafka).
    pub async fn reassign(&mut self, moves: &[(String, i32, Option<Vec<i32>>)]) -> Result<(), KafkaError> {
        let mut topics: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
        for (t, p, to) in moves {
            let mut rp = ReassignablePartition::default();
            rp.partition_index = *p;
            rp.replicas = to.as_ref().map(|r| r.iter().map(|b| BrokerId(*b)).collect());
            topics.entry(t.as_str()).or_default().push(rp);
        }
        let mut req = AlterPartitionReassignmentsRequest::default();
        req.timeout_ms = 30_000;
        // KIP-860: a move never changes a partition's replication factor. The operator reads
        // partitions and moves in flight one after the other, and a move that completes
        // between the two reads leaves it a stale replica list (target + removing): planned
        // from that, a move would keep the extra replica for good. The controller refuses it
        // (INVALID_REPLICATION_FACTOR) and the next step plans from a fresh read.
        req.allow_replication_factor_change = false;
        req.topics = topics
            .into_iter()
            .map(|(t, partitions)| {
                let mut rt = ReassignableTopic::default();
                rt.name = name(t);
                rt.partitions = partitions;
                rt
            })
            .collect();
        let resp = self.send(1, &req).await?;
        check("reassign", "", resp.error_code, resp.error_message.clone(), &[])?;
        for t in resp.responses {
            for p in t.partitions {
                check(
                    "reassign",
                    &format!("{}-{}", t.name.0.as_str(), p.partition_index),
                    p.error_code,
                    p.error_message,
                    &[],
                )?;
            }
        }
        Ok(())
    }

    /// Preferred leader elections for `partitions` (ELECTION_NOT_NEEDED and
    /// PREFERRED_LEADER_NOT_AVAILABLE are not errors: nothing to do, or not yet).
    pub async fn elect_preferred(&mut self, partitions: &[(String, i32)]) -> Result<(), KafkaError> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let mut req = ElectLeadersRequest::default();
        req.election_type = 0;
        req.timeout_ms = 30_000;
        req.topic_partitions = Some(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    let mut tp = TopicPartitions::default();
                    tp.topic = name(t);
                    tp.partitions = ps;
                    tp
                })
                .collect(),
        );
        let resp = self.send(2, &req).await?;
        check("elect leaders", "", resp.error_code, None, &[])?;
        for r in resp.replica_election_results {
            for p in r.partition_result {
                let what = format!("{}-{}", r.topic.0.as_str(), p.partition_id);
                check(
                    "elect leader of",
                    &what,
                    p.error_code,
                    p.error_message,
                    &[ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE],
                )?;
            }
        }
        Ok(())
    }

    /// UnregisterBroker: broker `id` leaves the cluster's metadata for good.
    pub async fn unregister_broker(&mut self, id: i32) -> Result<(), KafkaError> {
        let mut req = UnregisterBrokerRequest::default();
        req.broker_id = BrokerId(id);
        let resp = self.send(0, &req).await?;
        check("unregister broker", &id.to_string(), resp.error_code, resp.error_message, &[])
    }

    /// Sizes in bytes of the partitions in the connected broker's log dirs (DescribeLogDirs).
    pub async fn log_sizes(&mut self) -> Result<BTreeMap<(String, i32), i64>, KafkaError> {
        let mut req = DescribeLogDirsRequest::default();
        req.topics = None;
        let resp = self.send(1, &req).await?;
        check("describe log dirs", "", resp.error_code, None, &[])?;
        let mut out = BTreeMap::new();
        for d in resp.results {
            for t in d.topics {
                for p in t.partitions {
                    out.insert((t.name.0.to_string(), p.partition_index), p.partition_size);
                }
            }
        }
        Ok(out)
    }

    /// Sets `set` and removes `delete` of broker `id`'s own dynamic configs. Kafka takes these
    /// only from that broker itself: connect to it.
    pub async fn alter_own_broker_configs(
        &mut self,
        id: i32,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), KafkaError> {
        self.alter_configs(RESOURCE_BROKER, &id.to_string(), set, delete).await
    }

    /// The topic, or `None` if the cluster does not have it.
    pub async fn describe_topic(&mut self, topic: &str) -> Result<Option<TopicInfo>, KafkaError> {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(name(topic));
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![t]);
        req.allow_auto_topic_creation = false;
        let resp = self.send(12, &req).await?;
        let Some(t) = resp.topics.into_iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic)) else {
            return Ok(None);
        };
        match t.error_code {
            0 => {}
            UNKNOWN_TOPIC_OR_PARTITION => return Ok(None),
            code => {
                return Err(KafkaError::Refused { operation: "describe", topic: topic.into(), code, message: None });
            }
        }
        let rf = t.partitions.iter().map(|p| p.replica_nodes.len() as i32).max().unwrap_or(0);
        Ok(Some(TopicInfo {
            id: oxbow_protocol::ids::to_kafka_string(t.topic_id),
            partitions: t.partitions.len() as i32,
            replication_factor: rf,
        }))
    }

    pub async fn create_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), KafkaError> {
        let mut t = CreatableTopic::default();
        t.name = name(topic);
        t.num_partitions = partitions;
        t.replication_factor = replication_factor;
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = CreatableTopicConfig::default();
                c.name = sb(k);
                c.value = Some(sb(v));
                c
            })
            .collect();
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp = self.send(7, &req).await?;
        for r in resp.topics {
            check("create", topic, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }

    pub async fn create_partitions(&mut self, topic: &str, count: i32) -> Result<(), KafkaError> {
        let mut t = CreatePartitionsTopic::default();
        t.name = name(topic);
        t.count = count;
        // Null: the cluster places the new partitions (an empty list would mean zero placements).
        t.assignments = None;
        let mut req = CreatePartitionsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp = self.send(3, &req).await?;
        for r in resp.results {
            check("grow", topic, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }

    /// Deletes the topic; a topic that does not exist counts as deleted.
    pub async fn delete_topic(&mut self, topic: &str) -> Result<(), KafkaError> {
        let mut t = DeleteTopicState::default();
        t.name = Some(name(topic));
        let mut req = DeleteTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp = self.send(6, &req).await?;
        for r in resp.responses {
            check("delete", topic, r.error_code, r.error_message, &[UNKNOWN_TOPIC_OR_PARTITION])?;
        }
        Ok(())
    }

    /// The configs set on the topic itself (not broker defaults).
    pub async fn topic_configs(&mut self, topic: &str) -> Result<BTreeMap<String, String>, KafkaError> {
        let mut r = DescribeConfigsResource::default();
        r.resource_type = RESOURCE_TOPIC;
        r.resource_name = sb(topic);
        r.configuration_keys = None;
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![r];
        let resp = self.send(4, &req).await?;
        let mut out = BTreeMap::new();
        for res in resp.results {
            check("describe configs of", topic, res.error_code, res.error_message, &[])?;
            for c in res.configs {
                if c.config_source == SOURCE_TOPIC {
                    out.insert(c.name.to_string(), c.value.map(|v| v.to_string()).unwrap_or_default());
                }
            }
        }
        Ok(out)
    }

    /// Configs of a BROKER resource: `""` is the cluster-wide default (its dynamic configs only),
    /// a node id the broker's every key. Returns (name, value, read-only) triples.
    pub async fn broker_configs(&mut self, resource: &str) -> Result<Vec<(String, String, bool)>, KafkaError> {
        let mut r = DescribeConfigsResource::default();
        r.resource_type = RESOURCE_BROKER;
        r.resource_name = sb(resource);
        r.configuration_keys = None;
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![r];
        let resp = self.send(4, &req).await?;
        let mut out = Vec::new();
        for res in resp.results {
            check("describe configs of broker", resource, res.error_code, res.error_message, &[])?;
            for c in res.configs {
                out.push((c.name.to_string(), c.value.map(|v| v.to_string()).unwrap_or_default(), c.read_only));
            }
        }
        Ok(out)
    }

    /// Sets `set` and removes `delete` of the cluster-wide dynamic broker configs.
    pub async fn alter_broker_defaults(
        &mut self,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), KafkaError> {
        self.alter_configs(RESOURCE_BROKER, "", set, delete).await
    }

    /// Sets `set` and removes `delete` (back to the broker default) in one request.
    pub async fn alter_topic_configs(
        &mut self,
        topic: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), KafkaError> {
        self.alter_configs(RESOURCE_TOPIC, topic, set, delete).await
    }

    async fn alter_configs(
        &mut self,
        resource_type: i8,
        topic: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), KafkaError> {
        // IncrementalAlterConfigs operations: SET=0, DELETE=1.
        let mut configs: Vec<AlterableConfig> = set
            .iter()
            .map(|(k, v)| {
                let mut c = AlterableConfig::default();
                c.name = sb(k);
                c.config_operation = 0;
                c.value = Some(sb(v));
                c
            })
            .collect();
        configs.extend(delete.iter().map(|k| {
            let mut c = AlterableConfig::default();
            c.name = sb(k);
            c.config_operation = 1;
            c.value = None;
            c
        }));
        let mut r = AlterConfigsResource::default();
        r.resource_type = resource_type;
        r.resource_name = sb(topic);
        r.configs = configs;
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![r];
        let resp = self.send(1, &req).await?;
        for r in resp.responses {
            check("alter configs of", topic, r.error_code, r.error_message, &[])?;
        }
        Ok(())
    }
}
