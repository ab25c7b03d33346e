//! Hiding the mirror engine's filler records from clients of the proxy. A filler batch (made by
//! [`crate::batch::filler_batch`] or [`crate::batch::compressed_filler_batch`]: every record exactly
//! a filler record) is replaced in
//! Fetch responses by a transaction COMMIT marker batch over the same offsets (same base offset
//! and last offset delta, one control record at the last offset). Every client skips control
//! batches and moves its position past them, exactly as over the source's own transaction
//! markers — even when a whole response is fillers. (A zero-record batch is skipped too, but
//! librdkafka then leaves its reported position before the skipped offsets, unlike directly
//! against Kafka; the marker form keeps clients' positions identical to the source's.)
//!
//! ShareFetch responses get the same treatment ([`mask_share_fetch_response`]).
//!
//! Only topics the caller says may hold fillers (those that are or were mirror topics) are
//! looked at: a record keyed `__kmp_filler` in any other topic is an ordinary record.
//!
//! Sans-io. Finding fillers in a response without decoding it is [`fetch_has_fillers`]; the
//! response rewrite that uses [`mask_records`] lives in `rewrite`.

use bytes::{BufMut, Bytes, BytesMut};

use kafka_protocol::messages::{ApiKey, FetchResponse, ShareFetchResponse};

use crate::batch::{FILLER_HEADER, FILLER_KEY, HEADER_SIZE, MAX_COMPRESSED_FILLER_RECORDS, MAX_FILLER_RECORD_BYTES, parse_header, put_varint};
use crate::codec::{decode_response, encode_response};
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

/// A topic as a Fetch or ShareFetch response names it: by name (Fetch v4-12) or by id (v13+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRef<'a> {
    Name(&'a [u8]),
    Id([u8; 16]),
}

/// Whether `batch` (a whole v2 batch) is a filler batch: a non-control batch whose records are
/// all filler records as [`crate::batch::filler_batch`] (uncompressed) or
/// [`crate::batch::compressed_filler_batch`] (zstd, stamped 0) write them (key
/// `__kmp_filler`, null value, header `kmp-filler: 1`) and nothing else. On a compacted mirror
/// topic the log cleaner keeps a filler batch with some of its records removed (they share one
/// key) and, once it sets the delete horizon, re-bases the timestamp deltas: offset deltas
/// only have to increase within the batch's range, timestamp deltas may be anything.
/// A client's batch on a writable topic that was a mirror topic (which may hold real fillers)
/// is masked only if it consists of nothing but such records: one real record in it keeps the
/// batch as it is. An uncompressed batch is checked without allocating; a compressed one that
/// may be a filler batch is decompressed once, to at most
/// [`MAX_COMPRESSED_FILLER_RECORDS`] × [`MAX_FILLER_RECORD_BYTES`] bytes (about 4.8 MB).
pub fn is_filler_batch(batch: &[u8]) -> bool {
    let Ok(h) = parse_header(batch) else { return false };
    if h.is_control() || h.records_count <= 0 || batch.len() <= HEADER_SIZE {
        return false;
    }
    if h.compression() == 0 {
        return all_fillers(&batch[HEADER_SIZE..], &h);
    }
    // A compressed batch is looked into only if it may be one the engine wrote: every record
    // stamped 0 (max timestamp 0; the log cleaner keeps the records' own timestamps when it sets a
    // delete horizon as the batch's base timestamp), and no longer than the engine makes them —
    // a header no real producer's batch has, so reading a compacted topic with tombstones past
    // their horizon decompresses nothing here. Its records are then decompressed (bounded by what
    // that many fillers take) and must all be fillers; a real batch fails at its first record.
    let stamped_by_engine = h.max_timestamp == 0 && (h.base_timestamp == 0 || h.attributes & DELETE_HORIZON != 0);
    if !stamped_by_engine || h.records_count > MAX_COMPRESSED_FILLER_RECORDS {
        return false;
    }
    let limit = h.records_count as usize * MAX_FILLER_RECORD_BYTES;
    let section = Bytes::copy_from_slice(&batch[HEADER_SIZE..]);
    match crate::codecs::decompress(h.compression(), &section, limit) {
        Ok(records) => all_fillers(&records, &h),
        Err(_) => false,
    }
}

/// The delete-horizon bit of a batch's attributes (set by the log cleaner of a compacted topic).
const DELETE_HORIZON: i16 = 1 << 6;

/// Whether `records` (a batch's uncompressed records section) is exactly `h.records_count`
/// filler records with increasing offset deltas inside the batch's range.
fn all_fillers(records: &[u8], h: &crate::batch::BatchHeader) -> bool {
    let mut at = 0;
    let mut previous = -1i64;
    for _ in 0..h.records_count {
        match filler_record(records, at) {
            Some((end, delta)) if delta > previous && delta <= i64::from(h.last_offset_delta) => {
                at = end;
                previous = delta;
            }
            _ => return false,
        }
    }
    at == records.len()
}

/// If a filler record starts at `at` in `buf`: where it ends and its offset delta.
fn filler_record(buf: &[u8], at: usize) -> Option<(usize, i64)> {
    let mut pos = at;
    let len = usize::try_from(read_zigzag(buf, &mut pos)?).ok()?;
    let end = pos.checked_add(len).filter(|&e| e <= buf.len())?;
    let body = &buf[..end];
    let byte = |pos: &mut usize, want: u8| -> Option<()> { (body.get(*pos) == Some(&want)).then(|| *pos += 1) };
    let bytes = |pos: &mut usize, want: &[u8]| -> Option<()> { (body.get(*pos..*pos + want.len()) == Some(want)).then(|| *pos += want.len()) };
    let int = |pos: &mut usize, want: i64| -> Option<()> { (read_zigzag(body, pos)? == want).then_some(()) };
    byte(&mut pos, 0)?; // attributes
    // The timestamp delta is the engine's 0 until the log cleaner sets the batch's delete
    // horizon: its first timestamp then holds the horizon and the deltas are re-based on it.
    read_zigzag(body, &mut pos)?;
    let delta = read_zigzag(body, &mut pos)?;
    int(&mut pos, FILLER_KEY.len() as i64)?;
    bytes(&mut pos, FILLER_KEY)?;
    int(&mut pos, -1)?; // null value
    int(&mut pos, 1)?; // one header
    int(&mut pos, FILLER_HEADER.len() as i64)?;
    bytes(&mut pos, FILLER_HEADER)?;
    int(&mut pos, 1)?;
    bytes(&mut pos, b"1")?;
    (pos == end).then_some((end, delta))
}

/// A zigzag varint (Kafka's record encoding) at `pos` in `buf` (at most 10 bytes); moves `pos`.
fn read_zigzag(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

/// Whether a records blob (as in a Fetch response) holds at least one filler batch.
pub fn records_have_fillers(records: &[u8]) -> bool {
    batches(records).any(|(_, b)| is_filler_batch(b))
}

/// Whole batches of a records blob with their start position (a trailing partial batch ends it).
fn batches(records: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rest = records.get(pos..)?;
        let h = parse_header(rest).ok()?;
        let size = h.size();
        let b = rest.get(..size)?;
        let at = pos;
        pos += size;
        Some((at, b))
    })
}

/// `records` with every filler batch replaced by a COMMIT marker batch over the same offsets.
pub fn mask_records(records: &Bytes) -> Bytes {
    let mut out = BytesMut::with_capacity(records.len());
    let mut end = 0usize;
    for (at, b) in batches(records) {
        if is_filler_batch(b) {
            out.put_slice(&marker_batch_like(b));
        } else {
            out.put_slice(b);
        }
        end = at + b.len();
    }
    out.put_slice(&records[end..]); // a trailing partial batch stays as the broker sent it
    out.freeze()
}

/// A COMMIT marker batch over `batch`'s offsets: its base offset, last offset delta, timestamps
/// and producer fields, one control record at the last offset, CRC recomputed.
fn marker_batch_like(batch: &[u8]) -> BytesMut {
    let last_delta = i32::from_be_bytes([batch[23], batch[24], batch[25], batch[26]]);
    let mut record = BytesMut::new();
    record.put_i8(0); // attributes
    put_varint(&mut record, 0); // timestamp delta
    put_varint(&mut record, i64::from(last_delta));
    put_varint(&mut record, 4);
    record.put_i16(0); // control key version
    record.put_i16(COMMIT);
    put_varint(&mut record, 6);
    record.put_i16(0); // control value version
    record.put_i32(0); // coordinator epoch
    put_varint(&mut record, 0); // no headers
    let mut b = BytesMut::with_capacity(HEADER_SIZE + record.len() + 1);
    b.put_slice(&batch[..HEADER_SIZE]);
    let mut len = BytesMut::new();
    put_varint(&mut len, record.len() as i64);
    let batch_length = (HEADER_SIZE - 12 + len.len() + record.len()) as i32;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    b[21..23].copy_from_slice(&(TRANSACTIONAL | CONTROL).to_be_bytes());
    b[57..61].copy_from_slice(&1i32.to_be_bytes());
    b.put_slice(&len);
    b.put_slice(&record);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Control record type of a transaction commit marker.
const COMMIT: i16 = 1;
const TRANSACTIONAL: i16 = 1 << 4;
const CONTROL: i16 = 1 << 5;

/// Rewrites a Fetch response frame (prefix included) with every filler batch masked. Call only
/// when [`fetch_has_fillers`] said so: this decodes and re-encodes the whole response.
pub fn mask_fetch_response(frame: &Bytes, version: i16, maskable: &dyn Fn(TopicRef<'_>) -> bool) -> Result<Bytes, ProtocolError> {
    let (header, mut resp) = decode_response::<FetchResponse>(frame, ApiKey::Fetch, version)?;
    for t in &mut resp.responses {
        let topic = if version >= 13 {
            TopicRef::Id(*t.topic_id.as_bytes())
        } else {
            TopicRef::Name(t.topic.0.as_bytes())
        };
        if !maskable(topic) {
            continue;
        }
        for p in &mut t.partitions {
            if let Some(r) = &p.records
                && records_have_fillers(r)
            {
                p.records = Some(mask_records(r));
            }
        }
    }
    encode_response(header.correlation_id, ApiKey::Fetch, version, &resp)
}

/// Rewrites a ShareFetch response frame (prefix included) with every filler batch masked, or
/// `None` when it carries none (forward it as is). Share consumers acknowledge the masked
/// offsets as GAP — KIP-932's type for acquired offsets without a deliverable record — exactly
/// as they do for the source's own transaction markers, so the share-partition start offset
/// moves past them. ShareFetch is decoded every time (it is rare next to Fetch).
pub fn mask_share_fetch_response(frame: &Bytes, version: i16, maskable: &dyn Fn(TopicRef<'_>) -> bool) -> Result<Option<Bytes>, ProtocolError> {
    let (header, mut resp) = decode_response::<ShareFetchResponse>(frame, ApiKey::ShareFetch, version)?;
    let mut masked = false;
    for t in &mut resp.responses {
        if !maskable(TopicRef::Id(*t.topic_id.as_bytes())) {
            continue;
        }
        for p in &mut t.partitions {
            if let Some(r) = &p.records
                && records_have_fillers(r)
            {
                p.records = Some(mask_records(r));
                masked = true;
            }
        }
    }
    if !masked {
        return Ok(None);
    }
    encode_response(header.correlation_id, ApiKey::ShareFetch, version, &resp).map(Some)
}

/// Whether any partition of a `maskable` topic in a Fetch response frame (prefix included)
/// carries a filler batch. Walks the response without allocating, for every Fetch version the
/// proxy offers (4+).
pub fn fetch_has_fillers(frame: &[u8], version: i16, maskable: &dyn Fn(TopicRef<'_>) -> bool) -> Result<bool, ProtocolError> {
    let flexible = version >= 12;
    let mut c = Cursor::new(frame, PREFIX + 4, "Fetch response", Side::Broker);
    if flexible {
        c.skip_tagged_fields()?; // response header v1
    }
    c.skip(4)?; // throttle_time_ms
    if version >= 7 {
        c.skip(2 + 4)?; // error_code, session_id
    }
    // An array's count, checked against the bytes left (negative: null, no elements).
    let array = |c: &mut Cursor<'_>| -> Result<i64, ProtocolError> {
        let n = if flexible { i64::from(c.compact_array_len()?) } else { i64::from(c.i32()?) };
        c.count(n.max(0) as u64)?;
        Ok(n)
    };
    for _ in 0..array(&mut c)?.max(0) {
        let topic = if version >= 13 {
            let mut id = [0u8; 16];
            id.copy_from_slice(c.take(16)?);
            TopicRef::Id(id)
        } else if flexible {
            let n = c.uvarint()?;
            TopicRef::Name(c.take((n as usize).saturating_sub(1))?)
        } else {
            let n = c.i16()?;
            TopicRef::Name(c.take(n.max(0) as usize)?)
        };
        let wanted = maskable(topic);
        for _ in 0..array(&mut c)?.max(0) {
            c.skip(4 + 2 + 8 + 8)?; // index, error, high watermark, last stable offset
            if version >= 5 {
                c.skip(8)?; // log start offset
            }
            for _ in 0..array(&mut c)?.max(0) {
                c.skip(8 + 8)?;
                if flexible {
                    c.skip_tagged_fields()?;
                }
            }
            if version >= 11 {
                c.skip(4)?; // preferred_read_replica
            }
            let len = if flexible { i64::from(c.uvarint()?) - 1 } else { i64::from(c.i32()?) };
            let records = if len > 0 { c.take(len as usize)? } else { &[] };
            if wanted && records_have_fillers(records) {
                return Ok(true);
            }
            if flexible {
                c.skip_tagged_fields()?;
            }
        }
        if flexible {
            c.skip_tagged_fields()?;
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
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
        let mut b = BytesMut::from(&filler_batch(n, 1000, fields()).unwrap()[..]);
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

    fn compressed_filler_at(base: i64, n: i32, timestamp: i64) -> Bytes {
        let section = crate::batch::compressed_filler_section(n).unwrap();
        let mut b = BytesMut::from(&crate::batch::compressed_filler_batch(n, timestamp, fields(), &section)[..]);
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
            let b = compressed_filler_at(5, n, 0);
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
        let mut cleaned = BytesMut::from(&compressed_filler_at(0, 3, 0)[..]);
        let attributes = i16::from_be_bytes([cleaned[21], cleaned[22]]) | DELETE_HORIZON;
        cleaned[21..23].copy_from_slice(&attributes.to_be_bytes());
        cleaned[27..35].copy_from_slice(&1_700_000_000_000i64.to_be_bytes());
        let crc = crc32c::crc32c(&cleaned[21..]);
        cleaned[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(is_filler_batch(&cleaned), "a cleaned compressed filler batch (horizon set, records stamped 0)");
        cleaned[35..43].copy_from_slice(&1_700_000_000_000i64.to_be_bytes());
        assert!(!is_filler_batch(&cleaned), "a batch with a real max timestamp is not looked into");
        // More records than the engine puts in one compressed batch: not decompressed at all.
        let mut many = BytesMut::from(&compressed_filler_at(0, 3, 0)[..]);
        many[57..61].copy_from_slice(&(crate::batch::MAX_COMPRESSED_FILLER_RECORDS + 1).to_be_bytes());
        assert!(!is_filler_batch(&many), "a count above the engine's limit");
        // A section that inflates past what its count of fillers can take stops there.
        let bomb = crate::codecs::compress(4, &vec![0u8; 10 << 20]).unwrap();
        let mut forged = BytesMut::from(&compressed_filler_at(0, 3, 0)[..HEADER_SIZE]);
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
}
