//! One Kafka client connection over TCP (the `io` feature): send a request at a version, read its
//! answer. Every Oxbow component that talks to a broker as a client uses it: the broker's replica
//! fetchers, the operator's admin client and the test helpers.
//!
//! One request at a time (no pipelining), every exchange bounded by a timeout, and the size a peer
//! announces for a response is checked against [`Connection::max_response_bytes`] before anything
//! is allocated, so a broken or hostile peer cannot make the caller allocate gigabytes.
//!
//! Framing and decoding are [`crate::client`]'s (no I/O); this module only adds the socket.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::protocol::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::{ClientError, decode_response, request_frame};
use crate::frame::{SIZE_PREFIX, frame_size};

/// The largest response accepted unless told otherwise: Kafka's `socket.request.max.bytes`
/// default (100 MiB), the bound a broker applies to what clients send it. A replica fetch asks
/// for at most 10 MiB (`replica.fetch.response.max.bytes`), but a leader always returns the
/// first batch whole, which may be larger.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 100 * 1024 * 1024;

/// Why an exchange with a broker failed. Every variant names the peer.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("cannot reach {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error("{addr}: no answer within {} ms", .after.as_millis())]
    Timeout { addr: String, after: Duration },
    #[error("{addr}: {source}")]
    Io { addr: String, source: std::io::Error },
    #[error("{addr}: response of {size} bytes is outside 0..={max}")]
    ResponseSize { addr: String, size: i64, max: usize },
    #[error("{addr}: {source}")]
    Protocol { addr: String, source: ClientError },
}

/// A connection to one broker's listener.
pub struct Connection {
    addr: String,
    stream: TcpStream,
    client_id: String,
    correlation: i32,
    max_response_bytes: usize,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `timeout`; requests carry `client_id`.
    pub async fn connect(addr: &str, client_id: &str, timeout: Duration) -> Result<Connection, ConnectionError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ConnectionError::Timeout { addr: addr.into(), after: timeout })?
            .map_err(|source| ConnectionError::Connect { addr: addr.into(), source })?;
        // Requests are small and answered one at a time: never wait for Nagle.
        stream.set_nodelay(true).map_err(|source| ConnectionError::Io { addr: addr.into(), source })?;
        Ok(Connection {
            addr: addr.into(),
            stream,
            client_id: client_id.into(),
            correlation: 0,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        })
    }

    /// The same connection, refusing responses larger than `max` bytes.
    pub fn with_max_response_bytes(mut self, max: usize) -> Connection {
        self.max_response_bytes = max;
        self
    }

    /// The peer, as given to [`Connection::connect`].
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The largest response this connection accepts.
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// Sends `req` at `version` and decodes its response; the whole exchange (write, read,
    /// decode) must finish within `timeout`. After an error the connection's state is unknown (a
    /// response may still be on its way): drop it and connect again.
    pub async fn send<R: Request>(
        &mut self,
        version: i16,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response, ConnectionError> {
        let frame = self.frame(version, req)?;
        let correlation = self.correlation;
        let body = tokio::time::timeout(timeout, async {
            self.stream.write_all(&frame).await.map_err(|e| self.io(e))?;
            self.read_frame().await
        })
        .await
        .map_err(|_| ConnectionError::Timeout { addr: self.addr.clone(), after: timeout })??;
        decode_response::<R>(version, correlation, body).map_err(|source| self.protocol(source))
    }

    /// The frame of `req` at `version` under the next correlation id, for a caller that writes
    /// it itself (tests that corrupt frames on purpose).
    pub fn frame<R: Request>(&mut self, version: i16, req: &R) -> Result<Bytes, ConnectionError> {
        self.correlation = self.correlation.wrapping_add(1);
        let frame = request_frame(version, self.correlation, &self.client_id, req).map_err(|e| self.protocol(e))?;
        Ok(frame.freeze())
    }

    /// Reads one size-prefixed frame and returns it without its prefix. The size is checked
    /// against the bound before the buffer is allocated.
    pub async fn read_frame(&mut self) -> Result<Bytes, ConnectionError> {
        let mut prefix = [0u8; SIZE_PREFIX];
        self.stream.read_exact(&mut prefix).await.map_err(|e| self.io(e))?;
        let size = frame_size(prefix, self.max_response_bytes).map_err(|_| ConnectionError::ResponseSize {
            addr: self.addr.clone(),
            size: i64::from(i32::from_be_bytes(prefix)),
            max: self.max_response_bytes,
        })?;
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).await.map_err(|e| self.io(e))?;
        Ok(Bytes::from(body))
    }

    /// The socket itself, for callers that write raw bytes (tests of malformed input).
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    fn io(&self, source: std::io::Error) -> ConnectionError {
        ConnectionError::Io { addr: self.addr.clone(), source }
    }

    fn protocol(&self, source: ClientError) -> ConnectionError {
        ConnectionError::Protocol { addr: self.addr.clone(), source }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    use kafka_protocol::protocol::Encodable;
    use tokio::net::TcpListener;

    use super::*;

    const T: Duration = Duration::from_secs(5);

    /// A peer that reads one request and answers with `answer(correlation_id)`.
    async fn peer(answer: impl FnOnce(i32) -> Vec<u8> + Send + 'static) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let size = s.read_i32().await.unwrap();
            let mut req = vec![0u8; size as usize];
            s.read_exact(&mut req).await.unwrap();
            let correlation = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
            s.write_all(&answer(correlation)).await.unwrap();
            // Hold the socket open until the client is done.
            let _ = s.read_i32().await;
        });
        addr
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[tokio::test]
    async fn a_response_is_decoded_at_the_requested_version() {
        let addr = peer(|corr| {
            let mut resp = ApiVersionsResponse::default();
            resp.throttle_time_ms = 7;
            let mut body = bytes::BytesMut::new();
            body.extend_from_slice(&corr.to_be_bytes());
            resp.encode(&mut body, 3).unwrap();
            framed(&body)
        })
        .await;
        let mut c = Connection::connect(&addr, "t", T).await.unwrap();
        let resp = c.send(3, &ApiVersionsRequest::default(), T).await.unwrap();
        assert_eq!(resp.throttle_time_ms, 7);
    }

    #[tokio::test]
    async fn an_oversized_response_is_refused_before_it_is_allocated() {
        let addr = peer(|_| i32::MAX.to_be_bytes().to_vec()).await;
        let mut c = Connection::connect(&addr, "t", T).await.unwrap().with_max_response_bytes(1024);
        let err = c.send(3, &ApiVersionsRequest::default(), T).await.err().unwrap();
        assert!(
            matches!(err, ConnectionError::ResponseSize { size, max: 1024, .. } if size == i64::from(i32::MAX)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_negative_size_is_refused() {
        let addr = peer(|_| (-4i32).to_be_bytes().to_vec()).await;
        let mut c = Connection::connect(&addr, "t", T).await.unwrap();
        let err = c.send(3, &ApiVersionsRequest::default(), T).await.err().unwrap();
        assert!(matches!(err, ConnectionError::ResponseSize { size: -4, .. }), "{err}");
    }

    #[tokio::test]
    async fn a_wrong_correlation_id_is_a_protocol_error() {
        let addr = peer(|corr| framed(&(corr + 1).to_be_bytes())).await;
        let mut c = Connection::connect(&addr, "t", T).await.unwrap();
        let err = c.send(3, &ApiVersionsRequest::default(), T).await.err().unwrap();
        assert!(matches!(err, ConnectionError::Protocol { source: ClientError::Correlation { .. }, .. }), "{err}");
    }

    #[tokio::test]
    async fn a_silent_peer_times_out() {
        let addr = peer(|_| Vec::new()).await;
        let mut c = Connection::connect(&addr, "t", T).await.unwrap();
        let after = Duration::from_millis(100);
        let err = c.send(3, &ApiVersionsRequest::default(), after).await.err().unwrap();
        assert!(matches!(err, ConnectionError::Timeout { after: a, .. } if a == after), "{err}");
    }
}
