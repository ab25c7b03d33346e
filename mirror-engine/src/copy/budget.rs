//! The engine-wide memory budget: bytes of fetched source data that all mirrored partitions
//! together may hold until the destination acknowledges them. A partition reserves room before
//! each Fetch and gives it back once every batch of that Fetch is acknowledged, so a slow or
//! stalled destination slows source reads instead of growing memory. What is fetched and written
//! belongs to `partition`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Shared byte budget; cheap to clone.
#[derive(Debug, Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    permits: Arc<Semaphore>,
    limit: u64,
    peak: AtomicU64,
}

/// Room for one Fetch's data; returned to the budget when dropped.
#[derive(Debug)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    budget: Budget,
}

impl Reservation {
    /// Grows the reservation to `bytes` if the budget has room now (never waits: waiting while
    /// holding room could deadlock partitions against each other). Used when a Fetch returned
    /// more than was reserved because its first batch was larger.
    pub fn grow_to(&mut self, bytes: u64) {
        let Ok(extra) = u32::try_from(bytes.saturating_sub(self.bytes())) else {
            return;
        };
        if extra == 0 {
            return;
        }
        if let Ok(more) = self.budget.inner.permits.clone().try_acquire_many_owned(extra) {
            match &mut self.permit {
                Some(p) => p.merge(more),
                None => self.permit = Some(more),
            }
            self.budget.inner.peak.fetch_max(self.budget.in_use(), Ordering::Relaxed);
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.permit.as_ref().map_or(0, |p| p.num_permits() as u64)
    }

    /// Moves up to `bytes` of this reservation into a new one (less if this one holds less).
    pub fn split(&mut self, bytes: u64) -> Reservation {
        let n = usize::try_from(bytes.min(self.bytes())).unwrap_or(0);
        let permit = if n == 0 { None } else { self.permit.as_mut().and_then(|p| p.split(n)) };
        Reservation {
            permit,
            budget: self.budget.clone(),
        }
    }
}

impl Budget {
    /// A budget of `limit` bytes (at most `u32::MAX` per reservation; see [`Budget::reserve`]).
    pub fn new(limit: u64) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS as u64);
        let permits = usize::try_from(limit).unwrap_or(Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(permits)),
                limit,
                peak: AtomicU64::new(0),
            }),
        }
    }

    /// Waits until `bytes` (capped at the whole budget) are free and reserves them.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let n = u32::try_from(bytes.min(self.inner.limit)).unwrap_or(u32::MAX);
        // The semaphore is never closed, so acquiring fails only if it were; then run unbounded.
        let permit = self.inner.permits.clone().acquire_many_owned(n).await.ok();
        self.inner.peak.fetch_max(self.in_use(), Ordering::Relaxed);
        Reservation { permit, budget: self.clone() }
    }

    /// Bytes reserved right now.
    pub fn in_use(&self) -> u64 {
        self.inner.limit.saturating_sub(self.inner.permits.available_permits() as u64)
    }

    /// Most bytes ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.inner.peak.load(Ordering::Relaxed)
    }

    /// The configured limit in bytes.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reservation_waits_until_another_is_returned() {
        let b = Budget::new(100);
        let first = b.reserve(80).await;
        assert_eq!(b.in_use(), 80);
        let waiting = tokio::time::timeout(Duration::from_millis(50), b.reserve(30)).await;
        assert!(waiting.is_err(), "30 more bytes must not fit in a 100-byte budget holding 80");
        drop(first);
        let _second = tokio::time::timeout(Duration::from_millis(50), b.reserve(30))
            .await
            .expect("room after release");
        assert_eq!(b.in_use(), 30);
        assert_eq!(b.peak(), 80);
    }

    #[tokio::test]
    async fn a_reservation_grows_only_into_free_room() {
        let b = Budget::new(100);
        let mut r = b.reserve(10).await;
        r.grow_to(60);
        assert_eq!(b.in_use(), 60);
        let _other = b.reserve(30).await;
        r.grow_to(90);
        assert_eq!(b.in_use(), 90, "no room for 30 more: unchanged, and no waiting");
        drop(r);
        assert_eq!(b.in_use(), 30);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_takes_the_whole_budget() {
        let b = Budget::new(10);
        let _r = b.reserve(1_000).await;
        assert_eq!(b.in_use(), 10);
    }
}
