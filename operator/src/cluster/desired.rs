//! What a `Cluster` should produce: pure functions from the resource (and the operator's
//! settings) to the Kubernetes objects, unit-tested against golden YAML.
//!
//! - ConfigMap `<name>-config`: `server.properties` (spec.config over the operator's defaults);
//!   its hash is on the pod template, so a config change is a template change.
//! - Service `<name>-brokers`: headless, publishes not-ready addresses, gives each broker its
//!   stable DNS name (the advertised listener).
//! - Service `<name>-bootstrap`: ClusterIP, what clients bootstrap from.
//! - StatefulSet `<name>-broker`: `OnDelete` updates (the operator decides the restart order),
//!   node.id from the pod index, a PVC template (or an emptyDir when storage is ephemeral).
//! - PodDisruptionBudget `<name>-broker`: at most one broker voluntarily disrupted.
//! - With dedicated controllers (`controllers.mode: dedicated`): StatefulSet `<name>-controller`
//!   (ordinals, and so node ids, from 1000; `controller.properties` of the same ConfigMap),
//!   its headless Service `<name>-controllers` and PodDisruptionBudget `<name>-controller`.
//!
//! All carry an owner reference to the Cluster, so deleting it deletes them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::listeners;
use crate::crd::{Cluster, FIRST_CONTROLLER_ID, TelemetrySpec};
use pod::{Role, pod_set};

/// Kafka port of every broker.
pub const KAFKA_PORT: i32 = 9092;
/// CONTROLLER listener (the metadata quorum's gRPC) of every broker.
pub const CONTROLLER_PORT: i32 = 9093;
/// Health port (`/livez`, `/readyz`) of every broker.
pub const HEALTH_PORT: i32 = 8080;
/// Where a broker's volume is mounted; its log dirs live below.
pub const DATA_DIR: &str = "/var/lib/oxbow";
/// Annotation on the pod template: hash of the server.properties the pods were started with.
pub const CONFIG_HASH_ANNOTATION: &str = "oxbow.io/config-hash";
/// The broker image's user and group (distroless `nonroot`), which broker pods run as and
/// which owns their volume (`fsGroup`).
pub const BROKER_UID: i64 = 65532;
/// Seconds a broker gets between SIGTERM and SIGKILL: its controlled shutdown (flush, close
/// logs, write the clean-shutdown marker) must fit.
pub const TERMINATION_GRACE_SECONDS: i64 = 120;

/// Settings that come from the operator, not from the resource.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Broker image when `spec.image` is empty.
    pub broker_image: String,
    /// The Kubernetes cluster's DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// Where brokers of a Cluster without `spec.telemetry` send their metrics
    /// (`--broker-otlp-endpoint`); None: nowhere.
    pub telemetry: Option<TelemetrySpec>,
    /// How long the operator waits for things Kubernetes does at its own pace.
    pub waits: Waits,
}

/// Waits for things Kubernetes does at its own pace (`--restart-settle`,
/// `--secret-propagation`). The defaults suit any cluster; a test cluster whose kubelet syncs
/// more often may shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waits {
    /// How long a restarted broker is Ready before the next restarts ([`super::restart::SETTLE`]).
    pub restart_settle: std::time::Duration,
    /// How long a changed Secret takes to reach the files of the pods that mount it
    /// ([`super::tls::PROPAGATION`]).
    pub secret_propagation: std::time::Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits { restart_settle: super::restart::SETTLE, secret_propagation: super::tls::PROPAGATION }
    }
}

/// Every object a Cluster owns.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub config_map: ConfigMap,
    pub headless: Service,
    pub bootstrap: Service,
    pub stateful_set: StatefulSet,
    pub pdb: PodDisruptionBudget,
    /// The dedicated controllers' objects (`controllers.mode: dedicated`).
    pub controllers: Option<ControllerObjects>,
}

/// A dedicated controllers' StatefulSet, headless Service and disruption budget.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerObjects {
    pub headless: Service,
    pub stateful_set: StatefulSet,
    pub pdb: PodDisruptionBudget,
}

/// Object names derived from the Cluster's name.
pub struct Names {
    pub config_map: String,
    pub headless: String,
    pub bootstrap: String,
    pub stateful_set: String,
    /// The dedicated controllers' StatefulSet and headless Service.
    pub controller_set: String,
    pub controller_headless: String,
    /// The brokers' certificate, key and trust bundles (Secret), with `listeners`.
    pub broker_tls: String,
    /// The CAs the operator makes itself (Secrets), with `listeners`.
    pub cluster_ca: String,
    pub clients_ca: String,
}

impl Names {
    pub fn of(cluster: &str) -> Names {
        Names {
            config_map: format!("{cluster}-config"),
            headless: format!("{cluster}-brokers"),
            bootstrap: format!("{cluster}-bootstrap"),
            stateful_set: format!("{cluster}-broker"),
            controller_set: format!("{cluster}-controller"),
            controller_headless: format!("{cluster}-controllers"),
            broker_tls: format!("{cluster}-broker-tls"),
            cluster_ca: format!("{cluster}-cluster-ca"),
            clients_ca: format!("{cluster}-clients-ca"),
        }
    }
}

/// Labels that select a Cluster's broker pods.
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "oxbow".to_string()),
        ("app.kubernetes.io/instance".to_string(), cluster.to_string()),
        ("app.kubernetes.io/component".to_string(), "broker".to_string()),
    ])
}

/// The selector as a label-selector string (for the scale subresource's status).
pub fn selector_string(cluster: &str) -> String {
    label_string(&selector_labels(cluster))
}

/// Labels that select a Cluster's dedicated controller pods.
pub fn controller_selector_labels(cluster: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(cluster);
    l.insert("app.kubernetes.io/component".into(), "controller".into());
    l
}

/// [`controller_selector_labels`] as a label-selector string.
pub fn controller_selector_string(cluster: &str) -> String {
    label_string(&controller_selector_labels(cluster))
}

fn label_string(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn managed(mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels.insert("app.kubernetes.io/managed-by".into(), "oxbow-operator".into());
    labels
}

fn common_labels(cluster: &str) -> BTreeMap<String, String> {
    managed(selector_labels(cluster))
}

/// The cluster id every broker is started with: the Cluster's uid, as Kafka writes ids
/// (URL-safe base64 of its 16 bytes, 22 characters). Stable for the life of the resource.
pub fn cluster_id(cluster: &Cluster) -> String {
    let uid = cluster.metadata.uid.as_deref().and_then(|u| uuid::Uuid::parse_str(u).ok()).unwrap_or_default();
    oxbow_protocol::ids::to_kafka_string(uid)
}

/// Broker `id`'s stable DNS name (the headless Service's record for its pod).
pub fn broker_host(cluster: &Cluster, settings: &Settings, id: i32) -> String {
    let names = Names::of(&cluster.name_any());
    let ns = cluster.namespace().unwrap_or_default();
    format!("{}-{id}.{}.{ns}.svc.{}", names.stateful_set, names.headless, settings.cluster_domain)
}

/// Dedicated controller `id`'s stable DNS name (its headless Service's record for its pod).
pub fn controller_host(cluster: &Cluster, settings: &Settings, id: i32) -> String {
    let names = Names::of(&cluster.name_any());
    let ns = cluster.namespace().unwrap_or_default();
    format!("{}-{id}.{}.{ns}.svc.{}", names.controller_set, names.controller_headless, settings.cluster_domain)
}

/// Where the quorum reaches voter `id`: a dedicated controller's or a broker's stable name.
pub fn voter_host(cluster: &Cluster, settings: &Settings, id: i32) -> String {
    if cluster.spec.dedicated_controllers() {
        controller_host(cluster, settings, id)
    } else {
        broker_host(cluster, settings, id)
    }
}

/// Node ids of the voters the spec asks for: brokers 0..n-1 (combined), or dedicated
/// controllers 1000..1000+n-1.
pub fn controller_ids(cluster: &Cluster) -> std::ops::Range<i32> {
    let first = if cluster.spec.dedicated_controllers() { FIRST_CONTROLLER_ID } else { 0 };
    first..first + cluster.spec.controller_count()
}

/// `controller.quorum.voters` for a new cluster: the voters ([`controller_ids`]) by their
/// stable DNS names. These are the *initial* voters only: once the quorum exists its
/// membership lives in the metadata log and changes through AddRaftVoter/RemoveRaftVoter, so
/// the operator keeps the value it started the cluster with (see [`initial_voters`]) and never
/// restarts a pod for a change of `controllers.replicas`.
pub fn quorum_voters(cluster: &Cluster, settings: &Settings) -> String {
    controller_ids(cluster)
        .map(|i| format!("{i}@{}:{CONTROLLER_PORT}", voter_host(cluster, settings, i)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The initial voters the cluster was started with, from its existing ConfigMap's
/// `server.properties` (`None` before the ConfigMap exists).
pub fn initial_voters(config_map: &ConfigMap) -> Option<String> {
    let props = config_map.data.as_ref()?.get("server.properties")?;
    props.lines().find_map(|l| l.strip_prefix("controller.quorum.voters=")).map(str::to_string)
}

/// Annotation on the ConfigMap: the replication defaults the operator derived when the Cluster
/// was created (`key=value,...`), kept for the cluster's life.
pub const REPLICATION_DEFAULTS_ANNOTATION: &str = "oxbow.io/replication-defaults";

/// Replication defaults for a cluster created with `brokers` brokers, as Strimzi's examples set
/// them: replication factor min(3, brokers) for new topics and the internal ones, and
/// `min.insync.replicas` 2 from three brokers on (1 below), so acks=all survives one broker
/// restarting. They are derived once, at creation, and kept ([`Started`]): raising
/// `min.insync.replicas` above a topic's replication factor would stop acks=all producers of
/// the topics that exist, so a later scale-up changes none of them (set them in `spec.config`).
pub fn replication_defaults(brokers: i32) -> BTreeMap<String, String> {
    let rf = brokers.clamp(1, 3).to_string();
    let isr = if brokers >= 3 { "2" } else { "1" }.to_string();
    BTreeMap::from([
        ("default.replication.factor".into(), rf.clone()),
        ("min.insync.replicas".into(), isr.clone()),
        ("offsets.topic.replication.factor".into(), rf.clone()),
        ("transaction.state.log.min.isr".into(), isr),
        ("transaction.state.log.replication.factor".into(), rf),
    ])
}

/// What a running cluster keeps from its creation, read back from its ConfigMap.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Started {
    /// Its initial quorum voters ([`initial_voters`]).
    pub voters: Option<String>,
    /// Its replication defaults ([`replication_defaults`]); empty for a cluster an operator
    /// without them created (Kafka's defaults, 1, stay).
    pub defaults: BTreeMap<String, String>,
}

impl Started {
    pub fn of(config_map: &ConfigMap) -> Started {
        let defaults = config_map
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REPLICATION_DEFAULTS_ANNOTATION))
            .map(|v| {
                v.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
            })
            .unwrap_or_default();
        Started { voters: initial_voters(config_map), defaults }
    }

    /// A new cluster's: the spec's voters and defaults from its broker count.
    fn new(cluster: &Cluster, settings: &Settings) -> Started {
        Started {
            voters: Some(quorum_voters(cluster, settings)),
            defaults: replication_defaults(cluster.spec.replicas),
        }
    }
}

/// Which process a properties file is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Process {
    /// A broker: `broker,controller` in combined mode, `broker` with dedicated controllers.
    Broker,
    /// A dedicated controller: `controller`, its CONTROLLER listener only.
    Controller,
}

/// `server.properties` for every broker of the cluster: the operator's defaults (listeners, log
/// dir, health listener, the replication defaults, the quorum: in combined mode every broker
/// runs `broker,controller`, the first `controllers.replicas` are the voters and the others
/// follow the quorum as observers; with dedicated controllers brokers run `broker` and have no
/// CONTROLLER listener), then `spec.config` (reserved keys are refused by the schema).
/// Per-broker keys (node.id, advertised.listeners) are passed as `--override` arguments
/// instead. `started`: what the running cluster keeps from its creation ([`Started::of`] its
/// ConfigMap), `None` for a new cluster.
pub fn server_properties(cluster: &Cluster, settings: &Settings, started: Option<&Started>) -> String {
    properties(cluster, settings, started, Process::Broker)
}

/// `controller.properties` for every dedicated controller: as [`server_properties`] (the same
/// quorum, security settings and `spec.config`), with `process.roles=controller` and the
/// CONTROLLER listener only (Kafka's controllers serve no clients).
pub fn controller_properties(cluster: &Cluster, settings: &Settings, started: Option<&Started>) -> String {
    properties(cluster, settings, started, Process::Controller)
}

fn properties(cluster: &Cluster, settings: &Settings, started: Option<&Started>, process: Process) -> String {
    let new = Started::new(cluster, settings);
    let started = started.unwrap_or(&new);
    let voters = started.voters.clone().or_else(|| new.voters.clone()).unwrap_or_default();
    let mut props: BTreeMap<String, String> = started.defaults.clone();
    props.extend([
        ("log.dirs".into(), format!("{DATA_DIR}/data")),
        ("oxbow.http.listener".into(), format!("0.0.0.0:{HEALTH_PORT}")),
        ("controller.quorum.voters".into(), voters),
        ("cluster.id".into(), cluster_id(cluster)),
    ]);
    props.extend(listeners::properties(cluster, &cluster.name_any()));
    let dedicated = cluster.spec.dedicated_controllers();
    let controller_listener = format!("CONTROLLER://0.0.0.0:{CONTROLLER_PORT}");
    let roles = match (process, dedicated) {
        (Process::Broker, false) => "broker,controller",
        (Process::Broker, true) => {
            // Brokers dial the controllers (controller.listener.names and its protocol stay)
            // but listen for no controller traffic.
            if let Some(l) = props.get_mut("listeners") {
                *l = l.split(',').filter(|x| *x != controller_listener).collect::<Vec<_>>().join(",");
            }
            "broker"
        }
        (Process::Controller, _) => {
            props.insert("listeners".into(), controller_listener);
            "controller"
        }
    };
    props.insert("process.roles".into(), roles.into());
    for (k, v) in &cluster.spec.config {
        props.insert(k.clone(), v.clone());
    }
    super::external::add_providers(cluster, &mut props);
    let mut out = String::from("# Generated by oxbow-operator from the Cluster resource.\n");
    for (k, v) in props {
        out.push_str(&format!("{k}={v}\n"));
    }
    out
}

/// Kafka's broker configs that change at runtime, cluster-wide (IncrementalAlterConfigs on the
/// default BROKER resource), as far as Oxbow supports them: the defaults of topic configs.
/// Changing one of these never restarts a broker; any other key does. The operator's Kafka
/// admin test checks this list against what a broker reports as updatable.
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "compression.type",
    "follower.replication.throttled.rate",
    "leader.replication.throttled.rate",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleanup.policy",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.index.interval.bytes",
    "log.index.size.max.bytes",
    "log.message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.type",
    "log.preallocate",
    "log.retention.bytes",
    "log.retention.hours",
    "log.retention.minutes",
    "log.retention.ms",
    "log.roll.hours",
    "log.roll.jitter.ms",
    "log.roll.ms",
    "log.segment.bytes",
    "log.segment.delete.delay.ms",
    "message.max.bytes",
    "min.insync.replicas",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "unclean.leader.election.enable",
];

pub fn is_dynamic(key: &str) -> bool {
    DYNAMIC_BROKER_KEYS.contains(&key)
}

/// The part of `spec.config` applied at runtime.
pub fn dynamic_config(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster.spec.config.iter().filter(|(k, _)| is_dynamic(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// First 16 hex digits of the SHA-256 of the config.
pub fn config_hash(properties: &str) -> String {
    crate::certs::fingerprint(properties)
}

fn owner(cluster: &Cluster) -> Option<OwnerReference> {
    cluster.controller_owner_ref(&())
}

fn meta(cluster: &Cluster, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: cluster.namespace(),
        labels: Some(common_labels(&cluster.name_any())),
        owner_references: owner(cluster).map(|o| vec![o]),
        ..Default::default()
    }
}

/// Builds every object the Cluster should have. `started`: what a cluster that already runs
/// keeps from its creation ([`Started::of`] its ConfigMap), `None` for a new one.
pub fn desired(cluster: &Cluster, settings: &Settings, started: Option<&Started>) -> Desired {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let names = Names::of(&name);
    let properties = server_properties(cluster, settings, started);
    let defaults = started.map_or_else(|| replication_defaults(cluster.spec.replicas), |s| s.defaults.clone());
    // Only keys that need a restart count: dynamic ones are applied to running brokers (and are
    // in the file for the next start).
    let hash = config_hash(&restart_relevant_lines(&properties));

    let mut cm_meta = meta(cluster, &names.config_map);
    let defaults = defaults.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    cm_meta.annotations = Some(BTreeMap::from([(REPLICATION_DEFAULTS_ANNOTATION.to_string(), defaults)]));
    let dedicated = cluster.spec.dedicated_controllers();
    let mut files = BTreeMap::from([("server.properties".to_string(), properties)]);
    let controller_hash = dedicated.then(|| {
        let controller = controller_properties(cluster, settings, started);
        let hash = config_hash(&restart_relevant_lines(&controller));
        files.insert(CONTROLLER_PROPERTIES.to_string(), controller);
        hash
    });
    let config_map = ConfigMap { metadata: cm_meta, data: Some(files), ..Default::default() };

    let port = |name: &str, port: i32| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        ..Default::default()
    };
    let kafka_ports = || listeners::kafka_ports(cluster).iter().map(|(n, p)| port(n, *p)).collect::<Vec<_>>();
    let headless = Service {
        metadata: meta(cluster, &names.headless),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(&name)),
            ports: Some(match dedicated {
                true => kafka_ports(),
                false => [kafka_ports(), vec![port("controller", CONTROLLER_PORT)]].concat(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let bootstrap = Service {
        metadata: meta(cluster, &names.bootstrap),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(&name)),
            ports: Some(kafka_ports()),
            ..Default::default()
        }),
        ..Default::default()
    };

    let brokers = Role::broker(cluster, &names);
    let stateful_set = pod_set(cluster, settings, &brokers, &ns, &hash);
    let pdb = disruption_budget(cluster, &names.stateful_set, &brokers.selector);

    let controllers = controller_hash.map(|hash| {
        let role = Role::controller(cluster, &names);
        let mut headless_meta = meta(cluster, &names.controller_headless);
        headless_meta.labels = Some(managed(role.selector.clone()));
        let headless = Service {
            metadata: headless_meta,
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                publish_not_ready_addresses: Some(true),
                selector: Some(role.selector.clone()),
                ports: Some(vec![port("controller", CONTROLLER_PORT)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        ControllerObjects {
            headless,
            stateful_set: pod_set(cluster, settings, &role, &ns, &hash),
            pdb: disruption_budget(cluster, &names.controller_set, &role.selector),
        }
    });

    Desired { config_map, headless, bootstrap, stateful_set, pdb, controllers }
}

/// Key of the dedicated controllers' properties in the ConfigMap.
pub const CONTROLLER_PROPERTIES: &str = "controller.properties";

/// The lines of a properties file a restart is needed for: dynamic keys are applied to running
/// brokers (and are in the file for the next start).
fn restart_relevant_lines(properties: &str) -> String {
    properties.lines().filter(|l| l.split_once('=').is_none_or(|(k, _)| !is_dynamic(k))).collect::<Vec<_>>().join("\n")
}

/// At most one pod of `selector` voluntarily disrupted.
fn disruption_budget(cluster: &Cluster, name: &str, selector: &BTreeMap<String, String>) -> PodDisruptionBudget {
    let mut metadata = meta(cluster, name);
    metadata.labels = Some(managed(selector.clone()));
    PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(selector.clone()), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

mod pod;
#[cfg(test)]
mod tests;
