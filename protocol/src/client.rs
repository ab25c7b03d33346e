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
use tokio::time::Instant;

use crate::codec::{decode_response, encode_request};
use crate::error::{ProtocolError, Side};
use crate::frame::{PREFIX, check_frame};
use crate::frame_pool::FramePool;
use crate::peek;
use crate::security::reauth::SaslRoundTrip;
use crate::security::{BrokerRead, BrokerWrite, ClientSecurity, Session};

/// Largest response the internal client accepts (bytes).
const MAX_RESPONSE: u32 = 512 * 1024 * 1024;

/// Bytes read (and reserved) per read call while little has arrived: a response's buffer grows
/// with the bytes that arrived (at most doubling them), never with the size the broker announced.
const READ_CHUNK: usize = 64 * 1024;
/// Response frames up to this size are read into one buffer reserved when their length arrives
/// (untouched reserved pages cost no memory until bytes land in them).
const EAGER_FRAME: usize = 64 * 1024 * 1024;

/// Frames at least this large (bytes), up to [`EAGER_FRAME`], are read into pooled buffers
/// (`frame_pool`).
const POOLED_FROM: usize = 1024 * 1024;
/// Most bytes of free pooled buffers one connection keeps.
const POOL_FREE_BYTES: usize = 64 * 1024 * 1024;

/// Response frames (prefix included) from a broker, each at most [`MAX_RESPONSE`] bytes. Bytes
/// read past a frame stay buffered for the next one. Large frames ([`POOLED_FROM`] up to
/// [`EAGER_FRAME`] bytes: the engine's Fetch answers) are each read into a buffer of their own
/// from the connection's `frame_pool`, which takes it back (at most [`POOL_FREE_BYTES`] of free
/// buffers) when the last part of the frame is dropped; a small frame empties the pool.
/// Each frame comes with its [`Arrival`]: when its first and last bytes were read.
pub(crate) struct ResponseReader<R> {
    inner: R,
    buf: BytesMut,
    pool: std::sync::Arc<FramePool>,
    /// A large frame being read into its own buffer, and its length.
    large: Option<(Vec<u8>, usize)>,
    /// When the frame being read began to arrive (none before its first byte).
    began: Option<Instant>,
    /// When the latest read returned bytes.
    last_read: Instant,
}

/// When a response frame arrived: its first byte (the broker's answer time plus one network
/// latency after the request went out) and its last byte (the rest is transfer time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub first_byte: Instant,
    pub last_byte: Instant,
}

impl<R: AsyncRead + Unpin> ResponseReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(READ_CHUNK),
            pool: FramePool::new(POOL_FREE_BYTES, EAGER_FRAME),
            large: None,
            began: None,
            last_read: Instant::now(),
        }
    }

    /// The next whole frame, or `None` on a clean end of stream between frames.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        Ok(self.next_timed().await?.map(|(frame, _)| frame))
    }

    /// The next whole frame with when it arrived, or `None` on a clean end of stream between
    /// frames.
    pub(crate) async fn next_timed(&mut self) -> Result<Option<(Bytes, Arrival)>, ProtocolError> {
        let frame = self.next_frame().await?;
        Ok(frame.map(|f| {
            let arrival = Arrival {
                first_byte: self.began.take().unwrap_or(self.last_read),
                last_byte: self.last_read,
            };
            // Bytes of the next frame that came with this one's last read arrived then.
            if !self.buf.is_empty() {
                self.began = Some(self.last_read);
            }
            (f, arrival)
        }))
    }

    /// Notes that a read returned `n` bytes now.
    fn note_read(&mut self, n: usize) {
        if n > 0 {
            self.last_read = Instant::now();
            self.began.get_or_insert(self.last_read);
        }
    }

    async fn next_frame(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        loop {
            if let Some((into, total)) = &mut self.large {
                let total = *total;
                if into.len() < total {
                    let n = self.read_into_large(total).await?;
                    if n == 0 {
                        let have = self.large.take().map_or(0, |(b, _)| b.len());
                        return Err(ProtocolError::TruncatedFrame {
                            have,
                            want: total,
                            side: Side::Broker,
                        });
                    }
                    continue;
                }
                let Some((whole, _)) = self.large.take() else { continue };
                return Ok(Some(self.pool.frame(whole)));
            }
            let want = match check_frame(&self.buf, MAX_RESPONSE, Side::Broker)? {
                Some(total) if self.buf.len() >= total => {
                    if total < POOLED_FROM {
                        // The connection has gone quiet (an idle partition's answer): an idle
                        // connection keeps no free buffers.
                        self.pool.release_free();
                    }
                    return Ok(Some(self.buf.split_to(total).freeze()));
                }
                // A large frame goes into a pooled buffer of its own, starting with what arrived
                // of it (never more: reads stop at the frame's end once its length is known).
                Some(total) if (POOLED_FROM..=EAGER_FRAME).contains(&total) => {
                    let mut into = self.pool.take(total);
                    into.extend_from_slice(&self.buf);
                    self.buf.clear();
                    self.large = Some((into, total));
                    continue;
                }
                // A frame of a size the engine asks for gets its whole buffer at once: growing
                // by doubling would copy what arrived again at every step. Larger announced
                // sizes grow only as bytes actually arrive.
                Some(total) if total <= EAGER_FRAME => total - self.buf.len(),
                Some(total) => (total - self.buf.len()).min(self.buf.len().max(READ_CHUNK)),
                None => READ_CHUNK,
            };
            self.buf.reserve(want);
            let n = (&mut self.inner)
                .take(want as u64)
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
            self.note_read(n);
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

    /// Reads more of the large frame of `total` bytes (never past its end); bytes read.
    async fn read_into_large(&mut self, total: usize) -> Result<usize, ProtocolError> {
        let Some((into, _)) = &mut self.large else { return Ok(0) };
        let left = total.saturating_sub(into.len());
        let n = (&mut self.inner)
            .take(left as u64)
            .read_buf(into)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        self.note_read(n);
        Ok(n)
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

/// One connection to one broker. With a SASL login whose broker session expires (KIP-368), the
/// login is renewed on the connection before a request once it is due and no request of this
/// connection awaits its response (`security::reauth`).
pub struct Connection {
    reader: ResponseReader<BrokerRead>,
    writer: BrokerWrite,
    next_correlation_id: i32,
    client_id: StrBytes,
    addr: String,
    session: Option<Session>,
    /// Requests sent whose responses were not read yet.
    outstanding: usize,
}

/// The SASL requests of a renewal on a connection read and written one at a time.
struct Inline<'a> {
    reader: &'a mut ResponseReader<BrokerRead>,
    writer: &'a mut BrokerWrite,
    next_correlation_id: &'a mut i32,
    client_id: &'a StrBytes,
}

impl SaslRoundTrip for Inline<'_> {
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        let id = *self.next_correlation_id;
        *self.next_correlation_id = id.wrapping_add(1);
        let (frame, sent) = request_frame(req, version, id, self.client_id)?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        let resp = self.reader.next().await?.ok_or_else(|| ProtocolError::Io {
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "broker closed the connection while re-authenticating"),
            side: Side::Broker,
        })?;
        decode_sent::<R>(&resp, sent)
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `timeout`, plaintext and unauthenticated.
    pub async fn connect(addr: &str, timeout: Duration, client_id: &str) -> Result<Self, ProtocolError> {
        Self::connect_with(addr, timeout, client_id, &ClientSecurity::plaintext()).await
    }

    /// Connects to `addr` within `timeout` the way `security` says (TLS, SASL).
    pub async fn connect_with(addr: &str, timeout: Duration, client_id: &str, security: &ClientSecurity) -> Result<Self, ProtocolError> {
        let (stream, session) = security.connect_session(addr, timeout, client_id).await?;
        let (r, w) = stream.into_split();
        Ok(Self {
            reader: ResponseReader::new(r),
            writer: w,
            next_correlation_id: 1,
            client_id: StrBytes::from_string(client_id.to_owned()),
            addr: addr.to_owned(),
            session,
            outstanding: 0,
        })
    }

    /// Hands the connection to [`crate::shared_client::SharedConnection`]: its response reader,
    /// its writer, the next correlation id, the client id, the address and the SASL session.
    pub(crate) fn into_parts(self) -> (ResponseReader<BrokerRead>, BrokerWrite, i32, StrBytes, String, Option<Session>) {
        (self.reader, self.writer, self.next_correlation_id, self.client_id, self.addr, self.session)
    }

    /// Times this connection's SASL login was renewed (KIP-368).
    pub fn renewals(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::renewals)
    }

    /// Renews the SASL login when it is due and nothing is in flight.
    async fn renew_if_due(&mut self) -> Result<(), ProtocolError> {
        if self.outstanding > 0 || !self.session.as_ref().is_some_and(|s| s.due(Instant::now())) {
            return Ok(());
        }
        let Some(mut session) = self.session.take() else { return Ok(()) };
        let mut inline = Inline {
            reader: &mut self.reader,
            writer: &mut self.writer,
            next_correlation_id: &mut self.next_correlation_id,
            client_id: &self.client_id,
        };
        let renewed = session.renew(&mut inline).await;
        self.session = Some(session);
        renewed
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
        self.renew_if_due().await?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let (frame, sent) = request_frame(req, version, correlation_id, &self.client_id)?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        self.outstanding += 1;
        Ok(sent)
    }

    /// Reads the response to the oldest request sent with [`Connection::send_request`].
    pub async fn receive<R: Request>(&mut self, sent: Sent) -> Result<R::Response, ProtocolError> {
        let resp = self.read_frame().await?;
        self.outstanding = self.outstanding.saturating_sub(1);
        decode_sent::<R>(&resp, sent)
    }

    /// Sends an already-encoded request frame and returns the raw response frame.
    pub async fn round_trip_raw(&mut self, frame: &[u8]) -> Result<Bytes, ProtocolError> {
        self.renew_if_due().await?;
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

    #[tokio::test(start_paused = true)]
    async fn a_frames_arrival_spans_the_reads_that_brought_its_first_and_last_bytes() {
        let (mut broker, ours) = tokio::io::duplex(1 << 16);
        let mut r = ResponseReader::new(ours);
        let frame = |body: &[u8]| [&(body.len() as u32).to_be_bytes()[..], body].concat();
        let (first, second) = (frame(b"0123456789"), frame(b"abc"));
        let writer = tokio::spawn(async move {
            broker.write_all(&first[..8]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
            // The rest of the first frame and the start of the second in one read.
            broker.write_all(&[&first[8..], &second[..5]].concat()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            broker.write_all(&second[5..]).await.unwrap();
            broker
        });
        let (one, a) = r.next_timed().await.unwrap().unwrap();
        assert_eq!(&one[PREFIX..], b"0123456789");
        assert_eq!(a.last_byte - a.first_byte, Duration::from_millis(30), "first frame: {a:?}");
        let (two, b) = r.next_timed().await.unwrap().unwrap();
        assert_eq!(&two[PREFIX..], b"abc");
        assert_eq!(b.first_byte, a.last_byte, "the second frame began with the first one's last read");
        assert_eq!(b.last_byte - b.first_byte, Duration::from_millis(20), "second frame: {b:?}");
        drop(writer.await.unwrap());
        assert!(r.next_timed().await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_frame_is_timed_from_its_prefix_to_its_last_byte() {
        let (mut broker, ours) = tokio::io::duplex(1 << 16);
        let mut r = ResponseReader::new(ours);
        let body = vec![7u8; POOLED_FROM + 10];
        let whole = [&(body.len() as u32).to_be_bytes()[..], &body[..]].concat();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            broker.write_all(&whole[..100]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(40)).await;
            broker.write_all(&whole[100..]).await.unwrap();
            broker
        });
        let asked = Instant::now();
        let (got, a) = r.next_timed().await.unwrap().unwrap();
        assert_eq!(got.len(), PREFIX + body.len());
        assert_eq!(a.first_byte - asked, Duration::from_millis(5));
        assert_eq!(a.last_byte - a.first_byte, Duration::from_millis(40), "{a:?}");
        drop(writer.await.unwrap());
    }

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
        let size = 2 * POOLED_FROM;
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
                assert_eq!(&frame[..PREFIX], &((size as i32).to_be_bytes()), "frame {fill}'s length prefix");
                assert!(frame[PREFIX..].iter().all(|b| *b == fill), "frame {fill} intact");
            }
            assert!(r.next().await.unwrap().is_none());
        });
    }

    #[test]
    fn a_small_frame_empties_the_connections_pool() {
        let mut bytes = crate::frame::with_prefix(&vec![1u8; 2 * POOLED_FROM]).to_vec();
        bytes.extend_from_slice(&crate::frame::with_prefix(b"idle"));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let mut r = ResponseReader::new(&bytes[..]);
            drop(r.next().await.unwrap().unwrap());
            assert!(r.pool.free_bytes() > 0, "the large frame's buffer is back in the pool");
            assert_eq!(&r.next().await.unwrap().unwrap()[PREFIX..], b"idle");
            assert_eq!(r.pool.free_bytes(), 0, "a small frame empties the pool");
        });
    }

    #[test]
    fn frames_below_the_pooled_size_and_a_large_frame_cut_off_are_read_as_before() {
        // One byte under the pooled size (prefix included), then a large frame the broker cuts off.
        let small = vec![9u8; POOLED_FROM - PREFIX - 1];
        let mut bytes = crate::frame::with_prefix(&small).to_vec();
        bytes.extend_from_slice(&crate::frame::with_prefix(&vec![1u8; 3 * POOLED_FROM])[..2 * POOLED_FROM]);
        let (got, _) = read_all(bytes);
        assert_eq!(got[0].as_ref().unwrap().as_ref().unwrap().len(), POOLED_FROM - 1);
        assert!(
            matches!(&got[1], Err(e) if e.contains("middle of a frame")),
            "{:?}",
            got[1].as_ref().map(|f| f.as_ref().map(Bytes::len))
        );
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
