//! The metadata image: everything the cluster knows, as of one offset of the metadata log.
//!
//! [`MetadataImage::apply`] is the state machine of the metadata log: records in, image out, no
//! I/O and no decisions (those are [`crate::controller`]'s). Every node that applies the same
//! records in the same order holds the same image; its `version` is the log index of the last
//! record applied, so a reader can tell which of two images is newer.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::records::{
    ConfigResource, Configs, Endpoint, NodeId, PartitionChange, PartitionRecord, Record, ScramCredential,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub node_id: NodeId,
    pub incarnation_id: Uuid,
    /// The log index of the registration: changes with every restart of the broker.
    pub epoch: i64,
    pub listeners: Vec<Endpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// The broker's endpoint on listener `name` (clients are answered with the endpoints of the
    /// listener they came in on, as Kafka).
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.listeners.iter().find(|l| l.name == name)
    }

    /// Alive for leadership: registered, unfenced and not shutting down.
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionRecord>,
    pub configs: Configs,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataImage {
    /// Log index of the last record applied (0: nothing yet).
    pub version: u64,
    pub brokers: BTreeMap<NodeId, BrokerRegistration>,
    pub topics: BTreeMap<String, TopicImage>,
    #[serde(skip)]
    topic_names: HashMap<Uuid, String>,
    /// Cluster-wide broker configs (resource "") and per-broker ones.
    pub cluster_configs: Configs,
    pub node_configs: BTreeMap<NodeId, Configs>,
    /// Start of the next unallocated producer id block.
    pub next_producer_id: i64,
    pub features: BTreeMap<String, i16>,
    /// SCRAM credentials by user, then mechanism id.
    #[serde(default)]
    pub scram: BTreeMap<String, BTreeMap<i8, ScramCredential>>,
    /// ACL bindings by id.
    #[serde(default)]
    pub acls: crate::acl::Acls,
    /// Bumped by every ACL change, so an authorizer rebuilds its index only then.
    #[serde(default)]
    pub acl_version: u64,
}

impl MetadataImage {
    /// Rebuilds the indexes that are not serialized (after loading a snapshot).
    pub fn reindex(&mut self) {
        self.topic_names = self.topics.values().map(|t| (t.id, t.name.clone())).collect();
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topic_names.get(&id).and_then(|n| self.topics.get(n))
    }

    /// Registered brokers that are unfenced and not shutting down.
    pub fn active_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_active())
    }

    pub fn is_active(&self, node: NodeId) -> bool {
        self.brokers.get(&node).is_some_and(BrokerRegistration::is_active)
    }

    /// Applies one record written at log index `index`.
    pub fn apply(&mut self, index: u64, record: &Record) {
        self.version = self.version.max(index);
        match record {
            Record::RegisterBroker { node_id, incarnation_id, listeners, rack } => {
                self.brokers.insert(
                    *node_id,
                    BrokerRegistration {
                        node_id: *node_id,
                        incarnation_id: *incarnation_id,
                        epoch: index as i64,
                        listeners: listeners.clone(),
                        rack: rack.clone(),
                        fenced: true,
                        in_controlled_shutdown: false,
                    },
                );
            }
            Record::UnregisterBroker { node_id } => {
                self.brokers.remove(node_id);
            }
            Record::FenceBroker { node_id, epoch } => self.with_broker(*node_id, *epoch, |b| b.fenced = true),
            Record::UnfenceBroker { node_id, epoch } => self.with_broker(*node_id, *epoch, |b| {
                b.fenced = false;
                b.in_controlled_shutdown = false;
            }),
            Record::BrokerShuttingDown { node_id, epoch } => {
                self.with_broker(*node_id, *epoch, |b| b.in_controlled_shutdown = true)
            }
            Record::Topic { name, id } => {
                self.topic_names.insert(*id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage { name: name.clone(), id: *id, partitions: Vec::new(), configs: Configs::new() },
                );
            }
            Record::Partition(p) => {
                if let Some(t) = self.topic_by_id_mut(p.topic_id) {
                    let i = p.partition as usize;
                    if i < t.partitions.len() {
                        t.partitions[i] = p.clone();
                    } else if i == t.partitions.len() {
                        t.partitions.push(p.clone());
                    }
                }
            }
            Record::PartitionChange(c) => self.change_partition(c),
            Record::RemoveTopic { id } => {
                if let Some(name) = self.topic_names.remove(id) {
                    self.topics.remove(&name);
                }
            }
            Record::Config { resource, key, value } => {
                let configs = match resource {
                    ConfigResource::Topic(name) => match self.topics.get_mut(name) {
                        Some(t) => &mut t.configs,
                        None => return,
                    },
                    ConfigResource::Broker(None) => &mut self.cluster_configs,
                    ConfigResource::Broker(Some(n)) => self.node_configs.entry(*n).or_default(),
                };
                match value {
                    Some(v) => configs.insert(key.clone(), v.clone()),
                    None => configs.remove(key),
                };
            }
            Record::ProducerIds { next, .. } => self.next_producer_id = self.next_producer_id.max(*next),
            Record::FeatureLevel { name, level } => {
                self.features.insert(name.clone(), *level);
            }
            Record::ScramCredential(c) => {
                self.scram.entry(c.user.clone()).or_default().insert(c.mechanism, c.clone());
            }
            Record::Acl { id, acl } => {
                self.acls.insert(*id, acl.clone());
                self.acl_version += 1;
            }
            Record::RemoveAcl { id } => {
                if self.acls.remove(id).is_some() {
                    self.acl_version += 1;
                }
            }
            Record::RemoveScramCredential { user, mechanism } => {
                if let Some(m) = self.scram.get_mut(user) {
                    m.remove(mechanism);
                    if m.is_empty() {
                        self.scram.remove(user);
                    }
                }
            }
        }
    }

    fn with_broker(&mut self, node: NodeId, epoch: i64, f: impl FnOnce(&mut BrokerRegistration)) {
        // A record for an older registration of the node is stale: ignore it.
        if let Some(b) = self.brokers.get_mut(&node).filter(|b| b.epoch == epoch) {
            f(b)
        }
    }

    fn topic_by_id_mut(&mut self, id: Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names.get(&id)?;
        self.topics.get_mut(name)
    }

    fn change_partition(&mut self, c: &PartitionChange) {
        if let Some(p) = self.topic_by_id_mut(c.topic_id).and_then(|t| t.partitions.get_mut(c.partition as usize)) {
            apply_change(p, c);
        }
    }
}

/// Applies one partition change (as Kafka's `PartitionRegistration.merge`): fields it sets
/// replace the partition's; a leader set, even to the current one, is a new leader epoch; the
/// partition epoch moves with every change.
pub fn apply_change(p: &mut PartitionRecord, c: &PartitionChange) {
    if let Some(leader) = c.leader {
        p.leader = leader;
        p.leader_epoch += 1;
    }
    if let Some(isr) = &c.isr {
        p.isr = isr.clone();
    }
    if let Some(replicas) = &c.replicas {
        p.replicas = replicas.clone();
    }
    if let Some(adding) = &c.adding {
        p.adding = adding.clone();
    }
    if let Some(removing) = &c.removing {
        p.removing = removing.clone();
    }
    p.partition_epoch += 1;
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn endpoint(port: u16) -> Endpoint {
        Endpoint { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port, security_protocol: "PLAINTEXT".into() }
    }

    #[test]
    fn broker_lifecycle_follows_epochs() {
        let mut img = MetadataImage::default();
        let inc = Uuid::new_v4();
        img.apply(
            5,
            &Record::RegisterBroker { node_id: 1, incarnation_id: inc, listeners: vec![endpoint(9092)], rack: None },
        );
        assert_eq!(img.brokers[&1].epoch, 5);
        assert!(img.brokers[&1].fenced, "a new registration starts fenced");
        img.apply(6, &Record::UnfenceBroker { node_id: 1, epoch: 5 });
        assert!(img.is_active(1));
        // A fence for an older registration is ignored.
        img.apply(7, &Record::FenceBroker { node_id: 1, epoch: 2 });
        assert!(img.is_active(1));
        img.apply(8, &Record::BrokerShuttingDown { node_id: 1, epoch: 5 });
        assert!(!img.is_active(1));
        img.apply(9, &Record::FenceBroker { node_id: 1, epoch: 5 });
        assert!(img.brokers[&1].fenced);
        assert_eq!(img.version, 9);
    }

    #[test]
    fn topics_partitions_and_changes() {
        let mut img = MetadataImage::default();
        let id = Uuid::new_v4();
        img.apply(1, &Record::Topic { name: "t".into(), id });
        for p in 0..2 {
            img.apply(
                2,
                &Record::Partition(PartitionRecord {
                    topic_id: id,
                    partition: p,
                    replicas: vec![1, 2],
                    isr: vec![1, 2],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding: vec![],
                    removing: vec![],
                }),
            );
        }
        img.apply(
            3,
            &Record::Config {
                resource: ConfigResource::Topic("t".into()),
                key: "retention.ms".into(),
                value: Some("1".into()),
            },
        );
        img.apply(
            4,
            &Record::PartitionChange(PartitionChange {
                topic_id: id,
                partition: 1,
                leader: Some(2),
                isr: Some(vec![2]),
                replicas: None,
                adding: None,
                removing: None,
            }),
        );
        let t = img.topic_by_id(id).expect("topic");
        assert_eq!(t.partitions.len(), 2);
        assert_eq!((t.partitions[1].leader, t.partitions[1].leader_epoch, t.partitions[1].partition_epoch), (2, 1, 1));
        assert_eq!(t.partitions[1].isr, vec![2]);
        assert_eq!((t.partitions[0].leader, t.partitions[0].leader_epoch), (1, 0));
        assert_eq!(t.configs["retention.ms"], "1");
        // An ISR-only change bumps the partition epoch, not the leader epoch.
        img.apply(
            5,
            &Record::PartitionChange(PartitionChange {
                topic_id: id,
                partition: 1,
                leader: None,
                isr: Some(vec![2, 1]),
                replicas: None,
                adding: None,
                removing: None,
            }),
        );
        let p = &img.topic("t").expect("t").partitions[1];
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        img.apply(6, &Record::RemoveTopic { id });
        assert!(img.topic("t").is_none() && img.topic_by_id(id).is_none());
    }

    #[test]
    fn snapshot_roundtrip_keeps_indexes() {
        let mut img = MetadataImage::default();
        let id = Uuid::new_v4();
        img.apply(1, &Record::Topic { name: "t".into(), id });
        img.apply(
            2,
            &Record::Config { resource: ConfigResource::Broker(None), key: "k".into(), value: Some("v".into()) },
        );
        img.apply(3, &Record::ProducerIds { node_id: 1, next: 1000 });
        let mut back: MetadataImage =
            serde_json::from_slice(&serde_json::to_vec(&img).expect("encode")).expect("decode");
        back.reindex();
        assert_eq!(back, img);
        assert_eq!(back.topic_by_id(id).map(|t| t.name.as_str()), Some("t"));
    }
}
