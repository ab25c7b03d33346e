//! Offset translation for partitions the destination holds at a constant distance from the
//! source.
//!
//! A mirror copies a source partition into the destination at identical offsets, except when the
//! source log starts far from 0 (say 10¹⁰ after years of retention): the destination partition
//! then starts at 0, and the proxy in front of the destination shows each of its offsets moved
//! by a constant Δ of that (topic, partition). A destination offset `d` is the client offset
//! `s = d + Δ`. This module translates the offsets of Kafka messages both ways: requests from
//! client offsets to destination offsets (−Δ), responses from destination to client offsets
//! (+Δ). It owns the arithmetic and which field of which message is an offset; which partitions
//! are shifted, and by how much, is the caller's ([`Shifts`]), and so is deciding when to call in
//! here (the proxy skips it entirely while no partition is shifted).
//!
//! Sans-io. Frames are whole frames *with* their 4-byte length prefix, as everywhere in this
//! crate (`frame`, `codec`). A message none of whose offsets changes comes back as `Ok(None)`:
//! the caller forwards its original bytes, nothing is re-encoded. Fetch responses, the hot path,
//! are patched in place (`fetch_in_place`: every offset in them is fixed-width). Other messages are decoded with
//! kafka-protocol under the crate's decode budget (`codec`) and re-encoded only when a value
//! changed; the one version kafka-protocol cannot decode (OffsetCommit v10 requests) is patched
//! in place (`commit_v10`). A re-encoded request keeps its header as it came; a re-encoded
//! response keeps its correlation id, the only field a response header defines (unknown tagged
//! fields of a v1 response header are dropped, as in `rewrite`).
//!
//! # The rules
//!
//! Δ ≤ 0 counts as "not shifted" (the destination never starts after the source). Responses:
//! every offset of a shifted partition gets +Δ, except negative values (the sentinels −1 and
//! anything below 0), which stay; a sum past `i64::MAX` saturates at `i64::MAX`. Requests: every
//! offset of a shifted partition gets −Δ, negative values stay, and a value `0 ≤ s < Δ` — below
//! the partition's start, which a client cannot have been shown — maps per field as listed
//! below ("→ −1", "→ 0"). `s ≥ Δ > 0` makes `s − Δ` exact, so requests never saturate, and for
//! every `s ≥ Δ` a request offset translated down and back up is `s` again.
//!
//! # Covered
//!
//! | API | direction | fields (of each shifted partition) |
//! |---|---|---|
//! | Fetch v4-18 | request | `fetch_offset` (s < Δ → −1: the broker answers OFFSET_OUT_OF_RANGE, as the source would); follower fields `log_start_offset` (s < Δ → −1, "unknown") and v18 `high_watermark` (s < Δ → −1; `i64::MAX`, "not supported", stays) |
//! | Fetch v4-18 | response | `high_watermark`, `last_stable_offset`, `log_start_offset`, `aborted_transactions[].first_offset`, `diverging_epoch.end_offset`, the base offset of every record batch in `records` ([`records`]) |
//! | ListOffsets v1-10 | response | `offset` (no version kafka-protocol knows has v0's `old_style_offsets`) |
//! | OffsetForLeaderEpoch v2-4 | response | `end_offset` (the request carries epochs only) |
//! | OffsetCommit v2-10 | request | `committed_offset` (s < Δ → 0); v10 (topic ids) patched in place |
//! | OffsetFetch v1-10 | response | `committed_offset`, in the v1-7 `topics` form and the v8+ `groups` form (names v8-9, ids v10) |
//! | TxnOffsetCommit v0-5 | request | `committed_offset` (s < Δ → 0) |
//! | DeleteRecords v0-2 | request | `offset` (−1, "up to the high watermark", stays; s < Δ → 0) |
//! | DeleteRecords v0-2 | response | `low_watermark` |
//! | Produce v3-13 | response | `base_offset`, `log_start_offset` (topic names v3-12, ids v13) |
//! | DescribeProducers v0 | response | `active_producers[].current_txn_start_offset` |
//! | ShareFetch v1 | request | `acknowledgement_batches[].first_offset`/`last_offset` (max(s − Δ, 0)) |
//! | ShareFetch v1 | response | `acquired_records[].first_offset`/`last_offset`, record batch base offsets |
//! | ShareAcknowledge v1 | request | `acknowledgement_batches[].first_offset`/`last_offset` (max(s − Δ, 0)) |
//! | DescribeShareGroupOffsets v0 | response | `start_offset` (the topic is looked up by name) |
//! | AlterShareGroupOffsets v0 | request | `start_offset` (s < Δ → 0) |
//!
//! # Deliberately not covered
//!
//! * Requests without offsets the broker uses: Produce (batch base offsets are assigned by the
//!   broker), ListOffsets (timestamps and their negative specials, no offsets), OffsetForLeaderEpoch
//!   (epochs), OffsetFetch, DescribeProducers, DescribeShareGroupOffsets, DeleteShareGroupOffsets.
//! * Responses without offsets: OffsetCommit, TxnOffsetCommit, ShareAcknowledge,
//!   AlterShareGroupOffsets, DeleteShareGroupOffsets.
//! * Fetch response `snapshot_id.end_offset`: a KRaft snapshot of the metadata log, never a
//!   client topic.
//! * DescribeLogDirs `offset_lag` (and `partition_size`): a distance between two offsets of the
//!   same partition, which a shift leaves unchanged.
//! * KRaft and controller APIs (Vote, FetchSnapshot, DescribeQuorum `log_end_offset`/
//!   `high_watermark`, BrokerHeartbeat `current_metadata_offset`): offsets of the cluster
//!   metadata log, not of a client topic.
//! * Share-group state APIs between brokers and the share coordinator (InitializeShareGroupState,
//!   ReadShareGroupState, WriteShareGroupState, ReadShareGroupStateSummary): inter-broker, never
//!   offered to clients (`versions`).
//! * Record offsets inside a legacy (magic 0/1) compressed wrapper: the destination of a shifted
//!   partition is written by the mirror engine, in v2 batches only; a legacy entry's own offset
//!   (same place as a v2 base offset) is shifted like one.
//!
//! No other message of kafka-protocol 0.18 has an offset of a topic partition (its generated
//! messages were searched for every `i64` offset, watermark and position field).

mod commit_v10;
mod edit;
mod fetch;
mod fetch_in_place;
mod groups;
mod offsets;
pub mod records;
mod share;

#[cfg(test)]
mod tests;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::codec::{decode_request, decode_response, encode_request, encode_response};
use crate::error::{ProtocolError, Side};

use edit::Edit;
pub use edit::{BelowStart, to_client, to_destination};

/// A topic as a message names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicKey<'a> {
    /// By name (older versions of most APIs).
    Name(&'a str),
    /// By topic id (newer versions).
    Id([u8; 16]),
}

/// Δ of a partition: 0 when it is not shifted. Implemented by the caller (the proxy's catalog).
/// A negative answer counts as 0.
pub trait Shifts {
    /// Δ of `partition` of `topic`: client offset = destination offset + Δ.
    fn shift(&self, topic: TopicKey<'_>, partition: i32) -> i64;
}

/// Whether a request of this API key may need translation at all (decide before decoding).
pub fn request_may_shift(api_key: i16) -> bool {
    matches!(
        ApiKey::try_from(api_key),
        Ok(ApiKey::Fetch
            | ApiKey::OffsetCommit
            | ApiKey::TxnOffsetCommit
            | ApiKey::DeleteRecords
            | ApiKey::ShareFetch
            | ApiKey::ShareAcknowledge
            | ApiKey::AlterShareGroupOffsets)
    )
}

/// Whether a response of this API key may need translation at all (decide before decoding).
pub fn response_may_shift(api_key: i16) -> bool {
    matches!(
        ApiKey::try_from(api_key),
        Ok(ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::OffsetForLeaderEpoch
            | ApiKey::OffsetFetch
            | ApiKey::DeleteRecords
            | ApiKey::Produce
            | ApiKey::DescribeProducers
            | ApiKey::ShareFetch
            | ApiKey::DescribeShareGroupOffsets)
    )
}

/// Rewrites a request frame (length prefix included) from client offsets to destination
/// offsets. `Ok(None)`: nothing changes, forward `frame` as it is.
pub fn shift_request(frame: &Bytes, api_key: i16, api_version: i16, shifts: &dyn Shifts) -> Result<Option<Bytes>, ProtocolError> {
    if !request_may_shift(api_key) {
        return Ok(None);
    }
    let Ok(key) = ApiKey::try_from(api_key) else { return Ok(None) };
    let v = api_version;
    match key {
        ApiKey::Fetch => edit_request(frame, key, v, shifts, fetch::request),
        ApiKey::OffsetCommit if v >= commit_v10::FIRST_VERSION => commit_v10::shift(frame, v, shifts),
        ApiKey::OffsetCommit => edit_request(frame, key, v, shifts, groups::offset_commit_request),
        ApiKey::TxnOffsetCommit => edit_request(frame, key, v, shifts, groups::txn_offset_commit_request),
        ApiKey::DeleteRecords => edit_request(frame, key, v, shifts, offsets::delete_records_request),
        ApiKey::ShareFetch => edit_request(frame, key, v, shifts, share::share_fetch_request),
        ApiKey::ShareAcknowledge => edit_request(frame, key, v, shifts, share::share_acknowledge_request),
        ApiKey::AlterShareGroupOffsets => edit_request(frame, key, v, shifts, share::alter_share_group_offsets_request),
        _ => Ok(None),
    }
}

/// Rewrites a response frame (length prefix included) from destination offsets to client
/// offsets. `Ok(None)`: nothing changes, forward `frame` as it is.
pub fn shift_response(frame: &Bytes, api_key: i16, api_version: i16, shifts: &dyn Shifts) -> Result<Option<Bytes>, ProtocolError> {
    if !response_may_shift(api_key) {
        return Ok(None);
    }
    let Ok(key) = ApiKey::try_from(api_key) else { return Ok(None) };
    let v = api_version;
    match key {
        // Patched in place (`fetch_in_place`); a frame that walk cannot read to its end is
        // translated by decoding, which decides what becomes of it.
        ApiKey::Fetch => fetch_in_place::response(frame, v, shifts).or_else(|_| edit_response(frame, key, v, shifts, fetch::response)),
        ApiKey::ListOffsets => edit_response(frame, key, v, shifts, offsets::list_offsets_response),
        ApiKey::OffsetForLeaderEpoch => edit_response(frame, key, v, shifts, offsets::offset_for_leader_epoch_response),
        ApiKey::OffsetFetch => edit_response(frame, key, v, shifts, groups::offset_fetch_response),
        ApiKey::DeleteRecords => edit_response(frame, key, v, shifts, offsets::delete_records_response),
        ApiKey::Produce => edit_response(frame, key, v, shifts, offsets::produce_response),
        ApiKey::DescribeProducers => edit_response(frame, key, v, shifts, offsets::describe_producers_response),
        ApiKey::ShareFetch => edit_response(frame, key, v, shifts, share::share_fetch_response),
        ApiKey::DescribeShareGroupOffsets => edit_response(frame, key, v, shifts, share::describe_share_group_offsets_response),
        _ => Ok(None),
    }
}

/// An edit of one decoded message of version `version`: it moves offsets through [`Edit`], which
/// records whether any value changed.
type EditFn<T> = fn(&mut T, i16, &mut Edit<'_>);

/// Decodes a request, applies `edit`, and re-encodes it (same header) only if a value changed.
fn edit_request<T: Decodable + Encodable>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    shifts: &dyn Shifts,
    edit: EditFn<T>,
) -> Result<Option<Bytes>, ProtocolError> {
    let (header, mut msg) = decode_request::<T>(frame, key, version)?;
    // The body was decoded at `version` and is re-encoded at the header's: they must agree.
    if header.request_api_key != key as i16 || header.request_api_version != version {
        return Err(ProtocolError::Malformed {
            what: "request header",
            detail: format!(
                "header names api {} v{}, the frame was read as {} v{version}",
                header.request_api_key, header.request_api_version, key as i16
            ),
            side: Side::Client,
        });
    }
    let mut e = Edit::new(shifts);
    edit(&mut msg, version, &mut e);
    if !e.changed() {
        return Ok(None);
    }
    encode_request(&header, key, &msg).map(Some)
}

/// Decodes a response, applies `edit`, and re-encodes it only if a value changed.
fn edit_response<T: Decodable + Encodable>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    shifts: &dyn Shifts,
    edit: EditFn<T>,
) -> Result<Option<Bytes>, ProtocolError> {
    let (header, mut msg) = decode_response::<T>(frame, key, version)?;
    let mut e = Edit::new(shifts);
    edit(&mut msg, version, &mut e);
    if !e.changed() {
        return Ok(None);
    }
    encode_response(header.correlation_id, key, version, &msg).map(Some)
}
