//! Observed pod state and the Cluster's status: pure functions of the objects read back.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::desired::{self, CONFIG_HASH_ANNOTATION, Names, Settings};
use super::restart::{Decision, PodState, Problem};
use crate::conditions::condition;
use crate::crd::{BrokerStatus, Cluster, ClusterStatus, QuorumStatus};
use crate::kafka::Quorum;

/// How long a pod may wait for a node (or its volume) before that is reported as its problem.
const PENDING_GRACE_SECONDS: i64 = 30;

/// Container waiting reasons that mean the broker cannot run until something changes.
const STUCK: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Why `pod` does not run, as Kubernetes reports it: a container stuck waiting (image pull,
/// crash loop with its last exit, a bad config reference), the scheduler's reason for a pending
/// pod (including unbound claims), or a failed pod (evicted). `None` for a pod that is running
/// or starting normally.
pub fn pod_problem(pod: &Pod) -> Option<Problem> {
    let status = pod.status.as_ref()?;
    for c in status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten()) {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let reason = waiting.reason.clone().unwrap_or_default();
        if !STUCK.contains(&reason.as_str()) {
            continue;
        }
        let mut message = waiting.message.clone().unwrap_or_default();
        if let Some(t) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
            let why = t.reason.as_deref().unwrap_or("exited");
            let last = format!("last run: {why}, exit code {}, {} restart(s)", t.exit_code, c.restart_count);
            message = if message.is_empty() { last } else { format!("{message}; {last}") };
        }
        return Some(Problem { reason, message });
    }
    if status.phase.as_deref() == Some("Failed") {
        let reason = status.reason.clone().unwrap_or_else(|| "Failed".into());
        return Some(Problem { reason, message: status.message.clone().unwrap_or_default() });
    }
    // A pod waits for its volume or a node for a while as a matter of course (provisioning, an
    // autoscaler): a cause only after half a minute.
    let unscheduled = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.last_transition_time.as_ref().is_none_or(|t| {
                jiff::Timestamp::now().duration_since(t.0) >= jiff::SignedDuration::from_secs(PENDING_GRACE_SECONDS)
            })
    })?;
    let message = unscheduled.message.clone().unwrap_or_default();
    // The scheduler names claims it waits for; say so plainly.
    let reason = if message.contains("unbound") && message.contains("PersistentVolumeClaim") {
        "ClaimNotBound".to_string()
    } else {
        unscheduled.reason.clone().unwrap_or_else(|| "Unschedulable".into())
    };
    Some(Problem { reason, message })
}

/// How long `pod` has been Ready, from its condition's transition time.
fn ready_for(pod: &Pod) -> Option<std::time::Duration> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    let since = c.last_transition_time.as_ref()?.0;
    // A kubelet clock ahead of the operator's reads as just now, not as unknown.
    let d = jiff::Timestamp::now().duration_since(since).max(jiff::SignedDuration::ZERO);
    d.try_into().ok()
}

pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod template annotations whose change restarts the brokers: the configuration's hash and
/// the CA keys a key replacement's step runs with.
const RESTART_ANNOTATIONS: [&str; 2] = [CONFIG_HASH_ANNOTATION, super::tls::CA_KEYS_ANNOTATION];

/// One [`PodState`] per expected ordinal of `sts` (the brokers' StatefulSet, or the dedicated
/// controllers'), from the StatefulSet, its pods and the quorum (when the brokers could be
/// asked). `create_failed`: the StatefulSet controller's latest refusal to create a pod (a
/// quota, PodSecurity admission), the problem of every missing pod.
pub fn observe(
    cluster: &Cluster,
    sts: &StatefulSet,
    pods: &[Pod],
    quorum: Option<&Quorum>,
    create_failed: Option<&str>,
) -> Vec<PodState> {
    let names = Names::of(&cluster.name_any());
    let set = sts.metadata.name.clone().unwrap_or_else(|| names.stateful_set.clone());
    let broker = set == names.stateful_set;
    let spec = sts.spec.as_ref();
    let default_replicas = if broker { cluster.spec.replicas } else { cluster.spec.controller_count() };
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(default_replicas).max(0);
    let first = spec.and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start).unwrap_or(0);
    let controller_ids = desired::controller_ids(cluster);
    let single = (controller_ids.len() == 1).then_some(controller_ids.start);
    let leader = quorum.and_then(|q| q.leader).or(single);
    // The voters as the quorum reports them (they change at runtime); the spec's until then.
    let is_voter = |ordinal: i32| match quorum.filter(|q| !q.voters.is_empty()) {
        Some(q) => q.voters.iter().any(|(id, _)| *id == ordinal),
        None => controller_ids.contains(&ordinal),
    };
    let update_revision = sts.status.as_ref().and_then(|s| s.update_revision.clone());
    let template = sts.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).and_then(|m| m.annotations.as_ref());
    // What the operator restarts pods for, compared on the pods themselves: right from the
    // reconcile that changes the template, before the StatefulSet controller has computed the
    // new revision (the revision until then is the old one, which old pods match).
    let restart_values: Vec<Option<&String>> =
        RESTART_ANNOTATIONS.iter().map(|k| template.and_then(|a| a.get(*k))).collect();
    (first..first + replicas)
        .map(|ordinal| {
            let name = format!("{set}-{ordinal}");
            let pod = pods.iter().find(|p| p.name_any() == name);
            let revision = pod.and_then(|p| p.labels().get("controller-revision-hash").cloned());
            let annotations_current = pod.is_some_and(|p| {
                RESTART_ANNOTATIONS.iter().zip(&restart_values).all(|(k, want)| p.annotations().get(*k) == *want)
            });
            // Until the StatefulSet controller has computed its update revision, compare only
            // the annotations.
            let revision_current = update_revision.is_none() || revision == update_revision;
            PodState {
                ordinal,
                name,
                broker,
                exists: pod.is_some(),
                terminating: pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
                ready: pod.is_some_and(pod_ready),
                up_to_date: pod.is_none() || (revision_current && annotations_current),
                controller: is_voter(ordinal),
                active_controller: leader == Some(ordinal),
                rack: cluster
                    .spec
                    .rack
                    .as_ref()
                    .and_then(|r| pod.and_then(|p| p.labels().get(&r.topology_key)).filter(|v| !v.is_empty()).cloned()),
                ready_for: pod.and_then(ready_for),
                problem: match pod {
                    Some(p) => pod_problem(p),
                    None => create_failed.map(|m| Problem { reason: "FailedCreate".into(), message: m.to_string() }),
                },
            }
        })
        .collect()
}

/// The status to write after a reconcile that observed `pods` and decided `decision`.
pub fn status(
    cluster: &Cluster,
    pods: &[PodState],
    decision: &Decision,
    notes: &Notes,
    names: &Names,
    settings: &Settings,
) -> ClusterStatus {
    let config_note = notes.config.as_deref();
    let generation = cluster.metadata.generation.unwrap_or_default();
    let old = cluster.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let brokers: Vec<&PodState> = pods.iter().filter(|p| p.broker).collect();
    let controllers: Vec<&PodState> = pods.iter().filter(|p| !p.broker).collect();
    let replicas = brokers.len() as i32;
    let ready = brokers.iter().filter(|p| p.ready && p.exists).count() as i32;
    let controllers_ready = controllers.iter().filter(|p| p.ready && p.exists).count();
    let current = pods.iter().all(|p| p.up_to_date);
    let all_ready = pods.iter().all(|p| p.ready && p.exists);
    // "2/3 brokers ready", with the dedicated controllers' count after it.
    let counts = match controllers.is_empty() {
        true => format!("{ready}/{replicas} brokers ready"),
        false => format!("{ready}/{replicas} brokers and {controllers_ready}/{} controllers ready", controllers.len()),
    };
    let restarting = matches!(decision, Decision::Restart { .. }) || pods.iter().any(|p| p.terminating);

    let problems: Vec<(&str, &Problem)> =
        pods.iter().filter_map(|p| p.problem.as_ref().map(|x| (p.name.as_str(), x))).collect();
    let (ready_reason, ready_msg) = if let Some((reason, message)) = &notes.storage_refused {
        // The spec cannot be carried out until it changes: not Ready, whatever the pods do.
        (*reason, format!("{counts}; {message}"))
    } else if let Some((_, first)) = problems.first() {
        // What Kubernetes says comes first: it is what has to be fixed.
        let causes: Vec<String> =
            problems.iter().map(|(pod, x)| format!("{pod}: {}: {}", x.reason, x.message)).collect();
        (first.reason.as_str(), format!("{counts}; {}", causes.join("; ")))
    } else if all_ready && current {
        ("Ready", counts)
    } else if restarting || !current {
        ("RollingRestart", format!("{counts}; {decision}"))
    } else {
        ("BrokersNotReady", counts)
    };
    let not_ready: Vec<&str> = pods.iter().filter(|p| !p.ready).map(|p| p.name.as_str()).collect();
    let degraded = !not_ready.is_empty() && !restarting && current;
    let ns = cluster.namespace().unwrap_or_default();
    // Steps that wait on something outside the reconcile come first.
    let waiting = (notes.certificates.as_deref().map(|n| ("ReplacingCaKey", n)))
        .or_else(|| notes.external.as_deref().map(|n| ("WaitingForAddresses", n)))
        .or_else(|| notes.storage.as_deref().map(|n| ("ResizingStorage", n)));
    let is_ready = all_ready && current && notes.storage_refused.is_none();
    let mut conditions = vec![
        condition(&old, "Ready", is_ready, ready_reason, ready_msg, generation),
        match (waiting, config_note, notes.voters.as_deref()) {
            (Some((reason, note)), _, _) => condition(&old, "Reconciling", true, reason, note.to_string(), generation),
            (None, Some(note), _) => {
                condition(&old, "Reconciling", true, "DynamicConfigPending", note.to_string(), generation)
            }
            (None, None, Some(note)) => {
                condition(&old, "Reconciling", true, "QuorumChanging", note.to_string(), generation)
            }
            (None, None, None) => condition(
                &old,
                "Reconciling",
                !(all_ready && current),
                if all_ready && current { "Reconciled" } else { "Progressing" },
                decision.to_string(),
                generation,
            ),
        },
        condition(
            &old,
            "Restarting",
            restarting,
            if restarting { "RollingRestart" } else { "Idle" },
            if restarting { decision.to_string() } else { "no restart in progress".into() },
            generation,
        ),
        condition(
            &old,
            "Degraded",
            degraded,
            if degraded { "BrokersNotReady" } else { "Healthy" },
            if degraded { format!("not ready: {}", not_ready.join(", ")) } else { "every pod is ready".into() },
            generation,
        ),
    ];
    let blocked = notes.scale_down_blocked.as_deref();
    let blocked_reason = match (blocked, notes.scale_down_refused) {
        (None, _) => "NotBlocked",
        (Some(_), true) => "CannotDrain",
        (Some(_), false) => "Draining",
    };
    // Blocked only when it cannot be done; a scale-down waiting for its drain is not blocked.
    conditions.push(condition(
        &old,
        "ScaleDownBlocked",
        blocked.is_some() && notes.scale_down_refused,
        blocked_reason,
        blocked.unwrap_or("no scale-down is waiting").to_string(),
        generation,
    ));
    let rebalancing = notes.rebalance.as_ref().filter(|r| r.phase != "Balanced");
    conditions.push(condition(
        &old,
        "Rebalancing",
        rebalancing.is_some(),
        rebalancing.map_or("Balanced", |r| r.phase.as_str()),
        match rebalancing {
            Some(r) => format!(
                "{}: {} of {} partition move(s) done, {} in flight{}",
                r.phase,
                r.done,
                r.planned,
                r.in_flight,
                r.bytes_left.map(|b| format!(", {b} bytes left")).unwrap_or_default()
            ),
            None => "no partition moves in progress".into(),
        },
        generation,
    ));
    ClusterStatus {
        conditions,
        observed_generation: Some(generation),
        replicas: brokers.iter().filter(|p| p.exists).count() as i32,
        ready_brokers: ready,
        selector: desired::selector_string(&cluster.name_any()),
        bootstrap_servers: Some(
            super::listeners::client_listeners(cluster)
                .iter()
                .map(|l| format!("{}.{ns}.svc.{}:{}", names.bootstrap, settings.cluster_domain, l.port))
                .next()
                .unwrap_or_default(),
        ),
        listeners: notes.listeners.clone(),
        brokers: brokers.iter().map(|p| pod_status(p)).collect(),
        controllers: controllers.iter().map(|p| pod_status(p)).collect(),
        quorum: quorum_status(notes.quorum.as_ref(), cluster.status.as_ref().and_then(|s| s.quorum.as_ref())),
        rebalance: notes.rebalance.clone(),
    }
}

/// `status.quorum`: as the brokers reported it this time, else the last one written, marked
/// stale (one failed DescribeQuorum, as while brokers restart, does not blank it).
fn quorum_status(read: Option<&Quorum>, last: Option<&QuorumStatus>) -> Option<QuorumStatus> {
    match read {
        Some(q) => {
            Some(QuorumStatus { leader: q.leader, voters: q.voters.iter().map(|(id, _)| *id).collect(), stale: false })
        }
        None => last.map(|l| QuorumStatus { stale: true, ..l.clone() }),
    }
}

/// A pod's entry in `status.brokers` or `status.controllers`.
fn pod_status(p: &PodState) -> BrokerStatus {
    BrokerStatus {
        id: p.ordinal,
        pod: p.name.clone(),
        state: if !p.exists {
            "Missing"
        } else if p.terminating {
            "Restarting"
        } else if p.ready {
            "Running"
        } else {
            "NotReady"
        }
        .into(),
        ready: p.ready,
        up_to_date: p.up_to_date,
        rack: p.rack.clone(),
        reason: p.problem.as_ref().map(|x| x.reason.clone()),
        message: p.problem.as_ref().map(|x| x.message.clone()),
    }
}

/// What the reconcile learned besides the pods, for the status.
#[derive(Clone, Debug, Default)]
pub struct Notes {
    /// Dynamic configs not applied yet, and why.
    pub config: Option<String>,
    /// A scale-down held back, and why.
    pub scale_down_blocked: Option<String>,
    /// The metadata quorum, if the brokers answered.
    pub quorum: Option<Quorum>,
    /// A change of the quorum's voters in progress or waiting, and what it is.
    pub voters: Option<String>,
    /// `scale_down_blocked` says the scale-down cannot be done (not only that it waits).
    pub scale_down_refused: bool,
    /// The partition moves of the current or last rebalance.
    pub rebalance: Option<crate::crd::RebalanceStatus>,
    /// A broker that cannot start yet: its external address is not known.
    pub external: Option<String>,
    /// How clients reach each listener.
    pub listeners: Vec<crate::crd::ListenerStatus>,
    /// A CA key replacement step that waits, and for what.
    pub certificates: Option<String>,
    /// Broker volumes growing to `storage.size`: how far.
    pub storage: Option<String>,
    /// Why the volumes cannot have `storage.size` (condition reason, message).
    pub storage_refused: Option<(&'static str, String)>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::ClusterSpec;

    fn sts(revision: &str, annotations: serde_json::Value) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-broker"},
            "spec": {"replicas": 2, "serviceName": "c-brokers", "selector": {},
                     "template": {"metadata": {"annotations": annotations}}},
            "status": {"replicas": 2, "updateRevision": revision},
        }))
        .unwrap()
    }

    fn pod(ordinal: i32, revision: &str, annotations: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("c-broker-{ordinal}"), "annotations": annotations,
                         "labels": {"controller-revision-hash": revision}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_without_the_templates_ca_keys_is_stale_before_the_revision_is_computed() {
        let cluster = Cluster::new("c", ClusterSpec { replicas: 2, ..Default::default() });
        let step2 = serde_json::json!({CONFIG_HASH_ANNOTATION: "h", super::super::tls::CA_KEYS_ANNOTATION: "k2"});
        let pods = [pod(0, "r1", step2.clone()), pod(1, "r1", step2.clone())];
        let up =
            |s: &StatefulSet| observe(&cluster, s, &pods, None, None).iter().map(|p| p.up_to_date).collect::<Vec<_>>();
        assert_eq!(up(&sts("r1", step2)), [true, true]);
        // The last step drops the annotation from the template; the StatefulSet controller has
        // not computed the new revision yet, so the pods still match the one it reports.
        assert_eq!(up(&sts("r1", serde_json::json!({CONFIG_HASH_ANNOTATION: "h"}))), [false, false]);
        // A new config hash, or a new revision alone, makes them stale too.
        let k2 = serde_json::json!({CONFIG_HASH_ANNOTATION: "h2", super::super::tls::CA_KEYS_ANNOTATION: "k2"});
        assert_eq!(up(&sts("r1", k2)), [false, false]);
        let same = serde_json::json!({CONFIG_HASH_ANNOTATION: "h", super::super::tls::CA_KEYS_ANNOTATION: "k2"});
        assert_eq!(up(&sts("r2", same)), [false, false]);
    }

    #[test]
    fn the_quorum_read_last_stays_in_the_status_marked_stale_while_it_cannot_be_read() {
        let read = Quorum { leader: Some(1), high_watermark: 9, voters: vec![(0, 9), (1, 9), (2, 8)] };
        let fresh = quorum_status(Some(&read), None).unwrap();
        assert_eq!(fresh, QuorumStatus { leader: Some(1), voters: vec![0, 1, 2], stale: false });
        let kept = quorum_status(None, Some(&fresh)).unwrap();
        assert_eq!(kept, QuorumStatus { stale: true, ..fresh.clone() });
        assert_eq!(quorum_status(None, None), None, "never read: none");
        let moved = Quorum { leader: Some(2), ..read };
        assert_eq!(quorum_status(Some(&moved), Some(&kept)).unwrap(), QuorumStatus { leader: Some(2), ..fresh });
        // A fresh one is written without the field, as before.
        let json = serde_json::to_value(quorum_status(Some(&moved), None).unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"leader": 2, "voters": [0, 1, 2]}));
    }
}
