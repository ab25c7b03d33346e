//! Decompressing and compressing the records section of a batch the engine re-encodes
//! (`reencode`, `merge`). Decompression stops at a caller's byte limit while it runs: a batch of
//! a few kilobytes from a hostile (or merely very compressible) source can inflate to
//! hundreds of megabytes, and merging many small batches must not hold them all. Compression
//! uses fast levels: a merged or re-encoded run is compressed on the engine's hot path, and
//! the destination broker accepts any level. Which batches are re-encoded, and the record
//! format inside the sections, are `reencode`'s.

use std::io::Read;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Snappy, Zstd};

/// The most one batch's records may decompress to (bytes) when the caller sets no tighter
/// limit: the vendored kafka-protocol decompressors' own bound.
pub const MAX_RAW_BATCH: usize = 256 * 1024 * 1024;

/// lz4 frame compression level for re-encoded runs: 0 is LZ4's fast mode (levels 3 and up are
/// LZ4HC, several times slower; kafka-protocol's own encoder uses 4).
const LZ4_LEVEL: u32 = 0;

/// `section` (compressed with `codec`) decompressed as Kafka's broker reads it, or why not; more
/// than `limit` bytes of output is an error, found before more than `limit + 1` bytes are
/// produced (snappy: before anything is allocated, from the lengths its blocks announce; gzip:
/// every member after the first counts [`GZIP_MEMBER_COST`] bytes more).
pub(crate) fn decompress(codec: i16, section: &Bytes, limit: usize) -> Result<Bytes, String> {
    let limit = limit.min(MAX_RAW_BATCH);
    let out = match codec {
        0 => section.clone(),
        1 => gunzip(section, limit)?,
        2 => unsnappy(section, limit)?,
        3 => read_at_most(lz4::Decoder::new(&section[..]).map_err(|e| e.to_string())?, limit)?,
        4 => {
            let mut d = zstd::stream::read::Decoder::with_buffer(&section[..]).map_err(|e| e.to_string())?;
            // A frame's declared window is allocated whole: under a tight limit (a merge) no
            // more than the limit needs (at least zstd's 8 MiB level defaults).
            if limit < MAX_RAW_BATCH {
                let log = usize::BITS - limit.max(1).leading_zeros();
                d.window_log_max(log.clamp(23, 27)).map_err(|e| e.to_string())?;
            }
            read_at_most(d, limit)?
        }
        c => return Err(format!("unknown compression codec {c}")),
    };
    if out.len() > limit {
        return Err(format!("decompresses to more than {limit} bytes"));
    }
    Ok(out)
}

/// Kafka's `GzipCompression.wrapForInput` gives Java's GZIPInputStream an input buffer of 8 KiB:
/// where its reads end decides whether JDK 17/21 look for another member (see [`gunzip`]).
const JAVA_GZIP_BUFFER: usize = 8 * 1024;

/// What every gzip member after the first costs against the caller's limit, on top of its output:
/// starting a member (resetting the inflater, about this much state) costs work even when the
/// member is empty, and a section of empty 20-byte members must not buy more of it per input
/// byte than one ordinary member. (Java has no such bound; no producer writes more than one
/// member per batch.)
const GZIP_MEMBER_COST: usize = 32 * 1024;

/// Every gzip member of `section` in turn, as Kafka's broker reads them: Java's GZIPInputStream
/// (JDK 17 and 21) with an 8 KiB input buffer, read to the end. Whatever follows a member is
/// another member only where Java looks for one (more input than its buffer holds, or more than
/// 18 bytes after the trailer) and a gzip header reads there; anything else after a member is
/// ignored. A cut-off or corrupt member (data, CRC or size) is an error. One inflater serves
/// every member.
fn gunzip(section: &[u8], limit: usize) -> Result<Bytes, String> {
    let mut at = gzip_header(section).map_err(|e| format!("gzip header: {e}"))?;
    let mut inflater = flate2::Decompress::new(false);
    let mut chunk = vec![0u8; (limit + 1).min(32 * 1024)];
    let mut out = Vec::new();
    let (mut charged, mut java_buffer_end) = (0usize, 0usize);
    loop {
        let first = out.len();
        inflater.reset(false);
        loop {
            let room = limit - charged - out.len() + 1;
            let (was_in, was_out) = (inflater.total_in(), inflater.total_out());
            let room = room.min(chunk.len());
            let status = inflater
                .decompress(&section[at + was_in as usize..], &mut chunk[..room], flate2::FlushDecompress::None)
                .map_err(|e| format!("gzip: {e}"))?;
            let made = (inflater.total_out() - was_out) as usize;
            out.extend_from_slice(&chunk[..made]);
            if out.len() + charged > limit {
                return Err(format!("decompresses to more than {limit} bytes"));
            }
            if status == flate2::Status::StreamEnd {
                break;
            }
            if made == 0 && inflater.total_in() == was_in {
                return Err("gzip member cut off".into());
            }
        }
        let end = at + inflater.total_in() as usize;
        // Java fills its buffer 8 KiB at a time from where the member's data (or the buffer
        // before it) starts; `n` is what the buffer still holds after the member's data.
        if end > java_buffer_end {
            let from = java_buffer_end.max(at);
            java_buffer_end = (from + (end - from).div_ceil(JAVA_GZIP_BUFFER) * JAVA_GZIP_BUFFER).min(section.len());
        }
        let n = java_buffer_end - end;
        let trailer = section.get(end..end + 8).ok_or("gzip trailer cut off")?;
        let member = &out[first..];
        let mut crc = flate2::Crc::new();
        crc.update(member);
        if trailer[..4] != crc.sum().to_le_bytes() || trailer[4..] != (member.len() as u32).to_le_bytes() {
            return Err("corrupt gzip trailer".into());
        }
        let rest = end + 8;
        // GZIPInputStream.readTrailer (JDK 17, 21): `if (this.in.available() > 0 || n > 26)`
        // it reads another header, and any failure there ends the stream.
        if section.len() <= java_buffer_end.max(rest) && n <= 26 {
            return Ok(out.into());
        }
        let Ok(header) = gzip_header(&section[rest..]) else {
            return Ok(out.into());
        };
        charged += GZIP_MEMBER_COST;
        if out.len() + charged > limit {
            return Err(format!("gzip members cost more than {limit} bytes"));
        }
        at = rest + header;
    }
}

/// The length of the gzip header `s` starts with, read as GZIPInputStream.readHeader reads it:
/// magic, method 8 (deflate), flags (reserved bits ignored), 6 bytes skipped, then the extra
/// field, name and comment if flagged, and the header CRC (checked) if flagged.
fn gzip_header(s: &[u8]) -> Result<usize, &'static str> {
    const CUT: &str = "cut off";
    match s.get(..4).ok_or(CUT)? {
        [0x1f, 0x8b, 8, _] => {}
        [0x1f, 0x8b, ..] => return Err("not deflate"),
        _ => return Err("not gzip"),
    }
    let flags = s[3];
    let mut at = 10;
    if flags & 4 != 0 {
        let len = s.get(at..at + 2).ok_or(CUT)?;
        at += 2 + usize::from(u16::from_le_bytes([len[0], len[1]]));
    }
    for flag in [8, 16] {
        if flags & flag != 0 {
            at += 1 + s.get(at..).ok_or(CUT)?.iter().position(|&b| b == 0).ok_or(CUT)?;
        }
    }
    if flags & 2 != 0 {
        let mut crc = flate2::Crc::new();
        crc.update(s.get(..at).ok_or(CUT)?);
        if s.get(at..at + 2).ok_or(CUT)? != &(crc.sum() as u16).to_le_bytes()[..] {
            return Err("header CRC");
        }
        at += 2;
    }
    if at > s.len() {
        return Err(CUT);
    }
    Ok(at)
}

/// The magic that starts snappy-java's stream header (16 bytes: the magic, a version and a
/// compatible version, big-endian), which Kafka's producers write; a section of fewer than 16
/// bytes or without it is one raw snappy block, as snappy-java reads it.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: usize = 16;

/// A snappy section as Kafka's broker reads it (snappy-java 1.1.10's SnappyInputStream): the
/// stream header (its versions unread), then blocks of a 4-byte big-endian length and a raw
/// block, until fewer than 4 bytes are left; another stream header between blocks (concatenated
/// streams) is skipped if its version is at least 1. Or one raw block. Every block's announced
/// length is checked against what its size can yield (at most 64 bytes per 3 input bytes) and
/// their sum against `limit` before the output is allocated, once, and any block decoded.
fn unsnappy(section: &Bytes, limit: usize) -> Result<Bytes, String> {
    let blocks = match section.get(XERIAL_HEADER..) {
        _ if section.is_empty() => return Err("empty snappy section".into()),
        Some(mut rest) if section.starts_with(XERIAL_MAGIC) => {
            let mut blocks = Vec::new();
            while let Some((len, tail)) = rest.split_first_chunk::<4>() {
                if len[..] == XERIAL_MAGIC[..4] {
                    // snappy-java reads a stream header with another magic as the end of the
                    // stream, or skips it, depending on its caller's read sizes: refused.
                    let header = rest.get(..XERIAL_HEADER).ok_or("snappy stream header cut off")?;
                    if !header.starts_with(XERIAL_MAGIC) {
                        return Err("snappy stream header with a broken magic".into());
                    }
                    let version = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
                    if version < 1 {
                        return Err(format!("snappy stream header of version {version}"));
                    }
                    rest = &rest[XERIAL_HEADER..];
                    continue;
                }
                let len = usize::try_from(i32::from_be_bytes(*len)).map_err(|_| "negative snappy block length")?;
                if len > tail.len() {
                    return Err(format!("snappy block of {len} bytes, {} left", tail.len()));
                }
                let (block, tail) = tail.split_at(len);
                blocks.push(block);
                rest = tail;
            }
            blocks
        }
        _ => vec![&section[..]],
    };
    // Every block's announced length first: the whole output is checked against the limit and
    // allocated once, before anything is decoded.
    let mut total = 0usize;
    for block in &blocks {
        let announced = snap::raw::decompress_len(block).map_err(|e| format!("snappy block header: {e}"))?;
        if announced as u64 * 3 > block.len() as u64 * 64 {
            return Err(format!("snappy block of {} bytes announces {announced} uncompressed bytes", block.len()));
        }
        total = total.saturating_add(announced);
        if total > limit {
            return Err(format!("decompresses to more than {limit} bytes"));
        }
    }
    let mut out = vec![0u8; total];
    let mut at = 0;
    for block in blocks {
        at += snap::raw::Decoder::new()
            .decompress(block, &mut out[at..])
            .map_err(|e| format!("snappy block: {e}"))?;
    }
    out.truncate(at);
    Ok(out.into())
}

fn read_at_most(r: impl Read, limit: usize) -> Result<Bytes, String> {
    let mut out = Vec::new();
    r.take(limit as u64 + 1).read_to_end(&mut out).map_err(|e| e.to_string())?;
    if out.len() > limit {
        return Err(format!("decompresses to more than {limit} bytes"));
    }
    Ok(out.into())
}

/// `raw` compressed with `codec`.
pub(crate) fn compress(codec: i16, raw: &[u8]) -> Result<BytesMut, String> {
    let mut out = BytesMut::new();
    let put = |b: &mut BytesMut| {
        b.put_slice(raw);
        Ok(())
    };
    match codec {
        0 => out.put_slice(raw),
        1 => <Gzip as Compressor<BytesMut>>::compress(&mut out, put).map_err(|e| e.to_string())?,
        2 => <Snappy as Compressor<BytesMut>>::compress(&mut out, put).map_err(|e| e.to_string())?,
        3 => {
            // The frame settings kafka-protocol's encoder uses (independent blocks), fast level.
            let mut w = lz4::EncoderBuilder::new()
                .level(LZ4_LEVEL)
                .block_mode(lz4::BlockMode::Independent)
                .build((&mut out).writer())
                .map_err(|e| e.to_string())?;
            std::io::Write::write_all(&mut w, raw).map_err(|e| e.to_string())?;
            let (_, done) = w.finish();
            done.map_err(|e| e.to_string())?;
        }
        4 => <Zstd as Compressor<BytesMut>>::compress(&mut out, put).map_err(|e| e.to_string())?,
        c => return Err(format!("unknown compression codec {c}")),
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
