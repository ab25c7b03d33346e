//! Read-only mirror topics: Produce (`refuse::produce`) and the admin and transaction requests
//! that could change a mirror topic behind the engine's back (`refuse::topics`) are refused for
//! the mirror topics they name; the rest of each request is forwarded and the answers merged. Which topics
//! are mirror topics is the engine's (`Catalog`).

use kmp_protocol::kafka_protocol::messages::ApiKey;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow, ProducedTopic};
use super::refuse::mirror::MirrorTopicGuard;
use super::refuse::topics;
use super::refuse::{self, produce};
use crate::error::ProxyError;

/// The read-only guard of mirror topics.
pub(crate) struct MirrorTopicWrites;

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
                produce::check(x.frame(), x.api_version, &topics)?
            } else {
                topics::check(x.frame(), x.api_key, x.api_version, &topics)?
            };
            refuse::apply(decision, x, |n| {
                conn.shared.metrics.refused_mirror_topic_changes.inc_by(n);
            })
        })
    }
}
