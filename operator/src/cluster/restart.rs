//! Which broker pod may restart now: a pure function of what the operator observed.
//!
//! The StatefulSet uses `OnDelete` updates, so a pod runs its old template until the operator
//! deletes it. Rules, in order:
//! 1. Never act while a pod is terminating or missing: the previous step is still in flight.
//! 2. A stale pod that is already broken (not ready: pending, crash-looping, failing probes) is
//!    replaced first, without waiting for the others: it serves nothing, and waiting on it would
//!    stall the roll forever.
//! 3. Otherwise restart only when every pod is ready: one at a time, each Ready (and caught
//!    up) before the next.
//! 4. Among stale ready pods: controllers before brokers; within a role by ordinal; the active
//!    controller last (restarting it forces an election, do that once).
//! 5. Before each restart, ask the safety check (partitions that would fall below
//!    `min.insync.replicas`, a quorum that would lose its caught-up majority); if it objects,
//!    wait and say why.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::kafka::{PartitionIsr, Quorum};

/// A voter is caught up when its log end offset is within this many records of the quorum's
/// high watermark (followers trail the leader by the records in flight).
pub const CAUGHT_UP_RECORDS: i64 = 100;

/// Why restarting `pod` would leave the metadata quorum without a caught-up majority, or `None`
/// if it would not. `controllers`: the number of voters configured, used while the quorum is
/// unknown; once known, its own voters count (they change at runtime). With one voter its
/// restart is unavoidable (and brief); with more, the others must be known and caught up.
pub fn quorum_unsafe(pod: &PodState, controllers: i32, quorum: Option<&Quorum>) -> Option<String> {
    let voters = quorum.map_or(controllers, |q| q.voters.len() as i32);
    if !pod.controller || voters <= 1 {
        return None;
    }
    let Some(q) = quorum else {
        return Some("the metadata quorum's state is unknown (DescribeQuorum did not answer)".into());
    };
    let majority = q.voters.len() / 2 + 1;
    let others: Vec<i32> = q
        .voters
        .iter()
        .filter(|(id, leo)| *id != pod.ordinal && *leo >= 0 && leo + CAUGHT_UP_RECORDS >= q.high_watermark)
        .map(|(id, _)| *id)
        .collect();
    (others.len() < majority).then(|| {
        format!(
            "without it the quorum would have {} caught-up voter(s) {others:?} of the {majority} a majority of {} needs",
            others.len(),
            q.voters.len()
        )
    })
}

/// Why restarting `pod`'s broker now would hurt replicated partitions, or `None`: the restart
/// would take a partition below its `min.insync.replicas` (producers with acks=all would fail),
/// or a broker is not yet back in the ISR of a partition it replicates (the last restart has not
/// caught up: restarting another now could leave fewer copies than promised). `partitions`:
/// every replicated partition (`None`: the cluster did not answer, so it is not known).
pub fn isr_unsafe(pod: &PodState, partitions: Option<&[PartitionIsr]>) -> Option<String> {
    let Some(parts) = partitions else {
        return Some("the partitions' in-sync replicas are unknown (Metadata did not answer)".into());
    };
    let behind: Vec<String> = parts
        .iter()
        .filter(|p| p.replicas.len() > 1 && p.isr.len() < p.replicas.len())
        .take(3)
        .map(|p| {
            let missing: Vec<i32> = p.replicas.iter().copied().filter(|r| !p.isr.contains(r)).collect();
            format!("{}-{} (not in sync: {missing:?})", p.topic, p.partition)
        })
        .collect();
    if !behind.is_empty() {
        return Some(format!("replicas are catching up: {}", behind.join(", ")));
    }
    let below: Vec<String> = parts
        .iter()
        .filter(|p| p.replicas.len() > 1 && p.isr.contains(&pod.ordinal) && (p.isr.len() as i32 - 1) < p.min_insync)
        .take(3)
        .map(|p| format!("{}-{} (ISR {:?}, min.insync.replicas={})", p.topic, p.partition, p.isr, p.min_insync))
        .collect();
    (!below.is_empty()).then(|| {
        format!(
            "restarting broker {} would take partitions below min.insync.replicas: {}",
            pod.ordinal,
            below.join(", ")
        )
    })
}

/// What restarting `pod`'s broker takes offline whatever the order: partitions with a single
/// replica, on it. The roll goes on (waiting would not help), and says so.
pub fn offline_during(pod: &PodState, partitions: Option<&[PartitionIsr]>) -> Option<String> {
    let alone: Vec<String> = partitions?
        .iter()
        .filter(|p| p.replicas == [pod.ordinal])
        .map(|p| format!("{}-{}", p.topic, p.partition))
        .collect();
    let shown = alone.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = if alone.len() > 5 { format!(" and {} more", alone.len() - 5) } else { String::new() };
    (!alone.is_empty()).then(|| {
        format!(
            "{} partition(s) with a single replica on broker {} are offline until it is back: {shown}{more}",
            alone.len(),
            pod.ordinal
        )
    })
}

/// How many brokers the StatefulSet should run: `want` (the spec), unless that removes brokers
/// that still hold partition replicas or are voters of the metadata quorum (or it cannot be
/// checked): then `current`, and why. `replicas_per_broker`: how many partition replicas each
/// broker id holds; `voters`: the quorum's voters.
pub fn scale_to(
    current: i32,
    want: i32,
    replicas_per_broker: Option<&BTreeMap<i32, usize>>,
    voters: &[i32],
) -> (i32, Option<String>) {
    if want >= current {
        return (want, None);
    }
    let Some(held) = replicas_per_broker else {
        return (current, Some(format!("scaling to {want} waits: the brokers could not be asked what they hold")));
    };
    let holding: Vec<String> = (want..current)
        .filter_map(|id| {
            if voters.contains(&id) {
                return Some(format!("broker {id} is a voter of the metadata quorum (its removal comes first)"));
            }
            held.get(&id).filter(|n| **n > 0).map(|n| format!("broker {id} holds {n} partition replica(s)"))
        })
        .collect();
    if holding.is_empty() {
        return (want, None);
    }
    let hint = if holding.iter().any(|h| h.contains("partition replica")) { "; their replicas move first" } else { "" };
    (current, Some(format!("scaling to {want} waits: {}{hint}", holding.join(", "))))
}

/// One broker pod, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    /// The node id (the pod's ordinal; dedicated controllers' start at 1000).
    pub ordinal: i32,
    pub name: String,
    /// A broker pod (combined nodes too); `false` for a dedicated controller.
    pub broker: bool,
    /// The pod object exists.
    pub exists: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// The Ready condition is true.
    pub ready: bool,
    /// Runs the current pod template (revision and config hash).
    pub up_to_date: bool,
    /// Also a controller (combined roles or a dedicated controller).
    pub controller: bool,
    /// The active controller (quorum leader).
    pub active_controller: bool,
    /// With `spec.rack`: the pod's topology label, the broker's rack (`None` without it).
    pub rack: Option<String>,
    /// Why the pod does not run, as Kubernetes says it ([`super::status::pod_problem`]).
    pub problem: Option<Problem>,
    /// How long the pod has been Ready (`None`: not ready, or not known).
    pub ready_for: Option<Duration>,
}

/// How long a restarted broker is Ready before the next restarts, by default (the operator's
/// `--restart-settle`): longer than cluster DNS
/// keeps its old address (kubeadm's CoreDNS answers with `ttl 30` and caches 30 s; the JVM
/// caches 30 s). A broker restarts in a second or two; restarting the next at once could leave
/// a client holding stale addresses for every broker it knows.
pub const SETTLE: Duration = Duration::from_secs(30);

/// A cause, from Kubernetes, of a broker pod not running: `reason` as Kubernetes names it
/// (`ImagePullBackOff`, `CrashLoopBackOff`, `Unschedulable`, `FailedCreate`, ...), `message`
/// its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every pod runs the current template.
    Done,
    /// Delete this pod now; the StatefulSet recreates it with the current template.
    Restart { pod: String, reason: String },
    /// Nothing may restart yet.
    Wait { reason: String },
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Done => write!(f, "all pods up to date"),
            Decision::Restart { pod, reason } => write!(f, "restart {pod}: {reason}"),
            Decision::Wait { reason } => write!(f, "waiting: {reason}"),
        }
    }
}

/// Decides the next restart. `unsafe_to_restart(pod)` returns why restarting that pod now would
/// lose availability or durability, or `None` if it is safe.
/// A restarted pod must have been Ready for `settle` before the next restarts ([`SETTLE`]).
pub fn plan(pods: &[PodState], settle: Duration, unsafe_to_restart: impl Fn(&PodState) -> Option<String>) -> Decision {
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return Decision::Wait { reason: format!("{} is terminating", p.name) };
    }
    if let Some(p) = pods.iter().find(|p| !p.exists) {
        return Decision::Wait { reason: format!("{} does not exist yet", p.name) };
    }
    let mut stale: Vec<&PodState> = pods.iter().filter(|p| !p.up_to_date).collect();
    if stale.is_empty() {
        return Decision::Done;
    }
    if let Some(p) = stale.iter().filter(|p| !p.ready).min_by_key(|p| p.ordinal) {
        return Decision::Restart { pod: p.name.clone(), reason: "stale and not ready: replaced first".into() };
    }
    if let Some(p) = pods.iter().filter(|p| !p.ready).min_by_key(|p| p.ordinal) {
        return Decision::Wait { reason: format!("{} is not ready", p.name) };
    }
    if let Some(p) = pods.iter().filter(|p| p.ready_for.is_some_and(|d| d < settle)).min_by_key(|p| p.ordinal) {
        let secs = p.ready_for.unwrap_or_default().as_secs();
        return Decision::Wait {
            reason: format!(
                "{} has been ready {secs} s; the next restart waits until {} s, so clients' DNS has its new address",
                p.name,
                settle.as_secs()
            ),
        };
    }
    // Controllers first, the active controller last, then by ordinal.
    stale.sort_by_key(|p| (!p.controller, p.active_controller, p.ordinal));
    let next = stale[0];
    match unsafe_to_restart(next) {
        Some(why) => Decision::Wait { reason: format!("{} cannot restart yet: {why}", next.name) },
        None if next.active_controller => Decision::Restart {
            pod: next.name.clone(),
            reason: "runs an old template or config; the active controller, restarted last".into(),
        },
        None => Decision::Restart { pod: next.name.clone(), reason: "runs an old template or config".into() },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    /// A ready, up-to-date broker pod that is not a controller.
    pub(crate) fn pod(ordinal: i32) -> PodState {
        PodState {
            ordinal,
            name: format!("c-broker-{ordinal}"),
            broker: true,
            exists: true,
            terminating: false,
            ready: true,
            up_to_date: true,
            controller: false,
            active_controller: false,
            rack: None,
            problem: None,
            ready_for: Some(Duration::from_secs(3600)),
        }
    }

    fn safe(_: &PodState) -> Option<String> {
        None
    }

    /// A ready, up-to-date dedicated controller pod (a voter).
    pub(crate) fn controller(id: i32) -> PodState {
        PodState { name: format!("c-controller-{id}"), broker: false, controller: true, ..pod(id) }
    }

    #[test]
    fn dedicated_controllers_restart_before_the_brokers_and_the_active_one_last() {
        let stale = |p: PodState| PodState { up_to_date: false, ..p };
        let mut pods: Vec<PodState> = (0..3).map(|i| stale(pod(i))).collect();
        pods.extend((1000..1003).map(|i| stale(controller(i))));
        pods[3].active_controller = true;
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-controller-1001"));
        pods[4].up_to_date = true;
        pods[5].up_to_date = true;
        assert_eq!(
            plan(&pods, SETTLE, safe),
            Decision::Restart {
                pod: "c-controller-1000".into(),
                reason: "runs an old template or config; the active controller, restarted last".into()
            }
        );
        pods[3].up_to_date = true;
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-broker-0"));
    }

    fn restart(p: &str) -> Decision {
        Decision::Restart { pod: p.into(), reason: "runs an old template or config".into() }
    }

    fn part(p: i32, replicas: &[i32], isr: &[i32], min_insync: i32) -> PartitionIsr {
        PartitionIsr { topic: "t".into(), partition: p, replicas: replicas.to_vec(), isr: isr.to_vec(), min_insync }
    }

    #[test]
    fn the_next_restart_waits_until_the_last_restarted_broker_has_been_ready_a_while() {
        let pods =
            [PodState { up_to_date: false, ..pod(0) }, PodState { ready_for: Some(Duration::from_secs(4)), ..pod(1) }];
        let d = plan(&pods, SETTLE, safe);
        assert!(matches!(&d, Decision::Wait { reason } if reason.starts_with("c-broker-1 has been ready 4 s")), "{d}");
        let pods = [PodState { up_to_date: false, ..pod(0) }, PodState { ready_for: Some(SETTLE), ..pod(1) }];
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-broker-0"));
    }

    #[test]
    fn a_restart_says_which_single_replica_partitions_go_offline() {
        let parts = [part(0, &[1], &[1], 1), part(1, &[0, 1, 2], &[0, 1, 2], 2), part(2, &[1], &[1], 1)];
        let said = offline_during(&pod(1), Some(&parts)).unwrap();
        assert!(
            said.starts_with("2 partition(s) with a single replica on broker 1") && said.ends_with("t-0, t-2"),
            "{said}"
        );
        assert_eq!(offline_during(&pod(0), Some(&parts)), None);
        // A single replica never holds a restart back.
        assert_eq!(isr_unsafe(&pod(1), Some(&parts)), None);
    }

    #[test]
    fn restarts_keep_replicated_partitions_at_min_insync_and_wait_for_catch_up() {
        let healthy = [part(0, &[0, 1, 2], &[0, 1, 2], 2), part(1, &[1, 2, 0], &[0, 1, 2], 2)];
        assert_eq!(isr_unsafe(&pod(0), Some(&healthy)), None);
        // Broker 1 was restarted and is not back in partition 1's ISR yet: nobody restarts.
        let catching_up = [part(0, &[0, 1, 2], &[0, 1, 2], 2), part(1, &[1, 2, 0], &[0, 2], 2)];
        let why = isr_unsafe(&pod(0), Some(&catching_up)).unwrap_or_default();
        assert!(why.contains("t-1") && why.contains("[1]"), "{why}");
        // A partition already at its minimum: its ISR members must stay; others may go.
        let at_min = [part(0, &[0, 1], &[0, 1], 2)];
        let why = isr_unsafe(&pod(1), Some(&at_min)).unwrap_or_default();
        assert!(why.contains("below min.insync.replicas") && why.contains("t-0"), "{why}");
        assert_eq!(isr_unsafe(&pod(2), Some(&at_min)), None);
        assert!(isr_unsafe(&pod(0), None).is_some(), "unknown state waits");
        // In the planner: the roll waits and says why.
        let stale = PodState { up_to_date: false, ..pod(1) };
        let d = plan(&[pod(0), stale, pod(2)], SETTLE, |p| isr_unsafe(p, Some(&at_min)));
        assert!(matches!(&d, Decision::Wait { reason } if reason.contains("min.insync.replicas")), "{d}");
    }

    #[test]
    fn nothing_stale_is_done() {
        assert_eq!(plan(&[pod(0), pod(1), pod(2)], SETTLE, safe), Decision::Done);
    }

    #[test]
    fn one_at_a_time_in_ordinal_order() {
        let pods: Vec<_> = (0..3).map(|i| PodState { up_to_date: false, ..pod(i) }).collect();
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-broker-0"));
    }

    #[test]
    fn waits_while_a_restarted_pod_is_not_ready_again() {
        let mut pods: Vec<_> = (0..3).map(|i| PodState { up_to_date: false, ..pod(i) }).collect();
        pods[0] = PodState { ready: false, up_to_date: true, ..pod(0) };
        assert_eq!(plan(&pods, SETTLE, safe), Decision::Wait { reason: "c-broker-0 is not ready".into() });
        pods[0].ready = true;
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-broker-1"));
    }

    #[test]
    fn waits_for_a_terminating_or_missing_pod() {
        let pods = [PodState { terminating: true, up_to_date: false, ..pod(0) }, pod(1)];
        assert!(matches!(plan(&pods, SETTLE, safe), Decision::Wait { .. }));
        let pods = [PodState { exists: false, ready: false, ..pod(0) }, PodState { up_to_date: false, ..pod(1) }];
        assert!(matches!(plan(&pods, SETTLE, safe), Decision::Wait { .. }));
    }

    #[test]
    fn a_broken_stale_pod_is_replaced_first_and_does_not_block_the_roll() {
        let pods = [
            PodState { up_to_date: false, ..pod(0) },
            PodState { up_to_date: false, ready: false, ..pod(1) },
            PodState { up_to_date: false, ..pod(2) },
        ];
        assert_eq!(
            plan(&pods, SETTLE, |_| Some("never safe".into())),
            Decision::Restart { pod: "c-broker-1".into(), reason: "stale and not ready: replaced first".into() }
        );
    }

    #[test]
    fn a_broken_up_to_date_pod_blocks_restarts_of_healthy_ones() {
        let pods = [PodState { up_to_date: false, ..pod(0) }, PodState { ready: false, ..pod(1) }];
        assert_eq!(plan(&pods, SETTLE, safe), Decision::Wait { reason: "c-broker-1 is not ready".into() });
    }

    #[test]
    fn controllers_first_and_the_active_controller_last() {
        let pods = [
            PodState { up_to_date: false, ..pod(0) },
            PodState { up_to_date: false, controller: true, active_controller: true, ..pod(1) },
            PodState { up_to_date: false, controller: true, ..pod(2) },
            PodState { up_to_date: false, controller: true, ..pod(3) },
        ];
        assert_eq!(plan(&pods, SETTLE, safe), restart("c-broker-2"));
        let after: Vec<_> =
            pods.iter()
                .map(|p| {
                    if p.ordinal == 2 || p.ordinal == 3 {
                        PodState { up_to_date: true, ..p.clone() }
                    } else {
                        p.clone()
                    }
                })
                .collect();
        assert_eq!(
            plan(&after, SETTLE, safe),
            Decision::Restart {
                pod: "c-broker-1".into(),
                reason: "runs an old template or config; the active controller, restarted last".into()
            }
        );
        let after: Vec<_> = after
            .iter()
            .map(|p| if p.ordinal == 1 { PodState { up_to_date: true, ..p.clone() } } else { p.clone() })
            .collect();
        assert_eq!(plan(&after, SETTLE, safe), restart("c-broker-0"));
    }

    #[test]
    fn a_controller_restarts_only_with_a_caught_up_majority_behind() {
        let c = |o| PodState { controller: true, ..pod(o) };
        let q = Quorum { leader: Some(0), high_watermark: 1000, voters: vec![(0, 1000), (1, 990), (2, 10)] };
        // Voter 2 lags: restarting 1 would leave only 0 caught up.
        assert!(quorum_unsafe(&c(1), 3, Some(&q)).unwrap().contains("1 caught-up voter(s) [0]"));
        // Restarting the lagging one leaves 0 and 1.
        assert_eq!(quorum_unsafe(&c(2), 3, Some(&q)), None);
        let caught_up = Quorum { voters: vec![(0, 1000), (1, 990), (2, 1000)], ..q.clone() };
        assert_eq!(quorum_unsafe(&c(1), 3, Some(&caught_up)), None);
        assert!(quorum_unsafe(&c(1), 3, None).unwrap().contains("unknown"));
        // A broker that is not a voter, or the only voter, is not held back by the quorum.
        assert_eq!(quorum_unsafe(&pod(4), 3, None), None);
        assert_eq!(quorum_unsafe(&c(0), 1, None), None);
        // The quorum's own voters count once known: shrunk to one voter, its restart is not held
        // back by the spec still saying 3 (or 3 being reached).
        let one = Quorum { leader: Some(0), high_watermark: 1000, voters: vec![(0, 1000)] };
        assert_eq!(quorum_unsafe(&c(0), 3, Some(&one)), None);
    }

    #[test]
    fn scaling_down_waits_while_leaving_brokers_hold_partitions() {
        let held = BTreeMap::from([(0, 3), (1, 2), (3, 1)]);
        assert_eq!(scale_to(3, 5, Some(&held), &[0]), (5, None));
        let (n, why) = scale_to(4, 3, Some(&held), &[0]);
        assert_eq!(n, 4);
        assert!(why.unwrap().contains("broker 3 holds 1 partition replica(s)"));
        assert_eq!(scale_to(4, 2, Some(&BTreeMap::from([(0, 3), (1, 1)])), &[0, 1]), (2, None));
        // A voter goes only once it is no longer one (the operator removes it first).
        let (n, why) = scale_to(3, 1, Some(&BTreeMap::new()), &[0, 1, 2]);
        assert_eq!(n, 3);
        assert_eq!(
            why.unwrap(),
            "scaling to 1 waits: broker 1 is a voter of the metadata quorum (its removal comes first), broker 2 is a voter of the metadata quorum (its removal comes first)"
        );
        assert_eq!(scale_to(4, 3, None, &[]).0, 4);
    }

    #[test]
    fn an_unsafe_restart_waits_and_says_why() {
        let pods = [PodState { up_to_date: false, ..pod(0) }, pod(1)];
        let d = plan(&pods, SETTLE, |p| {
            (p.ordinal == 0).then(|| "partition t-0 would drop below min.insync.replicas=2".into())
        });
        assert_eq!(
            d,
            Decision::Wait {
                reason: "c-broker-0 cannot restart yet: partition t-0 would drop below min.insync.replicas=2".into()
            }
        );
    }
}
