//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
//! ElectLeaders, plus InitProducerId and DescribeCluster.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use oxbow_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use oxbow_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use oxbow_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use oxbow_protocol::messages::delete_topics_response::DeletableTopicResult;
use oxbow_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use oxbow_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use oxbow_protocol::messages::*;

use super::Ctx;
use super::access::CLUSTER_OPERATIONS;
use super::util::{OPERATIONS_NOT_REQUESTED, entry, s, topic_name};
use crate::controller_client::CONTROLLER_TIMEOUT;
use crate::errors::BrokerError;
use crate::security::authorizer::CLUSTER_NAME;
use crate::topic_config;
use oxbow_meta::acl::{Operation, ResourceType};

pub async fn create_topics(ctx: &Ctx<'_>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let b = ctx.broker;
    let mut resp = CreateTopicsResponse::default();
    let mut seen = HashSet::new();
    let dupes: HashSet<String> =
        req.topics.iter().filter(|t| !seen.insert(t.name.0.to_string())).map(|t| t.name.0.to_string()).collect();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        let partitions = if !t.assignments.is_empty() {
            t.assignments.len() as i32
        } else if t.num_partitions == -1 {
            b.config.num_partitions
        } else {
            t.num_partitions
        };
        let rf = if !t.assignments.is_empty() {
            t.assignments[0].broker_ids.len() as i16
        } else if t.replication_factor == -1 {
            b.config.default_replication_factor
        } else {
            t.replication_factor
        };
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()).unwrap_or_default()))
            .collect();
        let check = || -> Result<(), BrokerError> {
            // CREATE on the cluster or on the topic (literal or prefixed), as Kafka.
            if !ctx.cluster_allowed(Operation::Create) {
                ctx.check_topic(Operation::Create, &name)?;
            }
            if dupes.contains(&name) {
                return Err(BrokerError::InvalidRequest(format!("topic {name} appears more than once in the request")));
            }
            if !t.assignments.is_empty() && (t.num_partitions != -1 || t.replication_factor != -1) {
                return Err(BrokerError::InvalidRequest(
                    "both assignments and partitions/replication factor given".into(),
                ));
            }
            for (i, a) in t.assignments.iter().enumerate() {
                if a.partition_index != i as i32 {
                    return Err(BrokerError::InvalidReplicaAssignment(format!(
                        "assignments must list partitions 0..{} in order",
                        t.assignments.len()
                    )));
                }
                if a.broker_ids.len() != t.assignments[0].broker_ids.len() {
                    return Err(BrokerError::InvalidReplicaAssignment(
                        "every partition must have the same number of replicas".into(),
                    ));
                }
            }
            for c in &t.configs {
                topic_config::validate(c.name.as_str(), c.value.as_ref().map(|v| v.as_str()))?;
            }
            b.check_new_topic(&name, partitions, rf, &configs)
        };
        let assignments = (!t.assignments.is_empty())
            .then(|| t.assignments.iter().map(|a| a.broker_ids.iter().map(|id| id.0).collect()).collect());
        let result = match check() {
            Ok(()) => b.create_topic(&name, partitions, rf, assignments, configs.clone(), req.validate_only).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(created) if !ctx.topic_allowed(Operation::DescribeConfigs, &name) => {
                // Created, but its details are the principal's only with DESCRIBE_CONFIGS.
                if let Some(t) = created {
                    r.topic_id = t.meta.id;
                }
                r.topic_config_error_code = BrokerError::TopicAuthorizationFailed.code();
            }
            Ok(created) => {
                r.num_partitions = partitions;
                r.replication_factor = rf;
                if let Some(t) = created {
                    r.topic_id = t.meta.id;
                }
                let described = topic_config::describe(&b.view.topic_defaults(), &configs, None);
                r.configs = Some(
                    described
                        .into_iter()
                        .map(|d| {
                            let mut c = CreatableTopicConfigs::default();
                            c.name = s(d.name);
                            c.value = Some(s(d.value));
                            c.config_source = d.source;
                            c
                        })
                        .collect(),
                );
            }
            Err(e) => {
                r.error_code = e.code();
                r.error_message = Some(s(e.message()));
            }
        }
        resp.topics.push(r);
    }
    resp
}

pub async fn delete_topics(ctx: &Ctx<'_>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let b = ctx.broker;
    let mut resp = DeleteTopicsResponse::default();
    // v0-5 name topics in `topic_names`; v6 uses `topics` with a name or an id.
    let mut targets: Vec<(Option<String>, uuid::Uuid)> =
        req.topic_names.iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect();
    targets.extend(req.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)));
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default();
        r.topic_id = id;
        let resolved = match &name {
            Some(n) => Ok(Some(n.clone())),
            None => b.topic_by_id_to_change(id).await.map(|t| t.map(|t| t.meta.name.clone())),
        };
        r.name = resolved.as_ref().ok().and_then(Option::as_ref).or(name.as_ref()).map(|n| topic_name(n));
        let result = match resolved {
            Err(e) => Err(e),
            Ok(None) => Err(BrokerError::UnknownTopicId),
            Ok(Some(n)) => match ctx.check_topic(Operation::Delete, &n) {
                Ok(()) => b.delete_topic(&n).await,
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(id) => r.topic_id = id,
            Err(e) => {
                r.error_code = e.code();
                r.error_message = Some(s(e.message()));
            }
        }
        resp.responses.push(r);
    }
    resp
}

pub async fn create_partitions(ctx: &Ctx<'_>, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let b = ctx.broker;
    let mut resp = CreatePartitionsResponse::default();
    // How long this broker waits to apply the committed change before it answers (0: no
    // deadline, as Kafka reads it, so the longest wait); it answers success either way.
    let wait =
        u64::try_from(req.timeout_ms).ok().filter(|ms| *ms > 0).map_or(CONTROLLER_TIMEOUT, Duration::from_millis);
    for t in req.topics {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let name = t.name.0.to_string();
        // Null assignments: the controller places the new partitions. A list has one entry per
        // new partition, of the topic's replication factor: the active controller checks it
        // against the topic as it has it (this broker may not have applied the topic yet).
        let assignments =
            t.assignments.as_ref().map(|a| a.iter().map(|x| x.broker_ids.iter().map(|id| id.0).collect()).collect());
        let result = match ctx.check_topic(Operation::Alter, &name) {
            Ok(()) => b.create_partitions(&name, t.count, assignments, req.validate_only, wait).await,
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            r.error_code = e.code();
            r.error_message = Some(s(e.message()));
        }
        resp.results.push(r);
    }
    resp
}

/// ElectLeaders (KIP-460): preferred or unclean elections, decided by the active controller
/// and answered once this broker has applied the result. A null partition list means every
/// partition; the answer then lists only those an election was tried for (as Kafka).
pub async fn elect_leaders(ctx: &Ctx<'_>, req: ElectLeadersRequest) -> ElectLeadersResponse {
    use oxbow_meta::{Command, Election, Reply};
    let mut resp = ElectLeadersResponse::default();
    let election = match req.election_type {
        0 => Election::Preferred,
        1 => Election::Unclean,
        other => {
            resp.error_code = BrokerError::InvalidRequest(String::new()).code();
            tracing::debug!(election_type = other, "ElectLeaders with an unknown election type");
            return resp;
        }
    };
    let partitions = req.topic_partitions.map(|ts| {
        let mut seen = HashSet::new();
        ts.into_iter()
            .flat_map(|t| t.partitions.into_iter().map(move |p| (t.topic.0.to_string(), p)))
            .filter(|tp| seen.insert(tp.clone()))
            .collect::<Vec<_>>()
    });
    let allowed = ctx.check_cluster(Operation::Alter);
    let outcomes = match allowed.map(|()| Command::ElectLeaders { election, partitions: partitions.clone() }) {
        Ok(cmd) => ctx.broker.execute(cmd).await,
        Err(e) => Err(e),
    };
    let outcomes = match outcomes {
        Ok(Reply::Elections(r)) => r,
        Ok(other) => {
            resp.error_code = BrokerError::unexpected_reply(&other).code();
            return resp;
        }
        Err(e) => {
            // The whole request failed (no quorum): as Kafka's error response, every partition
            // asked for gets the error, and the top-level code too (v1+).
            for (t, p) in partitions.unwrap_or_default() {
                push_election(&mut resp, t, p, Err(e.clone()));
            }
            if ctx.version >= 1 {
                resp.error_code = e.code();
            }
            return resp;
        }
    };
    for (t, p, outcome) in outcomes {
        push_election(&mut resp, t, p, Ok(outcome));
    }
    resp
}

fn push_election(
    resp: &mut ElectLeadersResponse,
    topic: String,
    partition: i32,
    outcome: Result<oxbow_meta::ElectionOutcome, BrokerError>,
) {
    use oxbow_meta::ElectionOutcome as O;
    let error = match outcome {
        Ok(O::Elected) => None,
        Ok(O::NotNeeded) => Some(BrokerError::ElectionNotNeeded),
        Ok(O::PreferredNotAvailable) => Some(BrokerError::PreferredLeaderNotAvailable(format!(
            "Failed to elect leader for partition {topic}-{partition} under strategy PreferredReplicaPartitionLeaderElectionStrategy"
        ))),
        Ok(O::NoEligibleLeader) => Some(BrokerError::EligibleLeadersNotAvailable(format!(
            "Failed to elect leader for partition {topic}-{partition}: no live replica"
        ))),
        Ok(O::Unknown(m)) => Some(BrokerError::UnknownTopic(m)),
        Err(e) => Some(e),
    };
    let (code, message) = error.map_or((0, None), |e| (e.code(), Some(e.message())));
    let mut pr = PartitionResult::default();
    pr.partition_id = partition;
    pr.error_code = code;
    pr.error_message = message.map(s);
    let new = || {
        let mut r = ReplicaElectionResult::default();
        r.topic = topic_name(&topic);
        r
    };
    entry(&mut resp.replica_election_results, |r| r.topic.0.as_str() == topic, new).partition_result.push(pr);
}

/// The leader moves the log start, then the answer waits (up to the request's timeout) until
/// every in-sync replica's log starts there too, as Kafka's delayed DeleteRecords; the low
/// watermark answered is the smallest of them. Replicas that have not got there in time:
/// REQUEST_TIMED_OUT.
pub async fn delete_records(ctx: &Ctx<'_>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let b = ctx.broker;
    let mut resp = DeleteRecordsResponse::default();
    let mut moved = Vec::new();
    for t in req.topics {
        let topic = b.topic(t.name.0.as_str());
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            let result = match topic.as_ref().map(|t| t.led(p.partition_index)) {
                _ if !ctx.topic_allowed(Operation::Delete, t.name.0.as_str()) => {
                    Err(BrokerError::TopicAuthorizationFailed)
                }
                None => Err(BrokerError::UnknownTopic("unknown topic or partition".into())),
                Some(Err(e)) => Err(e),
                Some(Ok(part)) => part.delete_records_before(p.offset).map(|start| (part.clone(), start)),
            };
            match result {
                Ok(m) => moved.push((resp.topics.len(), tr.partitions.len(), m)),
                Err(e) => pr.error_code = e.code(),
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    // A new log start offset is checkpointed at once, so it survives a crash too.
    b.write_checkpoints();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    for (t, p, (part, start)) in moved {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (reached, low) = part.wait_low_watermark(start, left).await;
        let pr = &mut resp.topics[t].partitions[p];
        pr.low_watermark = low;
        if !reached {
            pr.error_code = BrokerError::TimedOut(String::new()).code();
        }
    }
    resp
}

/// Idempotent producers get a fresh producer id (epoch 0), or, when they send their current id
/// and epoch (KIP-360, after an unknown producer or sequence error), the same id with the next
/// epoch. A transactional id goes to the transaction coordinator.
pub async fn init_producer_id(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let b = ctx.broker;
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    if let Some(id) = &req.transactional_id {
        if let Err(e) = ctx.check_txn(Operation::Write, id.as_str()) {
            resp.error_code = e.code();
            return resp;
        }
        return super::transactions::init_producer_id(ctx, &req, id).await;
    }
    if let Err(e) = ctx.check_idempotent_write() {
        resp.error_code = e.code();
        return resp;
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        resp.producer_id = req.producer_id;
        resp.producer_epoch = req.producer_epoch + 1;
        return resp;
    }
    match b.controller.next_producer_id().await {
        Ok(id) => {
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(e) => resp.error_code = e.code(),
    }
    resp
}

pub async fn describe_cluster(ctx: &Ctx<'_>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let b = ctx.broker;
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = s(b.cluster_id.clone());
    resp.controller_id = BrokerId(b.controller_id());
    if ctx.version >= 1 {
        resp.endpoint_type = if req.endpoint_type == 0 { 1 } else { req.endpoint_type };
    }
    let image = b.image();
    resp.brokers = image
        .brokers
        .values()
        .filter(|r| (ctx.version >= 2 && req.include_fenced_brokers) || r.is_active())
        .filter_map(|r| {
            let l = r.endpoint(&ctx.session.listener)?;
            let mut br = DescribeClusterBroker::default();
            br.broker_id = BrokerId(r.node_id);
            br.host = s(l.host.clone());
            br.port = i32::from(l.port);
            br.rack = r.rack.clone().map(s);
            if ctx.version >= 2 {
                br.is_fenced = r.fenced;
            }
            Some(br)
        })
        .collect();
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        ctx.authorized_operations(ResourceType::Cluster, CLUSTER_NAME, CLUSTER_OPERATIONS)
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    resp
}

/// DescribeProducers: the producer state of each partition (KIP-664): epoch, last sequence and
/// timestamp, the coordinator epoch of the last marker, the open transaction's first offset.
pub async fn describe_producers(ctx: &Ctx<'_>, req: DescribeProducersRequest) -> DescribeProducersResponse {
    use oxbow_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
    let b = ctx.broker;
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let topic = b.topic(t.name.0.as_str());
        let mut tr = TopicResponse::default();
        tr.name = t.name.clone();
        for idx in t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = idx;
            let found = match &topic {
                _ if !ctx.topic_allowed(Operation::Read, t.name.0.as_str()) => {
                    Err(BrokerError::TopicAuthorizationFailed)
                }
                None => Err(BrokerError::UnknownTopic("unknown topic or partition".into())),
                Some(t) => t.led(idx),
            };
            let producers = found.and_then(|p| {
                p.with_log(|l| {
                    let state = l.producer_state();
                    state
                        .entries()
                        .into_iter()
                        .map(|(id, epoch, last_seq, last_ts)| {
                            let e = state.get(id);
                            let coordinator_epoch = e.map_or(-1, |e| e.coordinator_epoch);
                            let txn_start = e.and_then(|e| e.txn_first_offset).unwrap_or(-1);
                            (id, epoch, last_seq, last_ts, coordinator_epoch, txn_start)
                        })
                        .collect::<Vec<_>>()
                })
            });
            match producers {
                Ok(list) => {
                    pr.active_producers = list
                        .into_iter()
                        .map(|(id, epoch, last_seq, last_ts, coordinator_epoch, txn_start)| {
                            let mut ps = ProducerState::default();
                            ps.producer_id = ProducerId(id);
                            ps.producer_epoch = i32::from(epoch);
                            ps.last_sequence = last_seq;
                            ps.last_timestamp = last_ts;
                            ps.coordinator_epoch = coordinator_epoch;
                            ps.current_txn_start_offset = txn_start;
                            ps
                        })
                        .collect();
                }
                Err(e) => {
                    pr.error_code = e.code();
                    pr.error_message = Some(s(e.message()));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
