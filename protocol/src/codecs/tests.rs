//! Decompression bounds and round trips of every codec, with Kafka's own stream framings.

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
