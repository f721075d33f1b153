//! Request dispatch: header peek, version checks, decoding, one module per API, encoding.
//!
//! Each handler takes the decoded request and returns the response body; errors inside a
//! request become per-topic or per-partition error codes (through [`crate::errors`]). A request
//! that cannot be decoded at all closes the connection, as Kafka does.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oxbow_protocol::codec::{AnyRequest, decode_any, encode_response};
use oxbow_protocol::frame::peek_header;
use oxbow_protocol::messages::{ApiVersionsResponse, RequestHeader};
use oxbow_protocol::{ApiKey, versions};
use tracing::Instrument;

use crate::broker::Broker;
use crate::errors::ConnError;

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
pub mod util;

/// What a handler sees besides its request.
pub struct Ctx<'a> {
    pub broker: &'a Arc<Broker>,
    pub version: i16,
    pub header: &'a RequestHeader,
    /// The client's address (group members' `client_host`).
    pub peer: std::net::SocketAddr,
    /// Lets the connection start its next request (see [`Applied`]).
    pub applied: Applied,
}

/// The point after which a request's effects are in place, so the connection may start the next
/// request. Dropping it (the request finished) is the same as firing it; a handler that waits
/// after applying its effects (acks=all, a long poll) fires it before the wait.
pub struct Applied(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl Applied {
    pub fn new(signal: tokio::sync::oneshot::Sender<()>) -> Self {
        Self(std::sync::Mutex::new(Some(signal)))
    }

    /// Fires the signal (once; later calls do nothing).
    pub fn fire(&self) {
        let taken = self.0.lock().map(|mut s| s.take()).unwrap_or(None);
        if let Some(s) = taken {
            let _ = s.send(());
        }
    }
}

/// Handles one request frame. `Ok(None)`: no response (acks=0 produce). `applied` fires when the
/// request's effects are in place (at the latest when this returns).
pub async fn dispatch(
    broker: &Arc<Broker>,
    frame: Bytes,
    peer: std::net::SocketAddr,
    applied: tokio::sync::oneshot::Sender<()>,
) -> Result<Option<BytesMut>, ConnError> {
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
            return Ok(Some(encode_response(api, 0, peek.correlation_id, &resp)?));
        }
        return Err(ConnError::Refused(format!("unsupported version {v} of {api:?}")));
    }
    let (header, req) = decode_any(frame)?;
    broker.stats.request(api);
    let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    let span = tracing::debug_span!("request", api = ?api, version = v, correlation_id = peek.correlation_id, client_id = %client_id);
    let corr = peek.correlation_id;
    let ctx = Ctx { broker, version: v, header: &header, peer, applied: Applied::new(applied) };
    macro_rules! answer {
        ($fut:expr) => {{
            let resp = $fut.await;
            Ok(Some(encode_response(api, v, corr, &resp)?))
        }};
    }
    async {
        match req {
            AnyRequest::ApiVersions(r) => answer!(api_versions::handle(&ctx, r)),
            AnyRequest::Metadata(r) => answer!(metadata::handle(&ctx, r)),
            AnyRequest::Produce(r) => match produce::handle(&ctx, r).await {
                Some(resp) => Ok(Some(encode_response(api, v, corr, &resp)?)),
                None => Ok(None),
            },
            AnyRequest::Fetch(r) => answer!(fetch::handle(&ctx, r)),
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
        }
    }
    .instrument(span)
    .await
}
