//! Whether a partition makes progress, told apart from what its copy loop believes: the loop
//! learns the source's ends only from its own Fetch answers, so a Fetch that never completes (a
//! source dribbling its answers, a throttled engine) would leave the last ends shown — lag 0,
//! "mirroring" — for as long as it lasts. Beside each partition task a watch reads the source's
//! real ends with ListOffsets (on the control connection, under the source request timeout)
//! whenever no answer brought them, nor a Fetch response of the partition's session said they
//! were unchanged, for [`PROBE_AFTER`], and marks the partition stalled
//! (`stalled_since_ms`, `kmp_mirror_stalled_seconds`, the reason in `last_error`) once its
//! destination offset has not moved for [`STALL_AFTER`] while the source holds records it has
//! not copied. Progress clears the mark. The decisions are [`Watch`]'s (no I/O); the probing
//! loop is [`run`].

use std::time::Duration;

use tracing::{debug, warn};

use crate::cluster::client::{ClusterClient, READ_COMMITTED, READ_UNCOMMITTED, list_offset};
use crate::cluster::links::Lane;
use crate::copy::fetch::session::Heard;
use crate::error::MirrorError;
use crate::state::status::{PartitionKey, PartitionState, PartitionStatus, StatusBoard, now_ms};

/// How often the watch looks at the partition.
const TICK: Duration = Duration::from_secs(2);
/// No source ends read for this long (ms): the watch reads them itself.
pub(crate) const PROBE_AFTER: i64 = 10_000;
/// No progress for this long (ms) while the source holds more: the partition is stalled.
pub(crate) const STALL_AFTER: i64 = 30_000;
/// How the watch's reason in `last_error` starts (so that it clears only its own).
const STALL_REASON: &str = "no progress for";

/// What the watch remembers between looks.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The destination offset last seen and since when (ms) it has not moved.
    at: Option<(i64, i64)>,
}

/// Whether the partition is meant to be copying (a paused, stopped or failed one is not watched).
fn copying(state: PartitionState) -> bool {
    matches!(state, PartitionState::Mirroring | PartitionState::Filling | PartitionState::Retrying)
}

impl Watch {
    /// Looks at the partition's status `s` at `now` (ms): whether to read the source's ends now
    /// (none was read for [`PROBE_AFTER`], and the source last answered a Fetch for the
    /// partition at `heard`, ms, without news: an incremental fetch session leaves out
    /// partitions whose ends did not change).
    pub(crate) fn observe(&mut self, now: i64, s: &PartitionStatus, heard: i64) -> bool {
        if !copying(s.state) {
            self.at = None;
            return false;
        }
        let since = match self.at {
            Some((offset, since)) if offset == s.destination_next_offset => since,
            _ => now,
        };
        self.at = Some((s.destination_next_offset, since));
        let read = s.source_ends_read_ms.max(heard);
        read < 0 || now - read >= PROBE_AFTER
    }

    /// `Some(since)` when the partition (status `s` at `now`) has not moved since then, for at
    /// least [`STALL_AFTER`], while the source holds records it has not copied.
    pub(crate) fn stalled(&self, now: i64, s: &PartitionStatus) -> Option<i64> {
        let (offset, since) = self.at?;
        let stuck = copying(s.state) && offset == s.destination_next_offset && now - since >= STALL_AFTER;
        (stuck && s.lag_records() > 0).then_some(since)
    }
}

/// Applies the stall mark `stalled_since` to `s` (and the reason, unless another error is shown).
pub(crate) fn mark(s: &mut PartitionStatus, stalled_since: Option<i64>, now: i64) {
    match stalled_since {
        Some(since) => {
            s.stalled_since_ms = since;
            let ours = s.last_error.as_deref().is_none_or(|e| e.starts_with(STALL_REASON));
            if ours {
                s.last_error = Some(format!(
                    "{STALL_REASON} {} s while the source holds {} records not copied (source end {}, destination at {})",
                    (now - since) / 1000,
                    s.lag_records(),
                    s.source_high_watermark,
                    s.destination_next_offset
                ));
            }
        }
        None => {
            if s.stalled_since_ms >= 0 && s.last_error.as_deref().is_some_and(|e| e.starts_with(STALL_REASON)) {
                s.last_error = None;
            }
            s.stalled_since_ms = -1;
        }
    }
}

/// Reads `topic`-`partition`'s high watermark and last stable offset from its source leader.
async fn source_ends(source: &ClusterClient, topic: &str, partition: i32) -> Result<(i64, i64), MirrorError> {
    let layout = source.layout(topic).await?;
    let (leader, epoch) = source.leader_in(&layout, topic, partition)?;
    let conn = source.link(&leader, Lane::Control).await?;
    let hw = list_offset("source", &conn, topic, partition, -1, READ_UNCOMMITTED, epoch).await?;
    let lso = list_offset("source", &conn, topic, partition, -1, READ_COMMITTED, epoch).await?;
    Ok((hw, lso))
}

/// Watches partition `key` until the task holding this future drops it.
/// `heard`: when the source last answered a Fetch for the partition (`copy::fetch::session`).
pub(crate) async fn run(key: PartitionKey, source: ClusterClient, status: StatusBoard, heard: Heard) {
    let mut watch = Watch::default();
    let (_, topic, partition) = &key;
    loop {
        tokio::time::sleep(TICK).await;
        let Some(s) = status.get(&key) else { continue };
        let now = now_ms();
        if watch.observe(now, &s, heard.load(std::sync::atomic::Ordering::Relaxed)) {
            match source_ends(&source, topic, *partition).await {
                Ok((hw, lso)) => status.update(&key, |s| {
                    s.source_high_watermark = s.source_high_watermark.max(hw);
                    s.source_last_stable_offset = s.source_last_stable_offset.max(lso);
                    s.source_ends_read_ms = now_ms();
                }),
                Err(e) => debug!(error = %e.detail(), "cannot read the source's ends for the progress watch"),
            }
        }
        let now = now_ms();
        status.update(&key, |s| {
            let stalled = watch.stalled(now, s);
            if stalled.is_some() && s.stalled_since_ms < 0 {
                warn!(
                    destination = s.destination_next_offset,
                    source_end = s.source_high_watermark,
                    "partition makes no progress while the source holds more records"
                );
            }
            mark(s, stalled, now);
        });
    }
}

#[cfg(test)]
mod tests;
