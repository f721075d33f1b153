//! Request dispatch: header peek, version checks, decoding, one module per API, encoding.
//!
//! Each handler takes the decoded request and returns the response body; errors inside a
//! request become per-topic or per-partition error codes (through [`crate::errors`]). A request
//! that cannot be decoded at all closes the connection, as Kafka does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Context;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use opentelemetry::KeyValue;
use oxbow_protocol::codec::{AnyRequest, decode_any, encode_response};
use oxbow_protocol::frame::peek_header;
use oxbow_protocol::messages::{ApiVersionsResponse, RequestHeader};
use oxbow_protocol::{ApiKey, versions};
use tracing::Instrument;

use crate::broker::Broker;
use crate::errors::ConnError;
use crate::security::Session;
use crate::trace::{self, Span};
use crate::zero_copy::{self, Response};

mod access;
mod acls;
mod admin;
mod api_versions;
mod configs;
mod consumer_groups;
mod epochs;
mod fetch;
mod groups;
mod list_offsets;
mod log_dirs;
mod metadata;
mod offsets;
mod produce;
mod quorum;
mod reassignments;
mod scram_users;
mod transactions;
pub mod util;

/// What a handler sees besides its request.
pub struct Ctx<'a> {
    pub broker: &'a Arc<Broker>,
    pub version: i16,
    pub header: &'a RequestHeader,
    /// The client's address (group members' `client_host`).
    pub peer: std::net::SocketAddr,
    /// Lets the connection start its next request (see [`Applied`]).
    pub applied: &'a Applied,
    /// Who sent the request, on which listener.
    pub session: &'a Session,
    /// The request's span (empty unless traces are exported and the request is sampled).
    pub trace: &'a Span,
}

/// The point after which a request's effects are in place, so the connection may start its
/// next request. A request that finishes has applied its effects; a handler that waits after
/// applying them (acks=all, a long poll) fires this before the wait.
///
/// Handlers fire it while the connection polls them, and then the connection sees the flag when
/// that poll returns: no wake-up is scheduled for it. A wake-up per request made the idle worker
/// thread take the connection's task every time (a context switch per request on the produce
/// path, 25% more broker CPU per GB for a pipelining producer). A fire from anywhere else (a
/// spawned task) wakes the connection.
#[derive(Default)]
pub struct Applied {
    fired: AtomicBool,
    /// True while the connection polls its requests.
    polling: AtomicBool,
    waker: AtomicWaker,
    /// Set by [`Applied::close_after`].
    closes: AtomicBool,
}

impl Applied {
    /// Fires the signal (once; later calls do nothing).
    pub fn fire(&self) {
        if !self.fired.swap(true, Ordering::SeqCst) && !self.polling.load(Ordering::SeqCst) {
            self.waker.wake();
        }
    }

    /// Makes the connection start nothing after this request: it answers what is in flight and
    /// closes, and the client sends again what it had pipelined behind. Call before [`fire`].
    ///
    /// [`fire`]: Applied::fire
    pub fn close_after(&self) {
        self.closes.store(true, Ordering::SeqCst);
    }

    /// Whether the connection closes after this request.
    pub fn closes(&self) -> bool {
        self.closes.load(Ordering::SeqCst)
    }

    /// Polls `poll` (which polls the request) with the flag that spares `fire` its wake-up, then
    /// registers `cx` for a fire from elsewhere. True if the signal has fired.
    pub fn poll_around<T>(&self, cx: &mut Context<'_>, poll: impl FnOnce(&mut Context<'_>) -> T) -> (T, bool) {
        self.polling.store(true, Ordering::SeqCst);
        let out = poll(cx);
        self.polling.store(false, Ordering::SeqCst);
        if !self.fired.load(Ordering::SeqCst) {
            self.waker.register(cx.waker());
        }
        (out, self.fired.load(Ordering::SeqCst))
    }
}

/// Handles one request frame under `session` (the place where an authorizer checks it). `Ok(None)`: no response (acks=0 produce). `applied` fires when the
/// request's effects are in place, if that is before this returns.
pub async fn dispatch(
    broker: &Arc<Broker>,
    frame: Bytes,
    peer: std::net::SocketAddr,
    session: &Session,
    applied: &Applied,
) -> Result<Option<Response>, ConnError> {
    let peek = peek_header(&frame)?;
    let Ok(api) = ApiKey::try_from(peek.api_key) else {
        return Err(ConnError::Refused(format!("unknown API key {}", peek.api_key)));
    };
    let v = peek.api_version;
    if !versions::is_supported(api, v) {
        if api == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries.
            let mut resp = ApiVersionsResponse::default();
            resp.error_code = crate::errors::BrokerError::UnsupportedVersion(String::new()).code();
            resp.api_keys = api_versions::ranges();
            return Ok(Some(Response::Bytes(encode_response(api, 0, peek.correlation_id, &resp)?)));
        }
        return Err(ConnError::Refused(format!("unsupported version {v} of {api:?}")));
    }
    let arrived = std::time::Instant::now();
    let (header, req) = decode_any(frame)?;
    broker.stats.request(api);
    let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    let span = tracing::debug_span!("request", api = ?api, version = v, correlation_id = peek.correlation_id, client_id = %client_id);
    let corr = peek.correlation_id;
    let trace = start_trace(api, v, corr, &client_id, &req, peer, session);
    let ctx = Ctx { broker, version: v, header: &header, peer, applied, session, trace: &trace };
    macro_rules! answer {
        ($fut:expr) => {{
            let resp = $fut.await;
            Ok(Some(Response::Bytes(encode_response(api, v, corr, &resp)?)))
        }};
    }
    let out: Result<Option<Response>, ConnError> = async {
        match req {
            AnyRequest::ApiVersions(r) => answer!(api_versions::handle(&ctx, r)),
            AnyRequest::Metadata(r) => answer!(metadata::handle(&ctx, r)),
            AnyRequest::Produce(r) => match produce::handle(&ctx, r).await {
                Some(resp) => Ok(Some(Response::Bytes(encode_response(api, v, corr, &resp)?))),
                None => Ok(None),
            },
            AnyRequest::Fetch(r) => {
                let (resp, slices) = fetch::handle(&ctx, r).await;
                Ok(Some(zero_copy::encode_response(api, v, corr, &resp, slices)?))
            }
            AnyRequest::ListOffsets(r) => answer!(list_offsets::handle(&ctx, r)),
            AnyRequest::OffsetForLeaderEpoch(r) => answer!(epochs::handle(&ctx, r)),
            AnyRequest::CreateTopics(r) => answer!(admin::create_topics(&ctx, r)),
            AnyRequest::DeleteTopics(r) => answer!(admin::delete_topics(&ctx, r)),
            AnyRequest::CreatePartitions(r) => answer!(admin::create_partitions(&ctx, r)),
            AnyRequest::DeleteRecords(r) => answer!(admin::delete_records(&ctx, r)),
            AnyRequest::ElectLeaders(r) => answer!(admin::elect_leaders(&ctx, r)),
            AnyRequest::AlterPartitionReassignments(r) => answer!(reassignments::alter(&ctx, r)),
            AnyRequest::ListPartitionReassignments(r) => answer!(reassignments::list(&ctx, r)),
            AnyRequest::UnregisterBroker(r) => answer!(reassignments::unregister_broker(&ctx, r)),
            AnyRequest::InitProducerId(r) => answer!(admin::init_producer_id(&ctx, r)),
            AnyRequest::DescribeCluster(r) => answer!(admin::describe_cluster(&ctx, r)),
            AnyRequest::DescribeConfigs(r) => answer!(configs::describe(&ctx, r)),
            AnyRequest::DescribeLogDirs(r) => answer!(log_dirs::handle(&ctx, r)),
            AnyRequest::AlterConfigs(r) => answer!(configs::alter(&ctx, r)),
            AnyRequest::IncrementalAlterConfigs(r) => answer!(configs::incremental_alter(&ctx, r)),
            AnyRequest::DescribeProducers(r) => answer!(admin::describe_producers(&ctx, r)),
            AnyRequest::DescribeQuorum(r) => answer!(quorum::describe(&ctx, r)),
            AnyRequest::AddRaftVoter(r) => answer!(quorum::add_voter(&ctx, r)),
            AnyRequest::RemoveRaftVoter(r) => answer!(quorum::remove_voter(&ctx, r)),
            AnyRequest::FindCoordinator(r) => answer!(groups::find_coordinator(&ctx, r)),
            AnyRequest::JoinGroup(r) => answer!(groups::join_group(&ctx, r)),
            AnyRequest::SyncGroup(r) => answer!(groups::sync_group(&ctx, r)),
            AnyRequest::Heartbeat(r) => answer!(groups::heartbeat(&ctx, r)),
            AnyRequest::LeaveGroup(r) => answer!(groups::leave_group(&ctx, r)),
            AnyRequest::OffsetCommit(r) => answer!(offsets::offset_commit(&ctx, r)),
            AnyRequest::OffsetFetch(r) => answer!(offsets::offset_fetch(&ctx, r)),
            AnyRequest::OffsetDelete(r) => answer!(offsets::offset_delete(&ctx, r)),
            AnyRequest::ListGroups(r) => answer!(groups::list_groups(&ctx, r)),
            AnyRequest::DescribeGroups(r) => answer!(groups::describe_groups(&ctx, r)),
            AnyRequest::DeleteGroups(r) => answer!(groups::delete_groups(&ctx, r)),
            AnyRequest::ConsumerGroupHeartbeat(r) => answer!(consumer_groups::heartbeat(&ctx, r)),
            AnyRequest::ConsumerGroupDescribe(r) => answer!(consumer_groups::describe(&ctx, r)),
            AnyRequest::AddPartitionsToTxn(r) => answer!(transactions::add_partitions_to_txn(&ctx, r)),
            AnyRequest::AddOffsetsToTxn(r) => answer!(transactions::add_offsets_to_txn(&ctx, r)),
            AnyRequest::EndTxn(r) => answer!(transactions::end_txn(&ctx, r)),
            AnyRequest::WriteTxnMarkers(r) => answer!(transactions::write_txn_markers(&ctx, r)),
            AnyRequest::TxnOffsetCommit(r) => answer!(offsets::txn_offset_commit(&ctx, r)),
            AnyRequest::DescribeTransactions(r) => answer!(transactions::describe_transactions(&ctx, r)),
            AnyRequest::ListTransactions(r) => answer!(transactions::list_transactions(&ctx, r)),
            AnyRequest::SaslHandshake(r) => answer!(scram_users::sasl_handshake(&ctx, r)),
            AnyRequest::SaslAuthenticate(r) => answer!(scram_users::sasl_authenticate(&ctx, r)),
            AnyRequest::DescribeUserScramCredentials(r) => answer!(scram_users::describe(&ctx, r)),
            AnyRequest::AlterUserScramCredentials(r) => answer!(scram_users::alter(&ctx, r)),
            AnyRequest::CreateAcls(r) => answer!(acls::create(&ctx, r)),
            AnyRequest::DescribeAcls(r) => answer!(acls::describe(&ctx, r)),
            AnyRequest::DeleteAcls(r) => answer!(acls::delete(&ctx, r)),
        }
    }
    .instrument(span)
    .await;
    match &out {
        Ok(_) => broker.stats.request_done(api, arrived.elapsed()),
        Err(e) => trace.fail(|| e.to_string()),
    }
    out
}

/// The request's span ([`crate::trace`]): a produce continues the traces its records carry.
fn start_trace(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    req: &AnyRequest,
    peer: std::net::SocketAddr,
    session: &Session,
) -> Span {
    if !trace::enabled() {
        return Span::default();
    }
    let parents = match req {
        AnyRequest::Produce(r) => trace::record_contexts(r),
        _ => Vec::new(),
    };
    Span::request(oxbow_protocol::api_name(api), &parents, || {
        vec![
            KeyValue::new("rpc.system", "kafka"),
            KeyValue::new("rpc.method", oxbow_protocol::api_name(api)),
            KeyValue::new("kafka.api.version", i64::from(version)),
            KeyValue::new("kafka.correlation_id", i64::from(correlation_id)),
            KeyValue::new("messaging.client.id", client_id.to_owned()),
            KeyValue::new("network.peer.address", peer.ip().to_string()),
            KeyValue::new("network.peer.port", i64::from(peer.port())),
            KeyValue::new("oxbow.listener", session.listener.to_string()),
            KeyValue::new("oxbow.principal", session.principal.to_string()),
        ]
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};

    use super::Applied;

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_fire_while_the_connection_polls_wakes_nothing_and_is_seen_when_the_poll_returns() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let a = Applied::default();
        let ((), fired) = a.poll_around(&mut cx, |_| ());
        assert!(!fired);
        let ((), fired) = a.poll_around(&mut cx, |_| a.fire());
        assert!(fired);
        a.fire();
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_fire_from_elsewhere_wakes_the_connection_once() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let a = Arc::new(Applied::default());
        let ((), fired) = a.poll_around(&mut cx, |_| ());
        assert!(!fired);
        let other = a.clone();
        std::thread::spawn(move || {
            other.fire();
            other.fire();
        })
        .join()
        .unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let ((), fired) = a.poll_around(&mut cx, |_| ());
        assert!(fired);
    }
}
