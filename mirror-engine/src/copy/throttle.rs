//! Honouring a broker's quota throttle (`throttle_time_ms` in Fetch and Produce answers,
//! KIP-219): the broker answers at once and expects the client to send nothing more on that
//! connection for that long (it mutes the channel meanwhile, so anything sent earlier only queues
//! up behind the mute and times out). The connection's sender notes each answer's throttle and
//! waits it out before its next request.
//!
//! A throttle longer than [`MAX_THROTTLE`] is cut to it: a broker that claims hours (a hostile
//! source) delays the next request, it does not stop the partition for good.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

/// The longest single throttle honoured.
pub(crate) const MAX_THROTTLE: Duration = Duration::from_secs(30);

/// How long an answer's `throttle_time_ms` asks the client to wait (`None`: not throttled).
pub(crate) fn delay(throttle_time_ms: i32) -> Option<Duration> {
    let ms = u64::try_from(throttle_time_ms).ok().filter(|&ms| ms > 0)?;
    Some(Duration::from_millis(ms).min(MAX_THROTTLE))
}

/// When one connection may send again (shared by its sender and the tasks that read answers).
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    until: Mutex<Option<Instant>>,
}

impl Throttle {
    /// Notes an answer's `throttle_time_ms` (received now): the connection waits that long.
    pub(crate) fn note(&self, throttle_time_ms: i32, what: &str) {
        let Some(d) = delay(throttle_time_ms) else { return };
        debug!(
            throttle_ms = d.as_millis() as u64,
            what, "the broker throttles this connection (quota); the next request waits"
        );
        let end = Instant::now() + d;
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_none_or(|u| u < end) {
            *until = Some(end);
        }
    }

    /// When the connection may send again, if it has to wait.
    pub(crate) fn until(&self) -> Option<Instant> {
        let until = *self.until.lock().unwrap_or_else(|p| p.into_inner());
        until.filter(|&u| u > Instant::now())
    }

    /// Waits until the connection may send again.
    pub(crate) async fn wait(&self) {
        while let Some(at) = self.until() {
            tokio::time::sleep_until(at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_is_waited_out_and_capped_and_no_throttle_means_no_wait() {
        assert_eq!(delay(0), None);
        assert_eq!(delay(-5), None, "a negative throttle is no throttle");
        assert_eq!(delay(250), Some(Duration::from_millis(250)));
        assert_eq!(delay(i32::MAX), Some(MAX_THROTTLE), "a throttle of weeks is cut to the cap");
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_request_waits_for_the_longest_throttle_noted() {
        let t = Throttle::default();
        let start = Instant::now();
        t.wait().await;
        assert_eq!(Instant::now(), start, "not throttled: no wait");
        t.note(1_000, "test");
        t.note(200, "test");
        t.wait().await;
        assert_eq!(
            Instant::now() - start,
            Duration::from_millis(1_000),
            "waited the longer throttle, not the later one"
        );
        assert!(t.until().is_none(), "the throttle is over");
    }
}
