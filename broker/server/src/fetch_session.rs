//! Incremental fetch sessions (KIP-227), for followers.
//!
//! A follower of thousands of partitions would otherwise name every one of them in every fetch,
//! and hear back about every one of them, though most have nothing new. In a session the leader
//! keeps what the follower last asked for each partition (fetch offset, log start, epoch, byte
//! limit) and last heard (high watermark, log start); an incremental fetch names only the
//! partitions whose fetch state changed (and those to forget), stands for all of the session's,
//! and its answer holds only the partitions with records, a new high watermark or log start, or
//! an error.
//!
//! The protocol is Kafka's: a full fetch with epoch 0 asks for a session and its answer carries
//! the session id (0: none was made); an incremental fetch gives that id and the epoch the
//! session expects (1, 2, ... wrapping to 1), else the whole answer is FETCH_SESSION_ID_NOT_FOUND
//! or INVALID_FETCH_SESSION_EPOCH and the fetcher starts again with a full fetch; epoch -1 closes
//! a session. Only followers get sessions: a consumer's fetch that asks for one is answered
//! sessionless (session id 0), which KIP-227 allows at any time and Kafka does when its cache is
//! full. A follower's new session replaces its older one (a follower fetches from a leader on
//! one connection), sessions unused for [`IDLE_EVICTION`] are dropped when a new one is made,
//! and `max.incremental.fetch.session.cache.slots` bounds them.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use oxbow_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use oxbow_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use oxbow_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::errors::BrokerError;

/// A session unused this long is dropped when another is made (Kafka's eviction age, 120 s).
pub const IDLE_EVICTION: Duration = Duration::from_secs(120);
/// The epoch of a full fetch that asks for a new session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch of a sessionless fetch (and of one that closes its session).
pub const FINAL_EPOCH: i32 = -1;

/// The epoch after `epoch`: 1 after `i32::MAX`, as Kafka's `FetchMetadata.nextEpoch`.
pub fn next_epoch(epoch: i32) -> i32 {
    match epoch {
        e if e < 0 => FINAL_EPOCH,
        i32::MAX => 1,
        e => e + 1,
    }
}

/// A topic as the fetch names it: by name before Fetch v13, by id from v13.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum TopicRef {
    Name(String),
    Id(Uuid),
}

impl TopicRef {
    fn new(name: &TopicName, id: Uuid, by_id: bool) -> Self {
        if by_id { TopicRef::Id(id) } else { TopicRef::Name(name.0.to_string()) }
    }

    fn of_request(t: &FetchTopic, by_id: bool) -> Self {
        Self::new(&t.topic, t.topic_id, by_id)
    }

    fn of_forgotten(t: &ForgottenTopic, by_id: bool) -> Self {
        Self::new(&t.topic, t.topic_id, by_id)
    }

    fn of_response(t: &FetchableTopicResponse, by_id: bool) -> Self {
        Self::new(&t.topic, t.topic_id, by_id)
    }

    fn fetch_topic(&self) -> FetchTopic {
        let mut t = FetchTopic::default();
        match self {
            TopicRef::Name(n) => t.topic = TopicName(n.clone().into()),
            TopicRef::Id(id) => t.topic_id = *id,
        }
        t
    }
}

/// A session's partitions by topic, then index.
type Parts = BTreeMap<TopicRef, BTreeMap<i32, Cached>>;

/// A partition of a session.
struct Cached {
    /// What the follower last asked for it.
    asked: FetchPartition,
    /// The high watermark and log start offset the follower last heard (-1: not yet, or an
    /// error since, so the partition is answered again).
    sent_hw: i64,
    sent_log_start: i64,
}

struct Session {
    /// The follower's broker id.
    replica: i32,
    /// The epoch its next fetch must carry.
    epoch: i32,
    by_id: bool,
    parts: Parts,
    used: Instant,
}

/// How one fetch uses sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Answered whole, with session id 0.
    Sessionless,
    /// A follower's full fetch asking for a session: answered whole, then [`FetchSessions::close`]
    /// makes the session from the answer.
    Full,
    /// An incremental fetch of session `id`: the request now names every partition of the
    /// session, and [`FetchSessions::close`] trims the answer to what changed.
    Incremental(i32),
}

/// The leader's sessions, one per follower fetching from it.
pub struct FetchSessions {
    slots: usize,
    sessions: Mutex<HashMap<i32, Session>>,
}

impl FetchSessions {
    pub fn new(slots: usize) -> Self {
        Self { slots, sessions: Mutex::new(HashMap::new()) }
    }

    /// Sessions open now (the `NumIncrementalFetchSessions` of Kafka's metrics).
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The context of `req` from `follower` (None: a consumer). For an incremental fetch, the
    /// session takes the request's partitions (new ones, new fetch states) and forgets those it
    /// lists, and `req.topics` becomes every partition of the session with its last fetch
    /// state. Err: the error of the whole answer.
    pub fn open(&self, req: &mut FetchRequest, by_id: bool, follower: Option<i32>) -> Result<Context, BrokerError> {
        let (id, epoch) = (req.session_id, req.session_epoch);
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != 0 {
                // Closed by the client it belongs to only.
                let mut all = self.sessions.lock();
                if all.get(&id).is_some_and(|s| Some(s.replica) == follower) {
                    all.remove(&id);
                }
            }
            let wanted = epoch == INITIAL_EPOCH && follower.is_some() && self.slots > 0;
            return Ok(if wanted { Context::Full } else { Context::Sessionless });
        }
        let mut all = self.sessions.lock();
        let Some(s) = all.get_mut(&id) else {
            return Err(BrokerError::FetchSessionNotFound);
        };
        if s.replica != follower.unwrap_or(-1) || s.by_id != by_id {
            // Another client's session, or the topics named another way than when it began.
            return Err(BrokerError::FetchSessionNotFound);
        }
        if s.epoch != epoch {
            return Err(BrokerError::InvalidFetchSessionEpoch);
        }
        for t in &req.forgotten_topics_data {
            let topic = TopicRef::of_forgotten(t, by_id);
            if let Some(parts) = s.parts.get_mut(&topic) {
                for p in &t.partitions {
                    parts.remove(p);
                }
                if parts.is_empty() {
                    s.parts.remove(&topic);
                }
            }
        }
        for t in &req.topics {
            let parts = s.parts.entry(TopicRef::of_request(t, by_id)).or_default();
            for p in &t.partitions {
                match parts.entry(p.partition) {
                    Entry::Occupied(mut e) => e.get_mut().asked = p.clone(),
                    Entry::Vacant(e) => {
                        e.insert(Cached { asked: p.clone(), sent_hw: -1, sent_log_start: -1 });
                    }
                }
            }
        }
        s.epoch = next_epoch(epoch);
        s.used = Instant::now();
        req.topics = grouped(&s.parts);
        req.forgotten_topics_data.clear();
        Ok(Context::Incremental(id))
    }

    /// Ends a fetch in `context`: a full fetch's answer opens the session (its id goes into the
    /// answer, which stays whole); an incremental fetch's answer keeps only the partitions with
    /// something new for the follower.
    pub fn close(
        &self,
        context: Context,
        req: &FetchRequest,
        by_id: bool,
        follower: Option<i32>,
        resp: &mut FetchResponse,
    ) {
        match context {
            Context::Sessionless => {}
            Context::Full => self.create(req, by_id, follower.unwrap_or(-1), resp),
            Context::Incremental(id) => self.trim(id, by_id, resp),
        }
    }

    fn create(&self, req: &FetchRequest, by_id: bool, replica: i32, resp: &mut FetchResponse) {
        let mut parts = Parts::new();
        for t in &req.topics {
            let topic = parts.entry(TopicRef::of_request(t, by_id)).or_default();
            for p in &t.partitions {
                topic.insert(p.partition, Cached { asked: p.clone(), sent_hw: -1, sent_log_start: -1 });
            }
        }
        for t in &resp.responses {
            let Some(topic) = parts.get_mut(&TopicRef::of_response(t, by_id)) else { continue };
            for p in &t.partitions {
                if let Some(c) = topic.get_mut(&p.partition_index) {
                    news(c, p);
                }
            }
        }
        let now = Instant::now();
        let mut all = self.sessions.lock();
        all.retain(|_, s| s.replica != replica && now.duration_since(s.used) < IDLE_EVICTION);
        if all.len() >= self.slots {
            return;
        }
        let id = loop {
            let id = (Uuid::new_v4().as_u128() as u32 & 0x7fff_ffff) as i32;
            if id != 0 && !all.contains_key(&id) {
                break id;
            }
        };
        all.insert(id, Session { replica, epoch: 1, by_id, parts, used: now });
        resp.session_id = id;
    }

    fn trim(&self, id: i32, by_id: bool, resp: &mut FetchResponse) {
        let mut all = self.sessions.lock();
        // Dropped meanwhile (a newer session of the follower): the answer stays whole, and the
        // follower's next incremental fetch finds no session.
        let Some(s) = all.get_mut(&id) else { return };
        for t in &mut resp.responses {
            let Some(topic) = s.parts.get_mut(&TopicRef::of_response(t, by_id)) else { continue };
            t.partitions.retain(|p| topic.get_mut(&p.partition_index).is_none_or(|c| news(c, p)));
        }
        resp.responses.retain(|t| !t.partitions.is_empty());
        resp.session_id = id;
    }
}

/// Whether the follower must hear about `p` (Kafka's `CachedPartition.maybeUpdateResponseData`):
/// records, a high watermark or log start it has not heard, or an error; notes what it hears.
fn news(c: &mut Cached, p: &PartitionData) -> bool {
    let mut must = p.records.as_ref().is_some_and(|r| !r.is_empty());
    if c.sent_hw != p.high_watermark {
        c.sent_hw = p.high_watermark;
        must = true;
    }
    if c.sent_log_start != p.log_start_offset {
        c.sent_log_start = p.log_start_offset;
        must = true;
    }
    if p.error_code != 0 {
        // Answered again once the error is gone.
        c.sent_hw = -1;
        must = true;
    }
    must
}

/// A session's partitions as a request's topics, each topic once.
fn grouped(parts: &Parts) -> Vec<FetchTopic> {
    parts
        .iter()
        .map(|(topic, ps)| {
            let mut t = topic.fetch_topic();
            t.partitions = ps.values().map(|c| c.asked.clone()).collect();
            t
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const FOLLOWER: Option<i32> = Some(2);

    fn fetch(id: i32, epoch: i32, parts: &[(i32, i64)], forget: &[i32]) -> FetchRequest {
        let mut req = FetchRequest::default();
        req.session_id = id;
        req.session_epoch = epoch;
        if !parts.is_empty() {
            let mut t = TopicRef::Name("t".into()).fetch_topic();
            for (p, offset) in parts {
                let mut fp = FetchPartition::default();
                fp.partition = *p;
                fp.fetch_offset = *offset;
                t.partitions.push(fp);
            }
            req.topics = vec![t];
        }
        if !forget.is_empty() {
            let mut f = ForgottenTopic::default();
            f.topic = TopicName("t".to_string().into());
            f.partitions = forget.to_vec();
            req.forgotten_topics_data = vec![f];
        }
        req
    }

    /// An answer for partitions `(index, high watermark, records)` of topic t.
    fn answer(parts: &[(i32, i64, &'static [u8])]) -> FetchResponse {
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName("t".to_string().into());
        for (p, hw, records) in parts {
            let mut pd = PartitionData::default();
            pd.partition_index = *p;
            pd.high_watermark = *hw;
            pd.records = Some(Bytes::from_static(records));
            t.partitions.push(pd);
        }
        let mut resp = FetchResponse::default();
        resp.responses = vec![t];
        resp
    }

    fn asked(req: &FetchRequest) -> Vec<(i32, i64)> {
        req.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset))).collect()
    }

    fn answered(resp: &FetchResponse) -> Vec<i32> {
        resp.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.partition_index)).collect()
    }

    /// Opens a session over partitions 0..3 (high watermark 5 each) and returns its id.
    fn session(cache: &FetchSessions) -> i32 {
        let mut req = fetch(0, INITIAL_EPOCH, &[(0, 5), (1, 5), (2, 5)], &[]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        assert_eq!(cx, Context::Full);
        let mut resp = answer(&[(0, 5, b""), (1, 5, b""), (2, 5, b"")]);
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert_ne!(resp.session_id, 0);
        assert_eq!(answered(&resp), [0, 1, 2], "a full fetch is answered whole");
        resp.session_id
    }

    #[test]
    fn an_incremental_fetch_stands_for_the_session_and_hears_only_news() {
        let cache = FetchSessions::new(10);
        let id = session(&cache);
        // Partition 1 moved on; nothing else is named.
        let mut req = fetch(id, 1, &[(1, 9)], &[]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        assert_eq!(cx, Context::Incremental(id));
        assert_eq!(asked(&req), [(0, 5), (1, 9), (2, 5)], "every partition, with the last fetch state");
        // 0: nothing new; 1: records; 2: a new high watermark.
        let mut resp = answer(&[(0, 5, b""), (1, 9, b"x"), (2, 7, b"")]);
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert_eq!(resp.session_id, id);
        assert_eq!(answered(&resp), [1, 2]);
        // Nothing new at all: a topic without partitions is left out.
        let mut req = fetch(id, 2, &[], &[]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        let mut resp = answer(&[(0, 5, b""), (1, 9, b""), (2, 7, b"")]);
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert!(resp.responses.is_empty());
    }

    #[test]
    fn errors_are_always_answered_and_the_next_good_answer_too() {
        let cache = FetchSessions::new(10);
        let id = session(&cache);
        let mut req = fetch(id, 1, &[], &[]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        let mut resp = answer(&[(0, 5, b""), (1, 5, b""), (2, 5, b"")]);
        resp.responses[0].partitions[2].error_code = 6;
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert_eq!(answered(&resp), [2]);
        let mut req = fetch(id, 2, &[], &[]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        let mut resp = answer(&[(0, 5, b""), (1, 5, b""), (2, 5, b"")]);
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert_eq!(answered(&resp), [2], "the partition is back: the follower hears its state again");
    }

    #[test]
    fn forgotten_and_added_partitions() {
        let cache = FetchSessions::new(10);
        let id = session(&cache);
        let mut req = fetch(id, 1, &[(7, 0)], &[0, 2]);
        let cx = cache.open(&mut req, false, FOLLOWER).unwrap();
        assert_eq!(asked(&req), [(1, 5), (7, 0)]);
        assert!(req.forgotten_topics_data.is_empty());
        let mut resp = answer(&[(1, 5, b""), (7, 0, b"")]);
        cache.close(cx, &req, false, FOLLOWER, &mut resp);
        assert_eq!(answered(&resp), [7], "a new partition is answered once");
    }

    #[test]
    fn wrong_epochs_unknown_sessions_and_other_clients_are_refused() {
        let cache = FetchSessions::new(10);
        let id = session(&cache);
        let refused = |id, epoch, who| cache.open(&mut fetch(id, epoch, &[], &[]), false, who).unwrap_err();
        assert!(matches!(refused(id, 2, FOLLOWER), BrokerError::InvalidFetchSessionEpoch));
        assert!(matches!(refused(id + 1, 1, FOLLOWER), BrokerError::FetchSessionNotFound));
        assert!(matches!(refused(id, 1, None), BrokerError::FetchSessionNotFound), "a consumer");
        assert!(matches!(refused(id, 1, Some(3)), BrokerError::FetchSessionNotFound), "another follower");
        // The refusals left the session as it was.
        assert_eq!(cache.open(&mut fetch(id, 1, &[], &[]), false, FOLLOWER).unwrap(), Context::Incremental(id));
        // Epoch -1 closes it and is answered sessionless.
        assert_eq!(cache.open(&mut fetch(id, FINAL_EPOCH, &[], &[]), false, FOLLOWER).unwrap(), Context::Sessionless);
        assert!(cache.is_empty());
    }

    #[test]
    fn consumers_and_full_caches_get_no_session() {
        let cache = FetchSessions::new(1);
        let mut req = fetch(0, INITIAL_EPOCH, &[(0, 0)], &[]);
        assert_eq!(cache.open(&mut req, false, None).unwrap(), Context::Sessionless);
        let first = session(&cache);
        // The same follower again: its new session replaces the old one.
        let second = session(&cache);
        assert_ne!(first, second);
        assert_eq!(cache.len(), 1);
        // Another follower finds the one slot taken.
        let mut req = fetch(0, INITIAL_EPOCH, &[(0, 0)], &[]);
        let cx = cache.open(&mut req, false, Some(3)).unwrap();
        let mut resp = answer(&[(0, 0, b"")]);
        cache.close(cx, &req, false, Some(3), &mut resp);
        assert_eq!(resp.session_id, 0);
        assert_eq!(FetchSessions::new(0).open(&mut req, false, FOLLOWER).unwrap(), Context::Sessionless);
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(FINAL_EPOCH), FINAL_EPOCH);
    }
}
