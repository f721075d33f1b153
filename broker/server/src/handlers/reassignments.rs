//! AlterPartitionReassignments, ListPartitionReassignments (KIP-455) and UnregisterBroker: decided
//! by the active controller (any broker forwards them), answered once this broker has applied the
//! result, so its Metadata already shows the moving replica sets.

use oxbow_meta::controller::{Ongoing, Reassignment};
use oxbow_meta::{Command, Reply};
use oxbow_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use oxbow_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use oxbow_protocol::messages::*;

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::{entry, s, topic_name};
use crate::errors::BrokerError;

pub async fn alter(ctx: &Ctx<'_>, req: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    resp.error_message = None;
    resp.allow_replication_factor_change = req.allow_replication_factor_change;
    let partitions: Vec<Reassignment> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Reassignment {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    if partitions.is_empty() {
        return resp;
    }
    let cmd = Command::AlterReassignments {
        partitions: partitions.clone(),
        allow_rf_change: req.allow_replication_factor_change,
    };
    let outcome = match ctx.check_cluster(Operation::Alter) {
        Ok(()) => ctx.broker.execute(cmd).await,
        Err(e) => Err(e),
    };
    let results: Vec<(String, i32, Option<BrokerError>)> = match outcome {
        Ok(Reply::Reassignments(r)) => r
            .into_iter()
            .map(|(t, p, refusal)| (t, p, refusal.map(|e| BrokerError::from(oxbow_meta::CommandError::Refused(e)))))
            .collect(),
        other => {
            // The whole request failed: as Kafka's error response, the top-level error and
            // every partition asked for carry it.
            let e = match other {
                Ok(reply) => BrokerError::unexpected_reply(&reply),
                Err(e) => e,
            };
            resp.error_code = e.code();
            resp.error_message = Some(s(e.message()));
            partitions.into_iter().map(|r| (r.topic, r.partition, Some(e.clone()))).collect()
        }
    };
    for (topic, partition, error) in results {
        let mut pr = ReassignablePartitionResponse::default();
        pr.partition_index = partition;
        pr.error_code = error.as_ref().map_or(0, BrokerError::code);
        pr.error_message = error.map(|e| s(e.message()));
        let new = || {
            let mut t = ReassignableTopicResponse::default();
            t.name = topic_name(&topic);
            t
        };
        entry(&mut resp.responses, |t| t.name.0.as_str() == topic, new).partitions.push(pr);
    }
    resp
}

pub async fn list(ctx: &Ctx<'_>, req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    resp.error_message = None;
    let wanted: Option<Vec<(String, Vec<i32>)>> =
        req.topics.map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
    if wanted.as_ref().is_some_and(Vec::is_empty) {
        return resp;
    }
    let outcome = match ctx.check_cluster(Operation::Describe) {
        Ok(()) => ctx.broker.execute(Command::ListReassignments { partitions: wanted }).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(Reply::Reassigning(moves)) => resp.topics = group(moves),
        other => {
            let e = match other {
                Ok(reply) => BrokerError::unexpected_reply(&reply),
                Err(e) => e,
            };
            resp.error_code = e.code();
            resp.error_message = Some(s(e.message()));
        }
    }
    resp
}

/// Moves grouped by topic, in the order the controller listed them.
fn group(moves: Vec<Ongoing>) -> Vec<OngoingTopicReassignment> {
    let mut out: Vec<OngoingTopicReassignment> = Vec::new();
    for m in moves {
        let mut p = OngoingPartitionReassignment::default();
        p.partition_index = m.partition;
        p.replicas = m.replicas.into_iter().map(BrokerId).collect();
        p.adding_replicas = m.adding.into_iter().map(BrokerId).collect();
        p.removing_replicas = m.removing.into_iter().map(BrokerId).collect();
        let new = || {
            let mut t = OngoingTopicReassignment::default();
            t.name = topic_name(&m.topic);
            t
        };
        entry(&mut out, |t| t.name.0.as_str() == m.topic, new).partitions.push(p);
    }
    out
}

pub async fn unregister_broker(ctx: &Ctx<'_>, req: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
    let mut resp = UnregisterBrokerResponse::default();
    resp.error_message = None;
    let outcome = match ctx.check_cluster(Operation::Alter) {
        Ok(()) => ctx.broker.execute(Command::UnregisterBroker { node_id: req.broker_id.0 }).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(Reply::Done) => tracing::info!(node = req.broker_id.0, "broker unregistered"),
        Ok(reply) => {
            let e = BrokerError::unexpected_reply(&reply);
            resp.error_code = e.code();
            resp.error_message = Some(s(e.message()));
        }
        Err(e) => {
            resp.error_code = e.code();
            resp.error_message = Some(s(e.message()));
        }
    }
    resp
}
