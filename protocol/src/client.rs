//! A small internal Kafka client: one TCP connection, requests one at a time or pipelined, typed with
//! kafka-protocol. The proxy uses it for its own Metadata refreshes and readiness probe; the
//! mirror engine builds its fetcher and producer on it.
//!
//! Connection pooling, retries and leader tracking belong to the callers.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::codec::{decode_response, encode_request};
use crate::error::{ProtocolError, Side};
use crate::frame::FrameReader;
use crate::peek;

/// Largest response the internal client accepts (bytes).
const MAX_RESPONSE: u32 = 512 * 1024 * 1024;

/// A request written on a connection whose response has not been read yet.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    correlation_id: i32,
    key: ApiKey,
    version: i16,
}

/// One connection to one broker.
pub struct Connection {
    reader: FrameReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_correlation_id: i32,
    client_id: StrBytes,
    addr: String,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `timeout`.
    pub async fn connect(addr: &str, timeout: Duration, client_id: &str) -> Result<Self, ProtocolError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ProtocolError::Connect {
                addr: addr.to_owned(),
                detail: format!("timed out after {timeout:?}"),
            })?
            .map_err(|e| ProtocolError::Connect {
                addr: addr.to_owned(),
                detail: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        Ok(Self {
            reader: FrameReader::new(r, MAX_RESPONSE, Side::Broker),
            writer: w,
            next_correlation_id: 1,
            client_id: StrBytes::from_string(client_id.to_owned()),
            addr: addr.to_owned(),
        })
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` at `version` and waits for its response.
    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        let sent = self.send_request(req, version).await?;
        self.receive::<R>(sent).await
    }

    /// Writes `req` without waiting for its response (pipelining). Responses arrive in request
    /// order; each must be collected with [`Connection::receive`] in that order.
    pub async fn send_request<R: Request>(&mut self, req: &R, version: i16) -> Result<Sent, ProtocolError> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| ProtocolError::Malformed {
            what: "request",
            detail: format!("unknown api key {}", R::KEY),
            side: Side::Internal,
        })?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(self.client_id.clone());
        let frame = encode_request(&header, key, req)?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        Ok(Sent { correlation_id, key, version })
    }

    /// Reads the response to the oldest request sent with [`Connection::send_request`].
    pub async fn receive<R: Request>(&mut self, sent: Sent) -> Result<R::Response, ProtocolError> {
        let resp = self.read_frame().await?;
        let got = peek::response_correlation_id(&resp)?;
        if got != sent.correlation_id {
            return Err(ProtocolError::CorrelationMismatch {
                expected: sent.correlation_id,
                got,
            });
        }
        Ok(decode_response::<R::Response>(&resp, sent.key, sent.version)?.1)
    }

    /// Sends an already-encoded request frame and returns the raw response frame.
    pub async fn round_trip_raw(&mut self, frame: &[u8]) -> Result<Bytes, ProtocolError> {
        self.writer
            .write_all(frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        self.read_frame().await
    }

    async fn read_frame(&mut self) -> Result<Bytes, ProtocolError> {
        self.reader.next().await?.ok_or_else(|| ProtocolError::Io {
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "broker closed the connection"),
            side: Side::Broker,
        })
    }

    /// The `(api_key, min, max)` list the broker announces.
    pub async fn api_versions(&mut self) -> Result<Vec<(i16, i16, i16)>, ProtocolError> {
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str("kafka-mirror-proxy");
        req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let resp = self.send(&req, 3).await?;
        if resp.error_code != 0 {
            return Err(ProtocolError::BrokerError {
                what: "ApiVersions".into(),
                code: resp.error_code,
            });
        }
        Ok(resp.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect())
    }
}
