//! Which way each partition of a failing-back topic goes, from the line the source proxy
//! recorded (offset `L`, epoch `E` of the record before it) and this cluster's log of the topic:
//!
//! - **incremental**: the log ends exactly at `L` and holds epoch `E` up to `L` (so the records
//!   below `L` are the ones the other cluster copied): the mirror takes the topic over at `L`
//!   and copies from there;
//! - **restore**: anything else — records past `L` (written here after the other cluster's copy
//!   stopped: a disaster's unmirrored tail, or writes after the failover), or a history below
//!   `L` that differs (an unclean election here rewrote it), or no line at all. The records from
//!   the first offset the line cannot vouch for to the end are quarantined, and the topic is
//!   re-created and restored from the source.

use crate::cluster::client::{ClusterClient, READ_COMMITTED, list_offset, offsets};
use crate::cluster::epoch_end::epoch_end;
use crate::error::MirrorError;

/// What this cluster's log of one partition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Here {
    pub start: i64,
    pub end: i64,
    /// The last stable offset (below `end` while a transaction is open).
    pub stable: i64,
    /// `(epoch, end)` the log answers for the line's epoch (`None` when not asked).
    pub epoch_end: Option<(i32, i64)>,
}

/// A partition's way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Copy from the source from `at` on; nothing here moves.
    Incremental { at: i64 },
    /// Quarantine `[from, end)`, then re-create the topic and restore it from the source.
    Restore { from: i64, end: i64 },
}

impl Path {
    /// The first offset this path quarantines of a log ending at `end` (`end`: none).
    pub(crate) fn quarantined_from(self, end: i64) -> i64 {
        match self {
            Self::Incremental { .. } => end,
            Self::Restore { from, .. } => from,
        }
    }

    /// Records (offsets) this path quarantines.
    pub(crate) fn quarantined(self) -> i64 {
        match self {
            Self::Incremental { .. } => 0,
            Self::Restore { from, end } => end - from,
        }
    }
}

/// The path for a partition whose log is `here`, given the source proxy's line (`None`: it has
/// none for this partition).
pub(crate) fn decide(here: Here, line: Option<(i64, i32)>) -> Path {
    let restore_from = |vouched: i64| Path::Restore {
        from: vouched.clamp(here.start, here.end),
        end: here.end,
    };
    let Some((at, epoch)) = line else {
        return restore_from(here.start);
    };
    // How far this log provably equals what the other cluster copied.
    let vouched = if at == 0 {
        0
    } else if epoch < 0 {
        // A line recorded without its epoch proves nothing.
        here.start
    } else {
        match here.epoch_end {
            Some((_, end)) if end >= 0 => end.min(at),
            _ => here.start,
        }
    };
    if here.end == at && vouched == at && here.start <= at {
        Path::Incremental { at }
    } else {
        restore_from(vouched)
    }
}

/// Reads [`Here`] for `topic`-`partition` on `cluster`, asking about `epoch` (skipped when < 0).
pub(crate) async fn here(cluster: &ClusterClient, topic: &str, partition: i32, epoch: i32) -> Result<Here, MirrorError> {
    let (conn, leader_epoch) = cluster.leader_link(topic, partition).await?;
    let (start, end) = offsets("destination", &conn, topic, partition).await?;
    let stable = list_offset("destination", &conn, topic, partition, -1, READ_COMMITTED, -1).await?;
    let epoch_end = if epoch >= 0 {
        Some(epoch_end("destination", &conn, topic, partition, leader_epoch, epoch).await?)
    } else {
        None
    };
    Ok(Here { start, end, stable, epoch_end })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here(start: i64, end: i64, epoch_end: Option<(i32, i64)>) -> Here {
        Here {
            start,
            end,
            stable: end,
            epoch_end,
        }
    }

    #[test]
    fn a_log_ending_at_the_line_in_the_lines_epoch_continues_from_the_line() {
        assert_eq!(decide(here(0, 100, Some((4, 100))), Some((100, 4))), Path::Incremental { at: 100 });
        // Epoch 4 went on in a later epoch here (5 began at 100): still the same records below 100.
        assert_eq!(decide(here(0, 100, Some((4, 100))), Some((100, 4))).quarantined(), 0);
        assert_eq!(
            decide(here(0, 0, None), Some((0, -1))),
            Path::Incremental { at: 0 },
            "nothing copied, nothing here"
        );
    }

    #[test]
    fn records_past_the_line_are_quarantined_from_the_line() {
        let path = decide(here(0, 130, Some((4, 130))), Some((100, 4)));
        assert_eq!(path, Path::Restore { from: 100, end: 130 });
        assert_eq!(path.quarantined(), 30);
    }

    #[test]
    fn a_history_rewritten_below_the_line_is_quarantined_from_where_the_epoch_ended_here() {
        // An unclean election here: epoch 4 ends at 80, though the other cluster copied it to 100.
        assert_eq!(decide(here(0, 100, Some((4, 80))), Some((100, 4))), Path::Restore { from: 80, end: 100 });
        // This log never had epoch 4: its epoch 2 ended at 60.
        assert_eq!(decide(here(0, 120, Some((2, 60))), Some((100, 4))), Path::Restore { from: 60, end: 120 });
        // A log that lost its tail cannot continue at the line either; nothing of it is unproven.
        assert_eq!(decide(here(0, 90, Some((4, 90))), Some((100, 4))), Path::Restore { from: 90, end: 90 });
    }

    #[test]
    fn without_a_line_or_its_epoch_nothing_is_vouched_for() {
        assert_eq!(decide(here(5, 50, None), None), Path::Restore { from: 5, end: 50 });
        assert_eq!(decide(here(0, 100, None), Some((100, -1))), Path::Restore { from: 0, end: 100 });
        assert_eq!(decide(here(0, 100, Some((-1, -1))), Some((100, 4))), Path::Restore { from: 0, end: 100 });
    }

    #[test]
    fn a_log_start_past_the_line_leaves_nothing_to_continue_from() {
        assert_eq!(decide(here(120, 120, Some((4, 120))), Some((100, 4))), Path::Restore { from: 120, end: 120 });
    }
}
