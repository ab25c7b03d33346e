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

/// `section` (compressed with `codec`) decompressed, or why not; more than `limit` bytes of
/// output is an error, found before more than `limit + 1` bytes are produced (snappy: before
/// anything is allocated, from the lengths its blocks announce).
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

/// Every gzip member of `section` in turn, as Java's GZIPInputStream (which Kafka uses) reads
/// them: another member follows while the rest starts with gzip's magic bytes; anything else
/// after a member is ignored.
fn gunzip(section: &Bytes, limit: usize) -> Result<Bytes, String> {
    let mut out = Vec::new();
    let mut rest: &[u8] = &section[..];
    loop {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        let room = (limit - out.len()) as u64 + 1;
        (&mut d).take(room).read_to_end(&mut out).map_err(|e| e.to_string())?;
        if out.len() > limit {
            return Err(format!("decompresses to more than {limit} bytes"));
        }
        rest = d.into_inner();
        if !rest.starts_with(&[0x1f, 0x8b]) {
            return Ok(out.into());
        }
    }
}

/// The stream header of snappy-java's framing (magic, version 1, compatible version 1), which
/// Kafka's producers write; a section without it is one raw snappy block, as snappy-java reads it.
const XERIAL_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// A snappy section: snappy-java's framing (the header, then blocks of a 4-byte big-endian
/// length and a raw block) or one raw block. Every block's announced length is checked against
/// what its size can yield (at most 64 bytes per 3 input bytes) and their sum against `limit`
/// before the output is allocated, once, and any block decoded.
fn unsnappy(section: &Bytes, limit: usize) -> Result<Bytes, String> {
    let blocks = match section.strip_prefix(&XERIAL_MAGIC[..]) {
        None => vec![&section[..]],
        Some(mut rest) => {
            let mut blocks = Vec::new();
            while !rest.is_empty() {
                let (len, tail) = rest.split_first_chunk::<4>().ok_or("snappy block length cut off")?;
                let len = u32::from_be_bytes(*len) as usize;
                if len > tail.len() {
                    return Err(format!("snappy block of {len} bytes, {} left", tail.len()));
                }
                let (block, tail) = tail.split_at(len);
                blocks.push(block);
                rest = tail;
            }
            blocks
        }
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
        let mut at = XERIAL_MAGIC.len();
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
        // A block length past the section's end, and a cut-off length, are errors.
        let mut cut = XERIAL_MAGIC.to_vec();
        cut.extend_from_slice(&[0, 0, 1, 0, 9]);
        assert!(decompress(2, &Bytes::from(cut), MAX_RAW_BATCH).expect_err("past the end").contains("left"));
        let mut short = XERIAL_MAGIC.to_vec();
        short.extend_from_slice(&[0, 0]);
        assert!(decompress(2, &Bytes::from(short), MAX_RAW_BATCH).is_err());
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
        // Edge cases: both decoders agree (the same bytes, or both refuse).
        let block = snap::raw::Encoder::new().compress_vec(b"abc").expect("raw block");
        let framed_block = |b: &[u8]| [&(b.len() as u32).to_be_bytes()[..], b].concat();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty section", vec![]),
            ("the header only", XERIAL_MAGIC.to_vec()),
            ("an empty block", [&XERIAL_MAGIC[..], &framed_block(&[])].concat()),
            ("a block, then 2 trailing bytes", [&XERIAL_MAGIC[..], &framed_block(&block), &[0, 0]].concat()),
            ("two blocks", [&XERIAL_MAGIC[..], &framed_block(&block), &framed_block(&block)].concat()),
            ("another header version", [&XERIAL_MAGIC[..12], &[0, 0, 0, 2], &framed_block(&block)].concat()),
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
