//! Changing the metadata quorum's voters (pure): the voters should be brokers
//! 0..`controllers.replicas`-1 (combined mode), or dedicated controllers 1000 up. The operator
//! gets there one KIP-853 change at a time (AddRaftVoter, RemoveRaftVoter, through any broker),
//! so no pod restarts:
//! 1. Only while every broker pod exists, is ready and up to date (no roll, no scaling in
//!    flight) and the quorum has an active controller.
//! 2. Additions before removals (the quorum never has fewer voters than both ends need), the
//!    lowest missing id first. The broker adds a voter as a learner and promotes it only once it
//!    has caught up.
//! 3. Removals from the highest id, the active controller last (it resigns and the others elect
//!    a new one), and only while the voters that stay have a caught-up majority among them.

use std::collections::BTreeSet;
use std::fmt;

use super::restart::{CAUGHT_UP_RECORDS, PodState};
use crate::kafka::Quorum;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VoterPlan {
    /// The voters are what the spec asks for (or the quorum could not be asked).
    Settled,
    /// Make this broker a voter.
    Add(i32),
    /// Stop this broker being a voter.
    Remove(i32),
    /// A change is needed but not safe yet.
    Wait(String),
}

impl fmt::Display for VoterPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VoterPlan::Settled => write!(f, "the quorum's voters are as specified"),
            VoterPlan::Add(id) => write!(f, "adding node {id} to the quorum's voters"),
            VoterPlan::Remove(id) => write!(f, "removing node {id} from the quorum's voters"),
            VoterPlan::Wait(why) => write!(f, "changing the quorum's voters waits: {why}"),
        }
    }
}

/// The next step from the quorum as observed to the voters `want` (node ids, see
/// [`super::desired::controller_ids`]). `pods`: every broker and dedicated controller pod.
pub fn plan(want: std::ops::Range<i32>, quorum: Option<&Quorum>, pods: &[PodState]) -> VoterPlan {
    let Some(q) = quorum else { return VoterPlan::Settled };
    let have: BTreeSet<i32> = q.voters.iter().map(|(id, _)| *id).collect();
    let want: BTreeSet<i32> = want.collect();
    if have == want || have.is_empty() {
        return VoterPlan::Settled;
    }
    let goal = format!("voters {:?} -> {:?}", have, want);
    if let Some(p) = pods.iter().find(|p| !p.exists || p.terminating || !p.ready || !p.up_to_date) {
        return VoterPlan::Wait(format!("{goal}: {} is not ready and up to date", p.name));
    }
    let Some(leader) = q.leader else {
        return VoterPlan::Wait(format!("{goal}: the quorum has no active controller"));
    };
    if let Some(id) = want.difference(&have).next() {
        if !pods.iter().any(|p| p.ordinal == *id) {
            return VoterPlan::Wait(format!("{goal}: node {id} does not exist yet"));
        }
        return VoterPlan::Add(*id);
    }
    let extra: Vec<i32> = have.difference(&want).copied().collect();
    let Some(id) = extra.iter().rev().find(|id| **id != leader).or(extra.last()).copied() else {
        return VoterPlan::Settled;
    };
    let staying: Vec<i32> = q
        .voters
        .iter()
        .filter(|(v, leo)| *v != id && *leo >= 0 && leo + CAUGHT_UP_RECORDS >= q.high_watermark)
        .map(|(v, _)| *v)
        .collect();
    let majority = (have.len() - 1) / 2 + 1;
    if staying.len() < majority {
        return VoterPlan::Wait(format!(
            "{goal}: without node {id} the quorum would have {} caught-up voter(s) {staying:?} of the {majority} it needs",
            staying.len()
        ));
    }
    VoterPlan::Remove(id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::restart::tests::pod;
    use super::*;

    fn quorum(leader: i32, voters: &[i32]) -> Quorum {
        Quorum { leader: Some(leader), high_watermark: 500, voters: voters.iter().map(|v| (*v, 500)).collect() }
    }

    #[test]
    fn settled_when_the_voters_match_or_the_quorum_is_unknown() {
        let pods: Vec<_> = (0..3).map(pod).collect();
        assert_eq!(plan(0..3, Some(&quorum(1, &[0, 1, 2])), &pods), VoterPlan::Settled);
        assert_eq!(plan(0..1, None, &pods), VoterPlan::Settled);
    }

    #[test]
    fn grows_from_the_lowest_missing_broker_one_at_a_time() {
        let pods: Vec<_> = (0..5).map(pod).collect();
        assert_eq!(plan(0..3, Some(&quorum(0, &[0])), &pods), VoterPlan::Add(1));
        assert_eq!(plan(0..3, Some(&quorum(0, &[0, 1])), &pods), VoterPlan::Add(2));
        assert_eq!(plan(0..5, Some(&quorum(2, &[0, 1, 2])), &pods), VoterPlan::Add(3));
        // Additions come before removals: {0, 2, 4} -> {0, 1, 2} adds 1 first.
        assert_eq!(plan(0..3, Some(&quorum(4, &[0, 2, 4])), &pods), VoterPlan::Add(1));
    }

    #[test]
    fn shrinks_from_the_highest_broker_and_the_active_controller_last() {
        let pods: Vec<_> = (0..3).map(pod).collect();
        assert_eq!(plan(0..1, Some(&quorum(0, &[0, 1, 2])), &pods), VoterPlan::Remove(2));
        assert_eq!(plan(0..1, Some(&quorum(2, &[0, 1, 2])), &pods), VoterPlan::Remove(1));
        assert_eq!(plan(0..1, Some(&quorum(2, &[0, 2])), &pods), VoterPlan::Remove(2));
    }

    #[test]
    fn waits_for_every_broker_ready_and_an_active_controller() {
        let mut pods: Vec<_> = (0..3).map(pod).collect();
        pods[1].ready = false;
        let w = plan(0..3, Some(&quorum(0, &[0])), &pods);
        assert_eq!(w, VoterPlan::Wait("voters {0} -> {0, 1, 2}: c-broker-1 is not ready and up to date".into()));
        pods[1].ready = true;
        pods[2].up_to_date = false;
        assert!(matches!(plan(0..3, Some(&quorum(0, &[0])), &pods), VoterPlan::Wait(_)));
        pods[2].up_to_date = true;
        let leaderless = Quorum { leader: None, ..quorum(0, &[0, 1, 2]) };
        assert!(plan(0..1, Some(&leaderless), &pods).to_string().contains("no active controller"));
        // A voter to add must exist: the StatefulSet grows first.
        assert!(plan(0..5, Some(&quorum(0, &[0, 1, 2])), &pods).to_string().contains("node 3 does not exist yet"));
    }

    #[test]
    fn dedicated_controllers_are_added_once_their_pod_exists_and_removed_from_the_highest() {
        use super::super::restart::tests::controller;
        let mut pods: Vec<_> = (0..3).map(pod).collect();
        pods.extend((1000..1003).map(controller));
        let q = quorum(1000, &[1000, 1001, 1002]);
        assert_eq!(plan(1000..1003, Some(&q), &pods), VoterPlan::Settled);
        assert!(plan(1000..1005, Some(&q), &pods).to_string().contains("node 1003 does not exist yet"));
        pods.extend((1003..1005).map(controller));
        assert_eq!(plan(1000..1005, Some(&q), &pods), VoterPlan::Add(1003));
        let q = quorum(1000, &[1000, 1001, 1002, 1003, 1004]);
        assert_eq!(plan(1000..1003, Some(&q), &pods), VoterPlan::Remove(1004));
    }

    #[test]
    fn removes_only_with_a_caught_up_majority_staying() {
        let pods: Vec<_> = (0..3).map(pod).collect();
        // {0, 1, 2} -> {0}: removing 2 leaves {0, 1}, both needed, but 1 lags far behind.
        let q = Quorum { leader: Some(0), high_watermark: 500, voters: vec![(0, 500), (1, 10), (2, 500)] };
        assert!(plan(0..1, Some(&q), &pods).to_string().contains("1 caught-up voter(s) [0] of the 2 it needs"));
        let q = Quorum { voters: vec![(0, 500), (1, 480), (2, 10)], ..q };
        assert_eq!(plan(0..1, Some(&q), &pods), VoterPlan::Remove(2));
    }
}
