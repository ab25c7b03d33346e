//! The round trip to a source broker, as the shortest recent wait for an answer's first byte,
//! and whether an answer was bound by it rather than by its transfer (how far Fetches grow).

use std::time::Duration;

use tokio::time::Instant;

/// A Fetch whose answer took less than this many round trips to transfer is latency-bound: a
/// larger one would raise throughput noticeably (one Fetch of `F` bytes per round trip `L` at
/// bandwidth `B` moves `F / (L + F/B)`, so at four round trips of transfer it already moves
/// four fifths of `B`). The growth allowance settles where answers take about this long.
const LATENCY_BOUND_FACTOR: u32 = 4;
/// How many recent answers the round trip is estimated from: the shortest wait for a first byte
/// among them (a busy broker's wait also holds its work on the request, which varies).
const ROUND_TRIP_WINDOW: usize = 16;

/// The round trip to a broker as the shortest wait for an answer's first byte among the latest
/// [`ROUND_TRIP_WINDOW`] answers.
#[derive(Debug, Default)]
pub(super) struct RoundTrip {
    pub(super) waits: [Duration; ROUND_TRIP_WINDOW],
    pub(super) seen: usize,
}

impl RoundTrip {
    /// Notes the answer to a Fetch sent at `asked` that arrived as `arrival`; whether that Fetch
    /// was bound by the round trip rather than by transferring its answer.
    pub(super) fn latency_bound(&mut self, asked: Instant, arrival: kmp_protocol::client::Arrival) -> bool {
        let wait = self.note(asked, arrival);
        let transfer = arrival.last_byte.saturating_duration_since(arrival.first_byte);
        transfer < self.estimate().unwrap_or(wait) * LATENCY_BOUND_FACTOR
    }

    /// Notes the wait for the first byte of the answer to a Fetch sent at `asked`.
    pub(super) fn note(&mut self, asked: Instant, arrival: kmp_protocol::client::Arrival) -> Duration {
        let wait = arrival.first_byte.saturating_duration_since(asked);
        self.waits[self.seen % ROUND_TRIP_WINDOW] = wait;
        self.seen = self.seen.wrapping_add(1);
        wait
    }

    /// The shortest wait noted so far among the latest ones (`None` before the first).
    pub(super) fn estimate(&self) -> Option<Duration> {
        self.waits[..self.seen.min(ROUND_TRIP_WINDOW)].iter().min().copied()
    }
}

#[cfg(test)]
mod tests {
    //! When an answer counts as latency-bound, and which waits the round trip is taken from.

    use super::*;

    fn arrival(asked: Instant, wait_ms: u64, transfer_ms: u64) -> kmp_protocol::client::Arrival {
        let first_byte = asked + Duration::from_millis(wait_ms);
        kmp_protocol::client::Arrival {
            first_byte,
            last_byte: first_byte + Duration::from_millis(transfer_ms),
        }
    }

    #[test]
    fn an_answer_is_latency_bound_while_its_transfer_takes_under_four_round_trips() {
        let t = Instant::now();
        let mut far = RoundTrip::default();
        assert!(far.latency_bound(t, arrival(t, 100, 5)), "a distant broker, a quick transfer");
        assert!(far.latency_bound(t, arrival(t, 101, 390)), "still under four round trips");
        assert!(!far.latency_bound(t, arrival(t, 100, 400)), "four round trips of transfer: not latency-bound");
    }

    #[test]
    fn the_round_trip_is_the_shortest_recent_wait_so_a_busy_brokers_slow_answers_do_not_count_as_distance() {
        let t = Instant::now();
        let mut near = RoundTrip::default();
        assert!(near.latency_bound(t, arrival(t, 2, 1)));
        // A busy broker took 40 ms to start answering: its 10 ms transfer is still five round trips.
        assert!(!near.latency_bound(t, arrival(t, 40, 10)));
        // After a window of slow answers the short one is forgotten.
        for _ in 0..ROUND_TRIP_WINDOW {
            near.latency_bound(t, arrival(t, 40, 100));
        }
        assert!(near.latency_bound(t, arrival(t, 40, 10)), "the round trip is now 40 ms");
    }
}
