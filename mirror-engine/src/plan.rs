//! The offset-preserving plan, sans-io: given where the destination log ends and what a
//! read_committed Fetch returned, decide what to write so every source batch lands at its own
//! offset. Offsets with no visible source data (compaction gaps, transaction markers, aborted
//! transactional data, empty batches) become filler records. Doing the I/O belongs to
//! `partition`.

use bytes::Bytes;
use kmp_protocol::batch::BatchHeader;

/// One write to the destination, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `count` filler records starting at destination offset `base`.
    Fill { base: i64, count: i64, timestamp: i64 },
    /// A source batch (contiguous, non-control, not aborted) written at its own base offset.
    Write { base: i64, header: BatchHeader, batch: Bytes },
    /// A batch whose records have holes (compaction): re-encoded into runs and fillers.
    Holes { base: i64, header: BatchHeader, batch: Bytes },
}

/// Tracks transactions that the source reported aborted, across fetches.
#[derive(Debug, Default)]
pub struct AbortTracker {
    /// Aborted `(producer_id, first_offset)` not yet reached, sorted by first offset.
    pending: Vec<(i64, i64)>,
    /// Producers whose current transaction is aborted.
    active: std::collections::HashSet<i64>,
}

impl AbortTracker {
    /// Adds the aborted transactions of one Fetch response.
    pub fn extend(&mut self, aborted: impl IntoIterator<Item = (i64, i64)>) {
        for a in aborted {
            if !self.pending.contains(&a) {
                self.pending.push(a);
            }
        }
        self.pending.sort_by_key(|&(_, first)| first);
    }

    /// Whether the batch is aborted transactional data; control batches end a transaction.
    fn is_aborted(&mut self, h: &BatchHeader) -> bool {
        while let Some(&(pid, first)) = self.pending.first() {
            if first > h.base_offset {
                break;
            }
            self.active.insert(pid);
            self.pending.remove(0);
        }
        if h.is_control() {
            self.active.remove(&h.producer_id);
            return false;
        }
        h.is_transactional() && self.active.contains(&h.producer_id)
    }
}

/// Plans the writes for `batches` (in source order) when the destination log ends at `next`.
/// Returns the actions and the new log end. Batches entirely below `next` were written before
/// (a re-fetch after a retry) and are skipped.
pub fn plan(next: i64, batches: Vec<(BatchHeader, Bytes)>, aborts: &mut AbortTracker) -> (Vec<Action>, i64) {
    let mut out = Vec::new();
    let mut next = next;
    for (h, batch) in batches {
        let end = h.next_offset();
        let aborted = aborts.is_aborted(&h);
        if end <= next {
            continue;
        }
        if h.base_offset > next {
            out.push(Action::Fill { base: next, count: h.base_offset - next, timestamp: h.base_timestamp });
            next = h.base_offset;
        }
        if h.base_offset < next {
            // The destination already holds the start of this batch: only possible for data the
            // engine filled itself (never for real batches, which are written whole).
            out.push(Action::Fill { base: next, count: end - next, timestamp: h.base_timestamp });
        } else if h.is_control() || aborted || h.records_count == 0 {
            out.push(Action::Fill { base: next, count: end - next, timestamp: h.base_timestamp });
        } else if !h.is_contiguous() {
            out.push(Action::Holes { base: next, header: h, batch });
        } else {
            out.push(Action::Write { base: next, header: h, batch });
        }
        next = end;
    }
    (out, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(base: i64, count: i32, lod: i32, pid: i64, txn: bool, control: bool) -> (BatchHeader, Bytes) {
        let attributes = (if txn { 1 << 4 } else { 0 }) | (if control { 1 << 5 } else { 0 });
        let header = BatchHeader {
            base_offset: base,
            batch_length: 49,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: lod,
            base_timestamp: 1000 + base,
            max_timestamp: 1000 + base,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            records_count: count,
        };
        (header, Bytes::from_static(b"batch"))
    }

    fn kinds(actions: &[Action]) -> Vec<(char, i64, i64)> {
        actions
            .iter()
            .map(|a| match a {
                Action::Fill { base, count, .. } => ('F', *base, *count),
                Action::Write { base, header, .. } => ('W', *base, i64::from(header.records_count)),
                Action::Holes { base, .. } => ('H', *base, 0),
            })
            .collect()
    }

    #[test]
    fn gaps_before_batches_are_filled() {
        let (a, next) = plan(0, vec![h(5, 3, 2, -1, false, false), h(10, 1, 0, -1, false, false)], &mut AbortTracker::default());
        assert_eq!(kinds(&a), vec![('F', 0, 5), ('W', 5, 3), ('F', 8, 2), ('W', 10, 1)]);
        assert_eq!(next, 11);
    }

    #[test]
    fn committed_transactions_are_written_and_markers_filled() {
        let (a, next) = plan(0, vec![h(0, 2, 1, 7, true, false), h(2, 1, 0, 7, true, true)], &mut AbortTracker::default());
        assert_eq!(kinds(&a), vec![('W', 0, 2), ('F', 2, 1)]);
        assert_eq!(next, 3);
    }

    #[test]
    fn aborted_transactional_data_becomes_fillers_but_other_producers_are_kept() {
        let mut aborts = AbortTracker::default();
        aborts.extend([(7, 0)]);
        let batches = vec![h(0, 2, 1, 7, true, false), h(2, 1, 0, 8, false, false), h(3, 1, 0, 7, true, true), h(4, 1, 0, 7, true, false)];
        let (a, _) = plan(0, batches, &mut aborts);
        assert_eq!(kinds(&a), vec![('F', 0, 2), ('W', 2, 1), ('F', 3, 1), ('W', 4, 1)], "after the abort marker, pid 7 writes again");
    }

    #[test]
    fn refetched_batches_below_the_log_end_are_skipped_and_batches_with_holes_are_marked() {
        let (a, next) = plan(3, vec![h(0, 3, 2, -1, false, false), h(3, 2, 4, -1, false, false), h(8, 1, 0, -1, false, false)], &mut AbortTracker::default());
        assert_eq!(kinds(&a), vec![('H', 3, 0), ('W', 8, 1)]);
        assert_eq!(next, 9);
    }

    #[test]
    fn empty_retained_batches_are_filled() {
        let (a, next) = plan(0, vec![h(0, 0, 4, -1, false, false)], &mut AbortTracker::default());
        assert_eq!(kinds(&a), vec![('F', 0, 5)]);
        assert_eq!(next, 5);
    }
}
