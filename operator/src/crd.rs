//! The custom resources: `Cluster` and `Topic` (group `oxbow.io`, version `v1alpha1`).
//!
//! The CRD YAML in `crds/` and in the chart is generated from these types by `crdgen`; the
//! schema carries the validation (OpenAPI bounds and CEL rules), so `kubectl apply` refuses a bad
//! spec with a message instead of the operator discovering it later.

// `printcolumn(...)` repeats `type_ = ...` by design; clippy reads the repeats as duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, EmptyDirVolumeSource, EnvVar, LocalObjectReference,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, ResourceRequirements, SecretVolumeSource, SecurityContext,
    Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

mod security;
pub use security::*;

/// API group of every Oxbow resource.
pub const GROUP: &str = "oxbow.io";

/// Broker config keys the operator sets itself (identity, listeners, storage, quorum); a
/// `Cluster.spec.config` that names one is refused by the schema.
pub const RESERVED_CONFIG_KEYS: &[&str] = &[
    "node.id",
    "broker.id",
    "process.roles",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "controller.listener.names",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "log.dirs",
    "log.dir",
    "metadata.log.dir",
    "broker.rack",
];

/// An Oxbow cluster: brokers (and controllers) as a StatefulSet, with its Services, config and
/// disruption budget.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "oxbow.io",
    version = "v1alpha1",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "oxc",
    category = "oxbow",
    derive = "Default",
    derive = "PartialEq",
    doc = "An Oxbow cluster: Kafka-compatible brokers run as a StatefulSet",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Brokers", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyBrokers"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Rebalance", type_ = "string", json_path = ".status.rebalance.progress"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.controllers) || (has(self.controllers.mode) && self.controllers.mode == 'dedicated') || self.replicas >= self.controllers.replicas")
    .message("replicas must be at least controllers.replicas: in combined mode every controller is also a broker"))]
#[x_kube(validation = kube::core::Rule::new("(has(self.controllers) && has(self.controllers.mode) && self.controllers.mode == 'dedicated') == (has(oldSelf.controllers) && has(oldSelf.controllers.mode) && oldSelf.controllers.mode == 'dedicated')")
    .message("controllers.mode can only be set when the Cluster is created: the metadata quorum cannot move between brokers and controller pods"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.controllers) || !has(self.controllers.mode) || self.controllers.mode != 'dedicated' || self.replicas <= 1000")
    .message("with dedicated controllers replicas is at most 1000: broker ids are 0 to 999, controller ids start at 1000"))]
#[x_kube(validation = kube::core::Rule::new("(has(self.listeners) && size(self.listeners) > 0) == (has(oldSelf.listeners) && size(oldSelf.listeners) > 0)")
    .message("listeners can only be set when the Cluster is created: the metadata quorum cannot move to TLS in a rolling restart"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.authorization) || (has(self.listeners) && size(self.listeners) > 0)")
    .message("authorization needs listeners (the operator manages ACLs as a TLS super user)"))]
pub struct ClusterSpec {
    /// Number of broker pods (node ids 0..replicas-1). In `combined` controller mode the first
    /// `controllers.replicas` of them are also the metadata quorum's voters; the others follow
    /// it. Scaling up spreads existing
    /// partitions onto the new brokers (`rebalance`); scaling down first moves every replica off
    /// the departing brokers (the highest ids), then removes them and unregisters them; a
    /// scale-down that cannot keep every partition's replication factor and
    /// `min.insync.replicas` is refused (condition `ScaleDownBlocked`).
    #[schemars(range(min = 1))]
    pub replicas: i32,

    /// The metadata quorum: its voters (controllers), on brokers (`combined`) or on pods of
    /// their own (`dedicated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controllers: Option<ControllersSpec>,

    /// Broker image; the operator's `--broker-image` (chart value `brokerImage`) when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// Image pull policy for broker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,

    /// CPU and memory for each broker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Where each broker keeps its log.
    #[serde(default)]
    pub storage: StorageSpec,

    /// Broker configuration overrides, as `server.properties` keys and values (for example
    /// `log.retention.ms: "86400000"`). Keys the operator owns (identity, listeners, log dirs,
    /// quorum) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = kube::core::Rule::new(
        "['node.id', 'broker.id', 'process.roles', 'listeners', 'advertised.listeners', 'listener.security.protocol.map', 'inter.broker.listener.name', 'controller.listener.names', 'controller.quorum.voters', 'controller.quorum.bootstrap.servers', 'log.dirs', 'log.dir', 'metadata.log.dir', 'broker.rack'].all(k, !(k in self))"
    ).message("config may not set node.id, process.roles, listeners, advertised.listeners, log.dirs, broker.rack or controller.quorum.* keys: the operator sets them"))]
    pub config: BTreeMap<String, String>,

    /// Scheduling and metadata overrides for broker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodOverrides>,

    /// Where brokers send their OpenTelemetry metrics, and traces if `traceSampleRatio` is set
    /// (OTLP/HTTP). Changing it restarts the
    /// brokers (one at a time, as any template change). When unset, the operator's
    /// `--broker-otlp-endpoint` (the Helm chart sets it to its collector when
    /// `observability.collector.enabled`); without that, brokers export nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetrySpec>,

    /// How partitions move when brokers come and go.
    #[serde(default)]
    pub rebalance: RebalanceSpec,

    /// Client listeners. Unset: one listener `PLAINTEXT` on 9092 (no TLS, no authentication),
    /// and brokers talk to each other and to the quorum in clear. Set: brokers replicate over
    /// a mutual-TLS listener `REPLICATION` (9091), the metadata quorum runs on mutual TLS
    /// (9093), both with certificates from the cluster CA, and the operator administers the
    /// cluster through REPLICATION as a super user. Names and ports must be unique. Only set
    /// when the Cluster is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = kube::core::Rule::new("self.all(l, self.exists_one(m, m.name == l.name) && self.exists_one(m, m.port == l.port))")
        .message("listener names and ports must be unique"))]
    pub listeners: Vec<ListenerSpec>,

    /// ACLs (Kafka's StandardAuthorizer): what `User` resources grant, nothing else. Unset:
    /// every client may do everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<AuthorizationSpec>,

    /// The cluster CA: signs the brokers' (and the operator's) certificates; clients trust it.
    /// Used with `listeners`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ca: Option<CaSpec>,

    /// The clients CA: signs the certificates of `User`s with `tls` authentication; listeners
    /// with `tls` authentication trust it (and only it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_ca: Option<CaSpec>,

    /// Rack awareness: each broker's `broker.rack` is its node's zone (or region), so the
    /// replicas of a new partition go to different racks where possible, and broker pods are
    /// spread over them. Changing it restarts the brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<RackSpec>,
}

/// Partition moves (KIP-455 reassignments) the operator plans itself: balanced replica and
/// leader counts per broker, rack spread kept, the fewest moves.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceSpec {
    /// Spread existing partitions onto new brokers once they are ready (and balance leaders).
    /// Draining brokers before a scale-down happens whatever this says.
    #[serde(default = "yes")]
    pub auto: bool,
    /// Replication throttle of moves, bytes per second per broker (Kafka's
    /// `leader.replication.throttled.rate` and `follower.replication.throttled.rate` on every
    /// broker, and the moving replicas listed per topic, as `kafka-reassign-partitions
    /// --throttle` sets them); removed when the moves finish. Unset: unthrottled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub throttle_bytes_per_second: Option<i64>,
    /// Partitions copying data at once.
    #[serde(default = "five")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrent_moves: i32,
}

fn yes() -> bool {
    true
}

fn five() -> i32 {
    5
}

impl Default for RebalanceSpec {
    fn default() -> Self {
        RebalanceSpec { auto: true, throttle_bytes_per_second: None, max_concurrent_moves: 5 }
    }
}

/// Where a broker's rack comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RackSpec {
    /// The node label whose value is the rack: `topology.kubernetes.io/zone` or
    /// `topology.kubernetes.io/region`. Kubernetes copies these two labels from the node onto
    /// the pod when it is scheduled (KEP-4742: on by default from 1.35, behind the
    /// `PodTopologyLabelsAdmission` feature gate in 1.33 and 1.34), and the broker reads its
    /// pod's label through the downward API: no node read rights, no init container. A pod
    /// without the label runs with no rack (`status.brokers[].rack` is empty).
    #[serde(default = "zone_key")]
    #[x_kube(validation = kube::core::Rule::new(
        "self == 'topology.kubernetes.io/zone' || self == 'topology.kubernetes.io/region'"
    ).message("rack.topologyKey must be topology.kubernetes.io/zone or topology.kubernetes.io/region (the node labels Kubernetes copies onto pods)"))]
    pub topology_key: String,
}

fn zone_key() -> String {
    ZONE_LABEL.into()
}

/// The node (and, with KEP-4742, pod) label of a zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

impl Default for RackSpec {
    fn default() -> Self {
        RackSpec { topology_key: zone_key() }
    }
}

/// OpenTelemetry export from the brokers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TelemetrySpec {
    /// OTLP/HTTP endpoint of a collector, e.g. `http://otel-collector.monitoring:4318`
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT` of each broker).
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('http://') || self.startsWith('https://')")
        .message("telemetry.otlpEndpoint must be an http:// or https:// URL"))]
    pub otlp_endpoint: String,
    /// Seconds between two exports (`OTEL_METRIC_EXPORT_INTERVAL`); 60 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub export_interval_seconds: Option<i32>,
    /// Traces: the fraction (0 to 1) of requests outside any trace that brokers trace, a span
    /// per request; a produce whose records carry a sampled W3C `traceparent` header is traced
    /// whatever the fraction (`OTEL_TRACES_SAMPLER=parentbased_traceidratio`,
    /// `OTEL_TRACES_SAMPLER_ARG`). Unset: brokers send no traces (`OTEL_TRACES_EXPORTER=none`),
    /// for a collector without a traces pipeline, such as the one the chart installs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub trace_sample_ratio: Option<f64>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.resources) && !has(self.storage) || (has(self.mode) && self.mode == 'dedicated')")
    .message("controllers.resources and controllers.storage are for dedicated controllers (in combined mode the brokers' own apply)"))]
#[x_kube(validation = kube::core::Rule::new("has(self.storage) == has(oldSelf.storage) && (!has(self.storage) || self.storage == oldSelf.storage)")
    .message("controllers.storage can only be set when the Cluster is created (controller volumes do not grow yet)"))]
pub struct ControllersSpec {
    /// `combined` (the default): brokers 0 to `replicas`-1 are also the controllers.
    /// `dedicated`: the controllers are pods of their own (StatefulSet `<name>-controller`, node
    /// ids 1000 up, `process.roles=controller`, no client listener), so brokers restart and
    /// scale without touching the quorum. Only set when the Cluster is created.
    #[serde(default)]
    pub mode: ControllerMode,
    /// Voters of the metadata quorum: 1, 3 or 5 (a majority must be up to change metadata).
    /// Changing it on a running cluster adds or removes voters one at a time (KIP-853
    /// AddRaftVoter/RemoveRaftVoter, the active controller removed last) without restarting any
    /// broker or controller; it waits while a pod is not ready or a roll is in progress. With
    /// dedicated controllers, a new controller pod starts first and becomes a voter once
    /// ready; a departing one stops being a voter, then its pod goes.
    #[serde(default = "one")]
    #[x_kube(validation = kube::core::Rule::new("self == 1 || self == 3 || self == 5")
        .message("controllers.replicas must be 1, 3 or 5"))]
    pub replicas: i32,
    /// CPU and memory of each dedicated controller's container. Unset: none requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Where each dedicated controller keeps the metadata log. Unset: as `spec.storage`, with
    /// a 1Gi claim (the metadata log is small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
}

impl ClusterSpec {
    /// Whether the Cluster runs with TLS inside (any `listeners`).
    pub fn secured(&self) -> bool {
        !self.listeners.is_empty()
    }

    /// Voters of the metadata quorum (1 without `controllers`).
    pub fn controller_count(&self) -> i32 {
        self.controllers.as_ref().map_or(1, |c| c.replicas)
    }

    /// Whether the controllers run in pods of their own.
    pub fn dedicated_controllers(&self) -> bool {
        self.controllers.as_ref().is_some_and(|c| c.mode == ControllerMode::Dedicated)
    }

    /// The dedicated controllers' storage: `controllers.storage`, else `storage` with 1Gi.
    pub fn controller_storage(&self) -> StorageSpec {
        self.controllers
            .as_ref()
            .and_then(|c| c.storage.clone())
            .unwrap_or_else(|| StorageSpec { size: "1Gi".into(), ..self.storage.clone() })
    }
}

/// Node id of the first dedicated controller; the others follow it.
pub const FIRST_CONTROLLER_ID: i32 = 1000;

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ControllerMode {
    /// Brokers 0 to `controllers.replicas`-1 are also the controllers.
    #[default]
    Combined,
    /// Controllers run in pods of their own.
    Dedicated,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// Broker storage: a PersistentVolumeClaim per broker, or an emptyDir that dies with the pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!self.ephemeral || !has(self.storageClass)")
    .message("an ephemeral volume has no storageClass"))]
pub struct StorageSpec {
    /// Volume size, a Kubernetes quantity (for example `10Gi`). Raising it on a running Cluster
    /// resizes every broker's claim with no restart, where the StorageClass allows expansion
    /// (`allowVolumeExpansion`); the `Reconciling` condition shows the progress. A smaller size
    /// is refused (`Ready=False`, reason `StorageShrinkRefused`): volumes cannot shrink.
    #[serde(default = "default_storage_size")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size: String,
    /// StorageClass of the claims; the cluster's default class when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// Use an emptyDir instead of a claim: data is lost when a pod is deleted. For tests.
    #[serde(default)]
    pub ephemeral: bool,
    /// Delete a broker's PersistentVolumeClaim when a scale-down removes the broker (after its
    /// replicas moved away and it was unregistered). Off: the claim, and its volume, stay (a
    /// later scale-up reuses it).
    #[serde(default)]
    pub delete_claim: bool,
}

fn default_storage_size() -> String {
    "10Gi".into()
}

impl Default for StorageSpec {
    fn default() -> Self {
        StorageSpec { size: default_storage_size(), storage_class: None, ephemeral: false, delete_claim: false }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Affinity of broker pods (for example anti-affinity across nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of broker pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node labels broker pods must run on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// PriorityClass of broker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Extra pod labels (the operator's own labels win on conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The pod's securityContext. Unset: the operator's, which PodSecurity `restricted` admits
    /// (uid and gid 65532 as the broker image, `runAsNonRoot`, `fsGroup: 65532` with
    /// `fsGroupChangePolicy: OnRootMismatch` so the broker can write its volume,
    /// `seccompProfile: RuntimeDefault`). Set: it replaces the operator's whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// The broker container's securityContext. Unset: no privilege escalation, every
    /// capability dropped, a read-only root filesystem (the broker writes only to its volume
    /// and a `/tmp` emptyDir). Set: it replaces the operator's whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,
    /// Extra environment variables of the broker container. The operator's own (`POD_NAME`,
    /// `NODE_ID`, `HOST_IP`, `BROKER_RACK`, `OTEL_*`, `RUST_LOG` from `logLevel`) cannot be set
    /// here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(
        "self.all(e, !(e.name in ['POD_NAME', 'NODE_ID', 'HOST_IP', 'BROKER_RACK', 'RUST_LOG']) && !e.name.startsWith('OTEL_'))"
    ).message("env may not set POD_NAME, NODE_ID, HOST_IP, BROKER_RACK, RUST_LOG or OTEL_* variables: the operator sets them (RUST_LOG through logLevel)"))]
    pub env: Vec<EnvVar>,
    /// The broker's log filter (`RUST_LOG`): a level (`error`, `warn`, `info`, `debug`,
    /// `trace`) or directives such as `info,oxbow_server=debug`. Unset: `info`. Changing it
    /// restarts the brokers one at a time, as any template change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub log_level: Option<String>,
    /// Secrets the kubelet pulls the broker image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Topology spread constraints of broker pods, after the one `rack` adds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Extra volumes mounted into the broker container (Secrets, ConfigMaps, emptyDirs or
    /// existing claims), for example files a `${file:...}` config provider reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new("self.all(v, self.exists_one(w, w.name == v.name) && self.exists_one(w, w.mountPath == v.mountPath))")
        .message("extra volume names and mount paths must be unique"))]
    pub volumes: Vec<ExtraVolume>,
}

/// A volume of the broker pod with where the broker container mounts it; exactly one source.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "[has(self.secret), has(self.configMap), has(self.emptyDir), has(self.persistentVolumeClaim)].filter(x, x).size() == 1"
).message("an extra volume has exactly one of secret, configMap, emptyDir, persistentVolumeClaim"))]
#[x_kube(validation = kube::core::Rule::new(
    "!(self.name in ['data', 'config', 'tls', 'tmp'])"
).message("extra volume names data, config, tls and tmp are the operator's"))]
#[x_kube(validation = kube::core::Rule::new(
    "!['/var/lib/oxbow', '/etc/oxbow', '/tmp'].exists(p, self.mountPath == p || self.mountPath.startsWith(p + '/') || p.startsWith(self.mountPath + '/') || self.mountPath == '/')"
).message("extra volumes may not be mounted at, above or below /var/lib/oxbow, /etc/oxbow or /tmp"))]
pub struct ExtraVolume {
    /// Volume name, unique in the pod.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Where the broker container sees it.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub mount_path: String,
    /// Mount it read-only (default for Secrets and ConfigMaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Ready`, `Reconciling`, `Restarting`, `Degraded`, each with a reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Broker pods that exist (the scale subresource's status replicas).
    #[serde(default)]
    pub replicas: i32,
    /// Broker pods whose readiness probe passes.
    #[serde(default)]
    pub ready_brokers: i32,
    /// Label selector of the broker pods (for the scale subresource and autoscalers).
    #[serde(default)]
    pub selector: String,
    /// `host:port,...` a client inside the cluster bootstraps from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_servers: Option<String>,
    /// How clients reach each listener (`spec.listeners`, with the external addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerStatus>,
    /// One entry per broker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<BrokerStatus>,
    /// One entry per dedicated controller (`id` is its node id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<BrokerStatus>,
    /// The metadata quorum (once it has been read; kept, marked `stale`, while it cannot be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumStatus>,
    /// Partition moves of the current (or last) rebalance or drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<RebalanceStatus>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceStatus {
    /// `Spreading` onto new brokers, `Draining` departing ones, `Balanced` when done.
    pub phase: String,
    /// Partition moves (copying data) this rebalance needs in all.
    pub planned: i32,
    /// Partition moves copying data now (at most `spec.rebalance.maxConcurrentMoves`).
    pub in_flight: i32,
    /// Partition moves finished.
    pub done: i32,
    /// Bytes the moves in flight and waiting still have to copy (from DescribeLogDirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_left: Option<i64>,
    /// `done/planned` (the printer column).
    pub progress: String,
    /// Topics whose throttled-replica lists this rebalance set (cleared when it ends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttled_topics: Vec<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatus {
    /// The broker's node.id (the pod's ordinal).
    pub id: i32,
    pub pod: String,
    /// `Running`, `NotReady`, `Restarting` (terminating) or `Missing` (no pod yet).
    pub state: String,
    pub ready: bool,
    /// Whether the pod runs the current pod template and configuration.
    pub up_to_date: bool,
    /// The broker's rack (its pod's topology label), with `spec.rack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Why the pod does not run, as Kubernetes names it: `ImagePullBackOff`, `ErrImagePull`,
    /// `CrashLoopBackOff`, `CreateContainerConfigError`, `Unschedulable`, `ClaimNotBound`,
    /// `FailedCreate` (the StatefulSet could not create it: a quota, PodSecurity), `Evicted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Kubernetes' words for `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuorumStatus {
    /// node.id of the active controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<i32>,
    /// node.ids of the voting controllers.
    #[serde(default)]
    pub voters: Vec<i32>,
    /// `true` when the last reconcile could not read the quorum (no broker answered
    /// DescribeQuorum, as during a restart): `leader` and `voters` are as last read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

/// Annotation on a Topic: what deleting the resource does to the Kafka topic.
pub const DELETION_POLICY_ANNOTATION: &str = "oxbow.io/deletion-policy";

/// A Kafka topic declared in Kubernetes: created, grown and reconfigured through the Kafka
/// admin protocol against its Cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "oxbow.io",
    version = "v1alpha1",
    kind = "Topic",
    namespaced,
    status = "TopicStatus",
    shortname = "oxt",
    category = "oxbow",
    derive = "Default",
    derive = "PartialEq",
    doc = "A Kafka topic of an Oxbow Cluster in the same namespace",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Partitions", type_ = "integer", json_path = ".spec.partitions"),
    printcolumn(name = "RF", type_ = "integer", json_path = ".status.replicationFactor"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TopicSpec {
    /// Name of the Cluster (same namespace) the topic lives in.
    #[schemars(length(min = 1))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("cluster cannot be changed"))]
    pub cluster: String,
    /// Kafka topic name; the resource's name when empty. Cannot be changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("topicName cannot be changed"))]
    pub topic_name: Option<String>,
    /// Partition count. It can grow; a decrease is refused (Kafka cannot remove partitions).
    #[schemars(range(min = 1))]
    pub partitions: i32,
    /// Replicas of each partition. Unset: the Cluster's `default.replication.factor` (on an
    /// operator-made Cluster, 3, or the broker count when it was created with fewer). Cannot
    /// be changed once the topic exists (a change is refused on the Ready condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32767))]
    pub replication_factor: Option<i32>,
    /// Topic configs, as Kafka names them (`retention.ms`, `cleanup.policy`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

fn one() -> i32 {
    1
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatus {
    /// `Ready`, with the reason when it is not (ClusterNotFound, ClusterUnreachable,
    /// KafkaRefused, PartitionDecreaseRefused, ReplicationFactorChangeUnsupported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Kafka's topic id, as `kafka-topics.sh --describe` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// The Kafka topic name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    /// Partitions the topic has now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// Replicas of each partition the topic has now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<i32>,
}

impl Topic {
    /// The Kafka topic name: `spec.topicName`, else the resource name.
    pub fn kafka_name(&self) -> String {
        self.spec.topic_name.clone().or_else(|| self.metadata.name.clone()).unwrap_or_default()
    }
}
