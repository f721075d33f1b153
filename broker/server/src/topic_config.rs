//! Topic-level configs: names, validation, the broker keys they default to, and resolution into
//! a [`LogConfig`]. DescribeConfigs answers from here with Kafka's sources and synonyms.

use std::collections::BTreeMap;

use oxbow_log::{LogConfig, TargetCompression};

use crate::config::{BrokerConfig, Kind};

/// DescribeConfigs config sources (Kafka's `ConfigSource`).
pub mod source {
    pub const DYNAMIC_TOPIC_CONFIG: i8 = 1;
    pub const DYNAMIC_BROKER_CONFIG: i8 = 2;
    pub const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
    pub const STATIC_BROKER_CONFIG: i8 = 4;
    pub const DEFAULT_CONFIG: i8 = 5;
}

/// One topic key.
#[derive(Debug, Clone, Copy)]
pub struct TopicKeyDef {
    pub name: &'static str,
    /// The broker key it defaults to (synonyms listed in precedence order by [`broker_synonyms`]);
    /// empty for a key with no broker default (its default is the empty value).
    pub broker_key: &'static str,
    pub kind: Kind,
    pub doc: &'static str,
}

const I32: i64 = i32::MAX as i64;
const LONG: i64 = i64::MAX;

pub const TOPIC_KEYS: &[TopicKeyDef] = &[
    TopicKeyDef {
        name: "cleanup.policy",
        broker_key: "log.cleanup.policy",
        kind: Kind::Choice(crate::config::CLEANUP),
        doc: "`delete` (retention by time and size), `compact` (keep the latest record of every key; records need keys), or both.",
    },
    TopicKeyDef {
        name: "compression.type",
        broker_key: "compression.type",
        kind: Kind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
        doc: "`producer` keeps batches as sent; other values recompress on append.",
    },
    TopicKeyDef {
        name: "flush.messages",
        broker_key: "log.flush.interval.messages",
        kind: Kind::Int { min: 1, max: LONG },
        doc: "fsync after this many unflushed records.",
    },
    TopicKeyDef {
        name: "flush.ms",
        broker_key: "log.flush.interval.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "fsync when the oldest unflushed write is this old.",
    },
    TopicKeyDef {
        name: "index.interval.bytes",
        broker_key: "log.index.interval.bytes",
        kind: Kind::Int { min: 0, max: I32 },
        doc: "Bytes between offset index entries.",
    },
    TopicKeyDef {
        name: "max.message.bytes",
        broker_key: "message.max.bytes",
        kind: Kind::Int { min: 0, max: I32 },
        doc: "Largest record batch accepted.",
    },
    TopicKeyDef {
        name: "message.timestamp.type",
        broker_key: "log.message.timestamp.type",
        kind: Kind::Choice(&["CreateTime", "LogAppendTime"]),
        doc: "Producer timestamps or broker append time.",
    },
    TopicKeyDef {
        name: "min.insync.replicas",
        broker_key: "min.insync.replicas",
        kind: Kind::Int { min: 1, max: I32 },
        doc: "In-sync replicas needed for acks=all.",
    },
    TopicKeyDef {
        name: "retention.bytes",
        broker_key: "log.retention.bytes",
        kind: Kind::Int { min: -1, max: LONG },
        doc: "Size limit per partition; -1 for none.",
    },
    TopicKeyDef {
        name: "retention.ms",
        broker_key: "log.retention.ms",
        kind: Kind::Int { min: -1, max: LONG },
        doc: "Age limit of sealed segments; -1 for none.",
    },
    TopicKeyDef {
        name: "segment.bytes",
        broker_key: "log.segment.bytes",
        kind: Kind::Int { min: 14, max: I32 },
        doc: "Segment size.",
    },
    TopicKeyDef {
        name: "segment.index.bytes",
        broker_key: "log.index.size.max.bytes",
        kind: Kind::Int { min: 12, max: I32 },
        doc: "Preallocated index size.",
    },
    TopicKeyDef {
        name: "segment.ms",
        broker_key: "log.roll.ms",
        kind: Kind::Int { min: 1, max: LONG },
        doc: "Roll a non-empty segment this old.",
    },
    TopicKeyDef {
        name: "message.timestamp.after.max.ms",
        broker_key: "log.message.timestamp.after.max.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Refuse CreateTime batches this far in the future.",
    },
    TopicKeyDef {
        name: "message.timestamp.before.max.ms",
        broker_key: "log.message.timestamp.before.max.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Refuse CreateTime batches this far in the past.",
    },
    TopicKeyDef {
        name: "delete.retention.ms",
        broker_key: "log.cleaner.delete.retention.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "How long tombstones stay in a compacted log.",
    },
    TopicKeyDef {
        name: "min.compaction.lag.ms",
        broker_key: "log.cleaner.min.compaction.lag.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Records younger than this are not compacted.",
    },
    TopicKeyDef {
        name: "max.compaction.lag.ms",
        broker_key: "log.cleaner.max.compaction.lag.ms",
        kind: Kind::Int { min: 1, max: LONG },
        doc: "Uncleaned records older than this are compacted whatever the dirty ratio.",
    },
    TopicKeyDef {
        name: "min.cleanable.dirty.ratio",
        broker_key: "log.cleaner.min.cleanable.ratio",
        kind: Kind::Ratio,
        doc: "Share of uncleaned bytes that triggers a compaction pass.",
    },
    TopicKeyDef {
        name: "file.delete.delay.ms",
        broker_key: "log.segment.delete.delay.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Accepted; segments are deleted at once.",
    },
    TopicKeyDef {
        name: "preallocate",
        broker_key: "log.preallocate",
        kind: Kind::Bool,
        doc: "Accepted; segments are not preallocated.",
    },
    TopicKeyDef {
        name: "segment.jitter.ms",
        broker_key: "log.roll.jitter.ms",
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Accepted; no jitter yet.",
    },
    TopicKeyDef {
        name: "leader.replication.throttled.replicas",
        broker_key: "",
        kind: Kind::ThrottledReplicas,
        doc: "Replicas (`partition:broker`, or `*` for all) whose leader throttles what it sends to followers not in the ISR to its `leader.replication.throttled.rate`; `kafka-reassign-partitions --throttle` sets it to the current replicas of moving partitions.",
    },
    TopicKeyDef {
        name: "follower.replication.throttled.replicas",
        broker_key: "",
        kind: Kind::ThrottledReplicas,
        doc: "Replicas (`partition:broker`, or `*` for all) that fetch from their leader at no more than their broker's `follower.replication.throttled.rate` while not in the ISR; `kafka-reassign-partitions --throttle` sets it to the replicas a move adds.",
    },
    TopicKeyDef {
        name: "unclean.leader.election.enable",
        broker_key: "unclean.leader.election.enable",
        kind: Kind::Bool,
        doc: "Allow unclean leader election (with replication).",
    },
];

pub fn topic_key(name: &str) -> Option<&'static TopicKeyDef> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}

/// Broker keys a topic key falls back to, in precedence order.
pub fn broker_synonyms(topic_key: &str) -> &'static [&'static str] {
    match topic_key {
        "retention.ms" => &["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
        "segment.ms" => &["log.roll.ms", "log.roll.hours"],
        "cleanup.policy" => &["log.cleanup.policy"],
        "compression.type" => &["compression.type"],
        "flush.messages" => &["log.flush.interval.messages"],
        "flush.ms" => &["log.flush.interval.ms"],
        "index.interval.bytes" => &["log.index.interval.bytes"],
        "max.message.bytes" => &["message.max.bytes"],
        "message.timestamp.type" => &["log.message.timestamp.type"],
        "min.insync.replicas" => &["min.insync.replicas"],
        "retention.bytes" => &["log.retention.bytes"],
        "segment.bytes" => &["log.segment.bytes"],
        "segment.index.bytes" => &["log.index.size.max.bytes"],
        "unclean.leader.election.enable" => &["unclean.leader.election.enable"],
        "message.timestamp.after.max.ms" => &["log.message.timestamp.after.max.ms"],
        "message.timestamp.before.max.ms" => &["log.message.timestamp.before.max.ms"],
        "delete.retention.ms" => &["log.cleaner.delete.retention.ms"],
        "min.compaction.lag.ms" => &["log.cleaner.min.compaction.lag.ms"],
        "max.compaction.lag.ms" => &["log.cleaner.max.compaction.lag.ms"],
        "min.cleanable.dirty.ratio" => &["log.cleaner.min.cleanable.ratio"],
        "file.delete.delay.ms" => &["log.segment.delete.delay.ms"],
        "preallocate" => &["log.preallocate"],
        "segment.jitter.ms" => &["log.roll.jitter.ms"],
        _ => &[],
    }
}

/// Broker keys that are not topic defaults but can change at runtime too: the replication
/// throttles (`kafka-reassign-partitions --throttle` sets them per broker).
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// Broker keys that can change at runtime (IncrementalAlterConfigs on a BROKER resource, the
/// cluster-wide default or one broker): the defaults of topic configs and the replication
/// throttles. Everything else needs a restart.
pub fn is_dynamic_broker_key(key: &str) -> bool {
    crate::config::key_def(key).is_some()
        && (DYNAMIC_BROKER_KEYS.contains(&key) || TOPIC_KEYS.iter().any(|t| broker_synonyms(t.name).contains(&key)))
}

/// Why a topic config was refused (maps to INVALID_CONFIG).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidTopicConfig(pub String);

/// Validates one `key=value` for a topic.
pub fn validate(key: &str, value: Option<&str>) -> Result<(), InvalidTopicConfig> {
    let def = topic_key(key).ok_or_else(|| InvalidTopicConfig(format!("unknown topic config {key:?}")))?;
    let value = value.ok_or_else(|| InvalidTopicConfig(format!("{key}: null value")))?;
    if !def.kind.check(value) {
        return Err(InvalidTopicConfig(format!("invalid value {value:?} for {key}: expected {}", def.kind.accepted())));
    }
    Ok(())
}

/// The broker-derived default of a topic key, as a string.
pub fn broker_default(broker: &BrokerConfig, key: &str) -> String {
    let l = &broker.log;
    match key {
        "retention.ms" => l.retention_ms.to_string(),
        "segment.ms" => l.segment_ms.to_string(),
        "flush.ms" => l.flush_ms.to_string(),
        "min.insync.replicas" => broker.min_insync_replicas.to_string(),
        _ => broker_synonyms(key).first().and_then(|k| broker.values.get(k).cloned().flatten()).unwrap_or_default(),
    }
}

/// Effective log settings of a topic: its overrides over the broker's defaults.
pub fn resolve(broker: &BrokerConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let mut c = broker.log.clone();
    let int = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(v) = int("segment.bytes") {
        c.segment_bytes = v as u64;
    }
    if let Some(v) = int("segment.ms") {
        c.segment_ms = v;
    }
    if let Some(v) = int("retention.ms") {
        c.retention_ms = v;
    }
    if let Some(v) = int("retention.bytes") {
        c.retention_bytes = v;
    }
    if let Some(v) = int("index.interval.bytes") {
        c.index_interval_bytes = v as u64;
    }
    if let Some(v) = int("segment.index.bytes") {
        c.segment_index_bytes = v as u64;
    }
    if let Some(v) = int("flush.messages") {
        c.flush_messages = v;
    }
    if let Some(v) = int("flush.ms") {
        c.flush_ms = v;
    }
    if let Some(v) = int("max.message.bytes") {
        c.max_message_bytes = v as usize;
    }
    if let Some(v) = int("message.timestamp.after.max.ms") {
        c.timestamp_after_max_ms = v;
    }
    if let Some(v) = int("message.timestamp.before.max.ms") {
        c.timestamp_before_max_ms = v;
    }
    if let Some(v) = overrides.get("compression.type").and_then(|v| TargetCompression::parse(v.trim())) {
        c.compression = v;
    }
    if let Some(v) = overrides.get("cleanup.policy") {
        c.cleanup_delete = v.split(',').any(|p| p.trim() == "delete");
        c.cleanup_compact = v.split(',').any(|p| p.trim() == "compact");
    }
    if let Some(v) = int("delete.retention.ms") {
        c.delete_retention_ms = v;
    }
    if let Some(v) = int("min.compaction.lag.ms") {
        c.min_compaction_lag_ms = v;
    }
    if let Some(v) = int("max.compaction.lag.ms") {
        c.max_compaction_lag_ms = v;
    }
    if let Some(v) = overrides.get("min.cleanable.dirty.ratio").and_then(|v| v.trim().parse::<f64>().ok()) {
        c.min_cleanable_dirty_ratio = v;
    }
    if let Some(v) = overrides.get("message.timestamp.type") {
        c.log_append_time = v.trim() == "LogAppendTime";
    }
    c
}

/// The min.insync.replicas in force for a topic.
pub fn min_insync(broker: &BrokerConfig, overrides: &BTreeMap<String, String>) -> i32 {
    overrides.get("min.insync.replicas").and_then(|v| v.parse().ok()).unwrap_or(broker.min_insync_replicas)
}

/// The partitions of a topic whose replication a broker throttles, from the topic's
/// `leader.replication.throttled.replicas` or `follower.replication.throttled.replicas`: only
/// the entries naming that broker count (Kafka's rule), `*` means every partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Throttled {
    #[default]
    None,
    All,
    Partitions(std::collections::BTreeSet<i32>),
}

impl Throttled {
    pub fn parse(value: &str, broker: i32) -> Throttled {
        if value.trim() == "*" {
            return Throttled::All;
        }
        let parts: std::collections::BTreeSet<i32> = value
            .split(',')
            .filter_map(|e| e.trim().split_once(':'))
            .filter(|(_, b)| b.trim().parse::<i32>().ok() == Some(broker))
            .filter_map(|(p, _)| p.trim().parse().ok())
            .collect();
        if parts.is_empty() { Throttled::None } else { Throttled::Partitions(parts) }
    }

    /// From a topic's configs (`key` absent: none).
    pub fn of(configs: &BTreeMap<String, String>, key: &str, broker: i32) -> Throttled {
        configs.get(key).map_or(Throttled::None, |v| Throttled::parse(v, broker))
    }

    pub fn contains(&self, partition: i32) -> bool {
        match self {
            Throttled::None => false,
            Throttled::All => true,
            Throttled::Partitions(p) => p.contains(&partition),
        }
    }
}

/// One DescribeConfigs entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub name: &'static str,
    pub value: String,
    pub source: i8,
    pub config_type: i8,
    pub doc: &'static str,
    /// (name, value, source), most specific first.
    pub synonyms: Vec<(String, String, i8)>,
}

/// Describes a topic's configs: every key (or those in `only`), with sources and synonyms.
pub fn describe(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    only: Option<&[String]>,
) -> Vec<Described> {
    let mut out = Vec::new();
    for def in TOPIC_KEYS {
        if only.is_some_and(|o| !o.iter().any(|k| k == def.name)) {
            continue;
        }
        let mut synonyms = Vec::new();
        if let Some(v) = overrides.get(def.name) {
            synonyms.push((def.name.to_string(), v.clone(), source::DYNAMIC_TOPIC_CONFIG));
        }
        for bk in broker_synonyms(def.name) {
            if let Some(v) = broker.explicit.get(*bk) {
                synonyms.push((bk.to_string(), v.clone(), source::STATIC_BROKER_CONFIG));
            }
        }
        let main_broker_key = broker_synonyms(def.name).first().copied().unwrap_or(def.broker_key);
        if !main_broker_key.is_empty() {
            let default = crate::config::key_def(main_broker_key)
                .and_then(|k| k.default)
                .map(str::to_string)
                .unwrap_or_else(|| broker_default(broker, def.name));
            synonyms.push((main_broker_key.to_string(), default, source::DEFAULT_CONFIG));
        }
        let (value, source) = match overrides.get(def.name) {
            Some(v) => (v.clone(), source::DYNAMIC_TOPIC_CONFIG),
            None => {
                let explicit = broker_synonyms(def.name).iter().any(|k| broker.explicit.contains_key(*k));
                (
                    broker_default(broker, def.name),
                    if explicit { source::STATIC_BROKER_CONFIG } else { source::DEFAULT_CONFIG },
                )
            }
        };
        out.push(Described {
            name: def.name,
            value,
            source,
            config_type: def.kind.config_type(),
            doc: def.doc,
            synonyms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_sources() {
        let broker = BrokerConfig::default_for_tests();
        let mut o = BTreeMap::new();
        o.insert("retention.ms".to_string(), "1000".to_string());
        o.insert("segment.bytes".to_string(), "20000".to_string());
        let c = resolve(&broker, &o);
        assert_eq!((c.retention_ms, c.segment_bytes), (1000, 20000));
        let d = describe(&broker, &o, None);
        let r = d.iter().find(|e| e.name == "retention.ms");
        assert_eq!(r.map(|e| (e.value.as_str(), e.source)), Some(("1000", source::DYNAMIC_TOPIC_CONFIG)));
        let s = d.iter().find(|e| e.name == "max.message.bytes");
        assert_eq!(s.map(|e| (e.value.as_str(), e.source)), Some(("1048588", source::DEFAULT_CONFIG)));
        assert_eq!(d.len(), TOPIC_KEYS.len());
    }

    #[test]
    fn validation() {
        assert!(validate("retention.ms", Some("-1")).is_ok());
        assert!(validate("retention.ms", Some("x")).is_err());
        assert!(validate("no.such", Some("1")).is_err());
        assert!(validate("cleanup.policy", Some("compact")).is_ok());
        assert!(validate("cleanup.policy", Some("compact,delete")).is_ok());
        assert!(validate("cleanup.policy", Some("shred")).is_err());
        // What kafka-reassign-partitions sets (the follower list may be empty).
        for ok in ["*", "", "0:1,1:2", " 0:1 , 1:2 "] {
            assert!(validate("leader.replication.throttled.replicas", Some(ok)).is_ok(), "{ok:?}");
        }
        for bad in ["x", "0:", ":1", "0-1", "*,0:1"] {
            assert!(validate("follower.replication.throttled.replicas", Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn throttled_replicas_are_those_naming_this_broker() {
        assert_eq!(Throttled::parse("*", 2), Throttled::All);
        assert_eq!(Throttled::parse("", 2), Throttled::None);
        let t = Throttled::parse("0:1,0:2, 3:2,1:3", 2);
        assert!(t.contains(0) && t.contains(3) && !t.contains(1));
        assert_eq!(Throttled::parse("0:1", 2), Throttled::None);
    }
}
