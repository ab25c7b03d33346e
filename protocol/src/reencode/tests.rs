use super::*;
use crate::batch::{parse_header, split};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

const CODECS: [Compression; 5] = [Compression::None, Compression::Gzip, Compression::Zstd, Compression::Lz4, Compression::Snappy];

fn record(o: i64) -> Record {
    let mut headers = kafka_protocol::indexmap::IndexMap::new();
    headers.insert(StrBytes::from_static_str("h"), Some(Bytes::from(format!("hv-{o}"))));
    Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        producer_id: 5,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: o,
        sequence: o as i32,
        // Not monotonic: the re-encoder must keep each record's own timestamp.
        timestamp: 1_000 + (o * 7919) % 13,
        key: if o % 5 == 0 { None } else { Some(Bytes::from(format!("key-{o}"))) },
        value: if o % 7 == 0 { None } else { Some(Bytes::from(format!("value-{o}"))) },
        headers,
        delete_horizon: false,
    }
}

/// A batch as the cleaner leaves it: records at `offsets` (absolute), first/last offset of the
/// original batch kept.
fn compacted(offsets: &[i64], first: i64, last: i64, compression: Compression) -> Bytes {
    let records: Vec<Record> = offsets.iter().map(|&o| record(o)).collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression }).unwrap();
    let mut b = buf.to_vec();
    assert_eq!(offsets[0], first, "the helper keeps the first record at the batch base");
    // Keep the original batch's last offset, as the cleaner does, and fix the CRC.
    b[23..27].copy_from_slice(&((last - first) as i32).to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

fn shape(pieces: &[Piece]) -> Vec<(char, i64, i64)> {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Run { base, records, .. } => ('R', *base, i64::from(*records)),
            Piece::Gap { base, count, .. } => ('G', *base, *count),
        })
        .collect()
}

/// Every run is a valid contiguous batch in the source codec whose records equal the source's.
fn check_runs(pieces: &[Piece], h: &BatchHeader) {
    for p in pieces {
        if let Piece::Run { base, records, batch } = p {
            let (rh, _) = split(batch).unwrap().remove(0);
            assert!(rh.is_contiguous() && rh.records_count == *records && rh.base_offset == *base);
            assert_eq!(rh.compression(), h.compression(), "codec kept");
            assert!(crate::batch::crc_is_valid(batch), "CRC of the run at {base}");
            let set = RecordBatchDecoder::decode(&mut batch.clone()).unwrap();
            assert_eq!(set.records.len() as i32, *records);
            for r in set.records {
                let want = record(r.offset);
                assert_eq!(
                    (r.key, r.value, r.headers, r.timestamp),
                    (want.key, want.value, want.headers, want.timestamp),
                    "record {}",
                    r.offset
                );
            }
        }
    }
}

#[test]
fn holes_become_runs_and_gaps_that_cover_the_batch_exactly() {
    for compression in CODECS {
        let b = compacted(&[10, 11, 14, 15, 16, 19], 10, 21, compression);
        let h = parse_header(&b).unwrap();
        assert!(!h.is_contiguous());
        let pieces = split_holes(&b, &h).unwrap();
        assert_eq!(
            shape(&pieces),
            vec![('R', 10, 2), ('G', 12, 2), ('R', 14, 3), ('G', 17, 2), ('R', 19, 1), ('G', 20, 2)],
            "{compression:?}"
        );
        check_runs(&pieces, &h);
    }
}

#[test]
fn the_part_of_a_batch_from_an_offset_inside_it_is_re_encoded_with_nothing_lost() {
    for compression in CODECS {
        let offsets: Vec<i64> = (0..100).collect();
        let b = compacted(&offsets, 0, 99, compression);
        let h = parse_header(&b).unwrap();
        for from in [1, 37, 98, 99] {
            let pieces = split_from(&b, &h, from).unwrap();
            assert_eq!(shape(&pieces), vec![('R', from, 100 - from)], "{compression:?} from {from}");
            check_runs(&pieces, &h);
        }
        assert_eq!(shape(&split_from(&b, &h, 0).unwrap()), vec![('R', 0, 100)]);
    }
}

#[test]
fn a_start_inside_a_compacted_batch_keeps_later_runs_and_fills_only_holes() {
    let b = compacted(&[10, 11, 14, 15, 16, 19], 10, 21, Compression::Lz4);
    let h = parse_header(&b).unwrap();
    type Shape = Vec<(char, i64, i64)>;
    let cases: [(i64, Shape); 4] = [
        (11, vec![('R', 11, 1), ('G', 12, 2), ('R', 14, 3), ('G', 17, 2), ('R', 19, 1), ('G', 20, 2)]),
        (12, vec![('G', 12, 2), ('R', 14, 3), ('G', 17, 2), ('R', 19, 1), ('G', 20, 2)]),
        (15, vec![('R', 15, 2), ('G', 17, 2), ('R', 19, 1), ('G', 20, 2)]),
        (20, vec![('G', 20, 2)]),
    ];
    for (from, want) in cases {
        let pieces = split_from(&b, &h, from).unwrap();
        assert_eq!(shape(&pieces), want, "from {from}");
        check_runs(&pieces, &h);
    }
}

#[test]
fn duplicate_header_keys_and_raw_bytes_survive_re_encoding() {
    // Two headers with the same key: a map-based record type would keep one.
    let mut raw = BytesMut::new();
    for (delta, value) in [(0i64, b"a" as &[u8]), (1, b"b")] {
        let mut rec = BytesMut::new();
        rec.put_u8(0);
        put_varint(&mut rec, 0);
        put_varint(&mut rec, delta);
        put_varint(&mut rec, 1);
        rec.put_slice(b"k");
        put_varint(&mut rec, value.len() as i64);
        rec.put_slice(value);
        put_varint(&mut rec, 2);
        for hv in [b"x1", b"x2"] {
            put_varint(&mut rec, 3);
            rec.put_slice(b"dup");
            put_varint(&mut rec, 2);
            rec.put_slice(hv);
        }
        put_varint(&mut raw, rec.len() as i64);
        raw.put_slice(&rec);
    }
    let h = BatchHeader {
        base_offset: 40,
        batch_length: (HEADER_SIZE - 12 + raw.len()) as i32,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: 1,
        base_timestamp: 5,
        max_timestamp: 5,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: 2,
    };
    let mut b = BytesMut::new();
    b.put_i64(40);
    b.put_i32(h.batch_length);
    b.put_i32(0);
    b.put_i8(2);
    b.put_u32(0);
    b.put_i16(0);
    b.put_i32(1);
    b.put_i64(5);
    b.put_i64(5);
    b.put_i64(-1);
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(2);
    b.put_slice(&raw);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let b = b.freeze();
    let pieces = split_from(&b, &h, 41).unwrap();
    let Piece::Run { batch, .. } = &pieces[0] else { panic!("a run") };
    // Key, value and both headers of the second record, as they were sent.
    let body: &[u8] = &[2, b'k', 2, b'b', 4, 6, b'd', b'u', b'p', 4, b'x', b'1', 6, b'd', b'u', b'p', 4, b'x', b'2'];
    assert!(batch.ends_with(body), "both `dup` headers kept byte for byte: {:?}", &batch[HEADER_SIZE..]);
    assert_eq!(records(batch, &parse_header(batch).unwrap()).unwrap()[0].offset, 41);
}

#[test]
fn hostile_record_counts_and_lengths_are_errors_not_panics() {
    let b = compacted(&[0, 1, 2], 0, 2, Compression::None);
    let mut h = parse_header(&b).unwrap();
    for count in [i32::MAX, -1, 4, 2] {
        h.records_count = count;
        assert!(records(&b, &h).is_err(), "records_count {count} must be refused");
    }
    let h = parse_header(&b).unwrap();
    let mut cut = BytesMut::from(&b[..]);
    cut.truncate(b.len() - 3);
    assert!(records(&cut.freeze(), &h).is_err(), "a truncated record is refused");
    let mut bad = BytesMut::from(&b[..]);
    bad[HEADER_SIZE] = 0x7f; // first record length: huge
    assert!(records(&bad.freeze(), &h).is_err());
}
