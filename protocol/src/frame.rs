//! Cutting a byte stream into Kafka frames: a big-endian `i32` length followed by that many
//! bytes. A frame is kept as one [`Bytes`] *including* its length prefix, so a frame that is
//! passed through untouched is written back with a single write and no copy.
//!
//! What a frame contains (headers, API keys) is `peek`'s business, not this module's.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{ProtocolError, Side};

/// Size of the length prefix.
pub const PREFIX: usize = 4;

/// Reads length-prefixed frames from `R` with an upper bound on the frame size.
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    max: u32,
    side: Side,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// `max` bounds the announced size (excluding the prefix); `side` says whom to blame.
    pub fn new(inner: R, max: u32, side: Side) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(64 * 1024),
            max,
            side,
        }
    }

    /// The next whole frame (prefix included), or `None` on a clean end of stream between frames.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        loop {
            match check_frame(&self.buf, self.max, self.side)? {
                Some(total) if self.buf.len() >= total => return Ok(Some(self.buf.split_to(total).freeze())),
                Some(total) => self.buf.reserve(total - self.buf.len()),
                None => self.buf.reserve(PREFIX),
            }
            let n = self
                .inner
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| ProtocolError::Io { source, side: self.side })?;
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

    /// Bytes already read from the stream but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
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
