//! Read-only mirror topics: Produce (`refuse::produce`) and the admin and transaction requests
//! that could change a mirror topic behind the engine's back (`refuse::topics`) are refused for
//! the mirror topics they name; the rest of each request is forwarded and the answers merged. Which topics
//! are mirror topics is the engine's (`Catalog`). A refused Produce is counted per topic
//! (`kmp_mirror_topic_produces_refused_total{topic}`) and logged with the client's id and
//! address, at most once per topic every [`LOG_EVERY`] (the line says how many were refused
//! since the last one).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kmp_protocol::kafka_protocol::messages::ApiKey;
use tokio::time::Instant;
use tracing::warn;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow, ProducedTopic};
use super::refuse::mirror::MirrorTopicGuard;
use super::refuse::topics;
use super::refuse::{self, produce};
use crate::error::ProxyError;

/// Shortest time between two log lines about refused produces to one topic.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Most topics the refusal log remembers; past that it starts afresh (only mirror topics are
/// ever noted, so this is reached only with more mirror topics than that).
const LOG_TOPICS: usize = 10_000;

/// The read-only guard of mirror topics.
#[derive(Default)]
pub(crate) struct MirrorTopicWrites {
    log: RefusalLog,
}

/// When a refused produce to a topic is logged: per topic, when the last line was written and
/// how many partitions were refused since.
#[derive(Default)]
struct RefusalLog(Mutex<HashMap<String, (Instant, u64)>>);

impl RefusalLog {
    /// Notes `n` refused partitions of `topic` at `now`; returns how many to report when a line
    /// is due (the first refusal, or [`LOG_EVERY`] after the last line).
    fn note(&self, topic: &str, n: u64, now: Instant) -> Option<u64> {
        let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((last, pending)) = seen.get_mut(topic) {
            *pending += n;
            if now.duration_since(*last) < LOG_EVERY {
                return None;
            }
            *last = now;
            return Some(std::mem::take(pending));
        }
        if seen.len() >= LOG_TOPICS {
            seen.clear();
        }
        seen.insert(topic.to_owned(), (now, 0));
        Some(n)
    }
}

impl Filter for MirrorTopicWrites {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        let topics = &conn.shared.mirrors.topics();
        if topics.is_empty() {
            return false;
        }
        if x.api_key == ApiKey::Produce as i16 {
            // Decoded only when it names a mirror topic (or cannot be scanned: then its error).
            // The scan is shared with `state_topic` (`Exchange::produce_topics`).
            return x.produce_topics().is_none_or(|named| {
                named.iter().any(|t| match t {
                    ProducedTopic::Name(n) => std::str::from_utf8(n).is_ok_and(|n| topics.is_read_only(n)),
                    // An id not known yet may be a mirror topic's: checked (and refused retriably).
                    ProducedTopic::Id(id) => topics.is_read_only_id(id) || topics.ids_pending(),
                })
            });
        }
        topics::is_guarded(x.api_key, x.api_version)
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let topics = MirrorTopicGuard(&conn.shared.mirrors.topics());
            let decision = if x.api_key == ApiKey::Produce as i16 {
                let (decision, refused) = produce::check(x.frame(), x.api_version, &topics)?;
                let now = Instant::now();
                for (topic, n) in &refused.topics {
                    conn.shared.metrics.refused_produce(topic, *n);
                    if let Some(count) = self.log.note(topic, *n, now) {
                        warn!(
                            topic = %topic,
                            client_id = refused.client_id.as_deref().unwrap_or(""),
                            peer = %conn.peer,
                            refused_partitions = count,
                            "produce to a read-only mirror topic refused (POLICY_VIOLATION): stop mirroring the topic to make it writable; further refusals for this topic are logged at most every {LOG_EVERY:?}"
                        );
                    }
                }
                decision
            } else {
                topics::check(x.frame(), x.api_key, x.api_version, &topics)?
            };
            refuse::apply(decision, x, |n| {
                conn.shared.metrics.refused_mirror_topic_changes.inc_by(n);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_topic_is_logged_at_once_then_at_most_every_log_every_with_the_count_since() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.note("orders", 2, t0), Some(2), "the first refusal is logged");
        assert_eq!(log.note("orders", 3, t0 + Duration::from_secs(1)), None);
        assert_eq!(log.note("payments", 1, t0 + Duration::from_secs(1)), Some(1), "each topic has its own window");
        assert_eq!(log.note("orders", 4, t0 + Duration::from_secs(5)), None);
        assert_eq!(
            log.note("orders", 1, t0 + LOG_EVERY),
            Some(8),
            "the line counts what was refused since the last one"
        );
        assert_eq!(log.note("orders", 1, t0 + LOG_EVERY + Duration::from_secs(1)), None);
    }
}
