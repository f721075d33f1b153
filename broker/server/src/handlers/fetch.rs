//! Fetch: whole batches from the batch containing the fetch offset, bounded by the high
//! watermark and the request's byte limits, with long polling on `max_wait_ms`/`min_bytes`.
//!
//! The records stay in their segment files: each partition's answer is a slice of one, located by
//! batch headers and sent from the page cache when the answer is written ([`crate::zero_copy`]),
//! unless `oxbow.fetch.zero.copy` is off (then they are read into the answer).
//!
//! Sessions (KIP-227, [`crate::fetch_session`]): a follower's fetch may be incremental, naming
//! only the partitions whose fetch state changed and answered only with those that have news;
//! it is read here as a fetch of every partition of its session. Consumers are answered
//! sessionless (session id 0), which is always valid; they keep sending full fetch requests.
//!
//! A fetch with a replica id is a follower's (replication): it reads up to the log end rather
//! than the high watermark, waits on the log end, and its fetch offset is the follower's log
//! end, which moves the high watermark and may bring the follower into the ISR. A follower out of
//! the ISR of a partition this leader throttles (`leader.replication.throttled.replicas`) gets
//! no records while the leader's throttle is exceeded (its offsets still), as Kafka's
//! `shouldLeaderThrottle`; every throttled partition's bytes count toward the throttle.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::select_all;
use oxbow_log::{FileSlice, LogError, ReadPlan, ReadStart};
use oxbow_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use oxbow_protocol::messages::{FetchRequest, FetchResponse};
use tokio::sync::watch;

use oxbow_meta::acl::Operation;

use super::Ctx;
use crate::broker::Topic;
use crate::errors::BrokerError;
use crate::partition::{Marks, Partition};
use crate::stats::{Purgatory, TopicCounters};
use crate::zero_copy;

/// A partition the request asks for, resolved once.
struct Want {
    topic_slot: usize,
    topic_id: uuid::Uuid,
    partition_index: i32,
    fetch_offset: i64,
    /// A follower's own log start offset (-1 from consumers and old followers).
    log_start: i64,
    max_bytes: usize,
    leader_epoch: i32,
    /// A follower fetch of a partition this leader throttles.
    throttled: bool,
    /// ... and the follower is not in its ISR: it waits while the throttle is exceeded.
    throttle_applies: bool,
    target: Result<Arc<Partition>, BrokerError>,
    /// The topic's traffic counters (None: a topic this broker does not know).
    counters: Option<Arc<TopicCounters>>,
}

/// What one pass over the wanted partitions gathered.
struct Pass {
    topics: Vec<FetchableTopicResponse>,
    total: usize,
    /// Bytes read for each want, in the wants' order (the per-topic metrics).
    read: Vec<usize>,
    /// Of those, bytes of throttled partitions (the leader's replication throttle counts them).
    throttled: usize,
    any_error: bool,
    /// Records left in their files, in the order of the response's partitions.
    slices: Vec<FileSlice>,
}

fn empty_partition(index: i32) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = index;
    p.high_watermark = -1;
    p.last_stable_offset = -1;
    p.log_start_offset = -1;
    p.preferred_read_replica = oxbow_protocol::messages::BrokerId(-1);
    p.records = Some(Bytes::new());
    p
}

/// One pass over every wanted partition.
fn read_once(
    ctx: &Ctx<'_>,
    wants: &[Want],
    topics: &[FetchableTopicResponse],
    max_total: usize,
    read_committed: bool,
    follower: Option<i32>,
) -> Pass {
    let mut out: Vec<FetchableTopicResponse> = topics.to_vec();
    let mut total = 0usize;
    let mut read = vec![0usize; wants.len()];
    let mut throttled = 0usize;
    let mut any_error = false;
    let mut slices = Vec::new();
    let zero_copy = ctx.broker.config.fetch_zero_copy;
    let now = crate::clock::now_ms();
    let hold_throttled = wants.iter().any(|w| w.throttle_applies) && ctx.broker.quotas.leader.exceeded(now);
    for (i, w) in wants.iter().enumerate() {
        let mut pd = empty_partition(w.partition_index);
        if read_committed {
            pd.aborted_transactions = Some(Vec::new());
        }
        match &w.target {
            Err(e) => {
                pd.error_code = e.code();
                any_error = true;
            }
            Ok(p) => {
                let budget = max_total.saturating_sub(total).min(w.max_bytes);
                let min_one = total == 0;
                let planned = match (p.check_leader_epoch(w.leader_epoch), follower) {
                    (Err(e), _) => Err((e, p.offsets().ok())),
                    (Ok(()), None) => p.read(w.fetch_offset, budget, min_one, read_committed),
                    (Ok(()), Some(replica)) => {
                        match p.follower_fetched(replica, w.fetch_offset, w.log_start, crate::clock::now_ms()) {
                            Ok(Some(change)) => ctx.broker.request_isr_change(w.topic_id, p.clone(), change),
                            Ok(None) => {}
                            Err(e) => tracing::debug!(error = %e, "follower fetch on a closed partition"),
                        }
                        p.read_for_follower(w.fetch_offset, budget.max(1))
                    }
                };
                match planned {
                    Ok((start, offsets)) => {
                        pd.high_watermark = offsets.high_watermark;
                        pd.last_stable_offset = offsets.last_stable;
                        pd.log_start_offset = offsets.log_start;
                        if let ReadStart::Plan(plan) = start
                            && (budget > 0 || min_one)
                            && !(w.throttle_applies && hold_throttled)
                        {
                            match records(&plan, zero_copy) {
                                Ok((records, slice, upper)) => {
                                    let n = records.len();
                                    total += n;
                                    read[i] += n;
                                    if w.throttled {
                                        throttled += n;
                                    }
                                    if read_committed {
                                        match aborted_in(p, w.fetch_offset, upper) {
                                            Ok(list) => pd.aborted_transactions = Some(list),
                                            Err(e) => {
                                                pd.error_code = e.code();
                                                any_error = true;
                                            }
                                        }
                                    }
                                    pd.records = Some(records);
                                    slices.extend(slice);
                                }
                                Err(e) => {
                                    let e: BrokerError = e.into();
                                    pd.error_code = e.code();
                                    any_error = true;
                                }
                            }
                        }
                    }
                    Err((e, offsets)) => {
                        pd.error_code = e.code();
                        if let Some(o) = offsets {
                            pd.high_watermark = o.high_watermark;
                            pd.last_stable_offset = o.last_stable;
                            pd.log_start_offset = o.log_start;
                        }
                        any_error = true;
                    }
                }
            }
        }
        out[w.topic_slot].partitions.push(pd);
    }
    Pass { topics: out, total, read, throttled, any_error, slices }
}

/// The records of a planned read: a placeholder for a slice of the segment file (zero copy) or
/// the bytes read, and the offset after the last batch (None: no batch). A slice smaller than
/// [`zero_copy::MIN_SLICE`] is read: copying it costs less than sending it apart.
fn records(plan: &ReadPlan, zero_copy: bool) -> Result<(Bytes, Option<FileSlice>, Option<i64>), LogError> {
    if zero_copy {
        let slice = plan.locate()?;
        let upper = Some(slice.next_offset);
        if slice.len == 0 {
            return Ok((Bytes::new(), None, None));
        }
        if slice.len < zero_copy::MIN_SLICE {
            return Ok((slice.read()?, None, upper));
        }
        if let Some(placeholder) = zero_copy::placeholder(slice.len) {
            return Ok((placeholder, Some(slice), upper));
        }
    }
    let bytes = plan.execute()?;
    let upper = oxbow_log::batch::BatchIter::new(&bytes).last().map(|(_, h)| h.next_offset());
    Ok((bytes, None, upper))
}

/// The aborted transactions a read_committed consumer needs to filter the records read from
/// `fetch_offset` up to `upper` (the offset after the last batch returned; None: no batch):
/// those overlapping the fetched range, as Kafka bounds it.
fn aborted_in(p: &Partition, fetch_offset: i64, upper: Option<i64>) -> Result<Vec<AbortedTransaction>, BrokerError> {
    let Some(upper) = upper else {
        return Ok(Vec::new());
    };
    Ok(p.aborted_transactions(fetch_offset, upper)?
        .into_iter()
        .map(|(producer_id, first_offset)| {
            let mut a = AbortedTransaction::default();
            a.producer_id = oxbow_protocol::messages::ProducerId(producer_id);
            a.first_offset = first_offset;
            a
        })
        .collect())
}

/// The response of the pass that ends the fetch, with the file slices its records fields stand
/// for; its bytes are counted (metrics, throttle).
fn answer(ctx: &Ctx<'_>, mut resp: FetchResponse, pass: Pass, wants: &[Want]) -> (FetchResponse, Vec<FileSlice>) {
    ctx.broker.stats.fetched(pass.total as u64);
    for (w, n) in wants.iter().zip(&pass.read) {
        if let Some(c) = w.counters.as_ref().filter(|_| *n > 0) {
            c.fetched(*n as u64);
        }
    }
    ctx.broker.quotas.leader.record(pass.throttled, crate::clock::now_ms());
    resp.responses = pass.topics;
    (resp, pass.slices)
}

/// The response, and the file slices its records fields stand for ([`crate::zero_copy`]).
pub async fn handle(ctx: &Ctx<'_>, mut req: FetchRequest) -> (FetchResponse, Vec<FileSlice>) {
    let b = ctx.broker;
    let mut resp = FetchResponse::default();
    let by_id = ctx.version >= 13;
    let replica = if ctx.version >= 15 { req.replica_state.replica_id.0 } else { req.replica_id.0 };
    let follower = (replica >= 0).then_some(replica);
    // Sessions only for followers allowed to be ones (another client naming a replica id must
    // not replace a follower's session).
    let session_of = follower.filter(|_| ctx.cluster_action_allowed());
    let session = match b.fetch_sessions.open(&mut req, by_id, session_of) {
        Ok(s) => s,
        Err(e) => {
            resp.error_code = e.code();
            return (resp, Vec::new());
        }
    };
    let (mut resp, slices) = fetch(ctx, &req, resp, by_id, follower).await;
    b.fetch_sessions.close(session, &req, by_id, session_of, &mut resp);
    (resp, slices)
}

/// The fetch of every partition `req` names (for an incremental fetch, its session's).
async fn fetch(
    ctx: &Ctx<'_>,
    req: &FetchRequest,
    resp: FetchResponse,
    by_id: bool,
    follower: Option<i32>,
) -> (FetchResponse, Vec<FileSlice>) {
    let b = ctx.broker;
    // A follower needs CLUSTER_ACTION, a consumer READ on each topic (TOPIC_AUTHORIZATION_FAILED
    // per partition either way, as Kafka).
    let follower_allowed = follower.is_none() || ctx.cluster_action_allowed();
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    let mut wants: Vec<Want> = Vec::new();
    for ft in &req.topics {
        let topic: Option<Arc<Topic>> = if by_id { b.topic_by_id(ft.topic_id) } else { b.topic(ft.topic.0.as_str()) };
        let mut tr = FetchableTopicResponse::default();
        tr.topic = ft.topic.clone();
        tr.topic_id = ft.topic_id;
        let slot = topics.len();
        topics.push(tr);
        let name = topic.as_ref().map_or(ft.topic.0.as_str(), |t| t.meta.name.as_str());
        let allowed =
            follower_allowed && (follower.is_some() || name.is_empty() || ctx.topic_allowed(Operation::Read, name));
        for fp in &ft.partitions {
            let target = match &topic {
                _ if !allowed => Err(BrokerError::TopicAuthorizationFailed),
                None if by_id => Err(BrokerError::UnknownTopicId),
                None => Err(BrokerError::UnknownTopic("unknown topic".into())),
                Some(t) => t.led(fp.partition).cloned(),
            };
            let throttled =
                follower.is_some() && topic.as_ref().is_some_and(|t| t.leader_throttled.contains(fp.partition));
            let throttle_applies =
                throttled && follower.is_some_and(|r| topic.as_ref().is_some_and(|t| !t.in_sync(fp.partition, r)));
            wants.push(Want {
                topic_slot: slot,
                topic_id: topic.as_ref().map_or(uuid::Uuid::nil(), |t| t.meta.id),
                partition_index: fp.partition,
                fetch_offset: fp.fetch_offset,
                log_start: fp.log_start_offset,
                max_bytes: usize::try_from(fp.partition_max_bytes).unwrap_or(0),
                leader_epoch: fp.current_leader_epoch,
                throttled,
                throttle_applies,
                target,
                counters: topic.as_ref().map(|t| t.counters.clone()),
            });
        }
    }
    let max_total = usize::try_from(req.max_bytes).unwrap_or(0);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read_committed = req.isolation_level == 1;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
    loop {
        // Subscribe before reading so that an append between the read and the wait wakes us. A
        // follower waits for the log end to move, a consumer for the high watermark.
        let mark: fn(&Marks) -> i64 = if follower.is_some() { |m| m.log_end } else { |m| m.high_watermark };
        let mut watchers: Vec<(watch::Receiver<Marks>, i64)> = wants
            .iter()
            .filter_map(|w| w.target.as_ref().ok())
            .map(|p| {
                let mut rx = p.subscribe();
                let seen = mark(&rx.borrow_and_update());
                (rx, seen)
            })
            .collect();
        let pass = read_once(ctx, &wants, &topics, max_total, read_committed, follower);
        let done = pass.total >= min_bytes || pass.any_error || watchers.is_empty();
        if done || tokio::time::Instant::now() >= deadline {
            return answer(ctx, resp, pass, &wants);
        }
        // A follower's fetch offset is applied (its log end on this leader); a long poll has no
        // further effect, so the connection's next request may start during the wait.
        ctx.applied.fire();
        let parked = ctx.broker.stats.waiting(Purgatory::Fetch);
        let changed = select_all(watchers.iter_mut().map(|(rx, seen)| Box::pin(rx.wait_for(|m| mark(m) != *seen))));
        let woken = tokio::time::timeout_at(deadline, changed).await;
        drop(parked);
        if woken.is_err() {
            // Timed out: answer with what there is now (possibly data that arrived at the edge).
            let pass = read_once(ctx, &wants, &topics, max_total, read_committed, follower);
            return answer(ctx, resp, pass, &wants);
        }
    }
}
