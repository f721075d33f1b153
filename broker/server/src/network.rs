//! The TCP server: one task per connection, requests pipelined up to a bound and answered in
//! order, with global bounds on connections, in-flight requests and in-flight bytes.
//!
//! Requests of one connection take effect in order, as in Kafka (which handles one request of a
//! connection at a time): a request starts only once the one before it has applied its effects.
//! A request that then waits (produce acks=all on its replicas, a fetch's long poll) signals that
//! point early, so the next request starts during the wait; every other request applies its
//! effects by finishing.
//!
//! A frame whose size is out of bounds, that does not parse as a request header, or that names
//! an unknown API or unsupported version (other than ApiVersions) closes that connection only.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use oxbow_protocol::frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::broker::Broker;
use crate::errors::ConnError;
use crate::handlers;

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

/// Accepts connections until `shutdown` resolves, then stops reading new requests, lets
/// in-flight ones finish (up to `oxbow.shutdown.timeout.ms`) and closes every connection.
pub async fn run(listener: TcpListener, broker: Arc<Broker>, shutdown: impl Future<Output = ()>) {
    let limits = Arc::new(Limits::new(&broker));
    let token = CancellationToken::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = limits.connections.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "max.connections reached; closing new connection");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (broker, limits, token) = (broker.clone(), limits.clone(), token.child_token());
                    let span = tracing::info_span!("conn", %peer);
                    conns.spawn(async move {
                        broker.stats.connection_opened();
                        let stats = broker.clone();
                        if let Err(e) = connection(stream, peer, broker, limits, token).await {
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
    drop(listener);
    token.cancel();
    let deadline = Duration::from_millis(broker.config.shutdown_timeout_ms);
    let drained = tokio::time::timeout(deadline, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("connections still busy at the shutdown deadline; aborting them");
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

struct Frame {
    body: Bytes,
    _permits: Vec<tokio::sync::OwnedSemaphorePermit>,
}

async fn read_frames(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    tx: mpsc::Sender<Frame>,
    limits: Arc<Limits>,
    max: usize,
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
        let size = frame::frame_size(prefix, max)?;
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

type Answer = Result<Option<BytesMut>, ConnError>;

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

async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    broker: Arc<Broker>,
    limits: Arc<Limits>,
    token: CancellationToken,
) -> Result<(), ConnError> {
    let (rd, mut wr) = stream.into_split();
    let max_inflight = broker.config.max_inflight_per_connection;
    let (tx, mut rx) = mpsc::channel::<Frame>(max_inflight);
    let reader = tokio::spawn(read_frames(rd, tx, limits, broker.config.socket_request_max_bytes, token));
    let mut pending = FuturesOrdered::new();
    // The request whose effects are not yet applied: the next one starts when it fires its
    // signal or finishes (see `handlers::Applied`), so requests of one connection take effect in
    // order while their waits (replication, long polls) overlap and their answers stay pipelined.
    // Nothing starts after it, so it is the newest in flight: it has finished when none is left.
    let mut applying: Option<Arc<handlers::Applied>> = None;
    let mut reading = true;
    let result = loop {
        tokio::select! {
            f = rx.recv(), if reading && applying.is_none() && pending.len() < max_inflight => match f {
                Some(f) => {
                    let broker = broker.clone();
                    let applied = Arc::new(handlers::Applied::default());
                    applying = Some(applied.clone());
                    pending.push_back(async move {
                        let r = handlers::dispatch(&broker, f.body, peer, &applied).await;
                        drop(f._permits);
                        r
                    });
                }
                None => reading = false,
            },
            step = next_step(&mut pending, applying.as_deref()), if !pending.is_empty() => match step {
                Step::Applied => applying = None,
                Step::Done(r) => {
                    if pending.is_empty() {
                        applying = None;
                    }
                    match r {
                        Ok(Some(resp)) => {
                            if let Err(e) = wr.write_all(&resp).await {
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
