//! What a source answer may say: the lies of a relabelling source are refused, every answer a
//! true Kafka gives (a batch holding the offset asked, compaction gaps, retention) is accepted.

use super::*;
use crate::copy::plan::tests::batch;

fn answer(hw: i64, log_start: i64, batches: &[(i64, i64)]) -> Fetched {
    Fetched {
        high_watermark: hw,
        last_stable_offset: hw,
        log_start_offset: log_start,
        batches: batches.iter().map(|&(base, n)| batch(base, n)).collect(),
    }
}

fn refused(r: Result<Checked, MirrorError>) -> String {
    match r {
        Err(e @ MirrorError::SourceContradiction(_)) => {
            assert!(!e.is_retriable(), "a lying source fails the partition: {e}");
            e.to_string()
        }
        other => panic!("expected the answer refused as a contradiction, got {other:?}"),
    }
}

#[test]
fn a_batch_holding_the_offset_asked_may_start_before_it_unless_the_position_is_a_batch_end() {
    // After DeleteRecords at 105 (inside the batch 100..110) or a resume inside a batch.
    assert_eq!(check(105, false, &answer(120, 105, &[(100, 10), (110, 5)])).ok(), Some(Checked::default()));
    let e = refused(check(105, true, &answer(120, 0, &[(100, 10)])));
    assert!(e.contains("100..110") && e.contains("105"), "{e}");
}

#[test]
fn batches_relabelled_before_the_offset_asked_are_refused() {
    // Asked at 2000; the source relabelled its batches 1000 offsets back.
    let e = refused(check(2000, false, &answer(3000, 0, &[(1000, 50), (1050, 50)])));
    assert!(e.contains("1000..1050") && e.contains("2000"), "{e}");
}

#[test]
fn overlapping_or_out_of_order_batches_are_refused() {
    refused(check(0, true, &answer(100, 0, &[(0, 10), (5, 10)])));
    refused(check(0, true, &answer(100, 0, &[(20, 10), (0, 10)])));
}

#[test]
fn a_batch_beyond_the_answers_own_high_watermark_is_confirmed_with_list_offsets_before_anything_is_written() {
    // A broker notes the high watermark before it reads: a batch committed in between comes with
    // the older mark. True or not, ListOffsets must show the source holds it.
    assert_eq!(
        check(1998, true, &answer(2018, 0, &[(1998, 20), (2018, 2)])).ok(),
        Some(Checked { confirm_end: Some(2020) }),
        "a batch just beyond the answer's high watermark"
    );
    assert_eq!(
        check(30, true, &answer(30, 0, &[(5_000_030, 10)])).ok(),
        Some(Checked { confirm_end: Some(5_000_040) }),
        "a batch far beyond it"
    );
    let e = refused(check(30, true, &answer(10, 50, &[])));
    assert!(e.contains("log start 50") && e.contains("high watermark 10"), "{e}");
}

#[test]
fn compaction_and_retention_gaps_are_accepted_and_only_large_unexplained_jumps_are_confirmed() {
    assert_eq!(
        check(0, true, &answer(60, 0, &[(0, 10), (40, 20)])).ok(),
        Some(Checked::default()),
        "a compaction gap of 30"
    );
    assert_eq!(
        check(0, true, &answer(50_010, 50_000, &[(50_000, 10)])).ok(),
        Some(Checked::default()),
        "a retention jump the answer's log start explains"
    );
    assert_eq!(
        check(0, true, &answer(5_010, 0, &[(5_000, 10)])).ok(),
        Some(Checked { confirm_end: Some(5_010) }),
        "5000 offsets without data above the log start: ListOffsets must confirm"
    );
}

#[test]
fn the_position_is_aligned_after_an_answer_whose_last_batch_ends_there() {
    let end = last_end(&answer(100, 0, &[(0, 10), (10, 10)]));
    assert!(aligned_after(end, 20, false));
    assert!(
        !aligned_after(end, 25, true),
        "planned past the batches (not reached here, but not a batch end)"
    );
    assert!(aligned_after(last_end(&answer(100, 0, &[])), 20, true), "an empty answer keeps what was known");
}
