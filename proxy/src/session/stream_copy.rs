//! Reading broker responses and moving them to the client: this module owns the upstream read
//! half of a connection. A response no filter may change is *streamed*: its length prefix and
//! correlation id are checked, then its bytes go to the client through one reusable buffer as
//! they arrive, so it is never materialised whole (no per-frame allocation; one write per
//! buffer-full or frame end). A response the filters must see is read *whole* for them. Both
//! paths check the announced size against the limit and the correlation id before any byte of the
//! frame reaches the client. Between two plain TCP sockets, a long run of bytes nothing looks at
//! (a Fetch response's record sets, the body of a plain streamed response) moves socket to socket
//! with `splice` (`crate::session::splice`) instead of through the buffer.
//!
//! Everything from the broker is hostile: every read is bounded by the frame's announced size and
//! the buffer, nothing is indexed without a bound. A broker that closes in the middle of a streamed
//! frame leaves the client with part of that frame and nothing after it: the error ends the
//! connection (the client sees the connection close, as if the broker had died mid-response).
//!
//! A streamed Fetch response of v16+ may carry KIP-951 `node_endpoints` (the broker's own
//! addresses, a top-level tagged field after all the records). Rewriting them to the proxy's would
//! change the frame's length after its prefix was sent, so the streamed copy *neutralises* them in
//! place instead: the tag becomes an unknown one and its bytes zeros, same length. Clients skip
//! unknown tags and fall back to a metadata refresh (through the proxy) for the new leader, as with
//! a broker before KIP-951. Which responses may be streamed is decided by `session` and `filters`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kmp_protocol::frame::{BudgetGuard, ByteBudget, PREFIX, check_frame};
use kmp_protocol::{ProtocolError, Side, peek};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::session::splice::{MIN_SPLICE_BYTES, Pipe, SpliceError, SpliceSocket};
use crate::session::write_stall::{within_stall, write_all};

/// Largest size of the reusable buffer: the most read from the broker (and written to the
/// client) at once.
const CHUNK: usize = 1024 * 1024;

/// Size the buffer starts at. It doubles (up to [`CHUNK`]) only while a streamed response fills
/// it, so a connection that never streams a large response never holds (or zeroes) a megabyte:
/// a thousand clients that connect for ApiVersions and Metadata cost a thousand small buffers.
const INITIAL_BUF: usize = 16 * 1024;

/// Whole frames up to this size get their buffer at once (the broker's announced size is trusted
/// that far); larger ones grow by doubling what arrived.
const EAGER_WHOLE_BYTES: usize = 8 * 1024 * 1024;

/// The tag `node_endpoints` (tag 0) becomes in a streamed Fetch response: unknown to every
/// version of the protocol, encoded in the same single byte.
const NEUTRAL_TAG: u8 = 0x7f;

/// What a streamed copy must look at on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Nothing: the bytes pass as they are.
    Plain,
    /// A Fetch response of this version (16+): neutralise its top-level `node_endpoints`.
    FetchEndpoints(i16),
}

impl Scan {
    /// The scan a streamed response of this API key and version needs.
    pub(crate) fn of(api_key: i16, api_version: i16) -> Self {
        if api_key == kmp_protocol::kafka_protocol::messages::ApiKey::Fetch as i16 && api_version >= 16 {
            Self::FetchEndpoints(api_version)
        } else {
            Self::Plain
        }
    }
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    /// The broker's bytes were wrong (size, correlation id, structure) or its connection failed.
    #[error(transparent)]
    Broker(#[from] ProtocolError),
    /// Writing to the client failed.
    #[error("writing to the client: {0}")]
    Client(#[source] std::io::Error),
}

/// The upstream read half with its reusable buffer. Bytes read past the current frame (the
/// next pipelined responses) stay buffered for the next call.
pub(crate) struct Upstream<R> {
    inner: R,
    buf: Vec<u8>,
    /// Size `buf` may grow to.
    chunk: usize,
    /// Unconsumed bytes are `buf[head..tail]`.
    head: usize,
    tail: usize,
    max: u32,
    /// The pipe for `splice` (made on the first range worth splicing between two plain sockets).
    pipe: Option<Pipe>,
    /// A pipe could not be made (out of file descriptors): copy from now on.
    no_pipe: bool,
    /// Bytes moved by `splice` since [`Upstream::take_spliced`] was last called.
    spliced: u64,
    /// The response being streamed goes socket to socket (both sides plain TCP and a pipe to be
    /// had; decided once per response in [`Upstream::stream`]): the buffer grows to
    /// [`MIN_SPLICE_BYTES`] only, so a read takes little more than the fields that must be looked
    /// at and most of every record set stays in the kernel for `splice`.
    splicing: bool,
    /// How long a write to the client may make no progress (`limits.client_write_timeout_ms`);
    /// `None`: unbounded.
    write_stall: Option<Duration>,
}

impl<R: AsyncRead + Unpin + SpliceSocket> Upstream<R> {
    /// `max` bounds a response's announced size (prefix excluded).
    pub(crate) fn new(inner: R, max: u32) -> Self {
        Self::with_chunk(inner, max, CHUNK)
    }

    fn with_chunk(inner: R, max: u32, chunk: usize) -> Self {
        let chunk = chunk.max(2 * PREFIX);
        Self {
            inner,
            buf: vec![0; INITIAL_BUF.min(chunk)],
            chunk,
            head: 0,
            tail: 0,
            max,
            pipe: None,
            no_pipe: false,
            spliced: 0,
            splicing: false,
            write_stall: None,
        }
    }

    /// Bounds every write to the client: a write (or, when splicing, a wait for the client to take
    /// more) that makes no progress for `stall` fails the copy.
    pub(crate) fn with_write_stall(mut self, stall: Duration) -> Self {
        self.write_stall = Some(stall);
        self
    }

    /// Bytes moved socket to socket by `splice` since the last call.
    pub(crate) fn take_spliced(&mut self) -> u64 {
        std::mem::take(&mut self.spliced)
    }

    /// Reads one more time into the free end of the buffer (moving unconsumed bytes to the front
    /// if the end is full); 0 at end of stream.
    async fn read_more(&mut self) -> Result<usize, ProtocolError> {
        if self.tail == self.buf.len() && !(self.head == 0 && self.grow()) {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        let n = self
            .inner
            .read(&mut self.buf[self.tail..])
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
        self.tail += n;
        Ok(n)
    }

    /// Doubles the buffer (up to `chunk`, or [`MIN_SPLICE_BYTES`] while splicing); `false` if it
    /// is already that large.
    fn grow(&mut self) -> bool {
        let limit = if self.splicing { MIN_SPLICE_BYTES.min(self.chunk) } else { self.chunk };
        if self.buf.len() >= limit {
            return false;
        }
        let to = (self.buf.len() * 2).min(limit);
        self.buf.resize(to, 0);
        true
    }

    /// Reads until `k` (≤ the buffer) unconsumed bytes are there; `false` at end of stream first.
    async fn want(&mut self, k: usize) -> Result<bool, ProtocolError> {
        while self.tail - self.head < k {
            if self.buf.len() - self.head < k {
                self.buf.copy_within(self.head..self.tail, 0);
                self.tail -= self.head;
                self.head = 0;
            }
            if self.read_more().await? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits for the next frame's length prefix and correlation id and checks both: its total
    /// size (prefix included), or `None` on a clean end of stream between frames.
    async fn header(&mut self, expected: i32) -> Result<Option<usize>, ProtocolError> {
        if !self.want(PREFIX).await? {
            return match self.tail - self.head {
                0 => Ok(None),
                have => Err(truncated(have, PREFIX)),
            };
        }
        let total = check_frame(&self.buf[self.head..self.tail], self.max, Side::Broker)?.unwrap_or(PREFIX);
        let id_end = (PREFIX + 4).min(total);
        if !self.want(id_end).await? {
            return Err(truncated(self.tail - self.head, total));
        }
        let got = peek::response_correlation_id(&self.buf[self.head..self.head + id_end])?;
        if got != expected {
            return Err(ProtocolError::CorrelationMismatch { expected, got });
        }
        Ok(Some(total))
    }

    /// Reads the next response whole (prefix included), with its bytes taken from `budget`
    /// (waiting for them) before they are read; `None` on a clean end of stream between frames.
    pub(crate) async fn whole(&mut self, expected: i32, budget: &ByteBudget) -> Result<Option<(Bytes, BudgetGuard)>, ProtocolError> {
        let Some(total) = self.header(expected).await? else { return Ok(None) };
        let held = budget.guard(total).await;
        let mut out = BytesMut::with_capacity(total.min(EAGER_WHOLE_BYTES));
        let k = total.min(self.tail - self.head);
        out.extend_from_slice(&self.buf[self.head..self.head + k]);
        self.consumed(k);
        while out.len() < total {
            if out.capacity() == out.len() {
                out.reserve((total - out.len()).min(out.len().max(CHUNK)));
            }
            let n = (&mut self.inner)
                .take((total - out.len()) as u64)
                .read_buf(&mut out)
                .await
                .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
            if n == 0 {
                return Err(truncated(out.len(), total));
            }
        }
        Ok(Some((out.freeze(), held)))
    }

    /// Copies the next response to `w` as it arrives (flushed at its end), looking at it as `scan`
    /// says: its size (prefix included), or `None` on a clean end of stream between frames.
    pub(crate) async fn stream<W: AsyncWrite + Unpin + SpliceSocket>(&mut self, w: &mut W, expected: i32, scan: Scan) -> Result<Option<usize>, CopyError> {
        let Some(total) = self.header(expected).await? else { return Ok(None) };
        self.splicing = !self.no_pipe && self.inner.splice_socket().is_some() && w.splice_socket().is_some();
        let mut tee = Tee {
            sent: self.head,
            up: self,
            w,
            left: total,
        };
        match scan {
            Scan::Plain => tee.skip(total, false).await?,
            Scan::FetchEndpoints(version) => tee.fetch_response(version).await?,
        }
        tee.finish().await?;
        Ok(Some(total))
    }

    fn consumed(&mut self, k: usize) {
        self.head += k;
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        }
    }
}

fn truncated(have: usize, want: usize) -> ProtocolError {
    ProtocolError::TruncatedFrame {
        have,
        want,
        side: Side::Broker,
    }
}

/// One frame on its way: `up.buf[sent..up.head]` is looked at but not yet written; `left` bytes
/// of the frame are still to come.
struct Tee<'a, R, W> {
    up: &'a mut Upstream<R>,
    w: &'a mut W,
    sent: usize,
    left: usize,
}

impl<R: AsyncRead + Unpin + SpliceSocket, W: AsyncWrite + Unpin + SpliceSocket> Tee<'_, R, W> {
    /// Reads more of the frame: into the free end of the buffer while there is one, else after
    /// writing what was looked at. Writes are whole buffers (or a frame's end), not every read:
    /// a write per arriving piece costs the proxy and the client a wake-up each.
    async fn refill(&mut self) -> Result<(), CopyError> {
        if self.up.tail == self.up.buf.len() && !self.up.grow() {
            // Called only once every buffered byte is consumed: start again at the front.
            self.write_out().await?;
            self.up.head = 0;
            self.up.tail = 0;
            self.sent = 0;
        }
        if self.up.read_more().await? == 0 {
            return Err(truncated(self.up.tail - self.sent, self.left).into());
        }
        Ok(())
    }

    async fn write_out(&mut self) -> Result<(), CopyError> {
        if self.sent < self.up.head {
            write_all(self.w, &self.up.buf[self.sent..self.up.head], self.up.write_stall)
                .await
                .map_err(CopyError::Client)?;
            self.sent = self.up.head;
        }
        Ok(())
    }

    /// Passes `n` bytes of the frame on (as zeros if `zero`).
    async fn skip(&mut self, mut n: usize, zero: bool) -> Result<(), CopyError> {
        if n > self.left {
            return Err(malformed("a field runs past the end of the frame").into());
        }
        if !zero && n >= MIN_SPLICE_BYTES && self.spliced(n).await? {
            return Ok(());
        }
        while n > 0 {
            if self.up.head == self.up.tail {
                self.refill().await?;
            }
            let k = n.min(self.up.tail - self.up.head);
            if zero {
                self.up.buf[self.up.head..self.up.head + k].fill(0);
            }
            self.up.head += k;
            self.left -= k;
            n -= k;
        }
        Ok(())
    }

    /// Passes the next `n` bytes of the frame (`n` ≤ `left`, checked by the caller) socket to
    /// socket with `splice` when both sides are plain TCP and most of them have not arrived yet:
    /// what was looked at and what is buffered go out first, the rest never enters the buffer.
    /// `false`: not possible here, nothing was done.
    async fn spliced(&mut self, n: usize) -> Result<bool, CopyError> {
        let buffered = self.up.tail - self.up.head;
        if buffered >= n || !self.up.splicing {
            return Ok(false);
        }
        if self.up.pipe.is_none() {
            match Pipe::new() {
                Ok(p) => self.up.pipe = Some(p),
                Err(e) => {
                    tracing::debug!(error = %e, "no pipe for splice; copying responses through the buffer");
                    self.up.no_pipe = true;
                    self.up.splicing = false;
                    return Ok(false);
                }
            }
        }
        // The buffered bytes are the range's first ones: out with everything looked at before.
        self.up.head = self.up.tail;
        self.left -= buffered;
        self.write_out().await?;
        self.up.head = 0;
        self.up.tail = 0;
        self.sent = 0;
        let rest = n - buffered;
        let (Some(pipe), Some(from), Some(to)) = (self.up.pipe.as_ref(), self.up.inner.splice_socket(), self.w.splice_socket()) else {
            return Err(CopyError::Client(std::io::Error::other("splice sockets vanished")));
        };
        pipe.relay(from, to, rest, self.up.write_stall).await.map_err(|e| match e {
            SpliceError::Eof { left } => CopyError::Broker(truncated(self.left - left, self.left)),
            SpliceError::Broker(source) => CopyError::Broker(ProtocolError::Io { source, side: Side::Broker }),
            SpliceError::Client(e) => CopyError::Client(e),
        })?;
        self.left -= rest;
        self.up.spliced += rest as u64;
        Ok(true)
    }

    async fn byte(&mut self) -> Result<u8, CopyError> {
        if self.left == 0 {
            return Err(malformed("a field runs past the end of the frame").into());
        }
        if self.up.head == self.up.tail {
            self.refill().await?;
        }
        let b = self.up.buf[self.up.head];
        self.up.head += 1;
        self.left -= 1;
        Ok(b)
    }

    async fn varint(&mut self) -> Result<u32, CopyError> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.byte().await?;
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed("a varint is longer than 5 bytes").into())
    }

    /// Items of a compact array (null counts as none).
    async fn compact_len(&mut self) -> Result<u32, CopyError> {
        Ok(self.varint().await?.saturating_sub(1))
    }

    async fn skip_compact_bytes(&mut self) -> Result<(), CopyError> {
        let n = self.compact_len().await? as usize;
        self.skip(n, false).await
    }

    /// Skips a tagged-field section; `neutralise`: tag 0 becomes [`NEUTRAL_TAG`] and its bytes zeros.
    async fn skip_tagged_fields(&mut self, neutralise: bool) -> Result<(), CopyError> {
        for _ in 0..self.varint().await? {
            let tag = self.varint().await?;
            let hide = neutralise && tag == 0;
            if hide {
                // The tag's last byte was consumed just now: still in the buffer, not yet sent (a
                // refill happens only before a byte is consumed). 0 becomes an unknown tag.
                self.up.buf[self.up.head - 1] = NEUTRAL_TAG;
                tracing::debug!("streamed Fetch response: node_endpoints neutralised");
            }
            let size = self.varint().await? as usize;
            self.skip(size, hide).await?;
        }
        Ok(())
    }

    /// Walks a Fetch response (v16+, after the prefix) and neutralises its `node_endpoints`; the
    /// same layout as `kmp_protocol::scan::fetch_has_node_endpoints`.
    async fn fetch_response(&mut self, version: i16) -> Result<(), CopyError> {
        self.skip(PREFIX + 4, false).await?; // prefix, correlation id
        self.skip_tagged_fields(false).await?; // response header v1
        self.skip(4 + 2 + 4, false).await?; // throttle_time_ms, error_code, session_id
        for _ in 0..self.compact_len().await? {
            if version >= 13 {
                self.skip(16, false).await?; // topic_id
            } else {
                self.skip_compact_bytes().await?; // topic name
            }
            for _ in 0..self.compact_len().await? {
                self.skip(4 + 2 + 8 + 8 + 8, false).await?; // index, error, high watermark, LSO, log start
                for _ in 0..self.compact_len().await? {
                    self.skip(8 + 8, false).await?; // aborted transaction: producer id, first offset
                    self.skip_tagged_fields(false).await?;
                }
                self.skip(4, false).await?; // preferred_read_replica
                self.skip_compact_bytes().await?; // records
                self.skip_tagged_fields(false).await?;
            }
            self.skip_tagged_fields(false).await?;
        }
        self.skip_tagged_fields(true).await?;
        let rest = self.left;
        self.skip(rest, false).await
    }

    /// Writes the rest of the frame and flushes (a TLS writer may hold the tail otherwise).
    async fn finish(&mut self) -> Result<(), CopyError> {
        self.write_out().await?;
        let (head, tail) = (self.up.head, self.up.tail);
        if head == tail {
            self.up.head = 0;
            self.up.tail = 0;
        }
        within_stall(self.up.write_stall, self.w.flush()).await.map_err(CopyError::Client)
    }
}

fn malformed(detail: &str) -> ProtocolError {
    ProtocolError::Malformed {
        what: "Fetch response",
        detail: detail.to_owned(),
        side: Side::Broker,
    }
}

#[cfg(test)]
mod tests;
