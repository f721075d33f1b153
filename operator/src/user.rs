//! The User controller: a Kafka principal of a secured Cluster. Observe (the Secret, the
//! cluster's SCRAM credentials and ACLs) -> [`plan`] (pure) -> write the Secret, set the
//! credential, create and delete ACLs -> status. A finalizer removes the credential and the
//! ACLs with the resource (the Secret goes with it by owner reference), so deleting a User
//! revokes its access at once; it never blocks once the Cluster is gone.

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use oxbow_protocol::scram::Mechanism;
use time::OffsetDateTime;

use crate::Error;
use crate::certs::{self, Usage};
use crate::cluster::desired::Names;
use crate::cluster::tls::{self, Which};
use crate::cluster::{admin, listeners};
use crate::conditions::condition;
use crate::crd::{AuthenticationType, Cluster, User, UserStatus};
use crate::k8s::{Context, apply, apply_status};
use plan::Credentials;

/// Finalizer that lets the operator revoke the user in Kafka before the resource goes.
pub const FINALIZER: &str = "oxbow.io/user";
/// SCRAM iterations of the credentials the operator sets (Kafka's minimum and default).
const ITERATIONS: u32 = 4096;
/// On the user's Secret: fingerprint of the clients CA certificate that signed `tls.crt`.
const ISSUER_ANNOTATION: &str = "oxbow.io/issuer";

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api = match &namespace {
        Some(ns) => Api::<User>::namespaced(ctx.client.clone(), ns),
        None => Api::<User>::all(ctx.client.clone()),
    };
    let secrets = match &namespace {
        Some(ns) => Api::<Secret>::namespaced(ctx.client.clone(), ns),
        None => Api::<Secret>::all(ctx.client.clone()),
    };
    // A Cluster's CA Secrets: a renewal or a key replacement reaches its users' Secrets (trust
    // bundle, certificates) at once.
    let certificates = watcher::Config::default()
        .labels("app.kubernetes.io/managed-by=oxbow-operator,app.kubernetes.io/component=certificates");
    let controller = Controller::new(api, watcher::Config::default());
    let users = controller.store();
    controller
        .watches(secrets, certificates, move |s: Secret| {
            let cluster = s.labels().get("app.kubernetes.io/instance").cloned();
            let ns = s.namespace();
            users
                .state()
                .into_iter()
                .filter(|u| Some(&u.spec.cluster) == cluster.as_ref() && u.namespace() == ns)
                .map(|u| kube::runtime::reflector::ObjectRef::from_obj(u.as_ref()))
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(user = %obj.name, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "user reconcile failed"),
            }
        })
        .await;
}

fn error_policy(user: Arc<User>, err: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.failed(&ObjectRef::from_obj(user.as_ref()).erase());
    tracing::warn!(user = %user.name_any(), error = %err, retry_in = ?delay, "user reconcile error; retrying");
    Action::requeue(delay)
}

async fn reconcile(user: Arc<User>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(user.as_ref()).erase();
    let result = ctx.metrics.timed("user", reconcile_user(user, ctx.clone())).await;
    if result.is_ok() {
        ctx.backoff.succeeded(&key);
    }
    result
}

async fn reconcile_user(user: Arc<User>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = user.namespace().ok_or(Error::MissingNamespace)?;
    let api: Api<User> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, user, |event| async {
        match event {
            Finalizer::Apply(u) => apply_user(&u, &ctx, &ns).await,
            Finalizer::Cleanup(u) => cleanup(&u, &ctx, &ns).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn status(user: &User, ready: bool, reason: &str, message: String, credential_hash: Option<String>) -> UserStatus {
    let generation = user.metadata.generation.unwrap_or_default();
    let old = user.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    UserStatus {
        conditions: vec![condition(&old, "Ready", ready, reason, message, generation)],
        observed_generation: Some(generation),
        username: Some(user.name_any()),
        secret: ready.then(|| user.name_any()),
        credential_hash: credential_hash.or_else(|| user.status.as_ref().and_then(|s| s.credential_hash.clone())),
    }
}

async fn not_ready(ctx: &Context, ns: &str, user: &User, reason: &str, message: String) -> Result<Action, Error> {
    apply_status::<User>(&ctx.client, ns, &user.name_any(), &status(user, false, reason, message, None)).await?;
    Ok(Action::requeue(Duration::from_secs(30)))
}

async fn apply_user(user: &User, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let client = &ctx.client;
    let name = user.name_any();
    let Some(cluster) = Api::<Cluster>::namespaced(client.clone(), ns).get_opt(&user.spec.cluster).await? else {
        let msg = format!("Cluster {} does not exist in namespace {ns}", user.spec.cluster);
        return not_ready(ctx, ns, user, "ClusterNotFound", msg).await;
    };
    let auth = user.spec.authentication.type_;
    let client_listeners = listeners::client_listeners(&cluster);
    let Some(listener) = plan::listener_for(&client_listeners, auth).cloned() else {
        let kind = match auth {
            AuthenticationType::ScramSha512 => "scram-sha-512",
            AuthenticationType::Tls => "tls",
        };
        let msg = format!("Cluster {} has no listener with authentication {kind}", user.spec.cluster);
        return not_ready(ctx, ns, user, "NoListener", msg).await;
    };

    // The Secret: the password or certificate it has stays; a new one is made when missing
    // (and a certificate when due or signed by an earlier clients CA).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let existing = secrets.get_opt(&name).await?;
    let cluster_ca = tls::load(client, &cluster, Which::Cluster).await?;
    let names = Names::of(&cluster.name_any());
    let bootstrap = format!("{}.{ns}.svc.{}:{}", names.bootstrap, ctx.settings.cluster_domain, listener.port);
    let mut annotations = BTreeMap::new();
    let mut data: Vec<(&str, String)> = vec![("ca.crt", cluster_ca.bundle.clone())];
    let password = match auth {
        AuthenticationType::ScramSha512 => {
            let password = match existing.as_ref().and_then(|s| tls::text(s, "password")) {
                Some(p) => p,
                None => plan::new_password().map_err(Error::Certificates)?,
            };
            let props = plan::client_properties(
                &bootstrap,
                &listener,
                &name,
                &Credentials::Scram { password: &password },
                &cluster_ca.bundle,
            );
            data.push(("password", password.clone()));
            data.push(("sasl.jaas.config", plan::jaas(&name, &password)));
            data.push(("client.properties", props));
            Some(password)
        }
        AuthenticationType::Tls => {
            let ca = tls::load(client, &cluster, Which::Clients).await?;
            let issuer = certs::fingerprint(&ca.cert);
            let spec = cluster.spec.clients_ca.clone().unwrap_or_default();
            let now = OffsetDateTime::now_utc();
            let kept = match (
                existing.as_ref().and_then(|s| tls::text(s, "tls.crt")),
                existing.as_ref().and_then(|s| tls::text(s, "tls.key")),
            ) {
                (Some(c), Some(k))
                    if existing.as_ref().and_then(|s| s.annotations().get(ISSUER_ANNOTATION)) == Some(&issuer)
                        && certs::not_after(&c).is_ok_and(|t| !certs::due(t, now, spec.renewal_days)) =>
                {
                    Some((c, k))
                }
                _ => None,
            };
            let (cert, key) = match kept {
                Some(ck) => ck,
                None => {
                    let leaf = certs::issue(&ca, &name, false, &[], Usage::Client, now, spec.validity_days)
                        .map_err(|e| Error::Certificates(format!("certificate of user {name}: {e}")))?;
                    (leaf.cert, leaf.key)
                }
            };
            let props = plan::client_properties(
                &bootstrap,
                &listener,
                &name,
                &Credentials::Tls { cert: &cert, key: &key },
                &cluster_ca.bundle,
            );
            annotations.insert(ISSUER_ANNOTATION.to_string(), issuer);
            data.push(("keystore.pem", format!("{key}{cert}")));
            data.push(("tls.crt", cert));
            data.push(("tls.key", key));
            data.push(("client.properties", props));
            None
        }
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_string()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_string(), "oxbow-operator".to_string()),
                ("app.kubernetes.io/instance".to_string(), cluster.name_any()),
                ("oxbow.io/user".to_string(), name.clone()),
            ])),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: user.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(data.into_iter().map(|(k, v)| (k.to_string(), ByteString(v.into_bytes()))).collect()),
        ..Default::default()
    };
    apply::<Secret>(client, ns, &secret).await?;

    // The cluster: the credential (when new, changed or missing there), then the ACLs.
    let result = async {
        let mut admin = admin(ctx, &cluster).await?;
        let mut hash = None;
        if let Some(password) = &password {
            let h = certs::fingerprint(password);
            let applied = user.status.as_ref().and_then(|s| s.credential_hash.as_ref()) == Some(&h);
            if !applied || !admin.has_scram(&name).await? {
                let salt = oxbow_protocol::scram::random_bytes(32).map_err(|e| Error::Certificates(e.to_string()))?;
                let salted = Mechanism::Sha512.salted_password(password.as_bytes(), &salt, ITERATIONS);
                admin.upsert_scram(&name, ITERATIONS as i32, salt, salted).await?;
                ctx.event(
                    user,
                    "CredentialSet",
                    "SetCredential",
                    format!("set the SCRAM-SHA-512 credential of {name}"),
                )
                .await;
            }
            hash = Some(h);
        }
        let want = plan::bindings(user);
        let have = admin.acls_of(&plan::principal(user)).await?;
        let (create, delete) = plan::diff(&want, &have);
        admin.create_acls(&create).await?;
        admin.delete_acls(&delete).await?;
        if !create.is_empty() || !delete.is_empty() {
            let note = format!("ACLs of {name}: {} created, {} deleted", create.len(), delete.len());
            ctx.event(user, "AclsChanged", "ChangeAcls", note).await;
        }
        Ok::<_, Error>((hash, want.len()))
    }
    .await;
    match result {
        Ok((hash, acls)) => {
            let msg = format!("user {name}: credentials in Secret {name}, {acls} ACL bindings");
            apply_status::<User>(client, ns, &name, &status(user, true, "Ready", msg, hash)).await?;
            Ok(Action::requeue(Duration::from_secs(300)))
        }
        Err(e) => {
            let reason = match e {
                Error::Kafka(crate::kafka::KafkaError::Refused { .. }) => "KafkaRefused",
                _ => "ClusterUnreachable",
            };
            apply_status::<User>(client, ns, &name, &status(user, false, reason, e.to_string(), None)).await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
    }
}

async fn cleanup(user: &User, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let cluster = match Api::<Cluster>::namespaced(ctx.client.clone(), ns).get_opt(&user.spec.cluster).await? {
        // The cluster is gone or going: nothing to revoke, and nothing may block on it.
        None => return Ok(Action::await_change()),
        Some(c) if c.metadata.deletion_timestamp.is_some() => return Ok(Action::await_change()),
        Some(c) => c,
    };
    if !cluster.spec.secured() {
        return Ok(Action::await_change());
    }
    let name = user.name_any();
    let mut admin = admin(ctx, &cluster).await?;
    let have = admin.acls_of(&plan::principal(user)).await?;
    admin.delete_acls(&have).await?;
    admin.delete_scram(&name).await?;
    tracing::info!(user = %name, acls = have.len(), "revoked the user with its resource");
    Ok(Action::await_change())
}
