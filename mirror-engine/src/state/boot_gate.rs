//! Whether the engine has loaded its stored state: every stored and declared mirror definition
//! is known and every stored mirror topic is registered. Until then, an answer such as "this
//! mirror does not exist" could be wrong, so management requests wait here (bounded) and
//! readiness stays false. Loading the state belongs to `engine::term` (boot).

use std::time::Duration;

use tokio::sync::watch;

/// Opened once, when boot has loaded the stored state; cheap to share by reference.
#[derive(Debug)]
pub(crate) struct BootGate {
    open: watch::Sender<bool>,
}

impl Default for BootGate {
    fn default() -> Self {
        Self { open: watch::channel(false).0 }
    }
}

impl BootGate {
    /// Marks the stored state as loaded.
    pub(crate) fn open(&self) {
        self.open.send_replace(true);
    }

    pub(crate) fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// Waits until the gate opens, at most `limit`; whether it is open.
    pub(crate) async fn wait(&self, limit: Duration) -> bool {
        let mut rx = self.open.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|open| *open)).await.is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_are_released_when_the_gate_opens_and_time_out_before() {
        let gate = std::sync::Arc::new(BootGate::default());
        assert!(!gate.wait(Duration::from_millis(20)).await, "closed: the wait times out");
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.open();
        assert!(waiter.await.unwrap(), "released once open");
        assert!(gate.is_open() && gate.wait(Duration::ZERO).await);
    }
}
