//! oxbow-operator: reconciles `Cluster` and `Topic` resources (group `oxbow.io`).
//!
//! - [`crd`]: the resource types; `crdgen` turns them into the CRD YAML in `crds/` and the chart.
//! - [`cluster`]: the Cluster controller. Pure parts: [`cluster::desired`] (objects from a spec),
//!   [`cluster::restart`] (which pod may restart now), [`cluster::status`]; the reconciler applies
//!   them with server-side apply under one field manager.
//! - [`certs`] (pure): certificate authorities and the certificates they sign;
//!   [`cluster::tls`] keeps a secured Cluster's in Secrets, [`cluster::listeners`] turns
//!   `spec.listeners` into broker settings.
//! - [`user`]: the User controller: credentials in a Secret, SCRAM credentials and ACLs in
//!   the cluster through the admin protocol.
//! - [`k8s`]: the shared [`k8s::Context`], server-side apply of objects and status under one
//!   field manager, Events.
//! - [`http`]: probes and the Prometheus `/metrics` endpoint; [`telemetry`]: logs, traces and
//!   metrics (OTLP).
//! - [`leader`]: leader election through a Lease, so replicas can run and one reconciles.
//! - [`topic`]: the Topic controller. [`topic::plan`] (pure) decides create / grow / config
//!   changes and refusals; [`kafka`] is the small Kafka admin client that carries them out.
//!
//! The operator shares no code with the broker beyond the Kafka protocol: it talks to brokers as
//! any Kafka admin client would.

pub mod certs;
pub mod cluster;
pub mod conditions;
pub mod crd;
pub mod crdgen;
pub mod http;
pub mod k8s;
pub mod kafka;
pub mod leader;
pub mod telemetry;
pub mod topic;
pub mod user;

/// Errors of a reconcile pass; every one is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serializing an object: {0}")]
    Serialize(#[source] serde_json::Error),
    #[error("the resource has no namespace")]
    MissingNamespace,
    #[error("Kafka: {0}")]
    Kafka(#[from] kafka::KafkaError),
    #[error("certificates: {0}")]
    Certificates(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// Kubernetes refused the change itself (a 4xx): retrying the same spec gets the same answer.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(resp)) if (400..500).contains(&resp.code))
    }

    /// The condition reason of a failed reconcile: what kind of refusal it was.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(resp)) => match resp.code {
                422 => "Invalid",
                403 if resp.message.contains("exceeded quota") => "QuotaExceeded",
                403 => "Forbidden",
                409 => "Conflict",
                404 => "NotFound",
                400..=499 => "KubernetesRefused",
                _ => "KubernetesUnavailable",
            },
            Error::Kube(_) => "KubernetesUnavailable",
            Error::Serialize(_) | Error::MissingNamespace => "InternalError",
            Error::Kafka(_) => "KafkaError",
            Error::Certificates(_) => "CertificatesFailed",
            Error::Finalizer(_) => "FinalizerFailed",
        }
    }
}

/// This package's directory (golden files, generated CRDs): cargo's value at run time
/// (`cargo run`, `cargo test`), else the operator directory of the checkout the current directory
/// is in, else the one this binary was built from. A binary reused from a shared target dir may
/// have been built in another checkout, whose files it would otherwise read (or `crdgen --check`
/// compare).
pub fn manifest_dir() -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        return PathBuf::from(dir);
    }
    let is_checkout = |d: &Path| d.join("operator/Cargo.toml").is_file() && d.join("crds").is_dir();
    std::env::current_dir()
        .ok()
        .and_then(|cwd| cwd.ancestors().find(|d| is_checkout(d)).map(|d| d.join("operator")))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
