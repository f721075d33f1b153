//! The broker's shared state: configuration, the metadata image it serves, the partitions it
//! hosts, and the operations several handlers and background jobs share. Metadata changes
//! (create, delete, grow, reconfigure) go to the active controller as commands; this broker
//! acts on them when the committed image reaches it ([`Broker::apply_image`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oxbow_log::checkpoint::{read_offsets, write_offsets};
use oxbow_log::{Log, LogConfig, OpenOptions};
use oxbow_protocol::ResponseError;
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::config::{BrokerConfig, Listener};
use crate::errors::ApiError;
use crate::metadata::{MetaError, TopicMeta, init_log_dirs};
use crate::partition::{IsrChange, Partition};
use crate::replica::ReplicaState;
use crate::topic_config;
use oxbow_meta::records::{Endpoint, PartitionRecord};
use oxbow_meta::{Command, MetadataImage, Quorum, Reply};
use tokio::sync::watch;

pub const CLEAN_SHUTDOWN_MARKER: &str = ".oxbow_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
const HIGH_WATERMARK_CHECKPOINT: &str = "replication-offset-checkpoint";

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Errors that stop the broker from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("cannot open the log of {topic}-{partition}: {source}")]
    Log { topic: String, partition: i32, source: oxbow_log::LogError },
    #[error("log dir {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

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
    fn new(session_ms: u64) -> Self {
        Self { last_unfenced_ms: AtomicI64::new(0), session_ms: i64::try_from(session_ms).unwrap_or(i64::MAX) }
    }

    /// Records a heartbeat reply.
    fn heard(&self, fenced: bool) {
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
    pub log_config: LogConfig,
    pub min_insync: i32,
    /// Partitions whose replication this broker throttles as their leader
    /// (`leader.replication.throttled.replicas`) and as their follower
    /// (`follower.replication.throttled.replicas`).
    pub leader_throttled: topic_config::Throttled,
    pub follower_throttled: topic_config::Throttled,
}

impl Topic {
    /// A topic whose settings are its configs over `defaults`.
    fn new(
        meta: TopicMeta,
        states: Vec<PartitionRecord>,
        local: Vec<Option<Arc<Partition>>>,
        node: i32,
        liveness: Arc<Liveness>,
        defaults: &BrokerConfig,
    ) -> Topic {
        let log_config = topic_config::resolve(defaults, &meta.configs);
        let min_insync = topic_config::min_insync(defaults, &meta.configs);
        let throttled = |key| topic_config::Throttled::of(&meta.configs, key, node);
        let leader_throttled = throttled("leader.replication.throttled.replicas");
        let follower_throttled = throttled("follower.replication.throttled.replicas");
        Topic { meta, states, local, node, liveness, log_config, min_insync, leader_throttled, follower_throttled }
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
    /// topic does not have, NOT_LEADER_OR_FOLLOWER for one led elsewhere (or by nobody).
    pub fn led(&self, i: i32) -> Result<&Arc<Partition>, ApiError> {
        let state = usize::try_from(i).ok().and_then(|i| self.states.get(i)).ok_or_else(|| {
            ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {} has no partition {i}", self.meta.name),
            )
        })?;
        if self.liveness.is_fenced() {
            return Err(ApiError::new(
                ResponseError::NotLeaderOrFollower,
                format!(
                    "broker {} has not been confirmed unfenced by the active controller within its session timeout",
                    self.node
                ),
            ));
        }
        match self.partition(i) {
            Some(p) if state.leader == self.node => Ok(p),
            _ => Err(ApiError::new(
                ResponseError::NotLeaderOrFollower,
                format!("broker {} does not lead {}-{i} (leader: {})", self.node, self.meta.name, state.leader),
            )),
        }
    }

    /// The partitions hosted here.
    pub fn hosted(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.local.iter().flatten()
    }
}

#[derive(Default, Clone)]
struct Topics {
    by_name: BTreeMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, String>,
}

impl Topics {
    /// This broker's state of the topic `t` of a new image (same name and id), and whether it
    /// stays as it is: nothing about the topic changed, nor the broker-wide defaults.
    fn previous(&self, t: &oxbow_meta::image::TopicImage, defaults_changed: bool) -> (Option<&Arc<Topic>>, bool) {
        let existing = self.by_name.get(&t.name).filter(|e| e.meta.id == t.id);
        let unchanged =
            existing.is_some_and(|e| e.states == t.partitions && e.meta.configs == t.configs && !defaults_changed);
        (existing, unchanged)
    }
}

/// Partition directories found at startup, opened (and recovered if needed) when the metadata
/// image names them; the rest are removed once the image is known to be current.
#[derive(Default)]
struct OnDisk {
    dirs: HashMap<String, usize>,
    clean: Vec<bool>,
    recovery: HashMap<(String, i32), i64>,
    starts: HashMap<(String, i32), i64>,
    high_watermarks: HashMap<(String, i32), i64>,
    strays_checked: bool,
    /// Keep strays while older metadata is being imported.
    hold: bool,
}

pub struct Broker {
    /// The static configuration (file and command line).
    pub config: BrokerConfig,
    /// The static configuration with the cluster-wide dynamic broker configs over it: what
    /// topic configs default to.
    topic_defaults: RwLock<Arc<BrokerConfig>>,
    pub cluster_id: String,
    /// Identifies this run of the broker in its registration.
    pub incarnation_id: Uuid,
    /// The listener clients are told about (with the real port if `listeners` said 0).
    advertised: RwLock<Listener>,
    topics: RwLock<Topics>,
    on_disk: Mutex<OnDisk>,
    /// Held while checkpoint files are written: the periodic writers and shutdown share files.
    checkpointing: Mutex<()>,
    /// The image the local state reflects, and its version for waiters.
    image: RwLock<Arc<MetadataImage>>,
    applied: watch::Sender<u64>,
    apply_lock: Mutex<()>,
    quorum: OnceLock<Quorum>,
    /// This broker's registration epoch (-1: not registered yet).
    epoch: AtomicI64,
    pub liveness: Arc<Liveness>,
    /// Partitions that needed recovery when opened (an unclean shutdown before).
    pub recovered_partitions: std::sync::atomic::AtomicUsize,
    /// The consumer group coordinator.
    pub groups: Arc<crate::coordinator::Coordinator>,
    /// The producer id block being handed out: next id, end (exclusive).
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    /// Request-path counters for the metrics.
    pub stats: crate::telemetry::Stats,
    /// The replication throttles (`*.replication.throttled.rate`).
    pub quotas: crate::quota::Quotas,
    /// ISR changes on their way to the active controller.
    pub isr_changes: crate::isr::IsrChanges,
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
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: &str| {
        Err(ApiError::new(ResponseError::InvalidTopicException, format!("topic name {name:?} is invalid: {why}")))
    };
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

fn partition_dir_name(topic: &str, p: i32) -> String {
    format!("{topic}-{p}")
}

/// How long an admin operation waits for the active controller, then for this broker to apply
/// the result.
const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(30);

impl Broker {
    /// Opens the broker's storage: log dirs and their identity, checkpoints, and the list of
    /// partition directories (opened when the metadata names them).
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartupError> {
        let dirs = config.log_dirs.clone();
        let mut id_dirs = dirs.clone();
        if !id_dirs.contains(&config.metadata_log_dir) {
            id_dirs.push(config.metadata_log_dir.clone());
        }
        let cluster_id =
            init_log_dirs(&id_dirs, config.node_id, config.cluster_id.as_deref(), config.quorum_bootstrap.is_empty())?;
        let mut on_disk = OnDisk::default();
        for d in &dirs {
            on_disk.clean.push(d.join(CLEAN_SHUTDOWN_MARKER).exists());
            let read = |name: &str| {
                read_offsets(&d.join(name)).map_err(|e| StartupError::Log {
                    topic: "(checkpoint)".into(),
                    partition: -1,
                    source: e,
                })
            };
            on_disk.recovery.extend(read(RECOVERY_POINT_CHECKPOINT)?);
            on_disk.starts.extend(read(LOG_START_CHECKPOINT)?);
            on_disk.high_watermarks.extend(read(HIGH_WATERMARK_CHECKPOINT)?);
        }
        for (i, d) in dirs.iter().enumerate() {
            for entry in std::fs::read_dir(d).map_err(|e| StartupError::Io { path: d.clone(), source: e })?.flatten() {
                if entry.path().is_dir() {
                    let name = entry.file_name().to_string_lossy().to_string();
                    if name.ends_with("-delete") {
                        let _ = std::fs::remove_dir_all(entry.path());
                        continue;
                    }
                    if name.starts_with("__oxbow_meta") || name.starts_with("__cluster_metadata") {
                        continue;
                    }
                    on_disk.dirs.insert(name, i);
                }
            }
        }
        for d in &dirs {
            let _ = std::fs::remove_file(d.join(CLEAN_SHUTDOWN_MARKER));
        }
        let advertised = config.advertised_listeners[0].clone();
        let (applied, _) = watch::channel(0);
        tracing::info!(partition_dirs = on_disk.dirs.len(), cluster_id = %cluster_id, "storage opened");
        let liveness = Arc::new(Liveness::new(config.session_timeout_ms));
        let groups = Arc::new(crate::coordinator::Coordinator::new(config.groups.clone()));
        let quotas = crate::quota::Quotas::new(&config);
        Ok(Arc::new(Self {
            quotas,
            isr_changes: Default::default(),
            groups,
            topic_defaults: RwLock::new(Arc::new(config.clone())),
            config,
            cluster_id,
            incarnation_id: Uuid::new_v4(),
            advertised: RwLock::new(advertised),
            topics: RwLock::new(Topics::default()),
            on_disk: Mutex::new(on_disk),
            checkpointing: Mutex::new(()),
            image: RwLock::new(Arc::new(MetadataImage::default())),
            applied,
            apply_lock: Mutex::new(()),
            quorum: OnceLock::new(),
            epoch: AtomicI64::new(-1),
            liveness,
            recovered_partitions: std::sync::atomic::AtomicUsize::new(0),
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            stats: crate::telemetry::Stats::default(),
        }))
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn advertised(&self) -> Listener {
        self.advertised.read().clone()
    }

    /// Called once the listener is bound, so port 0 is advertised as the real port.
    pub fn set_bound_port(&self, port: u16) {
        let mut a = self.advertised.write();
        if a.port == 0 {
            a.port = port;
        }
    }

    /// Attaches the metadata quorum (once, at startup).
    pub fn set_quorum(&self, q: Quorum) {
        let _ = self.quorum.set(q);
    }

    pub fn quorum(&self) -> Option<&Quorum> {
        self.quorum.get()
    }

    /// The metadata image this broker's state reflects.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().clone()
    }

    /// The active controller as clients should see it: the quorum leader when it is an active
    /// broker clients can reach; else (no leader known, or it is fenced) any active broker, as
    /// Kafka's KRaft brokers answer, so that admin requests go somewhere that forwards them.
    pub fn controller_id(&self) -> i32 {
        let image = self.image();
        match self.quorum().and_then(Quorum::leader) {
            Some(l) if image.is_active(l) => l,
            _ => image.active_brokers().next().map_or(-1, |b| b.node_id),
        }
    }

    /// Queues an ISR change for the active controller (sent by [`crate::isr::run`]).
    pub fn request_isr_change(&self, topic_id: Uuid, p: Arc<Partition>, change: IsrChange) {
        self.isr_changes.submit(topic_id, p, change);
    }

    /// `host:port` of a registered broker's client listener, from the image.
    pub fn broker_address(&self, node: i32) -> Option<String> {
        let image = self.image();
        let l = image.brokers.get(&node)?.listeners.first()?.clone();
        Some(format!("{}:{}", l.host, l.port))
    }

    /// Subscribes to the version of the metadata image this broker has applied.
    pub fn subscribe_applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    pub fn broker_epoch(&self) -> i64 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().by_name.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        let t = self.topics.read();
        t.by_id.get(&id).and_then(|n| t.by_name.get(n)).cloned()
    }

    pub fn topic_names(&self) -> Vec<String> {
        self.topics.read().by_name.keys().cloned().collect()
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.read().by_name.values().cloned().collect()
    }

    /// Every partition hosted on this broker.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics.read().by_name.values().flat_map(|t| t.hosted().cloned().collect::<Vec<_>>()).collect()
    }

    /// Runs `cmd` on the active controller and waits until this broker has applied its result.
    pub async fn execute(&self, cmd: Command) -> Result<Reply, ApiError> {
        let q =
            self.quorum().ok_or_else(|| ApiError::new(ResponseError::NotController, "metadata quorum not started"))?;
        // The whole exchange is bounded: a leader cut off from its quorum never commits.
        let (version, reply) = tokio::time::timeout(CONTROLLER_TIMEOUT, q.execute(cmd, CONTROLLER_TIMEOUT))
            .await
            .map_err(|_| ApiError::new(ResponseError::RequestTimedOut, "the metadata quorum did not commit in time"))?
            .map_err(ApiError::from)?;
        if !self.wait_applied(version, CONTROLLER_TIMEOUT).await {
            return Err(ApiError::new(
                ResponseError::RequestTimedOut,
                format!("the change was committed (metadata version {version}) but this broker has not applied it yet"),
            ));
        }
        Ok(reply)
    }

    /// Waits until this broker reflects metadata version `version`; false on timeout.
    pub async fn wait_applied(&self, version: u64, timeout: Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|v| *v >= version)).await.is_ok_and(|r| r.is_ok())
    }

    /// Registers this broker with the active controller (a new epoch for this incarnation).
    pub async fn register(&self) -> Result<i64, ApiError> {
        let adv = self.advertised();
        let cmd = Command::RegisterBroker {
            node_id: self.node_id(),
            incarnation_id: self.incarnation_id,
            listeners: vec![Endpoint {
                name: adv.name.clone(),
                host: adv.host.clone(),
                port: adv.port,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: self.config.rack.clone(),
        };
        self.execute(cmd).await?;
        let epoch = self
            .image()
            .brokers
            .get(&self.node_id())
            .filter(|b| b.incarnation_id == self.incarnation_id)
            .map(|b| b.epoch)
            .ok_or_else(|| ApiError::new(ResponseError::RequestTimedOut, "registration not in the image"))?;
        self.epoch.store(epoch, Ordering::Relaxed);
        tracing::info!(node = self.node_id(), epoch, "registered with the controller");
        Ok(epoch)
    }

    /// One heartbeat; returns whether the broker is fenced (and, when shutting down, whether
    /// it leads nothing any more).
    pub async fn heartbeat(&self, shutting_down: bool) -> Result<(bool, bool), ApiError> {
        let cmd = Command::Heartbeat { node_id: self.node_id(), epoch: self.broker_epoch(), shutting_down };
        match self.execute(cmd).await? {
            Reply::Heartbeat { fenced, shutdown_complete } => {
                if !shutting_down {
                    self.liveness.heard(fenced);
                }
                Ok((fenced, shutdown_complete))
            }
            other => Err(ApiError::new(ResponseError::UnknownServerError, format!("unexpected reply {other:?}"))),
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
    ) -> Result<(), ApiError> {
        validate_topic_name(name)?;
        if self.topic(name).is_some() {
            return Err(ApiError::new(ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
        }
        if partitions <= 0 {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("Number of partitions must be larger than 0 (got {partitions})."),
            ));
        }
        if replication_factor <= 0 {
            return Err(ApiError::new(
                ResponseError::InvalidReplicationFactor,
                "Replication factor must be larger than 0.".to_string(),
            ));
        }
        // The controller's own placement rule (and message) for too few brokers, checked here
        // without a round trip.
        oxbow_meta::controller::place(&self.image(), 0, 1, replication_factor)
            .map_err(|r| ApiError::from(oxbow_meta::CommandError::Refused(r)))?;
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
    ) -> Result<Option<Arc<Topic>>, ApiError> {
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
        self.execute(cmd).await?;
        if validate_only {
            return Ok(None);
        }
        let topic = self
            .topic(name)
            .ok_or_else(|| ApiError::new(ResponseError::UnknownServerError, "created topic is not in the image"))?;
        tracing::info!(topic = name, partitions, id = %topic.meta.id, "created topic");
        Ok(Some(topic))
    }

    /// Deletes a topic through the active controller; its logs go when the image drops it.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid, ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::new(ResponseError::TopicDeletionDisabled, "delete.topic.enable is false"));
        }
        let Some(topic) = self.topic(name) else {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        };
        self.execute(Command::DeleteTopic { name: name.to_string() }).await?;
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.meta.id)
    }

    /// Grows a topic to `count` partitions.
    pub async fn create_partitions(&self, name: &str, count: i32, validate_only: bool) -> Result<(), ApiError> {
        if self.topic(name).is_none() {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        }
        self.execute(Command::CreatePartitions { name: name.to_string(), count, validate_only }).await?;
        Ok(())
    }

    /// Replaces a topic's config overrides (already validated).
    pub async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), ApiError> {
        if self.topic(name).is_none() {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        }
        self.execute(Command::SetTopicConfigs { name: name.to_string(), configs }).await?;
        Ok(())
    }

    /// What topic configs default to: the static config with the dynamic broker configs over it.
    pub fn topic_defaults(&self) -> Arc<BrokerConfig> {
        self.topic_defaults.read().clone()
    }

    /// The dynamic broker configs: cluster-wide (`node: None`) or this broker's own.
    pub fn dynamic_broker_configs(&self, node: Option<i32>) -> BTreeMap<String, String> {
        let image = self.image();
        match node {
            None => image.cluster_configs.clone(),
            Some(n) => image.node_configs.get(&n).cloned().unwrap_or_default(),
        }
    }

    /// Replaces the cluster-wide (`node: None`) or this broker's own dynamic broker configs
    /// (every key must be [`topic_config::is_dynamic_broker_key`]); brokers apply them to the
    /// topics that do not override them, and take the replication throttles.
    pub async fn set_dynamic_broker_configs(
        &self,
        node: Option<i32>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let invalid = |e: crate::ConfigError| ApiError::new(ResponseError::InvalidConfig, e.to_string());
        let image = self.image();
        let (cluster, own) = match node {
            None => (&configs, image.node_configs.get(&self.node_id())),
            Some(_) => (&image.cluster_configs, Some(&configs)),
        };
        with_dynamic(&self.config, cluster, own).map_err(invalid)?;
        if validate_only {
            return Ok(());
        }
        self.execute(Command::SetBrokerConfigs { node, configs: configs.clone() }).await?;
        tracing::info!(node = ?node, configs = ?configs, "dynamic broker configs changed");
        Ok(())
    }

    /// A producer id never handed out before in the cluster: from this broker's current block,
    /// or a new block from the active controller.
    pub async fn next_producer_id(&self) -> Result<i64, ApiError> {
        let mut block = self.producer_ids.lock().await;
        if block.0 >= block.1 {
            match self.execute(Command::AllocateProducerIds { node_id: self.node_id() }).await? {
                Reply::ProducerIds { start, len } => *block = (start, start + len),
                other => {
                    return Err(ApiError::new(
                        ResponseError::UnknownServerError,
                        format!("unexpected reply {other:?}"),
                    ));
                }
            }
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    /// Makes this broker's state match `img`: opens (recovering if needed) the partitions it
    /// hosts, sets their leader and ISR, applies config changes, deletes the logs of deleted
    /// topics. Then Metadata answers from `img`. Called for every new image, in order.
    pub fn apply_image(&self, img: &Arc<MetadataImage>) {
        let _serial = self.apply_lock.lock();
        let me = self.node_id();
        let prev = self.image();
        let mut defaults = self.topic_defaults();
        let defaults_changed = prev.version == 0
            || prev.cluster_configs != img.cluster_configs
            || prev.node_configs.get(&me) != img.node_configs.get(&me);
        if defaults_changed {
            match with_dynamic(&self.config, &img.cluster_configs, img.node_configs.get(&me)) {
                Ok(c) => {
                    defaults = Arc::new(c);
                    *self.topic_defaults.write() = defaults.clone();
                    self.quotas.update(&defaults);
                }
                Err(e) => tracing::warn!(error = %e, "dynamic broker configs are invalid here; ignoring them"),
            }
        }
        let old = self.topics.read().clone();
        let mut preopened = self.open_existing_logs(img, &old, &defaults, defaults_changed);
        let mut next = Topics::default();
        for t in img.topics.values() {
            let (existing, unchanged) = old.previous(t, defaults_changed);
            if let (Some(e), true) = (existing, unchanged) {
                next.by_id.insert(t.id, t.name.clone());
                next.by_name.insert(t.name.clone(), e.clone());
                continue;
            }
            let meta = topic_meta(t);
            let log_config = topic_config::resolve(&defaults, &meta.configs);
            let mut local = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let have = existing.and_then(|e| e.partition(p.partition)).cloned();
                let part = if p.replicas.contains(&me) {
                    match have {
                        Some(x) => Some(x),
                        None => match preopened
                            .remove(&(t.name.clone(), p.partition))
                            .unwrap_or_else(|| self.open_partition(&meta, p.partition, &log_config))
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
            let topic = Topic::new(meta, t.partitions.clone(), local, me, self.liveness.clone(), &defaults);
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
        *self.topics.write() = next;
        self.remove_strays(img);
        *self.image.write() = img.clone();
        self.applied.send_replace(img.version);
    }

    /// Holds (or releases) the removal of unclaimed partition directories.
    pub fn hold_strays(&self, hold: bool) {
        self.on_disk.lock().hold = hold;
    }

    /// Removes partition directories no topic in the image claims, once the image holds this
    /// run's own registration (so it is at least as new as this broker's start).
    pub fn remove_strays(&self, img: &MetadataImage) {
        let mut on_disk = self.on_disk.lock();
        if on_disk.strays_checked
            || on_disk.hold
            || img.brokers.get(&self.node_id()).is_none_or(|b| b.incarnation_id != self.incarnation_id)
        {
            return;
        }
        on_disk.strays_checked = true;
        for (name, root) in on_disk.dirs.drain() {
            let path = self.config.log_dirs[root].join(&name);
            if path.join("partition.metadata").exists()
                || name.rsplit_once('-').is_some_and(|(_, p)| p.parse::<i32>().is_ok())
            {
                tracing::warn!(path = %path.display(), "removing the log of a partition this broker does not host");
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// Opens, several at a time, the logs on disk from before of the partitions `img` gives
    /// this broker that it has not opened yet (at startup: every one, each recovered if the
    /// shutdown was not clean), with `num.recovery.threads.per.data.dir` threads per log dir,
    /// as Kafka does. New partitions are left to [`Self::open_partition`] in order; topics that
    /// stay as they are ([`Topics::previous`]) are not touched, as in [`Self::apply_image`].
    fn open_existing_logs(
        &self,
        img: &MetadataImage,
        old: &Topics,
        defaults: &BrokerConfig,
        defaults_changed: bool,
    ) -> HashMap<(String, i32), Result<Arc<Partition>, ApiError>> {
        let me = self.node_id();
        let mut jobs = Vec::new();
        {
            let on_disk = self.on_disk.lock();
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
                    .filter(|p| on_disk.dirs.contains_key(&partition_dir_name(&t.name, p.partition)))
                    .map(|p| p.partition)
                    .collect();
                if wanted.is_empty() {
                    continue;
                }
                let meta = Arc::new(topic_meta(t));
                let log_config = topic_config::resolve(defaults, &meta.configs);
                jobs.extend(wanted.into_iter().map(|p| (meta.clone(), p, log_config.clone())));
            }
        }
        let threads = self.config.recovery_threads.min(jobs.len());
        if threads <= 1 {
            return HashMap::new();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let opened = Mutex::new(HashMap::with_capacity(jobs.len()));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some((meta, p, cfg)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let r = self.open_partition(meta, *p, cfg);
                        opened.lock().insert((meta.name.clone(), *p), r);
                    }
                });
            }
        });
        opened.into_inner()
    }

    fn partition_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.config.log_dirs.len()];
        for p in self.all_partitions() {
            counts[p.root] += 1;
        }
        counts
    }

    /// Opens partition `p` of `meta`: its directory from startup (recovered if the broker did
    /// not shut down cleanly), or a new one in the least loaded log dir.
    fn open_partition(&self, meta: &TopicMeta, p: i32, log_config: &LogConfig) -> Result<Arc<Partition>, ApiError> {
        let dir_name = partition_dir_name(&meta.name, p);
        let found = self.on_disk.lock().dirs.remove(&dir_name);
        let (root, opts, fresh) = match found {
            Some(root)
                if stored_topic_id(&self.config.log_dirs[root].join(&dir_name)).is_none_or(|id| id == meta.id) =>
            {
                let d = self.on_disk.lock();
                let key = (meta.name.clone(), p);
                let opts = OpenOptions {
                    clean_shutdown: d.clean[root],
                    recovery_point: d.recovery.get(&key).copied().unwrap_or(0),
                    log_start_offset: d.starts.get(&key).copied(),
                    high_watermark: d.high_watermarks.get(&key).copied(),
                    now_ms: now_ms(),
                };
                (root, opts, false)
            }
            other => {
                if let Some(root) = other {
                    tracing::warn!(topic = %meta.name, partition = p, "removing the log of an earlier topic with this name");
                    let _ = std::fs::remove_dir_all(self.config.log_dirs[root].join(&dir_name));
                }
                let root = least_loaded(&self.partition_counts());
                let opts = OpenOptions {
                    clean_shutdown: true,
                    recovery_point: 0,
                    log_start_offset: None,
                    high_watermark: None,
                    now_ms: now_ms(),
                };
                (root, opts, true)
            }
        };
        let dir = self.config.log_dirs[root].join(&dir_name);
        let (log, report) = Log::open(&dir, log_config.clone(), opts)?;
        if report.segments_recovered > 0 || !report.truncated.is_empty() {
            self.recovered_partitions.fetch_add(1, Ordering::Relaxed);
            tracing::info!(topic = %meta.name, partition = p, segments = report.segments, recovered = report.segments_recovered, truncated = ?report.truncated, producers = report.producers_loaded, log_end_offset = log.log_end_offset(), "recovered partition");
        }
        if fresh {
            tracing::debug!(topic = %meta.name, partition = p, dir = %dir.display(), "created partition log");
        }
        write_partition_metadata(&dir, meta.id);
        let name: Arc<str> = Arc::from(meta.name.as_str());
        Ok(Arc::new(Partition::new(name, p, root, self.node_id(), log, ReplicaState::single(-1, -1))))
    }

    /// Writes the recovery point, log start offset and high watermark checkpoints of every log
    /// dir.
    pub fn write_checkpoints(&self) {
        let mut cp = Checkpoints::new(self.config.log_dirs.len());
        for p in self.all_partitions() {
            if let Ok((r, s, h)) = p.with_log(|l| (l.recovery_point(), l.log_start_offset(), l.high_watermark())) {
                cp.add(&p, r, s, h);
            }
        }
        let _writing = self.checkpointing.lock();
        cp.write(&self.config.log_dirs);
    }

    /// Writes the high watermark checkpoint of every log dir (more often than the others:
    /// `replica.high.watermark.checkpoint.interval.ms`).
    pub fn write_high_watermarks(&self) {
        let mut per_dir = vec![Vec::new(); self.config.log_dirs.len()];
        for p in self.all_partitions() {
            if let Ok(h) = p.with_log(|l| l.high_watermark()) {
                per_dir[p.root].push((p.topic.to_string(), p.index, h));
            }
        }
        let _writing = self.checkpointing.lock();
        for (d, entries) in self.config.log_dirs.iter().zip(&per_dir) {
            if let Err(e) = write_offsets(&d.join(HIGH_WATERMARK_CHECKPOINT), entries) {
                tracing::error!(file = HIGH_WATERMARK_CHECKPOINT, error = %e, "cannot write checkpoint");
            }
        }
    }

    /// Clean shutdown of storage: close every log (flush, trim indexes, snapshot producers),
    /// write checkpoints, then the clean shutdown marker.
    pub fn close_logs(&self) {
        let dirs = &self.config.log_dirs;
        let mut cp = Checkpoints::new(dirs.len());
        let mut ok = vec![true; dirs.len()];
        let now = now_ms();
        for p in self.all_partitions() {
            let Some(log) = p.take_log() else { continue };
            let (start, hw) = (log.log_start_offset(), log.high_watermark());
            match log.close(now) {
                Ok(r) => cp.add(&p, r, start, hw),
                Err(e) => {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "could not close log cleanly");
                    ok[p.root] = false;
                }
            }
        }
        // Partitions found at startup that the image never named keep their old checkpoints.
        {
            let d = self.on_disk.lock();
            for (name, root) in &d.dirs {
                if let Some((topic, p)) =
                    name.rsplit_once('-').and_then(|(t, p)| Some((t.to_string(), p.parse::<i32>().ok()?)))
                {
                    let key = (topic, p);
                    if let (Some(r), Some(s)) = (d.recovery.get(&key), d.starts.get(&key)) {
                        cp.recovery[*root].push((key.0.clone(), key.1, *r));
                        cp.start[*root].push((key.0.clone(), key.1, *s));
                    }
                    if let Some(h) = d.high_watermarks.get(&key) {
                        cp.high_watermark[*root].push((key.0.clone(), key.1, *h));
                    }
                    if !d.clean[*root] {
                        ok[*root] = false;
                    }
                }
            }
        }
        let _writing = self.checkpointing.lock();
        for ((d, written), closed) in dirs.iter().zip(cp.write(dirs)).zip(ok) {
            if closed
                && written
                && let Err(e) = oxbow_log::checkpoint::write_atomic(&d.join(CLEAN_SHUTDOWN_MARKER), b"")
            {
                tracing::error!(error = %e, "cannot write the clean shutdown marker");
            }
        }
        tracing::info!("logs closed cleanly");
    }
}

/// The topic id in a partition directory's `partition.metadata`, if it has one.
fn stored_topic_id(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join("partition.metadata")).ok()?;
    let id = text.lines().find_map(|l| l.strip_prefix("topic_id:"))?.trim();
    oxbow_protocol::ids::parse_kafka_string(id)
}

/// Recovery points, log start offsets and high watermarks gathered per log dir.
struct Checkpoints {
    recovery: Vec<Vec<(String, i32, i64)>>,
    start: Vec<Vec<(String, i32, i64)>>,
    high_watermark: Vec<Vec<(String, i32, i64)>>,
}

impl Checkpoints {
    fn new(dirs: usize) -> Self {
        Self { recovery: vec![Vec::new(); dirs], start: vec![Vec::new(); dirs], high_watermark: vec![Vec::new(); dirs] }
    }

    fn add(&mut self, p: &Partition, recovery_point: i64, log_start: i64, high_watermark: i64) {
        self.recovery[p.root].push((p.topic.to_string(), p.index, recovery_point));
        self.start[p.root].push((p.topic.to_string(), p.index, log_start));
        self.high_watermark[p.root].push((p.topic.to_string(), p.index, high_watermark));
    }

    /// Writes the checkpoint files of every dir; returns, per dir, whether all were written.
    fn write(&self, dirs: &[PathBuf]) -> Vec<bool> {
        let mut out = Vec::with_capacity(dirs.len());
        for (i, d) in dirs.iter().enumerate() {
            let mut ok = true;
            for (name, entries) in [
                (RECOVERY_POINT_CHECKPOINT, &self.recovery[i]),
                (LOG_START_CHECKPOINT, &self.start[i]),
                (HIGH_WATERMARK_CHECKPOINT, &self.high_watermark[i]),
            ] {
                if let Err(e) = write_offsets(&d.join(name), entries) {
                    tracing::error!(file = name, error = %e, "cannot write checkpoint");
                    ok = false;
                }
            }
            out.push(ok);
        }
        out
    }
}

fn least_loaded(counts: &[usize]) -> usize {
    counts.iter().enumerate().min_by_key(|(_, c)| **c).map_or(0, |(i, _)| i)
}

/// Kafka's `partition.metadata` file (topic id of the partition's directory).
fn write_partition_metadata(dir: &Path, id: Uuid) {
    let p = dir.join("partition.metadata");
    if !p.exists() {
        let text = format!("version: 0\ntopic_id: {}\n", oxbow_protocol::ids::to_kafka_string(id));
        if let Err(e) = oxbow_log::checkpoint::write_atomic(&p, text.as_bytes()) {
            tracing::warn!(path = %p.display(), error = %e, "cannot write partition.metadata");
        }
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
