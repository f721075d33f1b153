//! Request dispatch: header peek, version checks, decoding, one module per API, encoding.
//!
//! Each handler takes the decoded request and returns the response body; errors inside a
//! request become per-topic or per-partition error codes (through [`crate::errors`]). A request
//! that cannot be decoded at all closes the connection, as Kafka does.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oxbow_protocol::codec::{decode_body, decode_header, encode_response};
use oxbow_protocol::frame::peek_header;
use oxbow_protocol::messages::{ApiVersionsResponse, RequestHeader};
use oxbow_protocol::{ApiKey, ResponseError, versions};
use tracing::Instrument;

use crate::broker::Broker;
use crate::network::ConnError;

mod admin;
mod api_versions;
mod configs;
mod fetch;
mod list_offsets;
mod metadata;
mod produce;
pub mod util;

/// What a handler sees besides its request.
pub struct Ctx<'a> {
    pub broker: &'a Arc<Broker>,
    pub version: i16,
    pub header: &'a RequestHeader,
}

macro_rules! serve {
    ($api:expr, $version:expr, $corr:expr, $raw:expr, $broker:expr, $req:ty, $handler:path) => {{
        let mut body = $raw.body;
        let req: $req = decode_body($api, $version, &mut body)?;
        let ctx = Ctx { broker: $broker, version: $version, header: &$raw.header };
        let resp = $handler(&ctx, req).await;
        Ok(Some(encode_response($api, $version, $corr, &resp)?))
    }};
}

/// Handles one request frame. `Ok(None)`: no response (acks=0 produce).
pub async fn dispatch(broker: &Arc<Broker>, frame: Bytes) -> Result<Option<BytesMut>, ConnError> {
    let peek = peek_header(&frame)?;
    let Ok(api) = ApiKey::try_from(peek.api_key) else {
        return Err(ConnError::Refused(format!("unknown API key {}", peek.api_key)));
    };
    let v = peek.api_version;
    if !versions::is_supported(api, v) {
        if api == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries.
            let mut resp = ApiVersionsResponse::default();
            resp.error_code = ResponseError::UnsupportedVersion.code();
            resp.api_keys = api_versions::ranges();
            return Ok(Some(encode_response(api, 0, peek.correlation_id, &resp)?));
        }
        return Err(ConnError::Refused(format!("unsupported version {v} of {api:?}")));
    }
    let raw = decode_header(api, v, frame)?;
    let client_id = raw.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    let span = tracing::debug_span!("request", api = ?api, version = v, correlation_id = peek.correlation_id, client_id = %client_id);
    let corr = peek.correlation_id;
    async move {
        use oxbow_protocol::messages::*;
        match api {
            ApiKey::ApiVersions => serve!(api, v, corr, raw, broker, ApiVersionsRequest, api_versions::handle),
            ApiKey::Metadata => serve!(api, v, corr, raw, broker, MetadataRequest, metadata::handle),
            ApiKey::Produce => {
                let mut body = raw.body;
                let req: ProduceRequest = decode_body(api, v, &mut body)?;
                let ctx = Ctx { broker, version: v, header: &raw.header };
                match produce::handle(&ctx, req).await {
                    Some(resp) => Ok(Some(encode_response(api, v, corr, &resp)?)),
                    None => Ok(None),
                }
            }
            ApiKey::Fetch => serve!(api, v, corr, raw, broker, FetchRequest, fetch::handle),
            ApiKey::ListOffsets => serve!(api, v, corr, raw, broker, ListOffsetsRequest, list_offsets::handle),
            ApiKey::CreateTopics => serve!(api, v, corr, raw, broker, CreateTopicsRequest, admin::create_topics),
            ApiKey::DeleteTopics => serve!(api, v, corr, raw, broker, DeleteTopicsRequest, admin::delete_topics),
            ApiKey::CreatePartitions => serve!(api, v, corr, raw, broker, CreatePartitionsRequest, admin::create_partitions),
            ApiKey::DeleteRecords => serve!(api, v, corr, raw, broker, DeleteRecordsRequest, admin::delete_records),
            ApiKey::InitProducerId => serve!(api, v, corr, raw, broker, InitProducerIdRequest, admin::init_producer_id),
            ApiKey::DescribeCluster => serve!(api, v, corr, raw, broker, DescribeClusterRequest, admin::describe_cluster),
            ApiKey::DescribeConfigs => serve!(api, v, corr, raw, broker, DescribeConfigsRequest, configs::describe),
            ApiKey::AlterConfigs => serve!(api, v, corr, raw, broker, AlterConfigsRequest, configs::alter),
            ApiKey::IncrementalAlterConfigs => serve!(api, v, corr, raw, broker, IncrementalAlterConfigsRequest, configs::incremental_alter),
            other => Err(ConnError::Refused(format!("{other:?} is advertised but has no handler"))),
        }
    }
    .instrument(span)
    .await
}
