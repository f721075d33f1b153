//! Followers: every partition this broker hosts but does not lead is copied from its leader by
//! a fetcher, one per leader broker, speaking Kafka's own protocol to the leader's client
//! listener (Fetch with this broker's replica id, as Kafka's replica fetchers do).
//!
//! Before fetching under a new leader epoch a follower finds where its log diverges from the
//! leader's (OffsetsForLeaderEpoch, KIP-101/279) and truncates there; then it appends what the
//! leader sends, keeping offsets and epochs, and takes the leader's high watermark. Leaders see
//! each fetch offset (the follower's log end): it moves their high watermark and brings caught-up
//! followers into the ISR (`crate::replica`). Each fetcher keeps an incremental fetch session
//! with its leader (KIP-227): a fetch names only the partitions whose fetch offset, log start or
//! epoch moved, and hears only about those with records or a new high watermark.
//!
//! A partition whose topic lists this broker in `follower.replication.throttled.replicas` is
//! left out of fetches while this broker is not in its ISR and the follower throttle
//! (`follower.replication.throttled.rate`) is exceeded, as Kafka's `shouldFollowerThrottle`; the
//! bytes appended for throttled partitions count toward it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::errors::PeerError;
use kafka_protocol::protocol::StrBytes;
use oxbow_protocol::connection::{Connection, ConnectionError};
use oxbow_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use oxbow_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use oxbow_protocol::messages::*;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::errors::BrokerError;
use crate::fetch_session::{INITIAL_EPOCH, next_epoch};
use crate::partition::{Following, Partition};

/// How long a follower's fetch waits at the leader for new data.
const FETCH_WAIT_MS: i32 = 500;
/// Bytes per partition per fetch (`replica.fetch.max.bytes`' default).
const PARTITION_MAX_BYTES: i32 = 1 << 20;
/// Bytes per fetch (`replica.fetch.response.max.bytes`' default).
const FETCH_MAX_BYTES: i32 = 10 << 20;
/// How long a connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one exchange with the leader may take (a fetch waits up to `FETCH_WAIT_MS` there).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A partition by topic name and index.
type Key = (Arc<str>, i32);

/// This follower's side of its fetch session with one leader (KIP-227,
/// [`crate::fetch_session`]): after a full fetch that opened it, each fetch names only the
/// partitions whose fetch state changed and forgets those no longer fetched.
#[derive(Default)]
struct FetchSession {
    /// 0: no session; the next fetch is full and asks for one.
    id: i32,
    /// The epoch the leader expects next.
    epoch: i32,
    /// Each partition's fetch state as the session last had it: fetch offset, log start,
    /// leader epoch.
    sent: HashMap<Key, (i64, i64, i32)>,
}

impl FetchSession {
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// A partition to follow.
#[derive(Clone)]
struct Followed {
    topic: Arc<str>,
    /// The leader and leader epoch this replica follows: what its log may take from the
    /// leader's answers is checked against them.
    from: Following,
    part: Arc<Partition>,
    /// Listed in the topic's `follower.replication.throttled.replicas` for this broker.
    throttled: bool,
    /// This broker is in the partition's ISR (then the throttle never holds it back).
    in_sync: bool,
}

impl Followed {
    fn key(&self) -> Key {
        (self.topic.clone(), self.part.index)
    }
}

/// The partition no longer follows the leader and leader epoch a request was sent under (the
/// metadata moved on while it was in flight): its answer is dropped, and the next round asks
/// under the new state.
fn moved_on(e: &BrokerError) -> bool {
    matches!(e, BrokerError::FencedLeaderEpoch(_))
}

/// Keeps one fetcher per leader broker for the partitions this broker follows, following every
/// new metadata image, until `stop`. The fetchers are this task's: it returns once every one of
/// them has.
pub async fn run(broker: Arc<Broker>, stop: CancellationToken) {
    let mut applied = broker.view.subscribe_applied();
    let mut fetchers: HashMap<i32, watch::Sender<Vec<Followed>>> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let me = broker.node_id();
        let mut want: BTreeMap<i32, Vec<Followed>> = BTreeMap::new();
        for t in broker.all_topics() {
            let name: Arc<str> = Arc::from(t.meta.name.as_str());
            for s in &t.states {
                if s.leader < 0 || s.leader == me || !s.replicas.contains(&me) {
                    continue;
                }
                if let Some(p) = t.partition(s.partition) {
                    want.entry(s.leader).or_default().push(Followed {
                        topic: name.clone(),
                        from: Following { leader: s.leader, leader_epoch: s.leader_epoch },
                        part: p.clone(),
                        throttled: t.follower_throttled.contains(s.partition),
                        in_sync: s.isr.contains(&me),
                    });
                }
            }
        }
        fetchers.retain(|leader, _| want.contains_key(leader));
        for (leader, parts) in want {
            match fetchers.get(&leader) {
                Some(tx) => {
                    tx.send_replace(parts);
                }
                None => {
                    let (tx, rx) = watch::channel(parts);
                    fetchers.insert(leader, tx);
                    tasks.spawn(fetch_from(broker.clone(), leader, rx, stop.child_token()));
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            r = applied.changed() => if r.is_err() { break },
        }
    }
    drop(fetchers);
    while tasks.join_next().await.is_some() {}
}

/// The leader as a follower sees it: the answers to the two requests it sends. A
/// [`Connection`] to the leader's listener in production, a scripted leader in the unit tests.
pub(crate) trait Leader {
    async fn offsets_for_leader_epoch(
        &mut self,
        req: &OffsetForLeaderEpochRequest,
    ) -> Result<OffsetForLeaderEpochResponse, ConnectionError>;
    async fn fetch(&mut self, req: &FetchRequest) -> Result<FetchResponse, ConnectionError>;
}

impl Leader for Connection {
    async fn offsets_for_leader_epoch(
        &mut self,
        req: &OffsetForLeaderEpochRequest,
    ) -> Result<OffsetForLeaderEpochResponse, ConnectionError> {
        self.send(4, req, IO_TIMEOUT).await
    }

    async fn fetch(&mut self, req: &FetchRequest) -> Result<FetchResponse, ConnectionError> {
        self.send(12, req, IO_TIMEOUT).await
    }
}

/// Follows the partitions `parts` names, all led by `leader`, until the channel closes (no
/// partition led by it any more) or `stop`.
async fn fetch_from(
    broker: Arc<Broker>,
    leader: i32,
    mut parts: watch::Receiver<Vec<Followed>>,
    stop: CancellationToken,
) {
    let me = broker.node_id();
    let client = format!("oxbow-replica-fetcher-{me}-from-{leader}");
    let mut conn: Option<Connection> = None;
    let security = broker.config.security.inter_broker_client.as_ref();
    // The leader epoch under which each partition's log was checked against the leader's.
    let mut checked: HashMap<Key, i32> = HashMap::new();
    let mut session = FetchSession::default();
    tracing::info!(leader, "replica fetcher started");
    loop {
        if stop.is_cancelled() || parts.has_changed().is_err() {
            tracing::info!(leader, "replica fetcher stopped");
            return;
        }
        let list = parts.borrow_and_update().clone();
        let backoff = || async {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        };
        let Some(addr) = broker.view.broker_address(leader) else {
            backoff().await;
            continue;
        };
        let mut c = match conn.take() {
            Some(c) if c.addr() == addr => c,
            _ => match crate::peers::connect(&addr, &client, CONNECT_TIMEOUT, security).await {
                Ok(c) => {
                    // A new connection may be to a restarted leader: start a new session.
                    session.reset();
                    c
                }
                Err(e) => {
                    tracing::debug!(leader, %addr, error = %e, "cannot reach the leader");
                    backoff().await;
                    continue;
                }
            },
        };
        let unchecked: Vec<&Followed> =
            list.iter().filter(|f| checked.get(&f.key()) != Some(&f.from.leader_epoch)).collect();
        let exchange = async {
            if unchecked.is_empty() {
                fetch_once(&mut c, me, &list, &broker.quotas.follower, &mut session).await
            } else {
                let r = check_epochs(&mut c, me, &unchecked, &mut checked).await;
                // Rounds of epoch checks converge in a few steps; never spin on them.
                tokio::time::sleep(Duration::from_millis(10)).await;
                r
            }
        };
        let result = tokio::select! {
            _ = stop.cancelled() => {
                tracing::info!(leader, "replica fetcher stopped");
                return;
            }
            r = exchange => r,
        };
        match result {
            Ok(wait) => {
                conn = Some(c);
                if wait {
                    backoff().await;
                }
            }
            Err(e) => {
                tracing::debug!(leader, %addr, error = %e, "replica fetch failed; reconnecting");
                backoff().await;
            }
        }
    }
}

/// OffsetsForLeaderEpoch for partitions not yet checked under their leader epoch; truncates
/// each where it diverges (KIP-279). Returns whether to back off (the leader refused some).
async fn check_epochs(
    c: &mut impl Leader,
    me: i32,
    unchecked: &[&Followed],
    checked: &mut HashMap<Key, i32>,
) -> Result<bool, ConnectionError> {
    let mut by_topic: BTreeMap<Arc<str>, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
    let mut asked: HashMap<Key, (Option<i32>, &Followed)> = HashMap::new();
    for f in unchecked {
        let Ok((_, latest)) = f.part.log_end_and_epoch() else { continue };
        let mut p = OffsetForLeaderPartition::default();
        p.partition = f.part.index;
        p.current_leader_epoch = f.from.leader_epoch;
        p.leader_epoch = latest.unwrap_or(-1);
        by_topic.entry(f.topic.clone()).or_default().push(p);
        asked.insert(f.key(), (latest, f));
    }
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = BrokerId(me);
    req.topics = by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut ot = OffsetForLeaderTopic::default();
            ot.topic = TopicName(StrBytes::from_string(t.to_string()));
            ot.partitions = partitions;
            ot
        })
        .collect();
    let resp = c.offsets_for_leader_epoch(&req).await?;
    let mut refused = false;
    for t in resp.topics {
        let topic: Arc<str> = Arc::from(t.topic.0.as_str());
        for r in t.partitions {
            let Some((latest, f)) = asked.get(&(topic.clone(), r.partition)) else { continue };
            if r.error_code != 0 {
                refused = true;
                tracing::debug!(topic = %topic, partition = r.partition, code = r.error_code, "leader refused OffsetsForLeaderEpoch");
                continue;
            }
            let now = now_ms();
            let from = f.from;
            let done = match latest {
                // Nothing written under any epoch here: nothing to reconcile.
                None => true,
                Some(_) if r.leader_epoch < 0 || r.end_offset < 0 => {
                    // The leader knows no such epoch: keep only what is known committed.
                    let hw = f.part.offsets().map(|o| o.high_watermark).unwrap_or(0);
                    !matches!(f.part.truncate_to(from, hw, now), Err(e) if moved_on(&e))
                }
                Some(mine) if r.leader_epoch == *mine => {
                    let (leo, _) = f.part.log_end_and_epoch().unwrap_or((0, None));
                    if r.end_offset < leo {
                        tracing::info!(topic = %topic, partition = r.partition, from = leo, to = r.end_offset, "truncating: the leader's log diverges here");
                        match f.part.truncate_to(from, r.end_offset, now) {
                            Ok(_) => true,
                            Err(e) if moved_on(&e) => false,
                            Err(e) => {
                                refused = true;
                                tracing::warn!(topic = %topic, partition = r.partition, error = %e, "cannot truncate");
                                true
                            }
                        }
                    } else {
                        true
                    }
                }
                Some(_) => {
                    // The leader's largest epoch at most ours is older: our own end of that
                    // epoch bounds what we share with it. Ask again while that cuts something
                    // (our latest epoch changed); once nothing is cut, the logs agree.
                    let (_, own_end) = f.part.end_offset_for_epoch(r.leader_epoch).unwrap_or((-1, 0));
                    let to = r.end_offset.min(own_end.max(0));
                    let before = f.part.log_end_and_epoch().ok();
                    match f.part.truncate_to(from, to, now) {
                        Ok(_) => {
                            let after = f.part.log_end_and_epoch().ok();
                            tracing::info!(topic = %topic, partition = r.partition, to, leader_epoch = r.leader_epoch, "truncating to the leader's epoch");
                            after == before
                        }
                        Err(e) if moved_on(&e) => false,
                        Err(e) => {
                            refused = true;
                            tracing::warn!(topic = %topic, partition = r.partition, error = %e, "cannot truncate");
                            false
                        }
                    }
                }
            };
            if done {
                checked.insert(f.key(), f.from.leader_epoch);
            }
        }
    }
    Ok(refused)
}

/// One Fetch for every partition in `list` (all checked under their leader epoch); appends what
/// the leader sent. Returns whether to back off (errors that wait for new metadata).
async fn fetch_once(
    c: &mut impl Leader,
    me: i32,
    list: &[Followed],
    quota: &crate::quota::ReplicationQuota,
    session: &mut FetchSession,
) -> Result<bool, ConnectionError> {
    let mut wanted: Vec<(Key, FetchPartition)> = Vec::with_capacity(list.len());
    let mut index: HashMap<Key, &Followed> = HashMap::new();
    let hold_throttled = list.iter().any(|f| f.throttled && !f.in_sync) && quota.exceeded(now_ms());
    for f in list {
        if f.throttled && !f.in_sync && hold_throttled {
            continue;
        }
        let Ok(own) = f.part.offsets() else { continue };
        let mut p = FetchPartition::default();
        p.partition = f.part.index;
        p.current_leader_epoch = f.from.leader_epoch;
        p.fetch_offset = own.log_end;
        p.last_fetched_epoch = -1;
        // As Kafka's followers: the leader learns where this replica's log starts (DeleteRecords
        // waits for every in-sync replica to get there).
        p.log_start_offset = own.log_start;
        p.partition_max_bytes = PARTITION_MAX_BYTES;
        wanted.push((f.key(), p));
        index.insert(f.key(), f);
    }
    if index.is_empty() {
        return Ok(true);
    }
    // A full fetch names every partition; an incremental one those whose fetch state the
    // session does not have, and forgets those no longer wanted (throttled ones held back
    // included, as Kafka's followers do).
    let full = session.id == 0;
    let mut by_topic: BTreeMap<Arc<str>, Vec<FetchPartition>> = BTreeMap::new();
    let mut now_sent = HashMap::with_capacity(wanted.len());
    for (key, p) in wanted {
        let state = (p.fetch_offset, p.log_start_offset, p.current_leader_epoch);
        if full || session.sent.get(&key) != Some(&state) {
            by_topic.entry(key.0.clone()).or_default().push(p);
        }
        now_sent.insert(key, state);
    }
    let mut forgotten: BTreeMap<Arc<str>, Vec<i32>> = BTreeMap::new();
    if !full {
        for (topic, partition) in session.sent.keys().filter(|k| !now_sent.contains_key(*k)) {
            forgotten.entry(topic.clone()).or_default().push(*partition);
        }
    }
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(me);
    req.max_wait_ms = FETCH_WAIT_MS;
    req.min_bytes = 1;
    req.max_bytes = FETCH_MAX_BYTES;
    req.session_id = session.id;
    req.session_epoch = if full { INITIAL_EPOCH } else { session.epoch };
    req.topics = by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut ft = FetchTopic::default();
            ft.topic = TopicName(StrBytes::from_string(t.to_string()));
            ft.partitions = partitions;
            ft
        })
        .collect();
    req.forgotten_topics_data = forgotten
        .into_iter()
        .map(|(t, partitions)| {
            let mut ft = ForgottenTopic::default();
            ft.topic = TopicName(StrBytes::from_string(t.to_string()));
            ft.partitions = partitions;
            ft
        })
        .collect();
    let resp = match c.fetch(&req).await {
        Ok(r) => r,
        Err(e) => {
            session.reset();
            return Err(e);
        }
    };
    if resp.error_code != 0 {
        session.reset();
        // The leader lost the session (restarted, or replaced it) or the epochs went out of
        // step: a full fetch at once. Any other error: back off.
        return Ok(PeerError::from_code(resp.error_code) != PeerError::FetchSessionLost);
    }
    if resp.session_id == 0 || (!full && resp.session_id != session.id) {
        // A leader that keeps no session for this follower (no slot, or an older version).
        session.reset();
    } else {
        session.epoch = if full { 1 } else { next_epoch(session.epoch) };
        session.id = resp.session_id;
        session.sent = now_sent;
    }
    let mut wait = false;
    for t in resp.responses {
        let topic: Arc<str> = Arc::from(t.topic.0.as_str());
        for p in t.partitions {
            let Some(f) = index.get(&(topic.clone(), p.partition_index)) else { continue };
            if p.error_code != 0 {
                let e = PeerError::from_code(p.error_code);
                // This log ends below the leader's start (away while retention or DeleteRecords
                // passed it): start again there; fetching where it ends can never succeed.
                if e == PeerError::OffsetOutOfRange && p.log_start_offset >= 0 {
                    match f.part.restart_below_leader_start(f.from, p.log_start_offset, now_ms()) {
                        Ok(true) => {
                            tracing::info!(topic = %topic, partition = p.partition_index, start = p.log_start_offset, "replica restarted at the leader's log start");
                            continue;
                        }
                        Ok(false) => {}
                        Err(e) if moved_on(&e) => continue,
                        Err(e) => {
                            tracing::warn!(topic = %topic, partition = p.partition_index, error = %e, "cannot restart the replica at the leader's log start")
                        }
                    }
                }
                wait = true;
                tracing::debug!(topic = %topic, partition = p.partition_index, error = ?e, "replica fetch error");
                continue;
            }
            let records = p.records.unwrap_or_default();
            if f.throttled {
                quota.record(records.len(), now_ms());
            }
            match f.part.append_replicated(f.from, &records, p.high_watermark, p.log_start_offset, now_ms()) {
                Ok(_) => {}
                Err(e) if moved_on(&e) => {
                    tracing::debug!(topic = %topic, partition = p.partition_index, error = %e, "dropping a fetch answer from before a leadership change");
                }
                Err(e) => {
                    wait = true;
                    tracing::warn!(topic = %topic, partition = p.partition_index, error = %e, "cannot append replicated records");
                }
            }
        }
    }
    Ok(wait)
}

/// Leaders: followers not caught up for `replica.lag.time.max.ms` leave the ISR.
pub fn shrink_isr_pass(broker: &Arc<Broker>) {
    let (now, lag) = (now_ms(), broker.config.replica_lag_time_max_ms);
    for t in broker.all_topics() {
        for p in t.hosted() {
            if let Some(change) = p.lagging_followers(now, lag) {
                tracing::info!(topic = %p.topic, partition = p.index, isr = ?change.isr, "followers fell behind: shrinking the ISR");
                broker.request_isr_change(t.meta.id, p.clone(), change);
            }
        }
    }
}

#[cfg(test)]
mod tests;
