//! Quarantine batches: the records of a batch a failback cannot keep in place (a cluster's tail
//! past the line the other cluster copied up to), re-encoded for the quarantine topic. Each
//! record keeps its key, value, headers and timestamp byte for byte and gains headers saying
//! where it was: `kmp.quarantine.topic`, `.partition`, `.offset`, `.timestamp`, and for a
//! transactional batch `.producer-id` (its outcome is the original log's). The new batch is
//! plain (no producer id, no transaction) and compressed with the original's codec; its records
//! take consecutive offsets in the quarantine partition, one per record.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchHeader, put_varint};
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::reencode::{self, RawRecord};

pub const TOPIC_HEADER: &str = "kmp.quarantine.topic";
pub const PARTITION_HEADER: &str = "kmp.quarantine.partition";
pub const OFFSET_HEADER: &str = "kmp.quarantine.offset";
pub const TIMESTAMP_HEADER: &str = "kmp.quarantine.timestamp";
pub const PRODUCER_HEADER: &str = "kmp.quarantine.producer-id";

/// What [`quarantine_batch`] made of a batch: how many of its records lie in the range asked,
/// and the quarantine batch of those not skipped (`None` when none is left).
#[derive(Debug)]
pub struct Quarantined {
    pub in_range: usize,
    pub batch: Option<(Bytes, usize)>,
}

/// The records of `batch` (described by `header`, from `topic`-`partition`) at offsets in
/// `range`, less the first `skip` of them (quarantined before), re-encoded as one quarantine
/// batch with the number of records in it.
pub fn quarantine_batch(
    batch: &Bytes,
    header: &BatchHeader,
    topic: &str,
    partition: i32,
    range: std::ops::Range<i64>,
    skip: usize,
) -> Result<Quarantined, ProtocolError> {
    let in_range: Vec<RawRecord> = reencode::records(batch, header)?.into_iter().filter(|r| range.contains(&r.offset)).collect();
    let count = in_range.len();
    let records: Vec<RawRecord> = in_range.into_iter().skip(skip).collect();
    if records.is_empty() {
        return Ok(Quarantined { in_range: count, batch: None });
    }
    let producer = header.is_transactional().then_some(header.producer_id);
    let mut moved = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let mut extra: Vec<(&str, String)> = vec![
            (TOPIC_HEADER, topic.to_owned()),
            (PARTITION_HEADER, partition.to_string()),
            (OFFSET_HEADER, r.offset.to_string()),
            (TIMESTAMP_HEADER, r.timestamp.to_string()),
        ];
        if let Some(p) = producer {
            extra.push((PRODUCER_HEADER, p.to_string()));
        }
        moved.push(RawRecord {
            offset: i as i64,
            timestamp: r.timestamp,
            attributes: r.attributes,
            body: with_headers(&r.body, &extra)?,
        });
    }
    let plain = BatchHeader {
        base_offset: 0,
        attributes: header.compression(),
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        ..*header
    };
    let n = moved.len();
    Ok(Quarantined {
        in_range: count,
        batch: Some((reencode::encode_run(&moved, &plain)?, n)),
    })
}

/// A record body (key, value, headers) with `extra` headers after its own.
fn with_headers(body: &[u8], extra: &[(&str, String)]) -> Result<Bytes, ProtocolError> {
    let mut c = Cursor::new(body, 0, "record", Side::Broker);
    for _ in 0..2 {
        // key, then value: a length (-1 null) and the bytes
        let len = c.varint()?;
        if len > 0 {
            c.take(usize::try_from(len).map_err(|_| reencode::err(format!("record field length {len}")))?)?;
        }
    }
    let kv_end = c.pos;
    let count = c.varint()?;
    if count < 0 {
        return Err(reencode::err(format!("record header count {count}")));
    }
    let headers = &body[c.pos..];
    let mut out = BytesMut::with_capacity(body.len() + extra.iter().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>() + 4);
    out.put_slice(&body[..kv_end]);
    put_varint(&mut out, count + extra.len() as i64);
    out.put_slice(headers);
    for (k, v) in extra {
        put_varint(&mut out, k.len() as i64);
        out.put_slice(k.as_bytes());
        put_varint(&mut out, v.len() as i64);
        out.put_slice(v.as_bytes());
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    fn source_batch(compression: Compression, transactional: bool) -> Bytes {
        let records: Vec<Record> = (0..3)
            .map(|i| Record {
                transactional,
                control: false,
                partition_leader_epoch: 5,
                producer_id: if transactional { 77 } else { -1 },
                producer_epoch: if transactional { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset: 40 + i,
                // One batch: the encoder splits where offset - sequence changes.
                sequence: if transactional { i as i32 } else { i as i32 - 1 },
                timestamp: 1_700_000_000_000 + i * 1000,
                key: (i != 1).then(|| Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(format!("value-{i}"))),
                headers: [(StrBytes::from_static_str("h"), Some(Bytes::from_static(b"x")))].into_iter().collect(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
        buf.freeze()
    }

    #[test]
    fn quarantined_records_keep_key_value_headers_and_timestamp_and_say_where_they_were() {
        for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
            for transactional in [false, true] {
                let batch = source_batch(compression, transactional);
                let header = crate::batch::parse_header(&batch).unwrap();
                let q = quarantine_batch(&batch, &header, "orders", 3, 41..100, 0).unwrap();
                let (out, count) = q.batch.unwrap();
                assert_eq!((q.in_range, count), (2, 2), "records from offset 41 on");
                let set = RecordBatchDecoder::decode(&mut out.clone()).unwrap();
                let got = &set.records;
                assert_eq!(got.len(), 2);
                for (i, r) in got.iter().enumerate() {
                    let source = 41 + i as i64;
                    assert_eq!(r.offset, i as i64, "consecutive offsets in the quarantine partition");
                    assert!(!r.transactional && r.producer_id == -1, "a plain batch");
                    assert_eq!(r.timestamp, 1_700_000_000_000 + (source - 40) * 1000);
                    assert_eq!(r.key, (source != 41).then(|| Bytes::from(format!("k{}", source - 40))));
                    assert_eq!(r.value, Some(Bytes::from(format!("value-{}", source - 40))));
                    let h = |k: &str| r.headers.get(&StrBytes::from_string(k.to_owned())).cloned().flatten();
                    assert_eq!(h("h"), Some(Bytes::from_static(b"x")), "the record's own header");
                    assert_eq!(h(TOPIC_HEADER), Some(Bytes::from_static(b"orders")));
                    assert_eq!(h(PARTITION_HEADER), Some(Bytes::from_static(b"3")));
                    assert_eq!(h(OFFSET_HEADER), Some(Bytes::from(source.to_string())));
                    assert_eq!(h(TIMESTAMP_HEADER), Some(Bytes::from(r.timestamp.to_string())));
                    assert_eq!(h(PRODUCER_HEADER), transactional.then(|| Bytes::from_static(b"77")));
                }
            }
        }
    }

    #[test]
    fn a_batch_wholly_before_the_start_gives_nothing_and_a_corrupt_one_an_error() {
        let batch = source_batch(Compression::None, false);
        let header = crate::batch::parse_header(&batch).unwrap();
        assert!(quarantine_batch(&batch, &header, "t", 0, 43..100, 0).unwrap().batch.is_none());
        let q = quarantine_batch(&batch, &header, "t", 0, 40..42, 1).unwrap();
        assert_eq!(q.in_range, 2, "40 and 41 are in the range; 42 is not");
        let (out, count) = q.batch.unwrap();
        let set = RecordBatchDecoder::decode(&mut out.clone()).unwrap();
        assert_eq!(count, 1, "the first in range was quarantined before");
        let offset = set.records[0].headers.get(&StrBytes::from_static_str(OFFSET_HEADER)).cloned().flatten();
        assert_eq!(offset, Some(Bytes::from_static(b"41")));
        assert!(quarantine_batch(&batch, &header, "t", 0, 40..43, 3).unwrap().batch.is_none(), "all skipped");
        let mut bad = BytesMut::from(&batch[..]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(quarantine_batch(&bad.freeze(), &header, "t", 0, 0..100, 0).is_err(), "the CRC is checked");
    }
}
