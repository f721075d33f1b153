//! The security parts of a `Cluster` (listeners, authorization, certificate authorities) and the
//! `User` resource: a Kafka principal with its credentials and ACLs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A client listener: a port on every broker and on the bootstrap Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.authentication) || self.authentication.type != 'tls' || self.tls")
    .message("a listener with authentication type tls needs tls: true"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.configuration) || (has(self.type) && self.type != 'internal')")
    .message("configuration is for nodeport and loadbalancer listeners"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.configuration) || !has(self.configuration.brokers) || self.type == 'loadbalancer' || self.configuration.brokers.all(b, !has(b.advertisedHost))")
    .message("advertisedHost is for loadbalancer listeners (a nodeport listener advertises the node's address)"))]
pub struct ListenerSpec {
    /// Lower-case letters and digits; the Kafka listener name is its upper case (`tls` ->
    /// `TLS`). `replication` and `controller` are the operator's.
    #[schemars(length(min = 1, max = 11), regex(pattern = r"^[a-z][a-z0-9]{0,10}$"))]
    #[x_kube(validation = kube::core::Rule::new("self != 'replication' && self != 'controller'")
        .message("listener names replication and controller are the operator's"))]
    pub name: String,
    /// Port on every broker and on the bootstrap Service. 8080, 9091 and 9093 are the
    /// operator's (health, replication, the quorum).
    #[schemars(range(min = 1024, max = 65535))]
    #[x_kube(validation = kube::core::Rule::new("self != 8080 && self != 9091 && self != 9093")
        .message("ports 8080, 9091 and 9093 are the operator's (health, replication, controller)"))]
    pub port: i32,
    /// Encrypt with TLS (a broker certificate from the cluster CA).
    #[serde(default)]
    pub tls: bool,
    /// How clients prove who they are; none (every client is `User:ANONYMOUS`) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<Authentication>,
    /// Where clients reach the listener. `internal` (the default): inside the Kubernetes
    /// cluster, through the bootstrap Service and each broker's stable DNS name. `nodeport`:
    /// from outside, through a NodePort Service per broker (advertised as the address of the
    /// node the broker runs on) and one for bootstrapping. `loadbalancer`: from outside,
    /// through a LoadBalancer Service per broker (advertised as its load balancer's address)
    /// and one for bootstrapping; brokers start once their load balancers have addresses.
    #[serde(default, rename = "type", skip_serializing_if = "ListenerType::is_internal")]
    pub type_: ListenerType,
    /// Node ports and advertised hosts of an external listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ExternalConfiguration>,
}

/// A listener as clients reach it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    /// `internal`, `nodeport` or `loadbalancer`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `host:port,...` to bootstrap from (an external listener's: from outside the cluster;
    /// empty while its addresses are not known yet).
    #[serde(default)]
    pub bootstrap_servers: String,
}

/// Where a listener is reached from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListenerType {
    #[default]
    #[serde(rename = "internal")]
    Internal,
    #[serde(rename = "nodeport")]
    NodePort,
    #[serde(rename = "loadbalancer")]
    LoadBalancer,
}

impl ListenerType {
    pub fn is_internal(&self) -> bool {
        *self == ListenerType::Internal
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ListenerType::Internal => "internal",
            ListenerType::NodePort => "nodeport",
            ListenerType::LoadBalancer => "loadbalancer",
        }
    }

    /// The Service type of an external listener's Services.
    pub fn service_type(&self) -> Option<&'static str> {
        match self {
            ListenerType::Internal => None,
            ListenerType::NodePort => Some("NodePort"),
            ListenerType::LoadBalancer => Some("LoadBalancer"),
        }
    }
}

/// Settings of an external (`nodeport` or `loadbalancer`) listener.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalConfiguration {
    /// The bootstrap Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<ExternalBootstrap>,
    /// Per broker (by node id); brokers not listed get Kubernetes' choices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub brokers: Vec<ExternalBroker>,
}

/// The bootstrap Service of an external listener.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalBootstrap {
    /// `nodeport`: the node port (unset: Kubernetes picks one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
}

/// One broker's Service of an external listener.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalBroker {
    /// The broker's node id (its pod's ordinal).
    #[schemars(range(min = 0, max = 63))]
    pub broker: i32,
    /// `nodeport`: the node port (unset: Kubernetes picks one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    /// `loadbalancer`: the host the broker advertises (a DNS name pointing at its load
    /// balancer), instead of the address the load balancer reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub advertised_host: Option<String>,
}

/// An authentication method.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Authentication {
    /// `scram-sha-512` (SASL SCRAM, credentials of `User` resources) or `tls` (a client
    /// certificate from the clients CA; the principal is its common name).
    #[serde(rename = "type")]
    pub type_: AuthenticationType,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthenticationType {
    #[default]
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    #[serde(rename = "tls")]
    Tls,
}

/// ACLs on (Kafka's StandardAuthorizer): `User` resources grant rights, everything else is
/// refused.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationSpec {
    /// Principals allowed everything (`User:alice`, or a bare name `alice`). The brokers and
    /// the operator are always super users.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub super_users: Vec<String>,
}

/// A certificate authority the operator issues certificates from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CaSpec {
    /// A Secret holding your own CA (`tls.crt` and `tls.key`, the layout cert-manager writes):
    /// the operator signs with it and never changes it. Unset: the operator makes its own CA
    /// (Secret `<cluster>-cluster-ca` or `<cluster>-clients-ca`) and renews it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Days a certificate the operator makes is valid (the CA and what it signs).
    #[serde(default = "days_365")]
    #[schemars(range(min = 2, max = 36500))]
    pub validity_days: i32,
    /// Days before expiry a certificate is renewed. A CA is renewed with the same key, so
    /// everything it signed stays valid and no broker restarts: brokers reload certificates
    /// from their Secret.
    #[serde(default = "days_30")]
    #[schemars(range(min = 1, max = 36500))]
    pub renewal_days: i32,
    /// What happens to a CA the operator made when it is due: `renew-certificate` (the
    /// default: a new certificate for the same key, nothing restarts) or `replace-key` (a new
    /// key: brokers trust it, then certificates are signed with it, then the old key is no
    /// longer trusted, each step a rolling restart). The annotation `oxbow.io/force-replace` on
    /// the CA's Secret replaces the key at once.
    #[serde(default, skip_serializing_if = "ExpirationPolicy::is_renew")]
    pub expiration_policy: ExpirationPolicy,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpirationPolicy {
    #[default]
    #[serde(rename = "renew-certificate")]
    RenewCertificate,
    #[serde(rename = "replace-key")]
    ReplaceKey,
}

impl ExpirationPolicy {
    pub fn is_renew(&self) -> bool {
        *self == ExpirationPolicy::RenewCertificate
    }
}

fn days_365() -> i32 {
    365
}

fn days_30() -> i32 {
    30
}

impl Default for CaSpec {
    fn default() -> Self {
        CaSpec {
            secret_name: None,
            validity_days: days_365(),
            renewal_days: days_30(),
            expiration_policy: ExpirationPolicy::RenewCertificate,
        }
    }
}

/// A Kafka user of a Cluster: credentials in a Secret of the same name, and ACLs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "oxbow.io",
    version = "v1alpha1",
    kind = "User",
    namespaced,
    status = "UserStatus",
    shortname = "oxu",
    category = "oxbow",
    derive = "Default",
    derive = "PartialEq",
    doc = "A Kafka user of an Oxbow Cluster in the same namespace: SCRAM-SHA-512 or TLS credentials and ACLs",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Authentication", type_ = "string", json_path = ".spec.authentication.type"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// Name of the Cluster (same namespace). The Kafka user name is the resource's name.
    #[schemars(length(min = 1))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("cluster cannot be changed"))]
    pub cluster: String,
    /// `scram-sha-512`: the Secret holds a generated `password`; `tls`: a client certificate
    /// (`tls.crt`, `tls.key`) from the clients CA, common name = the user name.
    pub authentication: Authentication,
    /// What the user may do. No ACLs: nothing (unless a super user).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclRule>,
}

/// One ACL of the user (as `kafka-acls.sh --add` takes it).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AclRule {
    pub resource: AclResource,
    /// Operations allowed (or denied): `Read`, `Write`, `Create`, `Delete`, `Alter`,
    /// `Describe`, `ClusterAction`, `DescribeConfigs`, `AlterConfigs`, `IdempotentWrite`, `All`.
    #[schemars(length(min = 1))]
    pub operations: Vec<AclOperation>,
    /// Client address the rule applies to; `*` for any.
    #[serde(default = "any_host")]
    pub host: String,
    /// `allow` or `deny` (a deny wins over any allow).
    #[serde(default, rename = "type")]
    pub type_: AclType,
}

fn any_host() -> String {
    "*".into()
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.type == 'cluster' || has(self.name)")
    .message("a topic, group or transactionalId resource needs a name (`*` for all)"))]
pub struct AclResource {
    /// `topic`, `group`, `cluster` or `transactionalId`.
    #[serde(rename = "type")]
    pub type_: AclResourceType,
    /// The resource's name, `*` for all; a prefix with `patternType: prefix`. None for `cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// `literal` (the default) or `prefix`.
    #[serde(default)]
    pub pattern_type: AclPatternType,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum AclResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AclPatternType {
    #[default]
    Literal,
    Prefix,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AclType {
    #[default]
    Allow,
    Deny,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UserStatus {
    /// `Ready`, with the reason when it is not (ClusterNotFound, ClusterNotSecured,
    /// ClusterUnreachable, KafkaRefused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Kafka user name (principal `User:<username>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The Secret with the credentials and a ready-made `client.properties`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// SHA-256 (first 16 hex digits) of the password the brokers last got for this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_hash: Option<String>,
}
