//! The client side of the wire format, without I/O: the frame of a request, and the decoded body
//! of its response. [`crate::connection`] puts them on a socket.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// Why a request could not be encoded or its response not decoded.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("cannot encode the request: {0}")]
    Encode(String),
    #[error("response correlation id {got} does not match the request's {want}")]
    Correlation { want: i32, got: i32 },
    #[error("cannot decode the response: {0}")]
    Decode(String),
}

/// The size-prefixed frame of `req` at `version`.
pub fn request_frame<R: Request>(
    version: i16,
    correlation_id: i32,
    client_id: &str,
    req: &R,
) -> Result<BytesMut, ClientError> {
    let key = ApiKey::try_from(R::KEY).map_err(|_| ClientError::UnknownApi(R::KEY))?;
    let mut header = RequestHeader::default();
    header.request_api_key = R::KEY;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_string(client_id.to_string()));
    let mut body = BytesMut::new();
    header.encode(&mut body, key.request_header_version(version)).map_err(|e| ClientError::Encode(e.to_string()))?;
    req.encode(&mut body, version).map_err(|e| ClientError::Encode(e.to_string()))?;
    let len = i32::try_from(body.len()).map_err(|e| ClientError::Encode(e.to_string()))?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(len);
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes a response body (the frame without its size prefix) to the request `R` at `version`
/// sent with `correlation_id`.
pub fn decode_response<R: Request>(
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<R::Response, ClientError> {
    let key = ApiKey::try_from(R::KEY).map_err(|_| ClientError::UnknownApi(R::KEY))?;
    if body.remaining() < 4 {
        return Err(ClientError::Decode("short response".into()));
    }
    let got = body.get_i32();
    if got != correlation_id {
        return Err(ClientError::Correlation { want: correlation_id, got });
    }
    if key.response_header_version(version) >= 1 {
        // Tagged fields of the response header: none are defined; a count of 0.
        if body.remaining() < 1 || body.get_u8() != 0 {
            return Err(ClientError::Decode("unexpected tagged fields in the response header".into()));
        }
    }
    let resp = R::Response::decode(&mut body, version).map_err(|e| ClientError::Decode(e.to_string()))?;
    if body.has_remaining() {
        return Err(ClientError::Decode(format!("{} bytes after the response", body.remaining())));
    }
    Ok(resp)
}
