//! Produce: validate every batch, append, and for acks=all wait until the high watermark covers
//! the write (the ISR rule of `crate::replica`). acks=0 gets no response at all.

use std::time::Duration;

use oxbow_log::batch::validate_produce;
use oxbow_protocol::ResponseError;
use oxbow_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use oxbow_protocol::messages::{ProduceRequest, ProduceResponse};

use super::Ctx;
use super::util::s;
use crate::broker::now_ms;
use crate::errors::ApiError;
use crate::partition::HwWait;

struct Pending {
    topic: usize,
    partition: std::sync::Arc<crate::partition::Partition>,
    resp_index: usize,
    wait_for: i64,
}

fn partition_error(index: i32, e: &ApiError) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default();
    r.index = index;
    r.error_code = e.code();
    r.error_message = Some(s(e.message.clone()));
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
            let fail = |e: ApiError| partition_error(pd.index, &e);
            if !matches!(acks, -1..=1) {
                tr.partition_responses
                    .push(fail(ApiError::new(ResponseError::InvalidRequiredAcks, format!("acks={acks}"))));
                continue;
            }
            if req.transactional_id.is_some() {
                tr.partition_responses.push(fail(ApiError::new(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactions are not supported yet",
                )));
                continue;
            }
            if topic.as_ref().is_some_and(|t| t.meta.name == crate::coordinator::OFFSETS_TOPIC) {
                tr.partition_responses.push(fail(ApiError::new(
                    ResponseError::InvalidTopicException,
                    "Cannot append to internal topic __consumer_offsets",
                )));
                continue;
            }
            let Some(topic) = topic.as_ref() else {
                let e = if ctx.version >= 13 {
                    ResponseError::UnknownTopicId
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                tr.partition_responses.push(fail(ApiError::new(e, "unknown topic")));
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
                    if e.error != ResponseError::OutOfOrderSequenceNumber {
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
    // acks=all: wait until the ISR has every write (immediate with one replica).
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    for p in pending {
        let e = match p.partition.wait_for_hw(p.wait_for, timeout).await {
            Ok(()) => continue,
            Err(HwWait::TimedOut) => {
                ApiError::new(ResponseError::RequestTimedOut, "timed out waiting for in-sync replicas")
            }
            Err(HwWait::NotLeader) => ApiError::new(
                ResponseError::NotLeaderOrFollower,
                "this broker stopped leading the partition before the in-sync replicas had the write",
            ),
        };
        let slot = &mut resp.responses[p.topic].partition_responses[p.resp_index];
        *slot = partition_error(slot.index, &e);
    }
    Some(resp)
}
