//! Per-partition progress and state, shared between the partition tasks (writers) and whoever
//! reports it (the proxy's `/metrics`, later describe output). Nothing here does I/O.

use std::sync::Arc;

use dashmap::DashMap;

/// Life-cycle state of a mirrored partition (a subset of KIP-1279's; pause/stop come later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionState {
    /// Creating the topic, looking up leaders, initialising the producer.
    Preparing,
    /// Copying.
    Mirroring,
    /// Waiting to retry after a transient error.
    Retrying,
    /// Stopped for good with a reason (see `last_error`).
    Failed,
}

impl PartitionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preparing => "preparing",
            Self::Mirroring => "mirroring",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
        }
    }
}

/// Progress of one partition.
#[derive(Debug, Clone)]
pub struct PartitionStatus {
    pub state: PartitionState,
    pub source_high_watermark: i64,
    pub source_last_stable_offset: i64,
    /// Next destination offset (= source offset copied up to).
    pub destination_next_offset: i64,
    pub records_mirrored: u64,
    pub filler_records: u64,
    pub bytes_mirrored: u64,
    /// Source batches with compaction holes that were re-encoded into runs and fillers.
    pub reencoded_batches: u64,
    pub last_error: Option<String>,
}

impl Default for PartitionStatus {
    fn default() -> Self {
        Self {
            state: PartitionState::Preparing,
            source_high_watermark: -1,
            source_last_stable_offset: -1,
            destination_next_offset: -1,
            records_mirrored: 0,
            filler_records: 0,
            bytes_mirrored: 0,
            reencoded_batches: 0,
            last_error: None,
        }
    }
}

/// `(mirror, topic, partition)`.
pub type PartitionKey = (String, String, i32);

/// The status of every mirrored partition.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard(Arc<DashMap<PartitionKey, PartitionStatus>>);

impl StatusBoard {
    pub fn update(&self, key: &PartitionKey, f: impl FnOnce(&mut PartitionStatus)) {
        f(&mut self.0.entry(key.clone()).or_default());
    }

    /// A copy of every partition's status, sorted by key.
    pub fn snapshot(&self) -> Vec<(PartitionKey, PartitionStatus)> {
        let mut v: Vec<_> = self.0.iter().map(|e| (e.key().clone(), e.value().clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}
