//! Re-encoding part of a source batch, for the two cases where the engine cannot produce the
//! batch whole: the log cleaner removed records inside it (the batch keeps its original first
//! and last offsets, and a broker only accepts offset deltas `0..count` through Produce), or the
//! destination already ends inside it (the source log start moved into the batch, so the engine
//! filled up to that offset; or a previous run stopped in the middle of a re-encoded batch).
//!
//! The records are kept *byte for byte*: each record's attributes, key, value and headers are
//! copied raw (duplicate header keys and any bytes included); only its offset and timestamp
//! deltas are re-based onto the new batch, so offsets and timestamps stay the source's. Runs are
//! compressed again with the source batch's codec. A LogAppendTime batch is always re-encoded whole,
//! the append time its records show on the source written as each record's CreateTime timestamp
//! (see `is_log_append_time`). This and `merge` are the only places the mirror
//! decompresses data (through `codecs`). Deciding when to call it belongs to the engine's planner.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchHeader, HEADER_SIZE, put_varint};
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};

/// One piece of a batch, in offset order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Contiguous records re-encoded as a batch that starts at `base` (producer fields still
    /// the source's; rewrite them before producing).
    Run { base: i64, records: i32, batch: Bytes },
    /// `count` offsets starting at `base` with no record.
    Gap { base: i64, count: i64 },
}

/// One record of a batch: its absolute offset and timestamp, and its raw bytes after the
/// offset delta (key, value, headers).
#[derive(Debug, Clone, PartialEq)]
pub struct RawRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub(crate) attributes: u8,
    pub(crate) body: Bytes,
}

const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const DELETE_HORIZON_BIT: i16 = 1 << 6;

pub(crate) fn err(detail: String) -> ProtocolError {
    ProtocolError::Malformed {
        what: "record batch",
        detail,
        side: Side::Broker,
    }
}

/// Whether the batch's records read the batch's max timestamp (the source broker's append time)
/// rather than their own. A destination topic keeps CreateTime (its broker would replace either
/// with its own clock otherwise), so such a batch is always re-encoded with that timestamp on
/// every record.
pub fn is_log_append_time(header: &BatchHeader) -> bool {
    header.attributes & TIMESTAMP_TYPE_BIT != 0
}

/// The records section of `batch`, decompressed to at most `limit` bytes.
fn decompress(batch: &Bytes, header: &BatchHeader, limit: usize) -> Result<Bytes, ProtocolError> {
    let section = batch
        .get(HEADER_SIZE..header.size().min(batch.len()))
        .map(|s| batch.slice_ref(s))
        .unwrap_or_default();
    crate::codecs::decompress(header.compression(), &section, limit).map_err(|e| err(format!("cannot decompress batch at {}: {e}", header.base_offset)))
}

fn compress(codec: i16, raw: &[u8]) -> Result<BytesMut, ProtocolError> {
    crate::codecs::compress(codec, raw).map_err(|e| err(format!("cannot compress a re-encoded run: {e}")))
}

/// Every record of `batch` (described by `header`), in order, checked against the header: the
/// announced count, offsets strictly increasing inside the batch's offset range, nothing left over.
pub fn records(batch: &Bytes, header: &BatchHeader) -> Result<Vec<RawRecord>, ProtocolError> {
    records_within(batch, header, crate::codecs::MAX_RAW_BATCH)
}

/// [`records`], refusing a batch whose records decompress to more than `max_raw` bytes.
pub(crate) fn records_within(batch: &Bytes, header: &BatchHeader, max_raw: usize) -> Result<Vec<RawRecord>, ProtocolError> {
    let at = header.base_offset;
    // Re-encoded records get a new CRC: the source's must hold first (as `rewrite_for_produce`
    // checks it for batches written whole).
    let Some(whole) = batch.get(..header.size()) else {
        return Err(err(format!("batch at {at} of {} bytes announces {}", batch.len(), header.size())));
    };
    crate::batch::verify_crc(whole)?;
    let section = decompress(batch, header, max_raw)?;
    let mut c = Cursor::new(&section, 0, "record", Side::Broker);
    // Each record takes at least 7 bytes: a count from the header is checked against that.
    let count = usize::try_from(header.records_count).map_err(|_| err(format!("batch at {at}: negative record count")))?;
    if count > section.len() / 7 + 1 {
        return Err(err(format!("batch at {at} announces {count} records in {} bytes", section.len())));
    }
    // Room for at most 1024 records up front: the rest grows as records actually decode.
    let mut out = Vec::with_capacity(count.min(1024));
    let mut next = header.base_offset;
    let log_append = is_log_append_time(header);
    for _ in 0..count {
        let len = usize::try_from(c.varint()?).map_err(|_| err(format!("batch at {at}: negative record length")))?;
        let start = c.pos;
        let mut r = Cursor::new(c.take(len)?, 0, "record", Side::Broker);
        let attributes = r.take(1)?[0];
        let delta = r.varint()?;
        // LogAppendTime: every record reads the batch's max timestamp (the append time).
        let timestamp = if log_append {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(delta)
        };
        let offset_delta = r.varint()?;
        let offset = header
            .base_offset
            .checked_add(offset_delta)
            .ok_or_else(|| err(format!("batch at {at}: offset delta {offset_delta} overflows")))?;
        if offset < next || offset >= header.next_offset() {
            return Err(err(format!(
                "record offset {offset} outside batch {at}..{} or out of order",
                header.next_offset()
            )));
        }
        next = offset + 1;
        let body = section.slice(start + r.pos..start + len);
        out.push(RawRecord {
            offset,
            timestamp,
            attributes,
            body,
        });
    }
    if c.remaining() != 0 {
        return Err(err(format!("batch at {at}: {} bytes after its {count} records", c.remaining())));
    }
    Ok(out)
}

/// Encodes `run` (contiguous offsets) as one batch with `header`'s codec, timestamp type and
/// producer fields.
pub(crate) fn encode_run(run: &[RawRecord], header: &BatchHeader) -> Result<Bytes, ProtocolError> {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return Err(err("empty run".into()));
    };
    let base_ts = first.timestamp;
    let mut raw = BytesMut::new();
    let mut rec = BytesMut::new();
    for r in run {
        rec.clear();
        rec.put_u8(r.attributes);
        put_varint(&mut rec, r.timestamp.wrapping_sub(base_ts));
        put_varint(&mut rec, r.offset - first.offset);
        rec.put_slice(&r.body);
        put_varint(&mut raw, rec.len() as i64);
        raw.put_slice(&rec);
    }
    let max_ts = run.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
    // Each record carries the timestamp the source's consumers read (for LogAppendTime, the
    // append time: see `records`) as a CreateTime timestamp, which is what the destination topic
    // keeps. The delete horizon is the source cleaner's; the destination's cleaner sets its own.
    let attributes = header.attributes & !DELETE_HORIZON_BIT & !TIMESTAMP_TYPE_BIT;
    let records = compress(header.compression(), &raw)?;
    let count = i32::try_from(run.len()).map_err(|_| err("run too long".into()))?;
    let sequence = if header.base_sequence < 0 {
        -1
    } else {
        header.base_sequence.wrapping_add((first.offset - header.base_offset) as i32)
    };
    let mut b = BytesMut::with_capacity(HEADER_SIZE + records.len());
    b.put_i64(first.offset);
    b.put_i32((HEADER_SIZE - 12 + records.len()) as i32);
    b.put_i32(-1); // partition leader epoch: the destination's own
    b.put_i8(2);
    b.put_u32(0); // CRC, below
    b.put_i16(attributes);
    b.put_i32((last.offset - first.offset) as i32);
    b.put_i64(base_ts);
    b.put_i64(max_ts);
    b.put_i64(header.producer_id);
    b.put_i16(header.producer_epoch);
    b.put_i32(sequence);
    b.put_i32(count);
    b.put_slice(&records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(b.freeze())
}

/// Splits the part of `batch` at and after offset `from` into runs and gaps covering exactly
/// `max(from, base) .. header.next_offset()`. Records below `from` are left out.
pub fn split_from(batch: &Bytes, header: &BatchHeader, from: i64) -> Result<Vec<Piece>, ProtocolError> {
    let all = records(batch, header)?;
    let mut pieces = Vec::new();
    let start = from.max(header.base_offset);
    let mut next = start;
    let mut run: Vec<RawRecord> = Vec::new();
    let flush = |run: &mut Vec<RawRecord>, pieces: &mut Vec<Piece>| -> Result<(), ProtocolError> {
        if let Some(first) = run.first() {
            pieces.push(Piece::Run {
                base: first.offset,
                records: run.len() as i32,
                batch: encode_run(run, header)?,
            });
            run.clear();
        }
        Ok(())
    };
    for record in all.into_iter().filter(|r| r.offset >= start) {
        if record.offset > next {
            flush(&mut run, &mut pieces)?;
            pieces.push(Piece::Gap {
                base: next,
                count: record.offset - next,
            });
        }
        next = record.offset + 1;
        run.push(record);
    }
    flush(&mut run, &mut pieces)?;
    if next < header.next_offset() {
        pieces.push(Piece::Gap {
            base: next,
            count: header.next_offset() - next,
        });
    }
    Ok(pieces)
}

/// [`split_from`] for the whole batch (compaction holes only).
pub fn split_holes(batch: &Bytes, header: &BatchHeader) -> Result<Vec<Piece>, ProtocolError> {
    split_from(batch, header, header.base_offset)
}

#[cfg(test)]
mod tests;
