//! Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions (answered by the
//! transaction coordinator, [`crate::txn_coordinator`]), and WriteTxnMarkers, which a
//! coordinator (or `kafka-transactions.sh --abort`) sends to partition leaders. The decisions are
//! `oxbow-txn`'s; its errors carry their Kafka codes (`oxbow_txn::TxnError::code`).

use std::collections::BTreeMap;
use std::time::Duration;

use oxbow_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use oxbow_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use oxbow_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use oxbow_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse, describe_transactions_response, list_transactions_response,
};
use oxbow_txn::{ProducerIdAndEpoch, TopicPartition, TxnApi, TxnResult, TxnState};

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::{s, topic_name};
use crate::clock::now_ms;
use crate::coordinator::OFFSETS_TOPIC;
use crate::errors::BrokerError;
use crate::partition::{HwWait, Marker};

/// How long a leader waits for the ISR to take a marker (Kafka: the broker's
/// `request.timeout.ms`).
const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

/// InitProducerId for a transactional producer.
pub async fn init_producer_id(
    ctx: &Ctx<'_>,
    req: &InitProducerIdRequest,
    id: &TransactionalId,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    let expected = match ProducerIdAndEpoch::expected(req.producer_id.0, req.producer_epoch) {
        Ok(e) => e,
        Err(e) => {
            resp.error_code = e.code();
            return resp;
        }
    };
    let init = oxbow_txn::InitProducerId {
        transactional_id: id.to_string(),
        transaction_timeout_ms: req.transaction_timeout_ms,
        expected,
    };
    let b = ctx.broker.clone();
    let r = ctx.broker.txns.detached(async move { b.txns.init_producer_id(init, &b.controller).await }).await;
    match r {
        Ok(pe) => {
            resp.producer_id = ProducerId(pe.producer_id);
            resp.producer_epoch = pe.epoch;
        }
        Err(e) => resp.error_code = e.for_version(TxnApi::InitProducerId, ctx.version).code(),
    }
    resp
}

/// The partitions of a request that exist, and the answers of those that do not: Kafka answers
/// UNKNOWN_TOPIC_OR_PARTITION for those and OPERATION_NOT_ATTEMPTED for the rest.
fn known_partitions(ctx: &Ctx<'_>, topics: &[AddPartitionsToTxnTopic]) -> (Vec<TopicPartition>, bool) {
    let mut out = Vec::new();
    let mut all_known = true;
    for t in topics {
        let topic = ctx.broker.topic(t.name.as_str());
        for &p in &t.partitions {
            match &topic {
                Some(tp) if p >= 0 && p < tp.meta.partitions => out.push(TopicPartition::new(t.name.as_str(), p)),
                _ => all_known = false,
            }
        }
    }
    (out, all_known)
}

/// One transaction's answer, every partition with `code` (or unknown ones their own).
fn topic_results(
    ctx: &Ctx<'_>,
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    results_by(topics, |name, p| match ctx.broker.topic(name) {
        Some(k) if p >= 0 && p < k.meta.partitions => code(name, p),
        _ => BrokerError::unknown_topic(false).code(),
    })
}

/// Every partition of `topics` with the code `code` gives it.
fn results_by(
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let mut tr = AddPartitionsToTxnTopicResult::default();
            tr.name = t.name.clone();
            tr.results_by_partition = t
                .partitions
                .iter()
                .map(|&p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = p;
                    pr.partition_error_code = code(t.name.as_str(), p);
                    pr
                })
                .collect();
            tr
        })
        .collect()
}

/// Kafka's OPERATION_NOT_ATTEMPTED, for the known partitions of a request some of whose
/// partitions are unknown.
fn not_attempted() -> i16 {
    BrokerError::OperationNotAttempted.code()
}

/// Adds `partitions` to the producer's transaction: the error code of every partition.
async fn add(ctx: &Ctx<'_>, id: String, producer_id: i64, producer_epoch: i16, partitions: Vec<TopicPartition>) -> i16 {
    let add = oxbow_txn::AddPartitions {
        transactional_id: id,
        producer_id,
        producer_epoch,
        partitions,
        client_transaction_version: oxbow_txn::shard::client_version_for_add_partitions(ctx.version),
    };
    let b = ctx.broker.clone();
    let r = ctx.broker.txns.detached(async move { b.txns.add_partitions(add).await }).await;
    oxbow_txn::code_of(&r.map_err(|e| e.for_version(TxnApi::AddPartitionsToTxn, ctx.version)))
}

pub async fn add_partitions_to_txn(ctx: &Ctx<'_>, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let mut resp = AddPartitionsToTxnResponse::default();
    if ctx.version < 4 {
        let id = req.v3_and_below_transactional_id.to_string();
        let topics = &req.v3_and_below_topics;
        // WRITE on the transactional id (else every partition fails), then on each topic (the
        // others are not attempted), as Kafka.
        if let Err(e) = ctx.check_txn(Operation::Write, &id) {
            resp.results_by_topic_v3_and_below = results_by(topics, |_, _| e.code());
            return resp;
        }
        let denied: Vec<&str> =
            topics.iter().map(|t| t.name.as_str()).filter(|n| !ctx.topic_allowed(Operation::Write, n)).collect();
        if !denied.is_empty() {
            resp.results_by_topic_v3_and_below = results_by(topics, |name, p| {
                let known = ctx.broker.topic(name).is_some_and(|t| p >= 0 && p < t.meta.partitions);
                if denied.contains(&name) {
                    BrokerError::TopicAuthorizationFailed.code()
                } else if !known {
                    BrokerError::unknown_topic(false).code()
                } else {
                    not_attempted()
                }
            });
            return resp;
        }
        let (parts, all_known) = known_partitions(ctx, topics);
        let code = if !all_known {
            not_attempted()
        } else {
            let (pid, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
            add(ctx, id, pid, epoch, parts).await
        };
        resp.results_by_topic_v3_and_below = topic_results(ctx, topics, |_, _| code);
        return resp;
    }
    // v4+: from brokers (CLUSTER_ACTION), several transactions, each verified or added.
    if let Err(e) = ctx.check_cluster(Operation::ClusterAction) {
        resp.error_code = e.code();
        return resp;
    }
    for t in &req.transactions {
        let id = t.transactional_id.to_string();
        let (parts, all_known) = known_partitions(ctx, &t.topics);
        let mut r = AddPartitionsToTxnResult::default();
        r.transactional_id = t.transactional_id.clone();
        if !all_known {
            r.topic_results = topic_results(ctx, &t.topics, |_, _| not_attempted());
        } else if t.verify_only {
            let results = ctx.broker.txns.verify_partitions(&id, t.producer_id.0, t.producer_epoch, &parts).await;
            let by: BTreeMap<(String, i32), i16> = parts
                .iter()
                .zip(&results)
                .map(|(p, r)| ((p.topic.clone(), p.partition), oxbow_txn::code_of(r)))
                .collect();
            r.topic_results =
                topic_results(ctx, &t.topics, |name, p| by.get(&(name.to_string(), p)).copied().unwrap_or(0));
        } else {
            let code = add(ctx, id, t.producer_id.0, t.producer_epoch, parts).await;
            r.topic_results = topic_results(ctx, &t.topics, |_, _| code);
        }
        resp.results_by_transaction.push(r);
    }
    resp
}

pub async fn add_offsets_to_txn(ctx: &Ctx<'_>, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    // WRITE on the transactional id, READ on the group, as Kafka.
    let auth = ctx
        .check_txn(Operation::Write, req.transactional_id.as_str())
        .and_then(|()| ctx.check_group(Operation::Read, req.group_id.as_str()));
    if let Err(e) = auth {
        resp.error_code = e.code();
        return resp;
    }
    let partitions = ctx.broker.config.groups.topic_partitions;
    let add = oxbow_txn::AddOffsets {
        transactional_id: req.transactional_id.to_string(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
        offsets_partition: oxbow_group::partition_for(req.group_id.as_str(), partitions),
    };
    let b = ctx.broker.clone();
    let r = ctx.broker.txns.detached(async move { b.txns.add_offsets(add).await }).await;
    resp.error_code = oxbow_txn::code_of(&r.map_err(|e| e.for_version(TxnApi::AddOffsetsToTxn, ctx.version)));
    resp
}

pub async fn end_txn(ctx: &Ctx<'_>, req: EndTxnRequest) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    if let Err(e) = ctx.check_txn(Operation::Write, req.transactional_id.as_str()) {
        resp.error_code = e.code();
        return resp;
    }
    let end = oxbow_txn::EndTxn {
        transactional_id: req.transactional_id.to_string(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
        result: if req.committed { TxnResult::Commit } else { TxnResult::Abort },
        client_transaction_version: oxbow_txn::shard::client_version_for_end_txn(ctx.version),
    };
    let b = ctx.broker.clone();
    match ctx.broker.txns.detached(async move { b.txns.end_txn(end, &b.controller).await }).await {
        Ok(pe) => {
            resp.producer_id = ProducerId(pe.producer_id);
            resp.producer_epoch = pe.epoch;
        }
        Err(e) => resp.error_code = e.for_version(TxnApi::EndTxn, ctx.version).code(),
    }
    resp
}

/// WriteTxnMarkers: each marker appended to each of its partitions this broker leads, answered
/// once the ISR has it (as a produce with acks=all).
pub async fn write_txn_markers(ctx: &Ctx<'_>, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let b = ctx.broker;
    let now = now_ms();
    let mut resp = WriteTxnMarkersResponse::default();
    let mut waits = Vec::new();
    // From transaction coordinators: CLUSTER_ACTION (every partition refused without it).
    let cluster_action = ctx.check_cluster(Operation::ClusterAction);
    for m in &req.markers {
        let mut mr = WritableTxnMarkerResult::default();
        mr.producer_id = m.producer_id;
        for t in &m.topics {
            let topic = b.topic(t.name.as_str());
            let mut tr = WritableTxnMarkerTopicResult::default();
            tr.name = t.name.clone();
            for &p in &t.partition_indexes {
                let mut pr = WritableTxnMarkerPartitionResult::default();
                pr.partition_index = p;
                let marker = Marker {
                    producer_id: m.producer_id.0,
                    producer_epoch: m.producer_epoch,
                    coordinator_epoch: m.coordinator_epoch,
                    commit: m.transaction_result,
                };
                let appended = match &topic {
                    _ if cluster_action.is_err() => Err(BrokerError::ClusterAuthorizationFailed),
                    None => Err(BrokerError::unknown_topic(false)),
                    // The group coordinator writes its partitions' markers and settles the
                    // transaction's offsets with them; the task finishes even if this request
                    // is dropped.
                    Some(topic) if topic.meta.name == OFFSETS_TOPIC => {
                        let bb = b.clone();
                        b.groups
                            .detached(async move { bb.groups.end_txn(&bb.view, p, marker).await })
                            .await
                            .unwrap_or_else(|| Err(BrokerError::Internal("the group coordinator stopped".into())))
                    }
                    Some(topic) => topic.led(p).and_then(|part| {
                        part.append_marker(marker, Some(topic.min_insync), now)
                            .map(|r| (part.clone(), r.last_offset + 1))
                    }),
                };
                match appended {
                    Ok((part, end)) => {
                        waits.push((resp.markers.len(), mr.topics.len(), tr.partitions.len(), part, end))
                    }
                    Err(e) => {
                        tracing::debug!(topic = %t.name.as_str(), partition = p, error = %e, "transaction marker refused");
                        pr.error_code = e.code();
                    }
                }
                tr.partitions.push(pr);
            }
            mr.topics.push(tr);
        }
        resp.markers.push(mr);
    }
    // Every marker is appended: the connection's next request may start.
    ctx.applied.fire();
    let deadline = tokio::time::Instant::now() + MARKER_TIMEOUT;
    for (m, t, p, part, end) in waits {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = match part.wait_for_hw(end, left).await {
            Ok(()) => continue,
            Err(HwWait::TimedOut) => BrokerError::TimedOut("timed out waiting for in-sync replicas".into()),
            Err(HwWait::NotLeader) => BrokerError::NotLeader("this broker stopped leading the partition".into()),
        };
        resp.markers[m].topics[t].partitions[p].error_code = e.code();
    }
    resp
}

pub async fn describe_transactions(ctx: &Ctx<'_>, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
    use describe_transactions_response::{TopicData, TransactionState};
    let mut resp = DescribeTransactionsResponse::default();
    for id in &req.transactional_ids {
        let mut st = TransactionState::default();
        st.transactional_id = id.clone();
        st.producer_id = ProducerId(-1);
        st.producer_epoch = -1;
        st.transaction_start_time_ms = -1;
        if let Err(e) = ctx.check_txn(Operation::Describe, id.as_str()) {
            st.error_code = e.code();
            resp.transaction_states.push(st);
            continue;
        }
        match ctx.broker.txns.describe(id.as_str()).await {
            Ok(d) => {
                let m = &d.meta;
                st.transaction_state = s(m.state.name());
                st.transaction_timeout_ms = m.timeout_ms;
                st.transaction_start_time_ms = m.start_timestamp;
                st.producer_id = ProducerId(m.producer_id);
                st.producer_epoch = m.producer_epoch;
                let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                for tp in &m.partitions {
                    by_topic.entry(tp.topic.as_str()).or_default().push(tp.partition);
                }
                st.topics = by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut td = TopicData::default();
                        td.topic = topic_name(t);
                        td.partitions = ps;
                        td
                    })
                    .collect();
            }
            Err(e) => st.error_code = e.code(),
        }
        resp.transaction_states.push(st);
    }
    resp
}

pub async fn list_transactions(ctx: &Ctx<'_>, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    let mut states = Vec::new();
    for f in &req.state_filters {
        match TxnState::from_name(f.as_str()) {
            Some(st) => states.push(st),
            None => resp.unknown_state_filters.push(f.clone()),
        }
    }
    if !req.state_filters.is_empty() && states.is_empty() {
        // Only unknown states asked for: nothing matches.
        return resp;
    }
    let pattern = match req.transactional_id_pattern.as_ref().filter(|p| ctx.version >= 2 && !p.is_empty()) {
        None => None,
        Some(p) => match regex::Regex::new(&format!("^(?:{})$", p.as_str())) {
            Ok(r) => Some(r),
            Err(e) => {
                resp.error_code = BrokerError::InvalidRegularExpression(e.to_string()).code();
                return resp;
            }
        },
    };
    let producers: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let duration = if ctx.version >= 1 { req.duration_filter } else { -1 };
    let now = now_ms();
    for d in ctx.broker.txns.list().await {
        let m = &d.meta;
        let include = (producers.is_empty() || producers.contains(&m.producer_id))
            && (states.is_empty() || states.contains(&m.state))
            && (duration < 0 || now - m.start_timestamp > duration)
            && pattern.as_ref().is_none_or(|r| r.is_match(&d.transactional_id))
            && ctx.txn_allowed(Operation::Describe, &d.transactional_id);
        if include {
            let mut st = list_transactions_response::TransactionState::default();
            st.transactional_id = TransactionalId(s(d.transactional_id.clone()));
            st.producer_id = ProducerId(m.producer_id);
            st.transaction_state = s(m.state.name());
            resp.transaction_states.push(st);
        }
    }
    resp
}
