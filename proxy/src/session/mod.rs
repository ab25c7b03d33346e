//! One client connection: requests are read, peeked (API key, version, correlation id), passed
//! through the filter chain (`filters`) and written to the upstream broker as raw bytes unless a
//! filter asked to see them; responses come back in request order and pass the chain's response
//! filters — or, when no filter may change a response (decided as its request is forwarded and
//! confirmed when it arrives), are streamed to the client as they arrive (`stream_copy`, which
//! owns reading from the broker). Pipelining is kept: the request side never waits for a response, the response side
//! follows a queue of what is in flight.
//!
//! Invariants: every forwarded request that expects a response gets exactly one, in order;
//! `acks=0` Produce gets none; a malformed frame closes this connection only. Request bytes count
//! against the shared budget (`limits`) until written upstream; a partial frame and an idle
//! connection time out. Opening the upstream connection belongs to `upstream`, every decision
//! about a request's content to `filters`.
//!
//! This folder owns the connection's life: `accept` (the accept loop: limits, TLS handshake,
//! the upstream opened lazily, then [`run`]), this file (the request and response sides),
//! `stream_copy` (responses streamed without being read whole), `splice` (the kernel-side copy
//! on Linux) and `write_stall` (bounding writes to a client that reads nothing).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmp_protocol::frame::FrameReader;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::{ProtocolError, Side, peek};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, trace, warn};

use crate::error::ProxyError;
use crate::filters::Chain;
use crate::filters::api::{Conn, Exchange, Merge, Outcome};
use crate::shared::Shared;
use crate::upstream::connect::Target;
use splice::SpliceSocket;
use stream_copy::{CopyError, Scan, Upstream};

pub(crate) mod accept;
mod renewal;
mod splice;
mod stream_copy;
mod write_stall;

/// Requests in flight per connection before the request side waits (backpressure).
const MAX_IN_FLIGHT: usize = 1024;

/// What the response side must do next, in request order.
enum Pending {
    /// Read the next upstream response; it must carry `correlation_id`. `merge`: adds back what
    /// the proxy refused (mirror topics taken out of the request) to the broker's response.
    Forwarded {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
        started: Instant,
        merge: Option<Merge>,
        stream: Stream,
        /// An ApiVersions request: its (clamped) answer is kept for early answers (`early_versions`).
        keep_for: Option<Target>,
        /// The client already got an early answer: this one is kept, not written.
        answered_early: bool,
    },
    /// Write a response the proxy produced itself.
    Local { api_key: i16, frame: Bytes, started: Instant },
    /// Read the next upstream response (it must carry `correlation_id`) and hand it to `reply`,
    /// not to the client: the proxy's own request on the client's upstream connection (renewing
    /// its SASL login, `renewal`).
    Internal { correlation_id: i32, reply: oneshot::Sender<Bytes> },
}

/// Whether a forwarded request's response may be streamed (`stream_copy`) instead of read whole
/// for the filters. Decided when the request is forwarded and asked again of the chain when the
/// response arrives (state such as the mirror registry may have changed meanwhile).
enum Stream {
    /// Read it whole: a filter or a merge may change it.
    No,
    /// Stream it if the chain still agrees; `Some`: a copy of the request, for filters whose
    /// answer depends on its content (a Fetch's topics, while topics may hold fillers).
    Yes(Option<Bytes>),
}

/// A bidirectional stream that splits into independently owned halves. Plain TCP splits without
/// a lock; a TLS stream uses `tokio::io::split`.
pub(crate) trait SplitStream: Send + 'static {
    type Read: AsyncRead + SpliceSocket + Send + Unpin + 'static;
    type Write: AsyncWrite + SpliceSocket + Send + Unpin + 'static;
    fn split_stream(self) -> (Self::Read, Self::Write);
}

impl SplitStream for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;
    fn split_stream(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl SplitStream for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    fn split_stream(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

impl SplitStream for kmp_protocol::security::BrokerStream {
    type Read = kmp_protocol::security::BrokerRead;
    type Write = kmp_protocol::security::BrokerWrite;
    fn split_stream(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

/// Runs one client connection to completion. `upstream` opens the upstream connection when the
/// first request is written; a first ApiVersions can be answered early (`early_versions`) while
/// it opens.
pub(crate) async fn run<C: SplitStream, U: SplitStream>(
    client: C,
    upstream: Connecting<U>,
    target: Target,
    conn: Arc<Conn>,
    chain: Arc<Chain>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let (client_r, client_w) = client.split_stream();
    let (read_tx, read_rx) = oneshot::channel();
    let up_w = Opening {
        connect: Some((upstream, read_tx)),
        write: None,
        session: None,
    };
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let responses = tokio::spawn(response_side(rx, read_rx, client_w, conn.clone(), chain.clone(), in_flight.clone()));
    let requests = request_side(client_r, up_w, target, tx, &conn, &chain, &in_flight, &mut stop).await;
    // The response side drains what is in flight, then ends (the queue's sender is gone).
    let responses = responses.await.unwrap_or(Ok(()));
    requests.and(responses)
}

/// Opening the upstream connection: not started until the first request must be written to it,
/// so a connection that never sends one (or, in termination mode, has not authenticated and is
/// answered by the proxy) holds no broker connection.
pub(crate) type Connecting<U> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(U, Option<kmp_protocol::security::Session>), ProxyError>> + Send>>;

/// The request side's half of the upstream connection: opening until the first write needs it;
/// then its read half goes to the response side.
struct Opening<U: SplitStream> {
    /// The connect task and where its read half goes; `None` once open.
    connect: Option<(Connecting<U>, oneshot::Sender<U::Read>)>,
    write: Option<U::Write>,
    /// Termination mode: the proxy's SASL session on this connection (renewed before the broker's
    /// lifetime ends, `renewal`).
    session: Option<kmp_protocol::security::Session>,
}

impl<U: SplitStream> Opening<U> {
    fn is_open(&self) -> bool {
        self.connect.is_none()
    }

    /// The write half, once the connection is open (its error otherwise: the session ends).
    async fn writer(&mut self) -> Result<&mut U::Write, ProxyError> {
        if let Some((connect, read_tx)) = self.connect.take() {
            let (stream, session) = connect.await?;
            let (r, w) = stream.split_stream();
            let _ = read_tx.send(r);
            self.write = Some(w);
            self.session = session;
        }
        self.write.as_mut().ok_or(ProxyError::NoUpstream)
    }

    /// Renews the proxy's SASL login on the open connection when it is due: before the next
    /// request is queued, so that the login's requests and answers keep the stream's order.
    async fn renew_if_due(&mut self, tx: &mpsc::Sender<Pending>) -> Result<(), ProxyError> {
        let (Some(write), Some(session)) = (self.write.as_mut(), self.session.as_mut()) else {
            return Ok(());
        };
        if !session.due(tokio::time::Instant::now()) {
            return Ok(());
        }
        let mut renewal = renewal::Renewal::new(write, tx);
        session.renew(&mut renewal).await.map_err(|e| {
            warn!(error = %e, "renewing the proxy's SASL login on the upstream connection (KIP-368) failed; closing the connection");
            ProxyError::Protocol(e)
        })
    }
}

#[allow(clippy::too_many_arguments)]
async fn request_side<R: AsyncRead + Unpin, U: SplitStream>(
    client_r: R,
    mut up_w: Opening<U>,
    target: Target,
    tx: mpsc::Sender<Pending>,
    conn: &Conn,
    chain: &Chain,
    in_flight: &AtomicUsize,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let shared = &*conn.shared;
    let m = &shared.metrics;
    let limits = &shared.config.limits;
    let (idle, partial) = (
        Duration::from_millis(limits.idle_timeout_ms),
        Duration::from_millis(limits.frame_read_timeout_ms),
    );
    let max_frame = shared.config.listener.max_request_frame_bytes;
    let auth = &conn.listener.auth;
    let mut reader = FrameReader::new(client_r, max_frame, Side::Client)
        .with_budget(shared.limits.budget.clone())
        .with_frame_timeout(partial);
    let mut last_activity = Instant::now();
    let idle_timer = tokio::time::sleep(idle);
    tokio::pin!(idle_timer);
    // Termination mode: until the client has authenticated its frames are small (Kafka's
    // `sasl.server.max.receive.size`) and it has `listener.auth.timeout_ms` to get there.
    let auth_deadline = tokio::time::sleep(Duration::from_millis(auth.timeout_ms));
    tokio::pin!(auth_deadline);
    let mut waits = 0;
    // The authentication deadline holds for the first login only; a re-authentication later
    // (KIP-368) is bounded by the session lifetime it renews.
    let mut authenticated_once = false;
    loop {
        if *stop.borrow() {
            debug!("draining: no new requests read");
            return Ok(());
        }
        let authenticating = crate::filters::sasl_terminate::authenticating(conn);
        authenticated_once |= !authenticating;
        reader.set_max(if authenticating { auth.max_receive_bytes.min(max_frame) } else { max_frame });
        // A started frame is bounded by the reader (frame timeout); between frames, idleness. One
        // timer per connection, re-armed only when it fires (not per request).
        let next = tokio::select! {
            f = reader.next_guarded() => f,
            _ = tx.closed() => return Ok(()),
            r = stop.changed() => {
                if r.is_err() {
                    return Ok(());
                }
                continue;
            }
            _ = &mut auth_deadline, if authenticating && !authenticated_once => {
                m.connection_closed("authentication_timeout");
                debug!(timeout = ?Duration::from_millis(auth.timeout_ms), "closing connection: not authenticated in time");
                return Err(ProxyError::Timeout("authentication"));
            }
            _ = &mut idle_timer => {
                if reader.partial_since().is_some() || in_flight.load(Ordering::Acquire) > 0 {
                    // A frame on its way or responses awaited are not idleness.
                    last_activity = Instant::now();
                } else if last_activity.elapsed() >= idle {
                    m.connection_closed("idle_timeout");
                    debug!(timeout = ?idle, "closing idle connection");
                    return Err(ProxyError::Timeout("idle"));
                }
                idle_timer.as_mut().reset((last_activity + idle).into());
                continue;
            }
        };
        if reader.budget_waits() > waits {
            m.buffer_waits.inc_by(reader.budget_waits() - waits);
            waits = reader.budget_waits();
        }
        let (frame, _budget) = match next {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(ProtocolError::Io { source, .. }) if source.kind() == std::io::ErrorKind::TimedOut => {
                m.connection_closed("partial_frame_timeout");
                warn!(buffered = reader.buffered(), timeout = ?partial, "closing connection: a frame did not arrive in time");
                return Err(ProxyError::Timeout("a request frame did not arrive in time"));
            }
            Err(e) => return Err(client_error(shared, e)),
        };
        m.buffered_request_bytes.set(shared.limits.budget.in_use() as i64);
        last_activity = Instant::now();
        let started = Instant::now();
        m.bytes_from_clients.inc_by(frame.len() as u64);
        let p = peek::request(&frame).map_err(|e| client_error(shared, e))?;
        trace!(api_key = p.api_key, version = p.api_version, correlation_id = p.correlation_id, "request");
        let exchange = Exchange::new(frame, p.api_key, p.api_version, p.correlation_id);
        let (frame, merge) = match chain.request(exchange, conn).await.map_err(|e| match e {
            ProxyError::Protocol(e) => client_error(shared, e),
            e => e,
        })? {
            Outcome::Forward { frame, merge } => {
                // Before this request is queued: a due renewal of the proxy's login goes first.
                up_w.renew_if_due(&tx).await?;
                (frame, merge)
            }
            Outcome::Answer(response) => {
                if let Some(frame) = response
                    && !answer_here(&tx, p.api_key, frame, started).await
                {
                    return Ok(());
                }
                continue;
            }
        };
        let expects_response = p.api_key != ApiKey::Produce as i16 || peek::produce_acks(&frame, &p).map_err(|e| client_error(shared, e))? != 0;
        if expects_response {
            // A first ApiVersions while the upstream opens: answered now from the broker's kept
            // answer, and still forwarded (the broker sees it; its answer is kept, not sent).
            let versions = p.api_key == ApiKey::ApiVersions as i16 && merge.is_none();
            let early = (versions && !up_w.is_open())
                .then(|| shared.early_versions.answer(target, p.api_version, p.correlation_id))
                .flatten();
            let answered_early = early.is_some();
            if let Some(frame) = early {
                m.api_versions_answered_early.inc();
                if !answer_here(&tx, p.api_key, frame, started).await {
                    return Ok(());
                }
                if authenticating {
                    // Termination mode before authentication: answered, and no broker
                    // connection is opened for a client that has not logged in.
                    continue;
                }
            }
            let stream = if merge.is_some() || chain.may_change_response(p.api_key, p.api_version, Some(&frame), conn) {
                Stream::No
            } else if chain.keeps_request(p.api_key, p.api_version, conn) {
                // Small (a Fetch request names partitions and offsets); kept apart from the
                // reader's buffer so holding it does not hold that.
                Stream::Yes(Some(Bytes::copy_from_slice(&frame)))
            } else {
                Stream::Yes(None)
            };
            let pending = Pending::Forwarded {
                api_key: p.api_key,
                api_version: p.api_version,
                correlation_id: p.correlation_id,
                started,
                merge,
                stream,
                keep_for: versions.then_some(target),
                answered_early,
            };
            in_flight.fetch_add(1, Ordering::AcqRel);
            if tx.send(pending).await.is_err() {
                return Ok(());
            }
        } else {
            m.api(p.api_key).requests.inc();
        }
        // TLS: a write may leave encrypted bytes buffered when the socket was full; flush sends
        // them now instead of with the next request (which may never come). Plain TCP: a no-op.
        let io = |source| ProtocolError::Io { source, side: Side::Broker };
        let up_w = up_w.writer().await?;
        up_w.write_all(&frame).await.map_err(io)?;
        up_w.flush().await.map_err(io)?;
    }
}

fn client_error(shared: &Shared, e: ProtocolError) -> ProxyError {
    frame_error(&shared.metrics.client_frame_errors, "bad frame", e)
}

/// Queues a response the proxy produced itself; false if the response side has ended.
async fn answer_here(tx: &mpsc::Sender<Pending>, api_key: i16, frame: Bytes, started: Instant) -> bool {
    tx.send(Pending::Local { api_key, frame, started }).await.is_ok()
}

/// Counts and logs a malformed frame (plain I/O errors are neither) and closes the connection.
fn frame_error(counter: &Counter, what: &str, e: ProtocolError) -> ProxyError {
    if !matches!(e, ProtocolError::Io { .. }) {
        counter.inc();
        warn!(error = %e, "closing client connection: {what}");
    }
    e.into()
}

async fn response_side<R: AsyncRead + Unpin + SpliceSocket, W: AsyncWrite + Unpin + SpliceSocket>(
    mut rx: mpsc::Receiver<Pending>,
    mut opened: oneshot::Receiver<R>,
    mut client_w: W,
    conn: Arc<Conn>,
    chain: Arc<Chain>,
    in_flight: Arc<AtomicUsize>,
) -> Result<(), ProxyError> {
    let shared = &*conn.shared;
    let m = &shared.metrics;
    let stall = Duration::from_millis(shared.config.limits.client_write_timeout_ms);
    let mut upstream = None;
    while let Some(pending) = rx.recv().await {
        if upstream.is_none() && !matches!(pending, Pending::Local { .. }) {
            // The request side sends the read half once the connection is open; it is dropped
            // (the session ends, with the request side's error) if opening failed.
            match (&mut opened).await {
                Ok(up_r) => upstream = Some(Upstream::new(up_r, shared.config.upstream.max_response_frame_bytes).with_write_stall(stall)),
                Err(_) => return Ok(()),
            }
        }
        let (api_key, len, started) = match pending {
            Pending::Internal { correlation_id, reply } => {
                let Some(upstream) = upstream.as_mut() else { return Ok(()) };
                match upstream.whole(correlation_id, &shared.limits.response_budget).await {
                    Ok(Some((frame, _held))) => {
                        let _ = reply.send(frame);
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(broker_error(shared, e)),
                }
                continue;
            }
            Pending::Local { api_key, frame, started } => {
                write_client(&mut client_w, &frame, stall, m).await?;
                (api_key, frame.len(), started)
            }
            Pending::Forwarded {
                api_key,
                api_version,
                correlation_id,
                started,
                merge,
                stream: Stream::Yes(request),
                ..
            } if !chain.may_change_response(api_key, api_version, request.as_ref(), &conn) => {
                drop((merge, request));
                let Some(upstream) = upstream.as_mut() else { return Ok(()) };
                let len = match upstream.stream(&mut client_w, correlation_id, Scan::of(api_key, api_version)).await {
                    Ok(Some(len)) => len,
                    Ok(None) => {
                        debug!("upstream broker closed the connection with requests in flight");
                        return Ok(());
                    }
                    Err(CopyError::Broker(e)) => return Err(broker_error(shared, e)),
                    Err(CopyError::Client(e)) => return Err(client_io(e, stall, m)),
                };
                m.spliced_bytes.inc_by(upstream.take_spliced());
                in_flight.fetch_sub(1, Ordering::AcqRel);
                (api_key, len, started)
            }
            Pending::Forwarded {
                api_key,
                api_version,
                correlation_id,
                started,
                merge,
                stream: _,
                keep_for,
                answered_early,
            } => {
                let Some(upstream) = upstream.as_mut() else { return Ok(()) };
                // Held until the response is written: what clients that read slowly (or not at
                // all) hold together is bounded by `limits.buffered_response_bytes`.
                let (frame, _held) = match upstream.whole(correlation_id, &shared.limits.response_budget).await {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        debug!("upstream broker closed the connection with requests in flight");
                        return Ok(());
                    }
                    Err(e) => return Err(broker_error(shared, e)),
                };
                let frame = match merge {
                    Some(merge) => merge(frame).map_err(|e| broker_error(shared, e))?,
                    None => frame,
                };
                let frame = chain.response(frame, api_key, api_version, &conn).map_err(|e| broker_error(shared, e))?;
                in_flight.fetch_sub(1, Ordering::AcqRel);
                if let Some(target) = keep_for {
                    shared.early_versions.keep(target, api_version, &frame);
                }
                if answered_early {
                    continue;
                }
                // Flushed (see the request side): without it the tail of a large response could
                // wait in the TLS buffer until the client's next request.
                write_client(&mut client_w, &frame, stall, m).await?;
                (api_key, frame.len(), started)
            }
        };
        m.bytes_to_clients.inc_by(len as u64);
        let api = m.api(api_key);
        api.requests.inc();
        api.latency.observe(started.elapsed().as_secs_f64());
    }
    let _ = client_w.flush().await;
    Ok(())
}

/// Writes and flushes a whole response to the client; a client that takes nothing of it for
/// `stall` (`limits.client_write_timeout_ms`) ends the session.
async fn write_client<W: AsyncWrite + Unpin>(w: &mut W, frame: &[u8], stall: Duration, m: &crate::metrics::Metrics) -> Result<(), ProxyError> {
    crate::session::write_stall::write_all_flushed(w, frame, Some(stall))
        .await
        .map_err(|e| client_io(e, stall, m))
}

/// A failed write to the client; a write-stall timeout is counted and logged as the reason.
fn client_io(e: std::io::Error, stall: Duration, m: &crate::metrics::Metrics) -> ProxyError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        m.connection_closed("client_write_timeout");
        warn!(timeout = ?stall, "closing connection: the client read nothing of a response in time");
    }
    ProxyError::ClientIo(e)
}

fn broker_error(shared: &Shared, e: ProtocolError) -> ProxyError {
    frame_error(&shared.metrics.broker_frame_errors, "bad response from broker", e)
}
