//! A secured Cluster's certificates, kept in Secrets: the cluster CA and the clients CA (made
//! and renewed by the operator, or yours in the layout cert-manager writes), and the brokers'
//! certificate (`<cluster>-broker-tls`, mounted into every broker).
//!
//! Renewals never restart a broker: the Secret volume changes in place and brokers reload
//! their certificates from disk. A CA is renewed with the same key, so everything it signed
//! keeps verifying, under the old and the new CA certificate alike, while the change reaches
//! every broker and client. The decisions (what is due) are pure, in [`crate::certs`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};
use oxbow_protocol::connection::{ClientSecurity, client_tls};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;

use super::desired::{Names, Settings, selector_labels};
use super::listeners::{self, OPERATOR_COMMON_NAME};
use crate::Error;
use crate::certs::{self, Authority, Usage};
use crate::crd::{CaSpec, Cluster};
use crate::k8s::apply;

/// On a CA Secret the operator made: set it (any new value) to renew the CA now.
pub const FORCE_RENEW_ANNOTATION: &str = "oxbow.io/force-renew";
/// The `force-renew` value the operator last acted on.
const RENEWED_FOR_ANNOTATION: &str = "oxbow.io/renewed-for";
/// On the broker Secret: fingerprint of the CA certificate that signed it, and of its names.
const ISSUER_ANNOTATION: &str = "oxbow.io/issuer";
const NAMES_ANNOTATION: &str = "oxbow.io/names";

/// Which of a Cluster's two CAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Signs brokers and the operator; trusted by REPLICATION, the quorum and clients.
    Cluster,
    /// Signs `User` certificates; trusted by listeners with `tls` authentication.
    Clients,
}

fn spec_of(cluster: &Cluster, which: Which) -> CaSpec {
    match which {
        Which::Cluster => cluster.spec.cluster_ca.clone(),
        Which::Clients => cluster.spec.clients_ca.clone(),
    }
    .unwrap_or_default()
}

fn own_secret(cluster: &Cluster, which: Which) -> String {
    let names = Names::of(&cluster.name_any());
    match which {
        Which::Cluster => names.cluster_ca,
        Which::Clients => names.clients_ca,
    }
}

fn common_name(cluster: &Cluster, which: Which) -> String {
    match which {
        Which::Cluster => format!("{}-cluster-ca", cluster.name_any()),
        Which::Clients => format!("{}-clients-ca", cluster.name_any()),
    }
}

fn failed(what: String) -> Error {
    Error::Certificates(what)
}

/// The text under `key` of a Secret (empty or not UTF-8: none). The User controller reads its
/// Secrets with it too.
pub fn text(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).and_then(|b| String::from_utf8(b.0.clone()).ok()).filter(|s| !s.is_empty())
}

/// The Secret holding a CA, by the Secret's own name (yours or the operator's).
fn secret_name(cluster: &Cluster, which: Which) -> String {
    spec_of(cluster, which).secret_name.unwrap_or_else(|| own_secret(cluster, which))
}

/// A CA as its Secret holds it: `tls.crt` (the certificate, first block), `tls.key`, and
/// `ca.crt` (the trust bundle; `tls.crt` when absent, as in a cert-manager CA Secret).
fn authority_of(secret: &Secret, name: &str) -> Result<Authority, Error> {
    let missing = |k: &str| failed(format!("Secret {name} has no {k}"));
    let chain = text(secret, "tls.crt").ok_or_else(|| missing("tls.crt"))?;
    let cert = certs::split_pem(&chain).into_iter().next().ok_or_else(|| missing("certificate in tls.crt"))?;
    let key = text(secret, "tls.key").ok_or_else(|| missing("tls.key"))?;
    let bundle = text(secret, "ca.crt").unwrap_or_else(|| cert.clone());
    Ok(Authority { cert, key, bundle })
}

/// A Cluster's CA, read only (the Topic and User controllers, the operator's own certificate).
pub async fn load(client: &Client, cluster: &Cluster, which: Which) -> Result<Authority, Error> {
    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let name = secret_name(cluster, which);
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt(&name)
        .await?
        .ok_or_else(|| failed(format!("Secret {name} does not exist yet")))?;
    authority_of(&secret, &name)
}

fn meta(cluster: &Cluster, name: &str, annotations: BTreeMap<String, String>) -> ObjectMeta {
    let mut labels = selector_labels(&cluster.name_any());
    labels.insert("app.kubernetes.io/managed-by".into(), "oxbow-operator".into());
    labels.insert("app.kubernetes.io/component".into(), "certificates".into());
    ObjectMeta {
        name: Some(name.into()),
        namespace: cluster.namespace(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    pairs.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()
}

/// Makes, renews or reads one CA; `events` gets what changed.
async fn authority(
    client: &Client,
    cluster: &Cluster,
    which: Which,
    now: OffsetDateTime,
    events: &mut Vec<(&'static str, String)>,
) -> Result<Authority, Error> {
    let spec = spec_of(cluster, which);
    if spec.secret_name.is_some() {
        return load(client, cluster, which).await;
    }
    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let name = own_secret(cluster, which);
    let cn = common_name(cluster, which);
    let existing = Api::<Secret>::namespaced(client.clone(), &ns).get_opt(&name).await?;
    let annotation = |s: &Secret, k: &str| s.annotations().get(k).cloned().unwrap_or_default();
    let force = existing.as_ref().map(|s| annotation(s, FORCE_RENEW_ANNOTATION)).unwrap_or_default();
    let ca = match &existing {
        None => {
            let ca = certs::new_authority(&cn, now, spec.validity_days).map_err(|e| failed(e.to_string()))?;
            events.push(("CertificateAuthorityCreated", format!("created the CA {cn} (Secret {name})")));
            ca
        }
        Some(s) => {
            let ca = authority_of(s, &name)?;
            let expiry = certs::not_after(&ca.cert).map_err(|e| failed(format!("Secret {name}: {e}")))?;
            let forced = !force.is_empty() && force != annotation(s, RENEWED_FOR_ANNOTATION);
            if forced || certs::due(expiry, now, spec.renewal_days) {
                let renewed = certs::renew_authority(&ca, &cn, now, spec.validity_days)
                    .map_err(|e| failed(format!("renewing {name}: {e}")))?;
                let why =
                    if forced { format!("{FORCE_RENEW_ANNOTATION}={force}") } else { format!("expires {expiry}") };
                events.push(("CertificateAuthorityRenewed", format!("renewed the CA {cn} with the same key ({why})")));
                renewed
            } else {
                ca
            }
        }
    };
    let annotations = BTreeMap::from([(RENEWED_FOR_ANNOTATION.to_string(), force)]);
    let secret = Secret {
        metadata: meta(cluster, &name, annotations),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data(&[("tls.crt", &ca.cert), ("tls.key", &ca.key), ("ca.crt", &ca.bundle)])),
        ..Default::default()
    };
    apply::<Secret>(client, &ns, &secret).await?;
    Ok(ca)
}

/// Brings a secured Cluster's certificates up to date: both CAs, then the broker certificate
/// (issued again when due, when its CA certificate changed, or when its names did: the stable
/// names and `external_hosts`, the addresses of external listeners). Returns the events to
/// record.
pub async fn reconcile(
    client: &Client,
    cluster: &Cluster,
    settings: &Settings,
    external_hosts: &std::collections::BTreeSet<String>,
) -> Result<Vec<(&'static str, String)>, Error> {
    let now = OffsetDateTime::now_utc();
    let mut events = Vec::new();
    let ca = authority(client, cluster, Which::Cluster, now, &mut events).await?;
    let clients = authority(client, cluster, Which::Clients, now, &mut events).await?;

    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let name = cluster.name_any();
    let names = Names::of(&name);
    // The stable names, then the addresses external clients dial (IP literals become IP SANs).
    let mut dns = listeners::broker_names(&names.headless, &names.bootstrap, &ns, &settings.cluster_domain);
    dns.extend(external_hosts.iter().cloned());
    let issuer = certs::fingerprint(&ca.cert);
    let names_print = certs::fingerprint(&dns.join(","));
    let spec = spec_of(cluster, Which::Cluster);
    let existing = Api::<Secret>::namespaced(client.clone(), &ns).get_opt(&names.broker_tls).await?;
    let current = existing.as_ref().and_then(|s| {
        let a = s.annotations();
        let cert = text(s, "tls.crt")?;
        let key = text(s, "tls.key")?;
        let fresh = a.get(ISSUER_ANNOTATION) == Some(&issuer)
            && a.get(NAMES_ANNOTATION) == Some(&names_print)
            && certs::not_after(&cert).is_ok_and(|t| !certs::due(t, now, spec.renewal_days));
        fresh.then_some((cert, key))
    });
    let (chain, key) = match current {
        Some(c) => c,
        None => {
            let cn = listeners::broker_common_name(&name);
            let leaf = certs::issue(&ca, &cn, true, &dns, Usage::Broker, now, spec.validity_days)
                .map_err(|e| failed(format!("broker certificate: {e}")))?;
            let serial = certs::serial_hex(&leaf.cert).unwrap_or_default();
            let verb = if existing.is_some() { "renewed" } else { "issued" };
            events.push(("BrokerCertificateIssued", format!("{verb} the broker certificate (serial {serial})")));
            (format!("{}{}", leaf.cert, ca.cert), leaf.key)
        }
    };
    let annotations =
        BTreeMap::from([(ISSUER_ANNOTATION.to_string(), issuer), (NAMES_ANNOTATION.to_string(), names_print)]);
    let keystore = format!("{key}{chain}");
    let secret = Secret {
        metadata: meta(cluster, &names.broker_tls, annotations),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data(&[
            ("tls.crt", &chain),
            ("tls.key", &key),
            ("keystore.pem", &keystore),
            ("ca.crt", &ca.bundle),
            ("clients-ca.crt", &clients.bundle),
        ])),
        ..Default::default()
    };
    apply::<Secret>(client, &ns, &secret).await?;
    Ok(events)
}

/// The TLS client settings of the operator on a secured Cluster: a short-lived certificate of
/// its own (`CN=oxbow-operator,O=oxbow.io`, a super user) from the cluster CA, which the
/// brokers' certificate must chain to. Clear text on a Cluster without listeners.
pub async fn admin_security(client: &Client, cluster: &Cluster) -> Result<ClientSecurity, Error> {
    if !cluster.spec.secured() {
        return Ok(ClientSecurity::default());
    }
    let ca = load(client, cluster, Which::Cluster).await?;
    let now = OffsetDateTime::now_utc();
    let mine = certs::issue(&ca, OPERATOR_COMMON_NAME, true, &[], Usage::Client, now, 2)
        .map_err(|e| failed(format!("operator certificate: {e}")))?;
    client_security(&ca.bundle, Some((&mine.cert, &mine.key)))
}

/// rustls client settings from PEM text: the roots, and a certificate to present.
pub fn client_security(roots: &str, identity: Option<(&str, &str)>) -> Result<ClientSecurity, Error> {
    let bad = |what: &str, e: &dyn std::fmt::Display| failed(format!("{what}: {e}"));
    let mut store = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(roots.as_bytes()) {
        store.add(c.map_err(|e| bad("CA bundle", &e))?).map_err(|e| bad("CA bundle", &e))?;
    }
    let identity = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad("certificate", &e))?;
            Some((chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| bad("key", &e))?))
        }
        None => None,
    };
    let tls = client_tls(store, identity, true).map_err(|e| failed(format!("TLS client settings: {e}")))?;
    Ok(ClientSecurity { tls: Some(tls), sasl: None })
}
