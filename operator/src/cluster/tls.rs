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
/// On a CA Secret the operator made: set it (any new value) to replace the CA's key now.
pub const FORCE_REPLACE_ANNOTATION: &str = "oxbow.io/force-replace";
/// The `force-replace` value the operator last acted on.
const REPLACED_FOR_ANNOTATION: &str = "oxbow.io/replaced-for";
/// On the broker pods (from their template): the CA keys the brokers trust and are signed
/// by ([`generation`]). A change restarts them one at a time: the metadata quorum reads its
/// certificates at startup, so a new key reaches it only through a restart. A renewal keeps
/// the keys, so it restarts nothing.
pub const CA_KEYS_ANNOTATION: &str = "oxbow.io/ca-keys";
/// When (Unix seconds) a key replacement last took a step.
const STEP_AT_ANNOTATION: &str = "oxbow.io/key-step-at";
/// Time a changed Secret takes to reach the files of the pods that mount it (the kubelet's
/// sync period and cache), with a margin: the default of the operator's `--secret-propagation`.
pub const PROPAGATION: std::time::Duration = std::time::Duration::from_secs(90);
/// Keys of a CA Secret during a key replacement: the new CA, trusted but not signing yet.
const NEXT_CERT: &str = "next.crt";
const NEXT_KEY: &str = "next.key";
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

/// The cluster CA keys the brokers run with, as one fingerprint of the keys its bundle trusts
/// and the key it signs with; `None` in the steady state (one key, trusted and signing), so a
/// Cluster that never replaced a key carries no annotation. It changes at each step of a key
/// replacement (back to `None` at the last), never on a renewal. The clients CA is left out:
/// only client listeners use it, and they reload it from disk.
pub fn generation(cluster_ca: &Authority) -> Option<String> {
    let trusted = certs::keys_of(&cluster_ca.bundle);
    let signing = certs::key_of(&cluster_ca.cert).unwrap_or_default();
    (trusted != [signing.clone()]).then(|| certs::fingerprint(&format!("{}/{signing}", trusted.join("+"))))
}

/// Whether every broker runs with CA keys `generation`, ready: a key replacement may take its
/// next step.
pub fn settled(pods: &[k8s_openapi::api::core::v1::Pod], brokers: i32, generation: Option<&str>) -> bool {
    pods.len() == brokers as usize
        && pods.iter().all(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.annotations().get(CA_KEYS_ANNOTATION).map(String::as_str) == generation
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

/// The `User`s of the Cluster whose Secret lacks the current trust bundle or, for a certificate
/// user, a certificate from the current clients CA: before a key replacement signs with the new
/// key, clients must trust it; before the old clients CA key stops being trusted, users must
/// hold certificates of the new one. (The User controller updates the Secrets when a CA Secret
/// changes.)
async fn stale_users(
    client: &Client,
    cluster: &Cluster,
    cluster_ca: &Authority,
    clients_ca: &Authority,
) -> Result<Vec<String>, Error> {
    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let selector = format!("app.kubernetes.io/instance={},oxbow.io/user", cluster.name_any());
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    let issuer = certs::fingerprint(&clients_ca.cert);
    Ok(secrets
        .items
        .iter()
        .filter(|s| {
            text(s, "ca.crt").as_deref() != Some(cluster_ca.bundle.as_str())
                || s.annotations().get(ISSUER_ANNOTATION).is_some_and(|i| *i != issuer)
        })
        .map(|s| s.labels().get("oxbow.io/user").cloned().unwrap_or_else(|| s.name_any()))
        .collect())
}

/// The step a CA the operator made takes in this reconcile.
enum Step {
    Keep,
    Renew(String),
    /// Key replacement, 1: trust a new key beside the current one.
    Trust(&'static str),
    /// 2: sign with the new key (the brokers trust it).
    Switch,
    /// 3: trust only the new key (everything is signed with it).
    Retire,
}

/// Makes, renews, replaces the key of, or reads one CA; `events` gets what changed. A key
/// replacement's next step goes unless `blocked` says what it waits for: for the cluster CA,
/// every broker restarted with the current keys (the quorum reads them at startup) and every
/// user's Secret current; for the clients CA, users' Secrets current, and also `propagation`
/// ([`PROPAGATION`] by default) since the last step, for the kubelets to update the brokers'
/// mounted bundle. A step that waits is added to `waiting`.
#[allow(clippy::too_many_arguments)]
async fn authority(
    client: &Client,
    cluster: &Cluster,
    which: Which,
    now: OffsetDateTime,
    propagation: std::time::Duration,
    blocked: Option<String>,
    events: &mut Vec<(&'static str, String)>,
    waiting: &mut Vec<String>,
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
    let replace = existing.as_ref().map(|s| annotation(s, FORCE_REPLACE_ANNOTATION)).unwrap_or_default();
    let mut replaced_for = existing.as_ref().map(|s| annotation(s, REPLACED_FOR_ANNOTATION)).unwrap_or_default();
    let mut step_at = existing.as_ref().map(|s| annotation(s, STEP_AT_ANNOTATION)).unwrap_or_default();
    // A renewal asked for while a key replacement runs waits for it to finish.
    let mut renewed_for = existing.as_ref().map(|s| annotation(s, RENEWED_FOR_ANNOTATION)).unwrap_or_default();
    let propagated = step_at.parse::<i64>().is_ok_and(|t| now.unix_timestamp() - t >= propagation.as_secs() as i64);
    let blocked = match blocked {
        None if which == Which::Clients && !propagated => {
            Some(format!("{}s for the brokers' mounted bundle to change", propagation.as_secs()))
        }
        b => b,
    };
    let settled = blocked.is_none();
    let bad = |e: certs::CertError| failed(format!("Secret {name}: {e}"));
    let (ca, next) = match &existing {
        None => {
            let ca = certs::new_authority(&cn, now, spec.validity_days).map_err(|e| failed(e.to_string()))?;
            events.push(("CertificateAuthorityCreated", format!("created the CA {cn} (Secret {name})")));
            (ca, None)
        }
        Some(s) => {
            let ca = authority_of(s, &name)?;
            let next = match (text(s, NEXT_CERT), text(s, NEXT_KEY)) {
                (Some(cert), Some(key)) => Some(Authority { cert, key, bundle: ca.bundle.clone() }),
                _ => None,
            };
            let expiry = certs::not_after(&ca.cert).map_err(bad)?;
            let due = certs::due(expiry, now, spec.renewal_days);
            let old_keys = certs::keys_of(&ca.bundle).len() > 1;
            let done = if next.is_some() { 1 } else { 2 };
            if (next.is_some() || old_keys)
                && let Some(why) = &blocked
            {
                waiting.push(format!("key replacement of {cn} (step {done} of 3 done) waits for {why}"));
            }
            let step = if next.is_some() {
                if settled { Step::Switch } else { Step::Keep }
            } else if old_keys {
                if settled { Step::Retire } else { Step::Keep }
            } else if !replace.is_empty() && replace != replaced_for {
                Step::Trust("asked")
            } else if due && spec.expiration_policy == crate::crd::ExpirationPolicy::ReplaceKey {
                Step::Trust("due")
            } else if !force.is_empty() && force != renewed_for {
                Step::Renew(format!("{FORCE_RENEW_ANNOTATION}={force}"))
            } else if due {
                Step::Renew(format!("expires {expiry}"))
            } else {
                Step::Keep
            };
            if matches!(step, Step::Trust(_) | Step::Switch | Step::Retire) {
                step_at = now.unix_timestamp().to_string();
            }
            match step {
                Step::Keep => (ca, next),
                Step::Renew(why) => {
                    renewed_for = force.clone();
                    let renewed = certs::renew_authority(&ca, &cn, now, spec.validity_days)
                        .map_err(|e| failed(format!("renewing {name}: {e}")))?;
                    events.push((
                        "CertificateAuthorityRenewed",
                        format!("renewed the CA {cn} with the same key ({why})"),
                    ));
                    (renewed, None)
                }
                Step::Trust(why) => {
                    let new = certs::next_authority(&ca, &cn, now, spec.validity_days).map_err(bad)?;
                    replaced_for = replace.clone();
                    let why = if why == "asked" {
                        format!("{FORCE_REPLACE_ANNOTATION}={replace}")
                    } else {
                        format!("expires {expiry}")
                    };
                    events.push((
                        "CertificateAuthorityKeyReplacing",
                        format!("replacing the key of the CA {cn} ({why}): step 1 of 3, brokers trust the new key"),
                    ));
                    (Authority { bundle: new.bundle.clone(), ..ca }, Some(new))
                }
                Step::Switch => {
                    events.push((
                        "CertificateAuthorityKeyReplacing",
                        format!(
                            "replacing the key of the CA {cn}: step 2 of 3, certificates are signed with the new key"
                        ),
                    ));
                    (next.unwrap_or(ca), None)
                }
                Step::Retire => {
                    events.push((
                        "CertificateAuthorityKeyReplaced",
                        format!("replaced the key of the CA {cn}: step 3 of 3, the old key is no longer trusted"),
                    ));
                    (certs::retire_other_keys(&ca).map_err(bad)?, None)
                }
            }
        }
    };
    let annotations = BTreeMap::from([
        (RENEWED_FOR_ANNOTATION.to_string(), renewed_for),
        (REPLACED_FOR_ANNOTATION.to_string(), replaced_for),
        (STEP_AT_ANNOTATION.to_string(), step_at),
    ]);
    let mut pairs = vec![("tls.crt", ca.cert.as_str()), ("tls.key", ca.key.as_str()), ("ca.crt", ca.bundle.as_str())];
    if let Some(n) = &next {
        pairs.extend([(NEXT_CERT, n.cert.as_str()), (NEXT_KEY, n.key.as_str())]);
    }
    let secret = Secret {
        metadata: meta(cluster, &name, annotations),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data(&pairs)),
        ..Default::default()
    };
    apply::<Secret>(client, &ns, &secret).await?;
    Ok(ca)
}

/// What [`reconcile`] did: the events to record, and the CA keys the brokers should run with
/// (for [`CA_KEYS_ANNOTATION`]).
pub struct Outcome {
    pub events: Vec<(&'static str, String)>,
    pub generation: Option<String>,
    /// A key replacement step that waits, and for what.
    pub waiting: Option<String>,
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
    pods: &[k8s_openapi::api::core::v1::Pod],
    brokers: i32,
) -> Result<Outcome, Error> {
    let now = OffsetDateTime::now_utc();
    let mut events = Vec::new();
    let (users, rolled) =
        match (load(client, cluster, Which::Cluster).await, load(client, cluster, Which::Clients).await) {
            (Ok(a), Ok(b)) => {
                let stale = stale_users(client, cluster, &a, &b).await?;
                let users = (!stale.is_empty()).then(|| format!("the Secrets of users {}", stale.join(", ")));
                (users, settled(pods, brokers, generation(&a).as_deref()))
            }
            _ => (Some("the CA Secrets".to_string()), false),
        };
    let brokers_blocked =
        users.clone().or_else(|| (!rolled).then(|| "the brokers to restart with the new keys".into()));
    let mut waiting = Vec::new();
    let propagation = settings.waits.secret_propagation;
    let ca = authority(client, cluster, Which::Cluster, now, propagation, brokers_blocked, &mut events, &mut waiting)
        .await?;
    let clients =
        authority(client, cluster, Which::Clients, now, propagation, users, &mut events, &mut waiting).await?;

    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let name = cluster.name_any();
    let names = Names::of(&name);
    // The stable names, then the addresses external clients dial (IP literals become IP SANs).
    let mut dns = listeners::broker_names(&names.headless, &names.bootstrap, &ns, &settings.cluster_domain);
    if cluster.spec.dedicated_controllers() {
        // The dedicated controllers present the same certificate, under their own Service.
        let h = &names.controller_headless;
        dns.extend([
            format!("*.{h}.{ns}.svc.{}", settings.cluster_domain),
            format!("*.{h}.{ns}.svc"),
            format!("*.{h}.{ns}"),
        ]);
    }
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
    Ok(Outcome { events, generation: generation(&ca), waiting: (!waiting.is_empty()).then(|| waiting.join("; ")) })
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_keeps_the_generation_and_each_key_replacement_step_changes_it() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let ca = certs::new_authority("c-cluster-ca", now, 365).unwrap();
        let renewed = certs::renew_authority(&ca, "c-cluster-ca", now + time::Duration::days(1), 365).unwrap();
        assert_eq!(generation(&ca), None, "no annotation while one key is trusted and signs");
        assert_eq!(generation(&renewed), None, "a renewal restarts nothing");
        let next = certs::next_authority(&renewed, "c-cluster-ca", now, 365).unwrap();
        let trusting = Authority { bundle: next.bundle.clone(), ..renewed.clone() };
        let switched = next.clone();
        let retired = certs::retire_other_keys(&switched).unwrap();
        let steps = [generation(&renewed), generation(&trusting), generation(&switched), generation(&retired)];
        for w in steps.windows(2) {
            assert_ne!(w[0], w[1], "every step of a key replacement restarts the brokers");
        }
        assert_eq!(steps[3], None, "back to the steady state");
    }
}
