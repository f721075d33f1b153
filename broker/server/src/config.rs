//! Broker configuration in Kafka's `server.properties` format and key names.
//!
//! [`KEYS`] (in `schema`) is the single table of supported keys: name, default, accepted values
//! and documentation; `parse` holds the value syntaxes. This file turns explicit settings into
//! the typed [`BrokerConfig`] the broker runs on. Values are validated once, at startup; a bad
//! value stops the broker with a [`ConfigError`] naming the key and what it accepts. Unknown keys
//! produce a warning.

mod kind;
mod parse;
mod providers;
mod schema;
pub mod security;

use std::collections::BTreeMap;
use std::path::PathBuf;

use oxbow_log::{LogConfig, TargetCompression};

pub use parse::{Listener, parse_host_ports, parse_listeners, parse_properties, parse_voters};
use schema::SYNONYMS;
pub use schema::{CLEANUP, KEYS, KeyDef, Kind, key_def};

/// Whether `key` is understood: a key of [`KEYS`], or one of them for one listener
/// (`listener.name.<name>.<key>`, or a mechanism's `<mechanism>.sasl.jaas.config`).
fn is_known(key: &str) -> bool {
    if key_def(key).is_some() || providers::is_provider_key(key) {
        return true;
    }
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    let Some((_, per_listener)) = rest.split_once('.') else {
        return false;
    };
    key_def(per_listener).is_some() || per_listener.ends_with(".sasl.jaas.config")
}

/// A configuration problem that stops startup.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("invalid value {value:?} for {key}: expected {accepted}")]
    Invalid { key: String, value: String, accepted: String },
    #[error("{key}: {reason}")]
    Inconsistent { key: String, reason: String },
    #[error("cannot read config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("bad command line: {0}")]
    Usage(String),
}

/// The group coordinator's settings.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    pub group: oxbow_group::GroupConfig,
    /// `group.coordinator.rebalance.protocols` includes `consumer` (KIP-848 served).
    pub consumer_protocol: bool,
    /// `group.consumer.*`
    pub consumer: oxbow_group::consumer::ConsumerConfig,
    pub offsets: oxbow_group::OffsetConfig,
    /// `offsets.topic.num.partitions`
    pub topic_partitions: i32,
    /// `offsets.topic.segment.bytes`
    pub topic_segment_bytes: i64,
    /// `offsets.topic.replication.factor`
    pub topic_replication_factor: i16,
    /// `offsets.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
    /// `offsets.commit.timeout.ms`
    pub commit_timeout_ms: u64,
}

/// The transaction coordinator's settings (`transaction.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnSettings {
    pub coordinator: oxbow_txn::TxnConfig,
    /// `transaction.state.log.num.partitions`
    pub topic_partitions: i32,
    /// `transaction.state.log.replication.factor`
    pub topic_replication_factor: i16,
    /// `transaction.state.log.min.isr`
    pub topic_min_isr: i32,
    /// `transaction.state.log.segment.bytes`
    pub topic_segment_bytes: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub expire_interval_ms: u64,
    /// `transaction.partition.verification.enable`
    pub verification: bool,
}

/// The validated broker configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// `process.roles` includes `controller`: this node is a voter of the metadata quorum.
    pub controller_role: bool,
    /// `process.roles` includes `broker`: this node serves clients and hosts partitions.
    pub broker_role: bool,
    /// The first listener named in `controller.listener.names`, if any.
    pub controller_listener: Option<Listener>,
    /// Where other controllers reach this node's CONTROLLER listener (`host:port`).
    pub controller_advertised: Option<String>,
    /// `controller.quorum.voters`: node id -> `host:port` (empty: a single-node quorum, or a
    /// dynamic one when `quorum_bootstrap` is set).
    pub quorum_voters: BTreeMap<i32, String>,
    /// `controller.quorum.bootstrap.servers` (KIP-853 dynamic quorum).
    pub quorum_bootstrap: Vec<String>,
    /// `controller.quorum.auto.join.enable`
    pub auto_join: bool,
    /// `cluster.id` if configured.
    pub cluster_id: Option<String>,
    pub metadata_log_dir: PathBuf,
    pub election_timeout_ms: u64,
    pub snapshot_bytes: u64,
    pub heartbeat_interval_ms: u64,
    /// `replica.lag.time.max.ms`
    pub replica_lag_time_max_ms: i64,
    /// `leader.replication.throttled.rate` and `follower.replication.throttled.rate` (bytes/s).
    pub leader_throttle_rate: i64,
    pub follower_throttle_rate: i64,
    /// `replication.quota.window.num` and `replication.quota.window.size.seconds` (as ms).
    pub quota_windows: u32,
    pub quota_window_ms: i64,
    pub session_timeout_ms: u64,
    pub unclean_leader_election: bool,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// The client listeners (controller listeners are in `controller_listener`).
    pub listeners: Vec<Listener>,
    /// One per client listener, in the same order: where clients are told to connect.
    pub advertised_listeners: Vec<Listener>,
    /// Each client listener's protocol, TLS and SASL settings; the inter-broker listener.
    pub security: security::SecurityConfig,
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics: bool,
    pub delete_topic_enable: bool,
    pub retention_check_interval_ms: u64,
    pub flush_scheduler_interval_ms: u64,
    pub flush_checkpoint_interval_ms: u64,
    /// `replica.high.watermark.checkpoint.interval.ms`
    pub hw_checkpoint_interval_ms: u64,
    pub min_insync_replicas: i32,
    pub socket_request_max_bytes: usize,
    pub queued_max_requests: usize,
    pub queued_max_request_bytes: Option<usize>,
    /// `oxbow.http.listener`: where /livez and /readyz are served, if anywhere.
    pub http_listener: Option<std::net::SocketAddr>,
    pub max_connections: usize,
    pub max_inflight_per_connection: usize,
    pub shutdown_timeout_ms: u64,
    /// `oxbow.fetch.zero.copy`
    pub fetch_zero_copy: bool,
    /// `max.incremental.fetch.session.cache.slots`
    pub fetch_session_slots: usize,
    /// `num.recovery.threads.per.data.dir` times the number of log dirs.
    pub recovery_threads: usize,
    /// `log.cleaner.enable`
    pub cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`
    pub cleaner_backoff_ms: u64,
    /// The consumer group coordinator's settings (`group.*`, `offsets.*`).
    pub groups: GroupSettings,
    pub transactions: TxnSettings,
    /// Defaults for every partition log (topic configs override them).
    pub log: LogConfig,
    /// Effective value of every key in [`KEYS`] (`None`: unset with no default).
    pub values: BTreeMap<&'static str, Option<String>>,
    /// Keys set explicitly (file or override), for DescribeConfigs sources.
    pub explicit: BTreeMap<String, String>,
    /// Keys that were not recognised (already warned about).
    pub unknown: Vec<String>,
}

impl BrokerConfig {
    /// Builds the configuration from explicit settings (file, then overrides).
    pub fn from_map(mut explicit: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        for (syn, canonical) in SYNONYMS {
            if let Some(v) = explicit.remove(*syn) {
                explicit.entry(canonical.to_string()).or_insert(v);
            }
        }
        let unknown: Vec<String> = explicit.keys().filter(|k| !is_known(k)).cloned().collect();
        let mut values: BTreeMap<&'static str, Option<String>> = BTreeMap::new();
        for def in KEYS {
            let v = explicit.get(def.name).cloned().or_else(|| def.default.map(str::to_string));
            if let Some(v) = &v
                && !def.kind.check(v)
            {
                return Err(ConfigError::Invalid {
                    key: def.name.into(),
                    value: v.clone(),
                    accepted: def.kind.accepted(),
                });
            }
            values.insert(def.name, v.map(|s| s.trim().to_string()));
        }
        let get = |k: &str| values.get(k).cloned().flatten();
        let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        let req_int = |k: &str| {
            int(k).ok_or_else(|| ConfigError::Invalid {
                key: k.into(),
                value: String::new(),
                accepted: "a value".into(),
            })
        };
        let bool_ = |k: &str| get(k).is_some_and(|v| v == "true");

        let listeners = parse_listeners(&get("listeners").unwrap_or_default())
            .map_err(|reason| ConfigError::Inconsistent { key: "listeners".into(), reason })?;
        let advertised_listeners = match get("advertised.listeners") {
            Some(a) => parse_listeners(&a)
                .map_err(|reason| ConfigError::Inconsistent { key: "advertised.listeners".into(), reason })?,
            None => listeners.clone(),
        };
        for a in &advertised_listeners {
            if a.host.is_empty() || a.host == "0.0.0.0" || a.host == "::" {
                return Err(ConfigError::Inconsistent {
                    key: "advertised.listeners".into(),
                    reason: format!(
                        "{}://{}:{} is not an address clients can connect to; set advertised.listeners when listeners binds all interfaces",
                        a.name, a.host, a.port
                    ),
                });
            }
            if !listeners.iter().any(|l| l.name == a.name) {
                return Err(ConfigError::Inconsistent {
                    key: "advertised.listeners".into(),
                    reason: format!("listener {} is not in listeners", a.name),
                });
            }
        }
        let controller_names: Vec<String> =
            get("controller.listener.names").unwrap_or_default().split(',').map(|n| n.trim().to_string()).collect();
        let (controller_listeners, listeners): (Vec<Listener>, Vec<Listener>) =
            listeners.into_iter().partition(|l| controller_names.contains(&l.name));
        let (advertised_controller, advertised_listeners): (Vec<Listener>, Vec<Listener>) =
            advertised_listeners.into_iter().partition(|l| controller_names.contains(&l.name));
        let roles = get("process.roles").unwrap_or_default();
        let controller_role = roles.contains("controller");
        let broker_role = roles.contains("broker");
        if !broker_role {
            // As Kafka: a controller-only node has no client listener.
            if let Some(l) = listeners.first() {
                return Err(ConfigError::Inconsistent {
                    key: "listeners".into(),
                    reason: format!(
                        "process.roles=controller: listeners may only hold controller listeners ({}), not {}",
                        controller_names.join(","),
                        l.name
                    ),
                });
            }
        } else if listeners.is_empty() {
            return Err(ConfigError::Inconsistent {
                key: "listeners".into(),
                reason: "a broker needs a client listener besides its controller listener".into(),
            });
        }
        // Each client listener is advertised as itself unless advertised.listeners names it.
        let advertised_listeners: Vec<Listener> = listeners
            .iter()
            .map(|l| advertised_listeners.iter().find(|a| a.name == l.name).unwrap_or(l).clone())
            .collect();
        let security = security::parse(&explicit, &values, &listeners)?;
        let node_id = req_int("node.id")? as i32;
        let voters = match get("controller.quorum.voters") {
            Some(v) => parse_voters(&v)
                .map_err(|reason| ConfigError::Inconsistent { key: "controller.quorum.voters".into(), reason })?,
            None => BTreeMap::new(),
        };
        let bootstrap = match get("controller.quorum.bootstrap.servers") {
            Some(v) => parse_host_ports(&v).map_err(|reason| ConfigError::Inconsistent {
                key: "controller.quorum.bootstrap.servers".into(),
                reason,
            })?,
            None => Vec::new(),
        };
        if !bootstrap.is_empty() && !voters.is_empty() {
            return Err(ConfigError::Inconsistent {
                key: "controller.quorum.bootstrap.servers".into(),
                reason: "set either controller.quorum.voters (a static quorum) or controller.quorum.bootstrap.servers (a dynamic one), not both".into(),
            });
        }
        let controller_listener = controller_listeners.first().cloned();
        // Where other controllers reach this one: its CONTROLLER entry in advertised.listeners,
        // else the listener itself if it names a host.
        let controller_advertised = controller_listener.as_ref().and_then(|l| {
            advertised_controller
                .iter()
                .find(|a| a.name == l.name)
                .or(Some(l))
                .filter(|a| !a.host.is_empty() && a.host != "0.0.0.0" && a.host != "::")
                .map(|a| format!("{}:{}", a.host, a.port))
        });
        let dynamic = !bootstrap.is_empty();
        if controller_role && !broker_role && !dynamic && (voters.is_empty() || controller_listener.is_none()) {
            return Err(ConfigError::Inconsistent {
                key: if voters.is_empty() { "controller.quorum.voters" } else { "listeners" }.into(),
                reason: "a controller-only node needs the quorum (controller.quorum.voters, or controller.quorum.bootstrap.servers) and a listener named in controller.listener.names".into(),
            });
        }
        // Only a combined node that is a single-node quorum of its own needs no controller
        // listener (no controller traffic).
        let single_node = voters.is_empty() && !dynamic;
        if controller_role && controller_listener.is_none() && !single_node {
            return Err(ConfigError::Inconsistent {
                key: "listeners".into(),
                reason: format!(
                    "a controller needs a listener named in controller.listener.names ({})",
                    controller_names.join(",")
                ),
            });
        }
        if dynamic && controller_role && controller_advertised.is_none() {
            return Err(ConfigError::Inconsistent {
                key: "advertised.listeners".into(),
                reason: "a controller of a dynamic quorum needs an address others can reach: a CONTROLLER entry in advertised.listeners, or a host in its CONTROLLER listener".into(),
            });
        }
        if dynamic {
            // The voters are in the metadata log; nothing more to check here.
        } else if controller_role {
            if voters.is_empty() && controller_listener.is_some() {
                // A CONTROLLER listener but no quorum to serve.
                return Err(ConfigError::Inconsistent {
                    key: "controller.quorum.voters".into(),
                    reason: "a controller with a CONTROLLER listener needs the quorum's voters (list this node to start a new quorum with it), or controller.quorum.bootstrap.servers for a dynamic quorum".into(),
                });
            }
        } else {
            if voters.is_empty() {
                return Err(ConfigError::Inconsistent {
                    key: "controller.quorum.voters".into(),
                    reason: "a broker-only node needs the voters of the metadata quorum, or controller.quorum.bootstrap.servers".into(),
                });
            }
            if voters.contains_key(&node_id) {
                return Err(ConfigError::Inconsistent {
                    key: "controller.quorum.voters".into(),
                    reason: format!("node.id={node_id} is a voter but process.roles has no controller role"),
                });
            }
        }
        let cluster_id = get("cluster.id");
        if voters.len() > 1 && cluster_id.is_none() {
            return Err(ConfigError::Inconsistent {
                key: "cluster.id".into(),
                reason: "required when the quorum has more than one voter (every node must be given the same id)"
                    .into(),
            });
        }
        let log_dirs: Vec<PathBuf> =
            get("log.dirs").unwrap_or_default().split(',').map(|p| PathBuf::from(p.trim())).collect();
        let recovery_threads = req_int("num.recovery.threads.per.data.dir")? as usize * log_dirs.len().max(1);

        let retention_ms = match (int("log.retention.ms"), int("log.retention.minutes"), int("log.retention.hours")) {
            (Some(ms), _, _) => ms,
            (None, Some(m), _) => {
                if m < 0 {
                    -1
                } else {
                    m * 60_000
                }
            }
            (None, None, Some(h)) => {
                if h < 0 {
                    -1
                } else {
                    h * 3_600_000
                }
            }
            _ => -1,
        };
        let segment_ms = int("log.roll.ms").unwrap_or_else(|| int("log.roll.hours").unwrap_or(168) * 3_600_000);
        let flush_ms = int("log.flush.interval.ms").unwrap_or(i64::MAX);
        let policy = get("log.cleanup.policy").unwrap_or_else(|| "delete".into());
        let log = LogConfig {
            segment_bytes: req_int("log.segment.bytes")? as u64,
            segment_ms,
            retention_ms,
            retention_bytes: req_int("log.retention.bytes")?,
            index_interval_bytes: req_int("log.index.interval.bytes")? as u64,
            segment_index_bytes: req_int("log.index.size.max.bytes")? as u64,
            flush_messages: req_int("log.flush.interval.messages")?,
            flush_ms,
            max_message_bytes: req_int("message.max.bytes")? as usize,
            compression: TargetCompression::parse(&get("compression.type").unwrap_or_default())
                .unwrap_or(TargetCompression::Producer),
            log_append_time: get("log.message.timestamp.type").as_deref() == Some("LogAppendTime"),
            cleanup_delete: policy.split(',').any(|p| p.trim() == "delete"),
            cleanup_compact: policy.split(',').any(|p| p.trim() == "compact"),
            delete_retention_ms: req_int("log.cleaner.delete.retention.ms")?,
            min_compaction_lag_ms: req_int("log.cleaner.min.compaction.lag.ms")?,
            max_compaction_lag_ms: req_int("log.cleaner.max.compaction.lag.ms")?,
            min_cleanable_dirty_ratio: get("log.cleaner.min.cleanable.ratio")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.5),
            producer_id_expiration_ms: req_int("producer.id.expiration.ms")?,
            timestamp_after_max_ms: req_int("log.message.timestamp.after.max.ms")?,
            timestamp_before_max_ms: req_int("log.message.timestamp.before.max.ms")?,
        };
        let default_rf = req_int("default.replication.factor")?;
        let (min_session, max_session) =
            (req_int("group.min.session.timeout.ms")?, req_int("group.max.session.timeout.ms")?);
        if min_session > max_session {
            return Err(ConfigError::Inconsistent {
                key: "group.min.session.timeout.ms".into(),
                reason: format!("{min_session} is larger than group.max.session.timeout.ms ({max_session})"),
            });
        }
        let consumer = consumer_group_config(&req_int, get("group.consumer.assignors").unwrap_or_default())?;
        let protocols: Vec<String> = get("group.coordinator.rebalance.protocols")
            .unwrap_or_default()
            .split(',')
            .map(|p| p.trim().to_lowercase())
            .filter(|p| !p.is_empty())
            .collect();
        if let Some(bad) = protocols.iter().find(|p| *p != "classic" && *p != "consumer") {
            return Err(ConfigError::Inconsistent {
                key: "group.coordinator.rebalance.protocols".into(),
                reason: format!("unknown protocol `{bad}`: accepted are classic and consumer"),
            });
        }
        if !protocols.iter().any(|p| p == "classic") {
            return Err(ConfigError::Inconsistent {
                key: "group.coordinator.rebalance.protocols".into(),
                reason: "must include classic".into(),
            });
        }
        let groups = GroupSettings {
            consumer_protocol: protocols.iter().any(|p| p == "consumer"),
            consumer,
            group: oxbow_group::GroupConfig {
                min_session_timeout_ms: min_session as i32,
                max_session_timeout_ms: max_session as i32,
                initial_rebalance_delay_ms: req_int("group.initial.rebalance.delay.ms")?,
                max_size: req_int("group.max.size")? as usize,
            },
            offsets: oxbow_group::OffsetConfig {
                retention_ms: req_int("offsets.retention.minutes")?.saturating_mul(60_000),
                metadata_max_bytes: req_int("offset.metadata.max.bytes")? as usize,
            },
            topic_partitions: req_int("offsets.topic.num.partitions")? as i32,
            topic_segment_bytes: req_int("offsets.topic.segment.bytes")?,
            topic_replication_factor: req_int("offsets.topic.replication.factor")? as i16,
            retention_check_interval_ms: req_int("offsets.retention.check.interval.ms")? as u64,
            commit_timeout_ms: req_int("offsets.commit.timeout.ms")? as u64,
        };
        let transactions = TxnSettings {
            coordinator: oxbow_txn::TxnConfig {
                max_timeout_ms: req_int("transaction.max.timeout.ms")? as i32,
                transactional_id_expiration_ms: req_int("transactional.id.expiration.ms")?,
                // Replaced by the cluster's finalized `transaction.version` when a shard loads.
                transaction_version: 0,
            },
            topic_partitions: req_int("transaction.state.log.num.partitions")? as i32,
            topic_replication_factor: req_int("transaction.state.log.replication.factor")? as i16,
            topic_min_isr: req_int("transaction.state.log.min.isr")? as i32,
            topic_segment_bytes: req_int("transaction.state.log.segment.bytes")?,
            abort_interval_ms: req_int("transaction.abort.timed.out.transaction.cleanup.interval.ms")? as u64,
            expire_interval_ms: req_int("transaction.remove.expired.transaction.cleanup.interval.ms")? as u64,
            verification: bool_("transaction.partition.verification.enable"),
        };
        let metadata_log_dir = get("metadata.log.dir").map_or_else(|| log_dirs[0].clone(), PathBuf::from);
        Ok(Self {
            node_id,
            controller_role,
            broker_role,
            controller_listener,
            controller_advertised,
            quorum_voters: voters,
            quorum_bootstrap: bootstrap,
            auto_join: bool_("controller.quorum.auto.join.enable"),
            cluster_id,
            metadata_log_dir,
            election_timeout_ms: req_int("controller.quorum.election.timeout.ms")? as u64,
            snapshot_bytes: req_int("metadata.log.max.record.bytes.between.snapshots")? as u64,
            heartbeat_interval_ms: req_int("broker.heartbeat.interval.ms")? as u64,
            replica_lag_time_max_ms: req_int("replica.lag.time.max.ms")?,
            leader_throttle_rate: req_int("leader.replication.throttled.rate")?,
            follower_throttle_rate: req_int("follower.replication.throttled.rate")?,
            quota_windows: req_int("replication.quota.window.num")? as u32,
            quota_window_ms: req_int("replication.quota.window.size.seconds")? * 1000,
            session_timeout_ms: req_int("broker.session.timeout.ms")? as u64,
            unclean_leader_election: bool_("unclean.leader.election.enable"),
            // Empty means none (a pod whose node has no zone label passes an empty value).
            rack: get("broker.rack").filter(|r| !r.is_empty()),
            listeners,
            advertised_listeners,
            security,
            log_dirs,
            num_partitions: req_int("num.partitions")? as i32,
            default_replication_factor: default_rf as i16,
            auto_create_topics: bool_("auto.create.topics.enable"),
            delete_topic_enable: bool_("delete.topic.enable"),
            retention_check_interval_ms: req_int("log.retention.check.interval.ms")? as u64,
            flush_scheduler_interval_ms: req_int("log.flush.scheduler.interval.ms")? as u64,
            flush_checkpoint_interval_ms: req_int("log.flush.offset.checkpoint.interval.ms")? as u64,
            hw_checkpoint_interval_ms: req_int("replica.high.watermark.checkpoint.interval.ms")? as u64,
            min_insync_replicas: req_int("min.insync.replicas")? as i32,
            socket_request_max_bytes: req_int("socket.request.max.bytes")? as usize,
            queued_max_requests: req_int("queued.max.requests")? as usize,
            queued_max_request_bytes: usize::try_from(req_int("queued.max.request.bytes")?).ok(),
            max_connections: req_int("max.connections")? as usize,
            max_inflight_per_connection: req_int("oxbow.max.inflight.requests.per.connection")? as usize,
            shutdown_timeout_ms: req_int("oxbow.shutdown.timeout.ms")? as u64,
            fetch_zero_copy: bool_("oxbow.fetch.zero.copy"),
            fetch_session_slots: req_int("max.incremental.fetch.session.cache.slots")? as usize,
            recovery_threads,
            cleaner_enable: bool_("log.cleaner.enable"),
            cleaner_backoff_ms: req_int("log.cleaner.backoff.ms")? as u64,
            groups,
            transactions,
            http_listener: get("oxbow.http.listener").and_then(|v| v.parse().ok()),
            log,
            values,
            explicit,
            unknown,
        })
    }

    /// Reads `--config FILE` (if any), applies `--override key=value` pairs on top, then resolves
    /// config provider references (`${file:PATH:KEY}`, see `providers`).
    pub fn load(file: Option<&std::path::Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        let mut map = match file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| ConfigError::File { path: p.display().to_string(), reason: e.to_string() })?;
                parse_properties(&text)
            }
            None => BTreeMap::new(),
        };
        for o in overrides {
            let (k, v) =
                o.split_once('=').ok_or_else(|| ConfigError::Usage(format!("--override {o:?}: expected key=value")))?;
            map.insert(k.trim().to_string(), v.trim().to_string());
        }
        providers::resolve(&mut map, &|name| std::env::var(name).ok())?;
        Self::from_map(map)
    }

    pub fn default_for_tests() -> Self {
        match Self::from_map(BTreeMap::new()) {
            Ok(c) => c,
            Err(e) => unreachable!("defaults are valid: {e}"),
        }
    }
}

/// (each value within its min/max, the heartbeat interval below the session timeout).
fn consumer_group_config(
    req_int: &dyn Fn(&str) -> Result<i64, ConfigError>,
    assignors: String,
) -> Result<oxbow_group::consumer::ConsumerConfig, ConfigError> {
    use oxbow_group::assignor::Assignor;
    let bounded = |key: &str, min_key: &str, max_key: &str| -> Result<i64, ConfigError> {
        let (v, min, max) = (req_int(key)?, req_int(min_key)?, req_int(max_key)?);
        if min > max {
            return Err(ConfigError::Inconsistent {
                key: min_key.into(),
                reason: format!("{min} is larger than {max_key} ({max})"),
            });
        }
        if v < min || v > max {
            return Err(ConfigError::Inconsistent {
                key: key.into(),
                reason: format!("{v} is outside [{min}, {max}] ({min_key}, {max_key})"),
            });
        }
        Ok(v)
    };
    let session = bounded(
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    )?;
    let heartbeat = bounded(
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    )?;
    if heartbeat >= session {
        return Err(ConfigError::Inconsistent {
            key: "group.consumer.heartbeat.interval.ms".into(),
            reason: format!("{heartbeat} must be smaller than group.consumer.session.timeout.ms ({session})"),
        });
    }
    let mut list = Vec::new();
    for name in assignors.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let a = Assignor::from_name(name).ok_or_else(|| ConfigError::Inconsistent {
            key: "group.consumer.assignors".into(),
            reason: format!("unknown assignor `{name}`: accepted are uniform and range"),
        })?;
        if !list.contains(&a) {
            list.push(a);
        }
    }
    if list.is_empty() {
        return Err(ConfigError::Inconsistent {
            key: "group.consumer.assignors".into(),
            reason: "at least one assignor (uniform, range) is required".into(),
        });
    }
    Ok(oxbow_group::consumer::ConsumerConfig {
        session_timeout_ms: session as i32,
        heartbeat_interval_ms: heartbeat as i32,
        max_size: req_int("group.consumer.max.size")? as usize,
        assignors: list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = BrokerConfig::default_for_tests();
        assert_eq!(c.listeners, vec![Listener { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9092 }]);
        assert_eq!(c.log_dirs, vec![PathBuf::from("./oxbow-data")]);
        assert_eq!(c.log.segment_bytes, 1 << 30);
        assert_eq!(c.log.retention_ms, 168 * 3_600_000);
        assert_eq!(c.log.flush_messages, i64::MAX);
        assert_eq!(c.num_partitions, 1);
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = BrokerConfig::from_map(map(&[("log.segment.bytes", "ten")])).err();
        assert!(matches!(&e, Some(ConfigError::Invalid { key, .. }) if key == "log.segment.bytes"), "{e:?}");
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("log.segment.bytes") && msg.contains("integer"), "{msg}");
        assert!(BrokerConfig::from_map(map(&[("auto.create.topics.enable", "yes")])).is_err());
        assert!(BrokerConfig::from_map(map(&[("listeners", "127.0.0.1:9092")])).is_err());
        assert!(BrokerConfig::from_map(map(&[("compression.type", "brotli")])).is_err());
    }

    #[test]
    fn retention_precedence_and_synonyms() {
        let c = BrokerConfig::from_map(map(&[
            ("log.retention.minutes", "2"),
            ("log.retention.hours", "1"),
            ("broker.id", "7"),
        ]));
        let c = c.ok();
        assert_eq!(c.as_ref().map(|c| c.log.retention_ms), Some(120_000));
        assert_eq!(c.as_ref().map(|c| c.node_id), Some(7));
        let c = BrokerConfig::from_map(map(&[("some.unknown", "1")])).ok();
        assert_eq!(c.map(|c| c.unknown), Some(vec!["some.unknown".to_string()]));
    }

    #[test]
    fn controller_only_nodes_have_only_the_controller_listener() {
        let voters = ("controller.quorum.voters", "1@127.0.1.1:9093,2@127.0.1.2:9093,3@127.0.1.3:9093");
        let base = [("process.roles", "controller"), ("node.id", "1"), voters, ("cluster.id", "c1")];
        let c = BrokerConfig::from_map(map(&[&base[..], &[("listeners", "CONTROLLER://127.0.1.1:9093")]].concat()));
        let c = c.unwrap_or_else(|e| panic!("{e}"));
        assert!(c.controller_role && !c.broker_role && c.listeners.is_empty());
        assert_eq!(c.controller_listener.map(|l| l.port), Some(9093));
        let both = "PLAINTEXT://127.0.1.1:9092,CONTROLLER://127.0.1.1:9093";
        let e = BrokerConfig::from_map(map(&[&base[..], &[("listeners", both)]].concat())).err();
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("listeners") && msg.contains("PLAINTEXT"), "{msg}");
        let e = BrokerConfig::from_map(map(&[
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.1.1:9093"),
        ]))
        .err();
        assert!(e.map(|e| e.to_string()).unwrap_or_default().contains("controller.quorum.voters"));
    }

    #[test]
    fn dynamic_quorum_takes_bootstrap_servers_and_an_advertised_controller_address() {
        let boot = ("controller.quorum.bootstrap.servers", "127.0.1.1:9093,127.0.1.2:9093");
        let err = |pairs: &[(&str, &str)]| BrokerConfig::from_map(map(pairs)).err().map(|e| e.to_string());
        let broker = BrokerConfig::from_map(map(&[("process.roles", "broker"), ("node.id", "4"), boot]));
        let broker = broker.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(broker.quorum_bootstrap, vec!["127.0.1.1:9093".to_string(), "127.0.1.2:9093".to_string()]);
        assert!(broker.quorum_voters.is_empty() && !broker.auto_join);
        let both = err(&[("process.roles", "broker"), ("controller.quorum.voters", "1@127.0.1.1:9093"), boot]);
        assert!(both.is_some_and(|m| m.contains("not both")));
        let any_host = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://0.0.0.0:9093";
        let unreachable = err(&[("listeners", any_host), boot]);
        assert!(unreachable.is_some_and(|m| m.contains("advertised.listeners")));
        let c = BrokerConfig::from_map(map(&[
            ("listeners", any_host),
            ("advertised.listeners", "PLAINTEXT://10.0.0.1:9092,CONTROLLER://node-1.example:9093"),
            ("controller.quorum.auto.join.enable", "true"),
            boot,
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.controller_advertised.as_deref(), Some("node-1.example:9093"));
        assert_eq!(c.advertised_listeners.len(), 1, "the CONTROLLER entry is not a client listener");
        assert!(c.auto_join);
        assert!(err(&[("controller.quorum.bootstrap.servers", "nohost")]).is_some_and(|m| m.contains("host:port")));
    }

    #[test]
    fn properties_format() {
        let p = parse_properties("# c\n! c\na=1\nb : 2\nc=x\\\n  y\nd\n");
        assert_eq!(p.get("a").map(String::as_str), Some("1"));
        assert_eq!(p.get("b").map(String::as_str), Some("2"));
        assert_eq!(p.get("c").map(String::as_str), Some("xy"));
        assert_eq!(p.get("d").map(String::as_str), Some(""));
    }
}
