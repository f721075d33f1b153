//! Node storage identity and the metadata of earlier single-node versions.
//!
//! [`init_log_dirs`] writes or checks Kafka's `meta.properties` (cluster id, node id) in every
//! log dir. [`read_legacy`] reads the single-node metadata file (`__oxbow_meta/topics.json`)
//! that versions before the metadata quorum kept, so their topics are imported into the
//! quorum on the first start instead of being taken for stray logs.

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
    #[error(
        "{path} holds cluster.id {stored}, but the configured cluster.id is {configured}: this storage belongs to another cluster (use an empty log dir, or the cluster.id it was formatted with)"
    )]
    ClusterIdConfigMismatch { path: PathBuf, stored: String, configured: String },
    #[error(
        "no cluster id: a node of a dynamic quorum (controller.quorum.bootstrap.servers) needs cluster.id in its config, or storage formatted with `oxbow-broker format --cluster-id ID`"
    )]
    NoClusterId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TopicsFile {
    pub version: u32,
    pub topics: Vec<TopicMeta>,
    /// Cluster-wide dynamic broker configs (IncrementalAlterConfigs on the BROKER resource "").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MetaError + '_ {
    move |source| MetaError::Io { path: path.into(), source }
}

/// Kafka-style cluster id: a random UUID in URL-safe base64 without padding (22 chars), never
/// starting with '-' (as Kafka's `Uuid.randomUuid`), so command lines cannot mistake it for a flag.
pub fn new_cluster_id() -> String {
    loop {
        let id = oxbow_protocol::ids::to_kafka_string(Uuid::new_v4());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// Reads or writes `meta.properties` in every log dir (Kafka's format) and returns the
/// cluster id they agree on. With neither a stored nor a configured id, a new one is generated
/// if `may_generate` (a node that starts a cluster alone), else it is an error (a node joining
/// a cluster must be given its id).
pub fn init_log_dirs(
    dirs: &[PathBuf],
    node_id: i32,
    configured: Option<&str>,
    may_generate: bool,
) -> Result<String, MetaError> {
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
            if let Some(c) = configured
                && c != cid
            {
                return Err(MetaError::ClusterIdConfigMismatch { path: p, stored: cid, configured: c.to_string() });
            }
            match &cluster_id {
                Some(c) if *c != cid => return Err(MetaError::ClusterIdMismatch { a: c.clone(), b: cid }),
                _ => cluster_id = Some(cid),
            }
        }
    }
    let cluster_id = match cluster_id.or_else(|| configured.map(str::to_string)) {
        Some(id) => id,
        None if may_generate => new_cluster_id(),
        None => return Err(MetaError::NoClusterId),
    };
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

/// What a single-node version before the metadata quorum stored.
pub struct Legacy {
    pub path: PathBuf,
    pub file: TopicsFile,
    /// The first producer id it had not handed out.
    pub next_producer_id: i64,
}

/// Reads `__oxbow_meta/` of an earlier version, if `first_log_dir` has one that was not
/// imported yet.
pub fn read_legacy(first_log_dir: &Path) -> Result<Option<Legacy>, MetaError> {
    let dir = first_log_dir.join("__oxbow_meta");
    let path = dir.join("topics.json");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MetaError::Io { path, source: e }),
    };
    let file: TopicsFile =
        serde_json::from_slice(&bytes).map_err(|e| MetaError::Corrupt { path: path.clone(), reason: e.to_string() })?;
    let next_producer_id = std::fs::read_to_string(dir.join("producer-id-block"))
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .unwrap_or(0);
    Ok(Some(Legacy { path, file, next_producer_id }))
}

impl Legacy {
    /// Marks the file as imported (renamed, kept for reference).
    pub fn mark_imported(&self) -> Result<(), MetaError> {
        let to = self.path.with_extension("json.imported");
        std::fs::rename(&self.path, &to).map_err(io(&self.path))
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
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
    fn meta_properties_pin_node_and_cluster() -> Result<(), MetaError> {
        let d = tempfile::tempdir().map_err(|e| MetaError::Io { path: "tmp".into(), source: e })?;
        let dirs = [d.path().to_path_buf()];
        let cid = init_log_dirs(&dirs, 1, None, true)?;
        assert_eq!(init_log_dirs(&dirs, 1, None, false)?, cid);
        assert_eq!(init_log_dirs(&dirs, 1, Some(&cid), true)?, cid);
        assert!(matches!(init_log_dirs(&dirs, 2, None, true), Err(MetaError::NodeIdMismatch { .. })));
        let e = init_log_dirs(&dirs, 1, Some("another-cluster"), true).expect_err("mismatch");
        assert!(e.to_string().contains("another-cluster"), "{e}");
        let d2 = tempfile::tempdir().map_err(|e| MetaError::Io { path: "tmp".into(), source: e })?;
        assert!(matches!(init_log_dirs(&[d2.path().to_path_buf()], 1, None, false), Err(MetaError::NoClusterId)));
        assert_eq!(init_log_dirs(&[d2.path().to_path_buf()], 1, Some("given-id"), false)?, "given-id");
        Ok(())
    }
}
