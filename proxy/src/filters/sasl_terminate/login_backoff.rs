//! Failed-login back-off for termination mode (issue #35, L-d): every PLAIN or SCRAM attempt costs
//! a PBKDF2 derivation (about 2 ms of CPU), and nothing slowed a client that kept guessing. After
//! a failed login from an address, that address's next attempts wait before they are checked:
//! 100 ms after the first failure, doubling up to 5 s, forgotten a minute after the last failure
//! or at a successful login. The table is bounded: past [`MAX_ADDRESSES`] entries the oldest are
//! dropped.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use dashmap::DashMap;

const FIRST: Duration = Duration::from_millis(100);
const LONGEST: Duration = Duration::from_secs(5);
/// Failures older than this are forgotten.
const FORGET: Duration = Duration::from_secs(60);
/// Addresses remembered at most.
pub(crate) const MAX_ADDRESSES: usize = 100_000;

/// Failures by client address.
#[derive(Default)]
pub(crate) struct LoginBackoff {
    failures: DashMap<IpAddr, (u32, Instant)>,
}

impl LoginBackoff {
    /// How long an attempt from `ip` waits before it is checked.
    pub(crate) fn delay(&self, ip: IpAddr) -> Duration {
        match self.failures.get(&ip) {
            Some(e) if e.1.elapsed() < FORGET => backoff(e.0),
            _ => Duration::ZERO,
        }
    }

    /// Records a failed login from `ip`.
    pub(crate) fn failed(&self, ip: IpAddr) {
        if self.failures.len() >= MAX_ADDRESSES {
            self.failures.retain(|_, (_, at)| at.elapsed() < FORGET);
            if self.failures.len() >= MAX_ADDRESSES {
                self.failures.clear();
            }
        }
        let mut e = self.failures.entry(ip).or_insert((0, Instant::now()));
        if e.1.elapsed() >= FORGET {
            e.0 = 0;
        }
        e.0 = e.0.saturating_add(1);
        e.1 = Instant::now();
    }

    /// Forgets `ip`'s failures (a successful login).
    pub(crate) fn succeeded(&self, ip: IpAddr) {
        self.failures.remove(&ip);
    }
}

/// The wait after `failures` failures: 100 ms, 200 ms, … at most 5 s.
fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    FIRST.saturating_mul(1u32 << (failures - 1).min(16)).min(LONGEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_from_an_address_slow_its_next_attempts_doubling_to_five_seconds_and_a_success_resets() {
        let b = LoginBackoff::default();
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let other: IpAddr = "10.1.2.4".parse().unwrap();
        assert_eq!(b.delay(ip), Duration::ZERO, "no failure, no wait");
        b.failed(ip);
        assert_eq!(b.delay(ip), Duration::from_millis(100));
        b.failed(ip);
        assert_eq!(b.delay(ip), Duration::from_millis(200));
        for _ in 0..20 {
            b.failed(ip);
        }
        assert_eq!(b.delay(ip), LONGEST, "capped");
        assert_eq!(b.delay(other), Duration::ZERO, "another address is not slowed");
        b.succeeded(ip);
        assert_eq!(b.delay(ip), Duration::ZERO, "a successful login resets");
    }
}
