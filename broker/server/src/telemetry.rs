//! The broker's metrics over OpenTelemetry (OTLP/HTTP).
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is
//! set, the standard OpenTelemetry variables; `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000)
//! and `OTEL_RESOURCE_ATTRIBUTES` are honoured. The hot path only bumps a few relaxed atomic
//! counters ([`Stats`]); everything else is read from the broker's state when the exporter
//! collects, so a broker without an endpoint pays nothing more.
//!
//! Metrics (resource `service.name=oxbow-broker`, `service.instance.id` = node id):
//! - `oxbow.broker.requests` (counter, attribute `api`: Kafka's API name),
//! - `oxbow.broker.produced.records`, `oxbow.broker.produced.bytes` (counters, leader appends),
//! - `oxbow.broker.fetched.bytes` (counter, record bytes served to consumers and followers),
//! - `oxbow.broker.connections` (gauge),
//! - `oxbow.broker.partitions` (gauge, attribute `role`: `leader` or `follower`),
//! - `oxbow.broker.partitions.under_replicated` (gauge: led here, ISR smaller than replicas),
//! - `oxbow.broker.log.size` (gauge, bytes on disk over every hosted partition),
//! - `oxbow.controller.active` (gauge: 1 on the active controller), `oxbow.quorum.term`.
//!
//! Attributes are bounded (API names, roles): no topic or client names.

use std::sync::{Arc, Weak};

use kafka_protocol::messages::ApiKey;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::broker::Broker;
use crate::stats::Stats;

/// The metric exporter, kept for a final flush at shutdown.
pub struct Exporter {
    provider: SdkMeterProvider,
}

/// The OTLP endpoint from the environment, if export is wanted.
fn endpoint() -> Option<(&'static str, String)> {
    ["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .into_iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()).map(|v| (k, v)))
}

impl Exporter {
    /// Starts metric export if an OTLP endpoint is set; an endpoint that is not an http(s) URL
    /// stops startup naming the variable. Call outside the async runtime: the OTLP client is a
    /// blocking one, on the exporter's own thread.
    pub fn from_env(node_id: i32) -> anyhow::Result<Option<Exporter>> {
        let Some((key, url)) = endpoint() else { return Ok(None) };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!("{key}={url}: expected an http:// or https:// URL (OTLP/HTTP, e.g. http://collector:4318)");
        }
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .build()
            .map_err(|e| anyhow::anyhow!("{key}={url}: {e}"))?;
        let resource = Resource::builder()
            .with_service_name("oxbow-broker")
            .with_attribute(KeyValue::new("service.instance.id", node_id.to_string()))
            .build();
        let provider = SdkMeterProvider::builder().with_resource(resource).with_periodic_exporter(exporter).build();
        tracing::info!(endpoint = %url, "exporting metrics over OTLP/HTTP");
        Ok(Some(Exporter { provider }))
    }

    /// Registers the broker's instruments; they read `broker` at each collection.
    pub fn observe(&self, broker: &Arc<Broker>) {
        register(&self.provider.meter("oxbow-broker"), Arc::downgrade(broker));
    }

    /// Exports what is pending and stops. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "metric exporter shutdown");
        }
    }
}

/// Partition counts read from the broker at one collection.
#[derive(Default)]
struct PartitionCounts {
    leader: u64,
    follower: u64,
    under_replicated: u64,
    log_bytes: u64,
}

fn partition_counts(broker: &Broker) -> PartitionCounts {
    let node = broker.node_id();
    let mut c = PartitionCounts::default();
    for p in broker.all_partitions() {
        if let Ok(r) = p.replica() {
            if r.leader == node {
                c.leader += 1;
                c.under_replicated += u64::from(r.isr.len() < r.replicas.len());
            } else {
                c.follower += 1;
            }
        }
        c.log_bytes += p.with_log(|l| l.size_bytes()).unwrap_or(0);
    }
    c
}

fn register(meter: &Meter, broker: Weak<Broker>) {
    let b = broker.clone();
    meter
        .u64_observable_counter("oxbow.broker.requests")
        .with_description("Kafka requests received, by API")
        .with_callback(move |o| {
            let Some(b) = b.upgrade() else { return };
            for (key, n) in b.stats.requests() {
                let api = ApiKey::try_from(key).map_or_else(|_| key.to_string(), |a| format!("{a:?}"));
                o.observe(n, &[KeyValue::new("api", api)]);
            }
        })
        .build();
    let counter = |name: &'static str, unit: &'static str, what: &'static str, read: fn(&Stats) -> u64| {
        let b = broker.clone();
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(what)
            .with_callback(move |o| {
                if let Some(b) = b.upgrade() {
                    o.observe(read(&b.stats), &[]);
                }
            })
            .build();
    };
    counter("oxbow.broker.produced.records", "{record}", "Records appended by producers to partitions led here", |s| {
        s.produced_records()
    });
    counter("oxbow.broker.produced.bytes", "By", "Record batch bytes appended by producers", |s| s.produced_bytes());
    counter("oxbow.broker.fetched.bytes", "By", "Record bytes served to consumers and followers", |s| {
        s.fetched_bytes()
    });
    let b = broker.clone();
    meter
        .i64_observable_gauge("oxbow.broker.connections")
        .with_description("Open client connections")
        .with_callback(move |o| {
            if let Some(b) = b.upgrade() {
                o.observe(b.stats.connections(), &[]);
            }
        })
        .build();
    // Each partition gauge walks the hosted partitions once per collection (every export
    // interval): cheap next to serving, and no state shared between callbacks.
    type Pick = fn(&PartitionCounts) -> Vec<(u64, Option<KeyValue>)>;
    let gauge = |name: &'static str, unit: &'static str, what: &'static str, pick: Pick| {
        let b = broker.clone();
        meter
            .u64_observable_gauge(name)
            .with_unit(unit)
            .with_description(what)
            .with_callback(move |o| {
                let Some(b) = b.upgrade() else { return };
                for (v, attr) in pick(&partition_counts(&b)) {
                    o.observe(v, attr.as_slice());
                }
            })
            .build();
    };
    gauge("oxbow.broker.partitions", "{partition}", "Partitions hosted here, by role", |c| {
        vec![(c.leader, Some(KeyValue::new("role", "leader"))), (c.follower, Some(KeyValue::new("role", "follower")))]
    });
    gauge(
        "oxbow.broker.partitions.under_replicated",
        "{partition}",
        "Partitions led here whose ISR is smaller than their replicas",
        |c| vec![(c.under_replicated, None)],
    );
    gauge("oxbow.broker.log.size", "By", "Bytes of log segments over every hosted partition", |c| {
        vec![(c.log_bytes, None)]
    });
    let b = broker.clone();
    meter
        .u64_observable_gauge("oxbow.controller.active")
        .with_description("1 on the metadata quorum's active controller, else 0")
        .with_callback(move |o| {
            let Some(q) = b.upgrade().and_then(|b| b.quorum().cloned()) else { return };
            let (_, leader, _) = q.local_view();
            o.observe(u64::from(leader == Some(q.node_id())), &[]);
        })
        .build();
    let b = broker;
    meter
        .u64_observable_gauge("oxbow.quorum.term")
        .with_description("The metadata quorum's Raft term as this node sees it (0 outside the quorum)")
        .with_callback(move |o| {
            let Some(q) = b.upgrade().and_then(|b| b.quorum().cloned()) else { return };
            o.observe(q.local_view().2, &[]);
        })
        .build();
}
