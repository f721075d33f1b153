//! Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch (single and multi-group),
//! OffsetDelete.
//! Partitions of unknown topics and oversized metadata are refused per partition, as Kafka
//! does, before the group is asked.

use oxbow_group::records::OffsetValue;
use oxbow_group::{GroupError, answer_code};
use oxbow_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use oxbow_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use oxbow_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use oxbow_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use oxbow_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use oxbow_txn::TopicPartition;

use oxbow_meta::acl::Operation;

use super::Ctx;
use super::util::s;
use crate::clock::now_ms;
use crate::coordinator::{CommitEntry, Committer, FetchedOffset, OFFSETS_TOPIC, TxnCommitter};
use crate::errors::BrokerError;
use crate::partition::TxnWrite;
use crate::txn_coordinator::Verdict;

/// TxnOffsetCommit v5 comes from transaction version 2 producers: the group coordinator adds
/// its partition to the transaction instead of only verifying it.
const ADDS_PARTITION_FROM: i16 = 5;

/// Whether `topic` has partition `p` in this broker's metadata.
fn partition_exists(ctx: &Ctx<'_>, topic: &str, p: i32) -> bool {
    ctx.broker.topic(topic).is_some_and(|t| p >= 0 && p < t.meta.partitions)
}

/// One partition of an OffsetCommit or TxnOffsetCommit, checked before the group is asked:
/// an unknown topic or partition, metadata over `offset.metadata.max.bytes`.
fn check_entry(
    ctx: &Ctx<'_>,
    topic: &str,
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<&oxbow_protocol::StrBytes>,
) -> Result<CommitEntry, BrokerError> {
    let metadata = metadata.map(|m| m.to_string()).unwrap_or_default();
    if !partition_exists(ctx, topic, partition) {
        Err(BrokerError::unknown_topic(false))
    } else if !ctx.broker.groups.metadata_fits(&metadata) {
        Err(BrokerError::OffsetMetadataTooLarge)
    } else {
        Ok(CommitEntry { topic: topic.to_string(), partition, offset, leader_epoch, metadata })
    }
}

pub async fn offset_commit(ctx: &Ctx<'_>, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let b = ctx.broker;
    let mut resp = OffsetCommitResponse::default();
    // (topic slot, partition slot) of each entry sent to the coordinator.
    let mut slots = Vec::new();
    let mut entries = Vec::new();
    // READ on the group (else every partition is GROUP_AUTHORIZATION_FAILED), then on each topic.
    let group_auth = ctx.check_group(Operation::Read, req.group_id.0.as_str());
    for t in &req.topics {
        let mut rt = OffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        rt.topic_id = t.topic_id;
        for p in &t.partitions {
            let mut rp = OffsetCommitResponsePartition::default();
            rp.partition_index = p.partition_index;
            let epoch = if ctx.version >= 6 { p.committed_leader_epoch } else { -1 };
            let (offset, metadata) = (p.committed_offset, p.committed_metadata.as_ref());
            let checked = group_auth
                .clone()
                .and_then(|()| ctx.check_topic(Operation::Read, t.name.0.as_str()))
                .and_then(|()| check_entry(ctx, t.name.0.as_str(), p.partition_index, offset, epoch, metadata));
            match checked {
                Ok(e) => {
                    slots.push((resp.topics.len(), rt.partitions.len()));
                    entries.push(e);
                }
                Err(e) => rp.error_code = e.code(),
            }
            rt.partitions.push(rp);
        }
        resp.topics.push(rt);
    }
    if entries.is_empty() {
        return resp;
    }
    let by = Committer {
        member: req.member_id.to_string(),
        instance: req.group_instance_id.as_ref().map(|i| i.to_string()),
        generation: req.generation_id_or_member_epoch,
        api_version: ctx.version,
    };
    let (bb, group) = (b.clone(), req.group_id.0.to_string());
    let result = b
        .groups
        .detached(async move { bb.groups.commit(&bb.view, &group, &by, entries).await })
        .await
        .unwrap_or(Err(GroupError::UnknownServerError));
    if let Err(e) = result {
        tracing::debug!(group = %req.group_id.0.as_str(), error = ?e, "OffsetCommit refused");
    }
    for (t, p) in slots {
        resp.topics[t].partitions[p].error_code = answer_code(&result);
    }
    resp
}

/// TxnOffsetCommit: checked like OffsetCommit, then (KIP-890) the group's `__consumer_offsets`
/// partition is verified in, or for v5 added to, the producer's transaction at its transaction
/// coordinator, then the offsets are written as the producer's transactional batch. They become
/// the group's when the transaction commits.
pub async fn txn_offset_commit(ctx: &Ctx<'_>, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let b = ctx.broker;
    let mut resp = TxnOffsetCommitResponse::default();
    let mut slots = Vec::new();
    let mut entries = Vec::new();
    // WRITE on the transactional id, READ on the group, then READ on each topic, as Kafka.
    let auth = ctx
        .check_txn(Operation::Write, req.transactional_id.as_str())
        .and_then(|()| ctx.check_group(Operation::Read, req.group_id.0.as_str()));
    for t in &req.topics {
        let mut rt = TxnOffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        for p in &t.partitions {
            let mut rp = TxnOffsetCommitResponsePartition::default();
            rp.partition_index = p.partition_index;
            let epoch = if ctx.version >= 2 { p.committed_leader_epoch } else { -1 };
            let (offset, metadata) = (p.committed_offset, p.committed_metadata.as_ref());
            let checked = auth
                .clone()
                .and_then(|()| ctx.check_topic(Operation::Read, t.name.0.as_str()))
                .and_then(|()| check_entry(ctx, t.name.0.as_str(), p.partition_index, offset, epoch, metadata));
            match checked {
                Ok(e) => {
                    slots.push((resp.topics.len(), rt.partitions.len()));
                    entries.push(e);
                }
                Err(e) => rp.error_code = e.code(),
            }
            rt.partitions.push(rp);
        }
        resp.topics.push(rt);
    }
    if entries.is_empty() {
        return resp;
    }
    let code = match verify_txn_offsets(ctx, &req).await {
        Err(e) => {
            tracing::debug!(group = %req.group_id.0.as_str(), error = %e, "TxnOffsetCommit refused");
            e.code()
        }
        Ok(txn) => {
            let by = TxnCommitter {
                member: req.member_id.to_string(),
                instance: req.group_instance_id.as_ref().map(|i| i.to_string()),
                generation: req.generation_id,
                txn,
            };
            let (bb, group) = (b.clone(), req.group_id.0.to_string());
            let result = b
                .groups
                .detached(async move { bb.groups.txn_commit(&bb.view, &group, &by, entries).await })
                .await
                .unwrap_or(Err(GroupError::UnknownServerError));
            if let Err(e) = result {
                tracing::debug!(group = %req.group_id.0.as_str(), error = ?e, "TxnOffsetCommit refused");
            }
            answer_code(&result)
        }
    };
    for (t, p) in slots {
        resp.topics[t].partitions[p].error_code = code;
    }
    resp
}

/// The group's coordinator partition in the producer's transaction: verified (or added, v5)
/// unless the transaction already wrote there. The producer's write, with its guard.
async fn verify_txn_offsets(ctx: &Ctx<'_>, req: &TxnOffsetCommitRequest) -> Result<TxnWrite, BrokerError> {
    let b = ctx.broker;
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let part = b.groups.partition_of(&b.view, req.group_id.0.as_str()).map_err(BrokerError::Group)?;
    let add = ctx.version >= ADDS_PARTITION_FROM;
    let guard = if b.config.transactions.verification || add {
        part.start_txn_verification(pid, epoch, add, now_ms())?
    } else {
        None
    };
    let txn = TxnWrite { producer_id: pid, epoch, guard };
    if guard.is_none() {
        return Ok(txn);
    }
    let tps = [TopicPartition::new(OFFSETS_TOPIC, part.index)];
    let verdicts = b.txns.verify_at_coordinator(req.transactional_id.as_str(), pid, epoch, &tps, add).await;
    let verdict = verdicts.first().copied().unwrap_or(Verdict::Unreachable);
    let code = match verdict {
        Verdict::InTransaction => Some(0),
        Verdict::Refused(c) => Some(c),
        Verdict::Unreachable => None,
    };
    BrokerError::from_txn_offset_verdict(code, ctx.version)?;
    Ok(txn)
}

fn no_offset() -> OffsetValue {
    OffsetValue { offset: -1, leader_epoch: -1, metadata: String::new(), commit_timestamp: -1, expire_timestamp: None }
}

/// Fills a fetched partition (the v8+ and older response types have the same fields).
macro_rules! fill_fetched {
    ($rp:ident, $p:expr, $v:expr) => {{
        let v = match $v {
            Ok(v) => v.unwrap_or_else(no_offset),
            Err(code) => {
                $rp.error_code = code;
                no_offset()
            }
        };
        $rp.partition_index = $p;
        $rp.committed_offset = v.offset;
        $rp.committed_leader_epoch = v.leader_epoch;
        $rp.metadata = Some(s(v.metadata));
    }};
}

/// A partition's committed offset, or its error code.
type PartitionOffset = (i32, Result<Option<OffsetValue>, i16>);
type Fetched = Result<Vec<(String, Vec<PartitionOffset>)>, i16>;
/// Topics and their partitions, as an OffsetFetch names them.
type Wanted = Vec<(String, Vec<i32>)>;

/// `member`: the member id and epoch of a v9+ request (checked against consumer protocol groups).
/// Needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); topics the principal may not
/// describe are left out of an all-topics answer and TOPIC_AUTHORIZATION_FAILED when named, as
/// Kafka.
async fn fetch_group(
    ctx: &Ctx<'_>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(Option<&str>, i32)>,
    stable: bool,
) -> Fetched {
    ctx.check_group(Operation::Describe, group).map_err(|e| e.code())?;
    let allowed = |t: &str| ctx.topic_allowed(Operation::Describe, t);
    let (asked, refused): (Option<Wanted>, Wanted) = match topics {
        None => (None, Vec::new()),
        Some(ts) => {
            let (ok, no): (Vec<_>, Vec<_>) = ts.into_iter().partition(|(t, _)| allowed(t));
            (Some(ok), no)
        }
    };
    let all = asked.is_none();
    let fetched: Vec<(String, Vec<FetchedOffset>)> = match asked {
        // Every named topic refused: nothing to ask the coordinator.
        Some(ts) if ts.is_empty() && !refused.is_empty() => Vec::new(),
        asked => ctx
            .broker
            .groups
            .fetch_offsets(&ctx.broker.view, group, asked, member, stable)
            .await
            .map_err(|e| e.code())?,
    };
    let mut out: Vec<(String, Vec<PartitionOffset>)> = fetched
        .into_iter()
        .filter(|(t, _)| !all || allowed(t))
        .map(|(t, ps)| (t, ps.into_iter().map(|(p, v)| (p, v.map_err(|e| e.code()))).collect()))
        .collect();
    let denied = BrokerError::TopicAuthorizationFailed.code();
    out.extend(refused.into_iter().map(|(t, ps)| (t, ps.into_iter().map(|p| (p, Err(denied))).collect())));
    Ok(out)
}

pub async fn offset_fetch(ctx: &Ctx<'_>, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if ctx.version >= 8 {
        for g in &req.groups {
            let wanted = g
                .topics
                .as_ref()
                .map(|ts| ts.iter().map(|t| (t.name.0.to_string(), t.partition_indexes.clone())).collect());
            let mut rg = OffsetFetchResponseGroup::default();
            rg.group_id = g.group_id.clone();
            // v9+ names the member (consumer protocol groups check it); older versions do not.
            let member = (ctx.version >= 9).then(|| (g.member_id.as_ref().map(|m| m.as_str()), g.member_epoch));
            match fetch_group(ctx, g.group_id.0.as_str(), wanted, member, req.require_stable).await {
                Ok(topics) => {
                    for (name, parts) in topics {
                        let mut rt = OffsetFetchResponseTopics::default();
                        rt.name = super::util::topic_name(&name);
                        for (p, v) in parts {
                            let mut rp = OffsetFetchResponsePartitions::default();
                            fill_fetched!(rp, p, v);
                            rt.partitions.push(rp);
                        }
                        rg.topics.push(rt);
                    }
                }
                Err(code) => rg.error_code = code,
            }
            resp.groups.push(rg);
        }
        return resp;
    }
    let wanted: Option<Vec<(String, Vec<i32>)>> =
        req.topics.as_ref().map(|ts| ts.iter().map(|t| (t.name.0.to_string(), t.partition_indexes.clone())).collect());
    match fetch_group(ctx, req.group_id.0.as_str(), wanted.clone(), None, req.require_stable).await {
        Ok(topics) => {
            for (name, parts) in topics {
                let mut rt = OffsetFetchResponseTopic::default();
                rt.name = super::util::topic_name(&name);
                for (p, v) in parts {
                    let mut rp = OffsetFetchResponsePartition::default();
                    fill_fetched!(rp, p, v);
                    rt.partitions.push(rp);
                }
                resp.topics.push(rt);
            }
        }
        Err(code) => {
            resp.error_code = code;
            // v1 has no top-level error: each partition carries it.
            for (name, parts) in wanted.unwrap_or_default() {
                let mut rt = OffsetFetchResponseTopic::default();
                rt.name = super::util::topic_name(&name);
                for p in parts {
                    let mut rp = OffsetFetchResponsePartition::default();
                    fill_fetched!(rp, p, Ok::<_, i16>(None));
                    rp.error_code = code;
                    rt.partitions.push(rp);
                }
                resp.topics.push(rt);
            }
        }
    }
    resp
}

pub async fn offset_delete(ctx: &Ctx<'_>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let b = ctx.broker;
    let mut resp = OffsetDeleteResponse::default();
    // DELETE on the group, READ on each topic, as Kafka.
    if let Err(e) = ctx.check_group(Operation::Delete, req.group_id.0.as_str()) {
        resp.error_code = e.code();
        return resp;
    }
    let mut asked = Vec::new();
    let mut slots = Vec::new();
    for t in &req.topics {
        let mut rt = OffsetDeleteResponseTopic::default();
        rt.name = t.name.clone();
        for p in &t.partitions {
            let mut rp = OffsetDeleteResponsePartition::default();
            rp.partition_index = p.partition_index;
            if !ctx.topic_allowed(Operation::Read, t.name.0.as_str()) {
                rp.error_code = BrokerError::TopicAuthorizationFailed.code();
            } else if partition_exists(ctx, t.name.0.as_str(), p.partition_index) {
                slots.push((resp.topics.len(), rt.partitions.len()));
                asked.push((t.name.0.to_string(), p.partition_index));
            } else {
                rp.error_code = BrokerError::unknown_topic(false).code();
            }
            rt.partitions.push(rp);
        }
        resp.topics.push(rt);
    }
    let (bb, group) = (b.clone(), req.group_id.0.to_string());
    let deleted = b
        .groups
        .detached(async move { bb.groups.delete_offsets(&bb.view, &group, &asked).await })
        .await
        .unwrap_or(Err(GroupError::UnknownServerError));
    match deleted {
        Ok(errors) => {
            for ((t, p), a) in slots.into_iter().zip(errors) {
                resp.topics[t].partitions[p].error_code = answer_code(&a);
            }
        }
        Err(e) => {
            resp.error_code = e.code();
            resp.topics.clear();
        }
    }
    resp
}
