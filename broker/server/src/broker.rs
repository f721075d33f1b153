//! The broker: the parts of a broker node composed, and the operations that need more than one
//! of them. Each part has one job, as Kafka's server is split:
//!
//! - [`MetadataView`] (Kafka's metadata cache): the applied image and the topics derived from it;
//! - [`LogManager`]: the log dirs, opening and recovering logs, checkpoints;
//! - [`ControllerClient`]: commands to the active controller, the broker epoch, producer ids;
//! - the partitions themselves ([`crate::partition`]), with their ISR changes queued for the
//!   controller in [`IsrChanges`] and their followers in [`crate::replication`];
//! - the group coordinator ([`crate::coordinator`]), the replication quotas and the counters.
//!
//! [`Broker::apply_image`] is the image applier (Kafka's `BrokerMetadataPublisher`): it turns
//! each committed image into local state. Metadata changes (create, delete, grow, reconfigure)
//! go to the active controller as commands; this broker acts on them when the committed image
//! reaches it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use oxbow_meta::records::Endpoint;
use oxbow_meta::{Command, MetadataImage, Quorum, Reply};
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::{BrokerConfig, Listener};
use crate::controller_client::ControllerClient;
use crate::errors::BrokerError;
use crate::isr::IsrChanges;
use crate::log_manager::{LogManager, OpenJob, StartupError};
use crate::metadata::TopicMeta;
use crate::metadata_view::{Liveness, MetadataView, Topics};
use crate::partition::{IsrChange, Partition};
use crate::replica::ReplicaState;
use crate::topic_config;

pub use crate::metadata_view::Topic;

pub struct Broker {
    /// The static configuration (file and command line).
    pub config: BrokerConfig,
    pub cluster_id: String,
    /// Identifies this run of the broker in its registration.
    pub incarnation_id: Uuid,
    /// The listener clients are told about (with the real port if `listeners` said 0).
    /// One per client listener, ports filled in once bound.
    advertised: RwLock<Vec<Listener>>,
    pub view: Arc<MetadataView>,
    pub logs: LogManager,
    pub controller: ControllerClient,
    /// Serializes [`Self::apply_image`].
    apply_lock: Mutex<()>,
    /// Held while an internal topic is created.
    creating_internal: tokio::sync::Mutex<()>,
    pub liveness: Arc<Liveness>,
    /// The consumer group coordinator.
    pub groups: Arc<crate::coordinator::Coordinator>,
    /// The transaction coordinator.
    pub txns: Arc<crate::txn_coordinator::TxnCoordinator>,
    /// Requests to other brokers (transaction markers, verification).
    pub peers: Arc<crate::peers::Peers>,
    /// Request-path counters for the metrics.
    pub stats: crate::stats::Stats,
    /// Consumer lag of the groups coordinated here, as of the last round ([`crate::lag`]).
    pub lag: crate::stats::LagBoard,
    /// ACLs, super users (`authorizer.class.name`); every handler asks it through `handlers::access`.
    pub authorizer: crate::security::authorizer::Authorizer,
    /// The replication throttles (`*.replication.throttled.rate`).
    pub quotas: crate::quota::Quotas,
    /// Followers' incremental fetch sessions with this broker as their leader.
    pub fetch_sessions: crate::fetch_session::FetchSessions,
    /// ISR changes on their way to the active controller (sent by [`crate::isr::run`]).
    pub isr_changes: IsrChanges,
}

/// `config` with dynamic broker keys over its explicit settings: the cluster-wide ones, then
/// this broker's own over those (Kafka's precedence).
fn with_dynamic(
    config: &BrokerConfig,
    cluster: &BTreeMap<String, String>,
    node: Option<&BTreeMap<String, String>>,
) -> Result<BrokerConfig, crate::ConfigError> {
    if cluster.is_empty() && node.is_none_or(BTreeMap::is_empty) {
        return Ok(config.clone());
    }
    let mut explicit = config.explicit.clone();
    explicit.extend(cluster.iter().chain(node.into_iter().flatten()).map(|(k, v)| (k.clone(), v.clone())));
    BrokerConfig::from_map(explicit)
}

/// What the broker keeps of a topic of the metadata image.
fn topic_meta(t: &oxbow_meta::image::TopicImage) -> TopicMeta {
    TopicMeta { name: t.name.clone(), id: t.id, partitions: t.partitions.len() as i32, configs: t.configs.clone() }
}

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let bad = |why: &str| Err(BrokerError::InvalidTopic(format!("topic name {name:?} is invalid: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > 249 {
        return bad("longer than 249 characters");
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')) {
        return bad("only ASCII alphanumerics, '.', '_' and '-' are allowed");
    }
    Ok(())
}

impl Broker {
    /// Opens the broker's storage and composes its parts; partitions are opened when the
    /// metadata image names them.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartupError> {
        let (logs, cluster_id) = LogManager::open(&config)?;
        let view = Arc::new(MetadataView::new(&config));
        let controller = ControllerClient::new(config.node_id, view.subscribe_applied());
        let peers = Arc::new(crate::peers::Peers::new(
            config.node_id,
            view.clone(),
            config.security.inter_broker_client.clone(),
        ));
        Ok(Arc::new(Self {
            txns: Arc::new(crate::txn_coordinator::TxnCoordinator::new(
                config.transactions,
                view.clone(),
                peers.clone(),
            )),
            peers,
            quotas: crate::quota::Quotas::new(&config),
            fetch_sessions: crate::fetch_session::FetchSessions::new(config.fetch_session_slots),
            isr_changes: IsrChanges::default(),
            groups: Arc::new(crate::coordinator::Coordinator::new(config.groups.clone())),
            liveness: Arc::new(Liveness::new(config.session_timeout_ms)),
            advertised: RwLock::new(config.advertised_listeners.clone()),
            cluster_id,
            incarnation_id: Uuid::new_v4(),
            view,
            logs,
            controller,
            apply_lock: Mutex::new(()),
            creating_internal: tokio::sync::Mutex::new(()),
            stats: crate::stats::Stats::default(),
            lag: crate::stats::LagBoard::default(),
            authorizer: crate::security::authorizer::Authorizer::new(&config),
            config,
        }))
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn advertised(&self) -> Vec<Listener> {
        self.advertised.read().clone()
    }

    /// Called once a listener is bound, so port 0 is advertised as the real port.
    pub fn set_bound_port(&self, listener: &str, port: u16) {
        for a in self.advertised.write().iter_mut().filter(|a| a.name == listener && a.port == 0) {
            a.port = port;
        }
    }

    // Shorthands for the metadata view and the controller client, used on every request.

    pub fn image(&self) -> Arc<MetadataImage> {
        self.view.image()
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.view.topic(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.view.topic_by_id(id)
    }

    /// Waits until this broker has applied every record the active controller had committed
    /// when asked (see [`crate::controller_client::ControllerClient::barrier`]).
    pub async fn catch_up(&self) -> Result<(), BrokerError> {
        // Boxed: a request handler's future would otherwise nest the quorum's routing loop.
        Box::pin(self.controller.barrier()).await
    }

    /// `name`'s topic for a request that changes it: from this broker's image, or, if it is
    /// not there, from the image once it holds what the active controller has committed. Kafka
    /// answers these requests on the controller, so a topic created through another broker a
    /// moment ago is found (this broker may not have applied it yet).
    pub async fn topic_to_change(&self, name: &str) -> Result<Option<Arc<Topic>>, BrokerError> {
        self.caught_up_if_missing(|b| b.topic(name)).await
    }

    /// [`Self::topic_to_change`] by topic id.
    pub async fn topic_by_id_to_change(&self, id: Uuid) -> Result<Option<Arc<Topic>>, BrokerError> {
        self.caught_up_if_missing(|b| b.topic_by_id(id)).await
    }

    /// `look` in this broker's image; if it finds nothing, again after [`Self::catch_up`].
    async fn caught_up_if_missing(
        &self,
        look: impl Fn(&Self) -> Option<Arc<Topic>>,
    ) -> Result<Option<Arc<Topic>>, BrokerError> {
        if let Some(t) = look(self) {
            return Ok(Some(t));
        }
        self.catch_up().await?;
        Ok(look(self))
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.view.all_topics()
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.view.all_partitions()
    }

    pub fn quorum(&self) -> Option<&Quorum> {
        self.controller.quorum()
    }

    pub async fn execute(&self, cmd: Command) -> Result<Reply, BrokerError> {
        self.controller.execute(cmd).await
    }

    /// The active controller as clients should see it.
    pub fn controller_id(&self) -> i32 {
        self.controller.controller_id(&self.image())
    }

    /// Queues an ISR change for the active controller (sent by [`crate::isr::run`]).
    pub fn request_isr_change(&self, topic_id: Uuid, p: Arc<Partition>, change: IsrChange) {
        self.isr_changes.submit(topic_id, p, change);
    }

    /// Removes the partition directories found at startup that no topic claims, once the
    /// applied image is current (see [`LogManager::remove_strays`]).
    pub fn remove_strays(&self) {
        self.remove_strays_for(&self.image());
    }

    fn remove_strays_for(&self, img: &MetadataImage) {
        let me = self.node_id();
        self.logs.remove_strays(img.brokers.get(&me).is_some_and(|b| b.incarnation_id == self.incarnation_id));
    }

    /// Writes the log checkpoints of every hosted partition.
    pub fn write_checkpoints(&self) {
        self.logs.write_checkpoints(&self.all_partitions());
    }

    pub fn write_high_watermarks(&self) {
        self.logs.write_high_watermarks(&self.all_partitions());
    }

    /// Clean shutdown of storage (see [`LogManager::close`]).
    pub fn close_logs(&self) {
        self.logs.close(&self.all_partitions());
    }

    /// Registers this broker with the active controller (a new epoch for this incarnation).
    pub async fn register(&self) -> Result<i64, BrokerError> {
        let sec = &self.config.security.listeners;
        let listeners = self
            .advertised()
            .into_iter()
            .map(|a| Endpoint {
                security_protocol: sec.get(&a.name).map_or("PLAINTEXT", |s| s.protocol.name()).into(),
                name: a.name,
                host: a.host,
                port: a.port,
            })
            .collect();
        let cmd = Command::RegisterBroker {
            node_id: self.node_id(),
            incarnation_id: self.incarnation_id,
            listeners,
            rack: self.config.rack.clone(),
        };
        self.controller.execute(cmd).await?;
        let epoch = self
            .image()
            .brokers
            .get(&self.node_id())
            .filter(|b| b.incarnation_id == self.incarnation_id)
            .map(|b| b.epoch)
            .ok_or_else(|| BrokerError::TimedOut("registration not in the image".into()))?;
        self.controller.set_broker_epoch(epoch);
        tracing::info!(node = self.node_id(), epoch, "registered with the controller");
        Ok(epoch)
    }

    /// One heartbeat; returns whether the broker is fenced (and, when shutting down, whether
    /// it leads nothing any more).
    ///
    /// The answer that unfences this broker, and a controlled shutdown's, come back once this
    /// broker has applied the metadata up to it: it then serves (or stops leading) with a view
    /// that holds everything decided before, such as leaderships moved away while it was
    /// fenced. A heartbeat that keeps an unfenced broker unfenced does not wait: applying a
    /// change that opens thousands of partitions takes seconds, the next heartbeat would go
    /// out that late, and the controller would fence a healthy broker (Kafka's controller does
    /// not fence a broker for applying metadata slowly either).
    pub async fn heartbeat(&self, shutting_down: bool) -> Result<(bool, bool), BrokerError> {
        let cmd = Command::Heartbeat { node_id: self.node_id(), epoch: self.controller.broker_epoch(), shutting_down };
        let (version, reply) = self.controller.commit(cmd).await?;
        match reply {
            Reply::Heartbeat { fenced, shutdown_complete } => {
                if shutting_down || (!fenced && self.liveness.is_fenced()) {
                    self.controller.applied_or_timeout(version).await?;
                }
                if !shutting_down {
                    self.liveness.heard(fenced);
                }
                Ok((fenced, shutdown_complete))
            }
            other => Err(BrokerError::unexpected_reply(&other)),
        }
    }

    /// Checks a topic creation without doing it (what this broker can tell; the controller
    /// checks the rest).
    pub fn check_new_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        validate_topic_name(name)?;
        if self.topic(name).is_some() {
            return Err(BrokerError::TopicExists(format!("Topic '{name}' already exists.")));
        }
        if partitions <= 0 {
            return Err(BrokerError::InvalidPartitions(format!(
                "Number of partitions must be larger than 0 (got {partitions})."
            )));
        }
        if replication_factor <= 0 {
            return Err(BrokerError::InvalidReplicationFactor("Replication factor must be larger than 0.".into()));
        }
        // The controller's own placement rule (and message) for too few brokers, checked here
        // without a round trip.
        oxbow_meta::controller::place(&self.image(), 0, 1, replication_factor)
            .map_err(|r| BrokerError::from(oxbow_meta::CommandError::Refused(r)))?;
        for (k, v) in configs {
            topic_config::validate(k, Some(v))?;
        }
        Ok(())
    }

    /// Creates a topic through the active controller; returns it once this broker has applied
    /// it (`None` for `validate_only`).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignments: Option<Vec<Vec<i32>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Option<Arc<Topic>>, BrokerError> {
        let rf = assignments.as_ref().and_then(|a| a.first()).map_or(replication_factor, |a| a.len() as i16);
        self.check_new_topic(name, partitions, rf, &configs)?;
        let cmd = Command::CreateTopic {
            name: name.to_string(),
            partitions,
            replication_factor: rf,
            assignments,
            configs,
            // Chosen here, once per request: if the quorum's answer is lost after the creation
            // was committed (a leader change), the retry finds its own topic and succeeds.
            topic_id: Some(oxbow_meta::controller::random_topic_id()),
            validate_only,
        };
        self.controller.execute(cmd).await?;
        if validate_only {
            return Ok(None);
        }
        let topic =
            self.topic(name).ok_or_else(|| BrokerError::Internal("created topic is not in the image".into()))?;
        tracing::info!(topic = name, partitions, id = %topic.meta.id, "created topic");
        Ok(Some(topic))
    }

    /// `__consumer_offsets`, created through the controller on first use.
    pub async fn offsets_topic(&self) -> Result<Arc<Topic>, BrokerError> {
        self.internal_topic(crate::coordinator::OFFSETS_TOPIC, self.groups.offsets_topic_spec()).await
    }

    /// `__transaction_state`, created through the controller on first use.
    pub async fn transaction_state_topic(&self) -> Result<Arc<Topic>, BrokerError> {
        self.internal_topic(oxbow_txn::shard::TRANSACTION_STATE_TOPIC, self.txns.topic_spec()).await
    }

    /// A coordinator's internal topic, created with `spec` (partitions, replication factor,
    /// configs) if it does not exist yet; concurrent first users create it once.
    async fn internal_topic(
        &self,
        name: &str,
        spec: (i32, i16, BTreeMap<String, String>),
    ) -> Result<Arc<Topic>, BrokerError> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        let _serial = self.creating_internal.lock().await;
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        let (partitions, replication_factor, configs) = spec;
        match self.create_topic(name, partitions, replication_factor, None, configs, false).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(BrokerError::CoordinatorNotAvailable(format!("{name} not created"))),
            Err(BrokerError::TopicExists(_)) => {
                self.topic(name).ok_or_else(|| BrokerError::CoordinatorNotAvailable(format!("{name} not applied yet")))
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes a topic through the active controller; its logs go when the image drops it.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid, BrokerError> {
        if !self.config.delete_topic_enable {
            return Err(BrokerError::TopicDeletionDisabled);
        }
        let Some(topic) = self.topic_to_change(name).await? else {
            return Err(BrokerError::UnknownTopic(format!("topic {name} does not exist")));
        };
        self.controller.execute(Command::DeleteTopic { name: name.to_string() }).await?;
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.meta.id)
    }

    /// Grows a topic to `count` partitions. Whether the topic exists is the active controller's
    /// answer, as in Kafka: this broker's image may not have applied a topic that another broker
    /// just created (a CreatePartitions through it was refused UNKNOWN_TOPIC_OR_PARTITION).
    /// `assignments`: the new partitions' replica lists, else the controller places them.
    /// Answered once committed, after waiting up to `wait` for this broker to apply it
    /// ([`ControllerClient::execute_committed`]).
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
        wait: Duration,
    ) -> Result<(), BrokerError> {
        let cmd = Command::CreatePartitions { name: name.to_string(), count, assignments, validate_only };
        self.controller.execute_committed(cmd, wait).await?;
        Ok(())
    }

    /// Replaces a topic's config overrides (already validated). Whether the topic exists is the
    /// active controller's answer (see [`Self::create_partitions`]).
    pub async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), BrokerError> {
        self.controller.execute(Command::SetTopicConfigs { name: name.to_string(), configs }).await?;
        Ok(())
    }

    /// Replaces the cluster-wide (`node: None`) or this broker's own dynamic broker configs
    /// (every key must be [`topic_config::is_dynamic_broker_key`]); brokers apply them to the
    /// topics that do not override them, and take the replication throttles.
    pub async fn set_dynamic_broker_configs(
        &self,
        node: Option<i32>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let invalid = |e: crate::ConfigError| BrokerError::InvalidConfig(e.to_string());
        let image = self.view.image();
        let (cluster, own) = match node {
            None => (&configs, image.node_configs.get(&self.node_id())),
            Some(_) => (&image.cluster_configs, Some(&configs)),
        };
        with_dynamic(&self.config, cluster, own).map_err(invalid)?;
        if validate_only {
            return Ok(());
        }
        self.controller.execute(Command::SetBrokerConfigs { node, configs: configs.clone() }).await?;
        tracing::info!(node = ?node, configs = ?configs, "dynamic broker configs changed");
        Ok(())
    }

    /// Makes this broker's state match `img`: opens (recovering if needed) the partitions it
    /// hosts, sets their leader and ISR, applies config changes, deletes the logs of deleted
    /// topics. Then Metadata answers from `img`. Called for every new image, in order.
    pub fn apply_image(&self, img: &Arc<MetadataImage>) {
        let _serial = self.apply_lock.lock();
        let me = self.node_id();
        let prev = self.image();
        let mut defaults = self.view.topic_defaults();
        let defaults_changed = prev.version == 0
            || prev.cluster_configs != img.cluster_configs
            || prev.node_configs.get(&me) != img.node_configs.get(&me);
        if defaults_changed {
            match with_dynamic(&self.config, &img.cluster_configs, img.node_configs.get(&me)) {
                Ok(c) => {
                    defaults = Arc::new(c);
                    self.view.set_topic_defaults(defaults.clone());
                    self.quotas.update(&defaults);
                }
                Err(e) => tracing::warn!(error = %e, "dynamic broker configs are invalid here; ignoring them"),
            }
        }
        let old = self.view.topics();
        let hosted = || self.view.all_partitions();
        let mut preopened = self.logs.open_found(self.found_logs(img, &old, &defaults, defaults_changed), &hosted);
        let mut next = Topics::default();
        for t in img.topics.values() {
            let (existing, unchanged) = old.previous(t, defaults_changed);
            if let (Some(e), true) = (existing, unchanged) {
                next.by_id.insert(t.id, t.name.clone());
                next.by_name.insert(t.name.clone(), e.clone());
                continue;
            }
            let meta = topic_meta(t);
            let log_config = Arc::new(topic_config::resolve(&defaults, &meta.configs));
            let mut local = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let have = existing.and_then(|e| e.partition(p.partition)).cloned();
                let part = if p.replicas.contains(&me) {
                    match have {
                        Some(x) => Some(x),
                        None => match preopened
                            .remove(&(t.name.clone(), p.partition))
                            .unwrap_or_else(|| self.logs.open_partition(&meta, p.partition, &log_config, &hosted))
                        {
                            Ok(x) => Some(x),
                            Err(e) => {
                                tracing::error!(topic = %t.name, partition = p.partition, error = %e, "cannot open partition log");
                                None
                            }
                        },
                    }
                } else {
                    if let Some(x) = have
                        && let Some(log) = x.take_log()
                    {
                        // Moved away (a reassignment completed without this broker): the log
                        // goes, as Kafka's broker deletes a replica it no longer hosts. Were it
                        // added back later, it would copy the leader's log afresh.
                        tracing::info!(topic = %t.name, partition = p.partition, "replica moved away: deleting its log");
                        if let Err(e) = log.delete() {
                            tracing::warn!(topic = %t.name, partition = p.partition, error = %e, "could not delete the log of a moved replica");
                        }
                    }
                    None
                };
                if let Some(x) = &part {
                    x.set_replica(ReplicaState::from_record(p), now_ms());
                }
                local.push(part);
            }
            // The same topic (name and id) keeps its counts; a new one (or one deleted and
            // created again under the same name) starts from zero.
            let counters = existing.map_or_else(Default::default, |e| e.counters.clone());
            let topic = Topic::new(meta, t.partitions.clone(), local, me, self.liveness.clone(), &defaults, counters);
            if existing.is_some_and(|e| e.log_config != topic.log_config) {
                for x in topic.hosted() {
                    x.set_config(topic.log_config.clone());
                }
            }
            next.by_id.insert(t.id, t.name.clone());
            next.by_name.insert(t.name.clone(), Arc::new(topic));
        }
        for (name, e) in &old.by_name {
            if next.by_name.get(name).map(|n| n.meta.id) != Some(e.meta.id) {
                for x in e.hosted() {
                    if let Some(log) = x.take_log()
                        && let Err(err) = log.delete()
                    {
                        tracing::warn!(topic = %name, partition = x.index, error = %err, "could not delete partition log");
                    }
                }
            }
        }
        self.remove_strays_for(img);
        self.view.publish(next, img);
    }

    /// The logs on disk from before of the partitions `img` gives this broker that it has not
    /// opened yet, to open several at a time ([`LogManager::open_found`]). Topics that stay as
    /// they are ([`Topics::previous`]) are not touched, as in [`Self::apply_image`].
    fn found_logs(
        &self,
        img: &MetadataImage,
        old: &Topics,
        defaults: &BrokerConfig,
        defaults_changed: bool,
    ) -> Vec<OpenJob> {
        let me = self.node_id();
        let mut jobs = Vec::new();
        for t in img.topics.values() {
            let (existing, unchanged) = old.previous(t, defaults_changed);
            if unchanged {
                continue;
            }
            let wanted: Vec<i32> = t
                .partitions
                .iter()
                .filter(|p| p.replicas.contains(&me))
                .filter(|p| existing.and_then(|e| e.partition(p.partition)).is_none())
                .filter(|p| self.logs.found(&t.name, p.partition))
                .map(|p| p.partition)
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let meta = Arc::new(topic_meta(t));
            let log_config = Arc::new(topic_config::resolve(defaults, &meta.configs));
            jobs.extend(wanted.into_iter().map(|p| (meta.clone(), p, log_config.clone())));
        }
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        assert!(validate_topic_name("orders.v1_a-b").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", "é"] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }
}
