//! How much one partition asks for in its next Fetch, from what its last answer brought: the
//! size grows while answers come back full (a distant or busy source), holds while they are
//! steady and shrinks towards a small idle size while they are nearly empty. The partition task
//! applies it and caps it with its share of the growth allowance (`copy::fetch::growth`); what an
//! answer held is told by `copy::fetch::stream` (duplicates of a second Fetch included).

/// Bytes a partition asks for (and reserves) while its last Fetch came back less than a quarter full.
pub(crate) const IDLE_FETCH_BYTES: i32 = 64 * 1024;

/// The next Fetch size after an answer of `got` bytes to a request for `asked`; `behind`: the
/// source held more than the answer brought. A full answer (at least three quarters; the broker
/// fills up to whole batches) doubles the size up to `ceiling` (from `base` if the partition was
/// idle), so a distant source is read at bandwidth, not one `base` per round trip. A partial
/// answer while behind (the request's total was shared with other partitions) keeps at least
/// `base`; an answer less than a quarter full of a caught-up partition halves it down to the
/// idle size, so long-polling idle partitions hold little of the shared budget. A caught-up
/// partition's size thus keeps at least twice its answers: a steady stream whose answers vary
/// (or an answer to an older offset, which starts with records the partition has) is not cut
/// short by a size that just shrank to fit the previous answer.
pub(crate) fn next_fetch_size(asked: i32, got: usize, behind: bool, base: i32, ceiling: i32) -> i32 {
    let asked_bytes = usize::try_from(asked).unwrap_or(0);
    let idle = IDLE_FETCH_BYTES.min(base);
    if got.saturating_mul(4) >= asked_bytes.saturating_mul(3) {
        if asked < base { base } else { asked.saturating_mul(2).min(ceiling).max(base) }
    } else if behind {
        asked.max(base)
    } else if got.saturating_mul(4) >= asked_bytes {
        asked
    } else {
        (asked / 2).max(idle)
    }
}

#[cfg(test)]
mod tests {
    use super::{IDLE_FETCH_BYTES, next_fetch_size};

    const MIB: i32 = 1024 * 1024;

    fn after(asked: i32, got: usize, behind: bool) -> i32 {
        next_fetch_size(asked, got, behind, MIB, 16 * MIB)
    }

    #[test]
    fn full_answers_double_the_fetch_size_up_to_the_ceiling() {
        let mut size = MIB;
        let mut seen = vec![];
        for _ in 0..6 {
            size = after(size, size as usize, true);
            seen.push(size / MIB);
        }
        assert_eq!(seen, vec![2, 4, 8, 16, 16, 16]);
        // An answer larger than asked (the broker returns at least one whole batch) is full too.
        assert_eq!(after(MIB, 3 * MIB as usize, true), 2 * MIB);
    }

    #[test]
    fn an_idle_partition_woken_by_a_full_answer_goes_straight_to_the_base_size() {
        assert_eq!(after(IDLE_FETCH_BYTES, IDLE_FETCH_BYTES as usize, true), MIB);
    }

    #[test]
    fn a_partial_answer_while_behind_keeps_at_least_the_base_size() {
        assert_eq!(after(8 * MIB, 0, true), 8 * MIB, "cut short by the request's total: not idle");
        assert_eq!(after(IDLE_FETCH_BYTES, 1000, true), MIB);
    }

    #[test]
    fn a_caught_up_partition_shrinks_by_halves_to_the_idle_size_and_holds_a_steady_size() {
        assert_eq!(after(16 * MIB, 9 * MIB as usize, false), 16 * MIB, "more than half full: steady");
        assert_eq!(after(16 * MIB, 4 * MIB as usize, false), 16 * MIB, "a quarter full: steady");
        assert_eq!(after(16 * MIB, 4 * MIB as usize - 1, false), 8 * MIB, "less than a quarter: halved");
        let mut size = 16 * MIB;
        let mut rounds = 0;
        while size > IDLE_FETCH_BYTES {
            size = after(size, 0, false);
            rounds += 1;
        }
        assert_eq!((size, rounds), (IDLE_FETCH_BYTES, 8));
        assert_eq!(after(size, 0, false), IDLE_FETCH_BYTES);
    }

    #[test]
    fn growth_is_off_when_the_ceiling_equals_the_base() {
        assert_eq!(next_fetch_size(MIB, MIB as usize, true, MIB, MIB), MIB);
        assert_eq!(
            next_fetch_size(1024, 1024, true, 1024, 1024),
            1024,
            "a base below the idle size is never exceeded"
        );
        assert_eq!(next_fetch_size(1024, 0, false, 1024, 1024), 1024);
    }
}
