//! The follower's truncation and fetch logic against a scripted leader: no sockets, a real log
//! in a temporary directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use oxbow_log::{Log, LogConfig, OpenOptions};
use oxbow_protocol::ResponseError;
use oxbow_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use oxbow_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};

use super::*;
use crate::partition::HwWait;
use crate::quota::ReplicationQuota;
use crate::replica::ReplicaState;

const ME: i32 = 1;
const LEADER: i32 = 0;
const TOPIC: &str = "t";

/// A leader that answers from a script, one answer per request in order, and keeps what it was
/// asked.
#[derive(Default)]
struct ScriptedLeader {
    epochs: VecDeque<Vec<EpochEndOffset>>,
    fetches: VecDeque<Vec<PartitionData>>,
    asked_epochs: Vec<OffsetForLeaderEpochRequest>,
    asked_fetches: Vec<FetchRequest>,
    /// The session id and top-level error code of its fetch answers.
    session_id: i32,
    error_code: i16,
}

impl Leader for ScriptedLeader {
    async fn offsets_for_leader_epoch(
        &mut self,
        req: &OffsetForLeaderEpochRequest,
    ) -> Result<OffsetForLeaderEpochResponse, ConnectionError> {
        self.asked_epochs.push(req.clone());
        let mut t = OffsetForLeaderTopicResult::default();
        t.topic = TopicName(StrBytes::from_static_str(TOPIC));
        t.partitions = self.epochs.pop_front().expect("an OffsetsForLeaderEpoch the script does not expect");
        let mut resp = OffsetForLeaderEpochResponse::default();
        resp.topics = vec![t];
        Ok(resp)
    }

    async fn fetch(&mut self, req: &FetchRequest) -> Result<FetchResponse, ConnectionError> {
        self.asked_fetches.push(req.clone());
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str(TOPIC));
        t.partitions = self.fetches.pop_front().expect("a Fetch the script does not expect");
        let mut resp = FetchResponse::default();
        resp.responses = vec![t];
        resp.session_id = self.session_id;
        resp.error_code = self.error_code;
        Ok(resp)
    }
}

/// The leader's answer for partition 0: epoch `epoch` ends at `end`.
fn epoch_end(epoch: i32, end: i64) -> Vec<EpochEndOffset> {
    let mut e = EpochEndOffset::default();
    e.partition = 0;
    e.leader_epoch = epoch;
    e.end_offset = end;
    vec![e]
}

/// A batch of the records `from..to` written under leader epoch `epoch`, as a leader stores it.
fn batch(epoch: i32, from: i64, to: i64) -> Bytes {
    let records: Vec<Record> = (from..to)
        .map(|o| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: epoch,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: o,
            sequence: -1,
            timestamp: 1_000 + o,
            key: None,
            value: Some(Bytes::from(format!("v{o}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None })
        .unwrap();
    buf.freeze()
}

/// A follower replica of partition 0 whose log holds `batches`: (leader epoch, first offset,
/// end).
fn follower(dir: &tempfile::TempDir, batches: &[(i32, i64, i64)], high_watermark: i64) -> Arc<Partition> {
    follower_of(dir, 0, batches, high_watermark)
}

fn follower_of(
    dir: &tempfile::TempDir,
    index: i32,
    batches: &[(i32, i64, i64)],
    high_watermark: i64,
) -> Arc<Partition> {
    let opts = OpenOptions {
        clean_shutdown: false,
        recovery_point: 0,
        log_start_offset: None,
        high_watermark: None,
        now_ms: 0,
    };
    let (mut log, _) = Log::open(&dir.path().join(format!("{TOPIC}-{index}")), LogConfig::default(), opts).unwrap();
    for (epoch, from, to) in batches {
        log.append_as_follower(&batch(*epoch, *from, *to), 0).unwrap();
    }
    log.set_high_watermark(high_watermark);
    let latest = batches.last().map_or(0, |e| e.0);
    let mut replica = ReplicaState::single(LEADER, latest);
    replica.replicas = vec![LEADER, ME];
    Arc::new(Partition::new(Arc::from(TOPIC), index, 0, ME, log, replica))
}

/// The replica state a metadata image gives this follower: `LEADER` leads at `leader_epoch`.
fn follower_state(leader: i32, leader_epoch: i32) -> ReplicaState {
    let mut replica = ReplicaState::single(leader, leader_epoch);
    replica.replicas = vec![LEADER, ME];
    replica.isr = vec![LEADER, ME];
    replica
}

/// `part` following `LEADER` at `leader_epoch`, as the fetcher sees it once the image that
/// says so is applied (the partition took that replica state first).
fn followed(part: &Arc<Partition>, leader_epoch: i32) -> Followed {
    part.set_replica(follower_state(LEADER, leader_epoch), 0);
    Followed {
        topic: Arc::from(TOPIC),
        from: Following { leader: LEADER, leader_epoch },
        part: part.clone(),
        throttled: false,
        in_sync: true,
    }
}

fn log_end(part: &Partition) -> i64 {
    part.offsets().unwrap().log_end
}

#[tokio::test]
async fn a_follower_truncates_where_its_log_diverges_from_the_leaders() {
    let dir = tempfile::tempdir().unwrap();
    // Epoch 1 wrote 5..10 here, but the leader's epoch 1 ended at 7 (it never had 7..10).
    let part = follower(&dir, &[(0, 0, 5), (1, 5, 7), (1, 7, 10)], 5);
    let mut leader = ScriptedLeader { epochs: VecDeque::from([epoch_end(1, 7)]), ..Default::default() };
    let f = followed(&part, 2);
    let mut checked = HashMap::new();
    let refused = check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert!(!refused);
    assert_eq!(log_end(&part), 7);
    assert_eq!(checked.get(&f.key()), Some(&2), "checked under the leader epoch it follows");
    // The follower asked about its own newest epoch, under the current leader epoch, as itself.
    let asked = &leader.asked_epochs[0];
    assert_eq!(asked.replica_id, BrokerId(ME));
    let p = &asked.topics[0].partitions[0];
    assert_eq!((p.leader_epoch, p.current_leader_epoch), (1, 2));
}

#[tokio::test]
async fn a_follower_whose_log_matches_keeps_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5), (1, 5, 10)], 5);
    let mut leader = ScriptedLeader { epochs: VecDeque::from([epoch_end(1, 12)]), ..Default::default() };
    let f = followed(&part, 1);
    let mut checked = HashMap::new();
    check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert_eq!(log_end(&part), 10, "the leader's epoch ends past this log: nothing diverges");
    assert!(checked.contains_key(&f.key()));
}

#[tokio::test]
async fn an_older_leader_epoch_cuts_and_is_asked_again_until_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    // This replica wrote epoch 2 (6..9) that the leader never had: the leader's largest epoch
    // at most 2 is 1, ending at 6, and epoch 1 began at 4 here.
    let part = follower(&dir, &[(0, 0, 4), (1, 4, 6), (2, 6, 9)], 3);
    let mut leader =
        ScriptedLeader { epochs: VecDeque::from([epoch_end(1, 6), epoch_end(1, 6)]), ..Default::default() };
    let f = followed(&part, 3);
    let mut checked = HashMap::new();
    check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert_eq!(log_end(&part), 6, "cut back to the end of the epoch both logs share");
    assert!(!checked.contains_key(&f.key()), "something was cut: asked again before fetching");
    check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert_eq!(log_end(&part), 6);
    assert_eq!(leader.asked_epochs[1].topics[0].partitions[0].leader_epoch, 1, "asked about its new newest epoch");
    assert!(checked.contains_key(&f.key()), "nothing cut the second time: the logs agree");
}

#[tokio::test]
async fn a_leader_that_knows_no_such_epoch_leaves_only_the_committed_records() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(4, 0, 3), (4, 3, 8)], 3);
    let mut leader = ScriptedLeader { epochs: VecDeque::from([epoch_end(-1, -1)]), ..Default::default() };
    let f = followed(&part, 5);
    let mut checked = HashMap::new();
    check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert_eq!(log_end(&part), 3, "truncated to the high watermark");
    assert!(checked.contains_key(&f.key()));
}

#[tokio::test]
async fn a_refused_epoch_check_is_retried_later() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5)], 5);
    let mut refusal = epoch_end(-1, -1);
    refusal[0].error_code = ResponseError::FencedLeaderEpoch.code();
    let mut leader = ScriptedLeader { epochs: VecDeque::from([refusal]), ..Default::default() };
    let f = followed(&part, 1);
    let mut checked = HashMap::new();
    assert!(check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap(), "back off");
    assert!(checked.is_empty());
    assert_eq!(log_end(&part), 5, "nothing truncated on a refusal");
}

fn fetched(records: Option<Bytes>, high_watermark: i64, log_start: i64) -> Vec<PartitionData> {
    let mut p = PartitionData::default();
    p.partition_index = 0;
    p.high_watermark = high_watermark;
    p.log_start_offset = log_start;
    p.records = records;
    vec![p]
}

#[tokio::test]
async fn a_fetch_asks_from_the_log_end_and_appends_what_the_leader_sent() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5)], 2);
    let mut leader =
        ScriptedLeader { fetches: VecDeque::from([fetched(Some(batch(0, 5, 9)), 7, 0)]), ..Default::default() };
    let quota = ReplicationQuota::new(i64::MAX, 11, 1000);
    let wait = fetch_once(&mut leader, ME, &[followed(&part, 0)], &quota, &mut FetchSession::default()).await.unwrap();
    assert!(!wait);
    let req = &leader.asked_fetches[0];
    assert_eq!(req.replica_id, BrokerId(ME));
    let p = &req.topics[0].partitions[0];
    assert_eq!((p.fetch_offset, p.log_start_offset, p.current_leader_epoch), (5, 0, 0));
    let o = part.offsets().unwrap();
    assert_eq!((o.log_end, o.high_watermark), (9, 7), "appended with the leader's offsets; its high watermark taken");
}

#[tokio::test]
async fn the_leaders_log_start_moves_the_followers_up_to_its_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 4), (0, 4, 8)], 8);
    let mut leader = ScriptedLeader { fetches: VecDeque::from([fetched(None, 8, 4)]), ..Default::default() };
    let quota = ReplicationQuota::new(i64::MAX, 11, 1000);
    fetch_once(&mut leader, ME, &[followed(&part, 0)], &quota, &mut FetchSession::default()).await.unwrap();
    assert_eq!(part.offsets().unwrap().log_start, 4);
}

#[tokio::test]
async fn a_log_that_ends_below_the_leaders_start_starts_again_there() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 3)], 3);
    let mut out_of_range = fetched(None, 40, 20);
    out_of_range[0].error_code = ResponseError::OffsetOutOfRange.code();
    let mut leader = ScriptedLeader { fetches: VecDeque::from([out_of_range]), ..Default::default() };
    let quota = ReplicationQuota::new(i64::MAX, 11, 1000);
    fetch_once(&mut leader, ME, &[followed(&part, 0)], &quota, &mut FetchSession::default()).await.unwrap();
    let o = part.offsets().unwrap();
    assert_eq!((o.log_start, o.log_end), (20, 20));
}

#[tokio::test]
async fn a_throttled_replica_out_of_the_isr_waits_while_the_throttle_is_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let moving = follower_of(&dir, 0, &[(0, 0, 1)], 1);
    let in_sync = follower_of(&dir, 1, &[(0, 0, 1)], 1);
    let quota = ReplicationQuota::new(100, 11, 1000);
    quota.record(10_000, now_ms());
    assert!(quota.exceeded(now_ms()));
    let mut throttled = followed(&moving, 0);
    (throttled.throttled, throttled.in_sync) = (true, false);
    let mut sync_throttled = followed(&in_sync, 0);
    sync_throttled.throttled = true;
    let mut leader = ScriptedLeader { fetches: VecDeque::from([Vec::new()]), ..Default::default() };
    fetch_once(&mut leader, ME, &[throttled.clone(), sync_throttled], &quota, &mut FetchSession::default())
        .await
        .unwrap();
    let asked: Vec<i32> = leader.asked_fetches[0].topics[0].partitions.iter().map(|p| p.partition).collect();
    assert_eq!(asked, [1], "only the in-sync replica is fetched: the throttle never holds the ISR back");
    // Alone and held back, nothing is fetched at all: the fetcher backs off.
    let mut leader = ScriptedLeader::default();
    assert!(fetch_once(&mut leader, ME, &[throttled], &quota, &mut FetchSession::default()).await.unwrap());
    assert!(leader.asked_fetches.is_empty());
}

#[tokio::test]
async fn a_session_names_only_partitions_that_moved_and_forgets_those_left() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (follower_of(&dir, 0, &[(0, 0, 5)], 5), follower_of(&dir, 1, &[(0, 0, 5)], 5));
    let (fa, fb) = (followed(&a, 0), followed(&b, 0));
    let mut first = fetched(Some(batch(0, 5, 9)), 9, 0);
    first.extend(fetched(None, 5, 0).into_iter().map(|mut p| {
        p.partition_index = 1;
        p
    }));
    let mut leader = ScriptedLeader {
        fetches: VecDeque::from([first, Vec::new(), Vec::new(), Vec::new(), Vec::new()]),
        session_id: 77,
        ..Default::default()
    };
    let quota = ReplicationQuota::new(i64::MAX, 11, 1000);
    let mut session = FetchSession::default();
    let both = [fa.clone(), fb.clone()];
    for list in [&both[..], &both[..], std::slice::from_ref(&fa)] {
        assert!(!fetch_once(&mut leader, ME, list, &quota, &mut session).await.unwrap());
    }
    // The leader lost the session: no back-off, and the next fetch is full again.
    leader.error_code = ResponseError::FetchSessionIdNotFound.code();
    assert!(!fetch_once(&mut leader, ME, std::slice::from_ref(&fa), &quota, &mut session).await.unwrap());
    leader.error_code = 0;
    fetch_once(&mut leader, ME, std::slice::from_ref(&fa), &quota, &mut session).await.unwrap();
    let named = |r: &FetchRequest| -> Vec<(i32, i64)> {
        r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset))).collect()
    };
    let forgotten =
        |r: &FetchRequest| -> Vec<i32> { r.forgotten_topics_data.iter().flat_map(|t| t.partitions.clone()).collect() };
    let asked: Vec<_> =
        leader.asked_fetches.iter().map(|r| (r.session_id, r.session_epoch, named(r), forgotten(r))).collect();
    assert_eq!(
        asked,
        [
            (0, 0, vec![(0, 5), (1, 5)], vec![]),
            (77, 1, vec![(0, 9)], vec![]),
            (77, 2, vec![], vec![1]),
            (77, 3, vec![], vec![]),
            (0, 0, vec![(0, 9)], vec![]),
        ],
        "full, then only what moved, then what is forgotten; after the loss, full again"
    );
}

/// A leader whose answer arrives after something else happened to the follower (`meanwhile`,
/// run before the scripted answer is returned): the metadata moving on while a request is in
/// flight.
struct LateLeader<F: FnMut()> {
    inner: ScriptedLeader,
    meanwhile: F,
}

impl<F: FnMut()> Leader for LateLeader<F> {
    async fn offsets_for_leader_epoch(
        &mut self,
        req: &OffsetForLeaderEpochRequest,
    ) -> Result<OffsetForLeaderEpochResponse, ConnectionError> {
        (self.meanwhile)();
        self.inner.offsets_for_leader_epoch(req).await
    }

    async fn fetch(&mut self, req: &FetchRequest) -> Result<FetchResponse, ConnectionError> {
        (self.meanwhile)();
        self.inner.fetch(req).await
    }
}

/// A replica at log end 5 following `LEADER` at epoch 0 fetches; while the answer (5..9, for
/// epoch 0) is in flight it takes `meanwhile` at leader epoch 1. The answer must be dropped:
/// after the fetch the log still ends at 5, and the fetcher does not back off (it follows the
/// new state next). Returns the partition for further checks.
async fn fetch_answer_dropped_after(meanwhile: i32, dir: &tempfile::TempDir) -> Arc<Partition> {
    let part = follower(dir, &[(0, 0, 5)], 5);
    let f = followed(&part, 0);
    let mut leader = LateLeader {
        inner: ScriptedLeader { fetches: VecDeque::from([fetched(Some(batch(0, 5, 9)), 9, 0)]), ..Default::default() },
        meanwhile: || part.set_replica(follower_state(meanwhile, 1), 0),
    };
    let quota = ReplicationQuota::new(i64::MAX, 11, 1000);
    let wait =
        fetch_once(&mut leader, ME, std::slice::from_ref(&f), &quota, &mut FetchSession::default()).await.unwrap();
    assert!(!wait, "not an error to back off from: the fetcher follows the new state next");
    let o = part.offsets().unwrap();
    assert_eq!((o.log_end, o.leader_epoch), (5, 1), "the answer was dropped");
    part
}

#[tokio::test]
async fn a_fetch_answer_from_before_this_replica_became_leader_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // By the time the old leader's answer arrives this replica leads under epoch 1 from its log
    // end 5: what it writes now goes there, and the old leader's tail must not.
    let part = fetch_answer_dropped_after(ME, &dir).await;
    assert_eq!(part.end_offset_for_epoch(1).unwrap(), (1, 5), "epoch 1 starts at 5 and holds nothing yet");
}

#[tokio::test]
async fn a_fetch_answer_under_an_older_leader_epoch_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // The same leader, re-elected under epoch 1 meanwhile: the answer was for epoch 0.
    fetch_answer_dropped_after(LEADER, &dir).await;
}

#[tokio::test]
async fn an_epoch_check_answered_after_a_leadership_change_truncates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5), (1, 5, 10)], 5);
    let f = followed(&part, 2);
    // The answer says to cut back to 7, but this replica leads meanwhile: its log is the log.
    let mut leader = LateLeader {
        inner: ScriptedLeader { epochs: VecDeque::from([epoch_end(1, 7)]), ..Default::default() },
        meanwhile: || part.set_replica(follower_state(ME, 3), 0),
    };
    let mut checked = HashMap::new();
    let refused = check_epochs(&mut leader, ME, &[&f], &mut checked).await.unwrap();
    assert!(!refused);
    assert_eq!(log_end(&part), 10);
    assert!(checked.is_empty(), "not checked: the fetcher asks again under the new state, if it still follows");
}

#[tokio::test]
async fn a_replica_that_no_longer_leads_refuses_writes_before_its_view_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5)], 5);
    part.set_replica(follower_state(ME, 1), 0);
    let records = batch(-1, 0, 2);
    let batches = oxbow_log::batch::validate_produce(&records, usize::MAX).unwrap();
    part.append(&records, &batches, None, 0, None, oxbow_log::Flush::Now).expect("the leader takes a write");
    assert_eq!(log_end(&part), 7);
    // A new image made LEADER the leader; a request routed by the view from before still
    // reaches this partition.
    part.set_replica(follower_state(LEADER, 2), 0);
    let e = part
        .append(&records, &batches, None, 0, None, oxbow_log::Flush::Now)
        .expect_err("a follower takes no client write");
    assert!(matches!(e, BrokerError::NotLeader(_)), "{e:?}");
    assert_eq!(log_end(&part), 7);
}

/// A partition's high watermark, log end and leader share one watch channel: a write waiting
/// for the in-sync replicas (acks=all) waits for the high watermark alone (the leader's own
/// appends move only the log end), completes when a follower's fetch moves it, and gives up
/// as soon as another broker leads.
#[tokio::test]
async fn a_write_waiting_for_the_isr_wakes_on_its_high_watermark_or_a_new_leader() {
    let dir = tempfile::tempdir().unwrap();
    let part = follower(&dir, &[(0, 0, 5)], 5);
    part.set_replica(follower_state(ME, 1), 0);
    let write = || {
        let records = batch(-1, 0, 2);
        let batches = oxbow_log::batch::validate_produce(&records, usize::MAX).unwrap();
        part.append(&records, &batches, None, 0, None, oxbow_log::Flush::Now).expect("the leader takes a write");
    };
    write();
    assert_eq!((log_end(&part), part.high_watermark()), (7, 5));
    assert_eq!(part.wait_for_hw(7, Duration::from_millis(50)).await, Err(HwWait::TimedOut));
    write();
    assert_eq!((log_end(&part), part.high_watermark()), (9, 5), "the log end moved, the high watermark did not");

    let waiter = |offset| {
        let part = part.clone();
        tokio::spawn(async move { part.wait_for_hw(offset, Duration::from_secs(60)).await })
    };
    let acked = waiter(7);
    part.follower_fetched(LEADER, 7, 0, 0).unwrap();
    assert_eq!(acked.await.unwrap(), Ok(()));
    assert_eq!(part.high_watermark(), 7);

    let given_up = waiter(9);
    tokio::task::yield_now().await;
    part.set_replica(follower_state(LEADER, 2), 0);
    assert_eq!(given_up.await.unwrap(), Err(HwWait::NotLeader));
}
