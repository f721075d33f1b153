//! OffsetsForLeaderEpoch (KIP-101, KIP-279, KIP-320): for each partition this broker leads, the
//! largest leader epoch at most the one asked for and the offset where it ends. Followers use it
//! to find where their log diverges from the leader's; consumers to detect truncation.

use oxbow_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use oxbow_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::Ctx;
use crate::errors::BrokerError;

pub async fn handle(ctx: &Ctx<'_>, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let mut resp = OffsetForLeaderEpochResponse::default();
    // Followers (a replica id) need CLUSTER_ACTION, clients DESCRIBE on the topic.
    let follower = req.replica_id.0 >= 0;
    let follower_allowed = !follower || ctx.cluster_action_allowed();
    for t in req.topics {
        let allowed = follower_allowed
            && (follower || ctx.topic_allowed(oxbow_meta::acl::Operation::Describe, t.topic.0.as_str()));
        let topic = ctx.broker.topic(t.topic.0.as_str()).filter(|_| allowed);
        let mut tr = OffsetForLeaderTopicResult::default();
        tr.topic = t.topic.clone();
        for p in t.partitions {
            let mut r = EpochEndOffset::default();
            r.partition = p.partition;
            let answer = topic
                .as_ref()
                .ok_or_else(|| {
                    if allowed {
                        BrokerError::UnknownTopic("unknown topic".into())
                    } else {
                        BrokerError::TopicAuthorizationFailed
                    }
                })
                .and_then(|t| t.led(p.partition))
                .and_then(|part| {
                    part.check_leader_epoch(p.current_leader_epoch)?;
                    part.end_offset_for_epoch(p.leader_epoch)
                });
            match answer {
                Ok((epoch, end)) => {
                    r.leader_epoch = epoch;
                    r.end_offset = end;
                }
                Err(e) => {
                    r.error_code = e.code();
                    r.leader_epoch = -1;
                    r.end_offset = -1;
                }
            }
            tr.partitions.push(r);
        }
        resp.topics.push(tr);
    }
    resp
}
