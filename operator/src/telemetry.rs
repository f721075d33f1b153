//! Logs, traces and metrics of the operator.
//!
//! Logs: `tracing` to stderr (JSON with `LOG_FORMAT=json`). When `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set (the standard OpenTelemetry variable, e.g. `http://otel-collector:4318`; the standard
//! `OTEL_TRACES_EXPORTER=none` and `OTEL_METRICS_EXPORTER=none` turn one signal off), the same
//! spans go out as OTLP/HTTP traces (every reconcile is a span, with the object it reconciled),
//! and [`Metrics`] as OTLP metrics: `oxbow.operator.reconciles` (counter; attributes
//! `controller`, `result`), `oxbow.operator.reconcile.duration` (histogram, seconds, by
//! `controller`), `oxbow.operator.events` (counter; `kind`, `type`, `reason`) and
//! `oxbow.operator.leader` (gauge, 1 on the replica that reconciles).
//! Attributes are bounded: no object names, so cardinality does not grow with resources.
//!
//! The same counts are kept in process for the Prometheus text endpoint (`/metrics`, see
//! [`crate::http`]), for users who scrape rather than run a collector; [`Metrics::prometheus`]
//! renders them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, ObservableGauge};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The exporters, kept for a flush at shutdown.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

/// Sets up logging and, with an OTLP endpoint, trace and metric export. Call outside the async
/// runtime: the OTLP HTTP client is a blocking one.
pub fn init() -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").as_deref() == Ok("json");
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().filter(|e| !e.is_empty());

    // The standard switches: OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none turns one
    // signal off (e.g. for a collector with no traces pipeline, which answers 404).
    let wanted = |var: &str| endpoint.is_some() && std::env::var(var).as_deref() != Ok("none");
    let resource = Resource::builder().with_service_name("oxbow-operator").build();
    let tracer = if wanted("OTEL_TRACES_EXPORTER") {
        let spans = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
        Some(SdkTracerProvider::builder().with_resource(resource.clone()).with_batch_exporter(spans).build())
    } else {
        None
    };
    let meter = if wanted("OTEL_METRICS_EXPORTER") {
        let metrics = opentelemetry_otlp::MetricExporter::builder().with_http().build()?;
        let meter = SdkMeterProvider::builder().with_resource(resource).with_periodic_exporter(metrics).build();
        opentelemetry::global::set_meter_provider(meter.clone());
        Some(meter)
    } else {
        None
    };
    let otel_layer = tracer.as_ref().map(|t| tracing_opentelemetry::layer().with_tracer(t.tracer("oxbow-operator")));
    let registry = tracing_subscriber::registry().with(filter).with(otel_layer);
    if json {
        registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).init();
    } else {
        registry.with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).init();
    }
    if let Some(e) = endpoint {
        tracing::info!(endpoint = %e, traces = tracer.is_some(), metrics = meter.is_some(), "exporting over OTLP/HTTP");
    }
    Ok(Telemetry { tracer, meter })
}

impl Telemetry {
    /// Flushes what is buffered. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Some(t) = self.tracer {
            let _ = t.shutdown();
        }
        if let Some(m) = self.meter {
            let _ = m.shutdown();
        }
    }
}

/// Reconcile and event metrics, recorded by every controller.
#[derive(Clone)]
pub struct Metrics {
    reconciles: Counter<u64>,
    duration: Histogram<f64>,
    events: Counter<u64>,
    scraped: Arc<Mutex<Scraped>>,
    leading: Arc<AtomicBool>,
    /// Reads `leading` at every export (kept: the callback lives as long as the gauge).
    _leader: ObservableGauge<u64>,
}

/// Upper bounds (seconds) of the reconcile duration histogram's buckets.
const BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// What `/metrics` shows. Keys are bounded: controller names, results, kinds and event reasons
/// are constants of the code or Kubernetes' own pod-state reasons.
#[derive(Default)]
struct Scraped {
    reconciles: BTreeMap<(&'static str, &'static str), u64>,
    /// controller -> (count per bucket, then +Inf; sum)
    duration: BTreeMap<&'static str, ([u64; BUCKETS.len() + 1], f64)>,
    /// (kind, type, reason) -> count
    events: BTreeMap<(String, &'static str, String), u64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let meter = opentelemetry::global::meter("oxbow-operator");
        let leading = Arc::new(AtomicBool::new(false));
        Metrics {
            reconciles: meter
                .u64_counter("oxbow.operator.reconciles")
                .with_description("Reconcile passes, by controller and result")
                .build(),
            duration: meter
                .f64_histogram("oxbow.operator.reconcile.duration")
                .with_unit("s")
                .with_description("Time of one reconcile pass")
                // The same buckets as /metrics (the SDK's default bounds, 0 to 10,000, are for
                // milliseconds: every pass would fall in the first).
                .with_boundaries(BUCKETS.to_vec())
                .build(),
            events: meter
                .u64_counter("oxbow.operator.events")
                .with_description("Kubernetes Events the operator recorded, by kind, type and reason")
                .build(),
            scraped: Default::default(),
            leading: leading.clone(),
            _leader: meter
                .u64_observable_gauge("oxbow.operator.leader")
                .with_description("1 while this replica holds the leader Lease and reconciles")
                .with_callback(move |o| o.observe(u64::from(leading.load(Ordering::Acquire)), &[]))
                .build(),
        }
    }
}

impl Metrics {
    /// Runs one reconcile pass and records it.
    pub async fn timed<T, E>(
        &self,
        controller: &'static str,
        pass: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let start = std::time::Instant::now();
        let result = pass.await;
        self.record(controller, start.elapsed().as_secs_f64(), result.is_ok());
        result
    }

    pub fn record(&self, controller: &'static str, seconds: f64, ok: bool) {
        let attrs =
            [KeyValue::new("controller", controller), KeyValue::new("result", if ok { "success" } else { "error" })];
        self.reconciles.add(1, &attrs);
        self.duration.record(seconds, &attrs[..1]);
        let mut scraped = self.scraped.lock().unwrap_or_else(|e| e.into_inner());
        *scraped.reconciles.entry((controller, if ok { "success" } else { "error" })).or_default() += 1;
        let (buckets, sum) = scraped.duration.entry(controller).or_default();
        let i = BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(BUCKETS.len());
        buckets[i] += 1;
        *sum += seconds;
    }

    /// Counts an Event the operator recorded on an object of `kind`.
    pub fn event(&self, kind: &str, warning: bool, reason: &str) {
        let type_ = if warning { "Warning" } else { "Normal" };
        self.events.add(
            1,
            &[
                KeyValue::new("kind", kind.to_string()),
                KeyValue::new("type", type_),
                KeyValue::new("reason", reason.to_string()),
            ],
        );
        let mut scraped = self.scraped.lock().unwrap_or_else(|e| e.into_inner());
        *scraped.events.entry((kind.to_string(), type_, reason.to_string())).or_default() += 1;
    }

    /// This replica holds the leader Lease (or runs without leader election) and reconciles.
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Release);
    }

    /// Everything recorded, in the Prometheus text format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        use std::fmt::Write as _;
        let scraped = self.scraped.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        let _ = writeln!(out, "# HELP oxbow_operator_info The operator's version.");
        let _ = writeln!(out, "# TYPE oxbow_operator_info gauge");
        let _ = writeln!(out, "oxbow_operator_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        let _ =
            writeln!(out, "# HELP oxbow_operator_leader 1 while this replica holds the leader Lease and reconciles.");
        let _ = writeln!(out, "# TYPE oxbow_operator_leader gauge");
        let _ = writeln!(out, "oxbow_operator_leader {}", u8::from(self.leading.load(Ordering::Acquire)));
        let _ = writeln!(out, "# HELP oxbow_operator_reconciles_total Reconcile passes, by controller and result.");
        let _ = writeln!(out, "# TYPE oxbow_operator_reconciles_total counter");
        for ((controller, result), n) in &scraped.reconciles {
            let _ =
                writeln!(out, "oxbow_operator_reconciles_total{{controller=\"{controller}\",result=\"{result}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP oxbow_operator_reconcile_duration_seconds Time of one reconcile pass.");
        let _ = writeln!(out, "# TYPE oxbow_operator_reconcile_duration_seconds histogram");
        for (controller, (buckets, sum)) in &scraped.duration {
            let mut cumulative = 0;
            for (i, n) in buckets.iter().enumerate() {
                cumulative += n;
                let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "oxbow_operator_reconcile_duration_seconds_bucket{{controller=\"{controller}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(out, "oxbow_operator_reconcile_duration_seconds_sum{{controller=\"{controller}\"}} {sum}");
            let _ = writeln!(
                out,
                "oxbow_operator_reconcile_duration_seconds_count{{controller=\"{controller}\"}} {cumulative}"
            );
        }
        let _ =
            writeln!(out, "# HELP oxbow_operator_events_total Kubernetes Events recorded, by kind, type and reason.");
        let _ = writeln!(out, "# TYPE oxbow_operator_events_total counter");
        for ((kind, type_, reason), n) in &scraped.events {
            let _ = writeln!(
                out,
                "oxbow_operator_events_total{{kind=\"{}\",type=\"{type_}\",reason=\"{}\"}} {n}",
                escape(kind),
                escape(reason)
            );
        }
        out
    }
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_counts_reconciles_buckets_and_events() {
        let m = Metrics::default();
        m.record("cluster", 0.2, true);
        m.record("cluster", 3.0, false);
        m.record("topic", 100.0, true);
        m.event("Cluster", true, "ErrImagePull");
        m.event("Cluster", true, "ErrImagePull");
        m.event("Topic", false, "say \"hi\"");
        m.set_leading(true);
        let text = m.prometheus();
        for line in [
            "oxbow_operator_leader 1",
            "oxbow_operator_reconciles_total{controller=\"cluster\",result=\"error\"} 1",
            "oxbow_operator_reconciles_total{controller=\"cluster\",result=\"success\"} 1",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"0.1\"} 0",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"0.25\"} 1",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"5\"} 2",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"+Inf\"} 2",
            "oxbow_operator_reconcile_duration_seconds_count{controller=\"cluster\"} 2",
            "oxbow_operator_reconcile_duration_seconds_sum{controller=\"cluster\"} 3.2",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"topic\",le=\"60\"} 0",
            "oxbow_operator_reconcile_duration_seconds_bucket{controller=\"topic\",le=\"+Inf\"} 1",
            "oxbow_operator_events_total{kind=\"Cluster\",type=\"Warning\",reason=\"ErrImagePull\"} 2",
            "oxbow_operator_events_total{kind=\"Topic\",type=\"Normal\",reason=\"say \\\"hi\\\"\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }
}
