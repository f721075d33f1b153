//! The TCP server: one task per connection, requests pipelined up to a bound and answered in
//! order, with global bounds on connections, in-flight requests and in-flight bytes.
//!
//! Requests of one connection take effect in order, as in Kafka (which handles one request of a
//! connection at a time): a request starts only once the one before it has applied its effects.
//! A request that then waits (produce acks=all on its replicas, a fetch's long poll) signals that
//! point early, so the next request starts during the wait; every other request applies its
//! effects by finishing.
//!
//! Each listener has its security (`crate::security`): TLS is negotiated before the first
//! request; on SASL listeners nothing but ApiVersions and the SASL exchange is served until the
//! client has authenticated, and the frames before that are bounded by
//! `sasl.server.max.receive.size`. A re-authentication (KIP-368) waits until every request
//! before it has been answered, then runs alone.
//!
//! A request may end its connection after its answer ([`handlers::Applied::close_after`]):
//! nothing pipelined behind it is started, and the client sends it again on a new connection.
//!
//! A frame whose size is out of bounds, that does not parse as a request header, or that names
//! an unknown API or unsupported version (other than ApiVersions) closes that connection only.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use oxbow_protocol::frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::broker::Broker;
use crate::errors::ConnError;
use crate::handlers;
use crate::security::sasl::{self, Authenticator};
use crate::security::{ListenerRuntime, Principal, Session};
use crate::zero_copy::{self, Output, Response};

/// Global limits shared by all connections.
pub struct Limits {
    connections: Arc<Semaphore>,
    requests: Arc<Semaphore>,
    bytes: Option<Arc<Semaphore>>,
}

impl Limits {
    pub fn new(broker: &Broker) -> Self {
        let c = &broker.config;
        Self {
            connections: Arc::new(Semaphore::new(c.max_connections.min(Semaphore::MAX_PERMITS))),
            requests: Arc::new(Semaphore::new(c.queued_max_requests.min(Semaphore::MAX_PERMITS))),
            bytes: c
                .queued_max_request_bytes
                .map(|b| Arc::new(Semaphore::new(b.clamp(c.socket_request_max_bytes, Semaphore::MAX_PERMITS)))),
        }
    }
}

/// A bound client listener and its security.
pub struct Bound {
    pub tcp: TcpListener,
    pub security: Arc<ListenerRuntime>,
}

/// Accepts connections on every listener until `shutdown` resolves, then stops reading new
/// requests, lets in-flight ones finish (up to `oxbow.shutdown.timeout.ms`) and closes every
/// connection.
pub async fn run(listeners: Vec<Bound>, broker: Arc<Broker>, shutdown: impl Future<Output = ()>) {
    let limits = Arc::new(Limits::new(&broker));
    let token = CancellationToken::new();
    let mut conns = JoinSet::new();
    let mut accepts = futures_util::stream::select_all(listeners.into_iter().map(|l| {
        futures_util::stream::unfold(l, |l| async move {
            let r = l.tcp.accept().await;
            Some(((r, l.security.clone()), l))
        })
        .boxed()
    }));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some((accepted, security)) = accepts.next() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = limits.connections.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "max.connections reached; closing new connection");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (broker, limits, token) = (broker.clone(), limits.clone(), token.child_token());
                    let span = tracing::info_span!("conn", %peer, listener = %security.name);
                    conns.spawn(async move {
                        broker.stats.connection_opened();
                        let stats = broker.clone();
                        if let Err(e) = Box::pin(serve(stream, peer, security, broker, limits, token)).await {
                            tracing::info!(reason = %e, "closing connection");
                        }
                        stats.stats.connection_closed();
                        drop(permit);
                    }.instrument(span));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(accepts);
    token.cancel();
    let deadline = Duration::from_millis(broker.config.shutdown_timeout_ms);
    let drained = tokio::time::timeout(deadline, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("connections still busy at the shutdown deadline; aborting them");
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

/// How long a client has to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection: the TLS handshake if the listener has TLS, then its requests.
async fn serve(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    security: Arc<ListenerRuntime>,
    broker: Arc<Broker>,
    limits: Arc<Limits>,
    token: CancellationToken,
) -> Result<(), ConnError> {
    let Some(tls) = &security.tls else {
        let session = security.session(Principal::anonymous());
        let (rd, wr) = stream.into_split();
        return Box::pin(connection(rd, wr, peer, session, security, broker, limits, token)).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    // Boxed, as the other steps that only some connections take: a connection's futures are
    // as large as their largest state, and every idle connection would carry this one.
    let stream = match Box::pin(tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnError::Refused(format!("TLS handshake failed: {e}"))),
        Err(_) => return Err(ConnError::Refused("TLS handshake timed out".into())),
    };
    let principal = tls.principal(stream.get_ref().1.peer_certificates());
    let session = security.session(principal);
    let (rd, wr) = tokio::io::split(stream);
    Box::pin(connection(rd, wr, peer, session, security, broker, limits, token)).await
}

struct Frame {
    body: Bytes,
    _permits: Vec<tokio::sync::OwnedSemaphorePermit>,
}

async fn read_frames<R: AsyncRead + Unpin>(
    mut rd: R,
    tx: mpsc::Sender<Frame>,
    limits: Arc<Limits>,
    max: Arc<AtomicUsize>,
    token: CancellationToken,
) -> Result<(), ConnError> {
    loop {
        let mut prefix = [0u8; 4];
        tokio::select! {
            _ = token.cancelled() => return Ok(()),
            r = rd.read_exact(&mut prefix) => match r {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            },
        }
        let size = frame::frame_size(prefix, max.load(Ordering::Relaxed))?;
        let mut permits = Vec::with_capacity(2);
        permits.push(
            limits.requests.clone().acquire_owned().await.map_err(|_| ConnError::Refused("shutting down".into()))?,
        );
        if let Some(b) = &limits.bytes {
            let n = u32::try_from(size.max(1)).unwrap_or(u32::MAX);
            permits
                .push(b.clone().acquire_many_owned(n).await.map_err(|_| ConnError::Refused("shutting down".into()))?);
        }
        // Read into uninitialised capacity (no memset), never past this frame.
        let mut body = BytesMut::with_capacity(size);
        let mut limited = (&mut rd).take(size as u64);
        while body.len() < size {
            if limited.read_buf(&mut body).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        if tx.send(Frame { body: body.freeze(), _permits: permits }).await.is_err() {
            return Ok(());
        }
    }
}

type Answer = Result<Option<Response>, ConnError>;

enum Step {
    /// The request being applied fired its signal and goes on waiting.
    Applied,
    /// The oldest request in flight finished (answers go out in order).
    Done(Answer),
}

/// The next answer in order, or the signal of the request being applied, whichever comes first.
fn next_step<'a, F: Future<Output = Answer>>(
    pending: &'a mut FuturesOrdered<F>,
    applying: Option<&'a handlers::Applied>,
) -> impl Future<Output = Step> + 'a {
    std::future::poll_fn(move |cx| {
        let (next, fired) = match applying {
            Some(a) => a.poll_around(cx, |cx| pending.poll_next_unpin(cx)),
            None => (pending.poll_next_unpin(cx), false),
        };
        match next {
            Poll::Ready(Some(r)) => Poll::Ready(Step::Done(r)),
            _ if fired => Poll::Ready(Step::Applied),
            _ => Poll::Pending,
        }
    })
}

/// What the connection knows of its client's identity.
struct Auth {
    session: Arc<Session>,
    /// On SASL listeners.
    sasl: Option<Authenticator>,
    /// When the SASL session ends (KIP-368): past it, anything but re-authentication closes
    /// the connection.
    expires: Option<Instant>,
}

#[allow(clippy::too_many_arguments)]
async fn connection<R, W>(
    rd: R,
    mut wr: W,
    peer: std::net::SocketAddr,
    session: Session,
    security: Arc<ListenerRuntime>,
    broker: Arc<Broker>,
    limits: Arc<Limits>,
    token: CancellationToken,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: Output,
{
    let max_inflight = broker.config.max_inflight_per_connection;
    let sec = &broker.config.security;
    let mut auth = Auth {
        session: Arc::new(session),
        sasl: security.sasl.as_ref().map(|_| Authenticator::new(sec.reauth_ms)),
        expires: None,
    };
    // Until a SASL client has authenticated, frames are bounded by sasl.server.max.receive.size.
    let max_frame = Arc::new(AtomicUsize::new(match &auth.sasl {
        Some(_) => sec.sasl_max_receive.min(broker.config.socket_request_max_bytes),
        None => broker.config.socket_request_max_bytes,
    }));
    let (tx, mut rx) = mpsc::channel::<Frame>(max_inflight);
    let reader = tokio::spawn(read_frames(rd, tx, limits, max_frame.clone(), token));
    // Boxed: FuturesOrdered keeps a stub task of its future type, which would make every
    // connection, idle or not, hold a request's whole state machine (about 5 KiB).
    let mut pending: FuturesOrdered<Pin<Box<dyn Future<Output = Answer> + Send>>> = FuturesOrdered::new();
    // The request whose effects are not yet applied: the next one starts when it fires its
    // signal or finishes (see `handlers::Applied`), so requests of one connection take effect in
    // order while their waits (replication, long polls) overlap and their answers stay pipelined.
    // Nothing starts after it, so it is the newest in flight: it has finished when none is left.
    let mut applying: Option<Arc<handlers::Applied>> = None;
    // A SASL frame waits here until every request before it has been answered.
    let mut held: Option<Frame> = None;
    let mut reading = true;
    let result = loop {
        if pending.is_empty()
            && let Some(f) = held.take()
        {
            match Box::pin(authenticate(&broker, &security, &mut auth, f, peer, &mut wr)).await {
                Ok(true) => {
                    max_frame.store(broker.config.socket_request_max_bytes, Ordering::Relaxed);
                    continue;
                }
                Ok(false) => continue,
                Err(e) => break Err(e),
            }
        }
        tokio::select! {
            f = rx.recv(), if reading && held.is_none() && applying.is_none() && pending.len() < max_inflight => match f {
                Some(f) => {
                    if auth.sasl.as_ref().is_some_and(|a| a.wants(&f.body)) {
                        held = Some(f);
                        continue;
                    }
                    if auth.expires.is_some_and(|t| Instant::now() >= t) {
                        break Err(ConnError::Refused("the SASL session expired without re-authentication".into()));
                    }
                    let (broker, session) = (broker.clone(), auth.session.clone());
                    let applied = Arc::new(handlers::Applied::default());
                    applying = Some(applied.clone());
                    pending.push_back(Box::pin(async move {
                        let r = handlers::dispatch(&broker, f.body, peer, &session, &applied).await;
                        drop(f._permits);
                        r
                    }));
                }
                None => reading = false,
            },
            step = next_step(&mut pending, applying.as_deref()), if !pending.is_empty() => match step {
                Step::Applied => reading &= !applying.take().is_some_and(|a| a.closes()),
                Step::Done(r) => {
                    if pending.is_empty() {
                        reading &= !applying.take().is_some_and(|a| a.closes());
                    }
                    match r {
                        Ok(Some(resp)) => {
                            if let Err(e) = zero_copy::write(&mut wr, &resp).await {
                                break Err(e.into());
                            }
                        }
                        Ok(None) => {}
                        Err(e) => break Err(e),
                    }
                }
            },
            else => break Ok(()),
        }
    };
    reader.abort();
    let reader_result = reader.await;
    let _ = wr.shutdown().await;
    match (result, reader_result) {
        (Err(e), _) => Err(e),
        (Ok(()), Ok(Err(e))) => Err(e),
        _ => Ok(()),
    }
}

/// Runs one frame through the SASL authenticator (nothing else is in flight). `Ok(true)`: the
/// connection has just authenticated.
async fn authenticate<W: Output>(
    broker: &Arc<Broker>,
    security: &ListenerRuntime,
    auth: &mut Auth,
    frame: Frame,
    peer: std::net::SocketAddr,
    wr: &mut W,
) -> Result<bool, ConnError> {
    let (Some(authenticator), Some(sasl)) = (auth.sasl.as_mut(), security.sasl.as_ref()) else {
        return Err(ConnError::Refused("SASL frame on a listener without SASL".into()));
    };
    match authenticator.step(broker, sasl, frame.body.clone()) {
        sasl::Step::Reply(b) => {
            zero_copy::write(wr, &zero_copy::Response::Bytes(b)).await?;
            Ok(false)
        }
        sasl::Step::Dispatch => {
            let applied = handlers::Applied::default();
            if let Some(resp) = handlers::dispatch(broker, frame.body, peer, &auth.session, &applied).await? {
                zero_copy::write(wr, &resp).await?;
            }
            Ok(false)
        }
        sasl::Step::Authenticated { reply, principal } => {
            let first = auth.expires.is_none() && auth.session.principal == Principal::anonymous();
            tracing::debug!(%principal, reauthentication = !first, "SASL authentication succeeded");
            auth.session = Arc::new(security.session(principal));
            let lifetime = broker.config.security.reauth_ms;
            auth.expires = (lifetime > 0).then(|| Instant::now() + Duration::from_millis(lifetime as u64));
            zero_copy::write(wr, &zero_copy::Response::Bytes(reply)).await?;
            Ok(true)
        }
        sasl::Step::Close { reply, reason, failed_login } => {
            if failed_login {
                tracing::info!(%reason, "SASL authentication failed");
                let delay = broker.config.security.failed_auth_delay_ms;
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if let Some(b) = reply {
                zero_copy::write(wr, &zero_copy::Response::Bytes(b)).await?;
            }
            Err(ConnError::Refused(reason))
        }
    }
}
