//! Produce: validate every batch, append, and for acks=all wait until the high watermark covers
//! the write (the ISR rule of `crate::replica`). acks=0 gets no response at all.

use std::time::{Duration, Instant};

use oxbow_log::batch::validate_produce;
use oxbow_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use oxbow_protocol::messages::{ProduceRequest, ProduceResponse};

use super::Ctx;
use super::util::s;
use crate::clock::now_ms;
use crate::errors::BrokerError;
use crate::partition::HwWait;

struct Pending {
    topic: usize,
    partition: std::sync::Arc<crate::partition::Partition>,
    resp_index: usize,
    wait_for: i64,
}

/// Topics only the coordinators write.
fn is_internal(name: &str) -> bool {
    name == crate::coordinator::OFFSETS_TOPIC || name == oxbow_txn::shard::TRANSACTION_STATE_TOPIC
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

pub async fn handle(ctx: &Ctx<'_>, req: ProduceRequest) -> Option<ProduceResponse> {
    let b = ctx.broker;
    let acks = req.acks;
    let mut resp = ProduceResponse::default();
    let mut pending: Vec<Pending> = Vec::new();
    let now = now_ms();
    for td in req.topic_data {
        let mut tr = TopicProduceResponse::default();
        tr.name = td.name.clone();
        tr.topic_id = td.topic_id;
        let topic = if ctx.version >= 13 { b.topic_by_id(td.topic_id) } else { b.topic(td.name.0.as_str()) };
        for pd in td.partition_data {
            let fail = |e: BrokerError| partition_error(pd.index, &e);
            if !matches!(acks, -1..=1) {
                tr.partition_responses.push(fail(BrokerError::InvalidRequiredAcks(acks)));
                continue;
            }
            if let Some(internal) = topic.as_ref().map(|t| t.meta.name.as_str()).filter(|n| is_internal(n)) {
                tr.partition_responses
                    .push(fail(BrokerError::InvalidTopic(format!("Cannot append to internal topic {internal}"))));
                continue;
            }
            let Some(topic) = topic.as_ref() else {
                tr.partition_responses.push(fail(BrokerError::unknown_topic(ctx.version >= 13)));
                continue;
            };
            let partition = match topic.led(pd.index) {
                Ok(p) => p,
                Err(e) => {
                    tr.partition_responses.push(fail(e));
                    continue;
                }
            };
            let records = pd.records.unwrap_or_default();
            let batches = match validate_produce(&records, topic.log_config.max_message_bytes) {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(topic = %topic.meta.name, partition = pd.index, error = %e, "rejected batch");
                    tr.partition_responses.push(fail(e.into()));
                    continue;
                }
            };
            if req.transactional_id.is_none() && batches.iter().any(|b| b.header.is_transactional()) {
                tr.partition_responses.push(fail(BrokerError::TransactionalIdAuthorizationFailed(
                    "transactional records need the producer's transactional id".into(),
                )));
                continue;
            }
            if topic.log_config.cleanup_compact
                && let Err(e) = oxbow_log::cleaner::check_keys(&records)
            {
                tr.partition_responses.push(fail(e.into()));
                continue;
            }
            let min_insync = (acks == -1).then_some(topic.min_insync);
            let fsync = topic.log_config.flush_messages != i64::MAX;
            let append = || partition.append(&records, &batches, min_insync, now);
            let result = if fsync { tokio::task::block_in_place(append) } else { append() };
            match result {
                Ok(r) => {
                    b.stats.produced(r.records as u64, r.bytes as u64);
                    let mut pr = PartitionProduceResponse::default();
                    pr.index = pd.index;
                    pr.base_offset = r.base_offset;
                    pr.log_append_time_ms = r.log_append_time;
                    pr.log_start_offset = r.log_start_offset;
                    if acks == -1 {
                        pending.push(Pending {
                            topic: resp.responses.len(),
                            partition: partition.clone(),
                            resp_index: tr.partition_responses.len(),
                            wait_for: r.last_offset + 1,
                        });
                    }
                    tr.partition_responses.push(pr);
                }
                Err(e) => {
                    if !matches!(e, BrokerError::OutOfOrderSequence(_)) {
                        tracing::debug!(topic = %topic.meta.name, partition = pd.index, error = %e, "produce failed");
                    }
                    tr.partition_responses.push(fail(e));
                }
            }
        }
        resp.responses.push(tr);
    }
    if acks == 0 {
        return None;
    }
    // Every append is done: the connection's next request may start while this one waits.
    ctx.applied.fire();
    // acks=all: wait until the ISR has every write (immediate with one replica). The request's
    // timeout is one deadline for all its partitions, as in Kafka's produce purgatory.
    let deadline = Instant::now() + Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    for p in pending {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = match p.partition.wait_for_hw(p.wait_for, left).await {
            Ok(()) => continue,
            Err(HwWait::TimedOut) => BrokerError::TimedOut("timed out waiting for in-sync replicas".into()),
            Err(HwWait::NotLeader) => BrokerError::NotLeader(
                "this broker stopped leading the partition before the in-sync replicas had the write".into(),
            ),
        };
        let slot = &mut resp.responses[p.topic].partition_responses[p.resp_index];
        *slot = partition_error(slot.index, &e);
    }
    Some(resp)
}
