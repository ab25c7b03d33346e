//! The right to write: an engine instance writes mirrored data (and its state) only while its
//! lease holds. Every engine is elected (`engine.role` `auto` or `engine`, `election`) and holds
//! it until the send time of its last acknowledged
//! heartbeat plus the session timeout, minus a margin — no later than the group coordinator
//! itself gives up on it. A process frozen past that point (SIGSTOP, a long GC-like stall, a
//! network partition) finds its lease over when it wakes and writes nothing more, before any
//! peer could have been elected. Who extends it is `election`'s; who checks it is the produce
//! path (`copy::produce::mux`) and the state writer (`state`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::time::Instant;

/// A lease; cheap to clone (all clones see the same one).
#[derive(Clone, Debug)]
pub struct Lease(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Reference point of `until_ms`.
    epoch: Instant,
    /// Milliseconds after `epoch` until which writing is allowed; `u64::MAX` never ends.
    until_ms: AtomicU64,
    /// Set once the lease was given up for good (this term of the engine is over).
    revoked: AtomicBool,
}

impl Lease {
    /// A lease that holds until revoked (unit tests of what writes).
    #[cfg(test)]
    pub fn forever() -> Self {
        Self::new(u64::MAX)
    }

    /// A lease that does not hold yet; [`Lease::extend_from`] makes it hold.
    pub fn expired() -> Self {
        Self::new(0)
    }

    fn new(until_ms: u64) -> Self {
        Self(Arc::new(Inner {
            epoch: Instant::now(),
            until_ms: AtomicU64::new(until_ms),
            revoked: AtomicBool::new(false),
        }))
    }

    /// Whether writing is allowed now.
    pub fn holds(&self) -> bool {
        if self.0.revoked.load(Ordering::Acquire) {
            return false;
        }
        let until = self.0.until_ms.load(Ordering::Acquire);
        until == u64::MAX || self.elapsed_ms(Instant::now()) < until
    }

    /// Lets writing go on until `sent + valid_for`, where `sent` is when the request that the
    /// coordinator just acknowledged was sent (never later than it received it). Never moves
    /// the end earlier, and does nothing once revoked.
    pub fn extend_from(&self, sent: Instant, valid_for: std::time::Duration) {
        let until = self
            .elapsed_ms(sent)
            .saturating_add(u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX - 1));
        self.0.until_ms.fetch_max(until.min(u64::MAX - 1), Ordering::AcqRel);
    }

    /// Ends the lease for good.
    pub fn revoke(&self) {
        self.0.revoked.store(true, Ordering::Release);
    }

    /// Whether the lease was given up for good (the term is over), as opposed to having lapsed
    /// for now (a late heartbeat acknowledgement; the next one extends it again).
    pub fn is_revoked(&self) -> bool {
        self.0.revoked.load(Ordering::Acquire)
    }

    /// Whether `other` is this very lease (a clone of it), not just one with the same end.
    pub fn same(&self, other: &Lease) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How long the lease still holds (zero if it does not).
    pub fn remaining(&self) -> std::time::Duration {
        if !self.holds() {
            return std::time::Duration::ZERO;
        }
        let until = self.0.until_ms.load(Ordering::Acquire);
        if until == u64::MAX {
            return std::time::Duration::MAX;
        }
        std::time::Duration::from_millis(until.saturating_sub(self.elapsed_ms(Instant::now())))
    }

    fn elapsed_ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0.epoch).as_millis()).unwrap_or(u64::MAX - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_lease_holds_from_the_acknowledged_send_until_the_session_ends_and_never_after_a_revoke() {
        let lease = Lease::expired();
        assert!(!lease.holds(), "an elected lease holds only once a heartbeat was acknowledged");
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await; // the answer took 300 ms
        lease.extend_from(sent, Duration::from_secs(5));
        assert!(lease.holds());
        tokio::time::advance(Duration::from_millis(4_650)).await;
        assert!(lease.holds(), "4.95 s after the send");
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(!lease.holds(), "5.01 s after the send: the coordinator may have dropped us");
        lease.extend_from(sent, Duration::from_secs(1));
        assert!(!lease.holds(), "an older acknowledgement never moves the end back or revives it");
        lease.extend_from(Instant::now(), Duration::from_secs(5));
        assert!(lease.holds());
        lease.revoke();
        lease.extend_from(Instant::now(), Duration::from_secs(5));
        assert!(!lease.holds(), "revoked for good");
        assert!(Lease::forever().holds());
    }
}
