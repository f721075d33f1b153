//! One Kafka client connection over TCP (the `io` feature): send a request at a version, read its
//! answer. Every Oxbow component that talks to a broker as a client uses it: the broker's replica
//! fetchers, the operator's admin client and the test helpers.
//!
//! One request at a time (no pipelining), every exchange bounded by a timeout, and the size a peer
//! announces for a response is checked against [`Connection::max_response_bytes`] before anything
//! is allocated, so a broken or hostile peer cannot make the caller allocate gigabytes.
//!
//! A connection may be secured ([`ClientSecurity`]): TLS (rustls, ring) and then a SASL login
//! (PLAIN, SCRAM-SHA-256/512) right after connecting, as the listener it dials requires. When the
//! broker gives the session a lifetime (KIP-368), the connection logs in again on the same socket
//! before the lifetime is over.
//!
//! Framing and decoding are [`crate::client`]'s (no I/O); this module only adds the socket.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Request, StrBytes};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::client::{ClientError, decode_response, request_frame};
use crate::frame::{SIZE_PREFIX, frame_size};
use crate::scram::{ClientExchange, Mechanism};
use crate::secret::Secret;

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
    #[error("{addr}: TLS: {message}")]
    Tls { addr: String, message: String },
    #[error("{addr}: SASL authentication failed: {message}")]
    Auth { addr: String, message: String },
}

/// A SASL mechanism a client logs in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(Mechanism),
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }

    pub fn parse(s: &str) -> Option<SaslMechanism> {
        match s.trim() {
            "PLAIN" => Some(SaslMechanism::Plain),
            other => Mechanism::from_name(other).map(SaslMechanism::Scram),
        }
    }
}

/// Who a client logs in as.
#[derive(Debug, Clone)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub password: Secret,
}

/// How a client connection secures itself.
#[derive(Debug, Clone, Default)]
pub struct ClientSecurity {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub sasl: Option<SaslLogin>,
}

/// A TLS client configuration: the CAs the broker's certificate must chain to, a certificate
/// to present if the listener asks for one, and whether the certificate must name the host
/// dialled (Kafka's `ssl.endpoint.identification.algorithm=https`, its default).
pub fn client_tls(
    roots: rustls::RootCertStore,
    client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    verify_hostname: bool,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if verify_hostname {
        builder.with_webpki_verifier(webpki)
    } else {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyHostname(webpki)))
    };
    let config = match client_cert {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The certificate chain is verified as usual; only the host name is not checked (Kafka with
/// `ssl.endpoint.identification.algorithm` empty).
#[derive(Debug)]
struct AnyHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The socket, in clear or under TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A connection to one broker's listener.
pub struct Connection {
    addr: String,
    stream: Stream,
    client_id: String,
    correlation: i32,
    max_response_bytes: usize,
    /// The login to repeat when the session's lifetime runs out.
    sasl: Option<SaslLogin>,
    reauth_at: Option<Instant>,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `timeout`; requests carry `client_id`.
    pub async fn connect(addr: &str, client_id: &str, timeout: Duration) -> Result<Connection, ConnectionError> {
        Self::connect_secured(addr, client_id, timeout, &ClientSecurity::default()).await
    }

    /// Connects to `addr`, negotiates TLS and logs in as `security` says, all within `timeout`.
    pub async fn connect_secured(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Connection, ConnectionError> {
        let timed_out = || ConnectionError::Timeout { addr: addr.into(), after: timeout };
        let deadline = tokio::time::Instant::now() + timeout;
        let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|source| ConnectionError::Connect { addr: addr.into(), source })?;
        // Requests are small and answered one at a time: never wait for Nagle.
        tcp.set_nodelay(true).map_err(|source| ConnectionError::Io { addr: addr.into(), source })?;
        let stream = match &security.tls {
            None => Stream::Plain(tcp),
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| ConnectionError::Tls { addr: addr.into(), message: format!("{host}: {e}") })?;
                let tls = tokio_rustls::TlsConnector::from(config.clone());
                let s = tokio::time::timeout_at(deadline, tls.connect(name, tcp))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| ConnectionError::Tls { addr: addr.into(), message: e.to_string() })?;
                Stream::Tls(Box::new(s))
            }
        };
        let mut c = Connection {
            addr: addr.into(),
            stream,
            client_id: client_id.into(),
            correlation: 0,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            sasl: security.sasl.clone(),
            reauth_at: None,
        };
        if c.sasl.is_some() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            c.login(left).await?;
        }
        Ok(c)
    }

    /// The SASL exchange: SaslHandshake v1, then SaslAuthenticate v2 tokens.
    async fn login(&mut self, timeout: Duration) -> Result<(), ConnectionError> {
        let Some(login) = self.sasl.clone() else { return Ok(()) };
        let auth_err = |c: &Connection, message: String| ConnectionError::Auth { addr: c.addr.clone(), message };
        let mut h = SaslHandshakeRequest::default();
        h.mechanism = StrBytes::from_static_str(login.mechanism.name());
        let resp = self.exchange(1, &h, timeout).await?;
        if resp.error_code != 0 {
            let offered: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(auth_err(
                self,
                format!("the broker does not offer {} (it offers {})", login.mechanism.name(), offered.join(", ")),
            ));
        }
        let step = |bytes: Vec<u8>| {
            let mut a = SaslAuthenticateRequest::default();
            a.auth_bytes = bytes.into();
            a
        };
        let failed = |c: &Connection, code: i16, m: Option<StrBytes>| {
            auth_err(c, format!("error {code}: {}", m.as_ref().map_or("", |m| m.as_str())))
        };
        let last = match login.mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{}\0{}", login.user, login.password.expose()).into_bytes();
                self.exchange(2, &step(token), timeout).await?
            }
            SaslMechanism::Scram(mech) => {
                let mut ex = ClientExchange::new(mech, &login.user, login.password.clone())
                    .map_err(|e| auth_err(self, e.to_string()))?;
                let first = self.exchange(2, &step(ex.client_first()), timeout).await?;
                if first.error_code != 0 {
                    return Err(failed(self, first.error_code, first.error_message));
                }
                let client_final = ex.client_final(&first.auth_bytes).map_err(|e| auth_err(self, e.to_string()))?;
                let last = self.exchange(2, &step(client_final), timeout).await?;
                if last.error_code == 0 {
                    ex.verify_server_final(&last.auth_bytes).map_err(|e| auth_err(self, e.to_string()))?;
                }
                last
            }
        };
        if last.error_code != 0 {
            return Err(failed(self, last.error_code, last.error_message));
        }
        // Log in again once most of the session's lifetime has passed (KIP-368).
        self.reauth_at = (last.session_lifetime_ms > 0)
            .then(|| Instant::now() + Duration::from_millis(last.session_lifetime_ms as u64 * 85 / 100));
        Ok(())
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
        if self.reauth_at.is_some_and(|t| Instant::now() >= t) {
            self.login(timeout).await?;
        }
        self.exchange(version, req, timeout).await
    }

    async fn exchange<R: Request>(
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

    /// The TCP socket itself, for callers that write raw bytes (tests of malformed input, on
    /// connections without TLS).
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        match &mut self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_mut().0,
        }
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
