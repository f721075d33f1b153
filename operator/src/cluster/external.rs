//! External listeners (`type: nodeport` or `loadbalancer`): a Service of that type per broker
//! and one for bootstrapping, and each broker's advertised address.
//!
//! A StatefulSet has one pod template, so a broker's own address cannot be written into it.
//! The template advertises `${file:/etc/oxbow/addresses.properties:<listener>.$(NODE_ID).port}`
//! (Kafka's FileConfigProvider syntax, which the broker resolves at startup), and the operator
//! keeps that file, in the Cluster's ConfigMap, from the Services Kubernetes has made: the node
//! port Kubernetes chose for each broker, or the address its load balancer got. A `nodeport`
//! listener advertises the address of the node the broker runs on (`$(HOST_IP)`, the pod's
//! `status.hostIP`). The file is not part of the config hash: a broker whose address appears
//! later does not restart the others. A broker whose load balancer has no address yet is not
//! started (the StatefulSet waits below it), since it could only advertise a wrong one.
//!
//! All but [`delete_departed`] is pure; `cluster.rs` applies the Services and reads them back.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::desired::{Names, Settings, selector_labels};
use crate::crd::{Cluster, ListenerSpec, ListenerStatus, ListenerType};

/// Key of the addresses file in the Cluster's ConfigMap, and where brokers see it.
pub const ADDRESSES_KEY: &str = "addresses.properties";
pub const ADDRESSES_FILE: &str = "/etc/oxbow/addresses.properties";
/// Labels of an external listener's Services: the listener, and the broker (per-broker ones).
pub const LISTENER_LABEL: &str = "oxbow.io/listener";
pub const BROKER_LABEL: &str = "oxbow.io/broker";
/// The label the StatefulSet controller puts on each pod: its name.
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// The Cluster's external listeners.
pub fn listeners(cluster: &Cluster) -> impl Iterator<Item = &ListenerSpec> {
    cluster.spec.listeners.iter().filter(|l| !l.type_.is_internal())
}

/// Whether a broker needs its node's address (`HOST_IP`): a `nodeport` listener advertises it.
pub fn needs_host_ip(cluster: &Cluster) -> bool {
    listeners(cluster).any(|l| l.type_ == ListenerType::NodePort)
}

/// Adds what external listeners need to `server.properties` (after `spec.config`): the `file`
/// config provider, beside any providers the user configured.
pub fn add_providers(cluster: &Cluster, props: &mut BTreeMap<String, String>) {
    if listeners(cluster).next().is_none() {
        return;
    }
    let mut names: Vec<String> = props
        .get("config.providers")
        .map(|v| v.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    if !names.iter().any(|n| n == "file") {
        names.push("file".into());
    }
    props.insert("config.providers".into(), names.join(","));
    props.insert(
        "config.providers.file.class".into(),
        "org.apache.kafka.common.config.provider.FileConfigProvider".into(),
    );
}

/// The `advertised.listeners` entry of an external listener, for the pod template (Kubernetes
/// fills in `$(NODE_ID)` and `$(HOST_IP)`, the broker the `${file:...}` references).
pub fn advertised(l: &ListenerSpec) -> String {
    let (upper, lower) = (l.name.to_ascii_uppercase(), l.name.to_ascii_lowercase());
    match l.type_ {
        ListenerType::NodePort => format!("{upper}://$(HOST_IP):${{file:{ADDRESSES_FILE}:{lower}.$(NODE_ID).port}}"),
        ListenerType::LoadBalancer => {
            format!("{upper}://${{file:{ADDRESSES_FILE}:{lower}.$(NODE_ID).host}}:{}", l.port)
        }
        ListenerType::Internal => format!("{upper}://$(POD_NAME):{}", l.port),
    }
}

/// The name of a listener's bootstrap Service (`broker: None`) or of one broker's Service.
pub fn service_name(cluster: &str, listener: &str, broker: Option<i32>) -> String {
    match broker {
        Some(b) => format!("{cluster}-{listener}-{b}"),
        None => format!("{cluster}-{listener}-bootstrap"),
    }
}

fn broker_config(l: &ListenerSpec, broker: i32) -> Option<&crate::crd::ExternalBroker> {
    l.configuration.as_ref()?.brokers.iter().find(|b| b.broker == broker)
}

/// The Services of every external listener: its bootstrap Service, and one per broker below
/// `brokers`.
pub fn services(cluster: &Cluster, brokers: i32) -> Vec<Service> {
    let name = cluster.name_any();
    let names = Names::of(&name);
    let mut out = Vec::new();
    for l in listeners(cluster) {
        let make = |broker: Option<i32>, node_port: Option<i32>| {
            let mut labels = selector_labels(&name);
            labels.insert("app.kubernetes.io/managed-by".into(), "oxbow-operator".into());
            labels.insert(LISTENER_LABEL.into(), l.name.clone());
            let mut selector = selector_labels(&name);
            if let Some(b) = broker {
                labels.insert(BROKER_LABEL.into(), b.to_string());
                selector.insert(POD_NAME_LABEL.into(), format!("{}-{b}", names.stateful_set));
            }
            Service {
                metadata: ObjectMeta {
                    name: Some(service_name(&name, &l.name, broker)),
                    namespace: cluster.namespace(),
                    labels: Some(labels),
                    owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    type_: l.type_.service_type().map(str::to_string),
                    selector: Some(selector),
                    ports: Some(vec![ServicePort {
                        name: Some(l.name.clone()),
                        port: l.port,
                        target_port: Some(IntOrString::Int(l.port)),
                        node_port: node_port.filter(|_| l.type_ == ListenerType::NodePort),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }
        };
        let bootstrap_port = l.configuration.as_ref().and_then(|c| c.bootstrap.as_ref()).and_then(|b| b.node_port);
        out.push(make(None, bootstrap_port));
        for b in 0..brokers {
            out.push(make(Some(b), broker_config(l, b).and_then(|c| c.node_port)));
        }
    }
    out
}

fn node_port(s: &Service) -> Option<i32> {
    s.spec.as_ref()?.ports.as_ref()?.first()?.node_port
}

fn load_balancer_host(s: &Service) -> Option<String> {
    let ingress = s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref()?.first()?;
    ingress.ip.clone().or_else(|| ingress.hostname.clone()).filter(|h| !h.is_empty())
}

/// What the applied Services say about the external listeners.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Addresses {
    /// The addresses file (`<listener>.<broker>.host` / `.port`).
    pub file: String,
    /// Brokers that cannot start yet (a load balancer without an address), lowest first:
    /// `(broker, what it waits for)`.
    pub waiting: Vec<(i32, String)>,
    /// Hosts clients dial from outside: the broker certificate names them too.
    pub hosts: BTreeSet<String>,
    /// How clients reach each listener.
    pub statuses: Vec<ListenerStatus>,
}

/// The addresses of brokers `0..brokers` from the applied `services`; `node_ips`: the
/// addresses of the nodes the brokers run on (a `nodeport` listener is reached there).
pub fn addresses(
    cluster: &Cluster,
    settings: &Settings,
    services: &[Service],
    brokers: i32,
    node_ips: &BTreeSet<String>,
) -> Addresses {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let by_name: BTreeMap<String, &Service> = services.iter().map(|s| (s.name_any(), s)).collect();
    let mut out = Addresses::default();
    let mut waiting = BTreeMap::new();
    for l in &cluster.spec.listeners {
        let lower = l.name.to_ascii_lowercase();
        let bootstrap = by_name.get(&service_name(&name, &l.name, None)).copied();
        let bootstrap_servers = match l.type_ {
            ListenerType::Internal => {
                format!("{}.{ns}.svc.{}:{}", Names::of(&name).bootstrap, settings.cluster_domain, l.port)
            }
            ListenerType::NodePort => match bootstrap.and_then(node_port) {
                Some(p) => node_ips.iter().map(|ip| format!("{ip}:{p}")).collect::<Vec<_>>().join(","),
                None => String::new(),
            },
            ListenerType::LoadBalancer => {
                bootstrap.and_then(load_balancer_host).map(|h| format!("{h}:{}", l.port)).unwrap_or_default()
            }
        };
        out.statuses.push(ListenerStatus { name: l.name.clone(), type_: l.type_.as_str().into(), bootstrap_servers });
        if l.type_ == ListenerType::Internal {
            continue;
        }
        if l.type_ == ListenerType::NodePort {
            out.hosts.extend(node_ips.iter().cloned());
        }
        if let Some(h) = bootstrap.and_then(load_balancer_host) {
            out.hosts.insert(h);
        }
        for b in 0..brokers {
            let service = by_name.get(&service_name(&name, &l.name, Some(b))).copied();
            match l.type_ {
                ListenerType::NodePort => match service.and_then(node_port) {
                    Some(p) => out.file.push_str(&format!("{lower}.{b}.port={p}\n")),
                    None => {
                        waiting.entry(b).or_insert_with(|| format!("a node port for listener {}", l.name));
                    }
                },
                ListenerType::LoadBalancer => {
                    let configured = broker_config(l, b).and_then(|c| c.advertised_host.clone());
                    match configured.or_else(|| service.and_then(load_balancer_host)) {
                        Some(h) => {
                            out.file.push_str(&format!("{lower}.{b}.host={h}\n"));
                            out.hosts.insert(h);
                        }
                        None => {
                            let what = format!("the load balancer address of listener {}", l.name);
                            waiting.entry(b).or_insert(what);
                        }
                    }
                }
                ListenerType::Internal => {}
            }
        }
    }
    out.waiting = waiting.into_iter().collect();
    out
}

/// The highest number of broker pods that may run: existing ones stay, a new one starts only
/// once its addresses are known.
pub fn replicas_cap(addresses: &Addresses, want: i32, current: Option<i32>) -> i32 {
    match addresses.waiting.first() {
        Some((lowest, _)) => want.min((*lowest).max(current.unwrap_or(0))),
        None => want,
    }
}

/// Deletes the external listeners' Services that should not be there: those of brokers at or
/// above `brokers` (after a scale-down), and those of a listener that is gone or no longer
/// external (a load balancer left in place would keep the port reachable from outside).
pub async fn delete_departed(
    client: &kube::Client,
    cluster: &Cluster,
    ns: &str,
    brokers: i32,
) -> Result<(), crate::Error> {
    let keep: BTreeSet<String> = services(cluster, brokers).iter().map(|s| s.name_any()).collect();
    let api: kube::Api<Service> = kube::Api::namespaced(client.clone(), ns);
    let selector = format!("app.kubernetes.io/instance={},{LISTENER_LABEL}", cluster.name_any());
    for s in api.list(&kube::api::ListParams::default().labels(&selector)).await?.items {
        if !keep.contains(&s.name_any()) {
            api.delete(&s.name_any(), &Default::default()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};

    use super::*;
    use crate::crd::{ClusterSpec, ExternalBroker, ExternalConfiguration};

    fn cluster() -> Cluster {
        let mut c = Cluster::new(
            "c",
            ClusterSpec {
                replicas: 3,
                listeners: vec![
                    ListenerSpec {
                        name: "ext".into(),
                        port: 9094,
                        tls: true,
                        authentication: None,
                        type_: ListenerType::NodePort,
                        configuration: Some(ExternalConfiguration {
                            brokers: vec![ExternalBroker { broker: 1, node_port: Some(31001), advertised_host: None }],
                            ..Default::default()
                        }),
                    },
                    ListenerSpec {
                        name: "lb".into(),
                        port: 9095,
                        tls: true,
                        authentication: None,
                        type_: ListenerType::LoadBalancer,
                        configuration: Some(ExternalConfiguration {
                            brokers: vec![ExternalBroker {
                                broker: 0,
                                node_port: None,
                                advertised_host: Some("b0.example.com".into()),
                            }],
                            ..Default::default()
                        }),
                    },
                ],
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c
    }

    fn settings() -> Settings {
        Settings {
            broker_image: "i".into(),
            cluster_domain: "cluster.local".into(),
            telemetry: None,
            waits: Default::default(),
        }
    }

    /// What the API server would return: node ports allocated, load balancers per `lb`.
    fn applied(c: &Cluster, lb: &[(&str, &str)]) -> Vec<Service> {
        let mut next = 30000;
        services(c, 3)
            .into_iter()
            .map(|mut s| {
                let port = &mut s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0];
                if port.node_port.is_none() {
                    port.node_port = Some(next);
                    next += 1;
                }
                if let Some((_, ip)) = lb.iter().find(|(n, _)| *n == s.name_any()) {
                    s.status = Some(ServiceStatus {
                        load_balancer: Some(LoadBalancerStatus {
                            ingress: Some(vec![LoadBalancerIngress { ip: Some(ip.to_string()), ..Default::default() }]),
                        }),
                        ..Default::default()
                    });
                }
                s
            })
            .collect()
    }

    #[test]
    fn every_external_listener_gets_a_bootstrap_service_and_one_per_broker() {
        let c = cluster();
        let s = services(&c, 3);
        let names: Vec<String> = s.iter().map(|s| s.name_any()).collect();
        assert_eq!(
            names,
            ["c-ext-bootstrap", "c-ext-0", "c-ext-1", "c-ext-2", "c-lb-bootstrap", "c-lb-0", "c-lb-1", "c-lb-2"]
        );
        let one = s[2].spec.as_ref().unwrap();
        assert_eq!(one.type_.as_deref(), Some("NodePort"));
        assert_eq!(one.selector.as_ref().unwrap()[POD_NAME_LABEL], "c-broker-1");
        assert_eq!(one.ports.as_ref().unwrap()[0].node_port, Some(31001));
        assert_eq!(s[5].spec.as_ref().unwrap().type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(
            advertised(&c.spec.listeners[0]),
            "EXT://$(HOST_IP):${file:/etc/oxbow/addresses.properties:ext.$(NODE_ID).port}"
        );
        assert_eq!(
            advertised(&c.spec.listeners[1]),
            "LB://${file:/etc/oxbow/addresses.properties:lb.$(NODE_ID).host}:9095"
        );
    }

    #[test]
    fn the_file_provider_joins_the_users_providers() {
        let mut c = cluster();
        c.spec.config.insert("config.providers".into(), "env".into());
        c.spec.config.insert("config.providers.env.class".into(), "E".into());
        let props = super::super::desired::server_properties(&c, &settings(), None);
        assert!(props.contains("\nconfig.providers=env,file\n"), "{props}");
        assert!(props.contains("\nconfig.providers.env.class=E\n"), "{props}");
        assert!(
            props.contains("config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n")
        );
    }

    #[test]
    fn brokers_wait_for_their_load_balancer_and_keep_running_ones() {
        let c = cluster();
        let ips = BTreeSet::from(["10.1.0.5".to_string()]);
        let a = addresses(&c, &settings(), &applied(&c, &[("c-lb-2", "192.0.2.2")]), 3, &ips);
        // Broker 0 has a configured host, broker 2 its load balancer's; broker 1 waits.
        assert_eq!(a.waiting, vec![(1, "the load balancer address of listener lb".to_string())]);
        assert!(a.file.contains("ext.0.port=30001\next.1.port=31001\next.2.port=30002\n"), "{}", a.file);
        assert!(a.file.contains("lb.0.host=b0.example.com\nlb.2.host=192.0.2.2\n"), "{}", a.file);
        assert_eq!(a.hosts, BTreeSet::from(["10.1.0.5".into(), "192.0.2.2".into(), "b0.example.com".into()]));
        assert_eq!(a.statuses[0].bootstrap_servers, "10.1.0.5:30000");
        assert_eq!(a.statuses[1].bootstrap_servers, "");
        assert_eq!(replicas_cap(&a, 3, None), 1);
        assert_eq!(replicas_cap(&a, 3, Some(3)), 3);
        assert_eq!(replicas_cap(&a, 5, Some(2)), 2);

        let all = [("c-lb-bootstrap", "192.0.2.9"), ("c-lb-1", "192.0.2.1"), ("c-lb-2", "192.0.2.2")];
        let a = addresses(&c, &settings(), &applied(&c, &all), 3, &ips);
        assert!(a.waiting.is_empty());
        assert_eq!(a.statuses[1].bootstrap_servers, "192.0.2.9:9095");
        assert_eq!(replicas_cap(&a, 3, None), 3);
    }
}
