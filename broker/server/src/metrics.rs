//! The broker's metrics: one catalogue ([`FAMILIES`]) read by every way out, OTLP
//! ([`crate::telemetry`]) and the Prometheus text format on `GET /metrics`
//! (`oxbow.http.listener`, [`crate::health`]).
//!
//! The request path only bumps a few relaxed atomic counters ([`crate::stats::Stats`]); every
//! family is read from the broker's state when it is collected (an export interval, a scrape),
//! so a broker nobody watches pays nothing more. Labels are bounded (API names, partition roles,
//! group states) but for consumer lag, which has one series per group and topic with committed
//! offsets, as `kafka-consumer-groups --describe` lists them ([`crate::lag`]).
//!
//! Names are OpenTelemetry's (`oxbow.broker.produced.bytes`, unit `By`); the Prometheus names
//! are the ones the OpenTelemetry Collector's Prometheus exporter gives the same metrics
//! ([`prometheus_name`]: `oxbow_broker_produced_bytes_total`), so a dashboard or alert reads the
//! same series whether the broker is scraped directly or through a collector.

use std::fmt::Write as _;

use kafka_protocol::messages::ApiKey;

use oxbow_meta::Quorum;

use crate::broker::Broker;
use crate::stats::Purgatory;

/// How a family's values behave over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up while the process lives (OTLP cumulative sum; Prometheus `counter`).
    Counter,
    /// A value at the time of reading.
    Gauge,
}

/// One value of a family, with its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

impl Sample {
    fn plain(value: u64) -> Vec<Sample> {
        vec![Sample { labels: Vec::new(), value }]
    }
}

/// A metric: its name, kind, unit (UCUM, as OpenTelemetry writes it), meaning, and how it is
/// read.
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub help: &'static str,
    pub read: Read,
}

/// Where a family is read from.
#[derive(Clone, Copy)]
pub enum Read {
    /// The broker's state: only nodes with the broker role have it.
    Broker(fn(&Broker) -> Vec<Sample>),
    /// The node's view of the metadata quorum: every node has one, controller-only nodes
    /// included.
    Quorum(fn(&Quorum) -> Vec<Sample>),
}

/// The node whose metrics are read: a broker (with or without the controller role), or a
/// controller-only node, which has the quorum families only.
#[derive(Clone, Copy)]
pub enum Node<'a> {
    Broker(&'a Broker),
    Controller(&'a Quorum),
}

impl Family {
    /// The family's samples on `node`; `None` when the node has no such metric (broker families
    /// on a controller-only node).
    pub fn read(&self, node: Node<'_>) -> Option<Vec<Sample>> {
        match (self.read, node) {
            (Read::Broker(read), Node::Broker(b)) => Some(read(b)),
            (Read::Quorum(read), Node::Broker(b)) => Some(b.quorum().map(read).unwrap_or_default()),
            (Read::Quorum(read), Node::Controller(q)) => Some(read(q)),
            (Read::Broker(_), Node::Controller(_)) => None,
        }
    }
}

/// Every metric the broker exports (the table in docs/architecture.md, Metrics); add a family here and
/// both OTLP and `/metrics` carry it.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "oxbow.broker.requests",
        kind: Kind::Counter,
        unit: "{request}",
        help: "Kafka requests received, by API",
        read: Read::Broker(requests),
    },
    Family {
        name: "oxbow.broker.produced.records",
        kind: Kind::Counter,
        unit: "{record}",
        help: "Records appended by producers to partitions led here",
        read: Read::Broker(|b| Sample::plain(b.stats.produced_records())),
    },
    Family {
        name: "oxbow.broker.produced.bytes",
        kind: Kind::Counter,
        unit: "By",
        help: "Record batch bytes appended by producers",
        read: Read::Broker(|b| Sample::plain(b.stats.produced_bytes())),
    },
    Family {
        name: "oxbow.broker.fetched.bytes",
        kind: Kind::Counter,
        unit: "By",
        help: "Record bytes served to consumers and followers",
        read: Read::Broker(|b| Sample::plain(b.stats.fetched_bytes())),
    },
    Family {
        name: "oxbow.broker.connections",
        kind: Kind::Gauge,
        unit: "{connection}",
        help: "Open client connections",
        read: Read::Broker(|b| Sample::plain(u64::try_from(b.stats.connections()).unwrap_or(0))),
    },
    Family {
        name: "oxbow.broker.purgatory.size",
        kind: Kind::Gauge,
        unit: "{request}",
        help: "Requests waiting, by purgatory: acks=all produce requests for the in-sync replicas, fetches for data",
        read: Read::Broker(|b| {
            Purgatory::ALL
                .iter()
                .map(|p| Sample { labels: vec![("purgatory", p.label().into())], value: b.stats.purgatory_size(*p) })
                .collect()
        }),
    },
    Family {
        name: "oxbow.broker.fetch.sessions",
        kind: Kind::Gauge,
        unit: "{session}",
        help: "Incremental fetch sessions this broker keeps as a leader for its followers (Kafka's NumIncrementalFetchSessions)",
        read: Read::Broker(|b| Sample::plain(u64::try_from(b.fetch_sessions.len()).unwrap_or(0))),
    },
    Family {
        name: "oxbow.broker.partitions",
        kind: Kind::Gauge,
        unit: "{partition}",
        help: "Partitions hosted here, by role",
        read: Read::Broker(|b| {
            let c = partition_counts(b);
            vec![
                Sample { labels: vec![("role", "leader".into())], value: c.leader },
                Sample { labels: vec![("role", "follower".into())], value: c.follower },
            ]
        }),
    },
    Family {
        name: "oxbow.broker.partitions.under_replicated",
        kind: Kind::Gauge,
        unit: "{partition}",
        help: "Partitions led here whose ISR is smaller than their replicas",
        read: Read::Broker(|b| Sample::plain(partition_counts(b).under_replicated)),
    },
    Family {
        name: "oxbow.broker.partitions.under_min_isr",
        kind: Kind::Gauge,
        unit: "{partition}",
        help: "Partitions led here whose ISR is smaller than their topic's min.insync.replicas: acks=all writes to them fail",
        read: Read::Broker(|b| Sample::plain(partition_counts(b).under_min_isr)),
    },
    Family {
        name: "oxbow.broker.isr.expands",
        kind: Kind::Counter,
        unit: "{change}",
        help: "ISR changes of partitions led here that added a caught-up follower, as the controller accepted them (Kafka's IsrExpandsPerSec)",
        read: Read::Broker(|b| Sample::plain(b.isr_changes.counts().0)),
    },
    Family {
        name: "oxbow.broker.isr.shrinks",
        kind: Kind::Counter,
        unit: "{change}",
        help: "ISR changes of partitions led here that removed followers behind by replica.lag.time.max.ms, as the controller accepted them (Kafka's IsrShrinksPerSec)",
        read: Read::Broker(|b| Sample::plain(b.isr_changes.counts().1)),
    },
    Family {
        name: "oxbow.broker.producer_ids",
        kind: Kind::Gauge,
        unit: "{producer}",
        help: "Idempotent and transactional producers with state in the partitions led here, summed over them (Kafka's ProducerIdCount)",
        read: Read::Broker(|b| Sample::plain(partition_counts(b).producer_ids)),
    },
    Family {
        name: "oxbow.broker.log.size",
        kind: Kind::Gauge,
        unit: "By",
        help: "Bytes of log segments over every hosted partition",
        read: Read::Broker(|b| Sample::plain(partition_counts(b).log_bytes)),
    },
    Family {
        name: "oxbow.topic.produced.records",
        kind: Kind::Counter,
        unit: "{record}",
        help: "Records appended by producers, by topic (partitions led here)",
        read: Read::Broker(|b| per_topic(b, |(records, _, _)| records)),
    },
    Family {
        name: "oxbow.topic.produced.bytes",
        kind: Kind::Counter,
        unit: "By",
        help: "Record batch bytes appended by producers, by topic (partitions led here)",
        read: Read::Broker(|b| per_topic(b, |(_, bytes, _)| bytes)),
    },
    Family {
        name: "oxbow.topic.fetched.bytes",
        kind: Kind::Counter,
        unit: "By",
        help: "Record bytes served to consumers and followers, by topic",
        read: Read::Broker(|b| per_topic(b, |(_, _, fetched)| fetched)),
    },
    Family {
        name: "oxbow.topic.log.size",
        kind: Kind::Gauge,
        unit: "By",
        help: "Bytes of log segments of the topic's partitions hosted here, by topic",
        read: Read::Broker(topic_log_sizes),
    },
    Family {
        name: "oxbow.controller.active",
        kind: Kind::Gauge,
        unit: "",
        help: "1 on the metadata quorum's active controller, else 0 (controller-only nodes included)",
        read: Read::Quorum(|q| Sample::plain(u64::from(active_controller(q)))),
    },
    Family {
        name: "oxbow.controller.partitions.offline",
        kind: Kind::Gauge,
        unit: "{partition}",
        help: "Partitions without a leader, counted by the active controller (0 on every other node, as Kafka's OfflinePartitionsCount)",
        read: Read::Quorum(offline_partitions),
    },
    Family {
        name: "oxbow.consumer_group.lag",
        kind: Kind::Gauge,
        unit: "{record}",
        help: "Records a group has yet to consume on a topic: the sum over its committed partitions of high watermark - committed offset (groups coordinated here; refreshed every 10 s while read)",
        read: Read::Broker(|b| {
            let round = b.lag.read();
            round
                .lag
                .iter()
                .map(|l| Sample { labels: vec![("group", l.group.clone()), ("topic", l.topic.clone())], value: l.lag })
                .collect()
        }),
    },
    Family {
        name: "oxbow.coordinator.groups",
        kind: Kind::Gauge,
        unit: "{group}",
        help: "Consumer groups coordinated here, by type (classic or consumer) and state",
        read: Read::Broker(|b| {
            let round = b.lag.read();
            round
                .groups
                .iter()
                .map(|((kind, state), n)| Sample {
                    labels: vec![("type", (*kind).to_string()), ("state", (*state).to_string())],
                    value: *n,
                })
                .collect()
        }),
    },
    Family {
        name: "oxbow.quorum.term",
        kind: Kind::Gauge,
        unit: "",
        help: "The metadata quorum's Raft term as this node sees it (0 outside the quorum)",
        read: Read::Quorum(|q| Sample::plain(q.local_view().2)),
    },
    Family {
        name: "oxbow.coordinator.rebalances",
        kind: Kind::Counter,
        unit: "{rebalance}",
        help: "Rebalances completed by the groups coordinated here, by type: classic groups made Stable by their leader's assignment, consumer groups whose members all reconciled",
        read: Read::Broker(|b| rebalances(b, |(count, _)| count)),
    },
    Family {
        name: "oxbow.coordinator.rebalance.time",
        kind: Kind::Counter,
        unit: "ms",
        help: "Total time of those rebalances, from the change that started each (a member joining, leaving or changing its subscription) to its end (divided by the rebalances: the rebalance duration)",
        read: Read::Broker(|b| rebalances(b, |(_, ms)| ms)),
    },
    Family {
        name: "oxbow.quorum.commits",
        kind: Kind::Counter,
        unit: "{commit}",
        help: "Metadata writes this node committed as the active controller",
        read: Read::Quorum(|q| Sample::plain(q.commit_stats().0)),
    },
    Family {
        name: "oxbow.quorum.commit.time",
        kind: Kind::Counter,
        unit: "ms",
        help: "Total time of those writes, from proposal to commit and apply on the active controller (divided by the commits: the commit latency)",
        read: Read::Quorum(|q| Sample::plain(q.commit_stats().1 / 1000)),
    },
    Family {
        name: "oxbow.quorum.follower.lag",
        kind: Kind::Gauge,
        unit: "{entry}",
        help: "On the active controller: metadata log entries each other voter does not have yet",
        read: Read::Quorum(|q| {
            q.follower_lag()
                .into_iter()
                .map(|(node, lag)| Sample { labels: vec![("node", node.to_string())], value: lag })
                .collect()
        }),
    },
    Family {
        name: "oxbow.log.flushes",
        kind: Kind::Counter,
        unit: "{flush}",
        help: "Log flushes (fsyncs of partition logs: flush.messages, flush.ms, sealed segments in the background)",
        read: Read::Broker(|_| Sample::plain(oxbow_log::log::flush_stats().0)),
    },
    Family {
        name: "oxbow.log.flush.time",
        kind: Kind::Counter,
        unit: "ms",
        help: "Total time of those flushes (divided by the flushes: the flush latency)",
        read: Read::Broker(|_| Sample::plain(oxbow_log::log::flush_stats().1 / 1000)),
    },
];

/// A histogram: how many observations fell in each bucket, by labels.
pub struct HistogramFamily {
    pub name: &'static str,
    pub unit: &'static str,
    pub help: &'static str,
    /// Upper bounds of the buckets (then +Inf).
    pub bounds: &'static [f64],
    pub read: fn(&Broker) -> Vec<HistogramSample>,
}

/// One series of a histogram: its labels, observations per bucket (not cumulative, one more
/// than the bounds: the last is +Inf) and their sum.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSample {
    pub labels: Vec<(&'static str, String)>,
    pub buckets: Vec<u64>,
    pub sum: f64,
}

/// The histograms `/metrics` serves. Each is recorded on the request path and wired into
/// [`crate::telemetry`] by hand (OTLP has no histogram read at collection), unlike [`FAMILIES`].
pub const HISTOGRAMS: &[&HistogramFamily] = &[&REQUEST_DURATION];

/// Request durations by API ([`crate::stats::Stats::request_done`]).
pub const REQUEST_DURATION: HistogramFamily = HistogramFamily {
    name: "oxbow.broker.request.duration",
    unit: "s",
    help: "Time from a request's arrival to its response, by API: waits for replication (acks=all) and fetch long polls included, the response's send not (Kafka's TotalTimeMs without ResponseSendTimeMs)",
    bounds: &crate::stats::REQUEST_SECONDS,
    read: |b| {
        b.stats
            .request_durations()
            .into_iter()
            .map(|d| HistogramSample {
                labels: vec![("api", api_name(d.api))],
                buckets: d.buckets.to_vec(),
                sum: d.sum_seconds,
            })
            .collect()
    },
};

/// The `api` label of an API key: Kafka's name (`Produce`), or the number of an unknown one.
pub fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|_| key.to_string(), |a| oxbow_protocol::api_name(a).to_string())
}

fn requests(b: &Broker) -> Vec<Sample> {
    b.stats.requests().into_iter().map(|(key, n)| Sample { labels: vec![("api", api_name(key))], value: n }).collect()
}

/// One sample per group type of what `pick` takes from its (count, total ms) of rebalances.
fn rebalances(b: &Broker, pick: fn((u64, u64)) -> u64) -> Vec<Sample> {
    b.groups
        .rebalance_stats()
        .into_iter()
        .map(|(kind, count, ms)| Sample { labels: vec![("type", kind.label().to_string())], value: pick((count, ms)) })
        .collect()
}

/// Partition counts read from the broker at one collection.
#[derive(Default)]
struct PartitionCounts {
    leader: u64,
    follower: u64,
    under_replicated: u64,
    under_min_isr: u64,
    log_bytes: u64,
    /// Producers with state, summed over the partitions led here.
    producer_ids: u64,
}

/// Walks the hosted partitions once (each family that needs it does, once per collection:
/// cheap next to serving, and no state shared between collections).
fn partition_counts(broker: &Broker) -> PartitionCounts {
    let node = broker.node_id();
    let mut c = PartitionCounts::default();
    for topic in broker.all_topics() {
        for p in topic.hosted() {
            if let Ok(r) = p.replica() {
                if r.leader == node {
                    c.leader += 1;
                    c.producer_ids += p.with_log(|l| l.producer_state().len() as u64).unwrap_or(0);
                    c.under_replicated += u64::from(r.isr.len() < r.replicas.len());
                    c.under_min_isr += u64::from(r.isr.len() < usize::try_from(topic.min_insync).unwrap_or(0));
                } else {
                    c.follower += 1;
                }
            }
            c.log_bytes += p.with_log(|l| l.size_bytes()).unwrap_or(0);
        }
    }
    c
}

/// One sample per topic hosted here or with traffic here: `pick` chooses the counter (records
/// produced, bytes produced, bytes fetched). A deleted topic's series go with it.
fn per_topic(b: &Broker, pick: fn((u64, u64, u64)) -> u64) -> Vec<Sample> {
    let mut out: Vec<Sample> = b
        .all_topics()
        .into_iter()
        .filter_map(|t| {
            let counts = t.counters.read();
            if counts == (0, 0, 0) && t.hosted().next().is_none() {
                return None;
            }
            Some(Sample { labels: vec![("topic", t.meta.name.clone())], value: pick(counts) })
        })
        .collect();
    out.sort_by(|x, y| x.labels.cmp(&y.labels));
    out
}

/// Log bytes by topic, over the partitions hosted here (topics with none hosted have no sample).
fn topic_log_sizes(b: &Broker) -> Vec<Sample> {
    let mut out: Vec<Sample> = b
        .all_topics()
        .into_iter()
        .filter_map(|t| {
            let mut hosted = t.hosted().peekable();
            hosted.peek()?;
            let bytes = hosted.map(|p| p.with_log(|l| l.size_bytes()).unwrap_or(0)).sum();
            Some(Sample { labels: vec![("topic", t.meta.name.clone())], value: bytes })
        })
        .collect();
    out.sort_by(|x, y| x.labels.cmp(&y.labels));
    out
}

fn active_controller(q: &Quorum) -> bool {
    q.local_view().1 == Some(q.node_id())
}

fn offline_partitions(q: &Quorum) -> Vec<Sample> {
    if !active_controller(q) {
        return Sample::plain(0);
    }
    let image = q.image();
    let offline = image.topics.values().flat_map(|t| t.partitions.iter()).filter(|p| p.leader < 0).count();
    Sample::plain(offline as u64)
}

/// The Prometheus name of an OpenTelemetry metric, as the Collector's Prometheus exporter
/// writes it: dots become underscores, the unit is spelt out as a suffix unless the name already
/// ends with it (`By` -> `bytes`, `s` -> `seconds`; annotations like `{record}` are dropped),
/// and counters end in `_total`.
pub fn prometheus_name(f: &Family) -> String {
    let mut name = base_name(f.name, f.unit);
    if f.kind == Kind::Counter {
        name.push_str("_total");
    }
    name
}

/// The Prometheus name without a counter's `_total` (a histogram's, before `_bucket`, `_sum`, `_count`).
fn base_name(otel: &str, unit: &str) -> String {
    let mut name: String = otel.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let unit = match unit {
        "By" => "bytes",
        "s" => "seconds",
        "ms" => "milliseconds",
        _ => "",
    };
    if !unit.is_empty() && !name.ends_with(unit) {
        name.push('_');
        name.push_str(unit);
    }
    name
}

/// Every family `node` has in the Prometheus text exposition format (version 0.0.4).
pub fn prometheus_text(node: Node<'_>) -> String {
    let mut out = String::new();
    for f in FAMILIES {
        let Some(samples) = f.read(node) else { continue };
        let name = prometheus_name(f);
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        header(&mut out, &name, f.help, kind);
        for s in samples {
            series(&mut out, &name, &s.labels, None);
            let _ = writeln!(out, " {}", s.value);
        }
    }
    let Node::Broker(broker) = node else { return out };
    for h in HISTOGRAMS {
        let name = base_name(h.name, h.unit);
        header(&mut out, &name, h.help, "histogram");
        for s in (h.read)(broker) {
            histogram_series(&mut out, &name, h.bounds, &s);
        }
    }
    out
}

/// A family's `# HELP` (escaped) and `# TYPE` lines.
fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One histogram series: its cumulative buckets, sum and count.
fn histogram_series(out: &mut String, name: &str, bounds: &[f64], s: &HistogramSample) {
    let mut cumulative = 0;
    for (i, n) in s.buckets.iter().enumerate() {
        cumulative += n;
        let le = bounds.get(i).map_or_else(|| "+Inf".to_string(), |b| b.to_string());
        series(out, &format!("{name}_bucket"), &s.labels, Some(&le));
        let _ = writeln!(out, " {cumulative}");
    }
    series(out, &format!("{name}_sum"), &s.labels, None);
    let _ = writeln!(out, " {}", s.sum);
    series(out, &format!("{name}_count"), &s.labels, None);
    let _ = writeln!(out, " {cumulative}");
}

/// A series' name and labels (then `le`, a histogram bucket's bound), without its value.
fn series(out: &mut String, name: &str, labels: &[(&'static str, String)], le: Option<&str>) {
    out.push_str(name);
    let le = le.map(|le| ("le", le.to_string()));
    let all: Vec<&(&str, String)> = labels.iter().chain(le.as_ref()).collect();
    if all.is_empty() {
        return;
    }
    out.push('{');
    for (i, (k, v)) in all.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        let _ = write!(out, "{k}=\"{v}\"");
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(name: &'static str, kind: Kind, unit: &'static str) -> Family {
        Family { name, kind, unit, help: "", read: Read::Broker(|_| Vec::new()) }
    }

    #[test]
    fn prometheus_names_follow_the_collectors_exporter() {
        let cases = [
            (family("oxbow.broker.produced.bytes", Kind::Counter, "By"), "oxbow_broker_produced_bytes_total"),
            (family("oxbow.broker.produced.records", Kind::Counter, "{record}"), "oxbow_broker_produced_records_total"),
            (family("oxbow.broker.log.size", Kind::Gauge, "By"), "oxbow_broker_log_size_bytes"),
            (
                family("oxbow.broker.partitions.under_replicated", Kind::Gauge, "{partition}"),
                "oxbow_broker_partitions_under_replicated",
            ),
            (family("oxbow.request.latency", Kind::Gauge, "s"), "oxbow_request_latency_seconds"),
            (family("oxbow.controller.active", Kind::Gauge, ""), "oxbow_controller_active"),
        ];
        for (f, want) in cases {
            assert_eq!(prometheus_name(&f), want, "{}", f.name);
        }
    }

    #[test]
    fn a_histogram_series_has_cumulative_buckets_then_sum_and_count() {
        let mut out = String::new();
        let s = HistogramSample { labels: vec![("api", "Produce".into())], buckets: vec![2, 0, 3], sum: 1.25 };
        histogram_series(&mut out, "oxbow_broker_request_duration_seconds", &[0.0005, 1.0], &s);
        assert_eq!(
            out,
            "oxbow_broker_request_duration_seconds_bucket{api=\"Produce\",le=\"0.0005\"} 2\n\
             oxbow_broker_request_duration_seconds_bucket{api=\"Produce\",le=\"1\"} 2\n\
             oxbow_broker_request_duration_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 5\n\
             oxbow_broker_request_duration_seconds_sum{api=\"Produce\"} 1.25\n\
             oxbow_broker_request_duration_seconds_count{api=\"Produce\"} 5\n"
        );
        assert_eq!(base_name(REQUEST_DURATION.name, REQUEST_DURATION.unit), "oxbow_broker_request_duration_seconds");
    }

    #[test]
    fn every_family_has_a_distinct_prometheus_name_and_help() {
        let mut names: Vec<String> = FAMILIES.iter().map(prometheus_name).collect();
        assert!(FAMILIES.iter().all(|f| !f.help.is_empty()));
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "two families map to one Prometheus name");
    }
}
