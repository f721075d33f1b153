//! Produce: validate every batch, verify transactional producers' partitions with their
//! transaction coordinator (KIP-890), append, and for acks=all wait until the high watermark
//! covers the write (the ISR rule of `crate::replica`). acks=0 gets no response at all.
//!
//! Three passes over the request's partitions: validation (every refusal answered in place),
//! one verification round trip for the partitions whose transaction is not open here yet, then
//! the appends, in request order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry::KeyValue;
use oxbow_log::Flush;
use oxbow_log::batch::{ValidBatch, validate_produce};
use oxbow_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use oxbow_protocol::messages::{ProduceRequest, ProduceResponse};
use oxbow_txn::TopicPartition;

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::s;
use crate::clock::now_ms;
use crate::errors::BrokerError;
use crate::metadata_view::Topic;
use crate::partition::{HwWait, Partition, TxnWrite};
use crate::stats::Purgatory;
use crate::trace::Span;
use crate::txn_coordinator::Verdict;

/// Produce v12+ comes from transaction version 2 producers: the leader adds the partition to
/// the transaction instead of only verifying it.
const ADDS_PARTITIONS_FROM: i16 = 12;

struct Pending {
    topic: usize,
    partition: Arc<Partition>,
    resp_index: usize,
    wait_for: i64,
}

/// A partition that passed validation, waiting to be appended.
struct Ready {
    topic_slot: usize,
    resp_index: usize,
    topic: Arc<Topic>,
    partition: Arc<Partition>,
    records: Bytes,
    batches: Vec<ValidBatch>,
    txn: Option<TxnWrite>,
}

fn partition_error(index: i32, e: &BrokerError) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default();
    r.index = index;
    r.error_code = e.code();
    r.error_message = Some(s(e.message()));
    r.base_offset = -1;
    r.log_append_time_ms = -1;
    r.log_start_offset = -1;
    r
}

/// Topics only the coordinators write.
fn is_internal(name: &str) -> bool {
    name == crate::coordinator::OFFSETS_TOPIC || name == oxbow_txn::shard::TRANSACTION_STATE_TOPIC
}

/// Validates one partition's data (answered at `slot` of the response); the partition's answer
/// if it is refused.
fn validate(
    ctx: &Ctx<'_>,
    req: &ProduceRequest,
    topic: Option<&Arc<Topic>>,
    index: i32,
    records: Bytes,
    now: i64,
    (topic_slot, resp_index): (usize, usize),
) -> Result<Ready, BrokerError> {
    if !matches!(req.acks, -1..=1) {
        return Err(BrokerError::InvalidRequiredAcks(req.acks));
    }
    if let Some(internal) = topic.map(|t| t.meta.name.as_str()).filter(|n| is_internal(n)) {
        return Err(BrokerError::InvalidTopic(format!("Cannot append to internal topic {internal}")));
    }
    let topic = topic.ok_or_else(|| BrokerError::unknown_topic(ctx.version >= 13))?;
    let partition = topic.led(index)?.clone();
    let batches = validate_produce(&records, topic.log_config.max_message_bytes).inspect_err(|e| {
        tracing::debug!(topic = %topic.meta.name, partition = index, error = %e, "rejected batch");
    })?;
    let txn = match batches.iter().find(|b| b.header.is_transactional()) {
        None => None,
        Some(first) => {
            if req.transactional_id.is_none() {
                return Err(BrokerError::TransactionalIdAuthorizationFailed(
                    "transactional records need the producer's transactional id".into(),
                ));
            }
            let (pid, epoch) = (first.header.producer_id, first.header.producer_epoch);
            if batches.iter().any(|b| b.header.producer_id != pid || b.header.producer_epoch != epoch) {
                return Err(BrokerError::InvalidProducerIdMapping(
                    "batches of several producers in one transactional produce".into(),
                ));
            }
            let verify = ctx.broker.config.transactions.verification || ctx.version >= ADDS_PARTITIONS_FROM;
            let guard = if verify {
                partition.start_txn_verification(pid, epoch, ctx.version >= ADDS_PARTITIONS_FROM, now)?
            } else {
                None
            };
            Some(TxnWrite { producer_id: pid, epoch, guard })
        }
    };
    if topic.log_config.cleanup_compact {
        oxbow_log::cleaner::check_keys(&records)?;
    }
    Ok(Ready { topic_slot, resp_index, topic: topic.clone(), partition, records, batches, txn })
}

/// Asks the transaction coordinator about the partitions whose transaction is not open here
/// yet (those with a guard); the refused ones get their error in the response and leave
/// `ready`.
async fn verify(ctx: &Ctx<'_>, req: &ProduceRequest, ready: &mut Vec<Ready>, resp: &mut ProduceResponse) {
    let asking: Vec<usize> = (0..ready.len()).filter(|i| ready[*i].txn.is_some_and(|t| t.guard.is_some())).collect();
    let (Some(first), Some(id)) = (asking.first(), req.transactional_id.as_ref()) else { return };
    let Some(txn) = ready[*first].txn else { return };
    let tps: Vec<TopicPartition> = asking
        .iter()
        .map(|i| TopicPartition::new(ready[*i].topic.meta.name.as_str(), ready[*i].partition.index))
        .collect();
    let add = ctx.version >= ADDS_PARTITIONS_FROM;
    let verdicts = ctx.broker.txns.verify_at_coordinator(id.as_str(), txn.producer_id, txn.epoch, &tps, add).await;
    let mut refused = Vec::new();
    for (i, v) in asking.iter().zip(verdicts) {
        let code = match v {
            Verdict::InTransaction => Some(0),
            Verdict::Refused(c) => Some(c),
            Verdict::Unreachable => None,
        };
        if let Err(e) = BrokerError::from_txn_verdict(code, ctx.version) {
            let r = &ready[*i];
            tracing::debug!(topic = %r.topic.meta.name, partition = r.partition.index, error = %e, "transaction verification refused");
            resp.responses[r.topic_slot].partition_responses[r.resp_index] = partition_error(r.partition.index, &e);
            refused.push(*i);
        }
    }
    let mut i = 0;
    ready.retain(|_| {
        i += 1;
        !refused.contains(&(i - 1))
    });
}

pub async fn handle(ctx: &Ctx<'_>, req: ProduceRequest) -> Option<ProduceResponse> {
    let b = ctx.broker;
    let acks = req.acks;
    let mut resp = ProduceResponse::default();
    let mut ready: Vec<Ready> = Vec::new();
    let mut self_fenced = false;
    let now = now_ms();
    // WRITE on the transactional id, then on each topic (an unknown topic too: the answer does
    // not tell an unauthorized client which topics exist), as Kafka.
    let txn_auth = match &req.transactional_id {
        Some(id) => ctx.check_txn(Operation::Write, id.as_str()),
        None => Ok(()),
    };
    for td in &req.topic_data {
        let mut tr = TopicProduceResponse::default();
        tr.name = td.name.clone();
        tr.topic_id = td.topic_id;
        let topic = if ctx.version >= 13 { b.topic_by_id(td.topic_id) } else { b.topic(td.name.0.as_str()) };
        let name = topic.as_ref().map_or(td.name.0.as_str(), |t| t.meta.name.as_str());
        let auth = txn_auth
            .clone()
            .and_then(|()| if name.is_empty() { Ok(()) } else { ctx.check_topic(Operation::Write, name) });
        for pd in &td.partition_data {
            let records = pd.records.clone().unwrap_or_default();
            let slot = (resp.responses.len(), tr.partition_responses.len());
            match auth.clone().and_then(|()| validate(ctx, &req, topic.as_ref(), pd.index, records, now, slot)) {
                Ok(r) => {
                    ready.push(r);
                    tr.partition_responses.push(partition_error(pd.index, &BrokerError::OperationNotAttempted));
                }
                Err(e) => {
                    self_fenced |= matches!(e, BrokerError::SelfFenced(_));
                    tr.partition_responses.push(partition_error(pd.index, &e));
                }
            }
        }
        resp.responses.push(tr);
    }
    if self_fenced {
        // The requests this client pipelined behind this one were sent before it learns of the
        // refusal: served once this broker is confirmed unfenced again (a heartbeat away), an
        // idempotent producer's later batch would be written before the refused one, whose
        // retry then fails OUT_OF_ORDER_SEQUENCE_NUMBER until it expires. Closing the connection
        // after the answer refuses them all; the client retries them in order.
        tracing::debug!("refused a produce while not confirmed unfenced: closing the connection after the answer");
        ctx.applied.close_after();
    }
    verify(ctx, &req, &mut ready, &mut resp).await;
    let mut pending: Vec<Pending> = Vec::new();
    // Partitions that owe a `flush.messages` flush: synced together once all are appended.
    let mut flushes: Vec<(usize, usize, Arc<Partition>)> = Vec::new();
    let mut appended = 0u64;
    for r in ready {
        let slot = &mut resp.responses[r.topic_slot].partition_responses[r.resp_index];
        let min_insync = (acks == -1).then_some(r.topic.min_insync);
        match r.partition.append(&r.records, &r.batches, min_insync, now, r.txn, Flush::Owed) {
            Ok(a) => {
                appended += a.records as u64;
                b.stats.produced(a.records as u64, a.bytes as u64);
                r.topic.counters.produced(a.records as u64, a.bytes as u64);
                let mut pr = PartitionProduceResponse::default();
                pr.index = r.partition.index;
                pr.base_offset = a.base_offset;
                pr.log_append_time_ms = a.log_append_time;
                pr.log_start_offset = a.log_start_offset;
                *slot = pr;
                if a.flush_owed {
                    flushes.push((r.topic_slot, r.resp_index, r.partition.clone()));
                }
                if acks == -1 {
                    pending.push(Pending {
                        topic: r.topic_slot,
                        partition: r.partition.clone(),
                        resp_index: r.resp_index,
                        wait_for: a.last_offset + 1,
                    });
                }
            }
            Err(e) => {
                if matches!(e, BrokerError::OutOfOrderSequence(_) | BrokerError::InvalidProducerEpoch(_)) {
                    // What an idempotent producer then does (bump its epoch, fail the batch)
                    // is visible to the application: say where the log stood.
                    let at = r.partition.offsets().ok();
                    tracing::info!(topic = %r.topic.meta.name, partition = r.partition.index, error = %e,
                        leader_epoch = at.map(|o| o.leader_epoch), log_end = at.map(|o| o.log_end), "produce refused");
                } else {
                    tracing::debug!(topic = %r.topic.meta.name, partition = r.partition.index, error = %e, "produce failed");
                }
                *slot = partition_error(r.partition.index, &e);
            }
        }
    }
    ctx.trace.set(|| KeyValue::new("messaging.batch.message_count", appended as i64));
    ctx.trace.set(|| KeyValue::new("kafka.acks", i64::from(acks)));
    // Every append is done: the connection's next request may start while this one waits.
    ctx.applied.fire();
    // Owed flushes run side by side, outside the partitions' locks; the answer (and, through
    // the high watermark, every reader) waits for them.
    let flush = if flushes.is_empty() { Span::default() } else { ctx.trace.child("log flush") };
    flush.set(|| KeyValue::new("oxbow.partitions", flushes.len() as i64));
    let synced = futures_util::future::join_all(flushes.iter().map(|(.., p)| p.flush_owed())).await;
    for ((topic, index, _), r) in flushes.iter().zip(synced) {
        if let Err(e) = r {
            flush.fail(|| e.to_string());
            let slot = &mut resp.responses[*topic].partition_responses[*index];
            *slot = partition_error(slot.index, &e);
            pending.retain(|p| (p.topic, p.resp_index) != (*topic, *index));
        }
    }
    drop(flush);
    if acks == 0 {
        return None;
    }
    // acks=all: wait until the ISR has every write (immediate with one replica). The request's
    // timeout is one deadline for all its partitions, as in Kafka's produce purgatory.
    let deadline = Instant::now() + Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    // Only writes the in-sync replicas do not have yet wait (with one replica, none does): they
    // are what the produce purgatory counts, and what the replication wait span covers.
    pending.retain(|p| p.partition.high_watermark() < p.wait_for);
    let _parked = (!pending.is_empty()).then(|| ctx.broker.stats.waiting(Purgatory::Produce));
    let wait = if pending.is_empty() { Span::default() } else { ctx.trace.child("replication wait") };
    wait.set(|| KeyValue::new("oxbow.partitions", pending.len() as i64));
    for p in pending {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = match p.partition.wait_for_hw(p.wait_for, left).await {
            Ok(()) => continue,
            Err(HwWait::TimedOut) => BrokerError::TimedOut("timed out waiting for in-sync replicas".into()),
            Err(HwWait::NotLeader) => BrokerError::NotLeader(
                "this broker stopped leading the partition before the in-sync replicas had the write".into(),
            ),
        };
        wait.fail(|| e.to_string());
        let slot = &mut resp.responses[p.topic].partition_responses[p.resp_index];
        *slot = partition_error(slot.index, &e);
    }
    Some(resp)
}
