//! Listeners and security settings of a Cluster's brokers, as pure functions of the resource:
//! the `server.properties` keys, the advertised addresses, the ports, the super users.
//!
//! Without `spec.listeners` a Cluster runs as it always did: one PLAINTEXT listener on 9092 that
//! clients, replication and the operator share, and the quorum in clear. With them, brokers
//! replicate over `REPLICATION` (9091, mutual TLS, the cluster CA), the quorum runs on mutual
//! TLS, and the operator connects to `REPLICATION` with its own certificate as a super user.

use std::collections::BTreeMap;

use crate::crd::{AuthenticationType, Cluster, ListenerSpec};

use super::desired::{CONTROLLER_PORT, KAFKA_PORT};

/// The brokers' (and the operator's) listener, mutual TLS, when the Cluster has `listeners`.
pub const REPLICATION_PORT: i32 = 9091;
/// Where the broker Secret (`<cluster>-broker-tls`) is mounted.
pub const TLS_DIR: &str = "/etc/oxbow/tls";
/// The broker's certificate common name: `<cluster>-broker` (with `O=oxbow.io`).
pub fn broker_common_name(cluster: &str) -> String {
    format!("{cluster}-broker")
}
/// The operator's certificate common name (with `O=oxbow.io`).
pub const OPERATOR_COMMON_NAME: &str = "oxbow-operator";
/// Kafka's StandardAuthorizer, as `authorizer.class.name` names it.
pub const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// A certificate whose subject is only a common name maps to that name (the `User`
/// certificates); others keep their full RFC 2253 subject (brokers, the operator).
pub const PRINCIPAL_RULES: &str = "RULE:^CN=([^,]+)$/$1/,DEFAULT";

/// A Kafka listener of the brokers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Kafka's name (upper case).
    pub name: String,
    pub port: i32,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    pub protocol: &'static str,
    /// Clients present a certificate from the clients CA.
    pub client_certificates: bool,
    /// SASL mechanism, if any.
    pub sasl: Option<&'static str>,
}

fn client_listener(l: &ListenerSpec) -> Listener {
    let auth = l.authentication.as_ref().map(|a| a.type_);
    let protocol = match (l.tls, auth) {
        (false, Some(AuthenticationType::ScramSha512)) => "SASL_PLAINTEXT",
        (true, Some(AuthenticationType::ScramSha512)) => "SASL_SSL",
        (true, _) => "SSL",
        (false, _) => "PLAINTEXT",
    };
    Listener {
        name: l.name.to_ascii_uppercase(),
        port: l.port,
        protocol,
        client_certificates: auth == Some(AuthenticationType::Tls),
        sasl: (auth == Some(AuthenticationType::ScramSha512)).then_some("SCRAM-SHA-512"),
    }
}

/// The client listeners (not REPLICATION or CONTROLLER).
pub fn client_listeners(cluster: &Cluster) -> Vec<Listener> {
    if !cluster.spec.secured() {
        return vec![Listener {
            name: "PLAINTEXT".into(),
            port: KAFKA_PORT,
            protocol: "PLAINTEXT",
            client_certificates: false,
            sasl: None,
        }];
    }
    cluster.spec.listeners.iter().map(client_listener).collect()
}

/// Every listener a broker advertises (clients', then REPLICATION when secured).
fn advertised_listeners(cluster: &Cluster) -> Vec<(String, i32)> {
    let mut out: Vec<(String, i32)> = client_listeners(cluster).into_iter().map(|l| (l.name, l.port)).collect();
    if cluster.spec.secured() {
        out.push(("REPLICATION".into(), REPLICATION_PORT));
    }
    out
}

/// `advertised.listeners` of a broker whose stable DNS name is `host` (with `$(POD_NAME)` in it);
/// an external listener advertises its outside address ([`super::external::advertised`]).
pub fn advertised(cluster: &Cluster, host: &str) -> String {
    advertised_listeners(cluster)
        .iter()
        .map(|(n, p)| match cluster.spec.listeners.iter().find(|l| l.name.eq_ignore_ascii_case(n)) {
            Some(l) if !l.type_.is_internal() => super::external::advertised(l),
            _ => format!("{n}://{host}:{p}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// (port name, port) the brokers and the bootstrap Service expose for Kafka clients (and the
/// operator), names as Kubernetes wants them (lower case, at most 15 characters).
pub fn kafka_ports(cluster: &Cluster) -> Vec<(String, i32)> {
    if !cluster.spec.secured() {
        return vec![("kafka".into(), KAFKA_PORT)];
    }
    advertised_listeners(cluster).into_iter().map(|(n, p)| (n.to_ascii_lowercase(), p)).collect()
}

/// The port the operator administers the cluster through.
pub fn admin_port(cluster: &Cluster) -> i32 {
    if cluster.spec.secured() { REPLICATION_PORT } else { KAFKA_PORT }
}

/// The super users: the brokers and the operator (by their certificates' subjects), then
/// `spec.authorization.superUsers` (a bare name gets `User:`).
pub fn super_users(cluster: &Cluster, name: &str) -> Vec<String> {
    let mut out = vec![
        format!("User:CN={},O={}", broker_common_name(name), crate::certs::ORGANIZATION),
        format!("User:CN={OPERATOR_COMMON_NAME},O={}", crate::certs::ORGANIZATION),
    ];
    for u in cluster.spec.authorization.iter().flat_map(|a| &a.super_users) {
        out.push(if u.contains(':') { u.clone() } else { format!("User:{u}") });
    }
    out
}

/// The listener and security keys of `server.properties`.
pub fn properties(cluster: &Cluster, name: &str) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    let clients = client_listeners(cluster);
    if !cluster.spec.secured() {
        p.insert(
            "listeners".into(),
            format!("PLAINTEXT://0.0.0.0:{KAFKA_PORT},CONTROLLER://0.0.0.0:{CONTROLLER_PORT}"),
        );
        p.insert("controller.listener.names".into(), "CONTROLLER".into());
        return p;
    }
    let mut listeners =
        vec![format!("REPLICATION://0.0.0.0:{REPLICATION_PORT}"), format!("CONTROLLER://0.0.0.0:{CONTROLLER_PORT}")];
    let mut map = vec!["REPLICATION:SSL".to_string(), "CONTROLLER:SSL".to_string()];
    for l in &clients {
        listeners.push(format!("{}://0.0.0.0:{}", l.name, l.port));
        map.push(format!("{}:{}", l.name, l.protocol));
        let prefix = format!("listener.name.{}.", l.name.to_ascii_lowercase());
        if l.client_certificates {
            p.insert(format!("{prefix}ssl.client.auth"), "required".into());
            p.insert(format!("{prefix}ssl.truststore.location"), format!("{TLS_DIR}/clients-ca.crt"));
        }
        if let Some(m) = l.sasl {
            p.insert(format!("{prefix}sasl.enabled.mechanisms"), m.into());
        }
    }
    p.insert("listeners".into(), listeners.join(","));
    p.insert("listener.security.protocol.map".into(), map.join(","));
    p.insert("inter.broker.listener.name".into(), "REPLICATION".into());
    p.insert("controller.listener.names".into(), "CONTROLLER".into());
    p.insert("listener.name.replication.ssl.client.auth".into(), "required".into());
    p.insert("listener.name.controller.ssl.client.auth".into(), "required".into());
    p.insert("ssl.keystore.type".into(), "PEM".into());
    p.insert("ssl.keystore.location".into(), format!("{TLS_DIR}/keystore.pem"));
    p.insert("ssl.truststore.type".into(), "PEM".into());
    p.insert("ssl.truststore.location".into(), format!("{TLS_DIR}/ca.crt"));
    p.insert("ssl.principal.mapping.rules".into(), PRINCIPAL_RULES.into());
    if cluster.spec.authorization.is_some() {
        p.insert("authorizer.class.name".into(), AUTHORIZER.into());
        p.insert("super.users".into(), super_users(cluster, name).join(";"));
    }
    p
}

/// The DNS names the broker certificate carries: every broker's stable name (a wildcard under
/// the headless Service) and the bootstrap Service's names.
pub fn broker_names(headless: &str, bootstrap: &str, ns: &str, domain: &str) -> Vec<String> {
    vec![
        format!("*.{headless}.{ns}.svc.{domain}"),
        format!("*.{headless}.{ns}.svc"),
        format!("*.{headless}.{ns}"),
        format!("{bootstrap}.{ns}.svc.{domain}"),
        format!("{bootstrap}.{ns}.svc"),
        format!("{bootstrap}.{ns}"),
        bootstrap.to_string(),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::{Authentication, AuthorizationSpec, ClusterSpec};

    fn secured() -> Cluster {
        let l = |name: &str, port, tls, auth: Option<AuthenticationType>| ListenerSpec {
            name: name.into(),
            port,
            tls,
            authentication: auth.map(|type_| Authentication { type_ }),
            type_: Default::default(),
            configuration: None,
        };
        Cluster::new(
            "c",
            ClusterSpec {
                replicas: 3,
                listeners: vec![
                    l("plain", 9092, false, None),
                    l("scram", 9094, true, Some(AuthenticationType::ScramSha512)),
                    l("mtls", 9095, true, Some(AuthenticationType::Tls)),
                ],
                authorization: Some(AuthorizationSpec { super_users: vec!["admin".into(), "User:CN=x".into()] }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_cluster_without_listeners_keeps_one_plaintext_listener() {
        let c = Cluster::new("c", ClusterSpec { replicas: 1, ..Default::default() });
        let p = properties(&c, "c");
        assert_eq!(p["listeners"], "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093");
        assert!(!p.contains_key("listener.security.protocol.map"));
        assert_eq!(advertised(&c, "h"), "PLAINTEXT://h:9092");
        assert_eq!(kafka_ports(&c), vec![("kafka".to_string(), 9092)]);
        assert_eq!(admin_port(&c), 9092);
    }

    #[test]
    fn listeners_map_to_kafka_protocols_with_tls_inside() {
        let c = secured();
        let p = properties(&c, "c");
        assert_eq!(
            p["listeners"],
            "REPLICATION://0.0.0.0:9091,CONTROLLER://0.0.0.0:9093,PLAIN://0.0.0.0:9092,SCRAM://0.0.0.0:9094,MTLS://0.0.0.0:9095"
        );
        assert_eq!(
            p["listener.security.protocol.map"],
            "REPLICATION:SSL,CONTROLLER:SSL,PLAIN:PLAINTEXT,SCRAM:SASL_SSL,MTLS:SSL"
        );
        assert_eq!(p["inter.broker.listener.name"], "REPLICATION");
        assert_eq!(p["listener.name.scram.sasl.enabled.mechanisms"], "SCRAM-SHA-512");
        assert_eq!(p["listener.name.mtls.ssl.client.auth"], "required");
        assert_eq!(p["listener.name.mtls.ssl.truststore.location"], "/etc/oxbow/tls/clients-ca.crt");
        assert_eq!(p["listener.name.controller.ssl.client.auth"], "required");
        assert_eq!(p["authorizer.class.name"], AUTHORIZER);
        assert_eq!(
            p["super.users"],
            "User:CN=c-broker,O=oxbow.io;User:CN=oxbow-operator,O=oxbow.io;User:admin;User:CN=x"
        );
        assert_eq!(advertised(&c, "h"), "PLAIN://h:9092,SCRAM://h:9094,MTLS://h:9095,REPLICATION://h:9091");
        assert_eq!(admin_port(&c), REPLICATION_PORT);
        assert_eq!(kafka_ports(&c).last(), Some(&("replication".to_string(), 9091)));
    }
}
