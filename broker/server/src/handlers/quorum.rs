//! The metadata quorum's admin APIs: DescribeQuorum, AddRaftVoter and RemoveRaftVoter
//! (KIP-595, KIP-853). Any broker answers; the request runs on the active controller.
//!
//! Oxbow keeps no directory ids for voters: requests may carry any directory id, and
//! responses report the zero id.

use std::time::Duration;

use oxbow_meta::{AdminRefusal, AdminReply, QuorumAdmin, QuorumState};
use oxbow_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use oxbow_protocol::messages::*;

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::s;
use crate::errors::BrokerError;

/// The metadata log's name, as Kafka calls it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// How long a membership change may take (a new voter first catches up as a learner).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

async fn run(ctx: &Ctx<'_>, req: QuorumAdmin) -> Result<AdminReply, BrokerError> {
    let q = ctx.broker.controller.started_quorum()?;
    match q.admin(req, ADMIN_TIMEOUT).await.map_err(BrokerError::from)? {
        Ok(reply) => Ok(reply),
        Err(AdminRefusal::DuplicateVoter(n)) => Err(BrokerError::DuplicateVoter(n)),
        Err(AdminRefusal::VoterNotFound(n)) => Err(BrokerError::VoterNotFound(n)),
        Err(AdminRefusal::Invalid(why)) => Err(BrokerError::InvalidRequest(why)),
    }
}

fn replica(id: i32, log_end_offset: i64) -> ReplicaState {
    let mut r = ReplicaState::default();
    r.replica_id = BrokerId(id);
    r.log_end_offset = log_end_offset;
    r.last_fetch_timestamp = -1;
    r.last_caught_up_timestamp = -1;
    r
}

fn describe_partition(state: &QuorumState) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = 0;
    p.leader_id = BrokerId(state.leader.unwrap_or(-1));
    p.leader_epoch = i32::try_from(state.term).unwrap_or(i32::MAX);
    p.high_watermark = state.high_watermark;
    p.current_voters = state.voters.iter().map(|v| replica(v.node_id, v.log_end_offset)).collect();
    p.observers = state.learners.iter().map(|v| replica(v.node_id, v.log_end_offset)).collect();
    p
}

pub async fn describe(ctx: &Ctx<'_>, req: DescribeQuorumRequest) -> DescribeQuorumResponse {
    let mut resp = DescribeQuorumResponse::default();
    let result = match ctx.check_cluster(Operation::Describe) {
        Ok(()) => run(ctx, QuorumAdmin::Describe).await,
        Err(e) => Err(e),
    };
    for t in req.topics {
        let mut td = TopicData::default();
        td.topic_name = t.topic_name.clone();
        for rp in t.partitions {
            let mut p = match (&result, t.topic_name.0.as_str(), rp.partition_index) {
                (Ok(AdminReply::State(state)), METADATA_TOPIC, 0) => describe_partition(state),
                (Err(e), METADATA_TOPIC, 0) => {
                    let mut p = PartitionData::default();
                    p.error_code = e.code();
                    if ctx.version >= 2 {
                        p.error_message = Some(s(e.message()));
                    }
                    p
                }
                _ => {
                    let mut p = PartitionData::default();
                    p.error_code = BrokerError::unknown_topic(false).code();
                    p
                }
            };
            p.partition_index = rp.partition_index;
            td.partitions.push(p);
        }
        resp.topics.push(td);
    }
    if let (Ok(AdminReply::State(state)), true) = (&result, ctx.version >= 2) {
        for (id, addr) in &state.endpoints {
            let Some((host, port)) = addr.rsplit_once(':') else { continue };
            let mut l = Listener::default();
            l.name = s(ctx.broker.config.controller_listener.as_ref().map_or("CONTROLLER", |l| l.name.as_str()));
            l.host = s(host);
            l.port = port.parse().unwrap_or(0);
            let mut n = Node::default();
            n.node_id = BrokerId(*id);
            n.listeners = vec![l];
            resp.nodes.push(n);
        }
    }
    resp
}

pub async fn add_voter(ctx: &Ctx<'_>, req: AddRaftVoterRequest) -> AddRaftVoterResponse {
    let mut resp = AddRaftVoterResponse::default();
    let result = async {
        ctx.check_cluster(Operation::Alter)?;
        check_cluster(ctx, req.cluster_id.as_ref().map(|c| c.as_str()))?;
        // The endpoint on our controller listener name, else the first one given.
        let names = ctx.broker.config.controller_listener.as_ref().map(|l| l.name.clone());
        let l = req
            .listeners
            .iter()
            .find(|l| Some(l.name.to_string()) == names)
            .or_else(|| req.listeners.first())
            .ok_or_else(|| BrokerError::InvalidRequest("AddRaftVoter needs the voter's listener".into()))?;
        run(ctx, QuorumAdmin::AddVoter { node_id: req.voter_id, addr: format!("{}:{}", l.host, l.port) }).await
    }
    .await;
    if let Err(e) = result {
        resp.error_code = e.code();
        resp.error_message = Some(s(e.message()));
    }
    resp
}

pub async fn remove_voter(ctx: &Ctx<'_>, req: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse {
    let mut resp = RemoveRaftVoterResponse::default();
    let result = async {
        ctx.check_cluster(Operation::Alter)?;
        check_cluster(ctx, req.cluster_id.as_ref().map(|c| c.as_str()))?;
        run(ctx, QuorumAdmin::RemoveVoter { node_id: req.voter_id }).await
    }
    .await;
    if let Err(e) = result {
        resp.error_code = e.code();
        resp.error_message = Some(s(e.message()));
    }
    resp
}

fn check_cluster(ctx: &Ctx<'_>, cluster_id: Option<&str>) -> Result<(), BrokerError> {
    match cluster_id {
        Some(c) if c != ctx.broker.cluster_id => Err(BrokerError::InconsistentClusterId(format!(
            "cluster id {c} is not this cluster's ({})",
            ctx.broker.cluster_id
        ))),
        _ => Ok(()),
    }
}
