//! Broker configuration in Kafka's `server.properties` format and key names.
//!
//! [`KEYS`] is the single table of supported keys: name, default, accepted values and
//! documentation. Parsing, validation, `--help` and `docs/configuration.md` all come from it.
//! Values are validated once, at startup; a bad value stops the broker with a [`ConfigError`]
//! naming the key and what it accepts. Unknown keys produce a warning.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use oxbow_log::{LogConfig, TargetCompression};

/// What a key accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    Bool,
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of `NAME://host:port` listeners.
    Listeners,
    /// A comma-separated list of paths.
    Paths,
    /// A decimal number in `[0, 1]`.
    Ratio,
    /// `ip:port` (an IP literal), or empty for "off".
    SocketAddr,
    /// `id@host:port,...` (controller.quorum.voters).
    Voters,
    /// `host:port,...` (controller.quorum.bootstrap.servers).
    HostPorts,
    /// A comma-separated list of names.
    Names,
    /// A non-empty word of ASCII letters, digits, '-' and '_' (cluster.id).
    Word,
    /// A label value (ASCII letters, digits, '-', '_', '.'), or empty for none (broker.rack:
    /// a zone or region name).
    Label,
    /// `*`, or a comma-separated list of `partition:broker` (possibly empty): the replicas a
    /// replication throttle applies to (`leader.replication.throttled.replicas`, ...).
    ThrottledReplicas,
}

impl Kind {
    pub fn accepted(&self) -> String {
        match self {
            Kind::Int { min, max } if *max == i64::MAX => format!("an integer >= {min}"),
            Kind::Int { min, max } if *max == i64::from(i32::MAX) => format!("an integer in [{min}, {max}] (2^31-1)"),
            Kind::Int { min, max } => format!("an integer in [{min}, {max}]"),
            Kind::Bool => "true or false".into(),
            Kind::Choice(c) => format!("one of: {}", c.join(", ")),
            Kind::Listeners => {
                "a comma-separated list of NAME://host:port (host may be empty or an IP literal; port 0..65535)".into()
            }
            Kind::Paths => "a comma-separated list of directories".into(),
            Kind::Ratio => "a decimal number in [0, 1]".into(),
            Kind::SocketAddr => "ip:port with an IP literal (e.g. 0.0.0.0:8080), or empty to disable".into(),
            Kind::Voters => "a comma-separated list of id@host:port (e.g. 1@127.0.1.1:9093,2@127.0.1.2:9093)".into(),
            Kind::HostPorts => "a comma-separated list of host:port (e.g. 127.0.1.1:9093,127.0.1.2:9093)".into(),
            Kind::Names => "a comma-separated list of listener names".into(),
            Kind::Word => "a non-empty string of ASCII letters, digits, '-' and '_'".into(),
            Kind::Label => "ASCII letters, digits, '-', '_' and '.', or empty for none".into(),
            Kind::ThrottledReplicas => "the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...".into(),
        }
    }

    /// Kafka's DescribeConfigs config type: BOOLEAN=1, STRING=2, INT=3, LONG=5, LIST=7.
    pub fn config_type(&self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Int { max, .. } if *max <= i64::from(i32::MAX) => 3,
            Kind::Int { .. } => 5,
            Kind::Choice(_) | Kind::SocketAddr | Kind::Word | Kind::Label => 2,
            Kind::Listeners | Kind::Paths | Kind::Voters | Kind::HostPorts | Kind::Names | Kind::ThrottledReplicas => 7,
            Kind::Ratio => 6,
        }
    }

    pub fn check(&self, value: &str) -> bool {
        match self {
            Kind::Int { min, max } => value.trim().parse::<i64>().is_ok_and(|v| v >= *min && v <= *max),
            Kind::Bool => matches!(value.trim(), "true" | "false"),
            Kind::Choice(c) => c.contains(&value.trim()),
            Kind::Listeners => parse_listeners(value).is_ok(),
            Kind::Paths => value.split(',').all(|p| !p.trim().is_empty()),
            Kind::Ratio => value.trim().parse::<f64>().is_ok_and(|v| (0.0..=1.0).contains(&v)),
            Kind::SocketAddr => value.trim().is_empty() || value.trim().parse::<std::net::SocketAddr>().is_ok(),
            Kind::Voters => parse_voters(value).is_ok(),
            Kind::HostPorts => parse_host_ports(value).is_ok(),
            Kind::Names => value.split(',').all(|p| !p.trim().is_empty()),
            Kind::Word => {
                !value.trim().is_empty()
                    && value.trim().bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            }
            Kind::Label => value.trim().bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')),
            Kind::ThrottledReplicas => {
                let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
                value.trim() == "*"
                    || value
                        .split(',')
                        .map(str::trim)
                        .all(|e| e.is_empty() || e.split_once(':').is_some_and(|(p, b)| digits(p) && digits(b)))
            }
        }
    }
}

/// One supported key.
#[derive(Debug, Clone, Copy)]
pub struct KeyDef {
    pub name: &'static str,
    /// `None`: no default (derived from another key, or unset).
    pub default: Option<&'static str>,
    pub kind: Kind,
    pub doc: &'static str,
}

const I32: i64 = i32::MAX as i64;
const LONG: i64 = i64::MAX;

const COMPRESSION: &[&str] = &["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
/// `cleanup.policy` values (both: compacted, and old segments deleted by retention).
pub const CLEANUP: &[&str] = &["delete", "compact", "compact,delete", "delete,compact"];

const ROLES: &[&str] = &["broker,controller", "controller,broker", "broker", "controller"];

/// Every broker key Oxbow understands, with Kafka's defaults.
pub const KEYS: &[KeyDef] = &[
    KeyDef {
        name: "node.id",
        default: Some("1"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "This node's id. `broker.id` is accepted as a synonym.",
    },
    KeyDef {
        name: "process.roles",
        default: Some("broker,controller"),
        kind: Kind::Choice(ROLES),
        doc: "`broker,controller` (combined: serves clients and is a metadata quorum voter), `broker` (serves clients and follows the metadata of the voters in `controller.quorum.voters`) or `controller` (a dedicated quorum voter: no client listener, never registers as a broker, leads no partition; its `listeners` hold only the CONTROLLER listener).",
    },
    KeyDef {
        name: "controller.quorum.voters",
        default: None,
        kind: Kind::Voters,
        doc: "The metadata quorum's initial voters, `id@host:port` of each one's CONTROLLER listener. Unset on a combined node: a single-node quorum of this node alone. A controller not in the list starts as an observer and becomes a voter through AddRaftVoter (KIP-853); the membership then lives in the metadata log.",
    },
    KeyDef {
        name: "controller.quorum.bootstrap.servers",
        default: None,
        kind: Kind::HostPorts,
        doc: "Dynamic quorum (KIP-853): `host:port` of some controllers' CONTROLLER listeners, used to find the active controller. The voters then live in the metadata log: the first ones are set once by `oxbow-broker format --standalone` or `--initial-controllers`, later ones join through AddRaftVoter (or `controller.quorum.auto.join.enable`). Set this or `controller.quorum.voters`, not both. Needs `cluster.id` (in this file, or written by `oxbow-broker format`).",
    },
    KeyDef {
        name: "controller.quorum.auto.join.enable",
        default: Some("false"),
        kind: Kind::Bool,
        doc: "With `controller.quorum.bootstrap.servers`: a controller that is not a voter asks the active controller to add it (AddRaftVoter, with its advertised CONTROLLER address) once per start, after it has caught up as a learner.",
    },
    KeyDef {
        name: "controller.listener.names",
        default: Some("CONTROLLER"),
        kind: Kind::Names,
        doc: "Names in `listeners` that are controller listeners (metadata quorum traffic, gRPC); the first is used.",
    },
    KeyDef {
        name: "controller.quorum.election.timeout.ms",
        default: Some("1000"),
        kind: Kind::Int { min: 100, max: I32 },
        doc: "A voter that hears no leader for between this and twice this long starts an election.",
    },
    KeyDef {
        name: "cluster.id",
        default: None,
        kind: Kind::Word,
        doc: "The cluster's id, written to every log dir's meta.properties on first start; a node whose stored id differs refuses to start. Required with more than one voter; a single node generates one.",
    },
    KeyDef {
        name: "metadata.log.dir",
        default: None,
        kind: Kind::Paths,
        doc: "Where the metadata quorum's log and snapshots (RocksDB) live. Defaults to the first of `log.dirs`.",
    },
    KeyDef {
        name: "metadata.log.max.record.bytes.between.snapshots",
        default: Some("20971520"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "Write a metadata snapshot (and let the log before it be purged) after this many bytes of records.",
    },
    KeyDef {
        name: "replica.lag.time.max.ms",
        default: Some("30000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "A follower that has not fetched up to its leader's log end for this long leaves the ISR.",
    },
    KeyDef {
        name: "replica.high.watermark.checkpoint.interval.ms",
        default: Some("5000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "How often every partition's high watermark is written to `replication-offset-checkpoint` in each log dir (and at shutdown). A restarted replica shows consumers no more than that until its leader, or as leader its ISR, confirms more.",
    },
    KeyDef {
        name: "leader.replication.throttled.rate",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Bytes per second this broker sends, as a leader, to followers of the replicas its topics list in `leader.replication.throttled.replicas` that are not in the ISR (Kafka's replication throttle, set by `kafka-reassign-partitions --throttle`). Meant to be set dynamically, per broker (IncrementalAlterConfigs on the BROKER resource of its id) or cluster-wide; the default is no limit.",
    },
    KeyDef {
        name: "follower.replication.throttled.rate",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Bytes per second this broker fetches, as a follower, for the replicas its topics list in `follower.replication.throttled.replicas` while it is not in their ISR. Set dynamically like `leader.replication.throttled.rate`; the default is no limit.",
    },
    KeyDef {
        name: "replica.alter.log.dirs.io.max.bytes.per.second",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Accepted (dynamically too, as `kafka-reassign-partitions` sets and clears it); Oxbow does not move replicas between log dirs of one broker.",
    },
    KeyDef {
        name: "replication.quota.window.num",
        default: Some("11"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Samples the replication throttles measure their rate over (the current one and the whole ones before it).",
    },
    KeyDef {
        name: "replication.quota.window.size.seconds",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Length of one replication throttle sample.",
    },
    KeyDef {
        name: "broker.heartbeat.interval.ms",
        default: Some("2000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "How often a broker heartbeats to the active controller.",
    },
    KeyDef {
        name: "broker.session.timeout.ms",
        default: Some("9000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The active controller fences a broker that has not heartbeated for this long; its partitions get new leaders from their ISR.",
    },
    KeyDef {
        name: "broker.rack",
        default: None,
        kind: Kind::Label,
        doc: "This broker's rack (or zone): replicas of a partition are placed on different racks where possible. Empty means none (on Kubernetes, a pod whose node has no zone label).",
    },
    KeyDef {
        name: "num.recovery.threads.per.data.dir",
        default: Some("2"),
        kind: Kind::Int { min: 1, max: 64 },
        doc: "Threads that open (and after a crash, recover) partition logs at startup, per log dir (Kafka 4's default, 2).",
    },
    KeyDef {
        name: "listeners",
        default: Some("PLAINTEXT://127.0.0.1:9092"),
        kind: Kind::Listeners,
        doc: "Addresses to listen on. Port 0 picks a free port.",
    },
    KeyDef {
        name: "advertised.listeners",
        default: None,
        kind: Kind::Listeners,
        doc: "Addresses given to clients in Metadata. Defaults to `listeners`.",
    },
    KeyDef {
        name: "log.dirs",
        default: Some("./oxbow-data"),
        kind: Kind::Paths,
        doc: "Directories holding partition logs (`log.dir` is a synonym). Partitions are spread across them.",
    },
    KeyDef {
        name: "num.partitions",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Partitions of auto-created topics and of CreateTopics requests that give -1.",
    },
    KeyDef {
        name: "default.replication.factor",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: 32767 },
        doc: "Replication factor of auto-created topics.",
    },
    KeyDef {
        name: "auto.create.topics.enable",
        default: Some("true"),
        kind: Kind::Bool,
        doc: "Create a topic when a Metadata request names one that does not exist (and the client allows it).",
    },
    KeyDef { name: "delete.topic.enable", default: Some("true"), kind: Kind::Bool, doc: "Allow DeleteTopics." },
    KeyDef {
        name: "log.segment.bytes",
        default: Some("1073741824"),
        kind: Kind::Int { min: 14, max: I32 },
        doc: "Roll to a new segment when the active one would pass this size.",
    },
    KeyDef {
        name: "log.roll.ms",
        default: None,
        kind: Kind::Int { min: 1, max: LONG },
        doc: "Roll a non-empty segment this old (wall clock since its creation). Defaults to `log.roll.hours`.",
    },
    KeyDef {
        name: "log.roll.hours",
        default: Some("168"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "`log.roll.ms` in hours.",
    },
    KeyDef {
        name: "log.retention.ms",
        default: None,
        kind: Kind::Int { min: -1, max: LONG },
        doc: "Delete sealed segments whose newest record is older than this; -1 keeps them. Defaults to `log.retention.minutes`, then `log.retention.hours`.",
    },
    KeyDef {
        name: "log.retention.minutes",
        default: None,
        kind: Kind::Int { min: -1, max: I32 },
        doc: "`log.retention.ms` in minutes.",
    },
    KeyDef {
        name: "log.retention.hours",
        default: Some("168"),
        kind: Kind::Int { min: -1, max: I32 },
        doc: "`log.retention.ms` in hours.",
    },
    KeyDef {
        name: "log.retention.bytes",
        default: Some("-1"),
        kind: Kind::Int { min: -1, max: LONG },
        doc: "Delete the oldest sealed segments while a partition is larger than this; -1 for no limit.",
    },
    KeyDef {
        name: "log.retention.check.interval.ms",
        default: Some("300000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "How often retention (and time-based rolling) is checked.",
    },
    KeyDef {
        name: "log.index.interval.bytes",
        default: Some("4096"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "Bytes of log between two offset index entries.",
    },
    KeyDef {
        name: "log.index.size.max.bytes",
        default: Some("10485760"),
        kind: Kind::Int { min: 12, max: I32 },
        doc: "Preallocated size of each index file; a full index rolls the segment.",
    },
    KeyDef {
        name: "log.flush.interval.messages",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "fsync a partition once this many records are unflushed. 1 = fsync before every acknowledgement.",
    },
    KeyDef {
        name: "log.flush.interval.ms",
        default: None,
        kind: Kind::Int { min: 0, max: LONG },
        doc: "fsync a partition when its oldest unflushed write is this old. Unset: never by time.",
    },
    KeyDef {
        name: "log.flush.scheduler.interval.ms",
        default: Some("1000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "How often `log.flush.interval.ms` is checked, and sealed segments are synced in the background.",
    },
    KeyDef {
        name: "log.flush.offset.checkpoint.interval.ms",
        default: Some("60000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "How often recovery points, log start offsets and high watermarks are checkpointed.",
    },
    KeyDef {
        name: "log.cleanup.policy",
        default: Some("delete"),
        kind: Kind::Choice(CLEANUP),
        doc: "`delete` (segments past retention are deleted), `compact` (the log cleaner keeps the latest record of every key), or both.",
    },
    KeyDef {
        name: "log.message.timestamp.type",
        default: Some("CreateTime"),
        kind: Kind::Choice(TIMESTAMP_TYPES),
        doc: "Keep producers' timestamps, or stamp batches with the broker's time.",
    },
    KeyDef {
        name: "compression.type",
        default: Some("producer"),
        kind: Kind::Choice(COMPRESSION),
        doc: "`producer` stores batches as sent; any other value recompresses them on append.",
    },
    KeyDef {
        name: "message.max.bytes",
        default: Some("1048588"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "Largest record batch accepted (after recompression).",
    },
    KeyDef {
        name: "log.message.timestamp.after.max.ms",
        default: Some("3600000"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "CreateTime batches whose newest timestamp is further than this in the future are refused (INVALID_TIMESTAMP).",
    },
    KeyDef {
        name: "log.message.timestamp.before.max.ms",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "CreateTime batches whose first timestamp is older than this are refused (INVALID_TIMESTAMP).",
    },
    KeyDef {
        name: "log.cleaner.delete.retention.ms",
        default: Some("86400000"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "How long a tombstone (a null value) is kept in a compacted log after it was written, so consumers can see the delete.",
    },
    KeyDef {
        name: "log.cleaner.min.compaction.lag.ms",
        default: Some("0"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Segments with records younger than this are not compacted.",
    },
    KeyDef {
        name: "log.cleaner.max.compaction.lag.ms",
        default: Some("9223372036854775807"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "A compacted log whose uncleaned records are older than this is cleaned whatever its dirty ratio.",
    },
    KeyDef {
        name: "log.cleaner.min.cleanable.ratio",
        default: Some("0.5"),
        kind: Kind::Ratio,
        doc: "A compacted log is cleaned when its uncleaned (dirty) bytes are at least this share of the cleanable part.",
    },
    KeyDef {
        name: "log.cleaner.enable",
        default: Some("true"),
        kind: Kind::Bool,
        doc: "Run the log cleaner (compaction of `cleanup.policy=compact` topics, `__consumer_offsets` among them).",
    },
    KeyDef {
        name: "log.cleaner.backoff.ms",
        default: Some("15000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "How often the log cleaner looks for compacted logs to clean.",
    },
    KeyDef {
        name: "log.segment.delete.delay.ms",
        default: Some("60000"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Accepted and reported; segments are deleted at once (readers keep their open file handle).",
    },
    KeyDef {
        name: "log.preallocate",
        default: Some("false"),
        kind: Kind::Bool,
        doc: "Accepted and reported; segment files are not preallocated (indexes always are).",
    },
    KeyDef {
        name: "log.roll.jitter.ms",
        default: Some("0"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "Accepted and reported; no jitter is applied to segment.ms yet.",
    },
    KeyDef {
        name: "min.insync.replicas",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Replicas that must be in sync for an acks=all produce to succeed.",
    },
    KeyDef {
        name: "unclean.leader.election.enable",
        default: Some("false"),
        kind: Kind::Bool,
        doc: "Allow an out-of-sync replica to become leader (used once replication exists).",
    },
    KeyDef {
        name: "producer.id.expiration.ms",
        default: Some("86400000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Forget an idempotent producer's sequence state this long after its last write.",
    },
    KeyDef {
        name: "group.min.session.timeout.ms",
        default: Some("6000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The smallest `session.timeout.ms` a consumer group member may ask for (else INVALID_SESSION_TIMEOUT).",
    },
    KeyDef {
        name: "group.max.session.timeout.ms",
        default: Some("1800000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The largest `session.timeout.ms` a consumer group member may ask for (else INVALID_SESSION_TIMEOUT).",
    },
    KeyDef {
        name: "group.initial.rebalance.delay.ms",
        default: Some("3000"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "How long the first rebalance of an empty group waits for more members, extended by the same delay while members keep arriving (up to the rebalance timeout).",
    },
    KeyDef {
        name: "group.max.size",
        default: Some("2147483647"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The most members a consumer group may have (else GROUP_MAX_SIZE_REACHED).",
    },
    KeyDef {
        name: "group.coordinator.rebalance.protocols",
        default: Some("classic,consumer"),
        kind: Kind::Names,
        doc: "Group protocols the coordinator serves: `classic` (JoinGroup/SyncGroup) and `consumer` (KIP-848 ConsumerGroupHeartbeat, advertised only when listed). `classic` is required.",
    },
    KeyDef {
        name: "group.consumer.session.timeout.ms",
        default: Some("45000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Consumer protocol (KIP-848) groups: a member that has not heartbeated for this long is removed and its partitions reassigned.",
    },
    KeyDef {
        name: "group.consumer.min.session.timeout.ms",
        default: Some("45000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Lower bound of `group.consumer.session.timeout.ms`.",
    },
    KeyDef {
        name: "group.consumer.max.session.timeout.ms",
        default: Some("60000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Upper bound of `group.consumer.session.timeout.ms`.",
    },
    KeyDef {
        name: "group.consumer.heartbeat.interval.ms",
        default: Some("5000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Consumer protocol groups: the heartbeat interval the coordinator gives its members. Members learn of a new assignment at their next heartbeat, so this bounds how fast a rebalance reaches them.",
    },
    KeyDef {
        name: "group.consumer.min.heartbeat.interval.ms",
        default: Some("5000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Lower bound of `group.consumer.heartbeat.interval.ms`.",
    },
    KeyDef {
        name: "group.consumer.max.heartbeat.interval.ms",
        default: Some("15000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Upper bound of `group.consumer.heartbeat.interval.ms`.",
    },
    KeyDef {
        name: "group.consumer.max.size",
        default: Some("2147483647"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The most members a consumer protocol group may have (else GROUP_MAX_SIZE_REACHED).",
    },
    KeyDef {
        name: "group.consumer.assignors",
        default: Some("uniform,range"),
        kind: Kind::Names,
        doc: "Server-side assignors for consumer protocol groups, from `uniform` (balanced and sticky) and `range` (co-partitioned ranges); the first is the default. A member naming another gets UNSUPPORTED_ASSIGNOR.",
    },
    KeyDef {
        name: "offsets.topic.num.partitions",
        default: Some("50"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Partitions of `__consumer_offsets`, created on the first FindCoordinator. A group's coordinator is the leader of partition `abs(hash(group.id)) % partitions`; do not change it once the topic exists.",
    },
    KeyDef {
        name: "offsets.topic.replication.factor",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: 32767 },
        doc: "Replication factor of `__consumer_offsets`. Apache Kafka defaults to 3; Oxbow defaults to 1 so that one node works with no setup. With fewer registered brokers, the topic is not created and group coordinators stay unavailable.",
    },
    KeyDef {
        name: "offsets.topic.segment.bytes",
        default: Some("104857600"),
        kind: Kind::Int { min: 14, max: I32 },
        doc: "Segment size of `__consumer_offsets`.",
    },
    KeyDef {
        name: "offsets.retention.minutes",
        default: Some("10080"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Committed offsets of a group that has been empty this long are deleted (for a group that never had members: this long after the commit).",
    },
    KeyDef {
        name: "offsets.retention.check.interval.ms",
        default: Some("600000"),
        kind: Kind::Int { min: 1, max: LONG },
        doc: "How often expired offsets are looked for.",
    },
    KeyDef {
        name: "offset.metadata.max.bytes",
        default: Some("4096"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "The largest metadata string an offset commit may carry (else OFFSET_METADATA_TOO_LARGE).",
    },
    KeyDef {
        name: "offsets.commit.timeout.ms",
        default: Some("5000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "How long an offset commit waits for `__consumer_offsets`' in-sync replicas before it fails with REQUEST_TIMED_OUT.",
    },
    KeyDef {
        name: "socket.request.max.bytes",
        default: Some("104857600"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Largest request frame; larger frames close the connection before any allocation.",
    },
    KeyDef {
        name: "queued.max.requests",
        default: Some("500"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Requests being processed across all connections; readers wait beyond this.",
    },
    KeyDef {
        name: "queued.max.request.bytes",
        default: Some("536870912"),
        kind: Kind::Int { min: -1, max: LONG },
        doc: "Bytes of requests being processed across all connections; readers wait beyond this; -1: no limit. Oxbow's default (512 MiB) bounds memory where Kafka's (-1) does not.",
    },
    KeyDef {
        name: "max.connections",
        default: Some("2147483647"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Open client connections; further connections are closed at accept.",
    },
    KeyDef {
        name: "oxbow.max.inflight.requests.per.connection",
        default: Some("32"),
        kind: Kind::Int { min: 1, max: 1024 },
        doc: "Pipelined requests read from one connection before its responses are written (answers stay in order).",
    },
    KeyDef {
        name: "oxbow.shutdown.timeout.ms",
        default: Some("30000"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "How long a clean shutdown waits for in-flight requests before closing connections.",
    },
    KeyDef {
        name: "oxbow.http.listener",
        default: Some(""),
        kind: Kind::SocketAddr,
        doc: "Address of the HTTP health endpoints: GET /livez (200 while the process serves HTTP) and GET /readyz (200 once the log is recovered and the Kafka listener accepts connections, 503 while starting or shutting down). Empty: no HTTP listener. The Kubernetes operator sets 0.0.0.0:8080.",
    },
];

/// Keys that are another key's synonym.
const SYNONYMS: &[(&str, &str)] = &[("broker.id", "node.id"), ("log.dir", "log.dirs")];

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

/// A listener: `NAME://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

pub fn parse_listeners(s: &str) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, rest) = part.split_once("://").ok_or_else(|| format!("{part}: missing NAME://"))?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| format!("{part}: missing :port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| format!("{part}: bad port"))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{part}: bad listener name"));
        }
        out.push(Listener { name: name.to_string(), host: host.to_string(), port });
    }
    if out.is_empty() {
        return Err("no listener".into());
    }
    Ok(out)
}

/// Parses `controller.quorum.voters`: `id@host:port,...`.
pub fn parse_voters(s: &str) -> Result<BTreeMap<i32, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('@').ok_or_else(|| format!("{part}: expected id@host:port"))?;
        let id: i32 = id.parse().map_err(|_| format!("{part}: bad node id"))?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{part}: missing :port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{part}: expected id@host:port"));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("node id {id} is listed twice"));
        }
    }
    if out.is_empty() {
        return Err("no voter".into());
    }
    Ok(out)
}

/// Parses `controller.quorum.bootstrap.servers`: `host:port,...`.
pub fn parse_host_ports(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => out.push(part.to_string()),
            _ => return Err(format!("{part}: expected host:port")),
        }
    }
    if out.is_empty() {
        return Err("no server".into());
    }
    Ok(out)
}

/// Parses `server.properties` text (Java properties: `key=value` or `key: value`, `#`/`!`
/// comments, trailing `\` continues a line).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']);
        let (k, v) = match split {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry.as_str(), ""),
        };
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    out
}

pub fn key_def(name: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|k| k.name == name)
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
    /// The client listener (controller listeners are in `controller_listener`).
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
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
    /// `num.recovery.threads.per.data.dir` times the number of log dirs.
    pub recovery_threads: usize,
    /// `log.cleaner.enable`
    pub cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`
    pub cleaner_backoff_ms: u64,
    /// The consumer group coordinator's settings (`group.*`, `offsets.*`).
    pub groups: GroupSettings,
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
        let unknown: Vec<String> = explicit.keys().filter(|k| key_def(k).is_none()).cloned().collect();
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
        } else if listeners.len() != 1 || listeners[0].name != "PLAINTEXT" {
            return Err(ConfigError::Inconsistent {
                key: "listeners".into(),
                reason: "exactly one client listener, named PLAINTEXT, is supported for now (no TLS/SASL yet), plus the controller listener".into(),
            });
        }
        let advertised_listeners =
            if advertised_listeners.is_empty() { listeners.clone() } else { advertised_listeners };
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
            recovery_threads,
            cleaner_enable: bool_("log.cleaner.enable"),
            cleaner_backoff_ms: req_int("log.cleaner.backoff.ms")? as u64,
            groups,
            http_listener: get("oxbow.http.listener").and_then(|v| v.parse().ok()),
            log,
            values,
            explicit,
            unknown,
        })
    }

    /// Reads `--config FILE` (if any) and applies `--override key=value` pairs on top.
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
        Self::from_map(map)
    }

    pub fn default_for_tests() -> Self {
        match Self::from_map(BTreeMap::new()) {
            Ok(c) => c,
            Err(e) => unreachable!("defaults are valid: {e}"),
        }
    }
}

/// `--help` text: usage plus every key with its default.
pub fn help_text() -> String {
    let mut s = String::from(
        "oxbow-broker: a Kafka-compatible broker\n\n\
         USAGE:\n    oxbow-broker [--config server.properties] [--override key=value]...\n\
         \x20   oxbow-broker format [--config ...] (see oxbow-broker format --help)\n\n\
         With no arguments: one node on 127.0.0.1:9092, data under ./oxbow-data.\n\
         SIGTERM or SIGINT shuts down cleanly.\n\nOPTIONS:\n\
         \x20   --config FILE            read Kafka-style server.properties\n\
         \x20   --override KEY=VALUE     set a key (applied after the file; repeatable)\n\
         \x20   --print-config-docs      print docs/configuration.md\n\
         \x20   -h, --help               this text\n\nKEYS (default):\n",
    );
    for k in KEYS {
        let _ = writeln!(s, "    {:<45} {}", k.name, k.default.unwrap_or("(unset)"));
    }
    s
}

/// `docs/configuration.md`, generated from [`KEYS`] and the topic config table.
pub fn config_docs() -> String {
    let mut s = String::from(
        "# Configuration reference\n\n\
         Generated by `oxbow-broker --print-config-docs` from the same table the broker validates\n\
         against; CI fails if this file drifts from it.\n\n\
         The broker reads Kafka's `server.properties` format: `oxbow-broker --config server.properties\n\
         --override key=value`. Unknown keys are reported as warnings at startup; an invalid value\n\
         stops startup with a message naming the key and what it accepts.\n\n\
         ## Broker keys\n\n| key | default | accepts | meaning |\n|---|---|---|---|\n",
    );
    for k in KEYS {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            k.name,
            k.default.map_or("(unset)".to_string(), |d| format!("`{d}`")),
            k.kind.accepted(),
            k.doc
        );
    }
    s.push_str(
        "\nSynonyms: `broker.id` = `node.id`, `log.dir` = `log.dirs`.\n\n## Topic keys\n\n\
                Set with CreateTopics, AlterConfigs or IncrementalAlterConfigs; unset keys follow the broker key.\n\n\
                | topic key | broker key | accepts | meaning |\n|---|---|---|---|\n",
    );
    for t in crate::topic_config::TOPIC_KEYS {
        let _ = writeln!(s, "| `{}` | `{}` | {} | {} |", t.name, t.broker_key, t.kind.accepted(), t.doc);
    }
    s
}

/// `group.consumer.*`: the settings of consumer protocol (KIP-848) groups, with Kafka's checks
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
