//! A shared budget of buffered bytes: readers take bytes from it for what they hold and give them
//! back when the memory is released, so all connections together stay near the budget. Taking more
//! than is left waits (backpressure), never fails. Lock-free on the fast path: one atomic
//! compare-and-swap to take, one atomic subtraction to give (waiters are woken only when some wait).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

struct Inner {
    total: usize,
    used: AtomicUsize,
    waiting: AtomicUsize,
    notify: Notify,
}

/// The budget; cheap to clone (shared).
#[derive(Clone)]
pub struct ByteBudget {
    inner: Arc<Inner>,
}

impl ByteBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total,
                used: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                notify: Notify::new(),
            }),
        }
    }

    /// The whole budget.
    pub fn total(&self) -> usize {
        self.inner.total
    }

    /// Bytes currently taken.
    pub fn in_use(&self) -> usize {
        self.inner.used.load(Ordering::Acquire)
    }

    /// Takes `n` bytes if they are left.
    pub fn try_take(&self, n: usize) -> bool {
        let used = &self.inner.used;
        let mut cur = used.load(Ordering::Acquire);
        loop {
            if cur.saturating_add(n) > self.inner.total {
                return false;
            }
            match used.compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes `n` bytes (at most [`ByteBudget::total`]), waiting until they are left. Cancel-safe.
    pub async fn take(&self, n: usize) {
        if self.try_take(n) {
            return;
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.inner.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.inner.waiting);
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_take(n) {
                return;
            }
            notified.await;
        }
    }

    /// Takes `n` bytes (at most [`ByteBudget::total`]) as [`ByteBudget::take`] does and returns
    /// them as a guard that gives them back when dropped.
    pub async fn guard(&self, n: usize) -> BudgetGuard {
        let n = n.min(self.total());
        self.take(n).await;
        BudgetGuard {
            budget: Some(self.clone()),
            bytes: n,
        }
    }

    /// Gives `n` bytes back.
    pub fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.inner.used.fetch_sub(n, Ordering::AcqRel);
        if self.inner.waiting.load(Ordering::Acquire) > 0 {
            self.inner.notify.notify_waiters();
        }
    }
}

/// Bytes taken from a budget; given back when dropped. A no-op without a budget.
#[derive(Default)]
pub struct BudgetGuard {
    budget: Option<ByteBudget>,
    bytes: usize,
}

impl BudgetGuard {
    /// An empty guard on `budget`.
    pub fn on(budget: ByteBudget) -> Self {
        Self {
            budget: Some(budget),
            bytes: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records `n` more bytes as held (already taken from the budget).
    pub(crate) fn add(&mut self, n: usize) {
        self.bytes += n;
    }

    /// Splits `n` bytes (at most what is held) off into a guard of their own.
    pub fn split_off(&mut self, n: usize) -> BudgetGuard {
        let n = n.min(self.bytes);
        self.bytes -= n;
        BudgetGuard {
            budget: self.budget.clone(),
            bytes: n,
        }
    }
}

impl std::fmt::Debug for BudgetGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetGuard").field("bytes", &self.bytes).finish()
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn taking_more_than_is_left_waits_until_bytes_are_given_back() {
        let b = ByteBudget::new(100);
        assert!(b.try_take(60));
        assert!(!b.try_take(50));
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.take(50).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "60 + 50 > 100: waits");
        b.give(60);
        tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert_eq!(b.in_use(), 50);
        let mut g = BudgetGuard::on(b.clone());
        g.add(50);
        let half = g.split_off(20);
        drop(g);
        assert_eq!(b.in_use(), 20);
        drop(half);
        assert_eq!(b.in_use(), 0);
    }
}
