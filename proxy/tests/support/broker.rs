//! The scripted single-broker stand-in (node [`BROKER_ID`]): answers ApiVersions with
//! [`ANNOUNCED`] and a growing finalized-features epoch, and Metadata; records every frame it
//! receives and closes a connection that sends anything else.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::frame::{FrameReader, PREFIX};
use kmp_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use kmp_protocol::kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kmp_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::{Side, peek};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{PATIENCE, eventually};

/// The stand-in's node id.
pub const BROKER_ID: i32 = 7;

/// What the stand-in announces in ApiVersions: (API key, min, max). Metadata up to v99 (the
/// audited table stops at 13) and an API key no table knows (500).
pub const ANNOUNCED: &[(i16, i16, i16)] = &[(18, 0, 4), (3, 0, 99), (500, 0, 1)];

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
