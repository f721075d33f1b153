//! Consumer lag, computed by the broker for the groups it coordinates: for each group and topic,
//! the sum over the group's committed partitions of (high watermark - committed offset), the
//! figure `kafka-consumer-groups --describe` shows as LAG, so that nobody needs a lag exporter
//! beside the cluster.
//!
//! The coordinator knows the committed offsets; the high watermark of a partition led here is
//! read directly, and that of a partition led elsewhere is asked of its leader with ListOffsets
//! (latest, read_uncommitted: the high watermark), one request per leader per round. A round
//! runs every [`INTERVAL`], and only while the metrics were read within
//! [`crate::stats::WANTED_FOR`]: a broker nobody watches asks nobody. The metrics read the last
//! finished round ([`crate::stats::LagBoard`]), so a lag is at most one interval old; a
//! partition whose leader did not answer is left out of its group's sum for that round.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use oxbow_protocol::StrBytes;
use oxbow_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use oxbow_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::stats::{Round, TopicLag};

/// How often a round runs while someone reads the metrics.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// How long a leader may take to answer a round's ListOffsets.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// ListOffsets v7 (KIP-734's max timestamp spec exists; we ask for "latest" only).
const LIST_OFFSETS_VERSION: i16 = 7;

/// Runs rounds until `stop`.
pub async fn run(broker: Arc<Broker>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !broker.lag.wanted(now_ms()) {
            continue;
        }
        let r = round(&broker).await;
        broker.lag.publish(r);
    }
}

/// One round: the committed offsets of every group coordinated here against the high
/// watermarks of their partitions.
async fn round(b: &Broker) -> Round {
    let (listings, groups) = b.groups.committed().await;
    let mut out = Round::default();
    for l in &listings {
        *out.groups.entry((l.group_type, l.state)).or_default() += 1;
    }
    let mut wanted: Vec<(String, i32)> =
        groups.iter().flat_map(|g| g.offsets.iter().map(|(t, p, _)| (t.clone(), *p))).collect();
    wanted.sort();
    wanted.dedup();
    let ends = high_watermarks(b, wanted).await;
    let mut sums: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for g in &groups {
        for (topic, partition, committed) in &g.offsets {
            if let Some(end) = ends.get(&(topic.clone(), *partition)) {
                let lag = u64::try_from(end - committed).unwrap_or(0);
                *sums.entry((g.group.as_str(), topic.as_str())).or_default() += lag;
            }
        }
    }
    out.lag = sums
        .into_iter()
        .map(|((group, topic), lag)| TopicLag { group: group.to_string(), topic: topic.to_string(), lag })
        .collect();
    out
}

/// The high watermark of each partition that has one now: read here for those led here, asked
/// of the leader (one ListOffsets per leader) for the others. Unknown topics, partitions
/// without a leader and leaders that do not answer are left out.
async fn high_watermarks(b: &Broker, partitions: Vec<(String, i32)>) -> HashMap<(String, i32), i64> {
    let mut ends = HashMap::new();
    let mut remote: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, index) in partitions {
        let Some(t) = b.topic(&topic) else { continue };
        if let Ok(p) = t.led(index) {
            if let Ok(o) = p.offsets() {
                ends.insert((topic, index), o.high_watermark);
            }
            continue;
        }
        let leader = usize::try_from(index).ok().and_then(|i| t.states.get(i)).map_or(-1, |s| s.leader);
        if leader >= 0 {
            remote.entry(leader).or_default().entry(topic).or_default().push(index);
        }
    }
    for (leader, topics) in remote {
        let mut req = ListOffsetsRequest::default();
        req.replica_id = BrokerId(-1);
        req.isolation_level = 0;
        req.topics = topics
            .into_iter()
            .map(|(name, indexes)| {
                let mut t = ListOffsetsTopic::default();
                t.name = TopicName(StrBytes::from_string(name));
                t.partitions = indexes
                    .into_iter()
                    .map(|i| {
                        let mut p = ListOffsetsPartition::default();
                        p.partition_index = i;
                        p.current_leader_epoch = -1;
                        p.timestamp = -1;
                        p
                    })
                    .collect();
                t
            })
            .collect();
        match b.peers.send(leader, LIST_OFFSETS_VERSION, &req, ASK_TIMEOUT).await {
            Ok(resp) => {
                for t in resp.topics {
                    for p in t.partitions.into_iter().filter(|p| p.error_code == 0 && p.offset >= 0) {
                        ends.insert((t.name.0.to_string(), p.partition_index), p.offset);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "consumer lag: the leader's high watermarks are unknown this round")
            }
        }
    }
    ends
}
