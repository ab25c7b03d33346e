//! One broker connection shared by many tasks: each caller sends a typed request and awaits its
//! own response, while one writer task puts frames on the wire in order and one reader task hands
//! each response to the caller waiting for it (Kafka answers a connection's requests in order).
//! The mirror engine multiplexes thousands of partitions over a few of these per broker.
//!
//! A caller that gives up (its future is dropped) never corrupts the stream: frames are written
//! whole by the writer task, and an unclaimed response is read and dropped. Any I/O or framing
//! error closes the connection for every caller; reconnecting belongs to the owner of the pool.
//!
//! A connection whose SASL login's broker session expires (KIP-368) renews the login in the
//! writer task: once due, before the next frame, the SaslHandshake and SaslAuthenticate requests
//! go out in the stream's order (their responses come back after those of the requests before
//! them), and no other frame is written until the login is renewed (`security::reauth`). A failed
//! renewal closes the connection like any other error.
//!
//! A connection may have a request timeout ([`SharedConnection::with_request_timeout`]): a
//! response not complete that long after its request was queued closes the connection (a broker
//! answers a connection's requests in order, so every later response would wait behind a peer
//! that dribbles or never finishes it), and every caller waiting on it fails with `TimedOut`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::protocol::{Request, StrBytes};
use std::io::IoSlice;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Arrival, Connection, Sent, api_key, decode_sent, request_frame};
use crate::error::{ProtocolError, Side};
use crate::security::BrokerWrite;
use crate::security::reauth::SaslRoundTrip;

/// Longest wait for one SASL response of a renewal (after the responses queued before it).
const RENEWAL_WAIT: Duration = Duration::from_secs(60);

/// Frames queued for the writer before callers wait (backpressure, not a limit on in-flight).
const WRITE_QUEUE: usize = 256;

type Reply = oneshot::Sender<Result<(Bytes, Arrival), ProtocolError>>;

/// A request frame as segments written one after the other (one for most requests; a Produce
/// of mirrored batches keeps each batch's records a segment of their own, uncopied).
type Frame = Vec<Bytes>;

/// Most segments handed to one vectored write.
const MAX_IOV: usize = 64;

/// Writes `segments` whole, with vectored writes where the stream supports them.
async fn write_segments<W: AsyncWrite + Unpin>(w: &mut W, segments: &[Bytes]) -> std::io::Result<()> {
    let (mut i, mut off) = (0usize, 0usize);
    loop {
        while i < segments.len() && off == segments[i].len() {
            (i, off) = (i + 1, 0);
        }
        if i == segments.len() {
            return Ok(());
        }
        let slices: Vec<IoSlice<'_>> = std::iter::once(&segments[i][off..])
            .chain(segments[i + 1..].iter().map(|s| &s[..]))
            .take(MAX_IOV)
            .map(IoSlice::new)
            .collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let left = segments[i].len() - off;
            if n < left {
                off += n;
                n = 0;
            } else {
                n -= left;
                (i, off) = (i + 1, 0);
            }
        }
    }
}

/// A cheap-to-clone handle on one connection.
#[derive(Clone)]
pub struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    addr: String,
    client_id: StrBytes,
    next_correlation_id: Arc<AtomicI32>,
    closed: Arc<AtomicBool>,
    writes: mpsc::Sender<(Frame, Reply)>,
    /// Closes the connection from the callers' side (a request timed out).
    abort: Arc<Abort>,
    /// Longest wait for a response after its request was queued (`None`: unbounded).
    request_timeout: Option<Duration>,
}

/// Closing a connection whose response did not arrive in time: its reader and writer end, and
/// every caller still waiting fails.
struct Abort {
    closed: Arc<AtomicBool>,
    tx: tokio::sync::watch::Sender<bool>,
}

impl Abort {
    fn fire(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.tx.send(true);
    }
}

fn timed_out(after: Duration) -> ProtocolError {
    ProtocolError::Io {
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no complete response within {} ms; connection closed", after.as_millis()),
        ),
        side: Side::Broker,
    }
}

/// Waits for `rx` within `timeout` (if any); on expiry the connection is closed through `abort`.
async fn await_reply(
    rx: oneshot::Receiver<Result<(Bytes, Arrival), ProtocolError>>,
    timeout: Option<Duration>,
    abort: &Abort,
) -> Result<(Bytes, Arrival), ProtocolError> {
    let reply = match timeout {
        Some(after) => match tokio::time::timeout(after, rx).await {
            Ok(r) => r,
            Err(_) => {
                abort.fire();
                return Err(timed_out(after));
            }
        },
        None => rx.await,
    };
    reply.map_err(|_| closed_error("connection closed"))?
}

impl std::fmt::Debug for SharedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConnection")
            .field("addr", &self.inner.addr)
            .field("closed", &self.is_closed())
            .finish()
    }
}

fn closed_error(detail: &str) -> ProtocolError {
    ProtocolError::Io {
        source: std::io::Error::new(std::io::ErrorKind::ConnectionAborted, detail.to_owned()),
        side: Side::Broker,
    }
}

impl SharedConnection {
    /// Takes over an established (authenticated) connection; spawns its writer and reader tasks,
    /// which end when the connection fails or every handle is dropped.
    pub fn new(conn: Connection) -> Self {
        Self::open(conn, None)
    }

    /// [`SharedConnection::new`] with every response awaited at most `timeout` after its request
    /// was queued; a late one closes the connection (see the module doc).
    pub fn with_request_timeout(conn: Connection, timeout: Duration) -> Self {
        Self::open(conn, Some(timeout))
    }

    fn open(conn: Connection, request_timeout: Option<Duration>) -> Self {
        let (mut reader, mut writer, next_id, client_id, addr, mut session) = conn.into_parts();
        let next_correlation_id = Arc::new(AtomicI32::new(next_id));
        let (writes, mut queue) = mpsc::channel::<(Frame, Reply)>(WRITE_QUEUE);
        let closed = Arc::new(AtomicBool::new(false));
        // Replies in wire order: the writer pushes before writing, the reader pops per response.
        let pending: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
        let (dead_tx, mut dead_rx) = oneshot::channel::<()>();
        let (abort_tx, mut abort_rx) = tokio::sync::watch::channel(false);
        let abort = Arc::new(Abort {
            closed: closed.clone(),
            tx: abort_tx,
        });
        {
            let pending = pending.clone();
            let closed = closed.clone();
            let (next_id, client_id) = (next_correlation_id.clone(), client_id.clone());
            tokio::spawn(async move {
                let failed = loop {
                    let next = tokio::select! {
                        n = queue.recv() => n,
                        _ = &mut dead_rx => break Some(closed_error("the connection failed")),
                    };
                    let Some((frame, reply)) = next else { break None };
                    if let Some(s) = session.as_mut().filter(|s| s.due(tokio::time::Instant::now())) {
                        let mut piped = Piped {
                            writer: &mut writer,
                            pending: &pending,
                            next_correlation_id: &next_id,
                            client_id: &client_id,
                        };
                        if let Err(e) = s.renew(&mut piped).await {
                            tracing::warn!(error = %e, "renewing the SASL login (KIP-368 re-authentication) failed; closing the connection");
                            let _ = reply.send(Err(closed_error("re-authentication failed")));
                            break Some(e);
                        }
                    }
                    if let Ok(mut p) = pending.lock() {
                        p.push_back(reply);
                    }
                    let written = async {
                        write_segments(&mut writer, &frame).await?;
                        writer.flush().await
                    };
                    if let Err(source) = written.await {
                        break Some(ProtocolError::Io { source, side: Side::Broker });
                    }
                };
                closed.store(true, Ordering::Release);
                let _ = writer.shutdown().await;
                fail_all(&pending, failed.unwrap_or_else(|| closed_error("connection dropped")));
                queue.close();
                while let Some((_, reply)) = queue.recv().await {
                    let _ = reply.send(Err(closed_error("connection closed")));
                }
            });
        }
        {
            let pending = pending.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                let error = loop {
                    let next = tokio::select! {
                        r = reader.next_timed() => r,
                        _ = abort_rx.wait_for(|aborted| *aborted) => break closed_error("a response did not arrive in time"),
                    };
                    match next {
                        Ok(Some(frame)) => {
                            let reply = pending.lock().ok().and_then(|mut p| p.pop_front());
                            match reply {
                                Some(r) => {
                                    let _ = r.send(Ok(frame));
                                }
                                None => {
                                    break ProtocolError::Malformed {
                                        what: "response",
                                        detail: "a response nobody asked for".into(),
                                        side: Side::Broker,
                                    };
                                }
                            }
                        }
                        Ok(None) => break closed_error("broker closed the connection"),
                        Err(e) => break e,
                    }
                };
                closed.store(true, Ordering::Release);
                let _ = dead_tx.send(());
                fail_all(&pending, error);
            });
        }
        Self {
            inner: Arc::new(Inner {
                addr,
                client_id,
                next_correlation_id,
                closed,
                writes,
                abort,
                request_timeout,
            }),
        }
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Whether the connection has failed (every call now fails; open a new one).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Sends `req` at `version` and waits for its response. Requests of concurrent callers are
    /// pipelined in the order their frames were queued.
    pub async fn call<R: Request>(&self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        Ok(self.call_timed(req, version).await?.0)
    }

    /// [`SharedConnection::call`], also telling when the response's first and last bytes
    /// arrived.
    pub async fn call_timed<R: Request>(&self, req: &R, version: i16) -> Result<(R::Response, Arrival), ProtocolError> {
        let frame = self.frame(req, version)?;
        let (resp, arrival) = self.call_frame(frame.0).await?;
        Ok((decode_sent::<R>(&resp, frame.1)?, arrival))
    }

    /// Queues `req` for writing and returns once it is queued: requests submitted one after the
    /// other by one task reach the broker in that order. The response is awaited with
    /// [`Pending::response`] (dropping it discards the response).
    pub async fn submit<R: Request>(&self, req: &R, version: i16) -> Result<Pending<R>, ProtocolError> {
        let (frame, sent) = self.frame(req, version)?;
        self.queue(vec![frame], sent).await
    }

    /// [`SharedConnection::submit`] for a request the caller encodes itself, as segments:
    /// `encode` gets the correlation id and the client id and returns the whole frame (length
    /// prefix included) of an `R` at `version`.
    pub async fn submit_segments<R: Request>(
        &self,
        version: i16,
        encode: impl FnOnce(i32, &str) -> Result<Vec<Bytes>, ProtocolError>,
    ) -> Result<Pending<R>, ProtocolError> {
        let key = api_key::<R>()?;
        let correlation_id = self.inner.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode(correlation_id, &self.inner.client_id)?;
        self.queue(frame, Sent { correlation_id, key, version }).await
    }

    async fn queue<R: Request>(&self, frame: Frame, sent: Sent) -> Result<Pending<R>, ProtocolError> {
        if self.is_closed() {
            return Err(closed_error("connection closed"));
        }
        let (tx, rx) = oneshot::channel();
        self.inner.writes.send((frame, tx)).await.map_err(|_| closed_error("connection closed"))?;
        Ok(Pending {
            rx,
            sent,
            timeout: self.inner.request_timeout,
            abort: self.inner.abort.clone(),
            _r: std::marker::PhantomData,
        })
    }

    /// Encodes `req` with this connection's next correlation id.
    fn frame<R: Request>(&self, req: &R, version: i16) -> Result<(Bytes, Sent), ProtocolError> {
        let id = self.inner.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        request_frame(req, version, id, &self.inner.client_id)
    }

    async fn call_frame(&self, frame: Bytes) -> Result<(Bytes, Arrival), ProtocolError> {
        if self.is_closed() {
            return Err(closed_error("connection closed"));
        }
        let (tx, rx) = oneshot::channel();
        self.inner.writes.send((vec![frame], tx)).await.map_err(|_| closed_error("connection closed"))?;
        await_reply(rx, self.inner.request_timeout, &self.inner.abort).await
    }
}

/// The SASL requests of a renewal, in the writer task: each goes out after the frames written
/// before it and is answered in the stream's order; the next is written once it is answered.
struct Piped<'a> {
    writer: &'a mut BrokerWrite,
    pending: &'a Mutex<VecDeque<Reply>>,
    next_correlation_id: &'a AtomicI32,
    client_id: &'a StrBytes,
}

impl SaslRoundTrip for Piped<'_> {
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        let id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let (frame, sent) = request_frame(req, version, id, self.client_id)?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.push_back(tx);
        }
        self.writer
            .write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        self.writer.flush().await.map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        let (resp, _) = match tokio::time::timeout(RENEWAL_WAIT, rx).await {
            Ok(r) => r.map_err(|_| closed_error("connection closed while re-authenticating"))??,
            Err(_) => return Err(timed_out(RENEWAL_WAIT)),
        };
        decode_sent::<R>(&resp, sent)
    }
}

/// A request queued by [`SharedConnection::submit`].
pub struct Pending<R> {
    rx: oneshot::Receiver<Result<(Bytes, Arrival), ProtocolError>>,
    sent: Sent,
    timeout: Option<Duration>,
    abort: Arc<Abort>,
    _r: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> Pending<R> {
    /// Waits for the response.
    pub async fn response(self) -> Result<R::Response, ProtocolError> {
        let (resp, _) = await_reply(self.rx, self.timeout, &self.abort).await?;
        decode_sent::<R>(&resp, self.sent)
    }
}

fn fail_all(pending: &Mutex<VecDeque<Reply>>, error: ProtocolError) {
    let drained: Vec<Reply> = pending.lock().map(|mut p| p.drain(..).collect()).unwrap_or_default();
    let text = error.to_string();
    for r in drained {
        let _ = r.send(Err(closed_error(&text)));
    }
}

#[cfg(test)]
mod tests;
