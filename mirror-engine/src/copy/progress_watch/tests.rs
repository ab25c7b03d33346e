//! The progress watch's decisions: when to read the source's ends, when a partition is stalled.

use super::*;

fn status(state: PartitionState, dest: i64, source_end: i64, ends_read_ms: i64) -> PartitionStatus {
    PartitionStatus {
        state,
        destination_next_offset: dest,
        source_high_watermark: source_end,
        source_last_stable_offset: source_end,
        source_ends_read_ms: ends_read_ms,
        ..Default::default()
    }
}

#[test]
fn the_source_ends_are_read_only_when_no_answer_brought_them_recently() {
    let mut w = Watch::default();
    assert!(
        !w.observe(20_000, &status(PartitionState::Mirroring, 5, 5, 0), 19_600),
        "an idle partition's session answered 0.4 s ago without it: no news"
    );
    assert!(
        !w.observe(20_000, &status(PartitionState::Mirroring, 5, 5, 19_500), -1),
        "an answer 0.5 s ago told them"
    );
    assert!(
        w.observe(20_000, &status(PartitionState::Mirroring, 5, 5, 20_000 - PROBE_AFTER), -1),
        "no answer for PROBE_AFTER"
    );
    assert!(w.observe(20_000, &status(PartitionState::Retrying, 5, 5, -1), -1), "never read");
    assert!(
        !w.observe(20_000, &status(PartitionState::Paused, 5, 5, -1), -1),
        "a paused partition is not watched"
    );
}

#[test]
fn a_partition_whose_offset_does_not_move_while_the_source_holds_more_is_stalled_after_stall_after() {
    let mut w = Watch::default();
    w.observe(1_000, &status(PartitionState::Mirroring, 100, 100, 1_000), -1);
    let behind = status(PartitionState::Mirroring, 100, 250, 1_000);
    w.observe(1_000 + STALL_AFTER - 1, &behind, -1);
    assert_eq!(w.stalled(1_000 + STALL_AFTER - 1, &behind), None, "not yet STALL_AFTER");
    w.observe(1_000 + STALL_AFTER, &behind, -1);
    assert_eq!(
        w.stalled(1_000 + STALL_AFTER, &behind),
        Some(1_000),
        "stuck at 100 since 1 s while the source ends at 250"
    );
    let retrying = status(PartitionState::Retrying, 100, 250, 1_000);
    assert_eq!(w.stalled(1_000 + STALL_AFTER, &retrying), Some(1_000), "retrying without end is stalled too");
}

#[test]
fn an_idle_caught_up_partition_and_one_that_moves_are_not_stalled() {
    let mut w = Watch::default();
    let idle = status(PartitionState::Mirroring, 100, 100, 0);
    w.observe(0, &idle, -1);
    w.observe(10 * STALL_AFTER, &idle, -1);
    assert_eq!(w.stalled(10 * STALL_AFTER, &idle), None, "lag 0: nothing to copy");
    let mut w = Watch::default();
    w.observe(0, &status(PartitionState::Mirroring, 100, 500, 0), -1);
    let moved = status(PartitionState::Mirroring, 101, 500, 0);
    w.observe(STALL_AFTER, &moved, -1);
    assert_eq!(w.stalled(STALL_AFTER, &moved), None, "it moved just now");
}

#[test]
fn the_stall_mark_shows_its_reason_keeps_other_errors_and_clears_only_its_own() {
    let mut s = status(PartitionState::Mirroring, 100, 250, 0);
    mark(&mut s, Some(1_000), 41_000);
    assert_eq!(s.stalled_since_ms, 1_000);
    let reason = s.last_error.clone().expect("a reason is shown");
    assert!(reason.contains("40 s") && reason.contains("150 records"), "{reason}");
    mark(&mut s, None, 42_000);
    assert_eq!(
        (s.stalled_since_ms, s.last_error.as_deref()),
        (-1, None),
        "progress clears the mark and its reason"
    );
    s.last_error = Some("source: timed out".into());
    mark(&mut s, Some(1_000), 41_000);
    assert_eq!(s.last_error.as_deref(), Some("source: timed out"), "the copy loop's own error stays");
    mark(&mut s, None, 42_000);
    assert_eq!(s.last_error.as_deref(), Some("source: timed out"), "and is not cleared by the watch");
}
