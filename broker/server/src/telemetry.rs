//! The broker's metrics and traces over OpenTelemetry (OTLP/HTTP).
//!
//! The standard OpenTelemetry variables drive it. Metrics are exported when an endpoint is set
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, to which `/v1/metrics` and `/v1/traces` are appended, or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as they
//! are) and `OTEL_METRICS_EXPORTER` is not `none`. Traces are exported when an endpoint is set
//! and they are asked for: `OTEL_TRACES_EXPORTER=otlp`, `OTEL_TRACES_SAMPLER`, or a traces
//! endpoint (a deviation from the standard's default: [`endpoint`] says why).
//! `OTEL_SDK_DISABLED=true` turns both off. `OTEL_METRIC_EXPORT_INTERVAL` (ms, default
//! 60000), `OTEL_BSP_*` (span batching), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` are
//! honoured, and so are `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, with one difference
//! of default: unset, the broker samples `parentbased_traceidratio` at 0.01 (every produce
//! continuing a sampled trace, and 1% of other requests), not every request. A value the broker
//! cannot use stops startup naming the variable.
//!
//! What is exported: the catalogue of [`crate::metrics`] (resource `service.name=oxbow-broker`,
//! `service.instance.id` = node id, unless the variables say otherwise), the same one
//! `GET /metrics` serves in Prometheus' format, and the request spans of [`crate::trace`].

use std::sync::{Arc, Weak};

use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

use crate::broker::Broker;
use oxbow_meta::Quorum;

use crate::metrics::{self, Kind, Node, Read};

/// The ratio of requests outside a sampled trace that are traced when `OTEL_TRACES_SAMPLER` is
/// not set.
pub const DEFAULT_SAMPLE_RATIO: f64 = 0.01;

/// The metric and span exporters, kept for a final flush at shutdown.
pub struct Exporter {
    meter: Option<SdkMeterProvider>,
    tracer: Option<SdkTracerProvider>,
}

/// The OTLP endpoint of a signal (`METRICS`, `TRACES`) from the environment, if it is wanted.
/// With an endpoint, `OTEL_<signal>_EXPORTER` may be `otlp` (or a list with it) or `none`, in
/// any case; anything else stops startup naming the variable. `OTEL_SDK_DISABLED=true` turns
/// every signal off.
///
/// Metrics are on with an endpoint unless `OTEL_METRICS_EXPORTER=none`, as the standard has it.
/// Traces must be asked for, by `OTEL_TRACES_EXPORTER=otlp`, `OTEL_TRACES_SAMPLER` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: reading produce requests' records for trace context
/// costs broker CPU (docs/observability.md, Overhead), which someone who set an endpoint for
/// metrics has not chosen to pay.
fn endpoint(signal: &str) -> anyhow::Result<Option<(String, String)>> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let exporter_key = format!("OTEL_{signal}_EXPORTER");
    let own_endpoint = format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT");
    let Some(found) = [own_endpoint.clone(), "OTEL_EXPORTER_OTLP_ENDPOINT".to_string()]
        .into_iter()
        .find_map(|k| var(&k).map(|v| (k, v)))
    else {
        return Ok(None);
    };
    // A list (the standard allows several exporters) is fine if OTLP is one of them.
    let asked = match var(&exporter_key).map(|v| v.trim().to_ascii_lowercase()) {
        None => signal == "METRICS" || var("OTEL_TRACES_SAMPLER").is_some() || var(&own_endpoint).is_some(),
        Some(v) if v.split(',').any(|e| e.trim() == "otlp") => true,
        Some(v) if v == "none" => false,
        Some(other) => {
            anyhow::bail!("{exporter_key}={other}: expected otlp or none (the broker exports over OTLP/HTTP only)")
        }
    };
    Ok(asked.then_some(found))
}

/// A variable of the environment, unless it is unset or blank (which the standard reads as unset).
fn var(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

/// The sampler the `OTEL_TRACES_SAMPLER*` variables name; a value it cannot use stops startup.
fn sampler() -> anyhow::Result<Sampler> {
    sampler_from(var("OTEL_TRACES_SAMPLER").as_deref(), var("OTEL_TRACES_SAMPLER_ARG").as_deref())
}

/// The sampler that `OTEL_TRACES_SAMPLER` = `name` and `OTEL_TRACES_SAMPLER_ARG` = `arg` name.
fn sampler_from(name: Option<&str>, arg: Option<&str>) -> anyhow::Result<Sampler> {
    let ratio = |default: f64| -> anyhow::Result<f64> {
        let Some(a) = arg else { return Ok(default) };
        a.trim().parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)).ok_or_else(|| {
            anyhow::anyhow!("OTEL_TRACES_SAMPLER_ARG={a}: expected a sampling ratio from 0 to 1 (e.g. 0.01)")
        })
    };
    let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
    Ok(match name.map(|n| n.trim().to_ascii_lowercase()).as_deref() {
        None => parent_based(Sampler::TraceIdRatioBased(ratio(DEFAULT_SAMPLE_RATIO)?)),
        Some("always_on") => Sampler::AlwaysOn,
        Some("always_off") => Sampler::AlwaysOff,
        Some("traceidratio") => Sampler::TraceIdRatioBased(ratio(1.0)?),
        Some("parentbased_always_on") => parent_based(Sampler::AlwaysOn),
        Some("parentbased_always_off") => parent_based(Sampler::AlwaysOff),
        Some("parentbased_traceidratio") => parent_based(Sampler::TraceIdRatioBased(ratio(1.0)?)),
        Some(other) => anyhow::bail!(
            "OTEL_TRACES_SAMPLER={other}: expected always_on, always_off, traceidratio, parentbased_always_on, \
             parentbased_always_off or parentbased_traceidratio"
        ),
    })
}

/// The resource every signal carries: `service.name` `oxbow-broker` and `service.instance.id`
/// the node id, unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say otherwise (the
/// standard variables win over the defaults, as in every OpenTelemetry SDK).
fn resource(node_id: i32) -> Resource {
    let mut r = Resource::builder_empty()
        .with_service_name("oxbow-broker")
        .with_attribute(KeyValue::new("service.instance.id", node_id.to_string()))
        .with_detectors(&[Box::new(TelemetryResourceDetector), Box::new(EnvResourceDetector::new())]);
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        r = r.with_service_name(name);
    }
    r.build()
}

fn check_url(key: &str, url: &str) -> anyhow::Result<()> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        let e = if key == "OTEL_EXPORTER_OTLP_ENDPOINT" {
            "http://collector:4318"
        } else {
            "http://collector:4318/v1/<signal>: a signal's own endpoint is used as is"
        };
        anyhow::bail!("{key}={url}: expected an http:// or https:// URL (OTLP/HTTP, e.g. {e})");
    }
    Ok(())
}

impl Exporter {
    /// Starts metric and trace export, each if its endpoint is set; an endpoint that is not an
    /// http(s) URL, or a sampler setting the broker cannot use, stops startup naming the
    /// variable. Call outside the async runtime: the OTLP client is a blocking one, on the
    /// exporters' own threads.
    pub fn from_env(node_id: i32) -> anyhow::Result<Option<Exporter>> {
        // Every setting is checked before anything starts exporting, the sampler's even when
        // nothing is traced: a value the broker cannot use is a mistake either way.
        let sampler = sampler()?;
        let metrics = endpoint("METRICS")?;
        let traces = endpoint("TRACES")?;
        if metrics.is_none() && traces.is_none() {
            return Ok(None);
        }
        for (key, url) in metrics.iter().chain(&traces) {
            check_url(key, url)?;
        }
        let resource = resource(node_id);
        let meter = match metrics {
            Some((key, url)) => {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| anyhow::anyhow!("{key}={url}: {e}"))?;
                tracing::info!(endpoint = %url, "exporting metrics over OTLP/HTTP");
                Some(
                    SdkMeterProvider::builder()
                        .with_resource(resource.clone())
                        .with_periodic_exporter(exporter)
                        .build(),
                )
            }
            None => None,
        };
        let tracer = match traces {
            Some((key, url)) => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| anyhow::anyhow!("{key}={url}: {e}"))?;
                tracing::info!(endpoint = %url, sampler = ?sampler, "exporting traces over OTLP/HTTP");
                let provider = SdkTracerProvider::builder()
                    .with_resource(resource)
                    .with_sampler(sampler)
                    .with_batch_exporter(exporter)
                    .build();
                crate::trace::install(provider.tracer("oxbow-broker"));
                Some(provider)
            }
            None => None,
        };
        Ok(Some(Exporter { meter, tracer }))
    }

    /// Registers the broker's instruments; they read `broker` at each collection.
    pub fn observe(&self, broker: &Arc<Broker>) {
        let Some(provider) = &self.meter else { return };
        let meter = provider.meter("oxbow-broker");
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
        if let Some(provider) = &self.meter {
            register(&provider.meter("oxbow-broker"), Watched::Controller(quorum.clone()));
        }
    }

    /// Exports what is pending and stops. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Some(Err(e)) = self.meter.map(|m| m.shutdown()) {
            tracing::debug!(error = %e, "metric exporter shutdown");
        }
        if let Some(Err(e)) = self.tracer.map(|t| t.shutdown()) {
            tracing::debug!(error = %e, "span exporter shutdown");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: Option<&str>, arg: Option<&str>) -> String {
        sampler_from(name, arg).map_or_else(|e| format!("error: {e}"), |s| format!("{s:?}"))
    }

    #[test]
    fn samplers_follow_the_standard_variables_with_the_brokers_default() {
        assert_eq!(named(None, None), "ParentBased(TraceIdRatioBased(0.01))");
        assert_eq!(named(None, Some("0.5")), "ParentBased(TraceIdRatioBased(0.5))");
        assert_eq!(named(Some("always_on"), None), "AlwaysOn");
        assert_eq!(named(Some(" ParentBased_Always_Off "), None), "ParentBased(AlwaysOff)");
        assert_eq!(named(Some("traceidratio"), None), "TraceIdRatioBased(1.0)");
        assert_eq!(named(Some("parentbased_traceidratio"), Some("0")), "ParentBased(TraceIdRatioBased(0.0))");
        assert!(named(Some("sometimes"), None).starts_with("error: OTEL_TRACES_SAMPLER=sometimes: expected"));
        for bad in ["2", "-0.1", "half", "NaN"] {
            let got = named(Some("traceidratio"), Some(bad));
            assert!(got.starts_with(&format!("error: OTEL_TRACES_SAMPLER_ARG={bad}: expected")), "{got}");
        }
    }
}
