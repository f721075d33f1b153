//! The table of supported keys ([`KEYS`]): name, default, what each accepts, documentation.
//! Parsing and validation ([`super::BrokerConfig::from_map`]), `--help` and
//! `docs/configuration.md` all come from it.

pub use super::kind::Kind;

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
        name: "config.providers",
        default: Some(""),
        kind: Kind::Text,
        doc: "Config providers (Kafka's KIP-297 and KIP-887): a value may then hold `${name:PATH:KEY}` or `${name:KEY}`, resolved once at startup. Each name needs `config.providers.<name>.class`: `org.apache.kafka.common.config.provider.FileConfigProvider` (`${file:/etc/a.properties:key}`: a key of a properties file), `org.apache.kafka.common.config.provider.DirectoryConfigProvider` (`${dir:/etc/secret:name}`: a file's contents) or `org.apache.kafka.common.config.provider.EnvVarConfigProvider` (`${env:NAME}`). A reference to an unconfigured provider stays as written; a missing file, key or variable stops startup. Provider parameters (`config.providers.<name>.param.*`: `allowlist.pattern`, `allowed.paths`) are refused.",
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
        name: "transaction.state.log.num.partitions",
        default: Some("50"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Partitions of `__transaction_state`, created on the first FindCoordinator for a transactional id. A transactional id's coordinator is the leader of partition `abs(hash(transactional.id)) % partitions`; do not change it once the topic exists.",
    },
    KeyDef {
        name: "transaction.state.log.replication.factor",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: 32767 },
        doc: "Replication factor of `__transaction_state`. Apache Kafka defaults to 3; Oxbow defaults to 1 so that one node works with no setup. With fewer registered brokers, the topic is not created and transaction coordinators stay unavailable.",
    },
    KeyDef {
        name: "transaction.state.log.min.isr",
        default: Some("1"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "`min.insync.replicas` of `__transaction_state`: a transaction's state change is written only while this many replicas are in sync. Apache Kafka defaults to 2 (with a replication factor of 3).",
    },
    KeyDef {
        name: "transaction.state.log.segment.bytes",
        default: Some("104857600"),
        kind: Kind::Int { min: 14, max: I32 },
        doc: "Segment size of `__transaction_state`.",
    },
    KeyDef {
        name: "transaction.max.timeout.ms",
        default: Some("900000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "The longest `transaction.timeout.ms` a producer may ask for (else INVALID_TRANSACTION_TIMEOUT).",
    },
    KeyDef {
        name: "transactional.id.expiration.ms",
        default: Some("604800000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "A transactional id with no transaction for this long is forgotten (its producer id is not kept).",
    },
    KeyDef {
        name: "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        default: Some("10000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "How often the transaction coordinator aborts transactions open for longer than their timeout.",
    },
    KeyDef {
        name: "transaction.remove.expired.transaction.cleanup.interval.ms",
        default: Some("3600000"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "How often the transaction coordinator removes transactional ids older than `transactional.id.expiration.ms`.",
    },
    KeyDef {
        name: "transaction.partition.verification.enable",
        default: Some("true"),
        kind: Kind::Bool,
        doc: "A partition leader asks the transaction coordinator whether a partition is in the producer's transaction before appending the first batch of that transaction (KIP-890), so a late batch cannot open a transaction nobody ends. Transaction version 2 producers (Produce v12+) always go through the coordinator, which adds the partition.",
    },
    KeyDef {
        name: "listener.security.protocol.map",
        default: Some("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
        kind: Kind::Text,
        doc: "`NAME:PROTOCOL,...`: the security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL) of each listener name in `listeners`. A controller listener missing from it is PLAINTEXT, as Kafka.",
    },
    KeyDef {
        name: "inter.broker.listener.name",
        default: None,
        kind: Kind::Text,
        doc: "The listener other brokers use to reach this one (replication, coordinator traffic). Defaults to the listener whose name is `security.inter.broker.protocol`.",
    },
    KeyDef {
        name: "security.inter.broker.protocol",
        default: Some("PLAINTEXT"),
        kind: Kind::Choice(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
        doc: "Without `inter.broker.listener.name`: the inter-broker listener is the one of this name.",
    },
    KeyDef {
        name: "ssl.keystore.type",
        default: Some("JKS"),
        kind: Kind::Choice(&["JKS", "PKCS12", "PEM"]),
        doc: "The broker's certificate and key. Only `PEM` is supported (a TLS listener with another type stops startup): the key (PKCS#8, PKCS#1 or SEC1, unencrypted) and the certificate chain in `ssl.keystore.location`, or inline in `ssl.keystore.key` and `ssl.keystore.certificate.chain`. Every `ssl.*` and `sasl.*` key may be set per listener as `listener.name.<name>.<key>` (name in lower case).",
    },
    KeyDef {
        name: "ssl.keystore.location",
        default: None,
        kind: Kind::Text,
        doc: "A PEM file holding the private key and the certificate chain. Re-read when it changes on disk (checked at most once a second, on new connections): new connections get the new certificate.",
    },
    KeyDef {
        name: "ssl.keystore.key",
        default: None,
        kind: Kind::Password,
        doc: "The private key in PEM, inline (with `ssl.keystore.certificate.chain`).",
    },
    KeyDef {
        name: "ssl.keystore.certificate.chain",
        default: None,
        kind: Kind::Text,
        doc: "The certificate chain in PEM, inline (with `ssl.keystore.key`).",
    },
    KeyDef {
        name: "ssl.keystore.password",
        default: None,
        kind: Kind::Password,
        doc: "Accepted for compatibility; a PEM keystore has no store password.",
    },
    KeyDef {
        name: "ssl.key.password",
        default: None,
        kind: Kind::Password,
        doc: "The password of an encrypted private key. Encrypted keys are not supported yet: store the key unencrypted (PKCS#8) with file permissions guarding it.",
    },
    KeyDef {
        name: "ssl.truststore.type",
        default: Some("JKS"),
        kind: Kind::Choice(&["JKS", "PKCS12", "PEM"]),
        doc: "The CA certificates client certificates are checked against. Only `PEM` is supported.",
    },
    KeyDef {
        name: "ssl.truststore.location",
        default: None,
        kind: Kind::Text,
        doc: "A PEM file of CA certificates (re-read when it changes, as the keystore).",
    },
    KeyDef {
        name: "ssl.truststore.certificates",
        default: None,
        kind: Kind::Text,
        doc: "CA certificates in PEM, inline.",
    },
    KeyDef {
        name: "ssl.truststore.password",
        default: None,
        kind: Kind::Password,
        doc: "Accepted for compatibility; a PEM truststore has no password.",
    },
    KeyDef {
        name: "ssl.client.auth",
        default: Some("none"),
        kind: Kind::Choice(&["required", "requested", "none"]),
        doc: "Client certificates on SSL and SASL_SSL listeners: `required` (a client without a certificate signed by the truststore is refused), `requested` (checked when presented) or `none`. On an SSL listener the principal is the certificate's subject (RFC 2253), mapped by `ssl.principal.mapping.rules`.",
    },
    KeyDef {
        name: "ssl.principal.mapping.rules",
        default: Some("DEFAULT"),
        kind: Kind::Text,
        doc: "Kafka's rules from a certificate subject to a user name: `RULE:pattern/replacement/[LU]` entries (Java regex syntax as far as Rust's regex shares it; the pattern must match the whole subject), tried in order, and `DEFAULT` (the subject itself).",
    },
    KeyDef {
        name: "ssl.enabled.protocols",
        default: Some("TLSv1.2,TLSv1.3"),
        kind: Kind::Text,
        doc: "TLS versions served: TLSv1.2 and/or TLSv1.3.",
    },
    KeyDef {
        name: "sasl.enabled.mechanisms",
        default: Some("GSSAPI"),
        kind: Kind::Text,
        doc: "SASL mechanisms served on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are not served; a SASL listener left with none stops startup). PLAIN users come from `listener.name.<name>.plain.sasl.jaas.config` (`user_<name>=\"<password>\"` options of Kafka's PlainLoginModule); SCRAM credentials live in the metadata log (AlterUserScramCredentials, or `oxbow-broker format --add-scram`).",
    },
    KeyDef {
        name: "sasl.mechanism.inter.broker.protocol",
        default: Some("GSSAPI"),
        kind: Kind::Text,
        doc: "The mechanism brokers log in with on a SASL inter-broker listener (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); the user and password are the `username` and `password` options of that listener's JAAS line for the mechanism, as Kafka.",
    },
    KeyDef {
        name: "ssl.endpoint.identification.algorithm",
        default: Some("https"),
        kind: Kind::Text,
        doc: "`https`: a broker connecting to another over TLS checks that the certificate names the host it dialled (as advertised); empty: only the certificate chain is checked.",
    },
    KeyDef {
        name: "connections.max.reauth.ms",
        default: Some("0"),
        kind: Kind::Int { min: 0, max: LONG },
        doc: "KIP-368: when positive, a SASL session lasts this long; the client re-authenticates on the same connection before it ends, and a connection that sends anything else after the end is closed. 0: sessions do not expire.",
    },
    KeyDef {
        name: "connection.failed.authentication.delay.ms",
        default: Some("100"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "A failed login is answered (SASL_AUTHENTICATION_FAILED) and its connection closed this long after the attempt, against password guessing.",
    },
    KeyDef {
        name: "sasl.server.max.receive.size",
        default: Some("524288"),
        kind: Kind::Int { min: 1, max: I32 },
        doc: "Largest frame accepted from a client before it has authenticated (SASL tokens, ApiVersions); a larger one closes the connection before any allocation.",
    },
    KeyDef {
        name: "authorizer.class.name",
        default: Some(""),
        kind: Kind::Choice(&["", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"]),
        doc: "`org.apache.kafka.metadata.authorizer.StandardAuthorizer` turns ACLs on (Kafka's KRaft authorizer, with its rules); empty: every principal may do everything, and the ACL APIs answer SECURITY_DISABLED. The ACLs live in the metadata log (CreateAcls, DeleteAcls).",
    },
    KeyDef {
        name: "super.users",
        default: Some(""),
        kind: Kind::Text,
        doc: "Principals allowed everything whatever the ACLs say, `;`-separated (`User:admin;User:broker`). Brokers replicate and send transaction markers as the principal of their inter-broker listener (`User:ANONYMOUS` on PLAINTEXT): list it, or grant it CLUSTER_ACTION on the cluster.",
    },
    KeyDef {
        name: "allow.everyone.if.no.acl.found",
        default: Some("false"),
        kind: Kind::Bool,
        doc: "With an authorizer: a resource no ACL names at all is open to everyone (true) or to super users only (false, Kafka's default).",
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
        name: "max.incremental.fetch.session.cache.slots",
        default: Some("1000"),
        kind: Kind::Int { min: 0, max: I32 },
        doc: "Incremental fetch sessions (KIP-227) a leader keeps for its followers; 0: followers fetch without sessions. Consumers' fetches are always answered without a session.",
    },
    KeyDef {
        name: "oxbow.fetch.zero.copy",
        default: Some("true"),
        kind: Kind::Bool,
        doc: "Fetch answers on PLAINTEXT listeners send their records from the page cache to the socket with sendfile, without copying them through the broker's memory (TLS listeners read them, to encrypt). false: every fetch reads its records into memory first (for measuring, or filesystems without sendfile).",
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
        doc: "Address of the HTTP endpoints: GET /livez (200 while the process serves HTTP), GET /readyz (200 once the log is recovered and the Kafka listener accepts connections, 503 while starting or shutting down), GET /metrics (the broker's metrics in Prometheus' text format), GET /quorum and GET /metadata (JSON). Empty: no HTTP listener. The Kubernetes operator sets 0.0.0.0:8080.",
    },
];

/// Keys that are another key's synonym.
pub(super) const SYNONYMS: &[(&str, &str)] = &[("broker.id", "node.id"), ("log.dir", "log.dirs")];

pub fn key_def(name: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|k| k.name == name)
}
