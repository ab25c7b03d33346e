//! Base offsets of the record batches in a records blob (the `records` of a Fetch or ShareFetch
//! response partition), moved by Δ.
//!
//! Every batch starts with its base offset (big-endian i64, bytes 0..8) and its length (i32,
//! bytes 8..12, the bytes that follow it). The batch CRC covers the attributes onward only, so
//! the base offset changes in place and the CRC stays valid; a record's offset is the base
//! offset plus its delta, so every record moves with it. Legacy (magic 0/1) entries have their
//! offset and size in the same places and are walked the same way.
//!
//! Batches are walked by their length field. The walk stops at a trailing partial batch (a
//! Fetch response may cut the last one; it is left byte for byte as the broker sent it) and at a
//! negative length; nothing is allocated by a length read from the blob: the only allocation is
//! one copy of the blob itself, and only when a base offset changes.

use bytes::{Bytes, BytesMut};

use super::edit::to_client;

/// Bytes before a batch's payload: base offset (8) and length (4).
const LOG_OVERHEAD: usize = 12;

/// `records` with `delta` added to the base offset of every whole batch (negative base offsets
/// stay; a sum past `i64::MAX` saturates), or `None` when no base offset changes.
pub fn shifted(records: &Bytes, delta: i64) -> Option<Bytes> {
    if !moves_any(records, delta) {
        return None;
    }
    let mut out = BytesMut::from(&records[..]);
    shift_in_place(&mut out, delta);
    Some(out.freeze())
}

/// Adds `delta` to the base offset of every whole batch of `blob` in place (negative base
/// offsets stay; a sum past `i64::MAX` saturates). Returns how many base offsets changed.
pub fn shift_in_place(blob: &mut [u8], delta: i64) -> usize {
    let mut changed = 0;
    let mut at = 0;
    while let Some(end) = whole_batch_end(blob, at) {
        let base = base_offset(blob, at);
        let moved = to_client(base, delta);
        if moved != base {
            blob[at..at + 8].copy_from_slice(&moved.to_be_bytes());
            changed += 1;
        }
        at = end;
    }
    changed
}

/// Whether [`shift_in_place`] would change a base offset of `blob` (without copying it).
pub(super) fn moves_any(blob: &[u8], delta: i64) -> bool {
    let mut at = 0;
    while let Some(end) = whole_batch_end(blob, at) {
        let base = base_offset(blob, at);
        if to_client(base, delta) != base {
            return true;
        }
        at = end;
    }
    false
}

/// The base offset of the batch starting at `at` (whose whole header is in `blob`).
fn base_offset(blob: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&blob[at..at + 8]);
    i64::from_be_bytes(b)
}

/// Where the batch starting at `at` ends, if all of it is in `blob` (at least its length field,
/// and a non-negative length that does not run past the end).
fn whole_batch_end(blob: &[u8], at: usize) -> Option<usize> {
    let head = blob.get(at..at.checked_add(LOG_OVERHEAD)?)?;
    let length = usize::try_from(i32::from_be_bytes([head[8], head[9], head[10], head[11]])).ok()?;
    let end = at.checked_add(LOG_OVERHEAD)?.checked_add(length)?;
    (end <= blob.len()).then_some(end)
}
