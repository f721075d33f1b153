//! The Topic controller: observe the topic through the Kafka admin protocol -> [`plan`] (pure)
//! -> create / grow / alter configs -> status. A finalizer deletes the Kafka topic with the
//! resource (annotation `oxbow.io/deletion-policy: delete`, the default) or leaves it
//! (`retain`); it never blocks deletion once the Cluster is gone, so deleting a namespace never
//! gets stuck on it.

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::Error;
use crate::cluster::{admin, bootstrap_address, tls};
use crate::conditions::condition;
use crate::crd::{Cluster, DELETION_POLICY_ANNOTATION, Topic, TopicStatus};
use crate::k8s::{Context, apply_status};
use crate::kafka::{Admin, KafkaError, TOPIC_ALREADY_EXISTS};
use plan::{Observed, Plan, Step};

/// Finalizer that lets the operator delete the Kafka topic before the resource goes.
pub const FINALIZER: &str = "oxbow.io/topic";

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api = match &namespace {
        Some(ns) => Api::<Topic>::namespaced(ctx.client.clone(), ns),
        None => Api::<Topic>::all(ctx.client.clone()),
    };
    Controller::new(api, watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(topic = %obj.name, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "topic reconcile failed"),
            }
        })
        .await;
}

fn error_policy(topic: Arc<Topic>, err: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.failed(&ObjectRef::from_obj(topic.as_ref()).erase());
    tracing::warn!(topic = %topic.name_any(), error = %err, retry_in = ?delay, "topic reconcile error; retrying");
    Action::requeue(delay)
}

async fn reconcile(topic: Arc<Topic>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(topic.as_ref()).erase();
    let result = ctx.metrics.timed("topic", reconcile_topic(topic, ctx.clone())).await;
    if result.is_ok() {
        ctx.backoff.succeeded(&key);
    }
    result
}

async fn reconcile_topic(topic: Arc<Topic>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = topic.namespace().ok_or(Error::MissingNamespace)?;
    let api: Api<Topic> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, topic, |event| async {
        match event {
            Finalizer::Apply(t) => apply(&t, &ctx, &ns).await,
            Finalizer::Cleanup(t) => cleanup(&t, &ctx, &ns).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

async fn write_status(client: &Client, ns: &str, topic: &Topic, status: TopicStatus) -> Result<(), Error> {
    apply_status::<Topic>(client, ns, &topic.name_any(), &status).await
}

fn status_with(topic: &Topic, ready: bool, reason: &str, message: String) -> TopicStatus {
    let generation = topic.metadata.generation.unwrap_or_default();
    let old = topic.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let mut st = topic.status.clone().unwrap_or_default();
    st.conditions = vec![condition(&old, "Ready", ready, reason, message, generation)];
    st.observed_generation = Some(generation);
    st.topic_name = Some(topic.kafka_name());
    st
}

async fn observe(admin: &mut Admin, name: &str) -> Result<Option<(String, Observed)>, KafkaError> {
    let Some(info) = admin.describe_topic(name).await? else { return Ok(None) };
    let configs = admin.topic_configs(name).await?;
    Ok(Some((info.id, Observed { partitions: info.partitions, replication_factor: info.replication_factor, configs })))
}

async fn apply(topic: &Topic, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let client = &ctx.client;
    let name = topic.kafka_name();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    let Some(cluster) = clusters.get_opt(&topic.spec.cluster).await? else {
        let msg = format!("Cluster {} does not exist in namespace {ns}", topic.spec.cluster);
        write_status(client, ns, topic, status_with(topic, false, "ClusterNotFound", msg)).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let security = match tls::admin_security(client, &cluster).await {
        Ok(s) => s,
        Err(e) => {
            write_status(client, ns, topic, status_with(topic, false, "ClusterUnreachable", e.to_string())).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    let addr = bootstrap_address(&cluster, &ctx.settings);
    let result = async {
        let mut admin = Admin::connect(&addr, &security).await?;
        let observed = observe(&mut admin, &name).await?;
        let Plan { steps, refusals } = plan::plan(&topic.spec, observed.as_ref().map(|(_, o)| o));
        for step in &steps {
            match step {
                Step::Create { partitions, replication_factor, configs } => {
                    match admin.create_topic(&name, *partitions, *replication_factor, configs).await {
                        // Created meanwhile (by a client or an earlier pass): adopt it next pass.
                        Err(KafkaError::Refused { code: TOPIC_ALREADY_EXISTS, .. }) => {}
                        other => other?,
                    }
                    ctx.event(
                        topic,
                        "Created",
                        "Created",
                        format!("created topic {name} with {partitions} partitions"),
                    )
                    .await;
                }
                Step::Grow { to } => {
                    admin.create_partitions(&name, *to).await?;
                    ctx.event(
                        topic,
                        "PartitionsAdded",
                        "PartitionsAdded",
                        format!("grew topic {name} to {to} partitions"),
                    )
                    .await;
                }
                Step::AlterConfigs { set, delete } => {
                    admin.alter_topic_configs(&name, set, delete).await?;
                    let keys: Vec<&str> =
                        set.keys().map(String::as_str).chain(delete.iter().map(String::as_str)).collect();
                    ctx.event(
                        topic,
                        "ConfigChanged",
                        "ConfigChanged",
                        format!("changed {} of topic {name}", keys.join(", ")),
                    )
                    .await;
                }
            }
        }
        let now = if steps.is_empty() {
            observed.map(|(id, o)| (id, o.partitions, o.replication_factor))
        } else {
            admin.describe_topic(&name).await?.map(|i| (i.id, i.partitions, i.replication_factor))
        };
        Ok::<_, KafkaError>((now, refusals))
    }
    .await;

    match result {
        Ok((now, refusals)) => {
            let mut st = match refusals.first() {
                Some(r) => {
                    let msg = refusals.iter().map(|r| r.message.as_str()).collect::<Vec<_>>().join("; ");
                    status_with(topic, false, r.reason, msg)
                }
                None => status_with(topic, true, "Ready", format!("topic {name} matches the spec")),
            };
            if let Some((id, partitions, replication_factor)) = now {
                st.topic_id = Some(id);
                st.partitions = Some(partitions);
                st.replication_factor = Some(replication_factor);
            }
            write_status(client, ns, topic, st).await?;
            Ok(Action::requeue(Duration::from_secs(60)))
        }
        Err(e) => {
            let reason = match e {
                KafkaError::Refused { .. } => "KafkaRefused",
                _ => "ClusterUnreachable",
            };
            write_status(client, ns, topic, status_with(topic, false, reason, e.to_string())).await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
    }
}

async fn cleanup(topic: &Topic, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let name = topic.kafka_name();
    let policy = topic.annotations().get(DELETION_POLICY_ANNOTATION).map(String::as_str).unwrap_or("delete");
    if policy != "delete" {
        if policy != "retain" {
            tracing::warn!(topic = %name, policy, "unknown deletion policy; keeping the Kafka topic");
        }
        return Ok(Action::await_change());
    }
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), ns);
    let cluster = match clusters.get_opt(&topic.spec.cluster).await? {
        // The cluster is gone or going: its topics go with it, and nothing may block on it.
        None => return Ok(Action::await_change()),
        Some(c) if c.metadata.deletion_timestamp.is_some() => return Ok(Action::await_change()),
        Some(c) => c,
    };
    let mut admin = admin(ctx, &cluster).await?;
    admin.delete_topic(&name).await.map_err(Error::Kafka)?;
    tracing::info!(topic = %name, "deleted Kafka topic with its Topic resource");
    Ok(Action::await_change())
}
