//! What an answer to a Fetch asked at an older offset keeps once the partition moved on.

use super::*;
use crate::copy::plan::tests::batch;

fn fetched(batches: &[(i64, i64)]) -> Fetched {
    Fetched {
        high_watermark: 100,
        last_stable_offset: 100,
        log_start_offset: 0,
        batches: batches.iter().map(|&(base, count)| batch(base, count)).collect(),
    }
}

fn bases(f: &Fetched) -> Vec<i64> {
    f.batches.iter().map(|(h, _)| h.base_offset).collect()
}

#[test]
fn an_older_answer_keeps_only_the_batches_past_the_partitions_next_offset() {
    let cut = cut_to(fetched(&[(10, 5), (15, 5), (20, 5)]), 20);
    assert_eq!(bases(&cut), vec![20], "10..20 were copied from an earlier answer");
    let cut = cut_to(fetched(&[(10, 5), (15, 5)]), 20);
    assert!(cut.batches.is_empty(), "nothing new");
    let cut = cut_to(fetched(&[(10, 5), (15, 10)]), 20);
    assert_eq!(
        bases(&cut),
        vec![15],
        "a batch that straddles the offset (a compacted log) is kept for the planner"
    );
    assert_eq!(cut.high_watermark, 100, "the source's ends are kept");
}
