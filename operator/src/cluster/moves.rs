//! Carries out [`rebalance::next`]: observes where partitions are and what is moving, starts
//! moves (with throttles), clears the throttles and elects preferred leaders when the moves are
//! done, and after a scale-down unregisters the departed brokers and (per
//! `storage.deleteClaim`) deletes their claims. Every step reads the cluster afresh, so a
//! restarted operator resumes from the cluster's metadata.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};

use super::desired::{self, Names, Settings};
use super::placement::Broker;
use super::rebalance::{self, Next};
use super::restart::PodState;
use crate::Error;
use crate::crd::{Cluster, RebalanceStatus};
use crate::kafka::{Admin, KafkaError, PartitionInfo};

/// Throttle configs a rebalance sets on each broker (and clears when it ends).
const RATE_KEYS: [&str; 2] = ["leader.replication.throttled.rate", "follower.replication.throttled.rate"];
const LIST_KEYS: [&str; 2] = ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"];

/// What a rebalance step did, for the status and the next requeue.
#[derive(Debug, Default)]
pub struct Outcome {
    pub status: Option<RebalanceStatus>,
    /// The scale-down cannot be done, and why (condition ScaleDownBlocked).
    pub infeasible: Option<String>,
    /// Moves are in flight or waiting.
    pub active: bool,
    /// Events to record: (reason, note).
    pub events: Vec<(&'static str, String)>,
}

/// A client of broker `id` itself (per-broker configs and log dir sizes are its own).
async fn broker_admin(admin: &Admin, cluster: &Cluster, settings: &Settings, id: i32) -> Result<Admin, KafkaError> {
    let port = super::listeners::admin_port(cluster);
    admin.sibling(&format!("{}:{port}", desired::broker_host(cluster, settings, id))).await
}

/// Every topic's `min.insync.replicas`, for the drain's feasibility check.
async fn min_insync(admin: &mut Admin) -> Result<BTreeMap<String, i32>, KafkaError> {
    let replicated = admin.partition_isrs().await?.into_iter().filter(|p| p.replicas.len() > 1);
    Ok(replicated.map(|p| (p.topic, p.min_insync)).collect())
}

/// One rebalance step. `brokers`: ids 0..current of the StatefulSet; `want`: the spec's count.
#[allow(clippy::too_many_arguments)]
pub async fn step(
    cluster: &Cluster,
    settings: &Settings,
    admin: &mut Admin,
    pods: &[PodState],
    current: i32,
    want: i32,
) -> Result<Outcome, Error> {
    let spec = &cluster.spec.rebalance;
    let draining = want < current;
    let previous = cluster.status.as_ref().and_then(|s| s.rebalance.clone());
    let registered = admin.brokers().await?;
    let keep: Vec<Broker> = registered
        .iter()
        .filter(|b| b.id < want.min(current))
        .map(|b| Broker {
            id: b.id,
            rack: pods.iter().find(|p| p.ordinal == b.id).and_then(|p| p.rack.clone()).or(b.rack.clone()),
        })
        .collect();
    // Moves first: one that completes before the partitions are read is then seen done there
    // (the other order could take a completed move's replicas for its current ones).
    let moving = admin.reassignments().await?;
    let partitions = admin.partitions().await?;
    let mut out = Outcome::default();
    if !draining && !spec.auto {
        // Nothing of ours to do but finish what an earlier rebalance left.
        if moving.is_empty() && previous.as_ref().is_some_and(|p| !p.throttled_topics.is_empty()) {
            finish(cluster, settings, admin, current, &partitions, previous.as_ref(), &mut out).await;
        }
        return Ok(out);
    }
    let min = if draining { min_insync(admin).await? } else { BTreeMap::new() };
    let obs = rebalance::Observed { keep, partitions: &partitions, moving: &moving, min_insync: &min };
    let next = rebalance::next(&obs, usize::try_from(spec.max_concurrent_moves).unwrap_or(1));
    let phase = if draining { "Draining" } else { "Spreading" };
    match next {
        Next::Infeasible(why) => {
            out.infeasible = Some(format!("scaling to {want} brokers is refused: {why}"));
            out.status = previous;
        }
        Next::Balanced => finish(cluster, settings, admin, current, &partitions, previous.as_ref(), &mut out).await,
        Next::Moving { in_flight, waiting } => {
            out.active = true;
            out.status = Some(progress(phase, previous.as_ref(), in_flight, waiting));
        }
        Next::Move { start, in_flight, waiting } => {
            out.active = true;
            let mut throttled = previous.as_ref().map(|p| p.throttled_topics.clone()).unwrap_or_default();
            if let Some(rate) = spec.throttle_bytes_per_second {
                let set: BTreeMap<String, String> =
                    RATE_KEYS.iter().map(|k| (k.to_string(), rate.to_string())).collect();
                for id in 0..current {
                    let mut b = broker_admin(admin, cluster, settings, id).await?;
                    b.alter_own_broker_configs(id, &set, &[]).await?;
                }
                for (topic, (leaders, followers)) in rebalance::throttled_replicas(&partitions, &moving, &start) {
                    let lists =
                        BTreeMap::from([(LIST_KEYS[0].to_string(), leaders), (LIST_KEYS[1].to_string(), followers)]);
                    admin.alter_topic_configs(&topic, &lists, &[]).await?;
                    if !throttled.contains(&topic) {
                        throttled.push(topic);
                    }
                }
            }
            let moves: Vec<(String, i32, Option<Vec<i32>>)> =
                start.iter().map(|m| (m.topic.clone(), m.partition, Some(m.to.clone()))).collect();
            admin.reassign(&moves).await?;
            let copying = start.iter().filter(|m| m.copies_data()).count();
            let described: Vec<String> = start
                .iter()
                .filter(|m| m.copies_data())
                .take(5)
                .map(|m| format!("{}-{} {:?} -> {:?}", m.topic, m.partition, m.from, m.to))
                .collect();
            if copying > 0 {
                out.events.push((
                    "PartitionsMoving",
                    format!("{phase}: started {copying} move(s), {waiting} waiting: {}", described.join(", ")),
                ));
            }
            let mut st = progress(phase, previous.as_ref(), in_flight + copying, waiting);
            st.throttled_topics = throttled;
            out.status = Some(st);
        }
    }
    if out.active {
        // Bytes left, from every broker's log dirs (best effort: a broker that does not answer
        // leaves it unknown).
        let mut sizes = BTreeMap::new();
        let mut known = true;
        for id in 0..current {
            match broker_admin(admin, cluster, settings, id).await {
                Ok(mut b) => match b.log_sizes().await {
                    Ok(s) => sizes.extend(s.into_iter().map(|((t, p), n)| ((t, p, id), n))),
                    Err(_) => known = false,
                },
                Err(_) => known = false,
            }
        }
        let moving = admin.reassignments().await?;
        let all =
            rebalance::Observed { keep: obs.keep.clone(), partitions: &partitions, moving: &moving, min_insync: &min };
        let waiting = match rebalance::next(&all, usize::MAX) {
            Next::Move { start, .. } => start,
            _ => Vec::new(),
        };
        if let Some(st) = out.status.as_mut() {
            st.bytes_left = known.then(|| rebalance::bytes_left(&partitions, &moving, &waiting, &sizes));
        }
    }
    Ok(out)
}

/// The status of a rebalance that has `in_flight` moves and `waiting` more: the plan's total is
/// kept from the previous status while the same rebalance goes on. (Bytes left are filled in by
/// the caller.)
fn progress(phase: &str, previous: Option<&RebalanceStatus>, in_flight: usize, waiting: usize) -> RebalanceStatus {
    let ongoing = previous.filter(|p| p.phase == phase);
    let left = (in_flight + waiting) as i32;
    let planned = ongoing.map_or(left, |p| p.planned.max(p.done + left)).max(left);
    let done = planned - left;
    RebalanceStatus {
        phase: phase.into(),
        planned,
        in_flight: in_flight as i32,
        done,
        bytes_left: None,
        progress: format!("{phase} {done}/{planned}"),
        throttled_topics: ongoing.or(previous).map(|p| p.throttled_topics.clone()).unwrap_or_default(),
    }
}

/// Nothing moves any more: the throttles go (as `kafka-reassign-partitions --verify` clears
/// them) and leadership returns to the preferred replicas.
async fn finish(
    cluster: &Cluster,
    settings: &Settings,
    admin: &mut Admin,
    current: i32,
    partitions: &[PartitionInfo],
    previous: Option<&RebalanceStatus>,
    out: &mut Outcome,
) {
    let mut status = previous.cloned().unwrap_or_default();
    let mut cleared = true;
    if !status.throttled_topics.is_empty() || previous.is_some_and(|p| p.phase != "Balanced") {
        let delete: Vec<String> = RATE_KEYS.iter().map(|k| k.to_string()).collect();
        for id in 0..current {
            let r = match broker_admin(admin, cluster, settings, id).await {
                Ok(mut b) => b.alter_own_broker_configs(id, &BTreeMap::new(), &delete).await,
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                tracing::warn!(broker = id, error = %e, "could not clear the replication throttle; retrying");
                cleared = false;
            }
        }
        let lists: Vec<String> = LIST_KEYS.iter().map(|k| k.to_string()).collect();
        for topic in &status.throttled_topics {
            if let Err(e) = admin.alter_topic_configs(topic, &BTreeMap::new(), &lists).await {
                tracing::warn!(topic, error = %e, "could not clear the throttled replica lists; retrying");
                cleared = false;
            }
        }
        if cleared && previous.is_some_and(|p| p.phase != "Balanced") {
            out.events.push(("Rebalanced", format!("{} partition move(s) done; throttles cleared", status.planned)));
        }
    }
    let off = rebalance::off_preferred(partitions);
    if !off.is_empty() {
        match admin.elect_preferred(&off).await {
            Ok(()) => out.events.push((
                "PreferredLeadersElected",
                format!("leadership of {} partition(s) returned to their preferred replica", off.len()),
            )),
            Err(e) => tracing::warn!(error = %e, "preferred leader election failed; retrying"),
        }
    }
    if cleared {
        status.throttled_topics.clear();
    }
    if previous.is_some() {
        status.phase = "Balanced".into();
        status.in_flight = 0;
        status.done = status.planned;
        status.bytes_left = Some(0);
        status.progress = format!("Balanced {}/{}", status.planned, status.planned);
        out.status = Some(status);
    }
    out.active = !cleared;
}

/// After a scale-down: brokers with ids at or above `want` whose pods are gone leave the
/// metadata (UnregisterBroker), and with `storage.deleteClaim` their claims are deleted.
pub async fn forget_departed(
    client: &Client,
    cluster: &Cluster,
    ns: &str,
    admin: &mut Admin,
    pods: &[String],
    want: i32,
) -> Result<Vec<String>, Error> {
    let mut notes = Vec::new();
    let names = Names::of(&cluster.name_any());
    let pod_exists = |id: i32| pods.iter().any(|p| *p == format!("{}-{id}", names.stateful_set));
    for b in admin.brokers().await? {
        if b.id >= want && !pod_exists(b.id) {
            admin.unregister_broker(b.id).await?;
            notes.push(format!("broker {} unregistered", b.id));
        }
    }
    if cluster.spec.storage.delete_claim && !cluster.spec.storage.ephemeral {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        let prefix = format!("data-{}-", names.stateful_set);
        for pvc in api.list(&Default::default()).await?.items {
            let name = pvc.name_any();
            let Some(id) = name.strip_prefix(&prefix).and_then(|i| i.parse::<i32>().ok()) else { continue };
            if id >= want && !pod_exists(id) && pvc.metadata.deletion_timestamp.is_none() {
                api.delete(&name, &DeleteParams::default()).await?;
                notes.push(format!("claim {name} deleted (storage.deleteClaim)"));
            }
        }
    }
    Ok(notes)
}
