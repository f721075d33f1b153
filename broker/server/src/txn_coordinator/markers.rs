//! Sending a decided transaction's markers (Kafka's `TransactionMarkerChannelManager`): one
//! WriteTxnMarkers per leader broker, retried until every partition has its marker, whose topic
//! is gone, or the coordinator is fenced; each written partition is reported to the shard,
//! which asks for the completion record after the last one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use oxbow_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use oxbow_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use oxbow_txn::{Markers, TopicPartition, TxnResult};

use super::{Slot, TxnCoordinator};
use crate::clock::now_ms;
use crate::errors::MarkerReply;

/// The WriteTxnMarkers version brokers speak (Kafka 4.x serves only v1).
const VERSION: i16 = 1;
/// A leader has this long to append the markers and have them replicated.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before the next attempt for partitions not written yet.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

impl TxnCoordinator {
    /// Sends `m`'s markers until each partition is done, reporting each to the shard.
    pub(super) async fn send_markers(self: Arc<Self>, slot: Arc<Slot>, m: Markers) {
        let mut left: BTreeSet<TopicPartition> = m.partitions.iter().cloned().collect();
        let mut attempt = 0u32;
        while !left.is_empty() {
            if !slot.state.lock().await.alive {
                return;
            }
            if attempt > 0 {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            attempt += 1;
            let mut done: Vec<TopicPartition> = Vec::new();
            let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
            for tp in &left {
                match self.view.topic(&tp.topic) {
                    // A deleted topic needs no marker (Kafka checks the metadata the same way).
                    None => done.push(tp.clone()),
                    Some(t) => {
                        let leader = usize::try_from(tp.partition).ok().and_then(|i| t.states.get(i)).map(|s| s.leader);
                        match leader {
                            None => done.push(tp.clone()),
                            Some(l) if l >= 0 => by_leader.entry(l).or_default().push(tp.clone()),
                            Some(_) => {}
                        }
                    }
                }
            }
            let sends = by_leader.into_iter().map(|(node, tps)| {
                let this = &self;
                let m = &m;
                async move { (node, this.write_markers(node, m, &tps).await) }
            });
            for (node, results) in futures_util::future::join_all(sends).await {
                match results {
                    Err(reason) => {
                        if attempt % 50 == 1 {
                            tracing::warn!(node, transactional_id = %m.transactional_id, %reason, "cannot send transaction markers; retrying");
                        }
                    }
                    Ok(results) => {
                        for (tp, code) in results {
                            match MarkerReply::from_code(code) {
                                MarkerReply::Written => done.push(tp),
                                MarkerReply::Retry => {
                                    if attempt % 50 == 1 {
                                        tracing::debug!(node, topic = %tp.topic, partition = tp.partition, code, "transaction marker not written; retrying");
                                    }
                                }
                                MarkerReply::Fenced => {
                                    tracing::warn!(node, transactional_id = %m.transactional_id, topic = %tp.topic, partition = tp.partition, code,
                                        "a partition leader refused this coordinator's marker; leaving the transaction to its new coordinator");
                                    return;
                                }
                            }
                        }
                    }
                }
            }
            if done.is_empty() {
                continue;
            }
            let mut st = slot.state.clone().lock_owned().await;
            if !st.alive {
                return;
            }
            for tp in done {
                left.remove(&tp);
                let cmds = st.shard.marker_written(&m.transactional_id, m.producer_id, m.producer_epoch, &tp);
                self.execute(&slot, &mut st, cmds);
            }
        }
        tracing::debug!(transactional_id = %m.transactional_id, at = now_ms(), "transaction markers written");
    }

    /// One WriteTxnMarkers to `node` for `tps`: each partition's error code.
    async fn write_markers(
        &self,
        node: i32,
        m: &Markers,
        tps: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, i16)>, String> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in tps {
            topics.entry(tp.topic.as_str()).or_default().push(tp.partition);
        }
        let mut marker = WritableTxnMarker::default();
        marker.producer_id = ProducerId(m.producer_id);
        marker.producer_epoch = m.producer_epoch;
        marker.transaction_result = m.result == TxnResult::Commit;
        marker.coordinator_epoch = m.coordinator_epoch;
        marker.topics = topics
            .into_iter()
            .map(|(name, parts)| {
                let mut t = WritableTxnMarkerTopic::default();
                t.name = TopicName(oxbow_protocol::StrBytes::from_string(name.to_string()));
                t.partition_indexes = parts;
                t
            })
            .collect();
        let mut req = WriteTxnMarkersRequest::default();
        req.markers = vec![marker];
        let resp = self.peers.send(node, VERSION, &req, REQUEST_TIMEOUT).await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for r in resp.markers.iter().filter(|r| r.producer_id.0 == m.producer_id) {
            for t in &r.topics {
                for p in &t.partitions {
                    out.push((TopicPartition::new(t.name.0.as_str(), p.partition_index), p.error_code));
                }
            }
        }
        Ok(out)
    }
}
