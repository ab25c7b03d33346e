//! Sharing the fetch-growth allowance among a source's partitions. A partition whose Fetches come
//! back full doubles its next Fetch size (`copy::fetch::size::next_fetch_size`) so that one distant
//! partition is read at bandwidth rather than one base size per round trip. When many partitions
//! of one source grow at once, their Fetches travel in the same per-broker requests, so the
//! round trip is already filled by all of them together: each growing to the full allowance only
//! costs memory (and the copy CPU of touching it) without adding throughput. Measured with 8 busy
//! partitions (docs/benchmarks.md, "Fetch size against copy CPU"): 1 MiB fetches instead of
//! 16 MiB moved 1.2-1.4x more bytes per copy CPU second with a fifth of the peak memory.
//!
//! So while a source is near, the allowance (`fetch_grow_max_bytes`) is the source's total: a
//! partition may grow to the allowance divided by the number of partitions currently grown
//! beyond their base size (never below the base). A distant source needs more bytes per round
//! trip than one allowance to be read at bandwidth: the fetch sessions tell after each answer
//! that moved data whether it was latency-bound (its transfer took less than a few round trips,
//! `copy::fetch::session::round_trip::RoundTrip`), and the total is doubled after a latency-bound answer and halved
//! after another, between one allowance and one per grown partition (each partition then grows
//! as far as it would alone). The total settles where answers take a few round trips to
//! transfer. A single busy partition keeps the whole allowance in every case. What the sizes
//! are and when they change stays in `partition`; this module only counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The count of grown partitions of one source and how many allowances they share; cheap to
/// clone.
#[derive(Debug, Clone, Default)]
pub struct GrowthShare {
    grown: Arc<AtomicUsize>,
    /// Allowances shared by the grown partitions, less one (0: one allowance, a near source).
    extra: Arc<AtomicUsize>,
}

impl GrowthShare {
    /// A partition's place in the count (not counted until it grows).
    pub fn slot(&self) -> GrowthSlot {
        GrowthSlot {
            share: self.clone(),
            counted: false,
        }
    }

    /// How many partitions are grown beyond their base size now.
    pub fn grown(&self) -> usize {
        self.grown.load(Ordering::Relaxed)
    }

    /// How many allowances the grown partitions share now (at least one).
    pub fn allowances(&self) -> usize {
        self.extra.load(Ordering::Relaxed).saturating_add(1)
    }

    /// After an answer that moved data: doubles the shared allowances if it was latency-bound
    /// (up to one per grown partition), halves them otherwise (down to one).
    pub fn note_answer(&self, latency_bound: bool) {
        let most = self.grown().max(1);
        let now = self.allowances();
        let next = if latency_bound { now.saturating_mul(2).min(most) } else { (now / 2).max(1) };
        self.extra.store(next - 1, Ordering::Relaxed);
    }
}

/// One partition's place in its source's count; leaves it when dropped.
#[derive(Debug)]
pub struct GrowthSlot {
    share: GrowthShare,
    counted: bool,
}

impl GrowthSlot {
    /// The largest Fetch size this partition may grow to: the allowances (each `allowance`
    /// bytes) shared by the grown partitions, this one counted as one of them; never more than
    /// one `allowance`, never below `base`.
    pub fn ceiling(&self, allowance: i32, base: i32) -> i32 {
        let others = self.share.grown().saturating_sub(usize::from(self.counted));
        let sharers = others.saturating_add(1);
        let shared = self.share.allowances().min(sharers);
        let each = i64::from(allowance) * i64::try_from(shared).unwrap_or(i64::MAX) / i64::try_from(sharers).unwrap_or(i64::MAX);
        i32::try_from(each).unwrap_or(allowance).min(allowance).max(base)
    }

    /// Records whether this partition's next Fetch asks for more than its base size.
    pub fn set_grown(&mut self, grown: bool) {
        if grown != self.counted {
            if grown {
                self.share.grown.fetch_add(1, Ordering::Relaxed);
            } else {
                self.share.grown.fetch_sub(1, Ordering::Relaxed);
            }
            self.counted = grown;
        }
    }
}

impl Drop for GrowthSlot {
    fn drop(&mut self) {
        self.set_grown(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i32 = 1 << 20;

    #[test]
    fn a_single_growing_partition_keeps_the_whole_allowance() {
        let share = GrowthShare::default();
        let mut a = share.slot();
        assert_eq!(a.ceiling(16 * MIB, MIB), 16 * MIB);
        a.set_grown(true);
        assert_eq!(a.ceiling(16 * MIB, MIB), 16 * MIB, "counting itself does not halve its own share");
    }

    #[test]
    fn growing_partitions_share_the_allowance_and_never_drop_below_the_base() {
        let share = GrowthShare::default();
        let mut slots: Vec<GrowthSlot> = (0..8).map(|_| share.slot()).collect();
        for s in &mut slots {
            s.set_grown(true);
        }
        assert_eq!(share.grown(), 8);
        assert_eq!(slots[0].ceiling(16 * MIB, MIB), 2 * MIB);
        let fresh = share.slot();
        assert_eq!(fresh.ceiling(16 * MIB, MIB), 16 * MIB / 9, "a partition about to grow counts as a ninth");
        assert_eq!(slots[0].ceiling(4 * MIB, MIB), MIB, "never below the base");
    }

    #[test]
    fn latency_bound_answers_widen_the_total_up_to_one_allowance_per_grown_partition() {
        let share = GrowthShare::default();
        let mut slots: Vec<GrowthSlot> = (0..8).map(|_| share.slot()).collect();
        for s in &mut slots {
            s.set_grown(true);
        }
        share.note_answer(true);
        assert_eq!(slots[0].ceiling(16 * MIB, MIB), 4 * MIB, "two allowances for eight");
        for _ in 0..10 {
            share.note_answer(true);
        }
        assert_eq!(share.allowances(), 8, "never more allowances than grown partitions");
        assert_eq!(slots[0].ceiling(16 * MIB, MIB), 16 * MIB, "a distant source: each grows as far as alone");
        share.note_answer(false);
        assert_eq!(
            slots[0].ceiling(16 * MIB, MIB),
            8 * MIB,
            "an answer that took long to transfer halves the total"
        );
        for _ in 0..10 {
            share.note_answer(false);
        }
        assert_eq!(share.allowances(), 1);
        assert_eq!(slots[0].ceiling(16 * MIB, MIB), 2 * MIB, "a near source: one allowance shared");
    }

    #[test]
    fn shrinking_or_stopped_partitions_give_their_share_back() {
        let share = GrowthShare::default();
        let mut a = share.slot();
        let mut b = share.slot();
        a.set_grown(true);
        b.set_grown(true);
        assert_eq!(a.ceiling(16 * MIB, MIB), 8 * MIB);
        b.set_grown(false);
        b.set_grown(false);
        assert_eq!(share.grown(), 1, "setting the same value twice counts once");
        assert_eq!(a.ceiling(16 * MIB, MIB), 16 * MIB);
        b.set_grown(true);
        drop(b);
        assert_eq!(share.grown(), 1, "a dropped slot (a stopped partition task) leaves the count");
    }
}
