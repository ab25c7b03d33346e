//! Errors of the mirror engine, split into the ones worth retrying (a broker restarted, a leader
//! moved) and the ones that turn a partition FAILED.

use kmp_protocol::ProtocolError;

/// Why a partition could not make progress.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// Talking to the source cluster failed.
    #[error("source: {0}")]
    Source(ProtocolError),
    /// Talking to the destination cluster failed.
    #[error("destination: {0}")]
    Destination(ProtocolError),
    /// A broker answered with a Kafka error code.
    #[error("{side} {what}: Kafka error code {code}")]
    Broker { side: &'static str, what: String, code: i16 },
    /// The destination wrote a batch at another offset than the source's: the invariant broke.
    #[error("offset drift: batch written at destination offset {got}, expected {expected}")]
    OffsetMismatch { expected: i64, got: i64 },
    /// The destination topic exists and holds data the mirror did not write, or has another
    /// partition count.
    #[error("destination topic {topic} already exists and is not this mirror's: {reason}; refusing to append (delete it or choose another topic)")]
    DestinationConflict { topic: String, reason: String },
    /// The source topic disappeared after mirroring started; the destination data stays.
    #[error("source topic {0} was deleted (or deleted and recreated: its topic id changed); the mirrored data on the destination is kept")]
    SourceTopicDeleted(String),
    /// A run of offsets without visible data is larger than the mirror's `max_fill_offsets`.
    #[error(
        "{count} offsets from {base} have no visible source data, more than max_fill_offsets = {limit}; raise max_fill_offsets to fill them (see docs/mirroring.md for the fill rate)"
    )]
    FillTooLarge { base: i64, count: i64, limit: i64 },
    /// The source has something the engine cannot copy exactly yet.
    #[error("unsupported source data: {0}")]
    Unsupported(String),
    /// A plan broke one of the engine's invariants (a filler over a source record, offsets
    /// skipped or written twice); nothing of it was written.
    #[error("engine invariant violated, nothing written: {0}")]
    Invariant(String),
}

/// Kafka error codes that clear up by themselves (leader moves, restarts, timeouts).
const RETRIABLE: &[i16] = &[
    3,  // UNKNOWN_TOPIC_OR_PARTITION (metadata not propagated yet)
    5,  // LEADER_NOT_AVAILABLE
    6,  // NOT_LEADER_OR_FOLLOWER
    7,  // REQUEST_TIMED_OUT
    8,  // BROKER_NOT_AVAILABLE
    13, // NETWORK_EXCEPTION
    14, // COORDINATOR_LOAD_IN_PROGRESS
    15, // COORDINATOR_NOT_AVAILABLE
    19, // NOT_ENOUGH_REPLICAS
    20, // NOT_ENOUGH_REPLICAS_AFTER_APPEND
    41, // NOT_CONTROLLER
    45, // OUT_OF_ORDER_SEQUENCE_NUMBER (producer is re-initialised)
    51, // CONCURRENT_TRANSACTIONS
    56, // KAFKA_STORAGE_ERROR
    74, // FENCED_LEADER_EPOCH
    75, // UNKNOWN_LEADER_EPOCH
    78, // OFFSET_NOT_AVAILABLE (a new leader's high watermark not caught up yet)
    89, // THROTTLING_QUOTA_EXCEEDED
];

impl MirrorError {
    /// Whether a FAILED partition must stay FAILED across restarts (the state topic keeps it):
    /// the invariant broke or the source is gone, and only an operator can decide what next.
    pub fn is_sticky(&self) -> bool {
        matches!(self, Self::OffsetMismatch { .. } | Self::SourceTopicDeleted(_))
    }

    /// Whether retrying with backoff can help.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Source(_) | Self::Destination(_) => true,
            Self::Broker { code, .. } => RETRIABLE.contains(code),
            Self::OffsetMismatch { .. }
            | Self::DestinationConflict { .. }
            | Self::SourceTopicDeleted(_)
            | Self::FillTooLarge { .. }
            | Self::Unsupported(_)
            | Self::Invariant(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_leaders_unsettled_offsets_are_retried_and_invariant_violations_are_not() {
        let broker = |code| MirrorError::Broker {
            side: "destination",
            what: "ListOffsets".into(),
            code,
        };
        assert!(broker(78).is_retriable(), "OFFSET_NOT_AVAILABLE right after a leader election");
        assert!(broker(74).is_retriable() && broker(75).is_retriable());
        assert!(!broker(29).is_retriable());
        assert!(!MirrorError::Invariant("x".into()).is_retriable());
    }
}
