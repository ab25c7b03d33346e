//! OffsetCommit v10 requests, patched in place.
//!
//! kafka-protocol 0.18 decodes OffsetCommit requests up to v9 only. v10 (KIP-848) is v9 with
//! each topic named by its id (16 bytes) instead of its name:
//!
//! ```text
//! group_id compact string, generation_id_or_member_epoch i32, member_id compact string,
//! group_instance_id compact nullable string,
//! topics [ topic_id uuid,
//!          partitions [ partition_index i32, committed_offset i64, committed_leader_epoch i32,
//!                       committed_metadata compact nullable string, tagged fields ],
//!          tagged fields ],
//! tagged fields
//! ```
//!
//! A committed offset is a fixed-width field, so it is rewritten in a copy of the frame where it
//! lies, found by a bounds-checked walk; the body must end exactly where the frame does, or the
//! frame is refused rather than guessed at.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use super::edit::{BelowStart, to_destination};
use super::{Shifts, TopicKey};
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::peek;

/// The OffsetCommit request version this module handles (and the first kafka-protocol cannot).
pub(super) const FIRST_VERSION: i16 = 10;

const WHAT: &str = "OffsetCommit v10 request";

fn malformed(detail: String) -> ProtocolError {
    ProtocolError::Malformed {
        what: WHAT,
        detail,
        side: Side::Client,
    }
}

/// Each `committed_offset` of a shifted partition moved down (below the start → 0); `None` when
/// none changes.
pub(super) fn shift(frame: &Bytes, version: i16, shifts: &dyn Shifts) -> Result<Option<Bytes>, ProtocolError> {
    if version != FIRST_VERSION {
        return Err(ProtocolError::Codec {
            op: "decode",
            api: "OffsetCommit",
            version,
            detail: "no offset translation is known for this version".into(),
            side: Side::Client,
        });
    }
    let header = peek::request(frame)?;
    if header.api_key != ApiKey::OffsetCommit as i16 || header.api_version != version {
        return Err(malformed(format!(
            "header names api {} v{}, the frame was read as OffsetCommit v{version}",
            header.api_key, header.api_version
        )));
    }
    let mut c = Cursor::new(frame, peek::request_body_offset(frame, &header)?, WHAT, Side::Client);
    c.skip_compact_bytes()?; // group_id
    c.skip(4)?; // generation_id_or_member_epoch
    c.skip_compact_bytes()?; // member_id
    c.skip_compact_bytes()?; // group_instance_id
    let mut out: Option<BytesMut> = None;
    for _ in 0..c.compact_array_len()? {
        let mut id = [0u8; 16];
        id.copy_from_slice(c.take(16)?);
        for _ in 0..c.compact_array_len()? {
            let partition = c.i32()?;
            let at = c.pos;
            let mut raw = [0u8; 8];
            raw.copy_from_slice(c.take(8)?);
            let committed = i64::from_be_bytes(raw);
            c.skip(4)?; // committed_leader_epoch
            c.skip_compact_bytes()?; // committed_metadata
            c.skip_tagged_fields()?;
            let delta = shifts.shift(TopicKey::Id(id), partition).max(0);
            let moved = to_destination(committed, delta, BelowStart::Zero);
            if moved != committed {
                let buf = out.get_or_insert_with(|| BytesMut::from(&frame[..]));
                buf[at..at + 8].copy_from_slice(&moved.to_be_bytes());
            }
        }
        c.skip_tagged_fields()?;
    }
    c.skip_tagged_fields()?;
    if c.remaining() != 0 {
        return Err(malformed(format!("{} bytes after the end of the body", c.remaining())));
    }
    Ok(out.map(BytesMut::freeze))
}
