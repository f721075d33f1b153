//! The broker's shared state: configuration, metadata store, topics and their partitions, and
//! the operations on them that several handlers and background jobs share (create, delete,
//! grow, reconfigure, checkpoint, clean shutdown).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use oxbow_log::checkpoint::{read_offsets, write_offsets};
use oxbow_log::{Log, LogConfig, OpenOptions};
use oxbow_protocol::ResponseError;
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::config::{BrokerConfig, Listener};
use crate::errors::ApiError;
use crate::metadata::{MetaError, MetadataStore, TopicMeta, init_log_dirs};
use crate::partition::Partition;
use crate::replica::ReplicaState;
use crate::topic_config;

pub const CLEAN_SHUTDOWN_MARKER: &str = ".oxbow_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";

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

/// A topic and its partitions.
pub struct Topic {
    pub meta: TopicMeta,
    pub partitions: Vec<Arc<Partition>>,
    /// The topic's configs over the broker's defaults, resolved once per change (not per request).
    pub log_config: LogConfig,
    pub min_insync: i32,
}

impl Topic {
    /// A topic whose settings are its configs over `defaults`.
    fn new(meta: TopicMeta, partitions: Vec<Arc<Partition>>, defaults: &BrokerConfig) -> Topic {
        let log_config = topic_config::resolve(defaults, &meta.configs);
        let min_insync = topic_config::min_insync(defaults, &meta.configs);
        Topic { meta, partitions, log_config, min_insync }
    }

    /// The same partitions with `meta`'s configs over `defaults` (after either changed); the
    /// partition logs take the new settings.
    fn reconfigured(&self, meta: TopicMeta, defaults: &BrokerConfig) -> Topic {
        let topic = Topic::new(meta, self.partitions.clone(), defaults);
        for p in &topic.partitions {
            p.set_config(topic.log_config.clone());
        }
        topic
    }

    pub fn partition(&self, i: i32) -> Option<&Arc<Partition>> {
        usize::try_from(i).ok().and_then(|i| self.partitions.get(i))
    }
}

#[derive(Default)]
struct Topics {
    by_name: BTreeMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, String>,
}

pub struct Broker {
    /// The static configuration (file and command line).
    pub config: BrokerConfig,
    /// The static configuration with the cluster-wide dynamic broker configs over it: what
    /// topic configs default to.
    topic_defaults: RwLock<Arc<BrokerConfig>>,
    pub cluster_id: String,
    /// The listener clients are told about (with the real port if `listeners` said 0).
    advertised: RwLock<Listener>,
    store: Mutex<MetadataStore>,
    topics: RwLock<Topics>,
}

/// `config` with `dynamic` broker keys over its explicit settings.
fn with_dynamic(config: &BrokerConfig, dynamic: &BTreeMap<String, String>) -> Result<BrokerConfig, crate::ConfigError> {
    if dynamic.is_empty() {
        return Ok(config.clone());
    }
    let mut explicit = config.explicit.clone();
    explicit.extend(dynamic.iter().map(|(k, v)| (k.clone(), v.clone())));
    BrokerConfig::from_map(explicit)
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

impl Broker {
    /// Opens the broker's storage: log dirs, metadata, every partition log (recovering those that
    /// were not shut down cleanly).
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartupError> {
        let dirs = config.log_dirs.clone();
        let cluster_id = init_log_dirs(&dirs, config.node_id)?;
        let store = MetadataStore::open(&dirs[0], cluster_id.clone())?;
        let mut clean = Vec::new();
        let mut recovery: HashMap<(String, i32), i64> = HashMap::new();
        let mut starts: HashMap<(String, i32), i64> = HashMap::new();
        for d in &dirs {
            clean.push(d.join(CLEAN_SHUTDOWN_MARKER).exists());
            let rp = read_offsets(&d.join(RECOVERY_POINT_CHECKPOINT)).map_err(|e| StartupError::Log {
                topic: "(checkpoint)".into(),
                partition: -1,
                source: e,
            })?;
            recovery.extend(rp);
            let ls = read_offsets(&d.join(LOG_START_CHECKPOINT)).map_err(|e| StartupError::Log {
                topic: "(checkpoint)".into(),
                partition: -1,
                source: e,
            })?;
            starts.extend(ls);
        }
        // Where each existing partition directory lives.
        let mut on_disk: HashMap<String, usize> = HashMap::new();
        for (i, d) in dirs.iter().enumerate() {
            for entry in std::fs::read_dir(d).map_err(|e| StartupError::Io { path: d.clone(), source: e })?.flatten() {
                if entry.path().is_dir() {
                    let name = entry.file_name().to_string_lossy().to_string();
                    if name.ends_with("-delete") {
                        let _ = std::fs::remove_dir_all(entry.path());
                        continue;
                    }
                    on_disk.insert(name, i);
                }
            }
        }
        let advertised = config.advertised_listeners[0].clone();
        let topic_defaults = match with_dynamic(&config, store.broker_configs()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "stored dynamic broker configs are invalid; ignoring them");
                config.clone()
            }
        };
        let broker = Self {
            config,
            topic_defaults: RwLock::new(Arc::new(topic_defaults)),
            cluster_id,
            advertised: RwLock::new(advertised),
            store: Mutex::new(store),
            topics: RwLock::new(Topics::default()),
        };
        let metas: Vec<TopicMeta> = broker.store.lock().topics().cloned().collect();
        let now = now_ms();
        let mut counts = vec![0usize; dirs.len()];
        let mut recovered = 0usize;
        let defaults = broker.topic_defaults();
        for meta in metas {
            let mut topic = Topic::new(meta, Vec::new(), &defaults);
            let (meta, log_config) = (&topic.meta, &topic.log_config);
            let name: Arc<str> = Arc::from(meta.name.as_str());
            let mut parts = Vec::new();
            for p in 0..meta.partitions {
                let dir_name = partition_dir_name(&meta.name, p);
                let root = match on_disk.remove(&dir_name) {
                    Some(r) => r,
                    None => least_loaded(&counts),
                };
                counts[root] += 1;
                let key = (meta.name.clone(), p);
                let opts = OpenOptions {
                    clean_shutdown: clean[root],
                    recovery_point: recovery.get(&key).copied().unwrap_or(0),
                    log_start_offset: starts.get(&key).copied(),
                    now_ms: now,
                };
                let dir = dirs[root].join(&dir_name);
                let (log, report) = Log::open(&dir, log_config.clone(), opts).map_err(|e| StartupError::Log {
                    topic: meta.name.clone(),
                    partition: p,
                    source: e,
                })?;
                if report.segments_recovered > 0 || !report.truncated.is_empty() {
                    recovered += 1;
                    tracing::info!(topic = %meta.name, partition = p, segments = report.segments, recovered = report.segments_recovered, truncated = ?report.truncated, producers = report.producers_loaded, log_end_offset = log.log_end_offset(), "recovered partition");
                }
                write_partition_metadata(&dir, meta.id);
                let replica = ReplicaState::single(broker.config.node_id, meta.leader_epoch);
                parts.push(Arc::new(Partition::new(name.clone(), p, root, log, replica)));
            }
            topic.partitions = parts;
            let mut t = broker.topics.write();
            t.by_id.insert(topic.meta.id, topic.meta.name.clone());
            t.by_name.insert(topic.meta.name.clone(), Arc::new(topic));
        }
        // Directories of topics that no longer exist (a crash during deletion).
        for (name, root) in on_disk {
            if name.starts_with("__oxbow_meta") {
                continue;
            }
            let path = dirs[root].join(&name);
            if path.join("partition.metadata").exists()
                || name.rsplit_once('-').is_some_and(|(_, p)| p.parse::<i32>().is_ok())
            {
                tracing::warn!(path = %path.display(), "removing the log of a topic that no longer exists");
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        for d in &dirs {
            let _ = std::fs::remove_file(d.join(CLEAN_SHUTDOWN_MARKER));
        }
        tracing::info!(topics = broker.topics.read().by_name.len(), recovered_partitions = recovered, cluster_id = %broker.cluster_id, "storage loaded");
        Ok(Arc::new(broker))
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

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics.read().by_name.values().flat_map(|t| t.partitions.iter().cloned()).collect()
    }

    pub fn next_producer_id(&self) -> Result<i64, ApiError> {
        self.store.lock().next_producer_id().map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))
    }

    /// Checks a topic creation without doing it.
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
        if replication_factor > 1 {
            return Err(ApiError::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only 1 broker(s) are registered."
                ),
            ));
        }
        for (k, v) in configs {
            topic_config::validate(k, Some(v))?;
        }
        Ok(())
    }

    /// Creates a topic: metadata first (durably), then its partition logs.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, ApiError> {
        let mut store = self.store.lock();
        self.check_new_topic(name, partitions, 1, &configs)?;
        let meta = TopicMeta { name: name.to_string(), id: Uuid::new_v4(), partitions, configs, leader_epoch: 0 };
        let mut topic = Topic::new(meta.clone(), Vec::new(), &self.topic_defaults());
        topic.partitions = self.open_new_partitions(&meta, 0, &topic.log_config)?;
        store.put_topic(meta.clone()).map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        let topic = Arc::new(topic);
        let mut t = self.topics.write();
        t.by_id.insert(meta.id, meta.name.clone());
        t.by_name.insert(meta.name.clone(), topic.clone());
        tracing::info!(topic = name, partitions, id = %meta.id, "created topic");
        Ok(topic)
    }

    fn partition_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.config.log_dirs.len()];
        for p in self.all_partitions() {
            counts[p.root] += 1;
        }
        counts
    }

    fn open_new_partitions(
        &self,
        meta: &TopicMeta,
        from: i32,
        log_config: &LogConfig,
    ) -> Result<Vec<Arc<Partition>>, ApiError> {
        let mut counts = self.partition_counts();
        let name: Arc<str> = Arc::from(meta.name.as_str());
        let mut parts = Vec::new();
        for p in from..meta.partitions {
            let root = least_loaded(&counts);
            counts[root] += 1;
            let dir = self.config.log_dirs[root].join(partition_dir_name(&meta.name, p));
            let _ = std::fs::remove_dir_all(&dir);
            let opts =
                OpenOptions { clean_shutdown: true, recovery_point: 0, log_start_offset: None, now_ms: now_ms() };
            let (log, _) = Log::open(&dir, log_config.clone(), opts)?;
            write_partition_metadata(&dir, meta.id);
            parts.push(Arc::new(Partition::new(
                name.clone(),
                p,
                root,
                log,
                ReplicaState::single(self.config.node_id, meta.leader_epoch),
            )));
        }
        Ok(parts)
    }

    /// Deletes a topic: metadata first (durably), then its logs.
    pub fn delete_topic(&self, name: &str) -> Result<Uuid, ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::new(ResponseError::TopicDeletionDisabled, "delete.topic.enable is false"));
        }
        let mut store = self.store.lock();
        let Some(topic) = self.topic(name) else {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        };
        store.remove_topic(name).map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        {
            let mut t = self.topics.write();
            t.by_name.remove(name);
            t.by_id.remove(&topic.meta.id);
        }
        for p in &topic.partitions {
            if let Some(log) = p.take_log()
                && let Err(e) = log.delete()
            {
                tracing::warn!(topic = name, partition = p.index, error = %e, "could not delete partition log");
            }
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.meta.id)
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(&self, name: &str, count: i32, validate_only: bool) -> Result<(), ApiError> {
        let mut store = self.store.lock();
        let Some(topic) = self.topic(name) else {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        };
        let current = topic.meta.partitions;
        if count < current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
            ));
        }
        if count == current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("Topic already has {current} partitions."),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let mut meta = topic.meta.clone();
        meta.partitions = count;
        let new_parts = self.open_new_partitions(&meta, current, &topic.log_config)?;
        store.put_topic(meta.clone()).map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        let mut parts = topic.partitions.clone();
        parts.extend(new_parts);
        let updated = Arc::new(Topic {
            meta,
            partitions: parts,
            log_config: topic.log_config.clone(),
            min_insync: topic.min_insync,
        });
        self.topics.write().by_name.insert(name.to_string(), updated);
        tracing::info!(topic = name, from = current, to = count, "added partitions");
        Ok(())
    }

    /// Replaces a topic's config overrides (already validated).
    pub fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), ApiError> {
        let mut store = self.store.lock();
        let Some(topic) = self.topic(name) else {
            return Err(ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name} does not exist")));
        };
        let mut meta = topic.meta.clone();
        meta.configs = configs;
        store.put_topic(meta.clone()).map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        let updated = Arc::new(topic.reconfigured(meta, &self.topic_defaults()));
        self.topics.write().by_name.insert(name.to_string(), updated);
        Ok(())
    }

    /// What topic configs default to: the static config with the dynamic broker configs over it.
    pub fn topic_defaults(&self) -> Arc<BrokerConfig> {
        self.topic_defaults.read().clone()
    }

    /// The cluster-wide dynamic broker configs.
    pub fn dynamic_broker_configs(&self) -> BTreeMap<String, String> {
        self.store.lock().broker_configs().clone()
    }

    /// Replaces the cluster-wide dynamic broker configs (every key must be
    /// [`topic_config::is_dynamic_broker_key`]) and applies them to every topic that does not
    /// override them. Durable on return.
    pub fn set_dynamic_broker_configs(
        &self,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let invalid = |e: crate::ConfigError| ApiError::new(ResponseError::InvalidConfig, e.to_string());
        let defaults = Arc::new(with_dynamic(&self.config, &configs).map_err(invalid)?);
        if validate_only {
            return Ok(());
        }
        let mut store = self.store.lock();
        store
            .put_broker_configs(configs)
            .map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        *self.topic_defaults.write() = defaults.clone();
        let mut topics = self.topics.write();
        for topic in topics.by_name.values_mut() {
            *topic = Arc::new(topic.reconfigured(topic.meta.clone(), &defaults));
        }
        tracing::info!(configs = ?store.broker_configs(), "dynamic broker configs changed");
        Ok(())
    }

    /// Writes the recovery point and log start offset checkpoints of every log dir.
    pub fn write_checkpoints(&self) {
        let mut cp = Checkpoints::new(self.config.log_dirs.len());
        for p in self.all_partitions() {
            if let Ok((r, s)) = p.with_log(|l| (l.recovery_point(), l.log_start_offset())) {
                cp.add(&p, r, s);
            }
        }
        cp.write(&self.config.log_dirs);
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
            let start = log.log_start_offset();
            match log.close(now) {
                Ok(r) => cp.add(&p, r, start),
                Err(e) => {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "could not close log cleanly");
                    ok[p.root] = false;
                }
            }
        }
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

/// Recovery points and log start offsets gathered per log dir.
struct Checkpoints {
    recovery: Vec<Vec<(String, i32, i64)>>,
    start: Vec<Vec<(String, i32, i64)>>,
}

impl Checkpoints {
    fn new(dirs: usize) -> Self {
        Self { recovery: vec![Vec::new(); dirs], start: vec![Vec::new(); dirs] }
    }

    fn add(&mut self, p: &Partition, recovery_point: i64, log_start: i64) {
        self.recovery[p.root].push((p.topic.to_string(), p.index, recovery_point));
        self.start[p.root].push((p.topic.to_string(), p.index, log_start));
    }

    /// Writes both checkpoint files of every dir; returns, per dir, whether both were written.
    fn write(&self, dirs: &[PathBuf]) -> Vec<bool> {
        let mut out = Vec::with_capacity(dirs.len());
        for (i, d) in dirs.iter().enumerate() {
            let mut ok = true;
            for (name, entries) in
                [(RECOVERY_POINT_CHECKPOINT, &self.recovery[i]), (LOG_START_CHECKPOINT, &self.start[i])]
            {
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
        let text = format!("version: 0\ntopic_id: {}\n", crate::handlers::util::kafka_uuid_string(id));
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
