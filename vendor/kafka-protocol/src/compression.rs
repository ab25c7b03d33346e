//! Provides compression utilities for encoding records.
//!
//! This module has implementations of gzip, Snappy, as well as a noop compression format that
//! allows encoding and decoding records into a [`Record`](crate::records::Record).

use crate::protocol::buf::{ByteBuf, ByteBufMut};
use anyhow::Result;

#[cfg(feature = "gzip")]
mod gzip;
#[cfg(feature = "lz4")]
mod lz4;
mod none;
#[cfg(feature = "snappy")]
mod snappy;
#[cfg(feature = "zstd")]
mod zstd;

#[cfg(feature = "gzip")]
pub use gzip::Gzip;
#[cfg(feature = "lz4")]
pub use lz4::Lz4;
pub use none::None;
#[cfg(feature = "snappy")]
pub use snappy::Snappy;
#[cfg(feature = "zstd")]
pub use zstd::Zstd;

/// Vendored patch (PATCHES.md): the most bytes a decompressor produces for one batch's records
/// (256 MiB, 256 times Kafka's default `message.max.bytes`). Kafka sets no such limit, but it
/// decompresses as it iterates; this crate holds the whole section in memory, so a batch of a few
/// bytes must not make it allocate gigabytes. A larger batch is an error.
pub const MAX_DECOMPRESSED_SIZE: usize = 256 * 1024 * 1024;

/// Vendored patch (PATCHES.md): an [`std::io::Write`] into a [`bytes::BytesMut`] that fails once
/// more than [`MAX_DECOMPRESSED_SIZE`] bytes would be written (for the streaming decompressors).
#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
#[derive(Default)]
pub(crate) struct BoundedWriter(bytes::BytesMut);

#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
impl BoundedWriter {
    pub(crate) fn into_inner(self) -> bytes::BytesMut {
        self.0
    }
}

#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
impl std::io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() > MAX_DECOMPRESSED_SIZE - self.0.len() {
            return Err(std::io::Error::other(format!(
                "decompressed size exceeds {MAX_DECOMPRESSED_SIZE} bytes"
            )));
        }
        self.0.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A trait for record compression algorithms.
pub trait Compressor<B: ByteBufMut> {
    /// Target buffer type for compression.
    type BufMut: ByteBufMut;
    /// Compresses into provided [`ByteBufMut`], with records encoded by `F` into `R`.
    fn compress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::BufMut) -> Result<R>;
}

/// A trait for record decompression algorithms.
pub trait Decompressor<B: ByteBuf> {
    /// Target buffer type for decompression.
    type Buf: ByteBuf;
    /// Decompress records from `B` mapped using `F` into `R`.
    fn decompress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::Buf) -> Result<R>;
}
