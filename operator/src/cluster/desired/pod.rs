//! A Cluster's pods: the StatefulSet of its brokers or of its dedicated controllers, with their
//! container (arguments, environment, ports, probes), volumes and security contexts.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetOrdinals, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, TCPSocketAction,
    TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::super::listeners;
use super::{
    BROKER_UID, CONFIG_HASH_ANNOTATION, CONTROLLER_PORT, CONTROLLER_PROPERTIES, DATA_DIR, HEALTH_PORT, Names, Settings,
    TERMINATION_GRACE_SECONDS, controller_selector_labels, managed, meta, selector_labels,
};
use crate::crd::{Cluster, ExtraVolume, FIRST_CONTROLLER_ID, StorageSpec};

/// What differs between the brokers' StatefulSet and the dedicated controllers'.
pub(super) struct Role {
    /// The StatefulSet's name (and its pods' prefix).
    set: String,
    /// The headless Service giving the pods their names.
    headless: String,
    pub(super) selector: BTreeMap<String, String>,
    /// Container name, and the ConfigMap key it runs with.
    container: &'static str,
    config_file: &'static str,
    replicas: i32,
    /// The first ordinal (node id), when not 0.
    first_ordinal: Option<i32>,
    /// Serves clients: Kafka ports, rack, external addresses.
    broker: bool,
    resources: Option<ResourceRequirements>,
    storage: StorageSpec,
}

impl Role {
    pub(super) fn broker(cluster: &Cluster, names: &Names) -> Role {
        let name = cluster.name_any();
        Role {
            set: names.stateful_set.clone(),
            headless: names.headless.clone(),
            selector: selector_labels(&name),
            container: "broker",
            config_file: "server.properties",
            replicas: cluster.spec.replicas,
            first_ordinal: None,
            broker: true,
            resources: cluster.spec.resources.clone(),
            storage: cluster.spec.storage.clone(),
        }
    }

    pub(super) fn controller(cluster: &Cluster, names: &Names) -> Role {
        let name = cluster.name_any();
        Role {
            set: names.controller_set.clone(),
            headless: names.controller_headless.clone(),
            selector: controller_selector_labels(&name),
            container: "controller",
            config_file: CONTROLLER_PROPERTIES,
            replicas: cluster.spec.controller_count(),
            first_ordinal: Some(FIRST_CONTROLLER_ID),
            broker: false,
            resources: cluster.spec.controllers.as_ref().and_then(|c| c.resources.clone()),
            storage: cluster.spec.controller_storage(),
        }
    }
}

fn volume_mounts(cluster: &Cluster) -> Vec<VolumeMount> {
    let ro = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..Default::default()
    };
    let mut out = vec![
        VolumeMount { name: "data".into(), mount_path: DATA_DIR.into(), ..Default::default() },
        ro("config", "/etc/oxbow"),
        VolumeMount { name: "tmp".into(), mount_path: "/tmp".into(), ..Default::default() },
    ];
    if cluster.spec.secured() {
        out.push(ro("tls", listeners::TLS_DIR));
    }
    for v in cluster.spec.template.iter().flat_map(|t| &t.volumes) {
        let read_only = v.read_only.or((v.secret.is_some() || v.config_map.is_some()).then_some(true));
        out.push(VolumeMount {
            name: v.name.clone(),
            mount_path: v.mount_path.clone(),
            read_only,
            ..Default::default()
        });
    }
    out
}

fn extra_volume(v: &ExtraVolume) -> Volume {
    Volume {
        name: v.name.clone(),
        secret: v.secret.clone(),
        config_map: v.config_map.clone(),
        empty_dir: v.empty_dir.clone(),
        persistent_volume_claim: v.persistent_volume_claim.clone(),
        ..Default::default()
    }
}

/// The broker pod's securityContext unless `spec.template` sets one: what PodSecurity
/// `restricted` asks, as the image's user, owning its volume.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(BROKER_UID),
        run_as_group: Some(BROKER_UID),
        run_as_non_root: Some(true),
        fs_group: Some(BROKER_UID),
        // Only a volume whose root is not already the broker's is walked (a large log would
        // otherwise be chowned file by file at every start).
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
        ..Default::default()
    }
}

/// The broker container's securityContext unless `spec.template` sets one.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
        ..Default::default()
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn pod_set(cluster: &Cluster, settings: &Settings, role: &Role, ns: &str, hash: &str) -> StatefulSet {
    let name = cluster.name_any();
    let names = Names::of(&name);
    let spec = &cluster.spec;
    let overrides = spec.template.clone().unwrap_or_default();

    let mut pod_labels = overrides.labels.clone();
    pod_labels.extend(managed(role.selector.clone()));
    let mut annotations = overrides.annotations.clone();
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), hash.into());

    let host = format!("$(POD_NAME).{}.{ns}.svc.{}", role.headless, settings.cluster_domain);
    let advertised = match role.broker {
        true => listeners::advertised(cluster, &host),
        false => format!("CONTROLLER://{host}:{CONTROLLER_PORT}"),
    };
    let mut args = vec![
        "--config".to_string(),
        format!("/etc/oxbow/{}", role.config_file),
        "--override".to_string(),
        "node.id=$(NODE_ID)".to_string(),
        "--override".to_string(),
        format!("advertised.listeners={advertised}"),
    ];
    let var = |name: &str, value: String| EnvVar { name: name.into(), value: Some(value), ..Default::default() };
    let mut env = vec![
        env_field("POD_NAME", "metadata.name"),
        env_field("NODE_ID", "metadata.labels['apps.kubernetes.io/pod-index']"),
    ];
    if let Some(level) = &overrides.log_level {
        env.push(var("RUST_LOG", level.clone()));
    }
    if role.broker && super::super::external::needs_host_ip(cluster) {
        env.push(env_field("HOST_IP", "status.hostIP"));
    }
    if let Some(t) = spec.telemetry.as_ref().or(settings.telemetry.as_ref()) {
        env.push(var("OTEL_EXPORTER_OTLP_ENDPOINT", t.otlp_endpoint.clone()));
        if let Some(s) = t.export_interval_seconds {
            env.push(var("OTEL_METRIC_EXPORT_INTERVAL", (i64::from(s) * 1000).to_string()));
        }
        match t.trace_sample_ratio {
            Some(r) => {
                env.push(var("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".into()));
                env.push(var("OTEL_TRACES_SAMPLER_ARG", r.to_string()));
            }
            None => env.push(var("OTEL_TRACES_EXPORTER", "none".into())),
        }
        env.push(var(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("k8s.namespace.name={ns},k8s.pod.name=$(POD_NAME),oxbow.cluster={name}"),
        ));
    }
    // The rack is the pod's copy of its node's topology label (KEP-4742); empty without it.
    // Dedicated controllers have no rack, but spread over the racks too.
    let mut spread: Vec<TopologySpreadConstraint> = spec
        .rack
        .as_ref()
        .map(|r| {
            if role.broker {
                env.push(env_field("BROKER_RACK", &format!("metadata.labels['{}']", r.topology_key)));
                args.extend(["--override".to_string(), "broker.rack=$(BROKER_RACK)".to_string()]);
            }
            TopologySpreadConstraint {
                max_skew: 1,
                topology_key: r.topology_key.clone(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                label_selector: Some(LabelSelector { match_labels: Some(role.selector.clone()), ..Default::default() }),
                ..Default::default()
            }
        })
        .into_iter()
        .collect();
    spread.extend(overrides.topology_spread_constraints.iter().cloned());
    // The user's variables come after the operator's, which the schema keeps them from naming.
    env.extend(overrides.env.iter().cloned());

    let probe = |path: &str, failure_threshold: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(HEALTH_PORT),
            ..Default::default()
        }),
        period_seconds: Some(5),
        failure_threshold: Some(failure_threshold),
        ..Default::default()
    };
    let ports = match role.broker {
        true => listeners::kafka_ports(cluster),
        false => Vec::new(),
    };
    let controller_port =
        (!role.broker || !spec.dedicated_controllers()).then(|| ("controller".to_string(), CONTROLLER_PORT));
    let container = Container {
        name: role.container.into(),
        image: Some(spec.image.clone().unwrap_or_else(|| settings.broker_image.clone())),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().to_string()),
        args: Some(args),
        env: Some(env),
        ports: Some(
            ports
                .into_iter()
                .chain(controller_port)
                .chain([("health".to_string(), HEALTH_PORT)])
                .map(|(n, p)| ContainerPort { name: Some(n), container_port: p, ..Default::default() })
                .collect(),
        ),
        readiness_probe: Some(probe("/readyz", 3)),
        liveness_probe: Some(probe("/livez", 6)),
        // Recovery after an unclean stop may scan the log: give the start time before liveness.
        startup_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(HEALTH_PORT), ..Default::default() }),
            period_seconds: Some(2),
            failure_threshold: Some(900),
            ..Default::default()
        }),
        resources: role.resources.clone().or_else(|| Some(ResourceRequirements::default())),
        volume_mounts: Some(volume_mounts(cluster)),
        security_context: Some(overrides.container_security_context.clone().unwrap_or_else(container_security_context)),
        ..Default::default()
    };

    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource { name: names.config_map.clone(), ..Default::default() }),
            ..Default::default()
        },
        // The root filesystem is read-only; whatever wants a scratch file gets /tmp.
        Volume { name: "tmp".into(), empty_dir: Some(Default::default()), ..Default::default() },
    ];
    volumes.extend(overrides.volumes.iter().map(extra_volume));
    if spec.secured() {
        // Certificates change in place (renewals): brokers reload them, no restart.
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource { secret_name: Some(names.broker_tls.clone()), ..Default::default() }),
            ..Default::default()
        });
    }
    let mut claims = None;
    if role.storage.ephemeral {
        volumes.push(Volume { name: "data".into(), empty_dir: Some(Default::default()), ..Default::default() });
    } else {
        claims = Some(vec![PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                labels: Some(role.selector.clone()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: role.storage.storage_class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".to_string(), Quantity(role.storage.size.clone()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    }

    let mut metadata = meta(cluster, &role.set);
    metadata.labels = Some(managed(role.selector.clone()));
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(role.replicas),
            ordinals: role.first_ordinal.map(|start| StatefulSetOrdinals { start: Some(start) }),
            service_name: Some(role.headless.clone()),
            selector: LabelSelector { match_labels: Some(role.selector.clone()), ..Default::default() },
            // The operator restarts pods itself, one at a time, in a safe order.
            update_strategy: Some(StatefulSetUpdateStrategy { type_: Some("OnDelete".into()), ..Default::default() }),
            pod_management_policy: Some("Parallel".into()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
                    affinity: overrides.affinity,
                    tolerations: (!overrides.tolerations.is_empty()).then_some(overrides.tolerations),
                    node_selector: (!overrides.node_selector.is_empty()).then_some(overrides.node_selector),
                    priority_class_name: overrides.priority_class_name,
                    topology_spread_constraints: (!spread.is_empty()).then_some(spread),
                    security_context: Some(overrides.security_context.unwrap_or_else(pod_security_context)),
                    image_pull_secrets: (!overrides.image_pull_secrets.is_empty())
                        .then_some(overrides.image_pull_secrets),
                    ..Default::default()
                }),
            },
            volume_claim_templates: claims,
            ..Default::default()
        }),
        ..Default::default()
    }
}
