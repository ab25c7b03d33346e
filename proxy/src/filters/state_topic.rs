//! The engine's state topic (`engine.state_topic`, default `__kmp_mirror_state`) is refused to
//! clients entirely: Produce, Fetch, ShareFetch, ShareAcknowledge, DeleteTopics, DeleteRecords,
//! CreatePartitions, AlterConfigs/IncrementalAlterConfigs and AddPartitionsToTxn naming it (by
//! name, or by topic id once the engine learned it; ShareFetch and ShareAcknowledge name topics
//! by id only) get TOPIC_AUTHORIZATION_FAILED (29) for it; the rest of the request is forwarded.
//! A forged record there would become a mirror after the next restart, and its records may hold
//! secrets (a mirror's source security properties), so reading it through a share group is
//! refused as a Fetch is.
//!
//! Cost: a Produce is decoded only when a scan of its topics (one per request, shared with
//! `mirror_topics`: `Exchange::produce_topics`) names the state topic; other requests only when their raw bytes contain its name or id (a SIMD substring
//! search), so ordinary Produce and Fetch traffic stays raw.

use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::decode_request;
use kmp_protocol::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kmp_protocol::kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse, share_acknowledge_response,
    share_fetch_response,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use memchr::memmem;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow, ProducedTopic};
use super::refuse::text::Shown;
use super::refuse::{self, Decision, Protected, REFUSED_CODE, produce, split, take, topics};
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
    matches!(
        ApiKey::try_from(api_key),
        Ok(ApiKey::Produce | ApiKey::Fetch | ApiKey::ShareFetch | ApiKey::ShareAcknowledge)
    ) || topics::is_guarded(api_key, api_version)
}

/// Whether requests of this key and version name topics by id only (Fetch v13+, ShareFetch,
/// ShareAcknowledge): until the state topic's id is known such a request could name it unseen,
/// and a fetch session opened on it would keep reading it with requests that name nothing.
fn by_id(api_key: i16, api_version: i16) -> bool {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Fetch) => api_version >= 13,
        Ok(ApiKey::ShareFetch | ApiKey::ShareAcknowledge) => true,
        _ => false,
    }
}

/// How often a held request looks whether the state topic's id is known yet.
const ID_POLL: Duration = Duration::from_millis(50);

/// Holds a request that names topics by id until the state topic's id is known (issue #35, L-a),
/// at most `limits.startup_write_wait_ms`; then the connection is closed, which clients retry.
async fn wait_for_state_topic_id(conn: &Conn) -> Result<(), ProxyError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(conn.shared.config.limits.startup_write_wait_ms);
    while conn.shared.mirrors.topics().state_topic_id().is_none() {
        if tokio::time::Instant::now() >= deadline {
            conn.shared.metrics.refused("startup_state_topic_id_unknown", 1);
            tracing::warn!("closing connection: a request naming topics by id arrived before the state topic's id was known");
            return Err(ProxyError::NotReady);
        }
        tokio::time::sleep(ID_POLL).await;
    }
    Ok(())
}

impl Filter for StateTopicGuard {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        if !watched(x.api_key, x.api_version) {
            return false;
        }
        let name = conn.shared.config.engine.state_topic.as_bytes();
        let id = conn.shared.mirrors.topics().state_topic_id();
        if x.api_key == ApiKey::Produce as i16 {
            // A malformed request is decoded (and refused with its error) by `on_request`.
            return x.produce_topics().is_none_or(|topics| {
                topics.iter().any(|t| match t {
                    ProducedTopic::Name(n) => n == name,
                    ProducedTopic::Id(i) => id.as_ref() == Some(i),
                })
            });
        }
        if id.is_none() && by_id(x.api_key, x.api_version) {
            // Which id is the state topic's is not known yet (start-up): held in `on_request`.
            return true;
        }
        memmem::find(x.frame(), name).is_some() || id.is_some_and(|id| memmem::find(x.frame(), &id).is_some())
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            if conn.shared.mirrors.topics().state_topic_id().is_none() && by_id(x.api_key, x.api_version) {
                wait_for_state_topic_id(conn).await?;
            }
            let topic = StateTopic {
                name: &conn.shared.config.engine.state_topic,
                id: conn.shared.mirrors.topics().state_topic_id(),
            };
            let decision = match ApiKey::try_from(x.api_key) {
                Ok(ApiKey::Produce) => produce::check(x.frame(), x.api_version, &topic)?.0,
                Ok(ApiKey::Fetch) => fetch(x.frame(), x.api_version, &topic)?,
                Ok(ApiKey::ShareFetch) => share_fetch(x.frame(), x.api_version, &topic)?,
                Ok(ApiKey::ShareAcknowledge) => share_acknowledge(x.frame(), x.api_version, &topic)?,
                _ => topics::check(x.frame(), x.api_key, x.api_version, &topic)?,
            };
            refuse::apply(decision, x, |n| conn.shared.metrics.refused("state_topic", n))
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
        |req| take(&mut req.topics, |t| hit(t).then(|| (topic.name.to_owned(), message(topic.name)))),
        |req| req.topics.len(),
        move |resp, _| resp.responses.extend(refused),
    )
}

/// Takes the state topic (named by id) out of a ShareFetch request and answers its partitions
/// with the refusal, acknowledgements included.
fn share_fetch(frame: &Bytes, version: i16, topic: &StateTopic<'_>) -> Result<Decision, ProtocolError> {
    use kmp_protocol::kafka_protocol::messages::share_fetch_request::FetchTopic;
    let hit = |t: &FetchTopic| topic.by_id(t.topic_id.as_bytes()).is_some();
    let (_, req) = decode_request::<ShareFetchRequest>(frame, ApiKey::ShareFetch, version)?;
    let text = StrBytes::from_string(message(topic.name));
    let mut shown = Shown::default();
    let refused: Vec<share_fetch_response::ShareFetchableTopicResponse> = req
        .topics
        .iter()
        .filter(|t| hit(t))
        .map(|t| {
            let mut r = share_fetch_response::ShareFetchableTopicResponse::default();
            r.topic_id = t.topic_id;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = share_fetch_response::PartitionData::default();
                    d.partition_index = p.partition_index;
                    d.error_code = REFUSED_CODE;
                    d.error_message = shown.text(&text);
                    if !p.acknowledgement_batches.is_empty() {
                        d.acknowledge_error_code = REFUSED_CODE;
                    }
                    d.current_leader.leader_id = -1;
                    d.current_leader.leader_epoch = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    split::<ShareFetchRequest, ShareFetchResponse>(
        frame,
        ApiKey::ShareFetch,
        version,
        |req| take(&mut req.topics, |t| hit(t).then(|| (topic.name.to_owned(), message(topic.name)))),
        |req| req.topics.len() + req.forgotten_topics_data.len(),
        move |resp, _| resp.responses.extend(refused),
    )
}

/// Takes the state topic (named by id) out of a ShareAcknowledge request and answers its
/// partitions with the refusal.
fn share_acknowledge(frame: &Bytes, version: i16, topic: &StateTopic<'_>) -> Result<Decision, ProtocolError> {
    use kmp_protocol::kafka_protocol::messages::share_acknowledge_request::AcknowledgeTopic;
    let hit = |t: &AcknowledgeTopic| topic.by_id(t.topic_id.as_bytes()).is_some();
    let (_, req) = decode_request::<ShareAcknowledgeRequest>(frame, ApiKey::ShareAcknowledge, version)?;
    let text = StrBytes::from_string(message(topic.name));
    let mut shown = Shown::default();
    let refused: Vec<share_acknowledge_response::ShareAcknowledgeTopicResponse> = req
        .topics
        .iter()
        .filter(|t| hit(t))
        .map(|t| {
            let mut r = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
            r.topic_id = t.topic_id;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = share_acknowledge_response::PartitionData::default();
                    d.partition_index = p.partition_index;
                    d.error_code = REFUSED_CODE;
                    d.error_message = shown.text(&text);
                    d.current_leader.leader_id = -1;
                    d.current_leader.leader_epoch = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    split::<ShareAcknowledgeRequest, ShareAcknowledgeResponse>(
        frame,
        ApiKey::ShareAcknowledge,
        version,
        |req| take(&mut req.topics, |t| hit(t).then(|| (topic.name.to_owned(), message(topic.name)))),
        |req| req.topics.len(),
        move |resp, _| resp.responses.extend(refused),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::codec::{decode_response, encode_request, encode_response};
    use kmp_protocol::kafka_protocol::messages::RequestHeader;
    use kmp_protocol::kafka_protocol::messages::share_acknowledge_request::{AcknowledgePartition, AcknowledgeTopic};
    use kmp_protocol::kafka_protocol::messages::share_fetch_request::{AcknowledgementBatch, FetchPartition, FetchTopic};
    use kmp_protocol::kafka_protocol::protocol::StrBytes;
    use uuid::Uuid;

    const STATE_ID: [u8; 16] = [7; 16];
    const OTHER_ID: [u8; 16] = [9; 16];

    fn state_topic() -> StateTopic<'static> {
        StateTopic {
            name: "__kmp_mirror_state",
            id: Some(STATE_ID),
        }
    }

    fn header(key: ApiKey) -> RequestHeader {
        let mut h = RequestHeader::default();
        h.request_api_key = key as i16;
        h.request_api_version = 1;
        h.correlation_id = 5;
        h
    }

    fn share_fetch_request(ids: &[[u8; 16]]) -> Bytes {
        let mut req = ShareFetchRequest::default();
        req.group_id = Some(StrBytes::from_static_str("g").into());
        for id in ids {
            let mut t = FetchTopic::default();
            t.topic_id = Uuid::from_bytes(*id);
            let mut p = FetchPartition::default();
            p.partition_index = 0;
            let mut b = AcknowledgementBatch::default();
            b.acknowledge_types = vec![1];
            p.acknowledgement_batches.push(b);
            t.partitions.push(p);
            req.topics.push(t);
        }
        encode_request(&header(ApiKey::ShareFetch), ApiKey::ShareFetch, &req).unwrap()
    }

    fn share_acknowledge_request(ids: &[[u8; 16]]) -> Bytes {
        let mut req = ShareAcknowledgeRequest::default();
        req.group_id = Some(StrBytes::from_static_str("g").into());
        for id in ids {
            let mut t = AcknowledgeTopic::default();
            t.topic_id = Uuid::from_bytes(*id);
            let mut p = AcknowledgePartition::default();
            p.partition_index = 0;
            t.partitions.push(p);
            req.topics.push(t);
        }
        encode_request(&header(ApiKey::ShareAcknowledge), ApiKey::ShareAcknowledge, &req).unwrap()
    }

    #[test]
    fn share_fetch_and_share_acknowledge_are_watched_like_fetch() {
        for key in [ApiKey::Fetch, ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
            assert!(watched(key as i16, 1), "{key:?}");
        }
    }

    #[test]
    fn share_fetch_of_the_state_topic_by_id_is_refused() {
        let Decision::Refuse(frame, 1) = share_fetch(&share_fetch_request(&[STATE_ID]), 1, &state_topic()).unwrap() else {
            panic!("refused whole")
        };
        let (h, resp) = decode_response::<ShareFetchResponse>(&frame, ApiKey::ShareFetch, 1).unwrap();
        assert_eq!(h.correlation_id, 5);
        let p = &resp.responses[0].partitions[0];
        assert_eq!(
            (resp.responses[0].topic_id.into_bytes(), p.error_code, p.acknowledge_error_code),
            (STATE_ID, REFUSED_CODE, REFUSED_CODE)
        );
        assert!(p.records.as_ref().is_none_or(|r| r.is_empty()), "no records of the state topic");

        let Decision::Split(rest, merge, 1) = share_fetch(&share_fetch_request(&[OTHER_ID, STATE_ID]), 1, &state_topic()).unwrap() else {
            panic!("split")
        };
        let (_, fwd) = decode_request::<ShareFetchRequest>(&rest, ApiKey::ShareFetch, 1).unwrap();
        assert_eq!(fwd.topics.iter().map(|t| t.topic_id.into_bytes()).collect::<Vec<_>>(), vec![OTHER_ID]);
        let mut broker = ShareFetchResponse::default();
        let mut ok = share_fetch_response::ShareFetchableTopicResponse::default();
        ok.topic_id = Uuid::from_bytes(OTHER_ID);
        broker.responses.push(ok);
        let merged = merge(encode_response(5, ApiKey::ShareFetch, 1, &broker).unwrap()).unwrap();
        let (_, resp) = decode_response::<ShareFetchResponse>(&merged, ApiKey::ShareFetch, 1).unwrap();
        let ids: Vec<_> = resp.responses.iter().map(|t| t.topic_id.into_bytes()).collect();
        assert_eq!(ids, vec![OTHER_ID, STATE_ID]);

        assert!(matches!(
            share_fetch(&share_fetch_request(&[OTHER_ID]), 1, &state_topic()).unwrap(),
            Decision::Forward
        ));
    }

    #[test]
    fn share_acknowledge_of_the_state_topic_by_id_is_refused() {
        let Decision::Refuse(frame, 1) = share_acknowledge(&share_acknowledge_request(&[STATE_ID]), 1, &state_topic()).unwrap() else {
            panic!("refused whole")
        };
        let (_, resp) = decode_response::<ShareAcknowledgeResponse>(&frame, ApiKey::ShareAcknowledge, 1).unwrap();
        assert_eq!(resp.responses[0].partitions[0].error_code, REFUSED_CODE);
        let Decision::Split(rest, _, 1) = share_acknowledge(&share_acknowledge_request(&[STATE_ID, OTHER_ID]), 1, &state_topic()).unwrap() else {
            panic!("split")
        };
        let (_, fwd) = decode_request::<ShareAcknowledgeRequest>(&rest, ApiKey::ShareAcknowledge, 1).unwrap();
        assert_eq!(fwd.topics.len(), 1);
        assert!(matches!(
            share_acknowledge(&share_acknowledge_request(&[OTHER_ID]), 1, &state_topic()).unwrap(),
            Decision::Forward
        ));
    }
}
