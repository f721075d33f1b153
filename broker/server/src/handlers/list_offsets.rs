//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), and
//! offsets by timestamp (the first record whose timestamp is at or after the target).
//!
//! As Kafka's: "latest" is the last fetchable offset, the high watermark, or under
//! `isolation_level` READ_COMMITTED the last stable offset; a timestamp lookup that lands at or
//! past it finds nothing.

use oxbow_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use oxbow_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::Ctx;
use crate::errors::BrokerError;
use crate::partition::Partition;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// (offset, timestamp) for one partition; `committed`: READ_COMMITTED.
fn lookup(p: &Partition, ts: i64, leader_epoch: i32, committed: bool) -> Result<(i64, i64), BrokerError> {
    p.check_leader_epoch(leader_epoch)?;
    let o = p.offsets()?;
    let fetchable = if committed { o.last_stable } else { o.high_watermark };
    let found = |r: Option<(i64, i64)>| r.filter(|(off, _)| *off < fetchable).unwrap_or((-1, -1));
    match ts {
        LATEST => Ok((fetchable, -1)),
        EARLIEST | EARLIEST_LOCAL => Ok((o.log_start, -1)),
        MAX_TIMESTAMP => Ok(found(p.with_log(|l| l.max_timestamp_offset())??)),
        t if t >= 0 => Ok(found(p.with_log(|l| l.offset_for_timestamp(t))??)),
        // Tiered-storage specs (-5 latest tiered, -6 earliest pending upload): no remote log here.
        _ => Ok((-1, -1)),
    }
}

pub async fn handle(ctx: &Ctx<'_>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let b = ctx.broker;
    let mut resp = ListOffsetsResponse::default();
    let committed = ctx.version >= 2 && req.isolation_level == 1;
    for t in req.topics {
        let topic = b.topic(t.name.0.as_str());
        let auth = ctx.check_topic(oxbow_meta::acl::Operation::Describe, t.name.0.as_str());
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for rp in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = rp.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            pr.leader_epoch = -1;
            let part = match &topic {
                _ if auth.is_err() => Err(BrokerError::TopicAuthorizationFailed),
                None => Err(BrokerError::UnknownTopic("unknown topic or partition".into())),
                Some(t) => t.led(rp.partition_index),
            };
            let result = part.and_then(|p| {
                lookup(p, rp.timestamp, rp.current_leader_epoch, committed).map(|r| (r, p.leader_epoch().unwrap_or(-1)))
            });
            match result {
                Ok(((offset, ts), epoch)) => {
                    pr.offset = offset;
                    pr.timestamp = ts;
                    if ctx.version >= 4 {
                        pr.leader_epoch = epoch;
                    }
                }
                Err(e) => pr.error_code = e.code(),
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
