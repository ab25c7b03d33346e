//! Fetch responses patched where they lie, the consumer's hot path.
//!
//! Every offset a Fetch response reports for a partition is fixed-width: `high_watermark`,
//! `last_stable_offset`, `log_start_offset`, each aborted transaction's `first_offset` and the
//! end offset of a `diverging_epoch` are big-endian i64 fields, and a record batch's base offset
//! is the first 8 bytes of the batch, outside its CRC. Moving them by Δ never changes a length,
//! so a response naming a shifted partition is translated by one bounds-checked walk that notes
//! where those fields are (`Cursor`), and — only if a value changes — one copy of the frame with
//! them rewritten. Nothing is decoded or re-encoded; the records, often megabytes, are copied
//! once instead of decoded, copied and encoded again.
//!
//! The layout walked (v4-18; `flexible` from v12: compact lengths and tagged fields):
//!
//! ```text
//! header: correlation_id i32 [tagged fields]
//! throttle_time_ms i32, (v7+) error_code i16, session_id i32,
//! responses [ topic (name string, v13+ topic_id uuid),
//!             partitions [ partition_index i32, error_code i16, high_watermark i64,
//!                          last_stable_offset i64, (v5+) log_start_offset i64,
//!                          aborted_transactions nullable [ producer_id i64, first_offset i64 [tagged] ],
//!                          (v11+) preferred_read_replica i32, records nullable bytes,
//!                          [tagged: 0 diverging_epoch { epoch i32, end_offset i64, [tagged] },
//!                                   1 current_leader, 2 snapshot_id] ],
//!             [tagged] ],
//! [tagged: 0 node_endpoints]
//! ```
//!
//! The walk is strict: a frame that does not parse to its last byte is an error, on which the
//! caller falls back to the decoding translation (`fetch::response`), so what a hostile frame
//! gets is decided there, as for every other message. The places noted are bounded by the frame
//! (every one of them is at least 8 bytes of it).

use bytes::{Bytes, BytesMut};

use super::edit::to_client;
use super::{Shifts, TopicKey, records};
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

const WHAT: &str = "Fetch response";
/// Oldest Fetch version walked here (the proxy offers v4 on).
const FIRST_VERSION: i16 = 4;
/// First version with compact lengths and tagged fields.
const FLEXIBLE_FROM: i16 = 12;
/// First version naming topics by id.
const TOPIC_IDS_FROM: i16 = 13;
/// First version with a partition's `log_start_offset`.
const LOG_START_FROM: i16 = 5;
/// First version with the top-level `error_code` and `session_id`.
const SESSION_FROM: i16 = 7;
/// First version with `preferred_read_replica`.
const PREFERRED_REPLICA_FROM: i16 = 11;
/// Tag of a partition's `diverging_epoch` (v12+).
const DIVERGING_EPOCH_TAG: u32 = 0;

/// A place in the frame that holds an offset of a shifted partition.
enum Place {
    /// An i64 offset field at this position.
    Offset { at: usize, delta: i64 },
    /// A records blob: every whole batch's base offset.
    Records { start: usize, end: usize, delta: i64 },
}

fn malformed(detail: String) -> ProtocolError {
    ProtocolError::Malformed {
        what: WHAT,
        detail,
        side: Side::Broker,
    }
}

/// The response frame (length prefix included) with every offset of a shifted partition moved
/// up by its Δ; `Ok(None)` when none changes; an error when the frame is not a well-formed Fetch
/// response of `version` (the caller then translates it by decoding).
pub(super) fn response(frame: &Bytes, version: i16, shifts: &dyn Shifts) -> Result<Option<Bytes>, ProtocolError> {
    let places = locate(frame, version, shifts)?;
    if !places.iter().any(|p| moves(frame, p)) {
        return Ok(None);
    }
    let mut out = BytesMut::from(&frame[..]);
    for p in &places {
        match *p {
            Place::Offset { at, delta } => {
                let moved = to_client(read_i64(&out, at), delta);
                out[at..at + 8].copy_from_slice(&moved.to_be_bytes());
            }
            Place::Records { start, end, delta } => {
                records::shift_in_place(&mut out[start..end], delta);
            }
        }
    }
    Ok(Some(out.freeze()))
}

/// Whether the value at `p` changes.
fn moves(frame: &[u8], p: &Place) -> bool {
    match *p {
        Place::Offset { at, delta } => {
            let v = read_i64(frame, at);
            to_client(v, delta) != v
        }
        Place::Records { start, end, delta } => records::moves_any(&frame[start..end], delta),
    }
}

/// The i64 at `at` (a place [`locate`] found whole inside the frame).
fn read_i64(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(b)
}

/// Walks the whole frame and notes the places of the shifted partitions' offsets.
fn locate(frame: &[u8], version: i16, shifts: &dyn Shifts) -> Result<Vec<Place>, ProtocolError> {
    if version < FIRST_VERSION {
        return Err(malformed(format!("v{version} is not translated in place")));
    }
    let flexible = version >= FLEXIBLE_FROM;
    let mut c = Cursor::new(frame, PREFIX + 4, WHAT, Side::Broker);
    if flexible {
        c.skip_tagged_fields()?; // response header v1
    }
    c.skip(4)?; // throttle_time_ms
    if version >= SESSION_FROM {
        c.skip(2 + 4)?; // error_code, session_id
    }
    let mut places = Vec::new();
    for _ in 0..c.array_len(flexible)? {
        let id;
        let name;
        let topic = if version >= TOPIC_IDS_FROM {
            id = <[u8; 16]>::try_from(c.take(16)?).map_err(|_| malformed("topic id".into()))?;
            TopicKey::Id(id)
        } else {
            name = topic_name(&mut c, flexible)?;
            TopicKey::Name(name)
        };
        for _ in 0..c.array_len(flexible)? {
            let partition = c.i32()?;
            c.skip(2)?; // error_code
            let delta = shifts.shift(topic, partition).max(0);
            let mut note = |c: &mut Cursor<'_>| -> Result<(), ProtocolError> {
                let at = c.pos;
                c.skip(8)?;
                if delta > 0 {
                    places.push(Place::Offset { at, delta });
                }
                Ok(())
            };
            note(&mut c)?; // high_watermark
            note(&mut c)?; // last_stable_offset
            if version >= LOG_START_FROM {
                note(&mut c)?; // log_start_offset
            }
            for _ in 0..c.array_len(flexible)? {
                c.skip(8)?; // producer_id
                note(&mut c)?; // first_offset
                if flexible {
                    c.skip_tagged_fields()?;
                }
            }
            if version >= PREFERRED_REPLICA_FROM {
                c.skip(4)?;
            }
            if let Some((start, end)) = nullable_bytes(&mut c, flexible)?
                && delta > 0
            {
                places.push(Place::Records { start, end, delta });
            }
            if flexible {
                partition_tags(&mut c, delta, &mut places)?;
            }
        }
        if flexible {
            c.skip_tagged_fields()?;
        }
    }
    if flexible {
        c.skip_tagged_fields()?; // node_endpoints, …
    }
    if c.remaining() != 0 {
        return Err(malformed(format!("{} bytes after the end of the body", c.remaining())));
    }
    Ok(places)
}

/// A partition's tagged fields; notes `diverging_epoch.end_offset` of a shifted partition.
fn partition_tags(c: &mut Cursor<'_>, delta: i64, places: &mut Vec<Place>) -> Result<(), ProtocolError> {
    let count = c.uvarint()?;
    c.count(u64::from(count))?;
    for _ in 0..count {
        let tag = c.uvarint()?;
        let size = c.uvarint()? as usize;
        let start = c.pos;
        c.skip(size)?;
        if tag == DIVERGING_EPOCH_TAG && delta > 0 {
            // { epoch i32, end_offset i64, tagged fields }: at least 13 bytes.
            if size < 4 + 8 + 1 {
                return Err(malformed(format!("a diverging_epoch of {size} bytes")));
            }
            places.push(Place::Offset { at: start + 4, delta });
        }
    }
    Ok(())
}

/// A topic name (a non-null UTF-8 string).
fn topic_name<'a>(c: &mut Cursor<'a>, flexible: bool) -> Result<&'a str, ProtocolError> {
    let len = if flexible { (c.uvarint()? as i64) - 1 } else { i64::from(c.i16()?) };
    let len = usize::try_from(len).map_err(|_| malformed("a null topic name".into()))?;
    std::str::from_utf8(c.take(len)?).map_err(|_| malformed("a topic name that is not UTF-8".into()))
}

/// Where a nullable bytes field's bytes lie (`None` when null).
fn nullable_bytes(c: &mut Cursor<'_>, flexible: bool) -> Result<Option<(usize, usize)>, ProtocolError> {
    let len = if flexible { (c.uvarint()? as i64) - 1 } else { i64::from(c.i32()?) };
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| malformed(format!("a bytes field of length {len}")))?;
    let start = c.pos;
    c.skip(len)?;
    Ok(Some((start, c.pos)))
}
