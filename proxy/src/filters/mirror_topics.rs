//! Read-only mirror topics: Produce (`readonly`) and the admin and transaction requests that
//! could change a mirror topic behind the engine's back (`guard`) are refused for the mirror
//! topics they name; the rest of each request is forwarded and the answers merged. Which topics
//! are mirror topics is the engine's (`MirrorTopics`).

use kmp_protocol::kafka_protocol::messages::ApiKey;

use super::guard::{self, Decision, MirrorTopicGuard};
use super::{BoxFuture, Conn, Exchange, Filter, Flow, readonly};
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
    fn wants_request(&self, api_key: i16, api_version: i16, conn: &Conn) -> bool {
        conn.shared.masks_fillers && !conn.shared.mirrors.topics.is_empty() && (api_key == ApiKey::Produce as i16 || guard::is_guarded(api_key, api_version))
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let topics = MirrorTopicGuard(&conn.shared.mirrors.topics);
            let decision = if x.api_key == ApiKey::Produce as i16 {
                readonly::check(&x.frame, x.api_version, &topics)?
            } else {
                guard::check(&x.frame, x.api_key, x.api_version, &topics)?
            };
            apply(decision, x, |n| {
                conn.shared.metrics.refused_mirror_topic_changes.inc_by(n);
            })
        })
    }
}
