//! One write of a plan ([`Action`]): what `plan` produces, `coalesce` merges and `partition`
//! carries out.

use bytes::Bytes;
use kmp_protocol::batch::BatchHeader;

/// One write to the destination, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `count` filler records starting at destination offset `base`.
    Fill { base: i64, count: i64 },
    /// A source batch (contiguous, non-control) written whole at its own base offset; a
    /// transactional one inside its producer's destination transaction.
    Write { base: i64, header: BatchHeader, batch: Bytes },
    /// Contiguous records of a source batch re-encoded as their own batch starting at `base` (its
    /// header keeps the source batch's producer id and transactional bit).
    Run {
        base: i64,
        records: i32,
        max_timestamp: i64,
        batch: Bytes,
    },
    /// The source's transaction marker at `base`: the destination transaction replaying source
    /// producer `producer_id`'s transaction ends there (committed or aborted).
    Marker { base: i64, producer_id: i64, commit: bool },
}

impl Action {
    /// The offsets the action occupies on the destination.
    pub(crate) fn range(&self) -> (i64, i64) {
        match self {
            Self::Fill { base, count, .. } => (*base, base + count),
            Self::Write { base, header, .. } => (*base, base + i64::from(header.last_offset_delta) + 1),
            Self::Run { base, records, .. } => (*base, base + i64::from(*records)),
            Self::Marker { base, .. } => (*base, base + 1),
        }
    }
}
