//! The admin HTTP endpoint (hyper), and what it serves — this folder owns the REST API (`rest`,
//! its `openapi.json` beside it), the dashboard (`dashboard`, its assets in `dashboard/`), the
//! engine's, election's and follower's `/metrics` families (`collectors`, registered on the proxy's
//! registry when the endpoint starts, with `mirror_metrics`, `election_status`, `follower_status`),
//! their `/readyz` text, the partition view REST, the dashboard and the CLI share (`partition_view`) and
//! the connection caps (`admin_slots`). Routes: `/healthz` (the process is up), `/readyz` (the upstream
//! cluster answered the last metadata refresh, every known broker's node listener is bound and the
//! mirror engine has loaded its stored state, 503 with the reasons otherwise —
//! on a follower: has read the state topic to its end and keeps reading it, `follower_status`),
//! `/metrics` (Prometheus text format), the
//! mirror management routes under `/v1` (owned by `rest`) and the live dashboard under
//! `/dashboard/` (owned by `dashboard`; its data has the `/v1` read rules). Metrics are owned by `metrics`,
//! readiness by `refresh`. `/healthz` and `/readyz` answer anyone; `/metrics` and every `/v1`
//! route need a loopback caller or the admin token (`rest::AdminAuth`), reads unless
//! `security.admin_read_open`. A client has `limits.http_header_read_timeout_ms` to send its
//! request headers, and as long again to send a `/v1` request's body (408 after it); a
//! connection whose answers make no write progress for as long (a client that pipelines
//! requests and never reads) is closed. At most `limits.max_admin_connections` connections are
//! open at once, `limits.max_admin_connections_per_ip` from one address, and non-loopback callers
//! leave `limits.admin_loopback_reserve` to loopback ones (`admin_slots`); further ones are closed
//! at accept, so unauthenticated callers cannot take every file descriptor from the Kafka
//! listeners, nor the connections a health probe needs. Failing accepts (e.g. out of file
//! descriptors) back off instead of spinning.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kmp_mirror_engine::Backoff;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Sleep;
use tracing::{debug, info};

use admin_slots::{AdminCaps, AdminSlots};
use rest::AdminAuth;

use crate::net::accept::accept_loop;
use crate::net::tls::TlsIdentity;
use crate::shared::Shared;

mod admin_slots;
mod broker_links;
mod collectors;
mod dashboard;
mod election_status;
mod follower_status;
mod mirror_metrics;
mod partition_view;
mod rest;

pub use partition_view::PartitionView;

/// First pause after a failed accept; doubles up to [`ACCEPT_BACKOFF_MAX`], reset by a success.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a connection's answer may make no write progress when the header-read timeout is
/// off (`limits.http_header_read_timeout_ms = 0`).
const WRITE_STALL_DEFAULT: Duration = Duration::from_secs(10);

/// Serves the admin endpoint on `listener`, over HTTPS when `tls` is given (`[admin.tls]`).
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, tls: Option<Arc<TlsIdentity>>, stop: watch::Receiver<bool>) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, https = tls.is_some(), "admin endpoint listening");
    }
    register_collectors(&shared.metrics, &shared.mirrors);
    let header_timeout = header_read_timeout(shared.config.limits.http_header_read_timeout_ms);
    let caps = AdminCaps::from_config(&shared.config.limits);
    accept_admin(listener, caps, stop, move |stream, peer| {
        let (shared, tls) = (shared.clone(), tls.clone());
        async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(respond(req, peer, &shared).await) }
            });
            let served = match tls {
                None => serve_http(stream, header_timeout, svc).await,
                Some(identity) => {
                    let handshake = header_timeout.unwrap_or(Duration::from_secs(10));
                    match crate::net::tls::accept(&identity, stream, handshake).await {
                        Ok((tls, _)) => serve_http(tls, header_timeout, svc).await,
                        Err(why) => {
                            debug!(%peer, %why, "admin TLS handshake failed");
                            return;
                        }
                    }
                }
            };
            if let Err(err) = served {
                debug!(%err, "admin connection error");
            }
        }
    })
    .await;
}

/// Accepts connections on `listener` until `stop` changes and runs `connection` for each on its
/// own task, within `caps` ([`AdminSlots`]): a connection beyond them is closed at accept.
async fn accept_admin<F, Fut>(listener: TcpListener, caps: AdminCaps, stop: watch::Receiver<bool>, connection: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = AdminSlots::new(caps);
    let backoff = Backoff::new(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
    accept_loop(listener, "admin", backoff, stop, |stream, peer| {
        let slot = match slots.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                // Dropping the stream closes it.
                debug!(%peer, limit, "admin connection refused: too many open");
                return;
            }
        };
        let served = connection(stream, peer);
        tokio::spawn(async move {
            served.await;
            drop(slot);
        });
    })
    .await;
}

/// Registers the engine's, the follower's and the election's collectors on `metrics`, in the
/// order `/metrics` lists them; each asks `engines` at scrape time what this instance runs now
/// (`engine.role = "auto"` switches between engine and follower). Once per proxy: the admin
/// endpoint does it when it starts.
pub(crate) fn register_collectors(metrics: &crate::metrics::Metrics, engines: &kmp_mirror_engine::EngineSlot) {
    let slot = engines.clone();
    metrics.register_collector(Box::new(collectors::Scraped::new(
        "mirror engine",
        move || Some(mirror_metrics::MirrorSample::of(&slot.copying())),
        mirror_metrics::encode,
    )));
    let slot = engines.clone();
    metrics.register_collector(Box::new(collectors::Scraped::new(
        "state follower",
        move || slot.follow().map(|f| (f.borrow().clone(), kmp_mirror_engine::now_ms())),
        follower_status::encode,
    )));
    let slot = engines.clone();
    metrics.register_collector(Box::new(collectors::Scraped::new(
        "engine election",
        move || slot.election(),
        election_status::encode,
    )));
    metrics.register_collector(Box::new(collectors::Scraped::new(
        "broker connections",
        || Some(broker_links::sample()),
        broker_links::encode,
    )));
}

/// Serves one admin HTTP/1 connection on `io`: the header-read timeout (see [`http_builder`]),
/// and the connection is closed when its answers make no write progress for as long
/// ([`WRITE_STALL_DEFAULT`] when that is off): hyper stops reading while it cannot write, so a
/// client that pipelines requests and never reads its answers would otherwise hold it forever.
async fn serve_http<S, Svc>(io: S, header_timeout: Option<Duration>, svc: Svc) -> Result<(), hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    Svc::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let io = WriteStallGuard::new(io, header_timeout.unwrap_or(WRITE_STALL_DEFAULT));
    http_builder(header_timeout).serve_connection(TokioIo::new(io), svc).await
}

/// A stream whose writes fail with `TimedOut` once one has waited `limit` without the peer
/// taking any byte (each write that goes through starts the clock afresh).
struct WriteStallGuard<S> {
    inner: S,
    limit: Duration,
    /// Running while a write waits; `None` while writes go through.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStallGuard<S> {
    fn new(inner: S, limit: Duration) -> Self {
        Self { inner, limit, stalled: None }
    }

    /// `outcome` of the inner write, or `TimedOut` when it has been pending for `limit`.
    fn check<T>(&mut self, cx: &mut Context<'_>, outcome: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if outcome.is_ready() {
            self.stalled = None;
            return outcome;
        }
        let limit = self.limit;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(stalled.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the peer took no answer bytes for {} ms", limit.as_millis()),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStallGuard<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStallGuard<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, outcome)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outcome = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, outcome)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outcome = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.check(cx, outcome)
    }
}

/// The HTTP/1 connection settings: a client that has not sent its whole request head within
/// `header_timeout` is disconnected (slowloris).
fn http_builder(header_timeout: Option<Duration>) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    builder
}

/// `limits.http_header_read_timeout_ms` for hyper (0 turns it off).
fn header_read_timeout(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// How long a `/v1` caller has to send its whole request body: the header-read timeout
/// (`limits.http_header_read_timeout_ms`), 10 s when that is off.
fn body_timeout(shared: &Shared) -> Duration {
    header_read_timeout(shared.config.limits.http_header_read_timeout_ms).unwrap_or(Duration::from_secs(10))
}

async fn respond(req: Request<Incoming>, peer: std::net::SocketAddr, shared: &Shared) -> Response<Full<Bytes>> {
    let auth = AdminAuth {
        token: shared.config.admin.token.as_deref(),
        read_open: shared.config.security.admin_read_open,
        loopback: shared.config.security.admin_loopback,
    };
    if req.uri().path().starts_with("/v1/") {
        return rest::handle(
            req,
            peer,
            auth,
            body_timeout(shared),
            &shared.mirrors.control(),
            shared.mirrors.election(),
            Some(&shared.mirrors),
        )
        .await;
    }
    if dashboard::owns(req.uri().path()) {
        return dashboard::handle(req.method(), req.uri().path(), req.headers(), peer, auth, &shared.mirrors.control()).await;
    }
    if req.uri().path() == "/metrics"
        && let Some(refused) = auth.refuse_read(req.headers(), peer)
    {
        return refused;
    }
    route(&req, shared)
}

fn route(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            let engine = if let Some(follow) = &shared.mirrors.follow() {
                EngineReadiness::Follower(follower_status::readiness(&follow.borrow(), kmp_mirror_engine::now_ms()))
            } else if shared.mirrors.control().is_booted() {
                EngineReadiness::Booted
            } else {
                EngineReadiness::Loading(shared.mirrors.control().boot_problem())
            };
            let election = shared.mirrors.election();
            // An elected instance is ready once it knows who runs the engine (a lone one: itself).
            let undecided = election.as_ref().filter(|e| e.generation < 0).map(|e| e.group_id.clone());
            let (ready, mut body) = readiness(shared.ready.load(Ordering::Relaxed), &shared.cluster.unbound(), engine, undecided);
            if let Some(election) = election {
                body.push_str(&election_status::readiness_line(&election));
            }
            text(if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body)
        }
        "/metrics" => {
            let body = shared.metrics.encode();
            let mut r = text(StatusCode::OK, body);
            if let Ok(v) = "application/openmetrics-text; version=1.0.0; charset=utf-8".parse() {
                r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            r
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Where the mirror engine stands, for `/readyz`.
#[derive(Debug)]
enum EngineReadiness {
    /// The stored state is loaded (or the engine is disabled).
    Booted,
    /// Still loading; the reason when the last attempt to open the state topic failed.
    Loading(Option<String>),
    /// A follower's own answer (`follower_status::readiness`).
    Follower((bool, String)),
}

/// `(ready, body)` of `/readyz`: not ready while the upstream does not answer, while a broker's
/// node listener could not be bound (that broker is hidden from clients) or while the engine has
/// not loaded its state or (`undecided`, the election group's name) has not seen the engine
/// election decide yet; the body names every reason, one a line.
fn readiness(upstream_ready: bool, unbound: &[(i32, String)], engine: EngineReadiness, undecided: Option<String>) -> (bool, String) {
    let mut problems = Vec::new();
    if !upstream_ready {
        problems.push("upstream cluster not reachable".to_owned());
    }
    for (node_id, why) in unbound {
        problems.push(format!("broker {node_id} is hidden from clients: {why}"));
    }
    let mut ready_body = "ready\n".to_owned();
    match engine {
        EngineReadiness::Booted => {}
        EngineReadiness::Loading(None) => problems.push("mirror engine still loading its stored state".to_owned()),
        EngineReadiness::Loading(Some(why)) => problems.push(format!("mirror engine not started: {why} (retrying)")),
        // A ready follower's body says what it follows.
        EngineReadiness::Follower((true, body)) => ready_body = body,
        EngineReadiness::Follower((false, body)) => problems.push(body.trim_end().to_owned()),
    }
    if let Some(group) = undecided {
        problems.push(format!("mirror engine election in group {group} has not decided yet"));
    }
    if problems.is_empty() {
        (true, ready_body)
    } else {
        (false, problems.iter().map(|p| format!("{p}\n")).collect())
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_names_every_reason_it_is_not_ready() {
        assert_eq!(readiness(true, &[], EngineReadiness::Booted, None), (true, "ready\n".to_owned()));
        let unbound = vec![(2, "cannot listen on 0.0.0.0:19094: Address in use".to_owned())];
        let (ready, body) = readiness(true, &unbound, EngineReadiness::Booted, None);
        assert!(!ready);
        assert_eq!(body, "broker 2 is hidden from clients: cannot listen on 0.0.0.0:19094: Address in use\n");
        let why = "cannot open the mirror state topic s.t: INVALID_TOPIC_EXCEPTION".to_owned();
        let (ready, body) = readiness(false, &unbound, EngineReadiness::Loading(Some(why)), None);
        assert!(!ready);
        assert_eq!(
            body.lines().collect::<Vec<_>>(),
            [
                "upstream cluster not reachable",
                "broker 2 is hidden from clients: cannot listen on 0.0.0.0:19094: Address in use",
                "mirror engine not started: cannot open the mirror state topic s.t: INVALID_TOPIC_EXCEPTION (retrying)",
            ]
        );
        let (ready, body) = readiness(true, &[], EngineReadiness::Loading(None), None);
        assert!(!ready && body == "mirror engine still loading its stored state\n", "{body}");
        let (ready, body) = readiness(true, &[], EngineReadiness::Booted, Some("kmp-engine.s".into()));
        assert!(!ready && body == "mirror engine election in group kmp-engine.s has not decided yet\n", "{body}");
    }

    #[test]
    fn a_followers_own_answer_is_kept() {
        let following = "ready (following the mirror state topic t: caught up at offset 3)\n".to_owned();
        assert_eq!(
            readiness(true, &[], EngineReadiness::Follower((true, following.clone())), None),
            (true, following.clone())
        );
        let (ready, body) = readiness(true, &[(1, "x".into())], EngineReadiness::Follower((true, following)), None);
        assert!(!ready && body == "broker 1 is hidden from clients: x\n", "{body}");
        let stale = "mirror state topic t not read for 11 s\n".to_owned();
        assert_eq!(readiness(true, &[], EngineReadiness::Follower((false, stale.clone())), None), (false, stale));
    }

    #[test]
    fn the_header_read_timeout_comes_from_the_limits() {
        assert_eq!(header_read_timeout(10_000), Some(Duration::from_secs(10)));
        assert_eq!(header_read_timeout(0), None);
    }

    #[tokio::test]
    async fn a_client_that_pipelines_requests_and_never_reads_the_answers_is_disconnected() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = service_fn(|_req: Request<Incoming>| async { Ok::<_, Infallible>(text(StatusCode::OK, "x".repeat(16 * 1024))) });
            let _ = serve_http(stream, header_read_timeout(200), svc).await;
            let _ = done_tx.send(());
        });
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut client = socket.connect(addr).await.unwrap();
        let reqs = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(2000);
        let _ = tokio::time::timeout(Duration::from_secs(2), client.write_all(&reqs)).await; // never read
        assert!(
            tokio::time::timeout(Duration::from_secs(5), done_rx).await.is_ok(),
            "the server still holds the connection 5 s after its 200 ms timeout"
        );
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_accept_until_one_ends() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop_tx, stop_rx) = watch::channel(false);
        let caps = AdminCaps {
            total: 2,
            per_ip: 2,
            loopback_reserve: 0,
        };
        tokio::spawn(accept_admin(listener, caps, stop_rx, |stream, _peer| async move {
            let svc = service_fn(|_req: Request<Incoming>| async { Ok::<_, Infallible>(text(StatusCode::OK, "ok\n".into())) });
            let _ = serve_http(stream, header_read_timeout(10_000), svc).await;
        }));
        async fn get(client: &mut tokio::net::TcpStream) -> String {
            let _ = client.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
            let mut buf = [0u8; 512];
            let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
                .await
                .expect("an answer or a close");
            String::from_utf8_lossy(&buf[..n.unwrap_or(0)]).into_owned()
        }
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(get(&mut first).await.contains("200 OK"));
        assert!(get(&mut second).await.contains("200 OK"));
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert_eq!(get(&mut third).await, "", "the third connection is closed without an answer");
        drop(first);
        let mut again = None;
        for _ in 0..50 {
            let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
            if get(&mut next).await.contains("200 OK") {
                again = Some(next);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(again.is_some(), "a slot freed by a closed connection is used again");
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = service_fn(|_req: Request<Incoming>| async { Ok::<_, Infallible>(text(StatusCode::OK, "ok".into())) });
            let _ = serve_http(stream, header_read_timeout(200), svc).await;
        });
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let mut buf = Vec::new();
        let started = std::time::Instant::now();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the connection is closed, not left open");
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "closed by the timeout: {:?}",
            started.elapsed()
        );
        assert!(!String::from_utf8_lossy(&buf).contains("200 OK"), "no answer to an unfinished request");
    }
}
