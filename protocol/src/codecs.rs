//! Decompressing and compressing the records section of a batch the engine re-encodes
//! (`reencode`, `merge`). Decompression stops at a caller's byte limit while it runs: a batch of
//! a few kilobytes from a hostile (or merely very compressible) source can inflate to
//! hundreds of megabytes, and merging many small batches must not hold them all. Compression
//! uses fast levels: a merged or re-encoded run is compressed on the engine's hot path, and
//! the destination broker accepts any level. Which batches are re-encoded, and the record
//! format inside the sections, are `reencode`'s.

use std::io::Read;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Snappy, Zstd};

/// The most one batch's records may decompress to (bytes) when the caller sets no tighter
/// limit: the vendored kafka-protocol decompressors' own bound.
pub const MAX_RAW_BATCH: usize = 256 * 1024 * 1024;

/// lz4 frame compression level for re-encoded runs: 0 is LZ4's fast mode (levels 3 and up are
/// LZ4HC, several times slower; kafka-protocol's own encoder uses 4).
const LZ4_LEVEL: u32 = 0;

/// `section` (compressed with `codec`) decompressed, or why not; more than `limit` bytes of
/// output is an error, found before more than `limit + 1` bytes are produced (snappy's format
/// bounds each block's output by its size, so it is checked after its blocks).
pub(crate) fn decompress(codec: i16, section: &Bytes, limit: usize) -> Result<Bytes, String> {
    let limit = limit.min(MAX_RAW_BATCH);
    let out = match codec {
        0 => section.clone(),
        1 => gunzip(section, limit)?,
        2 => <Snappy as Decompressor<Bytes>>::decompress(&mut section.clone(), |b: &mut Bytes| Ok(std::mem::take(b))).map_err(|e| e.to_string())?,
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
        let back = <Lz4 as Decompressor<Bytes>>::decompress(&mut packed.clone(), |b: &mut Bytes| Ok(std::mem::take(b))).expect("kafka-protocol reads it");
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
