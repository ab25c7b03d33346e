//! The arithmetic of one shift, and the bookkeeping of whether a message changed.

use super::{Shifts, TopicKey};

/// What a request offset below a shifted partition's start (`0 ≤ s < Δ`) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BelowStart {
    /// −1 ("unknown"): a Fetch position (the broker answers OFFSET_OUT_OF_RANGE, as the source
    /// would) and the follower fields of a Fetch.
    Unknown,
    /// 0, the destination partition's first offset: commits, DeleteRecords, share offsets.
    Zero,
}

/// A destination offset `d` as clients see it: `d + Δ`, saturating at `i64::MAX`. Negative
/// values (sentinels) and partitions with `Δ ≤ 0` are left as they are.
pub fn to_client(d: i64, delta: i64) -> i64 {
    if d < 0 || delta <= 0 { d } else { d.saturating_add(delta) }
}

/// A client offset `s` as the destination knows it: `s − Δ` (exact: `s ≥ Δ > 0`). Negative values
/// (sentinels) and partitions with `Δ ≤ 0` are left as they are; `0 ≤ s < Δ` becomes `below`.
pub fn to_destination(s: i64, delta: i64, below: BelowStart) -> i64 {
    if s < 0 || delta <= 0 {
        s
    } else if s < delta {
        match below {
            BelowStart::Unknown => -1,
            BelowStart::Zero => 0,
        }
    } else {
        s - delta
    }
}

/// The shifts of one message being edited, and whether any value changed.
pub(super) struct Edit<'a> {
    shifts: &'a dyn Shifts,
    changed: bool,
}

impl<'a> Edit<'a> {
    pub(super) fn new(shifts: &'a dyn Shifts) -> Self {
        Self { shifts, changed: false }
    }

    /// Δ of a partition; a negative answer counts as 0 (not shifted).
    pub(super) fn delta(&self, topic: TopicKey<'_>, partition: i32) -> i64 {
        self.shifts.shift(topic, partition).max(0)
    }

    /// A response field: destination offset to client offset.
    pub(super) fn up(&mut self, field: &mut i64, delta: i64) {
        self.set(field, to_client(*field, delta));
    }

    /// A request field: client offset to destination offset.
    pub(super) fn down(&mut self, field: &mut i64, delta: i64, below: BelowStart) {
        self.set(field, to_destination(*field, delta, below));
    }

    /// Records a change made outside [`Self::up`]/[`Self::down`] (record batches).
    pub(super) fn mark_changed(&mut self) {
        self.changed = true;
    }

    pub(super) fn changed(&self) -> bool {
        self.changed
    }

    fn set(&mut self, field: &mut i64, value: i64) {
        if *field != value {
            *field = value;
            self.changed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sentinels_and_unshifted_partitions_are_left_alone_both_ways() {
        for v in [-1, -2, i64::MIN] {
            assert_eq!(to_client(v, 10), v, "response sentinel {v}");
            assert_eq!(to_destination(v, 10, BelowStart::Zero), v, "request sentinel {v}");
        }
        for delta in [0, -5, i64::MIN] {
            assert_eq!(to_client(7, delta), 7, "Δ {delta} counts as unshifted");
            assert_eq!(to_destination(7, delta, BelowStart::Unknown), 7, "Δ {delta} counts as unshifted");
        }
    }

    #[test]
    fn offsets_below_the_start_map_to_the_fields_choice() {
        assert_eq!(to_destination(0, 10, BelowStart::Unknown), -1);
        assert_eq!(to_destination(9, 10, BelowStart::Unknown), -1);
        assert_eq!(to_destination(9, 10, BelowStart::Zero), 0);
        assert_eq!(to_destination(10, 10, BelowStart::Unknown), 0, "the start itself is destination offset 0");
    }

    #[test]
    fn a_response_offset_past_i64_max_saturates() {
        assert_eq!(to_client(i64::MAX - 1, 10), i64::MAX);
        assert_eq!(to_client(i64::MAX, i64::MAX), i64::MAX);
    }

    proptest! {
        #[test]
        fn request_then_response_gives_back_every_offset_from_the_start_on(delta in 1i64..=1_000_000_000_000, above in 0i64..=i64::MAX) {
            let s = delta.saturating_add(above);
            let d = to_destination(s, delta, BelowStart::Unknown);
            prop_assert!(d >= 0, "s {} ≥ Δ {} maps to a real destination offset, got {}", s, delta, d);
            prop_assert_eq!(to_client(d, delta), s, "s {} Δ {} went to d {}", s, delta, d);
        }

        #[test]
        fn no_input_panics(v in any::<i64>(), delta in any::<i64>()) {
            let _ = to_client(v, delta);
            let _ = to_destination(v, delta, BelowStart::Zero);
            let _ = to_destination(v, delta, BelowStart::Unknown);
        }
    }
}
