//! Re-encoding a source batch whose records have holes (the log cleaner removed records but
//! kept the batch's original first and last offsets). A broker only accepts batches whose
//! offset deltas are exactly `0..count` through Produce, so such a batch becomes, in order,
//! contiguous runs — each re-encoded as its own batch in the original codec, records unchanged
//! (offsets, timestamps, keys, values, headers) — and gaps, to be written as fillers. This is the
//! only place the mirror decompresses data. Deciding when to call it belongs to the engine.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions};

use crate::batch::BatchHeader;
use crate::error::{ProtocolError, Side};

/// One piece of a batch with holes, in offset order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Contiguous records re-encoded as a batch that starts at `base` (producer fields still
    /// the source's; rewrite them before producing).
    Run { base: i64, records: i32, batch: Bytes },
    /// `count` offsets starting at `base` with no record.
    Gap { base: i64, count: i64, timestamp: i64 },
}

fn err(detail: String) -> ProtocolError {
    ProtocolError::Malformed { what: "record batch", detail, side: Side::Broker }
}

/// Splits `batch` (described by `header`) into runs and gaps covering exactly
/// `header.base_offset .. header.next_offset()`.
pub fn split_holes(batch: &Bytes, header: &BatchHeader) -> Result<Vec<Piece>, ProtocolError> {
    let set = RecordBatchDecoder::decode(&mut batch.clone()).map_err(|e| err(format!("cannot decode batch at {}: {e}", header.base_offset)))?;
    let mut pieces = Vec::new();
    let mut next = header.base_offset;
    let mut run: Vec<Record> = Vec::new();
    let flush = |run: &mut Vec<Record>, pieces: &mut Vec<Piece>| -> Result<(), ProtocolError> {
        if let Some(first) = run.first() {
            let base = first.offset;
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(&mut buf, run.iter(), &RecordEncodeOptions { version: 2, compression: set.compression })
                .map_err(|e| err(format!("cannot re-encode run at {base}: {e}")))?;
            pieces.push(Piece::Run { base, records: run.len() as i32, batch: buf.freeze() });
            run.clear();
        }
        Ok(())
    };
    for record in set.records {
        if record.offset < next || record.offset >= header.next_offset() {
            return Err(err(format!(
                "record offset {} outside batch {}..{} or out of order",
                record.offset,
                header.base_offset,
                header.next_offset()
            )));
        }
        if record.offset > next {
            flush(&mut run, &mut pieces)?;
            pieces.push(Piece::Gap { base: next, count: record.offset - next, timestamp: record.timestamp });
        }
        next = record.offset + 1;
        run.push(record);
    }
    let last_timestamp = run.last().map_or(header.max_timestamp, |r| r.timestamp);
    flush(&mut run, &mut pieces)?;
    if next < header.next_offset() {
        pieces.push(Piece::Gap { base: next, count: header.next_offset() - next, timestamp: last_timestamp });
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{parse_header, split};
    use kafka_protocol::records::{Compression, TimestampType};

    /// A batch as the cleaner leaves it: records at `offsets` (absolute), first/last offset of
    /// the original batch kept.
    fn compacted(offsets: &[i64], first: i64, last: i64, compression: Compression) -> Bytes {
        let records: Vec<Record> = offsets
            .iter()
            .map(|&o| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: 5,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: o,
                sequence: o as i32,
                timestamp: 1_000 + o,
                key: Some(Bytes::from(format!("key-{o}"))),
                value: Some(Bytes::from(format!("value-{o}"))),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
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

    #[test]
    fn holes_become_runs_and_gaps_that_cover_the_batch_exactly() {
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd, Compression::Lz4, Compression::Snappy] {
            let b = compacted(&[10, 11, 14, 15, 16, 19], 10, 21, compression);
            let h = parse_header(&b).unwrap();
            assert!(!h.is_contiguous());
            let pieces = split_holes(&b, &h).unwrap();
            let shape: Vec<_> = pieces
                .iter()
                .map(|p| match p {
                    Piece::Run { base, records, .. } => ('R', *base, i64::from(*records)),
                    Piece::Gap { base, count, .. } => ('G', *base, *count),
                })
                .collect();
            assert_eq!(shape, vec![('R', 10, 2), ('G', 12, 2), ('R', 14, 3), ('G', 17, 2), ('R', 19, 1), ('G', 20, 2)], "{compression:?}");
            for p in &pieces {
                if let Piece::Run { base, records, batch } = p {
                    let (rh, _) = split(batch).unwrap().remove(0);
                    assert!(rh.is_contiguous() && rh.records_count == *records && rh.base_offset == *base);
                    assert_eq!(rh.compression(), h.compression(), "codec kept");
                    let set = RecordBatchDecoder::decode(&mut batch.clone()).unwrap();
                    for r in set.records {
                        assert_eq!(r.key, Some(Bytes::from(format!("key-{}", r.offset))));
                        assert_eq!(r.timestamp, 1_000 + r.offset, "timestamps kept");
                    }
                }
            }
        }
    }
}
