//! The broker's metrics over OpenTelemetry (OTLP/HTTP).
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is
//! set, the standard OpenTelemetry variables; `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000)
//! and `OTEL_RESOURCE_ATTRIBUTES` are honoured. What is exported is the catalogue of
//! [`crate::metrics`] (resource `service.name=oxbow-broker`, `service.instance.id` = node id),
//! the same one `GET /metrics` serves in Prometheus' format.

use std::sync::{Arc, Weak};

use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry::{KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::broker::Broker;
use oxbow_meta::Quorum;

use crate::metrics::{self, Kind, Node, Read};

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
        let meter = self.provider.meter("oxbow-broker");
        register(&meter, Watched::Broker(Arc::downgrade(broker)));
        let h = &metrics::REQUEST_DURATION;
        let histogram = meter
            .f64_histogram(h.name)
            .with_unit(h.unit)
            .with_description(h.help)
            .with_boundaries(h.bounds.to_vec())
            .build();
        let attributes = (0..crate::stats::API_SLOTS)
            .map(|slot| {
                [KeyValue::new(
                    "api",
                    Value::String(StringValue::from(Arc::<str>::from(metrics::api_name(slot as i16)))),
                )]
            })
            .collect();
        broker.stats.export_durations(crate::stats::OtlpDurations { histogram, attributes });
    }

    /// Registers a controller-only node's instruments: the quorum's families, read from `quorum`.
    pub fn observe_controller(&self, quorum: &Quorum) {
        register(&self.provider.meter("oxbow-broker"), Watched::Controller(quorum.clone()));
    }

    /// Exports what is pending and stops. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "metric exporter shutdown");
        }
    }
}

/// What the instruments read at each collection: a broker (weak: export never keeps a stopped
/// broker alive), or a controller-only node's quorum.
#[derive(Clone)]
enum Watched {
    Broker(Weak<Broker>),
    Controller(Quorum),
}

/// One observable instrument per family the node has; each reads it when the exporter collects.
fn register(meter: &Meter, watched: Watched) {
    for f in metrics::FAMILIES {
        if matches!((&watched, f.read), (Watched::Controller(_), Read::Broker(_))) {
            continue;
        }
        let w = watched.clone();
        let callback = move |o: &dyn AsyncInstrument<u64>| {
            let samples = match &w {
                Watched::Broker(b) => b.upgrade().and_then(|b| f.read(Node::Broker(&b))),
                Watched::Controller(q) => f.read(Node::Controller(q)),
            };
            for s in samples.unwrap_or_default() {
                o.observe(s.value, &attributes(&s));
            }
        };
        let (name, unit, help) = (f.name, f.unit, f.help);
        match f.kind {
            Kind::Counter => {
                meter
                    .u64_observable_counter(name)
                    .with_unit(unit)
                    .with_description(help)
                    .with_callback(callback)
                    .build();
            }
            Kind::Gauge => {
                meter.u64_observable_gauge(name).with_unit(unit).with_description(help).with_callback(callback).build();
            }
        }
    }
}

fn attributes(s: &metrics::Sample) -> Vec<KeyValue> {
    s.labels.iter().map(|(k, v)| KeyValue::new(*k, v.clone())).collect()
}
