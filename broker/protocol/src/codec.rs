//! Request decoding and response encoding with per-API header versions.
//!
//! Request header v1 (non-flexible) or v2 (flexible, with tagged fields) is chosen by the API's
//! version; responses use header v0 or v1 the same way, except ApiVersions, whose response
//! header is always v0 (KIP-511) so that a client can read it whatever version it asked for.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{self, ApiKey, RequestHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::ProtocolError;

/// A decoded request header plus the undecoded body.
#[derive(Debug)]
pub struct RawRequest {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: Bytes,
}

/// Decodes the request header of `frame`. The caller has checked that `api_key` is known and
/// `api_version` is within the crate's range (see [`crate::versions`]).
pub fn decode_header(api_key: ApiKey, version: i16, mut frame: Bytes) -> Result<RawRequest, ProtocolError> {
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|e| ProtocolError::Decode {
        api: api_key,
        version,
        reason: format!("header: {e}"),
    })?;
    Ok(RawRequest { api_key, header, body: frame })
}

/// Decodes a request body. Bytes left after the body are ignored, as Apache Kafka does: some
/// clients send them (librdkafka 2.16's Metadata v13 for all topics carries three extra bytes).
pub fn decode_body<T: Decodable>(api: ApiKey, version: i16, body: &mut Bytes) -> Result<T, ProtocolError> {
    T::decode(body, version).map_err(|e| ProtocolError::Decode { api, version, reason: e.to_string() })
}

/// Encodes a whole response frame: size prefix, response header, body.
pub fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<BytesMut, ProtocolError> {
    let frame = Frame::of(api, version, body)?;
    let mut buf = BytesMut::with_capacity(4 + frame.size as usize);
    frame.encode(correlation_id, body, &mut buf)?;
    Ok(buf)
}

/// [`encode_response`] into any buffer (one that keeps some fields' bytes by reference).
pub fn encode_response_into<T: Encodable, B: ByteBufMut>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
    buf: &mut B,
) -> Result<(), ProtocolError> {
    Frame::of(api, version, body)?.encode(correlation_id, body, buf)
}

/// A response frame's size and header version.
struct Frame {
    api: ApiKey,
    version: i16,
    header_version: i16,
    /// The size prefix: header and body.
    size: i32,
}

impl Frame {
    fn of<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Result<Self, ProtocolError> {
        let err = |reason: String| ProtocolError::Encode { api, version, reason };
        let header_version = if api == ApiKey::ApiVersions { 0 } else { api.response_header_version(version) };
        let body_size = body.compute_size(version).map_err(|e| err(e.to_string()))?;
        let header_size = if header_version >= 1 { 5 } else { 4 };
        let total = header_size + body_size;
        let size = i32::try_from(total).map_err(|_| err(format!("response of {total} bytes")))?;
        Ok(Self { api, version, header_version, size })
    }

    fn encode<T: Encodable, B: ByteBufMut>(
        &self,
        correlation_id: i32,
        body: &T,
        buf: &mut B,
    ) -> Result<(), ProtocolError> {
        buf.put_i32(self.size);
        buf.put_i32(correlation_id);
        if self.header_version >= 1 {
            buf.put_u8(0); // no tagged fields in the response header
        }
        body.encode(buf, self.version).map_err(|e| ProtocolError::Encode {
            api: self.api,
            version: self.version,
            reason: e.to_string(),
        })
    }
}

/// A request decoded into its typed body (only APIs in the version table).
#[derive(Debug)]
pub enum AnyRequest {
    ApiVersions(messages::ApiVersionsRequest),
    Metadata(messages::MetadataRequest),
    Produce(messages::ProduceRequest),
    Fetch(messages::FetchRequest),
    ListOffsets(messages::ListOffsetsRequest),
    OffsetForLeaderEpoch(messages::OffsetForLeaderEpochRequest),
    CreateTopics(messages::CreateTopicsRequest),
    DeleteTopics(messages::DeleteTopicsRequest),
    CreatePartitions(messages::CreatePartitionsRequest),
    DeleteRecords(messages::DeleteRecordsRequest),
    ElectLeaders(messages::ElectLeadersRequest),
    AlterPartitionReassignments(messages::AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(messages::ListPartitionReassignmentsRequest),
    UnregisterBroker(messages::UnregisterBrokerRequest),
    InitProducerId(messages::InitProducerIdRequest),
    DescribeCluster(messages::DescribeClusterRequest),
    DescribeConfigs(messages::DescribeConfigsRequest),
    DescribeLogDirs(messages::DescribeLogDirsRequest),
    AlterConfigs(messages::AlterConfigsRequest),
    IncrementalAlterConfigs(messages::IncrementalAlterConfigsRequest),
    DescribeProducers(messages::DescribeProducersRequest),
    DescribeQuorum(messages::DescribeQuorumRequest),
    AddRaftVoter(messages::AddRaftVoterRequest),
    RemoveRaftVoter(messages::RemoveRaftVoterRequest),
    FindCoordinator(messages::FindCoordinatorRequest),
    JoinGroup(messages::JoinGroupRequest),
    SyncGroup(messages::SyncGroupRequest),
    Heartbeat(messages::HeartbeatRequest),
    LeaveGroup(messages::LeaveGroupRequest),
    OffsetCommit(messages::OffsetCommitRequest),
    OffsetFetch(messages::OffsetFetchRequest),
    OffsetDelete(messages::OffsetDeleteRequest),
    ListGroups(messages::ListGroupsRequest),
    DescribeGroups(messages::DescribeGroupsRequest),
    DeleteGroups(messages::DeleteGroupsRequest),
    ConsumerGroupHeartbeat(messages::ConsumerGroupHeartbeatRequest),
    ConsumerGroupDescribe(messages::ConsumerGroupDescribeRequest),
    AddPartitionsToTxn(messages::AddPartitionsToTxnRequest),
    AddOffsetsToTxn(messages::AddOffsetsToTxnRequest),
    EndTxn(messages::EndTxnRequest),
    WriteTxnMarkers(messages::WriteTxnMarkersRequest),
    TxnOffsetCommit(messages::TxnOffsetCommitRequest),
    DescribeTransactions(messages::DescribeTransactionsRequest),
    ListTransactions(messages::ListTransactionsRequest),
    SaslHandshake(messages::SaslHandshakeRequest),
    SaslAuthenticate(messages::SaslAuthenticateRequest),
    DescribeUserScramCredentials(messages::DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(messages::AlterUserScramCredentialsRequest),
    CreateAcls(messages::CreateAclsRequest),
    DescribeAcls(messages::DescribeAclsRequest),
    DeleteAcls(messages::DeleteAclsRequest),
}

/// Decodes a whole request frame (without the size prefix) the way the broker does: unknown
/// APIs and unsupported versions are errors, never panics. Used by the fuzz target and tests.
pub fn decode_any(frame: Bytes) -> Result<(RequestHeader, AnyRequest), ProtocolError> {
    let peek = crate::frame::peek_header(&frame)?;
    let short = || ProtocolError::ShortFrame { len: frame.len() };
    let api = ApiKey::try_from(peek.api_key).map_err(|_| short())?;
    let v = peek.api_version;
    if !crate::versions::is_supported(api, v) {
        return Err(ProtocolError::Decode { api, version: v, reason: "unsupported version".into() });
    }
    let raw = decode_header(api, v, frame.clone())?;
    let mut body = raw.body;
    let req = match api {
        ApiKey::ApiVersions => AnyRequest::ApiVersions(decode_body(api, v, &mut body)?),
        ApiKey::Metadata => AnyRequest::Metadata(decode_body(api, v, &mut body)?),
        ApiKey::Produce => AnyRequest::Produce(decode_body(api, v, &mut body)?),
        ApiKey::Fetch => AnyRequest::Fetch(decode_body(api, v, &mut body)?),
        ApiKey::ListOffsets => AnyRequest::ListOffsets(decode_body(api, v, &mut body)?),
        ApiKey::OffsetForLeaderEpoch => AnyRequest::OffsetForLeaderEpoch(decode_body(api, v, &mut body)?),
        ApiKey::CreateTopics => AnyRequest::CreateTopics(decode_body(api, v, &mut body)?),
        ApiKey::DeleteTopics => AnyRequest::DeleteTopics(decode_body(api, v, &mut body)?),
        ApiKey::CreatePartitions => AnyRequest::CreatePartitions(decode_body(api, v, &mut body)?),
        ApiKey::DeleteRecords => AnyRequest::DeleteRecords(decode_body(api, v, &mut body)?),
        ApiKey::ElectLeaders => AnyRequest::ElectLeaders(decode_body(api, v, &mut body)?),
        ApiKey::AlterPartitionReassignments => AnyRequest::AlterPartitionReassignments(decode_body(api, v, &mut body)?),
        ApiKey::ListPartitionReassignments => AnyRequest::ListPartitionReassignments(decode_body(api, v, &mut body)?),
        ApiKey::UnregisterBroker => AnyRequest::UnregisterBroker(decode_body(api, v, &mut body)?),
        ApiKey::InitProducerId => AnyRequest::InitProducerId(decode_body(api, v, &mut body)?),
        ApiKey::DescribeCluster => AnyRequest::DescribeCluster(decode_body(api, v, &mut body)?),
        ApiKey::DescribeConfigs => AnyRequest::DescribeConfigs(decode_body(api, v, &mut body)?),
        ApiKey::DescribeLogDirs => AnyRequest::DescribeLogDirs(decode_body(api, v, &mut body)?),
        ApiKey::AlterConfigs => AnyRequest::AlterConfigs(decode_body(api, v, &mut body)?),
        ApiKey::IncrementalAlterConfigs => AnyRequest::IncrementalAlterConfigs(decode_body(api, v, &mut body)?),
        ApiKey::DescribeProducers => AnyRequest::DescribeProducers(decode_body(api, v, &mut body)?),
        ApiKey::DescribeQuorum => AnyRequest::DescribeQuorum(decode_body(api, v, &mut body)?),
        ApiKey::AddRaftVoter => AnyRequest::AddRaftVoter(decode_body(api, v, &mut body)?),
        ApiKey::RemoveRaftVoter => AnyRequest::RemoveRaftVoter(decode_body(api, v, &mut body)?),
        ApiKey::FindCoordinator => AnyRequest::FindCoordinator(decode_body(api, v, &mut body)?),
        ApiKey::JoinGroup => AnyRequest::JoinGroup(decode_body(api, v, &mut body)?),
        ApiKey::SyncGroup => AnyRequest::SyncGroup(decode_body(api, v, &mut body)?),
        ApiKey::Heartbeat => AnyRequest::Heartbeat(decode_body(api, v, &mut body)?),
        ApiKey::LeaveGroup => AnyRequest::LeaveGroup(decode_body(api, v, &mut body)?),
        ApiKey::OffsetCommit => AnyRequest::OffsetCommit(decode_body(api, v, &mut body)?),
        ApiKey::OffsetFetch => AnyRequest::OffsetFetch(decode_body(api, v, &mut body)?),
        ApiKey::OffsetDelete => AnyRequest::OffsetDelete(decode_body(api, v, &mut body)?),
        ApiKey::ListGroups => AnyRequest::ListGroups(decode_body(api, v, &mut body)?),
        ApiKey::DescribeGroups => AnyRequest::DescribeGroups(decode_body(api, v, &mut body)?),
        ApiKey::DeleteGroups => AnyRequest::DeleteGroups(decode_body(api, v, &mut body)?),
        ApiKey::ConsumerGroupHeartbeat => AnyRequest::ConsumerGroupHeartbeat(decode_body(api, v, &mut body)?),
        ApiKey::ConsumerGroupDescribe => AnyRequest::ConsumerGroupDescribe(decode_body(api, v, &mut body)?),
        ApiKey::AddPartitionsToTxn => AnyRequest::AddPartitionsToTxn(decode_body(api, v, &mut body)?),
        ApiKey::AddOffsetsToTxn => AnyRequest::AddOffsetsToTxn(decode_body(api, v, &mut body)?),
        ApiKey::EndTxn => AnyRequest::EndTxn(decode_body(api, v, &mut body)?),
        ApiKey::WriteTxnMarkers => AnyRequest::WriteTxnMarkers(decode_body(api, v, &mut body)?),
        ApiKey::TxnOffsetCommit => AnyRequest::TxnOffsetCommit(decode_body(api, v, &mut body)?),
        ApiKey::DescribeTransactions => AnyRequest::DescribeTransactions(decode_body(api, v, &mut body)?),
        ApiKey::ListTransactions => AnyRequest::ListTransactions(decode_body(api, v, &mut body)?),
        ApiKey::SaslHandshake => AnyRequest::SaslHandshake(decode_body(api, v, &mut body)?),
        ApiKey::SaslAuthenticate => AnyRequest::SaslAuthenticate(decode_body(api, v, &mut body)?),
        ApiKey::DescribeUserScramCredentials => {
            AnyRequest::DescribeUserScramCredentials(decode_body(api, v, &mut body)?)
        }
        ApiKey::AlterUserScramCredentials => AnyRequest::AlterUserScramCredentials(decode_body(api, v, &mut body)?),
        ApiKey::CreateAcls => AnyRequest::CreateAcls(decode_body(api, v, &mut body)?),
        ApiKey::DescribeAcls => AnyRequest::DescribeAcls(decode_body(api, v, &mut body)?),
        ApiKey::DeleteAcls => AnyRequest::DeleteAcls(decode_body(api, v, &mut body)?),
        other => return Err(ProtocolError::Decode { api: other, version: v, reason: "not served".into() }),
    };
    Ok((raw.header, req))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn api_versions_response_header_is_v0_even_for_flexible_versions() {
        let resp = ApiVersionsResponse::default();
        let buf = encode_response(ApiKey::ApiVersions, 3, 42, &resp).ok();
        let buf = buf.as_deref().map(<[u8]>::to_vec).unwrap_or_default();
        // size(4) correlation(4) then directly the body: error_code = 0
        assert_eq!(&buf[4..8], &42i32.to_be_bytes());
        assert_eq!(&buf[8..10], &0i16.to_be_bytes());
        assert_eq!(i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize, buf.len() - 4);
    }

    #[test]
    fn request_round_trip_with_flexible_header() {
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str("t");
        req.client_software_version = StrBytes::from_static_str("1");
        let mut header = RequestHeader::default();
        header.request_api_key = 18;
        header.request_api_version = 3;
        header.correlation_id = 9;
        let mut buf = BytesMut::new();
        assert!(header.encode(&mut buf, 2).is_ok());
        assert!(req.encode(&mut buf, 3).is_ok());
        let raw = decode_header(ApiKey::ApiVersions, 3, buf.freeze());
        let mut raw = match raw {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(raw.header.correlation_id, 9);
        let back: Result<ApiVersionsRequest, _> = decode_body(ApiKey::ApiVersions, 3, &mut raw.body);
        assert_eq!(back.ok().map(|r| r.client_software_name), Some(StrBytes::from_static_str("t")));
    }

    #[test]
    fn huge_array_counts_are_refused_without_allocating() {
        // Found by fuzz/decode_request: Metadata v0 whose topic array claims 0x02000000 entries
        // (before the vendored patch this allocated 2.4 GB).
        let frame = [0x00, 0x03, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00];
        assert!(decode_any(Bytes::copy_from_slice(&frame)).is_err());
        // The largest possible count, on a flexible version (compact array).
        let mut f = vec![0x00, 0x03, 0x00, 0x0c, 0, 0, 0, 1, 0xff, 0xff, 0x00];
        f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_any(Bytes::from(f)).is_err());
    }

    #[test]
    fn trailing_bytes_are_ignored_like_kafka() {
        // librdkafka 2.16, Metadata v13 for all topics: header, then topics=null,
        // allow_auto_topic_creation=false, include_topic_authorized_operations=false, no tags,
        // and three more bytes Kafka ignores.
        let mut f = vec![0x00, 0x03, 0x00, 0x0d, 0, 0, 0, 3, 0x00, 0x07];
        f.extend_from_slice(b"rdkafka");
        f.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00]);
        let decoded = decode_any(Bytes::from(f));
        assert!(matches!(decoded, Ok((_, AnyRequest::Metadata(ref m))) if m.topics.is_none()), "{decoded:?}");
    }
}
