//! The log manager (Kafka's `LogManager`): the log dirs and what is on them. It opens partition
//! logs (recovering those a crash left unclean, several at a time), creates new ones in the
//! least loaded dir, removes directories no topic claims, and writes the checkpoints and the
//! clean shutdown marker. It knows nothing of the metadata image: the image applier
//! (`Broker::apply_image`) tells it what to open and passes in the partitions it hosts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oxbow_log::checkpoint::{read_offsets, write_offsets};
use oxbow_log::{Log, LogConfig, OpenOptions};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::errors::BrokerError;
use crate::metadata::{MetaError, TopicMeta, init_log_dirs};
use crate::partition::Partition;
use crate::replica::ReplicaState;

pub const CLEAN_SHUTDOWN_MARKER: &str = ".oxbow_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
const HIGH_WATERMARK_CHECKPOINT: &str = "replication-offset-checkpoint";

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

/// A partition log to open: its topic, index and effective log settings.
pub type OpenJob = (Arc<TopicMeta>, i32, Arc<LogConfig>);

pub struct LogManager {
    dirs: Vec<PathBuf>,
    node_id: i32,
    recovery_threads: usize,
    on_disk: Mutex<OnDisk>,
    /// Held while checkpoint files are written: the periodic writers and shutdown share files.
    checkpointing: Mutex<()>,
    /// Partitions that needed recovery when opened (an unclean shutdown before).
    pub recovered_partitions: AtomicUsize,
}

impl LogManager {
    /// Opens the log dirs: their identity (`meta.properties`, returning the cluster id), their
    /// checkpoints, and the list of partition directories (opened when the metadata names
    /// them). Removes the clean shutdown markers: from here on a crash is an unclean shutdown.
    pub fn open(config: &BrokerConfig) -> Result<(Self, String), StartupError> {
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
        tracing::info!(partition_dirs = on_disk.dirs.len(), cluster_id = %cluster_id, "storage opened");
        let manager = LogManager {
            dirs,
            node_id: config.node_id,
            recovery_threads: config.recovery_threads,
            on_disk: Mutex::new(on_disk),
            checkpointing: Mutex::new(()),
            recovered_partitions: AtomicUsize::new(0),
        };
        Ok((manager, cluster_id))
    }

    /// Whether a directory for partition `p` of `topic` was found at startup and not opened yet.
    pub fn found(&self, topic: &str, p: i32) -> bool {
        self.on_disk.lock().dirs.contains_key(&partition_dir_name(topic, p))
    }

    /// Opens, several at a time, logs found on disk (at startup: every one, each recovered if
    /// the shutdown was not clean), with `num.recovery.threads.per.data.dir` threads per log
    /// dir, as Kafka does. With one thread it opens nothing and leaves each to
    /// [`Self::open_partition`] in order. `hosted` gives the partitions already hosted.
    pub fn open_found(
        &self,
        jobs: Vec<OpenJob>,
        hosted: &(dyn Fn() -> Vec<Arc<Partition>> + Sync),
    ) -> HashMap<(String, i32), Result<Arc<Partition>, BrokerError>> {
        let threads = self.recovery_threads.min(jobs.len());
        if threads <= 1 {
            return HashMap::new();
        }
        let next = AtomicUsize::new(0);
        let opened = Mutex::new(HashMap::with_capacity(jobs.len()));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some((meta, p, cfg)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let r = self.open_partition(meta, *p, cfg, hosted);
                        opened.lock().insert((meta.name.clone(), *p), r);
                    }
                });
            }
        });
        opened.into_inner()
    }

    /// Opens partition `p` of `meta`: its directory from startup (recovered if the broker did
    /// not shut down cleanly), or a new one in the log dir hosting the fewest of `hosted`.
    pub fn open_partition(
        &self,
        meta: &TopicMeta,
        p: i32,
        log_config: &Arc<LogConfig>,
        hosted: &(dyn Fn() -> Vec<Arc<Partition>> + Sync),
    ) -> Result<Arc<Partition>, BrokerError> {
        let dir_name = partition_dir_name(&meta.name, p);
        let found = self.on_disk.lock().dirs.remove(&dir_name);
        let (root, opts, fresh) = match found {
            Some(root) if stored_topic_id(&self.dirs[root].join(&dir_name)).is_none_or(|id| id == meta.id) => {
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
                    let _ = std::fs::remove_dir_all(self.dirs[root].join(&dir_name));
                }
                let mut counts = vec![0usize; self.dirs.len()];
                for x in hosted() {
                    counts[x.root] += 1;
                }
                let opts = OpenOptions {
                    clean_shutdown: true,
                    recovery_point: 0,
                    log_start_offset: None,
                    high_watermark: None,
                    now_ms: now_ms(),
                };
                (least_loaded(&counts), opts, true)
            }
        };
        let dir = self.dirs[root].join(&dir_name);
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
        Ok(Arc::new(Partition::new(name, p, root, self.node_id, log, ReplicaState::single(-1, -1))))
    }

    /// Holds (or releases) the removal of unclaimed partition directories.
    pub fn hold_strays(&self, hold: bool) {
        self.on_disk.lock().hold = hold;
    }

    /// Removes partition directories found at startup that no topic claimed, once `current`
    /// (the image holds this run's own registration, so it is at least as new as this start).
    pub fn remove_strays(&self, current: bool) {
        let mut on_disk = self.on_disk.lock();
        if on_disk.strays_checked || on_disk.hold || !current {
            return;
        }
        on_disk.strays_checked = true;
        for (name, root) in on_disk.dirs.drain() {
            let path = self.dirs[root].join(&name);
            if path.join("partition.metadata").exists()
                || name.rsplit_once('-').is_some_and(|(_, p)| p.parse::<i32>().is_ok())
            {
                tracing::warn!(path = %path.display(), "removing the log of a partition this broker does not host");
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// Writes the recovery point, log start offset and high watermark checkpoints of every log
    /// dir for the partitions `hosted`.
    pub fn write_checkpoints(&self, hosted: &[Arc<Partition>]) {
        let mut cp = Checkpoints::new(self.dirs.len());
        for p in hosted {
            if let Ok((r, s, h)) = p.with_log(|l| (l.recovery_point(), l.log_start_offset(), l.high_watermark())) {
                cp.add(p, r, s, h);
            }
        }
        let _writing = self.checkpointing.lock();
        cp.write(&self.dirs);
    }

    /// Writes the high watermark checkpoint of every log dir (more often than the others:
    /// `replica.high.watermark.checkpoint.interval.ms`).
    pub fn write_high_watermarks(&self, hosted: &[Arc<Partition>]) {
        let mut per_dir = vec![Vec::new(); self.dirs.len()];
        for p in hosted {
            if let Ok(h) = p.with_log(|l| l.high_watermark()) {
                per_dir[p.root].push((p.topic.to_string(), p.index, h));
            }
        }
        let _writing = self.checkpointing.lock();
        for (d, entries) in self.dirs.iter().zip(&per_dir) {
            if let Err(e) = write_offsets(&d.join(HIGH_WATERMARK_CHECKPOINT), entries) {
                tracing::error!(file = HIGH_WATERMARK_CHECKPOINT, error = %e, "cannot write checkpoint");
            }
        }
    }

    /// Clean shutdown of storage: close the logs of `hosted` (flush, trim indexes, snapshot
    /// producers), write checkpoints, then the clean shutdown marker of every dir where all
    /// of that succeeded.
    pub fn close(&self, hosted: &[Arc<Partition>]) {
        let dirs = &self.dirs;
        let mut cp = Checkpoints::new(dirs.len());
        let mut ok = vec![true; dirs.len()];
        let now = now_ms();
        for p in hosted {
            let Some(log) = p.take_log() else { continue };
            let (start, hw) = (log.log_start_offset(), log.high_watermark());
            match log.close(now) {
                Ok(r) => cp.add(p, r, start, hw),
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

fn partition_dir_name(topic: &str, p: i32) -> String {
    format!("{topic}-{p}")
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
