//! What an answer to a Fetch asked at an older offset keeps once the partition moved on.

use super::*;
use crate::copy::plan::tests::batch;

fn fetched(batches: &[(i64, i64)], aborted: &[(i64, i64)]) -> Fetched {
    Fetched {
        high_watermark: 100,
        last_stable_offset: 100,
        log_start_offset: 0,
        aborted: aborted.to_vec(),
        batches: batches.iter().map(|&(base, count)| batch(base, count)).collect(),
    }
}

fn bases(f: &Fetched) -> Vec<i64> {
    f.batches.iter().map(|(h, _)| h.base_offset).collect()
}

#[test]
fn an_older_answer_keeps_only_the_batches_past_the_partitions_next_offset() {
    let cut = cut_to(fetched(&[(10, 5), (15, 5), (20, 5)], &[]), 20);
    assert_eq!(bases(&cut), vec![20], "10..20 were copied from an earlier answer");
    let cut = cut_to(fetched(&[(10, 5), (15, 5)], &[]), 20);
    assert!(cut.batches.is_empty(), "nothing new");
    let cut = cut_to(fetched(&[(10, 5), (15, 10)], &[]), 20);
    assert_eq!(
        bases(&cut),
        vec![15],
        "a batch that straddles the offset (a compacted log) is kept for the planner"
    );
    assert_eq!(cut.high_watermark, 100, "the source's ends are kept");
}

#[test]
fn an_older_answer_does_not_report_again_the_aborted_transactions_an_earlier_one_reported() {
    // Producer 7 aborted a transaction from offset 12 (reported by the answer that brought
    // 10..20); producer 8 aborted one from 22, not reached yet.
    let cut = cut_to(fetched(&[(10, 10), (20, 10)], &[(7, 12), (8, 22)]), 20);
    assert_eq!(cut.aborted, vec![(8, 22)]);
    let cut = cut_to(fetched(&[(20, 10)], &[(8, 20)]), 20);
    assert_eq!(cut.aborted, vec![(8, 20)], "one beginning at the offset itself is new");
}
