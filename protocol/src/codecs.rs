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
mod tests {
    use super::*;
    use kafka_protocol::compression::{Lz4, None as NoCompression};

    /// The stream header Kafka's producers write (snappy-java's, version 1, compatible with 1).
    const KAFKAS_SNAPPY_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

    fn sample() -> Vec<u8> {
        (0..300_000u32)
            .map(|i| if i % 7 == 0 { (i >> 3) as u8 } else { b'a' + (i % 5) as u8 })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_lz4_reads_back_with_kafka_protocols_decoder() {
        let raw = sample();
        for codec in 0..=4 {
            let packed = compress(codec, &raw).expect("compresses").freeze();
            let back = decompress(codec, &packed, MAX_RAW_BATCH).expect("decompresses");
            assert_eq!(&back[..], &raw[..], "codec {codec}");
        }
        let packed = compress(3, &raw).expect("compresses").freeze();
        let back = <Lz4 as kafka_protocol::compression::Decompressor<Bytes>>::decompress(&mut packed.clone(), |b: &mut Bytes| Ok(std::mem::take(b)))
            .expect("kafka-protocol reads it");
        assert_eq!(&back[..], &raw[..]);
        let mut plain = BytesMut::new();
        <NoCompression as Compressor<BytesMut>>::compress(&mut plain, |b: &mut BytesMut| {
            b.put_slice(&raw);
            Ok(())
        })
        .expect("none");
        assert_eq!(&compress(0, &raw).expect("none")[..], &plain[..]);
    }

    #[test]
    fn a_small_section_that_inflates_past_the_limit_is_refused_in_every_codec() {
        let zeros = vec![0u8; 8 * 1024 * 1024];
        for codec in 1..=4 {
            let packed = compress(codec, &zeros).expect("compresses").freeze();
            let e = decompress(codec, &packed, 1024 * 1024).expect_err("over the limit");
            assert!(e.contains("more than 1048576 bytes"), "codec {codec}: {e}");
            assert_eq!(decompress(codec, &packed, zeros.len()).expect("at the limit").len(), zeros.len());
        }
        assert!(decompress(0, &Bytes::from(zeros.clone()), 10).is_err(), "uncompressed sections count too");
    }

    #[test]
    fn a_snappy_block_announcing_more_than_the_limit_is_refused_before_it_is_allocated() {
        // One raw block claiming 200 MiB (varint length) but a few bytes long: its announced
        // length cannot come from its size, and a limit below it refuses it either way.
        let mut lie = vec![0x80, 0x80, 0x80, 0x64];
        lie.extend_from_slice(&[0u8; 16]);
        let e = decompress(2, &Bytes::from(lie.clone()), MAX_RAW_BATCH).expect_err("impossible length");
        assert!(e.contains("announces"), "{e}");
        // Framed: 2.5 MiB of zeros (80 blocks of 32 KiB, a few bytes each), against a 1 MiB limit.
        let packed = compress(2, &vec![0u8; 40 * 64 * 1024]).expect("compresses").freeze();
        let e = decompress(2, &packed, 1024 * 1024).expect_err("over the limit");
        assert!(e.contains("more than 1048576 bytes"), "{e}");
        // The block that would cross the limit is refused unread: here its body is garbage
        // that decoding it would report instead.
        let mut framed = compress(2, &vec![0u8; 1024 * 1024 + 32 * 1024]).expect("compresses").to_vec();
        let mut at = KAFKAS_SNAPPY_HEADER.len();
        let mut last = at;
        while at < framed.len() {
            last = at;
            at += 4 + u32::from_be_bytes(framed[at..at + 4].try_into().expect("4 bytes")) as usize;
        }
        let body = last + 4 + 3; // a 32 KiB block's varint length takes 3 bytes
        framed[body..].fill(0xff);
        let e = decompress(2, &Bytes::from(framed.clone()), 1024 * 1024).expect_err("over the limit");
        assert!(e.contains("more than 1048576 bytes"), "refused by the limit, not by decoding it: {e}");
        assert!(
            decompress(2, &Bytes::from(framed), MAX_RAW_BATCH)
                .expect_err("garbage")
                .contains("snappy block")
        );
        // A block length past the section's end is an error.
        let mut cut = KAFKAS_SNAPPY_HEADER.to_vec();
        cut.extend_from_slice(&[0, 0, 1, 0, 9]);
        assert!(decompress(2, &Bytes::from(cut), MAX_RAW_BATCH).expect_err("past the end").contains("left"));
    }

    #[test]
    fn snappy_sections_read_as_kafka_protocols_decoder_reads_them() {
        use kafka_protocol::compression::Decompressor;
        let raw = sample();
        let framed = compress(2, &raw).expect("compresses").freeze();
        let theirs = <Snappy as Decompressor<Bytes>>::decompress(&mut framed.clone(), |b: &mut Bytes| Ok(std::mem::take(b))).expect("theirs");
        assert_eq!(&decompress(2, &framed, MAX_RAW_BATCH).expect("ours")[..], &theirs[..]);
        let one = Bytes::from(snap::raw::Encoder::new().compress_vec(&raw).expect("raw block"));
        let theirs = <Snappy as Decompressor<Bytes>>::decompress(&mut one.clone(), |b: &mut Bytes| Ok(std::mem::take(b))).expect("theirs, raw");
        assert_eq!(&decompress(2, &one, MAX_RAW_BATCH).expect("ours, raw")[..], &theirs[..]);
        assert_eq!(&theirs[..], &raw[..]);
        // Edge cases: both decoders agree (the same bytes, or both refuse). Where kafka-protocol's
        // decoder differs from snappy-java (bytes after the last block, the header's versions),
        // snappy-java's reading is ours: see the next test.
        let block = snap::raw::Encoder::new().compress_vec(b"abc").expect("raw block");
        let framed_block = |b: &[u8]| [&(b.len() as u32).to_be_bytes()[..], b].concat();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty section", vec![]),
            ("the header only", KAFKAS_SNAPPY_HEADER.to_vec()),
            ("an empty block", [&KAFKAS_SNAPPY_HEADER[..], &framed_block(&[])].concat()),
            ("two blocks", [&KAFKAS_SNAPPY_HEADER[..], &framed_block(&block), &framed_block(&block)].concat()),
        ];
        for (what, section) in cases {
            let section = Bytes::from(section);
            let ours = decompress(2, &section, MAX_RAW_BATCH);
            let theirs = <Snappy as Decompressor<Bytes>>::decompress(&mut section.clone(), |b: &mut Bytes| Ok(std::mem::take(b)));
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{what}: ours {ours:?}, kafka-protocol's {:?}", theirs.as_ref().map_err(|e| e.to_string())),
            }
        }
    }

    #[test]
    fn gzip_members_are_read_one_after_the_other_and_trailing_bytes_ignored_as_java_does() {
        let (a, b) = (b"first member ".repeat(100), b"second member".repeat(100));
        let mut two = BytesMut::new();
        two.put_slice(&compress(1, &a).expect("gzip"));
        two.put_slice(&compress(1, &b).expect("gzip"));
        let both: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        assert_eq!(&decompress(1, &two.clone().freeze(), MAX_RAW_BATCH).expect("two members")[..], &both[..]);
        two.put_slice(b"trailing junk");
        assert_eq!(&decompress(1, &two.clone().freeze(), MAX_RAW_BATCH).expect("junk ignored")[..], &both[..]);
        assert!(decompress(1, &two.freeze(), a.len() + 10).is_err(), "the limit spans the members");
    }

    /// What a section is, the section, and what Kafka's Java code read from it (`None`: refused).
    type JavaCase = (&'static str, Vec<u8>, Option<&'static [u8]>);

    /// A gzip member of `data`: a 10-byte header with `flags` (and `more` after it), one stored
    /// deflate block, the trailer.
    fn stored_member(data: &[u8], flags: u8, more: &[u8]) -> Vec<u8> {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let len = (data.len() as u16).to_le_bytes();
        let mut m = vec![0x1f, 0x8b, 8, flags, 0, 0, 0, 0, 0, 0xff];
        m.extend_from_slice(more);
        m.extend_from_slice(&[1, len[0], len[1], !len[0], !len[1]]);
        m.extend_from_slice(data);
        m.extend_from_slice(&crc.sum().to_le_bytes());
        m.extend_from_slice(&(data.len() as u32).to_le_bytes());
        m
    }

    #[test]
    fn what_follows_a_gzip_member_reads_as_kafkas_gzipinputstream_on_jdk_17_reads_it() {
        // Expected: what Kafka 4.1's GzipCompression.wrapForInput (GZIPInputStream, 8 KiB input
        // buffer) read on JDK 17 from the same bytes, to the end of the stream.
        let member = stored_member(b"the records", 0, &[]);
        let header = &member[..10];
        let cases: Vec<JavaCase> = vec![
            ("a bare magic", [&member[..], b"\x1f\x8b"].concat(), Some(b"the records")),
            (
                "magic and another method",
                [&member[..], b"\x1f\x8b\x07", &[b'z'; 40]].concat(),
                Some(b"the records"),
            ),
            ("a cut-off header", [&member[..], b"\x1f\x8b\x08"].concat(), Some(b"the records")),
            // Up to 18 bytes after the trailer, all in Java's buffer: never read as a member.
            ("a header and 8 bytes", [&member[..], header, &[3, 0], &[0; 6]].concat(), Some(b"the records")),
            ("a header and 9 bytes", [&member[..], header, &[3, 0], &[0; 7]].concat(), None),
            ("an empty member", [&member[..], &stored_member(b"", 0, &[])].concat(), Some(b"the records")),
            ("a member", [&member[..], &stored_member(b"!", 0, &[])].concat(), Some(b"the records!")),
            (
                "a member, reserved flags",
                [&member[..], &stored_member(b"!", 0xe0, &[])].concat(),
                Some(b"the records!"),
            ),
            (
                "a header with a wrong CRC",
                [&member[..], &stored_member(b"!", 2, &[0, 0])].concat(),
                Some(b"the records"),
            ),
            (
                "a member with a wrong CRC",
                [&member[..], &stored_member(b"!", 0, &[])[..16], &[0; 8]].concat(),
                None,
            ),
            ("a cut-off trailer", member[..member.len() - 3].to_vec(), None),
            ("nothing", vec![], None),
            ("a first header of another method", [b"\x1f\x8b\x07", &member[3..]].concat(), None),
        ];
        for (what, section, java) in cases {
            let ours = decompress(1, &Bytes::from(section), MAX_RAW_BATCH);
            assert_eq!(ours.as_deref().ok(), java, "{what}: {ours:?}");
        }
        // A header and 2 bytes after a member of 8187 bytes: the section ends past Java's first
        // 8 KiB buffer (which starts after the 10-byte header), so Java reads them as a member,
        // cut off. After 8167 or 8188 bytes the section ends in the buffer: ignored.
        for (len, read) in [(8167, true), (8168, false), (8187, false), (8188, true)] {
            let data = vec![b'x'; len];
            let section = Bytes::from([&stored_member(&data, 0, &[])[..], header, &[3, 0]].concat());
            assert_eq!(decompress(1, &section, MAX_RAW_BATCH).is_ok(), read, "after {len} bytes");
        }
    }

    #[test]
    fn every_gzip_member_after_the_first_costs_32_kib_of_the_limit() {
        let empty = compress(1, b"").expect("gzip").to_vec(); // 20 bytes
        let hundred = Bytes::from(empty.repeat(100));
        assert_eq!(decompress(1, &hundred, 99 * GZIP_MEMBER_COST).expect("within the limit").len(), 0);
        let e = decompress(1, &hundred, 99 * GZIP_MEMBER_COST - 1).expect_err("over the limit");
        assert!(e.contains("members cost more than"), "{e}");
        // A MiB of empty members (52,428, each one an inflater reset) is refused at 8,193.
        assert!(decompress(1, &Bytes::from(empty.repeat((1 << 20) / empty.len())), MAX_RAW_BATCH).is_err());
        let data = vec![7u8; 100 * 1024];
        let members = Bytes::from([compress(1, &data).expect("gzip"), compress(1, &data).expect("gzip")].concat());
        assert!(decompress(1, &members, 2 * data.len() + GZIP_MEMBER_COST).is_ok());
        assert!(
            decompress(1, &members, 2 * data.len() + GZIP_MEMBER_COST - 1).is_err(),
            "output and members add up"
        );
    }

    #[test]
    fn snappy_sections_read_as_snappy_javas_snappyinputstream_reads_them() {
        // Expected: what Kafka 4.1's SnappyCompression.wrapForInput (snappy-java 1.1.10.7) read
        // from the same bytes, to the end of the stream.
        let block = snap::raw::Encoder::new().compress_vec(b"the records").expect("raw block");
        let framed_block = |b: &[u8]| [&(b.len() as u32).to_be_bytes()[..], b].concat();
        let header = |version: i32, compatible: i32| [&XERIAL_MAGIC[..], &version.to_be_bytes(), &compatible.to_be_bytes()].concat();
        let one = [&header(1, 1)[..], &framed_block(&block)].concat();
        let cases: Vec<JavaCase> = vec![
            ("2 bytes after the last block", [&one[..], &[0, 0]].concat(), Some(b"the records")),
            ("3 bytes after the last block", [&one[..], &[0, 0, 0]].concat(), Some(b"the records")),
            ("an empty block", [&one[..], &[0, 0, 0, 0]].concat(), None),
            ("two streams", [&one[..], &one[..]].concat(), Some(b"the recordsthe records")),
            (
                "a second stream of version 2",
                [&one[..], &header(2, 9), &framed_block(&block)].concat(),
                Some(b"the recordsthe records"),
            ),
            ("a second stream of version 0", [&one[..], &header(0, 1), &framed_block(&block)].concat(), None),
            ("a second header cut off", [&one[..], &header(1, 1)[..10]].concat(), None),
            ("a second header, then nothing", [&one[..], &header(1, 1)].concat(), Some(b"the records")),
            (
                "a first header of version 0",
                [&header(0, 9)[..], &framed_block(&block)].concat(),
                Some(b"the records"),
            ),
            ("the header only", header(1, 1), Some(b"")),
            ("the header and 3 bytes", [&header(1, 1)[..], &[0, 1, 2]].concat(), Some(b"")),
            ("an empty section", vec![], None),
            ("a raw block", block.clone(), Some(b"the records")),
            ("15 bytes of header: one raw block", header(1, 1)[..15].to_vec(), None),
            ("a negative block length", [&header(1, 1)[..], b"\x80\x00\x00\x00", &block].concat(), None),
            // snappy-java ends the stream here or skips the header, depending on its caller's
            // read sizes (2048-byte reads after 2048 bytes of output end it): refused.
            (
                "a second header with a broken magic",
                [&one[..], b"\x82SNAXXXX", &header(1, 1)[8..], &framed_block(&block)].concat(),
                None,
            ),
        ];
        for (what, section, java) in cases {
            let ours = decompress(2, &Bytes::from(section), MAX_RAW_BATCH);
            assert_eq!(ours.as_deref().ok(), java, "{what}: {ours:?}");
        }
    }

    #[test]
    fn garbage_in_any_codec_is_an_error_or_nothing_never_a_panic() {
        // (lz4 and snappy read some garbage as an empty or cut-off section; the record count
        // check of the caller refuses it then.)
        for codec in 0..=5 {
            for junk in [
                &b""[..],
                b"\x00",
                b"\xff\xff",
                b"\x1f\x8b\x08\x00garbage",
                b"\x04\x22\x4d\x18\x60\x40\x82junk",
                b"\x28\xb5\x2f\xfd\x00",
            ] {
                if let Ok(out) = decompress(codec, &Bytes::copy_from_slice(junk), MAX_RAW_BATCH) {
                    assert!(out.len() <= junk.len(), "codec {codec} made {} bytes of {junk:?}", out.len());
                }
            }
        }
        assert!(decompress(1, &Bytes::from_static(b"\x1f\x8b\x08\x00garbage"), MAX_RAW_BATCH).is_err());
        assert!(decompress(4, &Bytes::from_static(b"\x28\xb5\x2f\xfd\x00"), MAX_RAW_BATCH).is_err());
        assert!(decompress(7, &Bytes::from_static(b"x"), MAX_RAW_BATCH).is_err(), "unknown codec");
    }
}
