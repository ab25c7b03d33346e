//! What the in-process tests share: a scripted single-broker stand-in, `serve` started on port-0
//! listeners with the mirror engine off, hand-built Kafka frames, a raw HTTP/1.1 client for the
//! admin endpoint, waiting on a condition with a deadline, and a watch for panics in the proxy's
//! tasks (a panic in a connection task is the in-process form of a crash: tokio catches it and
//! only that task ends).
//!
//! The stand-in is node 7 at its own address. It answers ApiVersions (announcing the versions in
//! [`ANNOUNCED`], one newer than the proxy knows, and a finalized-features epoch that grows with
//! every answer, so a test can tell which answer it got) and Metadata; it records every frame it
//! receives and closes a connection that sends anything else, as a broker closes one it cannot
//! parse. Everything beyond that is covered against real Kafka in `tests/integration`.

// Each test file compiles this module and uses part of it.
#![allow(dead_code)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_mirror_proxy::{Listeners, ProxyError, serve};
use kmp_config::Config;
use kmp_protocol::client::Connection;
use kmp_protocol::codec::{decode_request, encode_request, encode_response};
use kmp_protocol::frame::{FrameReader, PREFIX};
use kmp_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use kmp_protocol::kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kmp_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse, RequestHeader};
use kmp_protocol::kafka_protocol::protocol::{Encodable, Request, StrBytes};
use kmp_protocol::{Side, peek};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The stand-in's node id.
pub const BROKER_ID: i32 = 7;

/// What the stand-in announces in ApiVersions: (API key, min, max). Metadata up to v99 (the
/// audited table stops at 13) and an API key no table knows (500).
pub const ANNOUNCED: &[(i16, i16, i16)] = &[(18, 0, 4), (3, 0, 99), (500, 0, 1)];

/// How long a test waits for anything that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

// ---- the broker stand-in --------------------------------------------------------------------

/// What the stand-in did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Answered an ApiVersions request with this finalized-features epoch.
    ApiVersions { epoch: i64 },
    /// Answered a Metadata request.
    Metadata,
    /// No answer: the connection was closed.
    Closed,
}

/// One frame the stand-in received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The whole frame, length prefix included.
    pub frame: Bytes,
    /// API key, version and correlation id; `None` for a frame shorter than a request header.
    pub header: Option<(i16, i16, i32)>,
    /// The request header's client id (every request header version has it in the same place).
    pub client_id: Option<String>,
    pub reply: Reply,
}

/// The scripted single broker (see the module documentation).
pub struct StandIn {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    accept: JoinHandle<()>,
}

impl StandIn {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the broker stand-in");
        let addr = listener.local_addr().expect("the stand-in's address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let epoch = Arc::new(AtomicI64::new(1));
        let log = received.clone();
        let accept = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(broker_connection(sock, addr.port(), log.clone(), epoch.clone()));
            }
        });
        Self { addr, received, accept }
    }

    /// Every frame received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first frame received from a client with `client_id` and API key `api_key`, waited for.
    pub async fn wait_for(&self, client_id: &str, api_key: i16) -> Received {
        eventually(
            &format!("the stand-in receives API key {api_key} from client id {client_id:?}"),
            PATIENCE,
            || {
                let found = self
                    .received()
                    .into_iter()
                    .find(|r| r.client_id.as_deref() == Some(client_id) && r.header.map(|h| h.0) == Some(api_key));
                async move { found }
            },
        )
        .await
    }

    /// Stops accepting: from now on a connection to the stand-in is refused (connections already
    /// open keep being served). Returns once a connection attempt is refused.
    pub async fn shut(&self) {
        self.accept.abort();
        let addr = self.addr;
        eventually("connecting to the shut stand-in is refused", PATIENCE, || async move {
            TcpStream::connect(addr).await.is_err().then_some(())
        })
        .await;
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn broker_connection(sock: TcpStream, port: u16, log: Arc<Mutex<Vec<Received>>>, epoch: Arc<AtomicI64>) {
    let (r, mut w) = sock.into_split();
    let mut frames = FrameReader::new(r, 1 << 20, Side::Client);
    while let Ok(Some(frame)) = frames.next().await {
        let header = peek::request(&frame).ok();
        let client_id = client_id_of(&frame);
        let (reply, answer) = match header {
            Some(p) => answer(&frame, p.api_key, p.api_version, p.correlation_id, port, &epoch),
            None => (Reply::Closed, None),
        };
        log.lock().unwrap_or_else(|e| e.into_inner()).push(Received {
            frame: frame.clone(),
            header: header.map(|p| (p.api_key, p.api_version, p.correlation_id)),
            client_id,
            reply,
        });
        let Some(answer) = answer else { return };
        if w.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// The client id of a request frame: a nullable int16-length string after API key, version and
/// correlation id, in every request header version that has one.
fn client_id_of(frame: &[u8]) -> Option<String> {
    let at = PREFIX + 8;
    let len = i16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    let bytes = frame.get(at + 2..at + 2 + len)?;
    String::from_utf8(bytes.to_vec()).ok()
}

fn answer(frame: &Bytes, key: i16, version: i16, correlation_id: i32, port: u16, epoch: &AtomicI64) -> (Reply, Option<Bytes>) {
    if key == ApiKey::ApiVersions as i16 {
        if decode_request::<ApiVersionsRequest>(frame, ApiKey::ApiVersions, version).is_err() {
            return (Reply::Closed, None);
        }
        let mut resp = ApiVersionsResponse::default();
        for &(k, min, max) in ANNOUNCED {
            let mut v = ApiVersion::default();
            v.api_key = k;
            v.min_version = min;
            v.max_version = max;
            resp.api_keys.push(v);
        }
        let e = epoch.fetch_add(1, Ordering::Relaxed);
        resp.finalized_features_epoch = e;
        let frame = encode_response(correlation_id, ApiKey::ApiVersions, version, &resp).expect("the stand-in encodes ApiVersions");
        return (Reply::ApiVersions { epoch: e }, Some(frame));
    }
    if key != ApiKey::Metadata as i16 || decode_request::<MetadataRequest>(frame, ApiKey::Metadata, version).is_err() {
        return (Reply::Closed, None);
    }
    let mut resp = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(BROKER_ID);
    b.host = StrBytes::from_static_str("127.0.0.1");
    b.port = i32::from(port);
    resp.brokers.push(b);
    let frame = encode_response(correlation_id, ApiKey::Metadata, version, &resp).expect("the stand-in encodes Metadata");
    (Reply::Metadata, Some(frame))
}

// ---- the proxy ------------------------------------------------------------------------------

/// A node port base whose broker-7 port was free a moment ago: the port is taken from the
/// kernel (bound to port 0, then released), so the proxy's node listener for broker 7 does not
/// depend on a guessed block of ports being free (a guessed block failed about 1 run in 20 when
/// another process held a port in it).
pub fn free_block() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port-0 listener to find a free port");
    let port = l.local_addr().expect("the free port").port();
    drop(l);
    port.checked_sub(BROKER_ID as u16).expect("an ephemeral port above 7")
}

/// A proxy served in-process in front of a [`StandIn`], with the mirror engine off (it would
/// create its state topic through the stand-in) and the admin endpoint on.
pub struct Proxy {
    /// The bootstrap listener.
    pub kafka: SocketAddr,
    /// The admin endpoint's listener.
    pub admin: SocketAddr,
    /// `listener.node_port_base`: broker 7's node listener is on this port + 7.
    pub node_port_base: u16,
    pub broker: StandIn,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), ProxyError>>>,
}

impl Proxy {
    /// A proxy in front of a new stand-in, admin endpoint on 127.0.0.1; `adjust` changes the
    /// configuration before it is validated.
    pub async fn start(adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(StandIn::start().await, "127.0.0.1:0", adjust).await
    }

    /// Like [`Proxy::start`], in front of `broker` and with the admin endpoint bound to `admin`.
    pub async fn start_with(broker: StandIn, admin: &str, adjust: impl FnOnce(&mut Config)) -> Self {
        let bootstrap = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy's bootstrap listener");
        let kafka = bootstrap.local_addr().expect("the bootstrap listener's address");
        let admin_listener = TcpListener::bind(admin)
            .await
            .unwrap_or_else(|e| panic!("bind the admin listener on {admin}: {e}"));
        let admin = admin_listener.local_addr().expect("the admin listener's address");
        let mut config = Config::default();
        config.upstream.bootstrap_servers = vec![broker.addr.to_string()];
        config.listener.listen = kafka.to_string();
        config.listener.node_port_base = Some(free_block());
        config.admin.listen = Some(admin.to_string());
        config.engine.enabled = false;
        adjust(&mut config);
        config.validate().expect("the test's configuration is valid");
        let node_port_base = config.listener.effective_node_port_base().expect("a node port base");
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let listeners = Listeners {
            bootstrap,
            admin: Some(admin_listener),
        };
        let server = tokio::spawn(serve(config, listeners, async move {
            let _ = stop_rx.await;
        }));
        Self {
            kafka,
            admin,
            node_port_base,
            broker,
            stop: Some(stop_tx),
            server: Some(server),
        }
    }

    /// Whether `serve` is still running.
    pub fn alive(&self) -> bool {
        self.server.as_ref().is_some_and(|s| !s.is_finished())
    }

    /// The admin endpoint as seen from loopback (an admin listener on a wildcard address is
    /// reached at 127.0.0.1 or ::1).
    pub fn admin_loopback(&self) -> SocketAddr {
        let ip: IpAddr = match self.admin.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => [127, 0, 0, 1].into(),
            IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        SocketAddr::new(ip, self.admin.port())
    }

    /// The value of the `/metrics` series `series` (name and labels as printed, e.g.
    /// `kmp_frame_errors_total{side="client"}`), asked from loopback; 0 when it is not printed.
    pub async fn metric(&self, series: &str) -> f64 {
        let answer = http(self.admin_loopback(), None, "GET", "/metrics", &[], None).await;
        assert_eq!(answer.status, 200, "GET /metrics from loopback: {}", answer.body);
        metric_in(&answer.body, series).unwrap_or(0.0)
    }

    /// Stops the proxy and checks that `serve` returns without an error.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let server = self.server.take().expect("the proxy was started");
        let result = tokio::time::timeout(PATIENCE, server)
            .await
            .expect("serve returns within 10 s of the shutdown signal");
        result.expect("serve did not panic").expect("serve returns Ok after shutdown");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The value of `series` in Prometheus / OpenMetrics text.
pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .and_then(|(_, v)| v.parse().ok())
}

// ---- Kafka clients ----------------------------------------------------------------------------

/// One healthy client's round trip on a new connection: ApiVersions, then Metadata, through the
/// proxy to the stand-in. `after` says when, for the failure message.
pub async fn round_trip(proxy: &Proxy, after: &str) {
    let mut conn = Connection::connect(&proxy.kafka.to_string(), PATIENCE, "kmp-healthy")
        .await
        .unwrap_or_else(|e| panic!("{after}: a new client cannot connect to the proxy: {e}"));
    let versions = tokio::time::timeout(PATIENCE, conn.api_versions())
        .await
        .unwrap_or_else(|_| panic!("{after}: ApiVersions through the proxy was not answered within 10 s"))
        .unwrap_or_else(|e| panic!("{after}: ApiVersions through the proxy failed: {e}"));
    assert!(
        versions.iter().any(|v| v.0 == ApiKey::Metadata as i16),
        "{after}: the ApiVersions answer lists Metadata: {versions:?}"
    );
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    tokio::time::timeout(PATIENCE, conn.send(&req, 12))
        .await
        .unwrap_or_else(|_| panic!("{after}: Metadata through the proxy was not answered within 10 s"))
        .unwrap_or_else(|e| panic!("{after}: Metadata through the proxy failed: {e}"));
}

/// A request frame encoded from a kafka-protocol message.
pub fn request<R: Request + Encodable>(req: &R, version: i16, correlation_id: i32, client_id: &str) -> Bytes {
    let key = ApiKey::try_from(R::KEY).expect("a request type kafka-protocol knows");
    let mut header = RequestHeader::default();
    header.request_api_key = R::KEY;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_string(client_id.to_owned()));
    encode_request(&header, key, req).expect("encode the request")
}

/// Unsigned varint (KIP-482).
pub fn uvarint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

/// A nullable int16-length string.
pub fn string(s: Option<&str>) -> Vec<u8> {
    match s {
        None => (-1i16).to_be_bytes().to_vec(),
        Some(s) => [&(s.len() as i16).to_be_bytes()[..], s.as_bytes()].concat(),
    }
}

/// A request frame built by hand, byte for byte: length prefix, request header v1 (v2, with an
/// empty tagged-field section, when `flexible`), then `body`.
pub fn raw_request(api_key: i16, version: i16, correlation_id: i32, client_id: Option<&str>, flexible: bool, body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&api_key.to_be_bytes());
    payload.extend_from_slice(&version.to_be_bytes());
    payload.extend_from_slice(&correlation_id.to_be_bytes());
    payload.extend_from_slice(&string(client_id));
    if flexible {
        payload.push(0);
    }
    payload.extend_from_slice(body);
    [&(payload.len() as i32).to_be_bytes()[..], &payload].concat()
}

/// The next response frame on `s` (length prefix included), within [`PATIENCE`].
pub async fn read_frame(s: &mut TcpStream, what: &str) -> Bytes {
    let read = async {
        let mut prefix = [0u8; PREFIX];
        s.read_exact(&mut prefix).await?;
        let len = i32::from_be_bytes(prefix);
        let len = usize::try_from(len).map_err(|_| std::io::Error::other(format!("negative response size {len}")))?;
        let mut frame = vec![0u8; PREFIX + len];
        frame[..PREFIX].copy_from_slice(&prefix);
        s.read_exact(&mut frame[PREFIX..]).await?;
        Ok::<_, std::io::Error>(Bytes::from(frame))
    };
    match tokio::time::timeout(PATIENCE, read).await {
        Ok(Ok(frame)) => frame,
        Ok(Err(e)) => panic!("{what}: reading the response failed: {e}"),
        Err(_) => panic!("{what}: no response within {PATIENCE:?}"),
    }
}

/// The correlation id of a response frame.
pub fn correlation_id(frame: &[u8]) -> i32 {
    peek::response_correlation_id(frame).expect("a response frame with a correlation id")
}

/// True once the peer closes `s` (end of stream or reset) within `within`; whatever it sends
/// meanwhile is read and dropped.
pub async fn closed_by_peer(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) => return true,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => {
                use std::io::ErrorKind::*;
                assert!(
                    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe),
                    "reading from a connection the proxy should close failed otherwise: {e}"
                );
                return true;
            }
        }
    }
}

/// Connects to `to`, from `from` when given (a source address on this machine).
pub async fn connect_from(to: SocketAddr, from: Option<IpAddr>) -> TcpStream {
    let connecting = async {
        match from {
            None => TcpStream::connect(to).await,
            Some(ip) => {
                let sock = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
                sock.bind(SocketAddr::new(ip, 0))?;
                sock.connect(to).await
            }
        }
    };
    match tokio::time::timeout(PATIENCE, connecting).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => panic!("connect to {to} from {from:?}: {e}"),
        Err(_) => panic!("connect to {to} from {from:?}: not within {PATIENCE:?}"),
    }
}

// ---- HTTP ----------------------------------------------------------------------------------------

/// An HTTP answer: status and body.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

/// One HTTP/1.1 request on a new connection to `to` (from source address `from` when given),
/// `Host` naming `to`, with `headers` and an optional body; the connection is closed after it.
pub async fn http(to: SocketAddr, from: Option<IpAddr>, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> HttpAnswer {
    let mut s = connect_from(to, from).await;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {to}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let exchange = async {
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(PATIENCE, exchange).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(e)) => panic!("{method} {path} to {to} from {from:?}: {e}"),
        Err(_) => panic!("{method} {path} to {to} from {from:?}: no answer within {PATIENCE:?}"),
    };
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path} to {to} from {from:?}: not an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    HttpAnswer { status, body }
}

/// `Authorization: Bearer <token>`, as a header pair.
pub fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

/// This machine's first non-loopback IPv4 address: the source address from which the proxy sees
/// a caller as remote. Fails (never skips) without one, so a test meant to check a remote caller
/// cannot pass without having checked one.
pub fn non_loopback_ipv4() -> IpAddr {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket to find the outgoing address");
    // No packet is sent: connecting only picks the outgoing address.
    let picked = probe.connect("10.255.255.255:1").ok().and_then(|_| probe.local_addr().ok()).map(|a| a.ip());
    match picked {
        Some(ip) if !ip.is_loopback() && !ip.is_unspecified() => ip,
        other => panic!(
            "this test needs a non-loopback IPv4 address on the machine (a UDP-connect probe found {other:?}): a connection from it is what the proxy must treat as remote"
        ),
    }
}

// ---- waiting, randomness, panics -----------------------------------------------------------------

/// Polls `check` until it gives a value or `within` has passed (then fails, naming `what`).
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A small seeded generator (SplitMix64): the same seed gives the same bytes on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }

    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[(self.next_u64() % from.len() as u64) as usize]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Panics seen, by the name of the thread they happened on.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static HOOK: OnceLock<()> = OnceLock::new();

/// Watches for panics on the current thread from now on. A `#[tokio::test]` runs the proxy's
/// tasks on the test's own thread (current-thread runtime), so a panic in a connection task —
/// which tokio catches, ending only that task — is recorded under the test's thread name.
pub struct PanicWatch {
    thread: String,
    before: usize,
}

impl PanicWatch {
    pub fn start() -> Self {
        HOOK.get_or_init(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = std::thread::current().name().unwrap_or("?").to_owned();
                PANICS.lock().unwrap_or_else(|e| e.into_inner()).push((thread, info.to_string()));
                previous(info);
            }));
        });
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        let before = Self::on(&thread).len();
        Self { thread, before }
    }

    fn on(thread: &str) -> Vec<String> {
        let all = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter(|(t, _)| t == thread).map(|(_, m)| m.clone()).collect()
    }

    /// Fails if anything on this thread panicked since [`PanicWatch::start`].
    pub fn assert_none(&self, when: &str) {
        let seen = Self::on(&self.thread);
        assert!(seen.len() == self.before, "{when}: a task of the proxy panicked: {:?}", &seen[self.before..]);
    }
}
