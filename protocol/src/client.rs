//! A small internal Kafka client: one TCP connection, requests one at a time or pipelined, typed with
//! kafka-protocol. The proxy uses it for its own Metadata refreshes and readiness probe; the
//! mirror engine builds its fetcher and producer on it.
//!
//! Connection pooling, retries and leader tracking belong to the callers.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::codec::{decode_response, encode_request};
use crate::error::{ProtocolError, Side};
use crate::frame::{PREFIX, check_frame};
use crate::peek;
use crate::security::{BrokerRead, BrokerWrite, ClientSecurity};

/// Largest response the internal client accepts (bytes).
const MAX_RESPONSE: u32 = 512 * 1024 * 1024;

/// Bytes read (and reserved) per read call while little has arrived: a response's buffer grows
/// with the bytes that arrived (at most doubling them), never with the size the broker announced.
const READ_CHUNK: usize = 64 * 1024;
/// Response frames up to this size are read into one buffer reserved when their length arrives
/// (untouched reserved pages cost no memory until bytes land in them).
const EAGER_FRAME: usize = 64 * 1024 * 1024;

/// Frames at least this large (bytes) have their buffers kept for reuse ([`ResponseReader`]).
const REUSE_FROM: usize = 1024 * 1024;
/// How many of the last large frames a reader keeps a handle on (held by the engine or free).
const REUSE_TRACKED: usize = 32;
/// How many bytes of those buffers may be free (no other holder) at once, per connection;
/// older free ones are released. All free ones are released when a smaller frame arrives.
#[cfg(not(test))]
const REUSE_FREE_BYTES: usize = 64 * 1024 * 1024;
/// Smaller in the unit tests, so that they cross it with a few megabytes.
#[cfg(test)]
const REUSE_FREE_BYTES: usize = 8 * 1024 * 1024;

/// Response frames (prefix included) from a broker, each at most [`MAX_RESPONSE`] bytes. Bytes
/// read past a frame stay buffered for the next one.
///
/// Large frames (from [`REUSE_FROM`] up to [`EAGER_FRAME`] bytes: the engine's Fetch answers)
/// are each read into a buffer of their own, and that buffer is used again once every part of
/// the frame handed out has been dropped. A fresh buffer costs the kernel a page fault and the
/// zeroing of every page as the socket's bytes land in it — measured at a quarter to 40 % of the
/// engine's CPU in a bulk copy — a reused one neither. The reader keeps a handle on the last
/// [`REUSE_TRACKED`] large frames; those the engine still holds cost nothing extra. Buffers
/// the engine has let go of stay allocated until the next frame arrives, which keeps at most
/// [`REUSE_FREE_BYTES`] of them (per connection) for the large frames after it, and none if
/// it is small (an idle partition's answer): so the memory held never exceeds what the
/// engine's buffer budget let it hold at once, and between bulk transfers it is released.
/// A kept frame's buffer holds that frame only (the bytes read past it move to a buffer of
/// their own), so a handle never keeps another frame's memory alive.
pub(crate) struct ResponseReader<R> {
    inner: R,
    buf: BytesMut,
    /// `buf` is a large frame's own buffer (`room_for`), to be kept when the frame is whole.
    own: bool,
    /// The last large frames handed out with their buffers' capacities, oldest first.
    kept: std::collections::VecDeque<(Bytes, usize)>,
}

impl<R: AsyncRead + Unpin> ResponseReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(READ_CHUNK),
            own: false,
            kept: std::collections::VecDeque::new(),
        }
    }

    /// Gives a large frame of `total` bytes a buffer of its own: a kept one nobody else holds
    /// if one is large enough, else a new one of `total` rounded up to a power of two (frames of
    /// varying sizes then fit each other's buffers; pages never written cost nothing). The
    /// bytes already buffered (the frame's start) move to its start.
    fn room_for(&mut self, total: usize) {
        let mut next = self
            .kept
            .iter()
            .position(|(k, cap)| *cap >= total && k.is_unique())
            .and_then(|i| self.kept.remove(i))
            .and_then(|(k, _)| k.try_into_mut().ok())
            .filter(|m| m.capacity() >= total)
            .unwrap_or_else(|| BytesMut::with_capacity(total.next_power_of_two().min(EAGER_FRAME)));
        next.clear();
        next.extend_from_slice(&self.buf);
        self.buf = next;
        self.own = true;
    }

    /// The whole frame of `total` bytes at the start of the buffer, split off. A large frame
    /// in its own buffer is kept for reuse (free kept buffers beyond [`REUSE_FREE_BYTES`] are
    /// released, oldest first), and what was read past it moves to a new buffer; a small frame
    /// releases every free kept buffer.
    fn take_frame(&mut self, total: usize) -> Bytes {
        if !std::mem::take(&mut self.own) {
            if total < REUSE_FROM {
                self.kept.retain(|(k, _)| !k.is_unique());
            }
            return self.buf.split_to(total).freeze();
        }
        let capacity = self.buf.capacity();
        let rest = self.buf.split_off(total);
        let frame = std::mem::replace(&mut self.buf, BytesMut::with_capacity(READ_CHUNK.max(rest.len()))).freeze();
        self.buf.extend_from_slice(&rest);
        drop(rest);
        if self.kept.len() == REUSE_TRACKED {
            self.kept.pop_front();
        }
        self.kept.push_back((frame.clone(), capacity));
        let mut free: usize = self.kept.iter().filter(|(k, _)| k.is_unique()).map(|(_, cap)| cap).sum();
        self.kept.retain(|(k, cap)| {
            if free > REUSE_FREE_BYTES && k.is_unique() {
                free -= cap;
                return false;
            }
            true
        });
        frame
    }

    /// The next whole frame, or `None` on a clean end of stream between frames.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        loop {
            let want = match check_frame(&self.buf, MAX_RESPONSE, Side::Broker)? {
                Some(total) if self.buf.len() >= total => return Ok(Some(self.take_frame(total))),
                // A frame of a size the engine asks for (Fetch answers of many megabytes) gets
                // its whole buffer at once (a reused one if it can): growing by doubling would copy
                // what arrived again at every step. Larger announced sizes grow only as bytes
                // actually arrive.
                Some(total) if total <= EAGER_FRAME => {
                    if total >= REUSE_FROM && !self.own {
                        self.room_for(total);
                    }
                    total - self.buf.len()
                }
                Some(total) => (total - self.buf.len()).min(self.buf.len().max(READ_CHUNK)),
                None => READ_CHUNK,
            };
            self.buf.reserve(want);
            let n = (&mut self.inner)
                .take(want as u64)
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(ProtocolError::TruncatedFrame {
                    have: self.buf.len(),
                    want: check_frame(&self.buf, MAX_RESPONSE, Side::Broker)?.unwrap_or(PREFIX),
                    side: Side::Broker,
                });
            }
        }
    }
}

/// A request written on a connection whose response has not been read yet.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub(crate) correlation_id: i32,
    pub(crate) key: ApiKey,
    pub(crate) version: i16,
}

/// The frame of `req` (header with `correlation_id` and `client_id`) and what reading its response
/// needs.
pub(crate) fn request_frame<R: Request>(req: &R, version: i16, correlation_id: i32, client_id: &StrBytes) -> Result<(Bytes, Sent), ProtocolError> {
    let key = api_key::<R>()?;
    let mut header = RequestHeader::default();
    header.request_api_key = R::KEY;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(client_id.clone());
    let frame = encode_request(&header, key, req)?;
    Ok((frame, Sent { correlation_id, key, version }))
}

/// The API key of request type `R`.
pub(crate) fn api_key<R: Request>() -> Result<ApiKey, ProtocolError> {
    ApiKey::try_from(R::KEY).map_err(|_| ProtocolError::Malformed {
        what: "request",
        detail: format!("unknown api key {}", R::KEY),
        side: Side::Internal,
    })
}

/// Checks that `resp` answers `sent` (correlation id) and decodes it.
pub(crate) fn decode_sent<R: Request>(resp: &Bytes, sent: Sent) -> Result<R::Response, ProtocolError> {
    let got = peek::response_correlation_id(resp)?;
    if got != sent.correlation_id {
        return Err(ProtocolError::CorrelationMismatch {
            expected: sent.correlation_id,
            got,
        });
    }
    Ok(decode_response::<R::Response>(resp, sent.key, sent.version)?.1)
}

/// One connection to one broker.
pub struct Connection {
    reader: ResponseReader<BrokerRead>,
    writer: BrokerWrite,
    next_correlation_id: i32,
    client_id: StrBytes,
    addr: String,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `timeout`, plaintext and unauthenticated.
    pub async fn connect(addr: &str, timeout: Duration, client_id: &str) -> Result<Self, ProtocolError> {
        Self::connect_with(addr, timeout, client_id, &ClientSecurity::plaintext()).await
    }

    /// Connects to `addr` within `timeout` the way `security` says (TLS, SASL).
    pub async fn connect_with(addr: &str, timeout: Duration, client_id: &str, security: &ClientSecurity) -> Result<Self, ProtocolError> {
        let stream = security.connect(addr, timeout, client_id).await?;
        let (r, w) = stream.into_split();
        Ok(Self {
            reader: ResponseReader::new(r),
            writer: w,
            next_correlation_id: 1,
            client_id: StrBytes::from_string(client_id.to_owned()),
            addr: addr.to_owned(),
        })
    }

    /// Hands the connection to [`crate::shared_client::SharedConnection`]: its response reader,
    /// its writer, the next correlation id and the client id.
    pub(crate) fn into_parts(self) -> (ResponseReader<BrokerRead>, BrokerWrite, i32, StrBytes, String) {
        (self.reader, self.writer, self.next_correlation_id, self.client_id, self.addr)
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
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let (frame, sent) = request_frame(req, version, correlation_id, &self.client_id)?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        Ok(sent)
    }

    /// Reads the response to the oldest request sent with [`Connection::send_request`].
    pub async fn receive<R: Request>(&mut self, sent: Sent) -> Result<R::Response, ProtocolError> {
        let resp = self.read_frame().await?;
        decode_sent::<R>(&resp, sent)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: Vec<u8>) -> (Vec<Result<Option<Bytes>, String>>, usize) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let mut r = ResponseReader::new(&bytes[..]);
            let mut out = Vec::new();
            loop {
                let got = r.next().await.map_err(|e| e.to_string());
                let end = !matches!(got, Ok(Some(_)));
                out.push(got);
                if end {
                    return (out, r.buf.capacity());
                }
            }
        })
    }

    #[test]
    fn a_huge_announced_response_reserves_only_what_arrived() {
        // 500 MiB announced (under MAX_RESPONSE), 100 bytes sent, then the broker goes away.
        let mut bytes = (500i32 * 1024 * 1024).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[7; 100]);
        let (got, capacity) = read_all(bytes);
        assert!(matches!(&got[0], Err(e) if e.contains("middle of a frame")), "{got:?}");
        assert!(capacity <= 2 * READ_CHUNK, "buffer grew to {capacity} bytes for 104 received");
    }

    #[test]
    fn a_large_frames_buffer_is_reused_once_dropped_and_never_while_any_part_is_held() {
        let size = 2 * REUSE_FROM;
        let mut bytes = Vec::new();
        for fill in 1..=5u8 {
            bytes.extend_from_slice(&crate::frame::with_prefix(&vec![fill; size]));
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let mut r = ResponseReader::new(&bytes[..]);
            let first = r.next().await.unwrap().unwrap();
            let second = r.next().await.unwrap().unwrap();
            let part_of_second = second.slice(PREFIX + 10..PREFIX + 20);
            drop(second);
            let at = first.as_ptr();
            drop(first);
            let third = r.next().await.unwrap().unwrap();
            assert_eq!(third.as_ptr(), at, "the third frame is read into the dropped first one's buffer");
            let fourth = r.next().await.unwrap().unwrap();
            let fifth = r.next().await.unwrap().unwrap();
            assert_eq!(&part_of_second[..], &[2u8; 10], "a held slice of the second frame is not overwritten");
            for (frame, fill) in [(&third, 3u8), (&fourth, 4), (&fifth, 5)] {
                assert_eq!(frame.len(), PREFIX + size);
                assert!(frame[PREFIX..].iter().all(|b| *b == fill), "frame {fill} intact");
            }
            assert!(r.next().await.unwrap().is_none());
        });
    }

    #[test]
    fn free_large_buffers_stay_allocated_up_to_the_bound_and_a_small_frame_releases_them() {
        let size = 2 * REUSE_FROM; // each in a 4 MiB buffer (rounded up to a power of two)
        let mut bytes = Vec::new();
        for i in 0..10u8 {
            bytes.extend_from_slice(&crate::frame::with_prefix(&vec![i; size]));
        }
        bytes.extend_from_slice(&crate::frame::with_prefix(b"small"));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let mut r = ResponseReader::new(&bytes[..]);
            let free = |r: &ResponseReader<&[u8]>| -> usize { r.kept.iter().filter(|(k, _)| k.is_unique()).map(|(_, cap)| cap).sum() };
            let mut held = Vec::new();
            for _ in 0..8 {
                held.push(r.next().await.unwrap().unwrap());
            }
            let part = held[7].slice(PREFIX..PREFIX + 4);
            held.clear(); // 7 of 8 frames released at once: 28 MiB of buffers free
            assert_eq!(free(&r), 7 * 4 * REUSE_FROM, "not pruned before the next frame");
            let ninth = r.next().await.unwrap().unwrap();
            assert!(free(&r) <= REUSE_FREE_BYTES, "after the ninth frame {} bytes of free buffers kept", free(&r));
            assert!(free(&r) > 0, "some kept for the next frame");
            let tenth = r.next().await.unwrap().unwrap();
            for (frame, fill) in [(&ninth, 8u8), (&tenth, 9)] {
                assert!(frame[PREFIX..].iter().all(|b| *b == fill), "frame {fill} intact");
            }
            assert_eq!(&part[..], &[7u8; 4], "a held part of the eighth frame intact");
            assert_eq!(&r.next().await.unwrap().unwrap()[PREFIX..], b"small");
            assert_eq!(free(&r), 0, "a small frame releases the free buffers");
            assert_eq!(r.kept.len(), 3, "the frames still held stay tracked (eighth, ninth, tenth)");
        });
    }

    #[test]
    fn frames_larger_than_a_chunk_and_back_to_back_frames_are_whole() {
        let big = vec![1u8; 3 * READ_CHUNK + 17];
        let mut bytes = crate::frame::with_prefix(&big).to_vec();
        bytes.extend_from_slice(&crate::frame::with_prefix(b"next"));
        let (got, _) = read_all(bytes);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap().as_ref().unwrap().len(), PREFIX + big.len());
        assert_eq!(got[1].as_ref().unwrap().as_ref().unwrap().as_ref(), b"\0\0\0\x04next");
        assert_eq!(got[2], Ok(None));
    }

    #[test]
    fn over_the_limit_and_negative_sizes_are_refused_before_reading_the_body() {
        let (got, _) = read_all((MAX_RESPONSE + 1).to_be_bytes().to_vec());
        assert!(matches!(&got[0], Err(e) if e.contains("exceeds")), "{got:?}");
        let (got, _) = read_all(vec![0xff, 0xff, 0xff, 0xfe, 1, 2]);
        assert!(matches!(&got[0], Err(e) if e.contains("negative")), "{got:?}");
    }
}
