//! Engine-wide I/O counters of the multiplexed fetch sessions and produce lanes, read by the
//! proxy's `/metrics`. Per-partition progress lives in `status`.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) static FETCH_REQUESTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static FETCH_SESSION_RESETS: AtomicU64 = AtomicU64::new(0);
pub(crate) static FETCH_SECOND_SENT: AtomicU64 = AtomicU64::new(0);
pub(crate) static FETCH_ANSWERS_CUT: AtomicU64 = AtomicU64::new(0);
pub(crate) static PRODUCE_REQUESTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PRODUCE_BATCHES: AtomicU64 = AtomicU64::new(0);

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A snapshot of the counters (totals since the process started).
#[derive(Debug, Clone, Copy, Default)]
pub struct IoCounters {
    /// Fetch requests sent to source brokers (one carries every waiting partition of a broker).
    pub fetch_requests: u64,
    /// Fetch sessions a source broker dropped (evicted, expired) that were started again.
    pub fetch_session_resets: u64,
    /// Second Fetches a caught-up partition sent beside its first (`fetch_hedge_min_rtt_ms`).
    pub fetch_second_sent: u64,
    /// Answers to a Fetch asked at an older offset that brought new data once cut to the
    /// partition's position (what the second Fetches delivered first).
    pub fetch_answers_cut: u64,
    /// Produce requests sent to destination brokers.
    pub produce_requests: u64,
    /// Record batches those requests carried.
    pub produce_batches: u64,
}

/// The counters now.
pub fn io_counters() -> IoCounters {
    IoCounters {
        fetch_requests: FETCH_REQUESTS.load(Ordering::Relaxed),
        fetch_session_resets: FETCH_SESSION_RESETS.load(Ordering::Relaxed),
        fetch_second_sent: FETCH_SECOND_SENT.load(Ordering::Relaxed),
        fetch_answers_cut: FETCH_ANSWERS_CUT.load(Ordering::Relaxed),
        produce_requests: PRODUCE_REQUESTS.load(Ordering::Relaxed),
        produce_batches: PRODUCE_BATCHES.load(Ordering::Relaxed),
    }
}
