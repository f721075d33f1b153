//! The Cluster controller: observe -> decide (pure: [`desired`], [`restart`], [`status`]) ->
//! server-side apply -> status.

pub mod desired;
pub mod external;
pub mod listeners;
pub mod moves;
pub mod placement;
pub mod rebalance;
pub mod restart;
pub mod status;
pub mod storage;
pub mod tls;
pub mod voters;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::Error;
use crate::conditions::condition;
use crate::crd::Cluster;
use crate::k8s::{Context, apply, apply_status};
use crate::kafka::{Admin, ConfigChanges};
use desired::{Desired, Names, Settings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use restart::Decision;

/// `host:port` of a Cluster's bootstrap Service on the listener the operator uses
/// (REPLICATION on a secured Cluster), as the operator (in the cluster) reaches it.
pub fn bootstrap_address(cluster: &Cluster, settings: &Settings) -> String {
    let ns = cluster.namespace().unwrap_or_default();
    let port = listeners::admin_port(cluster);
    format!("{}.{ns}.svc.{}:{port}", Names::of(&cluster.name_any()).bootstrap, settings.cluster_domain)
}

/// An admin client of the Cluster, through its bootstrap Service, secured as the Cluster
/// needs ([`tls::admin_security`]).
pub async fn admin(ctx: &Context, cluster: &Cluster) -> Result<Admin, Error> {
    let security = tls::admin_security(&ctx.client, cluster).await?;
    Ok(Admin::connect(&bootstrap_address(cluster, &ctx.settings), &security).await?)
}

/// Brings the cluster-wide dynamic broker configs to the dynamic part of `spec.config`;
/// returns the keys it changed.
async fn sync_dynamic_configs(cluster: &Cluster, ctx: &Context) -> Result<Vec<String>, Error> {
    let want = desired::dynamic_config(cluster);
    let mut admin = admin(ctx, cluster).await?;
    let have: BTreeMap<String, String> = admin.broker_configs("").await?.into_iter().map(|(k, v, _)| (k, v)).collect();
    let changes = ConfigChanges::between(&want, &have);
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    admin.alter_broker_defaults(&changes.set, &changes.delete).await?;
    Ok(changes.keys())
}

/// Runs the Cluster controller until the stream ends (shutdown).
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let client = ctx.client.clone();
    let api = |c: &Client| match &namespace {
        Some(ns) => Api::<Cluster>::namespaced(c.clone(), ns),
        None => Api::<Cluster>::all(c.clone()),
    };
    let owned = |c: &Client| -> (Api<StatefulSet>, Api<Pod>) {
        match &namespace {
            Some(ns) => (Api::namespaced(c.clone(), ns), Api::namespaced(c.clone(), ns)),
            None => (Api::all(c.clone()), Api::all(c.clone())),
        }
    };
    let (sts, pods) = owned(&client);
    let secrets: Api<Secret> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let selector = watcher::Config::default().labels("app.kubernetes.io/managed-by=oxbow-operator");
    // A secured Cluster's certificate Secrets: a renewal asked for (`oxbow.io/force-renew`) or
    // a Secret deleted is acted on at once.
    let certificates = watcher::Config::default()
        .labels("app.kubernetes.io/managed-by=oxbow-operator,app.kubernetes.io/component=certificates");
    Controller::new(api(&client), watcher::Config::default())
        .owns(sts, selector.clone())
        .watches(pods, selector, |pod: Pod| cluster_of(&pod))
        .watches(secrets, certificates, |s: Secret| cluster_of(&s))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(cluster = %obj.name, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "reconcile failed"),
            }
        })
        .await;
}

/// The Cluster an object it owns belongs to (its `app.kubernetes.io/instance` label).
fn cluster_of<K: Resource>(o: &K) -> Option<ObjectRef<Cluster>> {
    let cluster = o.labels().get("app.kubernetes.io/instance")?.clone();
    Some(ObjectRef::<Cluster>::new(&cluster).within(&o.namespace()?))
}

fn error_policy(cluster: Arc<Cluster>, err: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.failed(&ObjectRef::from_obj(cluster.as_ref()).erase());
    tracing::warn!(cluster = %cluster.name_any(), error = %err, retry_in = ?delay, "reconcile error; retrying");
    Action::requeue(delay)
}

async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(cluster.as_ref()).erase();
    let result = ctx.metrics.timed("cluster", reconcile_cluster(cluster.clone(), ctx.clone())).await;
    match &result {
        Ok(_) => ctx.backoff.succeeded(&key),
        Err(e) => report_failure(&ctx, &cluster, e, ctx.backoff.failures(&key)).await,
    }
    result
}

/// A reconcile that failed says so on the Cluster: `Reconciling=True` with the cause and
/// Kubernetes' (or Kafka's) words, and `Ready=False` too when Kubernetes refused a change (a
/// 4xx: it stays refused until the spec changes) or the reconcile failed twice in a row (a
/// passing hiccup does not mark the Cluster broken). Only the conditions are written, onto the
/// status as it is now (the rest of it is the normal path's), and only when they change; a
/// Warning event goes with each new cause. Best effort: the failure itself is what
/// error_policy retries.
async fn report_failure(ctx: &Context, cluster: &Cluster, err: &Error, failures_before: u32) {
    let (Some(ns), name) = (cluster.namespace(), cluster.name_any()) else { return };
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    let Ok(now) = api.get_status(&name).await else { return };
    let reason = err.reason();
    let message = err.to_string();
    let generation = now.metadata.generation.unwrap_or_default();
    let old = now.status.map(|s| s.conditions).unwrap_or_default();
    let not_ready = err.is_refusal() || failures_before >= 1;
    let mut conditions: Vec<_> =
        old.iter().filter(|c| c.type_ != "Reconciling" && !(not_ready && c.type_ == "Ready")).cloned().collect();
    conditions.push(condition(&old, "Reconciling", true, reason, message.clone(), generation));
    if not_ready {
        conditions.push(condition(&old, "Ready", false, reason, message.clone(), generation));
    }
    let same = |a: &[Condition]| -> std::collections::BTreeSet<String> {
        a.iter().map(|c| format!("{}\n{}\n{}\n{}", c.type_, c.status, c.reason, c.message)).collect()
    };
    if same(&conditions) == same(&old) {
        return;
    }
    let patch = serde_json::json!({ "status": { "conditions": conditions, "observedGeneration": generation } });
    if let Err(e) = api.patch_status(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await
    {
        tracing::debug!(cluster = %name, error = %e, "could not write the failure to the status");
    }
    if !old.iter().any(|c| c.type_ == "Reconciling" && c.reason == reason && c.message == message) {
        ctx.warn(cluster, reason, "Reconcile", message).await;
    }
}

/// The StatefulSet controller's refusal to create one of `sts`'s pods (`FailedCreate`: a quota,
/// PodSecurity admission, a bad volume), in its words, when that is its latest word: a
/// `SuccessfulCreate` since means the cause is gone.
async fn create_failure(client: &Client, ns: &str, sts: &str) -> Option<String> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.kind=StatefulSet,involvedObject.name={sts}"));
    let events = api.list(&lp).await.map_err(|e| tracing::debug!(error = %e, "could not list events")).ok()?;
    let when = |e: &CoreEvent| {
        e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)).unwrap_or_default()
    };
    let latest = events
        .items
        .into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("FailedCreate" | "SuccessfulCreate")))
        .max_by_key(when)?;
    let recent = jiff::Timestamp::now().duration_since(when(&latest)) < jiff::SignedDuration::from_mins(10);
    (recent && latest.reason.as_deref() == Some("FailedCreate")).then(|| latest.message.unwrap_or_default())
}

/// When `sts` lacks one of its pods (its ordinals, from `ordinals.start`), the StatefulSet
/// controller's refusal to create it ([`create_failure`]).
async fn missing_pod_cause(client: &Client, ns: &str, sts: &StatefulSet, pods: &[Pod]) -> Option<String> {
    let name = sts.metadata.name.as_deref()?;
    let spec = sts.spec.as_ref()?;
    let first = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let missing = (first..first + spec.replicas.unwrap_or(0))
        .any(|i| !pods.iter().any(|p| p.name_any() == format!("{name}-{i}")));
    match missing {
        true => create_failure(client, ns, name).await,
        false => None,
    }
}

/// A Warning event for each broker pod whose problem is new since the last status.
async fn warn_new_problems(ctx: &Context, cluster: &Cluster, observed: &[restart::PodState]) {
    let before: Vec<&crate::crd::BrokerStatus> =
        cluster.status.iter().flat_map(|s| s.brokers.iter().chain(&s.controllers)).collect();
    for p in observed {
        let Some(problem) = &p.problem else { continue };
        let known = before.iter().any(|b| b.pod == p.name && b.reason.as_deref() == Some(problem.reason.as_str()));
        if !known {
            let note = format!("{}: {}", p.name, problem.message);
            ctx.warn(cluster, &problem.reason, "Observe", note).await;
        }
    }
}

async fn reconcile_cluster(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cluster.namespace().ok_or(Error::MissingNamespace)?;
    let name = cluster.name_any();
    let client = &ctx.client;
    if cluster.meta().deletion_timestamp.is_some() {
        // Owner references delete everything the Cluster owns.
        return Ok(Action::await_change());
    }

    // What the brokers say (best effort: a cluster that is starting does not answer yet).
    let names = Names::of(&name);
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let existing = sts_api.get_opt(&names.stateful_set).await?;
    let current = existing.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.replicas);
    // External listeners' Services, and the addresses Kubernetes gave them: the broker
    // certificate names them, the brokers advertise them.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pods = pods_api.list(&ListParams::default().labels(&desired::selector_string(&name))).await?.items;
    // Dedicated controllers: their StatefulSet and pods.
    let dedicated = cluster.spec.dedicated_controllers();
    let (existing_controllers, controller_pods) = match dedicated {
        true => (
            sts_api.get_opt(&names.controller_set).await?,
            pods_api.list(&ListParams::default().labels(&desired::controller_selector_string(&name))).await?.items,
        ),
        false => (None, Vec::new()),
    };
    let current_controllers = existing_controllers.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.replicas);
    let node_ips = pods.iter().filter_map(|p| p.status.as_ref()?.host_ip.clone()).collect();
    let service_brokers = cluster.spec.replicas.max(current.unwrap_or(0));
    let mut external_services = Vec::new();
    for s in external::services(&cluster, service_brokers) {
        external_services.push(apply::<Service>(client, &ns, &s).await?);
    }
    let addresses = external::addresses(&cluster, &ctx.settings, &external_services, service_brokers, &node_ips);
    // A secured Cluster's certificates first: brokers cannot start without them.
    let (mut ca_keys, mut certificates_waiting) = (None, None);
    if cluster.spec.secured() {
        // Every broker and dedicated controller restarts onto a new CA key.
        let nodes = current.unwrap_or(cluster.spec.replicas)
            + current_controllers.unwrap_or(if dedicated { cluster.spec.controller_count() } else { 0 });
        let all_pods: Vec<Pod> = pods.iter().chain(&controller_pods).cloned().collect();
        let outcome = tls::reconcile(client, &cluster, &ctx.settings, &addresses.hosts, &all_pods, nodes).await?;
        for (reason, note) in outcome.events {
            tracing::info!(cluster = %name, reason, note, "certificates");
            ctx.event(cluster.as_ref(), reason, "Certificates", note).await;
        }
        ca_keys = outcome.generation;
        certificates_waiting = outcome.waiting;
    }
    let mut admin = admin(&ctx, &cluster).await.ok();
    let quorum = match admin.as_mut() {
        Some(a) => a.describe_quorum().await.ok(),
        None => None,
    };
    let mut notes = status::Notes {
        quorum: quorum.clone(),
        listeners: addresses.statuses.clone(),
        certificates: certificates_waiting,
        ..Default::default()
    };

    // Decide and apply the owned objects: a running cluster keeps the initial voters it was
    // started with. A scale-down waits while the brokers that would go hold partitions or are
    // voters.
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let started = cm_api.get_opt(&names.config_map).await?.as_ref().map(desired::Started::of);
    let Desired { mut config_map, headless, bootstrap, mut stateful_set, pdb, controllers: mut controller_objects } =
        desired::desired(&cluster, &ctx.settings, started.as_ref());
    if external::listeners(&cluster).next().is_some()
        && let Some(data) = config_map.data.as_mut()
    {
        data.insert(external::ADDRESSES_KEY.into(), addresses.file.clone());
    }
    if let Some(current) = current.filter(|c| *c > cluster.spec.replicas) {
        let held = match admin.as_mut() {
            Some(a) => a.replicas_per_broker().await.ok(),
            None => None,
        };
        let voter_ids: Vec<i32> = quorum.iter().flat_map(|q| q.voters.iter().map(|(id, _)| *id)).collect();
        let (replicas, blocked) = restart::scale_to(current, cluster.spec.replicas, held.as_ref(), &voter_ids);
        if let Some(spec) = stateful_set.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        if let Some(why) = &blocked {
            tracing::info!(cluster = %name, why, "scale-down held back");
        }
        notes.scale_down_blocked = blocked;
    }
    // The CA keys the brokers run with: a key replacement's steps restart them (the quorum
    // reads its certificates at startup); renewals keep the keys.
    if let Some(keys) = ca_keys {
        let controller_set = controller_objects.as_mut().map(|c| &mut c.stateful_set);
        for spec in [Some(&mut stateful_set), controller_set].into_iter().flatten().filter_map(|s| s.spec.as_mut()) {
            let meta = spec.template.metadata.get_or_insert_with(Default::default);
            meta.annotations.get_or_insert_with(Default::default).insert(tls::CA_KEYS_ANNOTATION.into(), keys.clone());
        }
    }
    // Dedicated controllers: a new one's pod starts before it becomes a voter; a departing
    // one's pod stays until it is no longer a voter (removals go from the highest id).
    if let Some(spec) = controller_objects.as_mut().and_then(|c| c.stateful_set.spec.as_mut()) {
        let want = cluster.spec.controller_count();
        let keep = match &quorum {
            Some(q) => q.voters.iter().map(|(id, _)| id - crate::crd::FIRST_CONTROLLER_ID + 1).max().unwrap_or(0),
            None => current_controllers.unwrap_or(want),
        };
        spec.replicas = Some(want.max(keep));
    }
    // A new broker starts once its external addresses are known.
    if let Some(spec) = stateful_set.spec.as_mut() {
        let want = spec.replicas.unwrap_or(cluster.spec.replicas);
        spec.replicas = Some(external::replicas_cap(&addresses, want, current));
    }
    notes.external = addresses.waiting.first().map(|(b, what)| format!("broker {b} waits for {what}"));
    // The claim template keeps its size: a larger storage.size resizes the claims below.
    if let Some(existing) = &existing {
        storage::keep_template_size(&mut stateful_set, existing);
    }
    apply::<ConfigMap>(client, &ns, &config_map).await?;
    apply::<Service>(client, &ns, &headless).await?;
    apply::<Service>(client, &ns, &bootstrap).await?;
    let sts = apply::<StatefulSet>(client, &ns, &stateful_set).await?;
    apply::<PodDisruptionBudget>(client, &ns, &pdb).await?;
    let mut controller_sts = None;
    if let Some(mut c) = controller_objects {
        if let Some(existing) = &existing_controllers {
            storage::keep_template_size(&mut c.stateful_set, existing);
        }
        apply::<Service>(client, &ns, &c.headless).await?;
        controller_sts = Some(apply::<StatefulSet>(client, &ns, &c.stateful_set).await?);
        apply::<PodDisruptionBudget>(client, &ns, &c.pdb).await?;
    }

    external::delete_departed(client, &cluster, &ns, service_brokers).await?;
    if !cluster.spec.storage.ephemeral {
        let brokers = cluster.spec.replicas.max(current.unwrap_or(0));
        let selector = desired::selector_string(&name);
        let size = &cluster.spec.storage.size;
        let outcome = storage::resize(client, &ns, &names.stateful_set, &selector, brokers, size).await?;
        for claim in &outcome.grown {
            let note = format!("resizing claim {claim} to {}", cluster.spec.storage.size);
            ctx.event(cluster.as_ref(), "ResizingStorage", "Resize", note).await;
        }
        if let Some((reason, message)) = &outcome.refused {
            let old = cluster.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
            if !old.iter().any(|c| c.type_ == "Ready" && c.reason == *reason && c.message.contains(message.as_str())) {
                ctx.warn(cluster.as_ref(), reason, "Resize", message.clone()).await;
            }
        }
        notes.storage = outcome.progress;
        notes.storage_refused = outcome.refused;
    }

    // Observe the pods and decide whether one restarts. A pod the StatefulSet should have but
    // does not: its controller's refusal to create it says why.
    let create_failed = missing_pod_cause(client, &ns, &sts, &pods).await;
    let mut observed = status::observe(&cluster, &sts, &pods, quorum.as_ref(), create_failed.as_deref());
    if let Some(csts) = &controller_sts {
        let create_failed = missing_pod_cause(client, &ns, csts, &controller_pods).await;
        observed.extend(status::observe(&cluster, csts, &controller_pods, quorum.as_ref(), create_failed.as_deref()));
    }
    warn_new_problems(&ctx, &cluster, &observed).await;
    let controllers = cluster.spec.controller_count();
    // The replicated partitions, asked only while a restart is pending.
    let partitions = match admin.as_mut() {
        Some(a) if observed.iter().any(|p| !p.up_to_date) => a.partition_isrs().await.ok(),
        _ => None,
    };
    let mut decision = restart::plan(&observed, ctx.settings.waits.restart_settle, |p| {
        restart::quorum_unsafe(p, controllers, quorum.as_ref())
            .or_else(|| restart::isr_unsafe(p, partitions.as_deref()))
    });
    if let Decision::Restart { pod, reason } = &mut decision
        && let Some(p) = observed.iter().find(|p| &p.name == pod)
        && let Some(offline) = restart::offline_during(p, partitions.as_deref())
    {
        reason.push_str("; ");
        reason.push_str(&offline);
    }
    if let Decision::Restart { pod, reason } = &decision {
        tracing::info!(cluster = %name, pod, reason, "restarting pod");
        pods_api.delete(pod, &DeleteParams::default()).await?;
        ctx.event(cluster.as_ref(), "RestartingBroker", "Restart", format!("deleting {pod}: {reason}")).await;
    }

    // The quorum's voters change one at a time, once no restart is pending.
    let voter_plan = match decision {
        Decision::Done => voters::plan(desired::controller_ids(&cluster), quorum.as_ref(), &observed),
        _ => voters::VoterPlan::Settled,
    };
    if voter_plan != voters::VoterPlan::Settled {
        notes.voters = Some(voter_plan.to_string());
    }
    // A plan other than Settled needs the quorum, so the brokers answered: `admin` is there.
    let cluster_id = desired::cluster_id(&cluster);
    let change = match (&voter_plan, admin.as_mut()) {
        (voters::VoterPlan::Add(id), Some(a)) => {
            let host = desired::voter_host(&cluster, &ctx.settings, *id);
            let r = a.add_raft_voter(&cluster_id, *id, &host, desired::CONTROLLER_PORT as u16).await;
            Some((*id, "VoterAdded", "added to", r))
        }
        (voters::VoterPlan::Remove(id), Some(a)) => {
            Some((*id, "VoterRemoved", "removed from", a.remove_raft_voter(&cluster_id, *id).await))
        }
        _ => None,
    };
    if let Some((id, reason, verb, result)) = change {
        tracing::info!(cluster = %name, plan = %voter_plan, ok = result.is_ok(), "changed the metadata quorum");
        match result {
            Ok(()) => {
                let note = format!("node {id} {verb} the metadata quorum's voters");
                ctx.event(cluster.as_ref(), reason, "ChangeQuorum", note).await;
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "quorum change failed; retrying");
                notes.voters = Some(format!("{voter_plan} failed, retrying: {e}"));
            }
        }
    }

    // Partition moves: spread onto new brokers, drain departing ones, then elect preferred
    // leaders; once no restart is pending, every pod is ready and the brokers answer.
    let all_ready = observed.iter().all(|p| p.exists && p.ready);
    let current_replicas = current.unwrap_or(cluster.spec.replicas);
    let mut moving = false;
    if decision == Decision::Done
        && all_ready
        && let Some(a) = admin.as_mut()
    {
        match moves::step(&cluster, &ctx.settings, a, &observed, current_replicas, cluster.spec.replicas).await {
            Ok(outcome) => {
                moving = outcome.active;
                notes.rebalance = outcome.status;
                if let Some(why) = outcome.infeasible {
                    notes.scale_down_blocked = Some(why);
                    notes.scale_down_refused = true;
                }
                for (reason, note) in outcome.events {
                    tracing::info!(cluster = %name, reason, note, "rebalance");
                    ctx.event(cluster.as_ref(), reason, "Rebalance", note).await;
                }
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "rebalance step failed; retrying");
                notes.rebalance = cluster.status.as_ref().and_then(|s| s.rebalance.clone());
                moving = true;
            }
        }
    } else {
        notes.rebalance = cluster.status.as_ref().and_then(|s| s.rebalance.clone());
    }
    // Brokers a finished scale-down removed leave the metadata (and their claims go, per policy).
    if current_replicas <= cluster.spec.replicas
        && let Some(a) = admin.as_mut()
    {
        let pod_names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
        match moves::forget_departed(client, &cluster, &ns, a, &pod_names, cluster.spec.replicas).await {
            Ok(done) => {
                for note in done {
                    ctx.event(cluster.as_ref(), "BrokerRemoved", "ScaleDown", note).await;
                }
            }
            Err(e) => tracing::warn!(cluster = %name, error = %e, "could not forget departed brokers; retrying"),
        }
    }

    // Dynamic configs go to running brokers, once no restart is pending.
    if decision == Decision::Done {
        match sync_dynamic_configs(&cluster, &ctx).await {
            Ok(changed) if !changed.is_empty() => {
                tracing::info!(cluster = %name, keys = ?changed, "applied dynamic broker configs");
                let note = format!("applied {} to the running brokers, no restart", changed.join(", "));
                ctx.event(cluster.as_ref(), "ConfigChangedDynamically", "Configure", note).await;
            }
            Ok(_) => {}
            Err(e) => notes.config = Some(format!("dynamic broker configs not applied yet: {e}")),
        }
    }

    let new_status = status::status(&cluster, &observed, &decision, &notes, &names, &ctx.settings);
    apply_status::<Cluster>(client, &ns, &name, &new_status).await?;

    Ok(match decision {
        Decision::Done if moving => Action::requeue(Duration::from_secs(5)),
        // A refused storage size waits for the spec to change (a change wakes the controller).
        Decision::Done
            if notes.storage_refused.is_some()
                && notes.config.is_none()
                && notes.scale_down_blocked.is_none()
                && notes.voters.is_none() =>
        {
            Action::requeue(Duration::from_secs(60))
        }
        Decision::Done
            if notes.config.is_none()
                && notes.scale_down_blocked.is_none()
                && notes.voters.is_none()
                && notes.external.is_none()
                && notes.certificates.is_none()
                && notes.storage.is_none()
                && notes.storage_refused.is_none() =>
        {
            Action::requeue(Duration::from_secs(60))
        }
        Decision::Done => Action::requeue(Duration::from_secs(10)),
        _ => Action::requeue(Duration::from_secs(3)),
    })
}
