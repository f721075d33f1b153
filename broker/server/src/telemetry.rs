//! The broker's metrics over OpenTelemetry (OTLP/HTTP).
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is
//! set, the standard OpenTelemetry variables; `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000)
//! and `OTEL_RESOURCE_ATTRIBUTES` are honoured. What is exported is the catalogue of
//! [`crate::metrics`] (resource `service.name=oxbow-broker`, `service.instance.id` = node id),
//! the same one `GET /metrics` serves in Prometheus' format.

use std::sync::{Arc, Weak};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::broker::Broker;
use crate::metrics::{self, Kind};

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

/// One observable instrument per family; each reads the broker when the exporter collects.
fn register(meter: &Meter, broker: Weak<Broker>) {
    for f in metrics::FAMILIES {
        let (b, read) = (broker.clone(), f.read);
        let callback = move |o: &dyn AsyncInstrument<u64>| {
            for s in b.upgrade().map(|b| read(&b)).unwrap_or_default() {
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
