use super::*;
use crate::batch::{crc_is_valid, split};
use bytes::BytesMut;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use proptest::prelude::*;

/// Room to decompress the tests' parts.
const RAW: usize = 64 * 1024 * 1024;

const CODECS: [Compression; 5] = [Compression::None, Compression::Gzip, Compression::Zstd, Compression::Lz4, Compression::Snappy];

fn record(o: i64, transactional: bool, timestamp_type: TimestampType) -> Record {
    let mut headers = kafka_protocol::indexmap::IndexMap::new();
    headers.insert(StrBytes::from_static_str("h"), Some(Bytes::from(format!("hv-{o}"))));
    Record {
        transactional,
        control: false,
        partition_leader_epoch: 3,
        producer_id: if transactional { 77 } else { 5 },
        producer_epoch: 0,
        timestamp_type,
        offset: o,
        sequence: o as i32,
        // Not monotonic across batches: each record keeps its own.
        timestamp: 1_000 + (o * 7919) % 13,
        key: if o % 5 == 0 { None } else { Some(Bytes::from(format!("key-{o}"))) },
        value: if o % 7 == 0 {
            None
        } else {
            Some(Bytes::from(format!("value-{o}").repeat((o % 4) as usize + 1)))
        },
        headers,
        delete_horizon: false,
    }
}

/// A batch of the records at `from .. from + count`.
fn batch(from: i64, count: i64, compression: Compression) -> Bytes {
    batch_with(from, count, compression, false, TimestampType::Creation)
}

fn batch_with(from: i64, count: i64, compression: Compression, transactional: bool, ts: TimestampType) -> Bytes {
    let records: Vec<Record> = (from..from + count).map(|o| record(o, transactional, ts)).collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression }).unwrap();
    buf.freeze()
}

/// Every record of the merged batch equals the one the test made for its offset.
fn assert_records(merged: &Merged, from: i64, count: i64, compression: Compression) {
    let (h, _) = split(&merged.batch).unwrap().remove(0);
    assert_eq!(
        (h.base_offset, h.records_count, h.next_offset()),
        (from, count as i32, from + count),
        "{compression:?}: offsets of the merged batch"
    );
    assert_eq!(merged.records as i64, count);
    assert!(h.is_contiguous());
    assert_eq!(h.compression(), (compression as i16) & 7, "codec kept");
    assert!(crc_is_valid(&merged.batch), "CRC of the merged batch");
    let set = RecordBatchDecoder::decode(&mut merged.batch.clone()).unwrap();
    assert_eq!(set.records.len() as i64, count);
    for r in set.records {
        let want = record(r.offset, false, TimestampType::Creation);
        assert_eq!(
            (r.key, r.value, r.headers, r.timestamp, r.timestamp_type),
            (want.key, want.value, want.headers, want.timestamp, TimestampType::Creation),
            "{compression:?}: record {}",
            r.offset
        );
    }
}

#[test]
fn one_record_batches_merge_into_one_batch_with_every_record_at_its_offset_for_every_codec() {
    for compression in CODECS {
        let parts: Vec<Bytes> = (0..50).map(|i| batch(100 + i, 1, compression)).collect();
        let merged = merge(&parts, RAW).unwrap();
        assert_records(&merged, 100, 50, compression);
        let max = (100..150).map(|o| record(o, false, TimestampType::Creation).timestamp).max().unwrap();
        assert_eq!(merged.max_timestamp, max);
    }
}

#[test]
fn uncompressed_batches_between_compressed_ones_merge_into_the_compressed_codec() {
    for compression in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let parts = vec![
            batch(0, 1, Compression::None),
            batch(1, 2, compression),
            batch(3, 1, Compression::None),
            batch(4, 1, compression),
        ];
        assert_records(&merge(&parts, RAW).unwrap(), 0, 5, compression);
    }
    assert_records(
        &merge(&[batch(0, 1, Compression::None), batch(1, 1, Compression::None)], RAW).unwrap(),
        0,
        2,
        Compression::None,
    );
}

#[test]
fn batches_of_several_records_and_committed_transactional_batches_merge_too() {
    let parts = vec![
        batch(10, 3, Compression::Lz4),
        batch_with(13, 2, Compression::Lz4, true, TimestampType::Creation),
        batch(15, 7, Compression::Lz4),
    ];
    assert_records(&merge(&parts, RAW).unwrap(), 10, 12, Compression::Lz4);
}

#[test]
fn log_append_time_batches_merge_with_the_append_time_on_every_record() {
    // As a source broker stores them: the LogAppendTime bit set, the append time as the batch's
    // max timestamp (the records' own timestamps are not what consumers read).
    let log_append = |from: i64, append_time: i64| {
        let mut b = BytesMut::from(&batch(from, 2, Compression::None)[..]);
        b[22] |= 1 << 3;
        b[35..43].copy_from_slice(&append_time.to_be_bytes());
        fix_crc(b)
    };
    let parts = vec![log_append(0, 5_000), log_append(2, 6_000)];
    let want: Vec<i64> = parts
        .iter()
        .flat_map(|p| {
            let h = parse_header(p).unwrap();
            [h.max_timestamp; 2]
        })
        .collect();
    let merged = merge(&parts, RAW).unwrap();
    let set = RecordBatchDecoder::decode(&mut merged.batch.clone()).unwrap();
    let got: Vec<i64> = set.records.iter().map(|r| r.timestamp).collect();
    assert_eq!(got, want, "each record shows its source batch's append time");
    assert_eq!(want, vec![5_000, 5_000, 6_000, 6_000]);
    assert!(set.records.iter().all(|r| r.timestamp_type == TimestampType::Creation));
}

#[test]
fn batches_that_cannot_be_merged_are_refused_not_merged() {
    let lz4 = batch(0, 2, Compression::Lz4);
    let cases: Vec<(&str, Vec<Bytes>)> = vec![
        ("nothing", vec![]),
        ("two codecs", vec![lz4.clone(), batch(2, 2, Compression::Zstd)]),
        (
            "two codecs after none",
            vec![batch(0, 2, Compression::None), batch(2, 2, Compression::Zstd), batch(4, 1, Compression::Gzip)],
        ),
        ("a gap", vec![lz4.clone(), batch(3, 2, Compression::Lz4)]),
        ("an overlap", vec![lz4.clone(), batch(1, 2, Compression::Lz4)]),
        ("out of order", vec![batch(2, 2, Compression::Lz4), lz4.clone()]),
        ("a truncated part", vec![lz4.clone(), lz4.slice(..lz4.len() - 1)]),
    ];
    for (what, parts) in cases {
        assert!(merge(&parts, RAW).is_err(), "{what} must be refused");
    }
    // A control batch (COMMIT marker shape: the control bit set).
    let mut control = BytesMut::from(&batch(2, 1, Compression::None)[..]);
    control[22] |= 1 << 5;
    let e = merge(&[lz4.clone(), fix_crc(control)], RAW).unwrap_err().to_string();
    assert!(e.contains("only contiguous data batches"), "a control batch is never merged: {e}");
    // A compacted batch (a hole inside): its offsets are not contiguous.
    let mut holed = BytesMut::from(&batch(2, 2, Compression::None)[..]);
    holed[23..27].copy_from_slice(&2i32.to_be_bytes());
    let e = merge(&[lz4.clone(), fix_crc(holed)], RAW).unwrap_err().to_string();
    assert!(e.contains("only contiguous data batches"), "a batch with a hole is never merged: {e}");
    // A part corrupted on the wire.
    let mut flipped = BytesMut::from(&batch(2, 2, Compression::Lz4)[..]);
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let e = merge(&[lz4, flipped.freeze()], RAW).unwrap_err().to_string();
    assert!(e.contains("CRC"), "a corrupt part is refused: {e}");
}

fn fix_crc(mut b: BytesMut) -> Bytes {
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

proptest! {
    /// Seeded by proptest: any run of adjacent batches (random sizes and codec) merges into the
    /// same records; any corruption of a part's bytes is an error or a faithful merge, never a
    /// panic.
    #[test]
    fn random_runs_merge_faithfully_and_corrupt_parts_never_panic(
        sizes in proptest::collection::vec(1i64..6, 1..20),
        codec in 0usize..5,
        flip in any::<(usize, usize, u8)>(),
    ) {
        let compression = CODECS[codec];
        let mut at = 1_000;
        let mut parts = Vec::new();
        for n in &sizes {
            parts.push(batch(at, *n, compression));
            at += n;
        }
        let merged = merge(&parts, RAW).unwrap();
        assert_records(&merged, 1_000, at - 1_000, compression);
        let (i, pos, bit) = flip;
        let i = i % parts.len();
        let mut bad = BytesMut::from(&parts[i][..]);
        let pos = pos % bad.len();
        bad[pos] ^= 1 << (bit % 8);
        parts[i] = bad.freeze();
        let covered = pos >= 17; // the CRC and what it covers
        if let Ok(m) = merge(&parts, RAW) {
            // Only a bit outside the CRC (base offset, length, leader epoch, magic) can pass,
            // and then only if the parts still line up: the same records.
            prop_assert!(!covered, "a flipped bit at {} of part {} went unnoticed", pos, i);
            let (h, _) = split(&m.batch).unwrap().remove(0);
            prop_assert!(h.is_contiguous());
        }
    }
}

#[test]
fn parts_that_inflate_past_the_raw_limit_are_refused_before_they_are_all_decompressed() {
    // Four zstd batches of one record each: 8 MiB of zeros, a few hundred bytes compressed.
    let parts: Vec<Bytes> = (0..4)
        .map(|o| {
            let mut r = record(o, false, TimestampType::Creation);
            r.value = Some(Bytes::from(vec![0u8; 8 << 20]));
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                [r].iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::Zstd,
                },
            )
            .unwrap();
            buf.freeze()
        })
        .collect();
    assert!(parts.iter().all(|p| p.len() < 16 * 1024), "the parts are small as stored");
    let e = merge(&parts, 20 << 20).expect_err("32 MiB of records over a 20 MiB limit").to_string();
    assert!(e.contains("more than"), "{e}");
    assert_eq!(merge(&parts, 40 << 20).expect("within the limit").records, 4);
}

#[test]
fn the_raw_limit_counts_whole_decompressed_sections_and_the_records_not_only_record_bodies() {
    // Ten zstd parts of 100 records each, no key, value or headers: a record body is 3 of the
    // record's ~8 decompressed bytes, and every record read costs a `RawRecord` more.
    let parts: Vec<Bytes> = (0..10i64)
        .map(|i| {
            let records: Vec<Record> = (i * 100..i * 100 + 100)
                .map(|o| Record {
                    key: None,
                    value: None,
                    headers: Default::default(),
                    ..record(o, false, TimestampType::Creation)
                })
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                records.iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::Zstd,
                },
            )
            .unwrap();
            buf.freeze()
        })
        .collect();
    let raw: usize = parts
        .iter()
        .map(|p| crate::codecs::decompress(4, &p.slice(crate::batch::HEADER_SIZE..), usize::MAX).unwrap().len())
        .sum();
    assert!(
        merge(&parts, raw / 2).is_err(),
        "parts that decompress to {raw} bytes in all merged under max_raw = {}",
        raw / 2
    );
    assert!(merge(&parts, raw).is_err(), "the records read from {raw} bytes take more than {raw} bytes");
    let with_records = raw + 1000 * (RECORD_FRAMING_MAX + size_of::<RawRecord>());
    assert_eq!(merge(&parts, with_records).expect("within the limit").records, 1000);
}
