//! The proxy's extensions to DescribeClusterMirrors, carried in tagged fields so that readers
//! which do not know them skip them: a mirror's metadata sync status (tag [`SYNC_STATUS_TAG`]),
//! a partition's copy progress (tag [`PARTITION_PROGRESS_TAG`]) and the line its copy reached
//! (tag [`LAST_MIRROR_TAG`]: the newest KIP code's `LastMirrorEpoch`/`LastMirrorOffset`, which
//! the prototype's schema does not have yet), and which proxy instance answered (tag
//! [`ENGINE_IDENTITY_TAG`]). This file owns the tag
//! numbers, the types, and the byte layout of each tagged value.
//!
//! Where the tags sit inside a Describe response is `describe`'s; fields the KIP itself defines
//! do not belong here. New proxy-only tags go here, far above the KIP's.

use super::{R, W};
use crate::error::{ProtocolError, Side};

/// Tag of the proxy's copy progress in a DescribeClusterMirrors partition entry (next to
/// [`SYNC_STATUS_TAG`], far above the KIP's tags).
pub const PARTITION_PROGRESS_TAG: u32 = 10_001;

/// Copy progress of one described partition: totals since the mirror started, and what was
/// written over the last `window_ms` (the rate is `window_records / window_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionProgress {
    /// Source records written to the destination (fillers not counted).
    pub records_mirrored: i64,
    /// Record batch bytes of those records.
    pub bytes_mirrored: i64,
    /// Span of the recent window, ms (0 = nothing written yet).
    pub window_ms: i64,
    pub window_records: i64,
    pub window_bytes: i64,
}

/// Tag of a partition's line in a DescribeClusterMirrors partition entry.
pub const LAST_MIRROR_TAG: u32 = 10_003;

/// How far a partition's copy reached, in source offsets: `offset` is the first offset not
/// copied (the destination's end), `epoch` the source leader epoch of the record before it (-1
/// unknown). Recorded when the topic is stopped: the line a failback starts from (KIP-1279's
/// last mirror epoch and offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastMirror {
    pub epoch: i32,
    pub offset: i64,
}

impl LastMirror {
    /// The value of a [`LAST_MIRROR_TAG`] field.
    pub(super) fn encode_value(&self) -> W {
        let mut inner = W::default();
        inner.i32(self.epoch).i64(self.offset).tags();
        inner
    }

    /// Reads the value of a [`LAST_MIRROR_TAG`] field.
    pub(super) fn decode_value(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let mut inner = R::new(bytes, 0, Side::Broker);
        Ok(Self {
            epoch: inner.i32()?,
            offset: inner.i64()?,
        })
    }
}

/// Tag of the answering instance's identity at the top level of a DescribeClusterMirrors
/// response (several proxies may stand in front of one cluster).
pub const ENGINE_IDENTITY_TAG: u32 = 10_002;

/// Which proxy instance answered a describe, and its part in the mirror work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineIdentity {
    /// `engine.instance_id` (empty when the role is not `auto`).
    pub instance_id: String,
    /// `engine`, `follower` or `auto`.
    pub role: String,
    /// Whether this instance runs the mirror engine (copies and writes) now.
    pub active: bool,
    /// Election generation of the last decision (-1: none, or not `auto`).
    pub generation: i32,
    /// The instance that runs the engine, as last announced (empty if unknown).
    pub active_instance: String,
    /// With shared work (`engine.share_work`): this instance's share index and the members of
    /// the generation (tag [`SHARE_TAG`] inside the identity; absent otherwise).
    pub share: Option<(i32, i32)>,
}

/// Tag of the share inside an [`EngineIdentity`] value.
pub const SHARE_TAG: u32 = 0;

impl EngineIdentity {
    /// The value of an [`ENGINE_IDENTITY_TAG`] field.
    pub(super) fn encode_value(&self) -> W {
        let mut inner = W::default();
        inner
            .str(&self.instance_id)
            .str(&self.role)
            .bool(self.active)
            .i32(self.generation)
            .str(&self.active_instance);
        match self.share {
            Some((index, members)) => {
                let mut share = W::default();
                share.i32(index).i32(members);
                inner.tagged(SHARE_TAG, share)
            }
            None => inner.tags(),
        };
        inner
    }

    /// Reads the value of an [`ENGINE_IDENTITY_TAG`] field.
    pub(super) fn decode_value(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let mut inner = R::new(bytes, 0, Side::Broker);
        Ok(Self {
            instance_id: inner.str()?,
            role: inner.str()?,
            active: inner.bool()?,
            generation: inner.i32()?,
            active_instance: inner.str()?,
            // Earlier identities end in an empty tag section (or nothing); a share that does
            // not read as two numbers is left out rather than failing the whole describe.
            share: match inner.remaining() {
                0 => None,
                _ => inner.tags()?.into_iter().find(|(tag, _)| *tag == SHARE_TAG).and_then(|(_, bytes)| {
                    let mut r = R::new(bytes, 0, Side::Broker);
                    Some((r.i32().ok()?, r.i32().ok()?))
                }),
            },
        })
    }
}

/// Tag of the proxy's metadata sync status in a DescribeClusterMirrors mirror entry; far above
/// the tags KIP-1279 uses, so a later KIP field cannot collide.
pub const SYNC_STATUS_TAG: u32 = 10_000;

/// Metadata sync status of one kind (`group_offsets`, `topic_configs`) of a described mirror.
/// Times are wall-clock milliseconds, 0 = never.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncEntry {
    pub kind: String,
    pub interval_ms: i64,
    pub runs: i64,
    pub last_run_ms: i64,
    pub last_success_ms: i64,
    /// Groups in sync (group offsets) or topics compared (topic configs) in the last pass.
    pub synced: i64,
    /// Groups left alone in the last pass because they are active on the destination.
    pub skipped_active: i64,
    /// Offsets committed / config changes applied since the proxy started.
    pub applied_total: i64,
    pub errors_total: i64,
    pub last_error: Option<String>,
}

impl PartitionProgress {
    /// The value of a [`PARTITION_PROGRESS_TAG`] field.
    pub(super) fn encode_value(&self) -> W {
        let mut inner = W::default();
        inner
            .i64(self.records_mirrored)
            .i64(self.bytes_mirrored)
            .i64(self.window_ms)
            .i64(self.window_records)
            .i64(self.window_bytes)
            .tags();
        inner
    }

    /// Reads the value of a [`PARTITION_PROGRESS_TAG`] field.
    pub(super) fn decode_value(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let mut inner = R::new(bytes, 0, Side::Broker);
        Ok(Self {
            records_mirrored: inner.i64()?,
            bytes_mirrored: inner.i64()?,
            window_ms: inner.i64()?,
            window_records: inner.i64()?,
            window_bytes: inner.i64()?,
        })
    }
}

impl SyncEntry {
    /// The value of a [`SYNC_STATUS_TAG`] field: an array of `entries`.
    pub(super) fn encode_value(entries: &[SyncEntry]) -> W {
        let mut inner = W::default();
        inner.array_len(entries.len());
        for e in entries {
            inner
                .str(&e.kind)
                .i64(e.interval_ms)
                .i64(e.runs)
                .i64(e.last_run_ms)
                .i64(e.last_success_ms)
                .i64(e.synced);
            inner
                .i64(e.skipped_active)
                .i64(e.applied_total)
                .i64(e.errors_total)
                .nstr(e.last_error.as_deref())
                .tags();
        }
        inner
    }

    /// Reads the value of a [`SYNC_STATUS_TAG`] field, appending its entries to `out`.
    pub(super) fn decode_value_into(bytes: &[u8], out: &mut Vec<SyncEntry>) -> Result<(), ProtocolError> {
        let mut inner = R::new(bytes, 0, Side::Broker);
        for _ in 0..inner.array_len()? {
            out.push(SyncEntry {
                kind: inner.str()?,
                interval_ms: inner.i64()?,
                runs: inner.i64()?,
                last_run_ms: inner.i64()?,
                last_success_ms: inner.i64()?,
                synced: inner.i64()?,
                skipped_active: inner.i64()?,
                applied_total: inner.i64()?,
                errors_total: inner.i64()?,
                last_error: inner.nstr()?,
            });
            inner.tags()?;
        }
        Ok(())
    }
}
