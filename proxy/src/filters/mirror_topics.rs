//! Read-only mirror topics: Produce (`refuse::produce`) and the admin and transaction requests
//! that could change a mirror topic behind the engine's back (`refuse::topics`) are refused for the mirror
//! topics they name; the rest of each request is forwarded and the answers merged. Which topics
//! are mirror topics is the engine's (`Catalog`).

use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::peek;

use super::refuse::produce;
use super::refuse::topics::{self, Decision, MirrorTopicGuard};
use super::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

/// Turns a guard's decision into the chain's flow: a refusal answers (an empty answer means
/// "no response", acks=0), a split reduces the request and registers the merge; `count` gets the
/// number of refused parts.
pub(crate) fn apply(decision: Decision, x: &mut Exchange, count: impl FnOnce(u64)) -> Result<Flow, ProxyError> {
    match decision {
        Decision::Forward => Ok(Flow::Continue),
        Decision::Refuse(response, n) => {
            count(n);
            Ok(Flow::Answer((!response.is_empty()).then_some(response)))
        }
        Decision::Split(rest, merge, n) => {
            count(n);
            x.frame = rest;
            x.merge(merge);
            Ok(Flow::Continue)
        }
    }
}

/// The read-only guard of mirror topics.
pub(crate) struct MirrorTopicWrites;

impl Filter for MirrorTopicWrites {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        let topics = &conn.shared.mirrors.topics();
        if !conn.shared.masks_fillers || topics.is_empty() {
            return false;
        }
        if x.api_key == ApiKey::Produce as i16 {
            // Decoded only when it names a mirror topic (or cannot be scanned: then its error).
            return peek::produce_names_any(&x.frame, &x.peek(), |t| match t {
                peek::ProduceTopic::Name(n) => std::str::from_utf8(n).is_ok_and(|n| topics.is_read_only(n)),
                // An id not known yet may be a mirror topic's: checked (and refused retriably).
                peek::ProduceTopic::Id(id) => topics.is_read_only_id(id) || topics.ids_pending(),
            })
            .unwrap_or(true);
        }
        topics::is_guarded(x.api_key, x.api_version)
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let topics = MirrorTopicGuard(&conn.shared.mirrors.topics());
            let decision = if x.api_key == ApiKey::Produce as i16 {
                produce::check(&x.frame, x.api_version, &topics)?
            } else {
                topics::check(&x.frame, x.api_key, x.api_version, &topics)?
            };
            apply(decision, x, |n| {
                conn.shared.metrics.refused_mirror_topic_changes.inc_by(n);
            })
        })
    }
}
