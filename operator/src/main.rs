//! `oxbow-operator`: runs the controllers until SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::runtime::events::Reporter;
use oxbow_operator::cluster::{
    self,
    desired::{Settings, Waits},
};
use oxbow_operator::crd::TelemetrySpec;
use oxbow_operator::http::{self, Health};
use oxbow_operator::k8s::Context;
use oxbow_operator::leader::LeaderElector;

const USAGE: &str = "usage: oxbow-operator [--namespace NS[,NS...]]... [--broker-image IMAGE] [--cluster-domain DOMAIN]
                      [--lease NAME | --no-leader-election] [--http-listener ADDR|none]
                      [--broker-otlp-endpoint URL [--broker-export-interval SECONDS]]
                      [--restart-settle SECONDS] [--secret-propagation SECONDS]

Reconciles oxbow.io Cluster, Topic and User resources. Watches every namespace unless --namespace
(or WATCH_NAMESPACE, comma-separated) names some. --http-listener (default 0.0.0.0:8080) serves
/livez, /readyz and /metrics (Prometheus text). Defaults: --broker-image from OXBOW_BROKER_IMAGE,
--cluster-domain cluster.local. Leader election: replicas share the Lease --lease (default
oxbow-operator) in POD_NAMESPACE, identified by POD_NAME; only the holder reconciles. Without
POD_NAMESPACE and POD_NAME (outside a pod) or with --no-leader-election it reconciles at once.
--broker-otlp-endpoint (an http:// or https:// URL) is where brokers of a Cluster without
spec.telemetry send their metrics, every --broker-export-interval seconds (1 to 3600; default 60).
--restart-settle (default 30): seconds a restarted broker is Ready before the next restarts, for
clients' DNS caches to learn its new address. --secret-propagation (default 90): seconds the
kubelets take to update a changed Secret in the pods that mount it (a clients CA key replacement
waits this long between its steps). Both accept 0 to 3600.
Logs: RUST_LOG (default info), JSON with LOG_FORMAT=json. Traces and metrics go out over
OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set (OTEL_TRACES_EXPORTER=none or
OTEL_METRICS_EXPORTER=none turns either off).";

struct Args {
    /// Empty: every namespace.
    namespaces: Vec<String>,
    http: Option<SocketAddr>,
    broker_image: String,
    cluster_domain: String,
    lease: Option<String>,
    broker_telemetry: Option<TelemetrySpec>,
    waits: Waits,
}

/// Whole seconds from `min` to 3600, for the flag `flag`.
fn seconds(flag: &str, v: &str, min: u16) -> Result<u16, String> {
    v.parse::<u16>()
        .ok()
        .filter(|s| (min..=3600).contains(s))
        .ok_or(format!("{flag} {v:?}: expected whole seconds from {min} to 3600"))
}

fn parse_args() -> Result<Args, String> {
    let mut out = Args {
        namespaces: Vec::new(),
        http: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
        broker_image: std::env::var("OXBOW_BROKER_IMAGE").unwrap_or_default(),
        cluster_domain: "cluster.local".into(),
        lease: Some("oxbow-operator".into()),
        broker_telemetry: None,
        waits: Waits::default(),
    };
    let mut export_interval = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        // Both `--flag value` and `--flag=value`.
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--namespace" => out.namespaces.extend(namespace_list(&value()?)?),
            "--http-listener" => {
                let v = value()?;
                out.http = match v.as_str() {
                    "none" | "" => None,
                    _ => Some(v.parse().map_err(|_| {
                        format!("--http-listener {v:?}: expected HOST:PORT with an IP address (0.0.0.0:8080), or none")
                    })?),
                };
            }
            "--broker-image" => out.broker_image = value()?,
            "--cluster-domain" => out.cluster_domain = value()?,
            "--lease" => out.lease = Some(value()?),
            "--no-leader-election" => out.lease = None,
            "--broker-otlp-endpoint" => {
                let v = value()?;
                if !(v.starts_with("http://") || v.starts_with("https://")) {
                    return Err(format!("--broker-otlp-endpoint {v:?}: expected an http:// or https:// URL"));
                }
                out.broker_telemetry =
                    Some(TelemetrySpec { otlp_endpoint: v, export_interval_seconds: None, trace_sample_ratio: None });
            }
            "--broker-export-interval" => export_interval = Some(i32::from(seconds(&flag, &value()?, 1)?)),
            "--restart-settle" => out.waits.restart_settle = Duration::from_secs(seconds(&flag, &value()?, 0)?.into()),
            "--secret-propagation" => {
                out.waits.secret_propagation = Duration::from_secs(seconds(&flag, &value()?, 0)?.into())
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    match (&mut out.broker_telemetry, export_interval) {
        (Some(t), seconds) => t.export_interval_seconds = seconds,
        (None, Some(_)) => return Err("--broker-export-interval needs --broker-otlp-endpoint".into()),
        (None, None) => {}
    }
    if out.namespaces.is_empty() {
        out.namespaces = namespace_list(&std::env::var("WATCH_NAMESPACE").unwrap_or_default())
            .map_err(|e| format!("WATCH_NAMESPACE: {e}"))?;
    }
    out.namespaces.sort();
    out.namespaces.dedup();
    if out.broker_image.is_empty() {
        return Err("--broker-image (or OXBOW_BROKER_IMAGE) is required: the image of broker pods".into());
    }
    Ok(out)
}

/// A comma-separated list of namespace names (RFC 1123 labels); blanks between commas are skipped.
fn namespace_list(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for ns in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let label = ns.len() <= 63
            && ns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !ns.starts_with('-')
            && !ns.ends_with('-');
        if !label {
            return Err(format!("{ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"));
        }
        out.push(ns.to_string());
    }
    Ok(out)
}

/// SIGTERM or SIGINT.
async fn terminate() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> anyhow::Result<()> {
    // Telemetry lives outside the runtime: its OTLP client is a blocking one.
    let telemetry = oxbow_operator::telemetry::init()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(run());
    drop(runtime);
    telemetry.shutdown();
    result
}

async fn run() -> anyhow::Result<()> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(e) => {
            eprintln!("oxbow-operator: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let metrics = oxbow_operator::telemetry::Metrics::default();
    let health = Arc::new(Health::new(metrics.clone()));
    if let Some(addr) = args.http {
        let bound = http::serve(addr, health.clone()).await.with_context(|| format!("--http-listener {addr}"))?;
        tracing::info!(%bound, "serving /livez, /readyz and /metrics");
    }
    // From the moment a shutdown begins, not ready (the controllers then finish their passes).
    tokio::spawn({
        let health = health.clone();
        async move {
            terminate().await;
            health.set_ready(false);
        }
    });
    let client = Client::try_default().await.context("connecting to the Kubernetes API")?;
    let version = client.apiserver_version().await.context("asking the Kubernetes API server its version")?;
    health.set_ready(true);
    let ctx = Arc::new(Context {
        client,
        settings: Settings {
            broker_image: args.broker_image,
            cluster_domain: args.cluster_domain,
            telemetry: args.broker_telemetry,
            waits: args.waits,
        },
        reporter: Reporter { controller: "oxbow-operator".into(), instance: std::env::var("POD_NAME").ok() },
        metrics,
        backoff: Default::default(),
    });
    tracing::info!(namespaces = ?args.namespaces, kubernetes = %version.git_version, "oxbow-operator started");
    let pod = (std::env::var("POD_NAMESPACE"), std::env::var("POD_NAME"));
    let elector = match (&args.lease, pod) {
        (Some(lease), (Ok(ns), Ok(me))) => {
            Some(LeaderElector::new(ctx.client.clone(), &ns, lease, &me, Duration::from_secs(15)))
        }
        _ => None,
    };
    if let Some(e) = &elector {
        tokio::select! {
            _ = e.acquire() => {}
            _ = terminate() => {
                tracing::info!("stopped before becoming the leader");
                return Ok(());
            }
        }
    }
    ctx.metrics.set_leading(true);
    // One controller of each kind per watched namespace (the operator's Role is per namespace:
    // a cluster-wide watch would be refused), or one over all namespaces.
    let scopes: Vec<Option<String>> =
        if args.namespaces.is_empty() { vec![None] } else { args.namespaces.iter().cloned().map(Some).collect() };
    let controllers = futures_util::future::join_all(scopes.into_iter().map(|ns| {
        let ctx = ctx.clone();
        async move {
            tokio::join!(
                cluster::run(ctx.clone(), ns.clone()),
                oxbow_operator::topic::run(ctx.clone(), ns.clone()),
                oxbow_operator::user::run(ctx, ns)
            )
        }
    }));
    match &elector {
        None => {
            controllers.await;
        }
        Some(e) => {
            tokio::select! {
                _ = controllers => e.release().await,
                _ = e.hold() => {
                    // Someone else may lead now: stop reconciling at once; Kubernetes restarts us.
                    anyhow::bail!("lost leadership");
                }
            }
        }
    }
    health.set_ready(false);
    ctx.metrics.set_leading(false);
    tracing::info!("oxbow-operator stopped");
    Ok(())
}
