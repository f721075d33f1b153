//! Golden YAML of the objects a Cluster produces. `UPDATE_GOLDEN=1 cargo test -p oxbow-operator`
//! rewrites the files after an intended change; review the diff like any other code.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecretVolumeSource,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::ObjectMeta;

use super::*;
use crate::crd::{
    Cluster, ClusterSpec, ControllerMode, ControllersSpec, ExtraVolume, PodOverrides, PullPolicy, RackSpec,
    StorageSpec, TelemetrySpec,
};

fn settings() -> Settings {
    Settings {
        broker_image: "ghcr.io/oxbow/oxbow-broker:0.1.0".into(),
        cluster_domain: "cluster.local".into(),
        telemetry: None,
        waits: Default::default(),
    }
}

fn cluster(spec: ClusterSpec) -> Cluster {
    Cluster {
        metadata: ObjectMeta {
            name: Some("events".into()),
            namespace: Some("streaming".into()),
            uid: Some("6f1c7d4e-0000-4000-8000-000000000001".into()),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

fn render(d: &Desired) -> String {
    let docs = [
        serde_yaml::to_string(&d.config_map),
        serde_yaml::to_string(&d.headless),
        serde_yaml::to_string(&d.bootstrap),
        serde_yaml::to_string(&d.stateful_set),
        serde_yaml::to_string(&d.pdb),
    ];
    docs.into_iter().map(|r| r.map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>().map_or_else(
        |e| format!("serialization failed: {e}"),
        |v| v.iter().map(|s| format!("---\n{s}")).collect::<String>(),
    )
}

fn golden(name: &str, actual: &str) {
    let path = crate::manifest_dir().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == actual,
        "{} differs from the objects built now (UPDATE_GOLDEN=1 to accept):\n{actual}",
        path.display()
    );
}

#[test]
fn minimal_cluster() {
    let c = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    golden("cluster-minimal.yaml", &render(&desired(&c, &settings(), None)));
}

#[test]
fn cluster_with_every_override() {
    let c = cluster(ClusterSpec {
        replicas: 4,
        controllers: Some(ControllersSpec { mode: ControllerMode::Combined, replicas: 3, ..Default::default() }),
        image: Some("localhost/oxbow/oxbow-broker:dev".into()),
        image_pull_policy: Some(PullPolicy::IfNotPresent),
        storage: StorageSpec {
            size: "1Gi".into(),
            storage_class: Some("fast".into()),
            ephemeral: false,
            delete_claim: false,
        },
        config: BTreeMap::from([
            ("log.retention.ms".to_string(), "3600000".to_string()),
            ("num.partitions".to_string(), "3".to_string()),
        ]),
        template: Some(PodOverrides {
            node_selector: BTreeMap::from([("disk".to_string(), "ssd".to_string())]),
            priority_class_name: Some("streaming".into()),
            labels: BTreeMap::from([("team".to_string(), "data".to_string())]),
            annotations: BTreeMap::from([("example.com/owner".to_string(), "data".to_string())]),
            env: vec![EnvVar { name: "MALLOC_ARENA_MAX".into(), value: Some("2".into()), ..Default::default() }],
            log_level: Some("info,oxbow_server=debug".into()),
            image_pull_secrets: vec![LocalObjectReference { name: "registry".into() }],
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                ..Default::default()
            }],
            volumes: vec![ExtraVolume {
                name: "secrets".into(),
                mount_path: "/etc/secrets".into(),
                secret: Some(SecretVolumeSource { secret_name: Some("broker-secrets".into()), ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        rack: Some(RackSpec::default()),
        telemetry: Some(TelemetrySpec {
            otlp_endpoint: "http://otel-collector.monitoring:4318".into(),
            export_interval_seconds: Some(15),
            trace_sample_ratio: Some(0.05),
        }),
        ..Default::default()
    });
    golden("cluster-overrides.yaml", &render(&desired(&c, &settings(), None)));
}

#[test]
fn ephemeral_storage_uses_an_empty_dir_and_no_claims() {
    let c = cluster(ClusterSpec {
        replicas: 1,
        storage: StorageSpec { ephemeral: true, ..Default::default() },
        ..Default::default()
    });
    let d = desired(&c, &settings(), None);
    let sts = d.stateful_set.spec.unwrap_or_default();
    assert!(sts.volume_claim_templates.is_none());
    let volumes = sts.template.spec.and_then(|s| s.volumes).unwrap_or_default();
    assert!(volumes.iter().any(|v| v.name == "data" && v.empty_dir.is_some()));
}

#[test]
fn a_static_config_change_changes_the_template_hash_and_nothing_else_in_the_template() {
    let a = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    let mut b = a.clone();
    b.spec.config.insert("num.partitions".into(), "6".into());
    let (da, db) = (desired(&a, &settings(), None), desired(&b, &settings(), None));
    assert_ne!(template_annotations(&da), template_annotations(&db));
    let spec = |d: &Desired| d.stateful_set.spec.as_ref().and_then(|s| s.template.spec.clone());
    assert_eq!(spec(&da), spec(&db));
    assert!(server_properties(&b, &settings(), None).contains("num.partitions=6\n"));
}

#[test]
fn a_dynamic_config_change_is_in_the_file_but_does_not_change_the_template() {
    let a = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    let mut b = a.clone();
    b.spec.config.insert("log.retention.ms".into(), "1000".into());
    b.spec.config.insert("log.segment.bytes".into(), "1048576".into());
    let (da, db) = (desired(&a, &settings(), None), desired(&b, &settings(), None));
    assert_eq!(da.stateful_set, db.stateful_set);
    assert!(server_properties(&b, &settings(), None).contains("log.retention.ms=1000\n"));
    assert_eq!(dynamic_config(&b).len(), 2);
    assert!(dynamic_config(&a).is_empty());
}

#[test]
fn the_first_brokers_are_the_voters_and_the_cluster_id_comes_from_the_uid() {
    let c = cluster(ClusterSpec {
        replicas: 5,
        controllers: Some(ControllersSpec { mode: ControllerMode::Combined, replicas: 3, ..Default::default() }),
        ..Default::default()
    });
    let props = server_properties(&c, &settings(), None);
    let host = |i: i32| format!("{i}@events-broker-{i}.events-brokers.streaming.svc.cluster.local:9093");
    assert!(props.contains(&format!("controller.quorum.voters={},{},{}\n", host(0), host(1), host(2))), "{props}");
    assert!(props.contains("process.roles=broker,controller\n"));
    // 6f1c7d4e-0000-4000-8000-000000000001 in Kafka's id form.
    assert!(props.contains(&format!("cluster.id={}\n", cluster_id(&c))));
    assert_eq!(cluster_id(&c).len(), 22);
    let one = cluster(ClusterSpec { replicas: 2, ..Default::default() });
    assert!(server_properties(&one, &settings(), None).contains(&format!("controller.quorum.voters={}\n", host(0))));
}

#[test]
fn a_running_cluster_keeps_its_initial_voters_so_changing_controllers_restarts_nothing() {
    let spec = |controllers| ClusterSpec {
        replicas: 3,
        controllers: Some(ControllersSpec {
            mode: ControllerMode::Combined,
            replicas: controllers,
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = desired(&cluster(spec(3)), &settings(), None);
    let started = Started::of(&created.config_map);
    let voters = started.voters.clone().unwrap_or_default();
    assert!(voters.starts_with("0@events-broker-0.") && voters.matches('@').count() == 3, "{voters}");
    let shrunk = desired(&cluster(spec(1)), &settings(), Some(&started));
    assert_eq!(shrunk.config_map, created.config_map);
    assert_eq!(template_annotations(&shrunk), template_annotations(&created));
    // A new cluster of one controller starts with one voter.
    let new = desired(&cluster(spec(1)), &settings(), None);
    assert_eq!(initial_voters(&new.config_map).map(|v| v.matches('@').count()), Some(1));
    assert_ne!(template_annotations(&new), template_annotations(&created));
}

fn dedicated(controllers: i32) -> Cluster {
    cluster(ClusterSpec {
        replicas: 3,
        controllers: Some(ControllersSpec {
            mode: ControllerMode::Dedicated,
            replicas: controllers,
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("memory".to_string(), Quantity("256Mi".into()))])),
                ..Default::default()
            }),
            storage: None,
        }),
        storage: StorageSpec { size: "50Gi".into(), storage_class: Some("fast".into()), ..Default::default() },
        ..Default::default()
    })
}

#[test]
#[allow(clippy::unwrap_used)]
fn dedicated_controllers_run_in_a_statefulset_of_their_own_from_node_id_1000() {
    let d = desired(&dedicated(3), &settings(), None);
    let mut all = render(&d);
    let c = d.controllers.as_ref().unwrap();
    for doc in
        [serde_yaml::to_string(&c.headless), serde_yaml::to_string(&c.stateful_set), serde_yaml::to_string(&c.pdb)]
    {
        all.push_str(&format!("---\n{}", doc.unwrap()));
    }
    golden("cluster-dedicated.yaml", &all);

    let data = d.config_map.data.as_ref().unwrap();
    let broker = &data["server.properties"];
    let controller = &data[CONTROLLER_PROPERTIES];
    let host = |i: i32| format!("{i}@events-controller-{i}.events-controllers.streaming.svc.cluster.local:9093");
    let voters = format!("controller.quorum.voters={},{},{}\n", host(1000), host(1001), host(1002));
    assert!(broker.contains(&voters) && controller.contains(&voters), "{broker}\n{controller}");
    assert!(broker.contains("process.roles=broker\n") && broker.contains("listeners=PLAINTEXT://0.0.0.0:9092\n"));
    assert!(broker.contains("controller.listener.names=CONTROLLER\n"), "brokers still dial the controllers");
    assert!(controller.contains("process.roles=controller\n"));
    assert!(controller.contains("listeners=CONTROLLER://0.0.0.0:9093\n"), "{controller}");
    let sts = c.stateful_set.spec.as_ref().unwrap();
    assert_eq!(sts.ordinals.as_ref().and_then(|o| o.start), Some(1000));
    assert_eq!(sts.replicas, Some(3));
    let claim = &sts.volume_claim_templates.as_ref().unwrap()[0];
    let claim = claim.spec.as_ref().unwrap();
    assert_eq!(claim.storage_class_name.as_deref(), Some("fast"), "the brokers' storage class");
    let size = &claim.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"];
    assert_eq!(size.0, "1Gi");
    // Brokers no longer listen for controller traffic.
    let broker_sts = d.stateful_set.spec.as_ref().unwrap();
    let ports: Vec<i32> = broker_sts.template.spec.as_ref().unwrap().containers[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, vec![KAFKA_PORT, HEALTH_PORT]);
    assert!(broker_sts.ordinals.is_none());
}

#[test]
fn dedicated_controllers_keep_their_initial_voters_so_a_count_change_restarts_nothing() {
    let created = desired(&dedicated(3), &settings(), None);
    let started = Started::of(&created.config_map);
    let five = desired(&dedicated(5), &settings(), Some(&started));
    assert_eq!(five.config_map, created.config_map);
    assert_eq!(template_annotations(&five), template_annotations(&created));
    let annotations = |d: &Desired| {
        d.controllers
            .as_ref()
            .and_then(|c| c.stateful_set.spec.as_ref()?.template.metadata.as_ref()?.annotations.clone())
    };
    assert_eq!(annotations(&five), annotations(&created));
    let replicas = |d: &Desired| d.controllers.as_ref().and_then(|c| c.stateful_set.spec.as_ref()?.replicas);
    assert_eq!((replicas(&created), replicas(&five)), (Some(3), Some(5)));
    assert_eq!(
        voter_host(&dedicated(3), &settings(), 1003),
        "events-controller-1003.events-controllers.streaming.svc.cluster.local"
    );
    assert_eq!(controller_ids(&dedicated(3)), 1000..1003);
}

fn template_annotations(d: &Desired) -> Option<BTreeMap<String, String>> {
    d.stateful_set.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).and_then(|m| m.annotations.clone())
}

#[test]
fn every_object_is_owned_by_the_cluster() {
    let c = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    let d = desired(&c, &settings(), None);
    for m in
        [&d.config_map.metadata, &d.headless.metadata, &d.bootstrap.metadata, &d.stateful_set.metadata, &d.pdb.metadata]
    {
        let owners = m.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{:?}", m.name);
        assert_eq!(owners[0].kind, "Cluster");
        assert_eq!(owners[0].controller, Some(true));
    }
}

#[test]
fn replication_defaults_come_from_the_size_at_creation_and_stay() {
    let of = |replicas| cluster(ClusterSpec { replicas, ..Default::default() });
    let props = |c: &Cluster, started: Option<&Started>| server_properties(c, &settings(), started);
    let three = props(&of(3), None);
    for line in [
        "default.replication.factor=3\n",
        "min.insync.replicas=2\n",
        "offsets.topic.replication.factor=3\n",
        "transaction.state.log.replication.factor=3\n",
        "transaction.state.log.min.isr=2\n",
    ] {
        assert!(three.contains(line), "{line} in {three}");
    }
    let two = props(&of(2), None);
    assert!(two.contains("default.replication.factor=2\n") && two.contains("min.insync.replicas=1\n"), "{two}");
    // Scaling a running cluster keeps what it was created with, and restarts nothing.
    let created = desired(&of(1), &settings(), None);
    let started = Started::of(&created.config_map);
    let scaled = desired(&of(5), &settings(), Some(&started));
    assert_eq!(scaled.config_map, created.config_map);
    assert_eq!(template_annotations(&scaled), template_annotations(&created));
    assert!(props(&of(5), Some(&started)).contains("default.replication.factor=1\n"));
    // spec.config wins.
    let mut own = of(3);
    own.spec.config.insert("min.insync.replicas".into(), "1".into());
    assert!(props(&own, None).contains("min.insync.replicas=1\n"));
    // A cluster an older operator created (no annotation) keeps Kafka's defaults.
    let mut older = created.config_map.clone();
    older.metadata.annotations = None;
    assert!(!props(&of(3), Some(&Started::of(&older))).contains("default.replication.factor"));
}

#[test]
fn broker_pods_meet_pod_security_restricted_unless_the_template_says_otherwise() {
    let pod =
        |c: &Cluster| desired(c, &settings(), None).stateful_set.spec.and_then(|s| s.template.spec).unwrap_or_default();
    let p = pod(&cluster(ClusterSpec { replicas: 1, ..Default::default() }));
    let sc = p.security_context.clone().unwrap_or_default();
    assert_eq!((sc.run_as_non_root, sc.run_as_user, sc.fs_group), (Some(true), Some(BROKER_UID), Some(BROKER_UID)));
    assert_eq!(sc.seccomp_profile.map(|s| s.type_).as_deref(), Some("RuntimeDefault"));
    let csc = p.containers[0].security_context.clone().unwrap_or_default();
    assert_eq!((csc.allow_privilege_escalation, csc.read_only_root_filesystem), (Some(false), Some(true)));
    assert_eq!(csc.capabilities.and_then(|c| c.drop), Some(vec!["ALL".to_string()]));
    // /tmp is writable with a read-only root.
    assert!(p.volumes.unwrap_or_default().iter().any(|v| v.name == "tmp" && v.empty_dir.is_some()));
    let mut own = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    own.spec.template = Some(PodOverrides {
        security_context: Some(PodSecurityContext { run_as_user: Some(1000), ..Default::default() }),
        ..Default::default()
    });
    assert_eq!(pod(&own).security_context, Some(PodSecurityContext { run_as_user: Some(1000), ..Default::default() }));
}

#[test]
fn the_operators_default_telemetry_applies_only_to_clusters_that_name_none() {
    let env = |c: &Cluster, s: &Settings| -> BTreeMap<String, String> {
        let sts = desired(c, s, None).stateful_set.spec.unwrap_or_default();
        let container = sts.template.spec.unwrap_or_default().containers.remove(0);
        container.env.unwrap_or_default().into_iter().filter_map(|e| Some((e.name, e.value?))).collect()
    };
    let default = Settings {
        telemetry: Some(TelemetrySpec {
            otlp_endpoint: "http://oxbow-collector.oxbow-system.svc.cluster.local:4318".into(),
            export_interval_seconds: Some(15),
            trace_sample_ratio: None,
        }),
        ..settings()
    };
    let plain = cluster(ClusterSpec { replicas: 1, ..Default::default() });
    assert!(!env(&plain, &settings()).keys().any(|k| k.starts_with("OTEL_")));
    let got = env(&plain, &default);
    assert_eq!(got["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://oxbow-collector.oxbow-system.svc.cluster.local:4318");
    assert_eq!(got["OTEL_METRIC_EXPORT_INTERVAL"], "15000");
    assert!(got["OTEL_RESOURCE_ATTRIBUTES"].contains("oxbow.cluster=events"));
    // No trace sample ratio: no traces (the chart's collector has no traces pipeline).
    assert_eq!(got["OTEL_TRACES_EXPORTER"], "none");
    assert!(!got.contains_key("OTEL_TRACES_SAMPLER"));

    let own = cluster(ClusterSpec {
        replicas: 1,
        telemetry: Some(TelemetrySpec {
            otlp_endpoint: "http://mine:4318".into(),
            export_interval_seconds: None,
            trace_sample_ratio: Some(0.25),
        }),
        ..Default::default()
    });
    let got = env(&own, &default);
    assert_eq!(got["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://mine:4318");
    assert!(!got.contains_key("OTEL_METRIC_EXPORT_INTERVAL"));
    assert_eq!(got["OTEL_TRACES_SAMPLER"], "parentbased_traceidratio");
    assert_eq!(got["OTEL_TRACES_SAMPLER_ARG"], "0.25");
    assert!(!got.contains_key("OTEL_TRACES_EXPORTER"));
}
