//! Tests of filler recognition and masking (uncompressed and compressed filler batches, Fetch
//! and ShareFetch responses).

use super::*;
use crate::batch::{ProducerFields, filler_batch, split};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// Every topic may hold fillers.
const ALL: fn(TopicRef<'_>) -> bool = |_| true;

fn fields() -> ProducerFields {
    ProducerFields {
        producer_id: 9,
        producer_epoch: 0,
        base_sequence: 0,
    }
}

fn real_batch(base: i64, n: i64, key: &'static [u8]) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base + i,
            sequence: -1 + i as i32,
            timestamp: 1000,
            key: Some(Bytes::from_static(key)),
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

fn filler_at(base: i64, n: i32) -> Bytes {
    let mut b = BytesMut::from(&filler_batch(n, fields()).unwrap()[..]);
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b.freeze()
}

fn fetch_response(records: Bytes, topics: usize) -> kafka_protocol::messages::FetchResponse {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    let mut r = kafka_protocol::messages::FetchResponse::default();
    for t in 0..topics {
        let mut topic = FetchableTopicResponse::default();
        topic.topic = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(format!("t{t}")));
        topic.topic_id = uuid::Uuid::from_bytes([t as u8 + 1; 16]);
        for p in 0..2 {
            let mut pd = PartitionData::default();
            pd.partition_index = p;
            pd.high_watermark = 10;
            pd.aborted_transactions = Some(vec![]);
            // Only the last partition of the last topic carries `records`.
            pd.records = Some(if t + 1 == topics && p == 1 { records.clone() } else { real_batch(0, 1, b"x") });
            topic.partitions.push(pd);
        }
        r.responses.push(topic);
    }
    r
}

#[test]
fn the_scanner_finds_fillers_in_every_fetch_version_and_masking_removes_them() {
    let mut with = BytesMut::new();
    with.put_slice(&real_batch(0, 2, b"a"));
    with.put_slice(&filler_at(2, 3));
    let with = with.freeze();
    for v in 4..=18 {
        let plain = crate::codec::encode_response(7, ApiKey::Fetch, v, &fetch_response(real_batch(0, 3, b"a"), 2)).unwrap();
        assert!(!fetch_has_fillers(&plain, v, &ALL).unwrap(), "v{v}: no fillers");
        let frame = crate::codec::encode_response(7, ApiKey::Fetch, v, &fetch_response(with.clone(), 2)).unwrap();
        assert!(fetch_has_fillers(&frame, v, &ALL).unwrap(), "v{v}: fillers found");
        let masked = mask_fetch_response(&frame, v, &ALL).unwrap();
        assert!(!fetch_has_fillers(&masked, v, &ALL).unwrap(), "v{v}: masked");
        let (_, r) = decode_response::<FetchResponse>(&masked, ApiKey::Fetch, v).unwrap();
        let recs = r.responses[1].partitions[1].records.clone().unwrap();
        let shape: Vec<_> = split(&recs).unwrap().iter().map(|(h, _)| (h.base_offset, h.records_count)).collect();
        assert_eq!(shape, vec![(0, 2), (2, 1)], "v{v}");
    }
}

#[test]
fn fillers_are_masked_only_in_topics_that_may_hold_them_by_name_and_by_id() {
    let mut with = BytesMut::new();
    with.put_slice(&real_batch(0, 2, b"a"));
    with.put_slice(&filler_at(2, 3));
    let with = with.freeze();
    for v in 4..=18 {
        // The fillers are in topic t1 (id [2; 16]); only t0 (id [1; 16]) is a mirror topic.
        let frame = crate::codec::encode_response(7, ApiKey::Fetch, v, &fetch_response(with.clone(), 2)).unwrap();
        let only_t0 = |t: TopicRef<'_>| matches!(t, TopicRef::Name(b"t0") | TopicRef::Id([1, ..]));
        assert!(
            !fetch_has_fillers(&frame, v, &only_t0).unwrap(),
            "v{v}: a plain topic's `__kmp_filler` records are not fillers"
        );
        let unmasked = mask_fetch_response(&frame, v, &only_t0).unwrap();
        assert_eq!(unmasked, frame, "v{v}: nothing changes in a topic that never was a mirror topic");
        let only_t1 = |t: TopicRef<'_>| matches!(t, TopicRef::Name(b"t1") | TopicRef::Id([2, ..]));
        assert!(fetch_has_fillers(&frame, v, &only_t1).unwrap(), "v{v}: the mirror topic's fillers are found");
        let masked = mask_fetch_response(&frame, v, &only_t1).unwrap();
        assert!(!fetch_has_fillers(&masked, v, &ALL).unwrap(), "v{v}: and masked");
    }
}

#[test]
fn share_fetch_responses_are_masked_only_when_they_carry_fillers() {
    use kafka_protocol::messages::share_fetch_response::{AcquiredRecords, PartitionData as SharePartition, ShareFetchableTopicResponse};
    let response = |records: Bytes| {
        let mut p = SharePartition::default();
        p.records = Some(records);
        let mut a = AcquiredRecords::default();
        (a.first_offset, a.last_offset, a.delivery_count) = (0, 4, 1);
        p.acquired_records = vec![a];
        let mut t = ShareFetchableTopicResponse::default();
        t.partitions = vec![p];
        let mut r = ShareFetchResponse::default();
        r.responses = vec![t];
        r
    };
    let plain = crate::codec::encode_response(3, ApiKey::ShareFetch, 1, &response(real_batch(0, 5, b"a"))).unwrap();
    assert!(mask_share_fetch_response(&plain, 1, &ALL).unwrap().is_none(), "no fillers: forwarded as is");
    let mut with = BytesMut::new();
    with.put_slice(&real_batch(0, 2, b"a"));
    with.put_slice(&filler_at(2, 3));
    let frame = crate::codec::encode_response(3, ApiKey::ShareFetch, 1, &response(with.freeze())).unwrap();
    let masked = mask_share_fetch_response(&frame, 1, &ALL).unwrap().expect("fillers masked");
    let (_, r) = decode_response::<ShareFetchResponse>(&masked, ApiKey::ShareFetch, 1).unwrap();
    let p = &r.responses[0].partitions[0];
    let recs = p.records.clone().unwrap();
    let batches = split(&recs).unwrap();
    let shape: Vec<_> = batches.iter().map(|(h, _)| (h.base_offset, h.records_count)).collect();
    assert_eq!(shape, vec![(0, 2), (2, 1)], "the filler run became one marker batch over offsets 2-4");
    assert!(!records_have_fillers(&recs));
    assert_eq!(
        (p.acquired_records[0].first_offset, p.acquired_records[0].last_offset),
        (0, 4),
        "acquired ranges untouched"
    );
}

#[test]
fn filler_batches_are_recognised_and_real_ones_are_not() {
    assert!(is_filler_batch(&filler_at(0, 3)));
    assert!(!is_filler_batch(&real_batch(0, 2, b"k")));
    assert!(!is_filler_batch(&real_batch(0, 1, b"__kmp_fillex")), "same length, other key");
    assert!(
        !is_filler_batch(&real_batch(0, 1, b"__kmp_filler")),
        "the filler key with a value is a client's record"
    );
    for n in [1, 2, 63, 64, 65, 300, 20_000] {
        assert!(is_filler_batch(&filler_at(0, n)), "{n} filler records (offset deltas past one varint byte)");
    }
}

fn compressed_filler_at(base: i64, n: i32) -> Bytes {
    let section = crate::batch::compressed_filler_section(n).unwrap();
    let mut b = BytesMut::from(&crate::batch::compressed_filler_batch(n, fields(), &section)[..]);
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b.freeze()
}

/// A record's key, value and whether it carries the filler header.
type Shape = (Option<&'static [u8]>, Option<&'static [u8]>, bool);

/// A batch of `records` (all at `timestamp`) compressed with `compression`.
fn compressed_batch(records: &[Shape], timestamp: i64, compression: Compression) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, &(key, value, filler_header))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: 9,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp,
            key: key.map(Bytes::from_static),
            value: value.map(Bytes::from_static),
            headers: if filler_header {
                [(
                    kafka_protocol::protocol::StrBytes::from_static_str("kmp-filler"),
                    Some(Bytes::from_static(b"1")),
                )]
                .into_iter()
                .collect()
            } else {
                Default::default()
            },
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression }).unwrap();
    buf.freeze()
}

#[test]
fn a_compressed_filler_batch_stamped_zero_is_masked_in_every_codec_the_broker_may_store_it_in() {
    for n in [1, 2, 1000, crate::batch::MAX_COMPRESSED_FILLER_RECORDS] {
        let b = compressed_filler_at(5, n);
        assert!(is_filler_batch(&b), "{n} zstd filler records");
        let masked = mask_records(&b);
        let shape: Vec<_> = split(&masked)
            .unwrap()
            .iter()
            .map(|(h, _)| (h.base_offset, h.next_offset(), h.is_control()))
            .collect();
        assert_eq!(shape, vec![(5, 5 + i64::from(n), true)], "{n} fillers become one marker over their offsets");
    }
    // A destination topic with its own compression.type recompresses what the engine sent.
    let filler = (Some(&b"__kmp_filler"[..]), None, true);
    for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let b = compressed_batch(&[filler; 7], 0, c);
        assert_eq!(split(&b).unwrap().len(), 1, "{c:?}: one batch");
        assert!(is_filler_batch(&b), "{c:?}");
    }
}

#[test]
fn a_compressed_batch_is_masked_only_if_every_record_is_a_filler_and_the_engine_could_have_written_it() {
    let filler = (Some(&b"__kmp_filler"[..]), None, true);
    let real = (Some(&b"__kmp_filler"[..]), Some(&b"v"[..]), true);
    assert!(
        !is_filler_batch(&compressed_batch(&[filler, filler, real], 0, Compression::Zstd)),
        "one real record at the end"
    );
    assert!(!is_filler_batch(&compressed_batch(&[real], 0, Compression::Lz4)), "a real record stamped 0");
    assert!(
        !is_filler_batch(&compressed_batch(&[filler; 3], 1_700_000_000_000, Compression::Zstd)),
        "compressed fillers are only ever stamped 0 by the engine"
    );
    assert!(
        !is_filler_batch(&compressed_batch(&[(None, None, false)], 0, Compression::Zstd)),
        "an empty record"
    );
    // After the log cleaner set a delete horizon: the horizon is the base timestamp, the
    // records keep theirs (0), so the max timestamp stays 0.
    let mut cleaned = BytesMut::from(&compressed_filler_at(0, 3)[..]);
    let attributes = i16::from_be_bytes([cleaned[21], cleaned[22]]) | DELETE_HORIZON;
    cleaned[21..23].copy_from_slice(&attributes.to_be_bytes());
    cleaned[27..35].copy_from_slice(&1_700_000_000_000i64.to_be_bytes());
    let crc = crc32c::crc32c(&cleaned[21..]);
    cleaned[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(is_filler_batch(&cleaned), "a cleaned compressed filler batch (horizon set, records stamped 0)");
    cleaned[35..43].copy_from_slice(&1_700_000_000_000i64.to_be_bytes());
    assert!(!is_filler_batch(&cleaned), "a batch with a real max timestamp is not looked into");
    // More records than the engine puts in one compressed batch: not decompressed at all.
    let mut many = BytesMut::from(&compressed_filler_at(0, 3)[..]);
    many[57..61].copy_from_slice(&(crate::batch::MAX_COMPRESSED_FILLER_RECORDS + 1).to_be_bytes());
    assert!(!is_filler_batch(&many), "a count above the engine's limit");
    // A section that inflates past what its count of fillers can take stops there.
    let bomb = crate::codecs::compress(4, &vec![0u8; 10 << 20]).unwrap();
    let mut forged = BytesMut::from(&compressed_filler_at(0, 3)[..HEADER_SIZE]);
    forged.put_slice(&bomb);
    assert!(!is_filler_batch(&forged), "a zstd bomb behind a filler header");
}

#[test]
fn a_batch_with_one_real_record_among_filler_shaped_ones_is_not_a_filler_batch() {
    // A client writing to a stopped (writable) former mirror topic: a batch that starts like
    // a filler must not be masked together with its other records.
    let filler = filler_at(0, 3);
    let mut forged = BytesMut::from(&filler[..]);
    let last = forged.len() - 1;
    forged[last] = b'2'; // the last record's header value
    assert!(!is_filler_batch(&forged), "one record differs");
    let mut longer = BytesMut::from(&filler[..]);
    longer.put_u8(0);
    assert!(!is_filler_batch(&longer), "trailing bytes after the counted records");
    let mut fewer = BytesMut::from(&filler[..]);
    fewer[57..61].copy_from_slice(&2i32.to_be_bytes()); // records count 2 of 3 present
    assert!(!is_filler_batch(&fewer), "a count that does not cover the records");
    let mut more = BytesMut::from(&filler[..]);
    more[57..61].copy_from_slice(&4i32.to_be_bytes());
    assert!(!is_filler_batch(&more), "a count beyond the records");
}

#[test]
fn a_filler_batch_the_log_cleaner_thinned_out_is_still_a_filler_batch() {
    // Compaction keeps a batch's header (offset range) and drops records; every filler record
    // has the same key, so mostly only the last one stays.
    let filler = filler_at(100, 3);
    let records = &filler[HEADER_SIZE..];
    let first_len = 1 + records[0] as usize / 2; // a one-byte length prefix (zigzag)
    let second_len = 1 + records[first_len] as usize / 2;
    let mut kept = BytesMut::from(&filler[..HEADER_SIZE]);
    kept.put_slice(&records[first_len + second_len..]); // only the record at delta 2
    kept[57..61].copy_from_slice(&1i32.to_be_bytes());
    assert!(is_filler_batch(&kept), "one filler record at offset delta 2 of 0..2");
    let mut beyond = BytesMut::from(&filler[..]);
    beyond[23..27].copy_from_slice(&1i32.to_be_bytes()); // last offset delta 1 < the record's 2
    assert!(!is_filler_batch(&beyond), "an offset delta beyond the batch's range");
    let mut repeated = BytesMut::from(&filler[..HEADER_SIZE]);
    repeated.put_slice(&records[..first_len]);
    repeated.put_slice(&records[..first_len]);
    repeated[57..61].copy_from_slice(&2i32.to_be_bytes());
    assert!(!is_filler_batch(&repeated), "offset deltas must increase");
}

#[test]
fn a_cleaned_filler_batch_with_a_delete_horizon_is_recognised() {
    // Bytes as Kafka 4.1.2's log cleaner left a one-record filler batch over offsets 10-28 of
    // a compacted mirror topic (attributes 0x40: delete horizon set; timestamp delta 0x9989).
    let cleaned = hex(concat!(
        "000000000000000a00000053000000000247031ad7004000000012000001a245194aca000001a24519287d",
        "000000000000000000000000000a00000001420099890124185f5f6b6d705f66696c6c65720102146b6d70",
        "2d66696c6c65720231"
    ));
    assert!(is_filler_batch(&cleaned), "the cleaned filler batch");
    let mut keyed = cleaned.clone();
    let at = keyed.len() - 1;
    keyed[at] = b'2';
    assert!(!is_filler_batch(&keyed), "a record with another header value is not a filler");
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn masking_keeps_offsets_and_real_batches_and_empties_fillers() {
    let mut blob = BytesMut::new();
    blob.put_slice(&real_batch(0, 2, b"a"));
    blob.put_slice(&filler_at(2, 5));
    blob.put_slice(&real_batch(7, 1, b"b"));
    blob.put_slice(&filler_at(8, 1)[..20]); // partial trailing batch
    let masked = mask_records(&blob.freeze());
    let batches = split(&masked).unwrap();
    let shape: Vec<_> = batches
        .iter()
        .map(|(h, _)| (h.base_offset, h.last_offset_delta, h.records_count, h.is_control()))
        .collect();
    assert_eq!(shape, vec![(0, 1, 2, false), (2, 4, 1, true), (7, 0, 1, false)]);
    assert!(batches.iter().all(|(_, b)| crate::batch::crc_is_valid(b)), "CRCs valid");
    let decoded = RecordBatchDecoder::decode(&mut batches[1].1.clone()).unwrap();
    assert_eq!(decoded.records.len(), 1);
    let marker = &decoded.records[0];
    assert!(marker.control && marker.transactional);
    assert_eq!(marker.offset, 6, "the marker sits on the last filled offset");
    assert_eq!(marker.key.as_deref(), Some(&[0u8, 0, 0, 1][..]), "COMMIT control key");
    assert!(!records_have_fillers(&masked));
}
