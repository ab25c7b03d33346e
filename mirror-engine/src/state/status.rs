//! Per-partition progress and state, shared between the partition tasks (writers) and whoever
//! reports it (the proxy's `/metrics`, the describe answers), including the recent copy rate
//! ([`RateWindow`]). Nothing here does I/O.

use std::collections::VecDeque;
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
    /// Every state, in life-cycle order.
    pub const ALL: [Self; 9] = [
        Self::Preparing,
        Self::Mirroring,
        Self::Filling,
        Self::Retrying,
        Self::Failed,
        Self::Pausing,
        Self::Paused,
        Self::Stopping,
        Self::Stopped,
    ];

    /// The state named `s` (as [`Self::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
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
    /// The source leader epoch of the batch that held the last copied offset
    /// (`destination_next_offset - 1`; `copy::epochs`), -1 unknown: with that offset, the line a
    /// stop records (KIP-1279's last mirror epoch and offset).
    pub last_mirror_epoch: i32,
    pub records_mirrored: u64,
    pub filler_records: u64,
    pub bytes_mirrored: u64,
    /// Source batches with compaction holes that were re-encoded into runs and fillers.
    pub reencoded_batches: u64,
    /// Small source batches merged into larger destination batches (`coalesce_max_bytes`).
    pub coalesced_batches: u64,
    /// Plans refused because they broke an engine invariant (each one turned the partition FAILED).
    pub invariant_violations: u64,
    /// Newest source record timestamp (ms) written to the destination; -1 before the first.
    pub last_mirrored_timestamp_ms: i64,
    /// Wall-clock time of that write minus that timestamp (ms): how old data is when it lands.
    pub replication_latency_ms: i64,
    pub last_error: Option<String>,
    /// FAILED for a reason that survives restarts (see `MirrorError::is_sticky`).
    pub sticky: bool,
    /// Source records and bytes written over the last [`RATE_WINDOW_MS`] (the copy rate).
    pub rate: RateWindow,
    /// Wall-clock time (ms) the source's ends above were last read (a Fetch answer or a
    /// ListOffsets probe, see `progress_watch`); -1 never.
    pub source_ends_read_ms: i64,
    /// Since when (ms) the partition has made no progress while the source holds records it
    /// has not copied (`progress_watch`); -1 while it progresses or is caught up.
    pub stalled_since_ms: i64,
}

impl Default for PartitionStatus {
    fn default() -> Self {
        Self {
            state: PartitionState::Preparing,
            source_high_watermark: -1,
            source_last_stable_offset: -1,
            destination_next_offset: -1,
            last_mirror_epoch: -1,
            records_mirrored: 0,
            filler_records: 0,
            bytes_mirrored: 0,
            reencoded_batches: 0,
            coalesced_batches: 0,
            invariant_violations: 0,
            last_mirrored_timestamp_ms: -1,
            replication_latency_ms: 0,
            last_error: None,
            sticky: false,
            rate: RateWindow::default(),
            source_ends_read_ms: -1,
            stalled_since_ms: -1,
        }
    }
}

impl PartitionStatus {
    /// Records the source is ahead of the destination (by the high watermark: the engine copies
    /// open transactions' records too, `copy::txn`).
    pub fn lag_records(&self) -> i64 {
        (self.source_high_watermark - self.destination_next_offset).max(0)
    }

    /// The lag as views show it (REST, dashboard, DescribeClusterMirrors): [`Self::lag_records`],
    /// or -1 while the source's end has not been read (unknown, not caught up).
    pub fn lag_shown(&self) -> i64 {
        if self.source_high_watermark < 0 { -1 } else { self.lag_records() }
    }

    /// Seconds (at `now_ms`) the partition has made no progress while behind the source; 0 while
    /// it progresses or is caught up.
    pub fn stalled_seconds(&self, now_ms: i64) -> f64 {
        if self.stalled_since_ms < 0 {
            return 0.0;
        }
        (now_ms - self.stalled_since_ms).max(0) as f64 / 1000.0
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

/// Span of the copy rate: records and bytes written in the last 10 s (or since the first write
/// when that is more recent).
pub const RATE_WINDOW_MS: i64 = 10_000;
/// Granularity of the rate window: writes within one second share a bucket.
const BUCKET_MS: i64 = 1_000;

/// Source records and bytes written per one-second bucket over the last [`RATE_WINDOW_MS`]:
/// the exact amount written recently, from which a rate follows. Fillers are not counted.
#[derive(Debug, Clone, Default)]
pub struct RateWindow {
    /// `(bucket start ms, records, bytes)`, oldest first, at most one per second of the window.
    buckets: VecDeque<(i64, u64, u64)>,
    /// Time of the first write this window saw (the window is shorter until 10 s after it).
    first_ms: Option<i64>,
}

/// What a [`RateWindow`] saw: `records` and `bytes` written during the last `span_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recent {
    pub span_ms: i64,
    pub records: u64,
    pub bytes: u64,
}

impl Recent {
    /// Records per second (0 when nothing was written or no time passed).
    pub fn records_per_sec(&self) -> f64 {
        per_sec(self.records, self.span_ms)
    }

    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        per_sec(self.bytes, self.span_ms)
    }
}

fn per_sec(n: u64, span_ms: i64) -> f64 {
    if span_ms <= 0 { 0.0 } else { n as f64 * 1000.0 / span_ms as f64 }
}

impl RateWindow {
    /// Notes `records` source records of `bytes` bytes written at `now_ms`.
    pub fn add(&mut self, now_ms: i64, records: u64, bytes: u64) {
        let start = now_ms - now_ms.rem_euclid(BUCKET_MS);
        while self.buckets.front().is_some_and(|b| b.0 + BUCKET_MS <= now_ms - RATE_WINDOW_MS) {
            self.buckets.pop_front();
        }
        if self.buckets.is_empty() {
            // First write, or the first after a pause longer than the window: the rate is
            // measured from here, not diluted over the idle time.
            self.first_ms = Some(now_ms);
        }
        match self.buckets.back_mut() {
            Some(b) if b.0 == start => {
                b.1 += records;
                b.2 += bytes;
            }
            _ => self.buckets.push_back((start, records, bytes)),
        }
    }

    /// Records and bytes written in the window ending at `now_ms`: the buckets that overlap the
    /// last [`RATE_WINDOW_MS`], over the time they cover (from the first write if that is newer,
    /// at least one second so a single burst does not read as a huge rate).
    pub fn recent(&self, now_ms: i64) -> Recent {
        let Some(first) = self.first_ms else {
            return Recent::default();
        };
        let from = now_ms - RATE_WINDOW_MS;
        let (mut records, mut bytes) = (0, 0);
        for b in self.buckets.iter().filter(|b| b.0 + BUCKET_MS > from && b.0 <= now_ms) {
            records += b.1;
            bytes += b.2;
        }
        // The oldest counted bucket may have started before the window: the span starts at the
        // older of the window start and that bucket, so its writes are not read as faster.
        let oldest = self.buckets.iter().find(|b| b.0 + BUCKET_MS > from).map_or(from, |b| b.0.min(from));
        let start = oldest.max(first - first.rem_euclid(BUCKET_MS));
        Recent {
            span_ms: (now_ms - start).max(BUCKET_MS),
            records,
            bytes,
        }
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

/// The status of every mirrored partition; cheap to clone.
#[derive(Debug, Clone)]
pub struct StatusBoard {
    parts: Arc<DashMap<PartitionKey, PartitionStatus>>,
    /// Bumped whenever a partition appears, goes or changes its state (not on progress alone):
    /// whoever waits for states subscribes instead of polling.
    states: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        Self {
            parts: Arc::default(),
            states: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl StatusBoard {
    pub fn update(&self, key: &PartitionKey, f: impl FnOnce(&mut PartitionStatus)) {
        let entry = self.parts.entry(key.clone());
        let before = match &entry {
            dashmap::Entry::Occupied(o) => Some(o.get().state),
            dashmap::Entry::Vacant(_) => None,
        };
        let mut status = entry.or_default();
        f(status.value_mut());
        let changed = before != Some(status.state);
        drop(status);
        if changed {
            self.bump();
        }
    }

    fn bump(&self) {
        self.states.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later state change (subscribe, then read, then await
    /// `changed()`).
    pub fn state_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.states.subscribe()
    }

    /// Forgets one partition (its mirror was deleted).
    pub fn remove(&self, key: &PartitionKey) {
        if self.parts.remove(key).is_some() {
            self.bump();
        }
    }

    /// A copy of one partition's status.
    pub fn get(&self, key: &PartitionKey) -> Option<PartitionStatus> {
        self.parts.get(key).map(|e| e.value().clone())
    }

    /// A copy of every partition's status, sorted by key.
    pub fn snapshot(&self) -> Vec<(PartitionKey, PartitionStatus)> {
        let mut v: Vec<_> = self.parts.iter().map(|e| (e.key().clone(), e.value().clone())).collect();
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
            source_high_watermark: 10,
            source_last_stable_offset: 2,
            destination_next_offset: 10,
            ..Default::default()
        };
        s.record_write(1_000, 1_250);
        assert_eq!(s.replication_latency_ms, 250);
        assert_eq!(s.lag_seconds(5_000), 0.0, "caught up with the high watermark, an open transaction included");
        s.source_high_watermark = 20;
        assert_eq!(s.lag_records(), 10);
        assert_eq!(s.lag_seconds(5_000), 4.0);
    }

    #[test]
    fn the_rate_counts_what_was_written_in_the_last_ten_seconds() {
        let mut w = RateWindow::default();
        assert_eq!(w.recent(5_000), Recent::default(), "nothing written: no rate");
        // 100 records (10 kB) per second for 20 s, starting at t = 100 s.
        for i in 0..20 {
            w.add(100_000 + i * 1_000 + 500, 100, 10_000);
        }
        let r = w.recent(119_900);
        assert_eq!(r.span_ms, 10_900, "ten seconds plus the partly covered oldest bucket");
        assert_eq!((r.records, r.bytes), (1_100, 110_000), "the 11 buckets overlapping the window");
        assert!((r.records_per_sec() - 100.9).abs() < 0.1, "≈100 records/s: {}", r.records_per_sec());
        assert!((r.bytes_per_sec() / r.records_per_sec() - 100.0).abs() < 1e-9, "100 bytes per record");
        assert!(w.buckets.len() <= 11, "old buckets are dropped: {}", w.buckets.len());
    }

    #[test]
    fn a_young_window_measures_from_the_first_write_and_an_idle_one_decays_to_zero() {
        let mut w = RateWindow::default();
        w.add(50_200, 300, 3_000);
        w.add(51_700, 300, 3_000);
        let r = w.recent(52_000);
        assert_eq!((r.span_ms, r.records), (2_000, 600), "measured since the first write's second, not over 10 s");
        assert_eq!(w.recent(50_300).span_ms, 1_000, "at least one second: one burst is not an infinite rate");
        let idle = w.recent(70_000);
        assert_eq!((idle.records, idle.records_per_sec()), (0, 0.0), "nothing in the last 10 s: rate 0");
        // Writing again after the pause measures from the restart, not over the idle time.
        w.add(80_000, 500, 5_000);
        assert_eq!(w.recent(80_500).span_ms, 1_000);
        assert_eq!(w.recent(80_500).records, 500);
    }
}
