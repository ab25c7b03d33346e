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
mod tests;
