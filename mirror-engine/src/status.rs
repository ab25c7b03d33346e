//! Per-partition progress and state, shared between the partition tasks (writers) and whoever
//! reports it (the proxy's `/metrics`, later describe output). Nothing here does I/O.

use std::sync::Arc;

use dashmap::DashMap;

/// Life-cycle state of a mirrored partition (KIP-1279 §2.2 without the broker-internal
/// LOG_TRUNCATION / EPOCH_FENCING steps, which a proxy cannot perform; `Preparing` stands for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionState {
    /// Creating the topic, looking up leaders, initialising the producer.
    Preparing,
    /// Copying.
    Mirroring,
    /// Writing a run of fillers that takes several batches (e.g. a retention prefix).
    Filling,
    /// Waiting to retry after a transient error.
    Retrying,
    /// Stopped for good with a reason (see `last_error`).
    Failed,
    /// Pause requested; the copy task is finishing.
    Pausing,
    /// Not copying, still read-only (KIP-1279 PAUSED).
    Paused,
    /// Stop (failover) requested; the copy task is finishing its in-flight writes.
    Stopping,
    /// Not copying and writable by clients (failed over).
    Stopped,
}

impl PartitionState {
    /// The state named `s` (as [`Self::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Preparing,
            Self::Mirroring,
            Self::Filling,
            Self::Retrying,
            Self::Failed,
            Self::Pausing,
            Self::Paused,
            Self::Stopping,
            Self::Stopped,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preparing => "preparing",
            Self::Mirroring => "mirroring",
            Self::Filling => "filling",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Pausing => "pausing",
            Self::Paused => "paused",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
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
    /// Plans refused because they broke an engine invariant (each one turned the partition FAILED).
    pub invariant_violations: u64,
    /// Newest source record timestamp (ms) written to the destination; -1 before the first.
    pub last_mirrored_timestamp_ms: i64,
    /// Wall-clock time of that write minus that timestamp (ms): how old data is when it lands.
    pub replication_latency_ms: i64,
    pub last_error: Option<String>,
    /// FAILED for a reason that survives restarts (see `MirrorError::is_sticky`).
    pub sticky: bool,
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
            invariant_violations: 0,
            last_mirrored_timestamp_ms: -1,
            replication_latency_ms: 0,
            last_error: None,
            sticky: false,
        }
    }
}

impl PartitionStatus {
    /// Records the source is ahead of the destination (by the last stable offset).
    pub fn lag_records(&self) -> i64 {
        (self.source_last_stable_offset - self.destination_next_offset).max(0)
    }

    /// Seconds the destination is behind in time: 0 when caught up, otherwise the age (at `now_ms`)
    /// of the newest record already mirrored — an upper bound of how stale the destination is.
    pub fn lag_seconds(&self, now_ms: i64) -> f64 {
        if self.lag_records() == 0 || self.last_mirrored_timestamp_ms < 0 {
            return 0.0;
        }
        (now_ms - self.last_mirrored_timestamp_ms).max(0) as f64 / 1000.0
    }

    /// Notes that a batch whose newest record has `max_timestamp` was written at `now_ms`.
    pub fn record_write(&mut self, max_timestamp: i64, now_ms: i64) {
        if max_timestamp > self.last_mirrored_timestamp_ms {
            self.last_mirrored_timestamp_ms = max_timestamp;
        }
        self.replication_latency_ms = (now_ms - max_timestamp).max(0);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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

    /// Forgets one partition (its mirror was deleted).
    pub fn remove(&self, key: &PartitionKey) {
        self.0.remove(key);
    }

    /// A copy of one partition's status.
    pub fn get(&self, key: &PartitionKey) -> Option<PartitionStatus> {
        self.0.get(key).map(|e| e.value().clone())
    }

    /// A copy of every partition's status, sorted by key.
    pub fn snapshot(&self) -> Vec<(PartitionKey, PartitionStatus)> {
        let mut v: Vec<_> = self.0.iter().map(|e| (e.key().clone(), e.value().clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_lag_is_zero_when_caught_up_and_the_age_of_the_newest_copy_otherwise() {
        let mut s = PartitionStatus {
            source_last_stable_offset: 10,
            destination_next_offset: 10,
            ..Default::default()
        };
        s.record_write(1_000, 1_250);
        assert_eq!(s.replication_latency_ms, 250);
        assert_eq!(s.lag_seconds(5_000), 0.0, "caught up");
        s.source_last_stable_offset = 20;
        assert_eq!(s.lag_records(), 10);
        assert_eq!(s.lag_seconds(5_000), 4.0);
    }
}
