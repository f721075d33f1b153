//! Durable cluster metadata of a single node: cluster id, topics (ids, partition counts,
//! config overrides) and the producer id counter. Kept in the first log dir under
//! `__oxbow_meta/`, every change written atomically before it is acknowledged.
//!
//! This is the single-node stand-in for the metadata quorum (a separate issue): the broker
//! talks to it through [`MetadataStore`] only, so the quorum can replace it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oxbow_log::checkpoint::write_atomic;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Errors of the metadata store (all fatal for the operation; I/O at startup stops the broker).
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata I/O on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("metadata file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: node.id {found} does not match the configured node.id {configured}")]
    NodeIdMismatch { path: PathBuf, found: String, configured: i32 },
    #[error("log dirs disagree on cluster.id: {a} vs {b}")]
    ClusterIdMismatch { a: String, b: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// Leader epoch of every partition (bumped by leadership changes once they exist).
    #[serde(default)]
    pub leader_epoch: i32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    version: u32,
    topics: Vec<TopicMeta>,
    /// Cluster-wide dynamic broker configs (IncrementalAlterConfigs on the BROKER resource "").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    broker_configs: BTreeMap<String, String>,
}

/// Producer ids are handed out from blocks; the end of the current block is persisted before
/// any id in it is used, so ids are never reused across restarts.
const PRODUCER_ID_BLOCK: i64 = 1000;

pub struct MetadataStore {
    dir: PathBuf,
    pub cluster_id: String,
    topics: BTreeMap<String, TopicMeta>,
    broker_configs: BTreeMap<String, String>,
    next_producer_id: i64,
    producer_id_block_end: i64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MetaError + '_ {
    move |source| MetaError::Io { path: path.into(), source }
}

/// Kafka-style cluster id: a random UUID in URL-safe base64 without padding (22 chars), never
/// starting with '-' (as Kafka's `Uuid.randomUuid`), so command lines cannot mistake it for a flag.
pub fn new_cluster_id() -> String {
    loop {
        let id = crate::handlers::util::kafka_uuid_string(Uuid::new_v4());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// Reads or writes `meta.properties` in every log dir (Kafka's format) and returns the
/// cluster id they agree on.
pub fn init_log_dirs(dirs: &[PathBuf], node_id: i32) -> Result<String, MetaError> {
    let mut cluster_id: Option<String> = None;
    for d in dirs {
        std::fs::create_dir_all(d).map_err(io(d))?;
        let p = d.join("meta.properties");
        if let Ok(text) = std::fs::read_to_string(&p) {
            let props = crate::config::parse_properties(&text);
            let found_node = props.get("node.id").cloned().unwrap_or_default();
            if found_node != node_id.to_string() {
                return Err(MetaError::NodeIdMismatch { path: p, found: found_node, configured: node_id });
            }
            let cid = props
                .get("cluster.id")
                .cloned()
                .ok_or_else(|| MetaError::Corrupt { path: p.clone(), reason: "no cluster.id".into() })?;
            match &cluster_id {
                Some(c) if *c != cid => return Err(MetaError::ClusterIdMismatch { a: c.clone(), b: cid }),
                _ => cluster_id = Some(cid),
            }
        }
    }
    let cluster_id = cluster_id.unwrap_or_else(new_cluster_id);
    for d in dirs {
        let p = d.join("meta.properties");
        if !p.exists() {
            let text = format!(
                "#\n#Written by oxbow-broker\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\ndirectory.id={}\n",
                Uuid::new_v4()
            );
            write_atomic(&p, text.as_bytes())
                .map_err(|e| MetaError::Corrupt { path: p.clone(), reason: e.to_string() })?;
        }
    }
    Ok(cluster_id)
}

impl MetadataStore {
    pub fn open(first_log_dir: &Path, cluster_id: String) -> Result<Self, MetaError> {
        let dir = first_log_dir.join("__oxbow_meta");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let topics_path = dir.join("topics.json");
        let (topics, broker_configs) = match std::fs::read(&topics_path) {
            Ok(bytes) => {
                let f: TopicsFile = serde_json::from_slice(&bytes)
                    .map_err(|e| MetaError::Corrupt { path: topics_path.clone(), reason: e.to_string() })?;
                (f.topics.into_iter().map(|t| (t.name.clone(), t)).collect(), f.broker_configs)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (BTreeMap::new(), BTreeMap::new()),
            Err(e) => return Err(MetaError::Io { path: topics_path, source: e }),
        };
        let pid_path = dir.join("producer-id-block");
        let next = match std::fs::read_to_string(&pid_path) {
            Ok(t) => t
                .trim()
                .parse::<i64>()
                .map_err(|e| MetaError::Corrupt { path: pid_path.clone(), reason: e.to_string() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(MetaError::Io { path: pid_path, source: e }),
        };
        let mut store =
            Self { dir, cluster_id, topics, broker_configs, next_producer_id: next, producer_id_block_end: next };
        store.allocate_block()?;
        Ok(store)
    }

    fn allocate_block(&mut self) -> Result<(), MetaError> {
        let end = self.producer_id_block_end + PRODUCER_ID_BLOCK;
        let p = self.dir.join("producer-id-block");
        write_atomic(&p, end.to_string().as_bytes())
            .map_err(|e| MetaError::Corrupt { path: p, reason: e.to_string() })?;
        self.next_producer_id = self.producer_id_block_end;
        self.producer_id_block_end = end;
        Ok(())
    }

    /// A producer id never handed out before (across restarts).
    pub fn next_producer_id(&mut self) -> Result<i64, MetaError> {
        if self.next_producer_id >= self.producer_id_block_end {
            self.allocate_block()?;
        }
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        Ok(id)
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicMeta> {
        self.topics.values()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    fn persist(&self) -> Result<(), MetaError> {
        let f = TopicsFile {
            version: 1,
            topics: self.topics.values().cloned().collect(),
            broker_configs: self.broker_configs.clone(),
        };
        let p = self.dir.join("topics.json");
        let bytes =
            serde_json::to_vec_pretty(&f).map_err(|e| MetaError::Corrupt { path: p.clone(), reason: e.to_string() })?;
        write_atomic(&p, &bytes).map_err(|e| MetaError::Corrupt { path: p, reason: e.to_string() })
    }

    /// Adds or replaces a topic, durably.
    /// The cluster-wide dynamic broker configs.
    pub fn broker_configs(&self) -> &BTreeMap<String, String> {
        &self.broker_configs
    }

    /// Replaces the cluster-wide dynamic broker configs; durable on return.
    pub fn put_broker_configs(&mut self, configs: BTreeMap<String, String>) -> Result<(), MetaError> {
        let old = std::mem::replace(&mut self.broker_configs, configs);
        self.persist().inspect_err(|_| self.broker_configs = old.clone())
    }

    pub fn put_topic(&mut self, t: TopicMeta) -> Result<(), MetaError> {
        let old = self.topics.insert(t.name.clone(), t.clone());
        if let Err(e) = self.persist() {
            match old {
                Some(o) => self.topics.insert(o.name.clone(), o),
                None => self.topics.remove(&t.name),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Removes a topic, durably.
    pub fn remove_topic(&mut self, name: &str) -> Result<Option<TopicMeta>, MetaError> {
        let old = self.topics.remove(name);
        if let Err(e) = self.persist() {
            if let Some(o) = old {
                self.topics.insert(o.name.clone(), o);
            }
            return Err(e);
        }
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_shape() {
        let id = new_cluster_id();
        assert_eq!(id.len(), 22);
        assert!((0..2000).all(|_| !new_cluster_id().starts_with('-')));
        assert_ne!(id, new_cluster_id());
    }

    #[test]
    fn producer_ids_survive_restart_and_topics_persist() -> Result<(), MetaError> {
        let d = tempfile::tempdir().map_err(|e| MetaError::Io { path: "tmp".into(), source: e })?;
        let cid = init_log_dirs(&[d.path().to_path_buf()], 1)?;
        assert_eq!(init_log_dirs(&[d.path().to_path_buf()], 1)?, cid);
        assert!(init_log_dirs(&[d.path().to_path_buf()], 2).is_err());
        let mut s = MetadataStore::open(d.path(), cid.clone())?;
        let a = s.next_producer_id()?;
        s.put_topic(TopicMeta {
            name: "t".into(),
            id: Uuid::new_v4(),
            partitions: 3,
            configs: BTreeMap::new(),
            leader_epoch: 0,
        })?;
        drop(s);
        let mut s = MetadataStore::open(d.path(), cid)?;
        assert!(s.next_producer_id()? > a);
        assert_eq!(s.topic("t").map(|t| t.partitions), Some(3));
        s.remove_topic("t")?;
        assert!(s.topic("t").is_none());
        Ok(())
    }
}
