//! Logs, traces and metrics of the operator.
//!
//! Logs: `tracing` to stderr (JSON with `LOG_FORMAT=json`). When `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set (the standard OpenTelemetry variable, e.g. `http://otel-collector:4318`), the same
//! spans go out as OTLP/HTTP traces (every reconcile is a span, with the object it reconciled),
//! and [`Metrics`] as OTLP metrics: `oxbow.operator.reconciles` (counter; attributes
//! `controller`, `result`) and `oxbow.operator.reconcile.duration` (histogram, seconds).
//! Attributes are bounded: no object names, so cardinality does not grow with resources.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
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

    let (tracer, meter) = match &endpoint {
        Some(_) => {
            let resource = Resource::builder().with_service_name("oxbow-operator").build();
            let spans = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
            let tracer =
                SdkTracerProvider::builder().with_resource(resource.clone()).with_batch_exporter(spans).build();
            let metrics = opentelemetry_otlp::MetricExporter::builder().with_http().build()?;
            let meter = SdkMeterProvider::builder().with_resource(resource).with_periodic_exporter(metrics).build();
            opentelemetry::global::set_meter_provider(meter.clone());
            (Some(tracer), Some(meter))
        }
        None => (None, None),
    };
    let otel_layer = tracer.as_ref().map(|t| tracing_opentelemetry::layer().with_tracer(t.tracer("oxbow-operator")));
    let registry = tracing_subscriber::registry().with(filter).with(otel_layer);
    if json {
        registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).init();
    } else {
        registry.with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).init();
    }
    if let Some(e) = endpoint {
        tracing::info!(endpoint = %e, "exporting traces and metrics over OTLP/HTTP");
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

/// Reconcile metrics, recorded by both controllers.
#[derive(Clone)]
pub struct Metrics {
    reconciles: Counter<u64>,
    duration: Histogram<f64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let meter = opentelemetry::global::meter("oxbow-operator");
        Metrics {
            reconciles: meter
                .u64_counter("oxbow.operator.reconciles")
                .with_description("Reconcile passes, by controller and result")
                .build(),
            duration: meter
                .f64_histogram("oxbow.operator.reconcile.duration")
                .with_unit("s")
                .with_description("Time of one reconcile pass")
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
    }
}
