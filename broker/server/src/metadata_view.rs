//! The metadata view (Kafka's `KRaftMetadataCache`): the image this broker last applied and the
//! topics it derived from it, with the partitions hosted here. Read on every request, written
//! only by the image applier (`Broker::apply_image`), which replaces whole snapshots: readers
//! take a short read lock and clone an `Arc`, never wait for the applier's work.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use oxbow_log::LogConfig;
use oxbow_meta::MetadataImage;
use oxbow_meta::records::PartitionRecord;
use parking_lot::RwLock;
use tokio::sync::watch;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::errors::BrokerError;
use crate::metadata::TopicMeta;
use crate::partition::Partition;
use crate::stats::TopicCounters;
use crate::topic_config;

/// Whether this broker may act as a leader: it must have heard "unfenced" from the active
/// controller within its session timeout. A broker cut off from the quorum has probably been
/// fenced and replaced as leader; it stops serving as one (NOT_LEADER_OR_FOLLOWER) rather than
/// accept writes nobody will read.
#[derive(Debug)]
pub struct Liveness {
    last_unfenced_ms: AtomicI64,
    session_ms: i64,
}

impl Liveness {
    pub fn new(session_ms: u64) -> Self {
        Self { last_unfenced_ms: AtomicI64::new(0), session_ms: i64::try_from(session_ms).unwrap_or(i64::MAX) }
    }

    /// Records a heartbeat reply.
    pub fn heard(&self, fenced: bool) {
        self.last_unfenced_ms.store(if fenced { 0 } else { now_ms() }, Ordering::Relaxed);
    }

    pub fn is_fenced(&self) -> bool {
        now_ms().saturating_sub(self.last_unfenced_ms.load(Ordering::Relaxed)) > self.session_ms
    }
}

/// A topic as this broker knows it from the metadata image, with the partitions it hosts.
pub struct Topic {
    pub meta: TopicMeta,
    /// Leader, epochs, replicas and ISR of every partition, by index (from the image).
    pub states: Vec<PartitionRecord>,
    /// The partitions hosted on this broker, by index (`None`: hosted elsewhere).
    local: Vec<Option<Arc<Partition>>>,
    /// This broker's node id.
    node: i32,
    liveness: Arc<Liveness>,
    /// The topic's configs over the broker's defaults, resolved once per change (not per request).
    /// Shared with the topic's logs.
    pub log_config: Arc<LogConfig>,
    pub min_insync: i32,
    /// Partitions whose replication this broker throttles as their leader
    /// (`leader.replication.throttled.replicas`) and as their follower
    /// (`follower.replication.throttled.replicas`).
    pub leader_throttled: topic_config::Throttled,
    pub follower_throttled: topic_config::Throttled,
    /// This topic's traffic here (the metrics' per-topic families).
    pub counters: Arc<TopicCounters>,
}

impl Topic {
    /// A topic whose settings are its configs over `defaults`.
    pub(crate) fn new(
        meta: TopicMeta,
        states: Vec<PartitionRecord>,
        local: Vec<Option<Arc<Partition>>>,
        node: i32,
        liveness: Arc<Liveness>,
        defaults: &BrokerConfig,
        counters: Arc<TopicCounters>,
    ) -> Topic {
        let log_config = Arc::new(topic_config::resolve(defaults, &meta.configs));
        let min_insync = topic_config::min_insync(defaults, &meta.configs);
        let throttled = |key| topic_config::Throttled::of(&meta.configs, key, node);
        let leader_throttled = throttled("leader.replication.throttled.replicas");
        let follower_throttled = throttled("follower.replication.throttled.replicas");
        Topic {
            meta,
            states,
            local,
            node,
            liveness,
            log_config,
            min_insync,
            leader_throttled,
            follower_throttled,
            counters,
        }
    }

    /// Whether broker `replica` is in partition `i`'s ISR, as the image has it.
    pub fn in_sync(&self, i: i32, replica: i32) -> bool {
        usize::try_from(i).ok().and_then(|i| self.states.get(i)).is_some_and(|s| s.isr.contains(&replica))
    }

    /// Partition `i` if this broker hosts it (leading it or not).
    pub fn partition(&self, i: i32) -> Option<&Arc<Partition>> {
        usize::try_from(i).ok().and_then(|i| self.local.get(i)).and_then(Option::as_ref)
    }

    /// Partition `i` if this broker leads it: UNKNOWN_TOPIC_OR_PARTITION for a partition the
    /// topic does not have, NOT_LEADER_OR_FOLLOWER for one led elsewhere (or by nobody), and
    /// for any while this broker is not confirmed unfenced ([`BrokerError::SelfFenced`]).
    pub fn led(&self, i: i32) -> Result<&Arc<Partition>, BrokerError> {
        let state = usize::try_from(i)
            .ok()
            .and_then(|i| self.states.get(i))
            .ok_or_else(|| BrokerError::UnknownTopic(format!("topic {} has no partition {i}", self.meta.name)))?;
        if self.liveness.is_fenced() {
            return Err(BrokerError::SelfFenced(format!(
                "broker {} has not been confirmed unfenced by the active controller within its session timeout",
                self.node
            )));
        }
        match self.partition(i) {
            Some(p) if state.leader == self.node => Ok(p),
            _ => Err(BrokerError::not_leader(self.node, &self.meta.name, i, state.leader)),
        }
    }

    /// The partitions hosted here.
    pub fn hosted(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.local.iter().flatten()
    }
}

/// The topics of one image, by name and by id.
#[derive(Default, Clone)]
pub(crate) struct Topics {
    pub by_name: BTreeMap<String, Arc<Topic>>,
    pub by_id: HashMap<Uuid, String>,
}

impl Topics {
    /// This broker's state of the topic `t` of a new image (same name and id), and whether it
    /// stays as it is: nothing about the topic changed, nor the broker-wide defaults.
    pub fn previous(&self, t: &oxbow_meta::image::TopicImage, defaults_changed: bool) -> (Option<&Arc<Topic>>, bool) {
        let existing = self.by_name.get(&t.name).filter(|e| e.meta.id == t.id);
        let unchanged =
            existing.is_some_and(|e| e.states == t.partitions && e.meta.configs == t.configs && !defaults_changed);
        (existing, unchanged)
    }
}

pub struct MetadataView {
    /// The image the local state reflects, and its version for waiters.
    image: RwLock<Arc<MetadataImage>>,
    applied: watch::Sender<u64>,
    topics: RwLock<Topics>,
    /// The static configuration with the cluster-wide and this node's dynamic broker configs
    /// over it: what topic configs default to.
    topic_defaults: RwLock<Arc<BrokerConfig>>,
}

impl MetadataView {
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            image: RwLock::new(Arc::new(MetadataImage::default())),
            applied: watch::channel(0).0,
            topics: RwLock::new(Topics::default()),
            topic_defaults: RwLock::new(Arc::new(config.clone())),
        }
    }

    /// The metadata image this broker's state reflects.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().clone()
    }

    /// Subscribes to the version of the metadata image this broker has applied.
    pub fn subscribe_applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().by_name.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        let t = self.topics.read();
        t.by_id.get(&id).and_then(|n| t.by_name.get(n)).cloned()
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.read().by_name.values().cloned().collect()
    }

    /// Every partition hosted on this broker.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics.read().by_name.values().flat_map(|t| t.hosted().cloned().collect::<Vec<_>>()).collect()
    }

    /// `host:port` of a registered broker's inter-broker listener, from the image.
    pub fn broker_address(&self, node: i32) -> Option<String> {
        let image = self.image();
        let name = self.topic_defaults.read().security.inter_broker_listener.clone()?;
        let l = image.brokers.get(&node)?.endpoint(&name)?.clone();
        Some(format!("{}:{}", l.host, l.port))
    }

    /// What topic configs default to: the static config with the dynamic broker configs over it.
    pub fn topic_defaults(&self) -> Arc<BrokerConfig> {
        self.topic_defaults.read().clone()
    }

    /// The dynamic broker configs: cluster-wide (`node: None`) or node `n`'s own.
    pub fn dynamic_broker_configs(&self, node: Option<i32>) -> BTreeMap<String, String> {
        let image = self.image();
        match node {
            None => image.cluster_configs.clone(),
            Some(n) => image.node_configs.get(&n).cloned().unwrap_or_default(),
        }
    }

    /// The applier's side: the current topics, to derive the next ones from.
    pub(crate) fn topics(&self) -> Topics {
        self.topics.read().clone()
    }

    pub(crate) fn set_topic_defaults(&self, defaults: Arc<BrokerConfig>) {
        *self.topic_defaults.write() = defaults;
    }

    /// The applier's side: publishes the topics derived from `img`, then `img` itself and its
    /// version (waking [`Self::subscribe_applied`] waiters).
    pub(crate) fn publish(&self, topics: Topics, img: &Arc<MetadataImage>) {
        *self.topics.write() = topics;
        *self.image.write() = img.clone();
        self.applied.send_replace(img.version);
    }
}
