//! Cutting a byte stream into Kafka frames: a big-endian `i32` length followed by that many
//! bytes. A frame is kept as one [`Bytes`] *including* its length prefix, so a frame that is
//! passed through untouched is written back with a single write and no copy.
//!
//! What a frame contains (headers, API keys) is `peek`'s business, not this module's.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

pub use crate::byte_budget::{BudgetGuard, ByteBudget};
use crate::error::{ProtocolError, Side};

/// Size of the length prefix.
pub const PREFIX: usize = 4;

/// Bytes read ahead at most per read call, and the step by which a large frame's buffer grows:
/// memory follows the bytes that actually arrived, never the size a peer announced.
const CHUNK: usize = 64 * 1024;

/// Reads length-prefixed frames from `R` with an upper bound on the frame size.
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    max: u32,
    side: Side,
    budget: Option<ByteBudget>,
    /// Permits for the bytes in `buf` (and, while a read is pending, the room it may fill).
    held: BudgetGuard,
    /// When the bytes of the frame now being assembled started to arrive.
    partial_since: Option<Instant>,
    /// Times this reader waited for the budget.
    waits: u64,
    /// How long the rest of a started frame may take (`None`: unbounded).
    frame_timeout: Option<std::time::Duration>,
    /// Frames up to this size get their whole buffer at once (no copies while they grow).
    eager: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// `max` bounds the announced size (excluding the prefix); `side` says whom to blame.
    pub fn new(inner: R, max: u32, side: Side) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(CHUNK),
            max,
            side,
            budget: None,
            held: BudgetGuard::default(),
            partial_since: None,
            waits: 0,
            frame_timeout: None,
            eager: CHUNK,
        }
    }

    /// Reserves frames of up to `bytes` whole when their length prefix arrives; larger ones grow
    /// by doubling what arrived. For a peer whose announced sizes are trusted that far (the
    /// upstream broker's responses), this saves the copies of growing.
    pub fn with_eager_reserve(mut self, bytes: usize) -> Self {
        self.eager = bytes.max(CHUNK);
        self
    }

    /// Bounds the time from a frame's first byte to its last: then [`FrameReader::next`] fails
    /// with an I/O error of kind `TimedOut`.
    pub fn with_frame_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.frame_timeout = Some(timeout);
        self
    }

    /// Changes the bound on announced sizes for the frames not started yet (a connection that has
    /// not authenticated gets a smaller one than an authenticated one).
    pub fn set_max(&mut self, max: u32) {
        self.max = max;
    }

    /// Makes every buffered byte count against `budget` (see [`ByteBudget`]).
    pub fn with_budget(mut self, budget: ByteBudget) -> Self {
        self.held = BudgetGuard::on(budget.clone());
        self.budget = Some(budget);
        self
    }

    /// The next whole frame (prefix included), or `None` on a clean end of stream between frames.
    /// Cancel-safe: bytes already read stay buffered for the next call.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        Ok(self.next_guarded().await?.map(|(f, _)| f))
    }

    /// Like [`FrameReader::next`], with the budget permits for the frame's bytes: keep the guard
    /// until the frame's memory is no longer needed.
    pub async fn next_guarded(&mut self) -> Result<Option<(Bytes, BudgetGuard)>, ProtocolError> {
        loop {
            self.cover_buffered().await;
            let want = match check_frame(&self.buf, self.max, self.side)? {
                Some(total) if self.buf.len() >= total => {
                    let frame = self.buf.split_to(total).freeze();
                    let guard = self.held.split_off(total);
                    self.partial_since = (!self.buf.is_empty()).then(Instant::now);
                    return Ok(Some((frame, guard)));
                }
                Some(total) => total - self.buf.len(),
                None => CHUNK,
            };
            let want = match &self.budget {
                // Never hold more than the whole budget: read less instead.
                Some(b) if self.buf.len() + want > b.total() => match b.total().checked_sub(self.buf.len()) {
                    Some(room) if room > 0 => room,
                    _ => {
                        return Err(ProtocolError::FrameTooLarge {
                            size: self.buf.len() as i64,
                            max: u32::try_from(b.total()).unwrap_or(u32::MAX),
                            side: self.side,
                        });
                    }
                },
                _ => want,
            };
            let deadline = self.partial_since.zip(self.frame_timeout).map(|(since, t)| since + t);
            let n = match deadline {
                Some(at) => match tokio::time::timeout_at(at.into(), self.fill(want)).await {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(ProtocolError::Io {
                            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "the rest of the frame did not arrive in time"),
                            side: self.side,
                        });
                    }
                },
                None => self.fill(want).await?,
            };
            if n > 0 && self.partial_since.is_none() {
                self.partial_since = Some(Instant::now());
            }
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let want = check_frame(&self.buf, self.max, self.side)?.unwrap_or(PREFIX);
                return Err(ProtocolError::TruncatedFrame {
                    have: self.buf.len(),
                    want,
                    side: self.side,
                });
            }
        }
    }

    /// Reads at most `want` more bytes, growing the buffer in proportion to what already arrived
    /// (never by the announced size), then takes budget for them (waiting if it is exhausted:
    /// the connection reads nothing more until others give bytes back).
    async fn fill(&mut self, want: usize) -> Result<usize, ProtocolError> {
        let grow = if self.buf.len() + want <= self.eager {
            want
        } else {
            want.min(CHUNK.max(self.buf.len()))
        };
        self.buf.reserve(grow);
        let room = want.min(self.buf.capacity() - self.buf.len());
        let n = {
            let mut limited = (&mut self.inner).take(room as u64);
            limited.read_buf(&mut self.buf).await
        }
        .map_err(|source| ProtocolError::Io { source, side: self.side })?;
        self.cover_buffered().await;
        Ok(n)
    }

    /// Takes budget for buffered bytes not yet covered (also after a cancelled wait).
    async fn cover_buffered(&mut self) {
        let Some(budget) = &self.budget else { return };
        let need = self.buf.len().saturating_sub(self.held.bytes());
        if need == 0 {
            return;
        }
        if !budget.try_take(need) {
            self.waits += 1;
            budget.take(need).await;
        }
        self.held.add(need);
    }

    /// Bytes already read from the stream but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Since when part of a frame has been waiting for the rest (`None`: between frames).
    pub fn partial_since(&self) -> Option<Instant> {
        self.partial_since
    }

    /// Times this reader had to wait for the shared budget.
    pub fn budget_waits(&self) -> u64 {
        self.waits
    }
}

/// Validates the length prefix at the start of `buf`: `Ok(Some(total))` with the total frame
/// size (prefix included) once the prefix is complete, `Ok(None)` if fewer than 4 bytes are there.
pub fn check_frame(buf: &[u8], max: u32, side: Side) -> Result<Option<usize>, ProtocolError> {
    if buf.len() < PREFIX {
        return Ok(None);
    }
    let size = (&buf[..PREFIX]).get_i32();
    if size < 0 {
        return Err(ProtocolError::NegativeFrameSize { size, side });
    }
    if size as u32 > max {
        return Err(ProtocolError::FrameTooLarge { size: size as i64, max, side });
    }
    Ok(Some(PREFIX + size as usize))
}

/// Prepends the length prefix to `body`.
pub fn with_prefix(body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX + body.len());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames_of(bytes: Vec<u8>, max: u32) -> Vec<Result<Option<Bytes>, String>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let mut r = FrameReader::new(&bytes[..], max, Side::Client);
            let mut out = Vec::new();
            loop {
                match r.next().await {
                    Ok(Some(f)) => out.push(Ok(Some(f))),
                    Ok(None) => {
                        out.push(Ok(None));
                        break;
                    }
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        break;
                    }
                }
            }
            out
        })
    }

    #[tokio::test]
    async fn a_partial_frame_holds_budget_only_for_the_bytes_that_arrived_and_releases_it() {
        let budget = ByteBudget::new(1 << 20);
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = FrameReader::new(server, 100 << 20, Side::Client).with_budget(budget.clone());
        // Announce 100 MiB, send 10 bytes: memory and budget follow the 10 bytes, not the 100 MiB.
        use tokio::io::AsyncWriteExt;
        client.write_all(&(100i32 << 20).to_be_bytes()).await.unwrap();
        client.write_all(&[7; 10]).await.unwrap();
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), reader.next_guarded()).await;
        assert!(pending.is_err(), "the frame is incomplete");
        assert_eq!(reader.buffered(), 14);
        assert!(budget.in_use() <= 14 + CHUNK, "held {} bytes for 14 received", budget.in_use());
        assert!(reader.buf.capacity() <= 2 * CHUNK + 14, "buffer grew to {} for 14 bytes", reader.buf.capacity());
        assert!(reader.partial_since().is_some());
        drop(reader);
        assert_eq!(budget.in_use(), 0, "dropping the reader releases everything");
    }

    #[tokio::test]
    async fn a_frame_whose_rest_does_not_arrive_in_time_is_an_error() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = FrameReader::new(server, 1024, Side::Client).with_frame_timeout(std::time::Duration::from_millis(100));
        use tokio::io::AsyncWriteExt;
        client.write_all(&100i32.to_be_bytes()).await.unwrap();
        client.write_all(&[1; 6]).await.unwrap();
        let r = tokio::time::timeout(std::time::Duration::from_secs(5), reader.next()).await;
        match r {
            Ok(Err(ProtocolError::Io { source, .. })) => assert_eq!(source.kind(), std::io::ErrorKind::TimedOut),
            other => panic!("expected a timeout error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_frame_keeps_its_budget_until_its_guard_is_dropped_and_a_full_budget_waits() {
        let budget = ByteBudget::new(64);
        let mut bytes = with_prefix(&[1; 40]).to_vec();
        bytes.extend_from_slice(&with_prefix(&[2; 40]));
        let mut reader = FrameReader::new(&bytes[..], 1024, Side::Client).with_budget(budget.clone());
        let (first, guard) = reader.next_guarded().await.unwrap().unwrap();
        assert_eq!(first.len(), 44);
        assert!(budget.in_use() >= 44);
        let second = tokio::time::timeout(std::time::Duration::from_millis(50), reader.next_guarded()).await;
        assert!(second.is_err(), "44 of 64 bytes are held by the first frame: the second waits");
        drop(guard);
        let (second, _g) = reader.next_guarded().await.unwrap().unwrap();
        assert_eq!(&second[4..], &[2; 40][..]);
        assert!(reader.budget_waits() >= 1);
    }

    #[test]
    fn splits_back_to_back_frames_and_keeps_the_prefix() {
        let mut bytes = with_prefix(b"hello").to_vec();
        bytes.extend_from_slice(&with_prefix(b""));
        bytes.extend_from_slice(&with_prefix(b"xy"));
        let got = frames_of(bytes, 100);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].as_ref().unwrap().as_ref().unwrap().as_ref(), b"\0\0\0\x05hello");
        assert_eq!(got[2].as_ref().unwrap().as_ref().unwrap().as_ref(), b"\0\0\0\x02xy");
        assert_eq!(got[3], Ok(None));
    }

    #[test]
    fn oversized_frame_is_an_error_before_reading_its_body() {
        let got = frames_of(vec![0, 0, 1, 0, 1, 2, 3], 255);
        assert!(matches!(&got[0], Err(e) if e.contains("exceeds")), "{got:?}");
    }

    #[test]
    fn negative_size_and_truncation_are_errors() {
        assert!(matches!(&frames_of(vec![0xff, 0xff, 0xff, 0xff], 255)[0], Err(e) if e.contains("negative")));
        assert!(matches!(&frames_of(vec![0, 0, 0, 9, 1], 255)[0], Err(e) if e.contains("middle")));
        assert!(matches!(&frames_of(vec![0, 0], 255)[0], Err(e) if e.contains("middle")));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_and_frames_reassemble_the_input(bytes in proptest::collection::vec(any::<u8>(), 0..2048), max in 0u32..4096) {
            let got = frames_of(bytes.clone(), max);
            let mut joined = Vec::new();
            for f in &got {
                if let Ok(Some(f)) = f { joined.extend_from_slice(f); }
            }
            prop_assert!(bytes.starts_with(&joined), "frames are a prefix of the input");
            if matches!(got.last(), Some(Ok(None))) { prop_assert_eq!(joined.len(), bytes.len()); }
        }
    }
}
