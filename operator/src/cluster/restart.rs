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

use std::fmt;

/// One broker pod, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    pub ordinal: i32,
    pub name: String,
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
pub fn plan(pods: &[PodState], unsafe_to_restart: impl Fn(&PodState) -> Option<String>) -> Decision {
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
    // Controllers first, the active controller last, then by ordinal.
    stale.sort_by_key(|p| (!p.controller, p.active_controller, p.ordinal));
    let next = stale[0];
    match unsafe_to_restart(next) {
        Some(why) => Decision::Wait { reason: format!("{} cannot restart yet: {why}", next.name) },
        None => Decision::Restart { pod: next.name.clone(), reason: "runs an old template or config".into() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ordinal: i32) -> PodState {
        PodState {
            ordinal,
            name: format!("c-broker-{ordinal}"),
            exists: true,
            terminating: false,
            ready: true,
            up_to_date: true,
            controller: false,
            active_controller: false,
        }
    }

    fn safe(_: &PodState) -> Option<String> {
        None
    }

    fn restart(p: &str) -> Decision {
        Decision::Restart { pod: p.into(), reason: "runs an old template or config".into() }
    }

    #[test]
    fn nothing_stale_is_done() {
        assert_eq!(plan(&[pod(0), pod(1), pod(2)], safe), Decision::Done);
    }

    #[test]
    fn one_at_a_time_in_ordinal_order() {
        let pods: Vec<_> = (0..3).map(|i| PodState { up_to_date: false, ..pod(i) }).collect();
        assert_eq!(plan(&pods, safe), restart("c-broker-0"));
    }

    #[test]
    fn waits_while_a_restarted_pod_is_not_ready_again() {
        let mut pods: Vec<_> = (0..3).map(|i| PodState { up_to_date: false, ..pod(i) }).collect();
        pods[0] = PodState { ready: false, up_to_date: true, ..pod(0) };
        assert_eq!(plan(&pods, safe), Decision::Wait { reason: "c-broker-0 is not ready".into() });
        pods[0].ready = true;
        assert_eq!(plan(&pods, safe), restart("c-broker-1"));
    }

    #[test]
    fn waits_for_a_terminating_or_missing_pod() {
        let pods = [PodState { terminating: true, up_to_date: false, ..pod(0) }, pod(1)];
        assert!(matches!(plan(&pods, safe), Decision::Wait { .. }));
        let pods = [PodState { exists: false, ready: false, ..pod(0) }, PodState { up_to_date: false, ..pod(1) }];
        assert!(matches!(plan(&pods, safe), Decision::Wait { .. }));
    }

    #[test]
    fn a_broken_stale_pod_is_replaced_first_and_does_not_block_the_roll() {
        let pods = [
            PodState { up_to_date: false, ..pod(0) },
            PodState { up_to_date: false, ready: false, ..pod(1) },
            PodState { up_to_date: false, ..pod(2) },
        ];
        assert_eq!(
            plan(&pods, |_| Some("never safe".into())),
            Decision::Restart { pod: "c-broker-1".into(), reason: "stale and not ready: replaced first".into() }
        );
    }

    #[test]
    fn a_broken_up_to_date_pod_blocks_restarts_of_healthy_ones() {
        let pods = [PodState { up_to_date: false, ..pod(0) }, PodState { ready: false, ..pod(1) }];
        assert_eq!(plan(&pods, safe), Decision::Wait { reason: "c-broker-1 is not ready".into() });
    }

    #[test]
    fn controllers_first_and_the_active_controller_last() {
        let pods = [
            PodState { up_to_date: false, ..pod(0) },
            PodState { up_to_date: false, controller: true, active_controller: true, ..pod(1) },
            PodState { up_to_date: false, controller: true, ..pod(2) },
            PodState { up_to_date: false, controller: true, ..pod(3) },
        ];
        assert_eq!(plan(&pods, safe), restart("c-broker-2"));
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
        assert_eq!(plan(&after, safe), restart("c-broker-1"));
        let after: Vec<_> = after
            .iter()
            .map(|p| if p.ordinal == 1 { PodState { up_to_date: true, ..p.clone() } } else { p.clone() })
            .collect();
        assert_eq!(plan(&after, safe), restart("c-broker-0"));
    }

    #[test]
    fn an_unsafe_restart_waits_and_says_why() {
        let pods = [PodState { up_to_date: false, ..pod(0) }, pod(1)];
        let d =
            plan(&pods, |p| (p.ordinal == 0).then(|| "partition t-0 would drop below min.insync.replicas=2".into()));
        assert_eq!(
            d,
            Decision::Wait {
                reason: "c-broker-0 cannot restart yet: partition t-0 would drop below min.insync.replicas=2".into()
            }
        );
    }
}
