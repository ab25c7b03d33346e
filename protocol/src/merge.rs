//! Merging consecutive small batches of one partition into one batch. A source whose producers
//! do not batch (linger 0, one record per batch) would otherwise cost the destination one
//! Produce batch per record, and Kafka takes one batch per partition per Produce request.
//!
//! Every record keeps its offset, timestamp, attributes, key, value and headers byte for byte
//! (the record encoding is `reencode`'s); the merged batch is compressed with the parts' common
//! codec. Before it is returned it is decoded again and compared record by record with the
//! parts, so a merge that would change anything is an error, never a write. Which batches to
//! merge, and what to do when a merge is refused, is the engine's decision
//! (`mirror-engine/src/coalesce.rs`).

use bytes::Bytes;

use crate::batch::{BatchHeader, parse_header};
use crate::error::ProtocolError;
use crate::reencode::{RawRecord, encode_run, err, records, records_within};

/// The most bytes a record's framing — its length, attributes, timestamp delta and offset delta,
/// before its body — takes in a decompressed section as `records` reads it: one byte and three
/// varints of up to 10 bytes. A merge charges each record this, as it cannot see the section.
const RECORD_FRAMING_MAX: usize = 1 + 3 * 10;

/// One batch made of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The whole batch, producer fields still the first part's (rewrite them before producing).
    pub batch: Bytes,
    /// Records in it (its offsets are `base .. base + records`).
    pub records: i32,
    /// The largest record timestamp.
    pub max_timestamp: i64,
}

/// Merges `parts` — whole batches, in offset order, each starting where the one before ends,
/// each with contiguous offsets, none a control batch, uncompressed or compressed with one codec
/// — into one batch with the same records at the same offsets, compressed with that codec.
/// (Producers such as librdkafka send a small batch uncompressed when compressing would not
/// make it smaller, so one producer's batches alternate between its codec and none.)
///
/// The parts' decompressed records sections, and the records read from them, may take at most
/// `max_raw` bytes in all (each record's framing counted at the most it can take); a run that
/// would need more is refused as soon as decompressing crosses the limit (a few kilobytes of
/// compressed zeros can inflate to hundreds of megabytes).
pub fn merge(parts: &[Bytes], max_raw: usize) -> Result<Merged, ProtocolError> {
    let mut all: Vec<RawRecord> = Vec::new();
    let mut raw_left = max_raw;
    let mut first: Option<BatchHeader> = None;
    let (mut next, mut codec) = (0i64, 0i16);
    for part in parts {
        let h = parse_header(part)?;
        if part.len() != h.size() {
            return Err(err(format!("batch at {} of {} bytes announces {}", h.base_offset, part.len(), h.size())));
        }
        if h.is_control() || !h.is_contiguous() {
            return Err(err(format!("batch at {}: only contiguous data batches are merged", h.base_offset)));
        }
        match &first {
            None => first = Some(h),
            Some(_) if h.compression() != 0 && codec != 0 && h.compression() != codec => {
                return Err(err(format!("batch at {}: codec {} differs from {codec}", h.base_offset, h.compression())));
            }
            Some(_) if h.base_offset != next => {
                return Err(err(format!("batch at {} does not follow the one ending at {next}", h.base_offset)));
            }
            Some(_) => {}
        }
        next = h.next_offset();
        if codec == 0 {
            codec = h.compression();
        }
        let recs = records_within(part, &h, raw_left)?;
        // The whole section stays in memory (the bodies are slices of it), with every record.
        let held: usize = recs.iter().map(|r| r.body.len() + RECORD_FRAMING_MAX + size_of::<RawRecord>()).sum();
        raw_left = raw_left
            .checked_sub(held)
            .ok_or_else(|| err(format!("batches up to {} take more than {max_raw} bytes decompressed", h.next_offset())))?;
        all.extend(recs);
    }
    let Some(mut header) = first else {
        return Err(err("nothing to merge".into()));
    };
    header.attributes = (header.attributes & !0x7) | codec;
    // Offsets must be exactly `base .. next`: `records` checked each batch's own range and
    // order, contiguity its count.
    if i64::try_from(all.len()).ok() != Some(next - header.base_offset) {
        return Err(err(format!("batches {}..{next} hold {} records", header.base_offset, all.len())));
    }
    let batch = encode_run(&all, &header)?;
    let out = parse_header(&batch)?;
    let again = records(&batch, &out)?;
    if again != all || out.base_offset != header.base_offset || out.next_offset() != next {
        return Err(err(format!(
            "the merge of {}..{next} does not decode to the records it was made of",
            header.base_offset
        )));
    }
    Ok(Merged {
        records: out.records_count,
        max_timestamp: out.max_timestamp,
        batch,
    })
}

#[cfg(test)]
mod tests;
