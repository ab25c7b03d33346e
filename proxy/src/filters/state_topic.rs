//! The engine's state topic (`engine.state_topic`, default `__kmp_mirror_state`) is refused to
//! clients entirely: Produce, Fetch, DeleteTopics, DeleteRecords, CreatePartitions,
//! AlterConfigs/IncrementalAlterConfigs and AddPartitionsToTxn naming it (by name, or by topic id
//! once the engine learned it) get TOPIC_AUTHORIZATION_FAILED (29) for it; the rest of the
//! request is forwarded. A forged record there would become a mirror after the next restart.
//!
//! Cost: a Produce is decoded only when an allocation-free scan of its topics names the state
//! topic; other requests only when their raw bytes contain its name or id (a SIMD substring
//! search), so ordinary Produce and Fetch traffic stays raw.

use bytes::Bytes;
use kmp_protocol::codec::decode_request;
use kmp_protocol::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kmp_protocol::kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
use kmp_protocol::{ProtocolError, peek};
use memchr::memmem;

use super::guard::{self, Decision, Protected, split};
use super::readonly::{self, REFUSED_CODE};
use super::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

/// The state topic as a protected topic.
struct StateTopic<'a> {
    name: &'a str,
    id: Option<[u8; 16]>,
}

fn message(name: &str) -> String {
    format!("topic {name} is kafka-mirror-proxy's internal mirror state topic; clients may not read or change it")
}

impl Protected for StateTopic<'_> {
    fn by_name(&self, topic: &str) -> Option<String> {
        (topic == self.name).then(|| message(self.name))
    }
    fn by_id(&self, id: &[u8; 16]) -> Option<(String, String)> {
        (self.id.as_ref() == Some(id)).then(|| (self.name.to_owned(), message(self.name)))
    }
}

/// The state-topic guard.
pub(crate) struct StateTopicGuard;

fn watched(api_key: i16, api_version: i16) -> bool {
    matches!(ApiKey::try_from(api_key), Ok(ApiKey::Produce | ApiKey::Fetch)) || guard::is_guarded(api_key, api_version)
}

impl Filter for StateTopicGuard {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        if !conn.shared.masks_fillers || !watched(x.api_key, x.api_version) {
            return false;
        }
        let name = conn.shared.config.engine.state_topic.as_bytes();
        let id = conn.shared.mirrors.topics().state_topic_id();
        if x.api_key == ApiKey::Produce as i16 {
            // A malformed request is decoded (and refused with its error) by `on_request`.
            return peek::produce_names_any(&x.frame, &x.peek(), |t| match t {
                peek::ProduceTopic::Name(n) => n == name,
                peek::ProduceTopic::Id(i) => id.as_ref() == Some(i),
            })
            .unwrap_or(true);
        }
        memmem::find(&x.frame, name).is_some() || id.is_some_and(|id| memmem::find(&x.frame, &id).is_some())
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let topic = StateTopic {
                name: &conn.shared.config.engine.state_topic,
                id: conn.shared.mirrors.topics().state_topic_id(),
            };
            let decision = match ApiKey::try_from(x.api_key) {
                Ok(ApiKey::Produce) => readonly::check(&x.frame, x.api_version, &topic)?,
                Ok(ApiKey::Fetch) => fetch(&x.frame, x.api_version, &topic)?,
                _ => guard::check(&x.frame, x.api_key, x.api_version, &topic)?,
            };
            super::mirror_topics::apply(decision, x, |n| conn.shared.metrics.refused("state_topic", n))
        })
    }
}

/// Takes the state topic out of a Fetch request and answers its partitions with the refusal.
fn fetch(frame: &Bytes, version: i16, topic: &StateTopic<'_>) -> Result<Decision, ProtocolError> {
    let hit = |t: &kmp_protocol::kafka_protocol::messages::fetch_request::FetchTopic| {
        if version >= 13 {
            topic.by_id(t.topic_id.as_bytes()).is_some()
        } else {
            topic.by_name(t.topic.0.as_str()).is_some()
        }
    };
    let (_, req) = decode_request::<FetchRequest>(frame, ApiKey::Fetch, version)?;
    let refused: Vec<FetchableTopicResponse> = req
        .topics
        .iter()
        .filter(|t| hit(t))
        .map(|t| {
            let mut r = FetchableTopicResponse::default();
            r.topic = t.topic.clone();
            r.topic_id = t.topic_id;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = PartitionData::default();
                    d.partition_index = p.partition;
                    d.error_code = REFUSED_CODE;
                    d.high_watermark = -1;
                    d.last_stable_offset = -1;
                    d.log_start_offset = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    split::<FetchRequest, FetchResponse>(
        frame,
        ApiKey::Fetch,
        version,
        |req| {
            let mut out = Vec::new();
            req.topics.retain(|t| {
                if hit(t) {
                    out.push((topic.name.to_owned(), message(topic.name)));
                    false
                } else {
                    true
                }
            });
            out
        },
        |req| req.topics.len(),
        move |resp, _| resp.responses.extend(refused),
    )
}
