//! Kafka frames by hand: encoded and raw requests, reading a frame and its correlation id, telling
//! whether the peer closed, connecting from a chosen source address, and one healthy round trip.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::client::Connection;
use kmp_protocol::codec::encode_request;
use kmp_protocol::frame::PREFIX;
use kmp_protocol::kafka_protocol::messages::{ApiKey, MetadataRequest, RequestHeader};
use kmp_protocol::kafka_protocol::protocol::{Encodable, Request, StrBytes};
use kmp_protocol::peek;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use super::{PATIENCE, Proxy};

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
