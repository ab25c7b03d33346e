//! The source leader epochs of what one partition copied, like a broker's leader-epoch cache:
//! `(epoch, first offset)` at each epoch change, from the headers of the source batches the
//! partition planned. The destination broker stamps the batches it appends with its own epochs,
//! so the source's survive only here. They give the *line* a stop records (KIP-1279's last
//! mirror epoch and offset): the epoch of the last copied offset, which a failback checks the old
//! source's log against.

use std::collections::VecDeque;

/// Epoch changes kept: the oldest go first (only the newest ever answer `epoch_at` for the
/// destination's end; a source changes leaders far less often than this per attempt).
const MAX_ENTRIES: usize = 64;

/// `(epoch, first offset)` per epoch change, oldest first; epochs only grow.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct EpochLine {
    entries: VecDeque<(i32, i64)>,
}

impl EpochLine {
    /// An attempt resumes at destination end `end`: a line that knows nothing yet takes the
    /// stored `(epoch, stored_end)` (the partition's record) when the stored end is that very
    /// end — the stored epoch then held the last copied offset. Otherwise the record is older
    /// than the log (writes after its last flush) and says nothing about the last offset.
    pub(crate) fn resume(&mut self, stored: Option<(i32, i64)>, end: i64) {
        if let Some((epoch, stored_end)) = stored
            && self.entries.is_empty()
            && stored_end == end
            && end > 0
        {
            self.observe(epoch, end - 1);
        }
    }

    /// A source batch of leader epoch `epoch` starts at (or is copied from) `offset`. A batch
    /// whose epoch is lower than one already seen (a source that relabels its log) or negative
    /// changes nothing: the line never goes back.
    pub(crate) fn observe(&mut self, epoch: i32, offset: i64) {
        if epoch < 0 {
            return;
        }
        match self.entries.back() {
            Some(&(last, _)) if epoch <= last => {}
            _ => {
                self.entries.push_back((epoch, offset));
                if self.entries.len() > MAX_ENTRIES {
                    self.entries.pop_front();
                }
            }
        }
    }

    /// The epoch of the source batch that held `offset`: the latest change at or before it;
    /// -1 when none is known (nothing copied since a restart that stored none, or an offset
    /// below every kept change).
    pub(crate) fn epoch_at(&self, offset: i64) -> i32 {
        self.entries.iter().rev().find(|&&(_, first)| first <= offset).map_or(-1, |&(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_of_an_offset_is_the_latest_change_at_or_before_it() {
        let mut line = EpochLine::default();
        assert_eq!(line.epoch_at(10), -1, "nothing seen");
        line.observe(3, 100);
        line.observe(3, 150);
        line.observe(5, 200);
        assert_eq!(line.epoch_at(99), -1);
        assert_eq!(
            (line.epoch_at(100), line.epoch_at(199), line.epoch_at(200), line.epoch_at(10_000)),
            (3, 3, 5, 5)
        );
        line.observe(4, 300);
        line.observe(-1, 400);
        assert_eq!(line.epoch_at(500), 5, "an epoch that goes back, or none, changes nothing");
    }

    #[test]
    fn a_resumed_line_knows_the_stored_epoch_only_where_the_log_ends_as_stored() {
        let mut line = EpochLine::default();
        line.resume(Some((7, 90)), 100);
        assert_eq!(line.epoch_at(99), -1, "written after the record: its epoch says nothing about 99");
        line.resume(Some((-1, 100)), 100);
        assert_eq!(line.epoch_at(99), -1, "none stored");
        line.resume(Some((7, 100)), 100);
        assert_eq!((line.epoch_at(98), line.epoch_at(99)), (-1, 7));
        line.resume(Some((9, 200)), 200);
        assert_eq!(line.epoch_at(199), 7, "a line that knows something keeps it");
    }

    #[test]
    fn the_oldest_changes_go_first() {
        let mut line = EpochLine::default();
        line.observe(7, 99);
        for e in 8..8 + MAX_ENTRIES as i32 {
            line.observe(e, i64::from(e) * 100);
        }
        assert_eq!(line.entries.len(), MAX_ENTRIES);
        assert_eq!(line.epoch_at(99), -1, "the oldest change was dropped");
        assert_eq!(line.epoch_at(i64::MAX), 7 + MAX_ENTRIES as i32);
    }
}
