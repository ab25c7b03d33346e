//! The one retry pause: exponential back-off that starts at `first`, doubles after every failure
//! in a row up to `max`, and starts over after a success. Every retry loop in the engine and the
//! proxy uses it (and the identity-provider fetches of `security::oauth`), so a pause is read the
//! same way everywhere. The engine re-exports it as `kmp_mirror_engine::Backoff`.

use std::time::Duration;

/// Doubling pauses between `first` and `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses of `first`, `2·first`, … capped at `max` (`max` below `first` means `first` always).
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff { first, max, next: first }
    }

    /// The pause before the next try; the one after it doubles (up to the cap).
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.max).max(self.first);
        pause
    }

    /// The pause the next failure would wait, without counting it.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// A success: the next pause is `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_start_over_after_a_success() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
        let pauses: Vec<u128> = (0..6).map(|_| b.next_pause().as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000], "doubling, capped at max");
        b.reset();
        assert_eq!(b.next_pause(), Duration::from_millis(100), "a success starts over at first");
    }

    #[test]
    fn a_cap_below_the_first_pause_keeps_the_first_pause() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_millis(100));
        assert_eq!(b.next_pause(), Duration::from_millis(500));
        assert_eq!(b.next_pause(), Duration::from_millis(500));
    }
}
