//! What a follower instance (`engine.role = "follower"`) reports about following the state topic:
//! its `/readyz` answer and its `/metrics` gauges (collected by `collectors`), both from the engine crate's
//! [`FollowProgress`]. Reading the topic belongs to the engine crate; serving HTTP to `admin`.

use std::fmt;

use kmp_mirror_engine::FollowProgress;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::gauge::ConstGauge;

use super::collectors::single;

/// A follower that has not read the state topic for this long is not ready: a failover done
/// through the engine instance meanwhile would not be seen (a healthy one reads every 500 ms).
pub(crate) const STALE_MS: i64 = 10_000;

/// `(ready, body)` of `/readyz` for a follower at `now_ms`.
pub(crate) fn readiness(p: &FollowProgress, now_ms: i64) -> (bool, String) {
    let error = p.error.as_deref().map_or(String::new(), |e| format!("; last error: {e}"));
    if !p.loaded {
        return (
            false,
            format!(
                "following the mirror state topic {}: still loading (at offset {} of {}){error}\n",
                p.topic, p.position, p.high_watermark
            ),
        );
    }
    let age = now_ms - p.last_read_ms;
    if age > STALE_MS {
        return (
            false,
            format!(
                "mirror state topic {} not read for {} s{error}: a failover done through the engine instance may not be seen here\n",
                p.topic,
                age / 1000
            ),
        );
    }
    if p.high_watermark < 0 {
        return (true, format!("ready (mirror state topic {} does not exist yet: no mirror topics)\n", p.topic));
    }
    let at = if p.caught_up() {
        format!("caught up at offset {}", p.position)
    } else {
        format!("at offset {} of {}", p.position, p.high_watermark)
    };
    (true, format!("ready (following the mirror state topic {}: {at})\n", p.topic))
}

/// A follower's gauges at `now_ms`, from what it last read (collected by `collectors`).
pub(crate) fn encode((p, now_ms): &(FollowProgress, i64), e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let age = if p.last_read_ms > 0 {
        (now_ms - p.last_read_ms).max(0) as f64 / 1000.0
    } else {
        -1.0
    };
    for (name, help, value) in [
        (
            "state_follower_position",
            "Next offset of the mirror state topic this follower reads",
            p.position,
        ),
        (
            "state_follower_end_offset",
            "High watermark of the mirror state topic at the last read (-1: none yet, or no topic)",
            p.high_watermark,
        ),
        (
            "state_follower_caught_up",
            "1 when the follower has read the mirror state topic to its end",
            i64::from(p.caught_up()),
        ),
    ] {
        single(e, name, help, ConstGauge::new(value))?;
    }
    single(
        e,
        "state_follower_read_age_seconds",
        "Seconds since the mirror state topic last answered this follower (-1: never)",
        ConstGauge::new(age),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(loaded: bool, position: i64, high_watermark: i64, last_read_ms: i64) -> FollowProgress {
        FollowProgress {
            topic: "__kmp_mirror_state".into(),
            loaded,
            position,
            high_watermark,
            last_read_ms,
            error: None,
        }
    }

    #[test]
    fn a_follower_is_ready_once_loaded_and_while_it_keeps_reading() {
        let now = 1_000_000;
        let (ready, body) = readiness(&progress(false, 3, 10, now), now);
        assert!(!ready && body.contains("still loading (at offset 3 of 10)"), "{body}");
        let (ready, body) = readiness(&progress(true, 10, 10, now - 400), now);
        assert!(ready && body.contains("caught up at offset 10"), "{body}");
        let (ready, body) = readiness(&progress(true, 8, 10, now), now);
        assert!(ready && body.contains("at offset 8 of 10"), "{body}");
        let mut stale = progress(true, 10, 10, now - STALE_MS - 1000);
        stale.error = Some("connection refused".into());
        let (ready, body) = readiness(&stale, now);
        assert!(!ready && body.contains("not read for 11 s") && body.contains("connection refused"), "{body}");
        let (ready, body) = readiness(&progress(true, 0, -1, now), now);
        assert!(ready && body.contains("does not exist yet"), "{body}");
    }

    #[test]
    fn the_gauges_show_position_end_and_whether_caught_up() {
        let text = crate::admin::collectors::text_of(&(progress(true, 10, 12, 5_000), 7_000), encode);
        for line in [
            "kmp_state_follower_position 10",
            "kmp_state_follower_end_offset 12",
            "kmp_state_follower_caught_up 0",
            "kmp_state_follower_read_age_seconds 2.0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
