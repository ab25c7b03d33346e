//! Read-only mirror topics: a Produce that writes to a topic the mirror engine owns (in any
//! state but stopped) is refused for those partitions only; other topics in the same request go
//! to the broker as usual and the two answers are merged into one response.
//!
//! Error code: a protected topic's own ([`Protected::produce_code`]; the state topic's is
//! TOPIC_AUTHORIZATION_FAILED). For a read-only mirror topic: no Produce version a client can
//! negotiate today (3–13) knows KIP-1279's READ_ONLY_TOPIC (134) — a client would map it to an
//! unknown error — so every version gets POLICY_VIOLATION (44, [`READ_ONLY_CODE`]): known to every client since Kafka 0.10.2, non-retriable in Java,
//! librdkafka, kafka-python and franz-go (the producer fails the batch at once instead of
//! retrying), and — unlike TOPIC_AUTHORIZATION_FAILED, for which the Java producer builds its own
//! "Not authorized to access topics" text and sends users looking at ACLs — shown by the Java
//! producer with the per-partition error message (Produce v8+), which names the mirror and how to
//! make the topic writable. Which topics are mirror topics is the engine's (`Catalog`); the
//! `mirror_topics` and `state_topic` filters call [`check`] with the topics they protect, apply
//! its decision and report what it [`Refused`].

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kmp_protocol::kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};

use super::text::{Shown, Texts};
use super::{Decision, Protected};
use crate::filters::api::Merge;

/// The code of a Produce v13+ naming a topic id the proxy cannot check yet (some mirror topic's
/// id is not known yet, e.g. just after a restart): retriable, the client refreshes its metadata
/// and sends again.
const PENDING_CODE: i16 = ResponseError::UnknownTopicId.code();

/// The code of a partition refused because its topic is a read-only mirror topic (see the
/// module docs).
pub(crate) const READ_ONLY_CODE: i16 = ResponseError::PolicyViolation.code();

/// What a Produce had refused, for the log and the per-topic counter: the client id of its
/// header and, by topic, how many partitions (a topic named twice counts twice; a topic refused
/// only because its id is not known yet is not counted).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) client_id: Option<String>,
    pub(crate) topics: Vec<(String, u64)>,
}

/// Decides what to do with a Produce request frame (prefix included), and says what it refused.
pub(crate) fn check(frame: &Bytes, version: i16, topics: &dyn Protected) -> Result<(Decision, Refused), ProtocolError> {
    let (header, mut req) = decode_request::<ProduceRequest>(frame, ApiKey::Produce, version)?;
    let mut refused = Vec::new();
    let mut report = Refused::default();
    let refused_code = topics.produce_code();
    let mut partitions = 0u64;
    let (mut texts, mut shown) = (Texts::default(), Shown::default());
    req.topic_data.retain(|t| {
        let owner = if version >= 13 {
            let id = t.topic_id.as_bytes();
            topics
                .by_id(id)
                .map(|(name, m)| (m, refused_code, Some(name)))
                .or_else(|| topics.pending_id(id).map(|m| (m, PENDING_CODE, None)))
        } else {
            let name = t.name.0.as_str();
            topics.by_name(name).map(|m| (m, refused_code, Some(name.to_owned())))
        };
        let Some((message, code, name)) = owner else { return true };
        if let Some(name) = name {
            report.topics.push((name, t.partition_data.len() as u64));
        }
        let message = texts.share(message);
        let mut r = TopicProduceResponse::default();
        r.name = t.name.clone();
        r.topic_id = t.topic_id;
        r.partition_responses = t
            .partition_data
            .iter()
            .map(|p| {
                let mut pr = PartitionProduceResponse::default();
                pr.index = p.index;
                pr.error_code = code;
                pr.base_offset = -1;
                pr.log_append_time_ms = -1;
                pr.log_start_offset = -1;
                pr.error_message = shown.text(&message);
                pr
            })
            .collect();
        partitions += r.partition_responses.len() as u64;
        refused.push(r);
        false
    });
    if refused.is_empty() {
        return Ok((Decision::Forward, report));
    }
    report.client_id = header.client_id.as_ref().map(|c| c.to_string());
    if req.topic_data.is_empty() {
        if req.acks == 0 {
            return Ok((Decision::Refuse(Bytes::new(), partitions), report)); // acks=0: no response at all
        }
        let mut resp = ProduceResponse::default();
        resp.responses = refused;
        return Ok((
            Decision::Refuse(encode_response(header.correlation_id, ApiKey::Produce, version, &resp)?, partitions),
            report,
        ));
    }
    // Adds the refused topics to the broker's response to the rest of the request.
    let merge: Merge = Box::new(move |frame: Bytes| {
        let (header, mut resp) = decode_response::<ProduceResponse>(&frame, ApiKey::Produce, version)?;
        resp.responses.extend(refused);
        encode_response(header.correlation_id, ApiKey::Produce, version, &resp)
    });
    Ok((Decision::Split(encode_request(&header, ApiKey::Produce, &req)?, merge, partitions), report))
}

#[cfg(test)]
mod tests {
    use super::super::mirror::MirrorTopicGuard;
    use super::*;
    use kmp_mirror_engine::Catalog;
    use kmp_protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kmp_protocol::kafka_protocol::messages::{RequestHeader, TopicName};
    use kmp_protocol::kafka_protocol::protocol::StrBytes;

    fn request(topics: &[&str], acks: i16, version: i16) -> Bytes {
        let mut req = ProduceRequest::default();
        req.acks = acks;
        req.timeout_ms = 1000;
        for t in topics {
            let mut td = TopicProduceData::default();
            td.name = TopicName(StrBytes::from_string((*t).to_owned()));
            for p in 0..2 {
                let mut pd = PartitionProduceData::default();
                pd.index = p;
                pd.records = Some(Bytes::from_static(b"batch"));
                td.partition_data.push(pd);
            }
            req.topic_data.push(td);
        }
        let mut h = RequestHeader::default();
        h.request_api_key = 0;
        h.request_api_version = version;
        h.correlation_id = 42;
        encode_request(&h, ApiKey::Produce, &req).unwrap()
    }

    fn registry() -> Catalog {
        let r = Catalog::default();
        r.register("mirrored", "dr", [0; 16]);
        r
    }

    #[test]
    fn requests_without_mirror_topics_are_forwarded_untouched() {
        assert!(matches!(
            check(&request(&["plain"], 1, 9), 9, &MirrorTopicGuard(&registry())).unwrap().0,
            Decision::Forward
        ));
    }

    #[test]
    fn a_request_for_mirror_topics_only_is_answered_with_the_refusal_and_acks_0_gets_nothing() {
        let (Decision::Refuse(frame, 2), refused) = check(&request(&["mirrored"], -1, 9), 9, &MirrorTopicGuard(&registry())).unwrap() else {
            panic!("refused")
        };
        assert_eq!(refused.topics, vec![("mirrored".to_owned(), 2)], "what the log and the per-topic counter get");
        let (h, resp) = decode_response::<ProduceResponse>(&frame, ApiKey::Produce, 9).unwrap();
        assert_eq!(h.correlation_id, 42);
        let parts = &resp.responses[0].partition_responses;
        assert_eq!(parts.len(), 2);
        assert!(
            parts
                .iter()
                .all(|p| p.error_code == ResponseError::PolicyViolation.code() && p.error_message.as_ref().is_some_and(|m| m.contains("cluster mirror dr")))
        );
        assert!(matches!(check(&request(&["mirrored"], 0, 9), 9, &MirrorTopicGuard(&registry())).unwrap().0, Decision::Refuse(f, 2) if f.is_empty()));
    }

    #[test]
    fn a_mixed_request_forwards_the_other_topics_and_merges_the_refusal_into_the_response() {
        let (Decision::Split(frame, merge, 2), refused) = check(&request(&["plain", "mirrored"], -1, 9), 9, &MirrorTopicGuard(&registry())).unwrap() else {
            panic!("split")
        };
        assert_eq!(refused.topics, vec![("mirrored".to_owned(), 2)]);
        let (_, fwd) = decode_request::<ProduceRequest>(&frame, ApiKey::Produce, 9).unwrap();
        assert_eq!(fwd.topic_data.len(), 1);
        assert_eq!(fwd.topic_data[0].name.0.as_str(), "plain");
        let mut broker = ProduceResponse::default();
        let mut t = TopicProduceResponse::default();
        t.name = TopicName(StrBytes::from_static_str("plain"));
        broker.responses.push(t);
        let merged = merge(encode_response(42, ApiKey::Produce, 9, &broker).unwrap()).unwrap();
        let (_, resp) = decode_response::<ProduceResponse>(&merged, ApiKey::Produce, 9).unwrap();
        let names: Vec<_> = resp.responses.iter().map(|t| t.name.0.as_str().to_owned()).collect();
        assert_eq!(names, vec!["plain", "mirrored"]);
    }

    fn by_id(id: [u8; 16]) -> Bytes {
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 1000;
        let mut td = TopicProduceData::default();
        td.topic_id = uuid::Uuid::from_bytes(id);
        let mut pd = PartitionProduceData::default();
        pd.records = Some(Bytes::from_static(b"batch"));
        td.partition_data.push(pd);
        req.topic_data.push(td);
        let mut h = RequestHeader::default();
        h.request_api_key = 0;
        h.request_api_version = 13;
        h.correlation_id = 42;
        encode_request(&h, ApiKey::Produce, &req).unwrap()
    }

    fn code_of((decision, _): (Decision, Refused)) -> i16 {
        let Decision::Refuse(frame, 1) = decision else { panic!("refused") };
        let (_, resp) = decode_response::<ProduceResponse>(&frame, ApiKey::Produce, 13).unwrap();
        resp.responses[0].partition_responses[0].error_code
    }

    #[test]
    fn produce_by_an_unknown_id_is_refused_retriably_while_a_mirror_topics_id_is_not_known() {
        // After a restart the mirror topic is registered by name; its id comes from the
        // destination's metadata a moment later. A Produce v13 naming it by id must not pass.
        let r = registry();
        let g = MirrorTopicGuard(&r);
        assert_eq!(code_of(check(&by_id([7; 16]), 13, &g).unwrap()), 100, "UNKNOWN_TOPIC_ID: the client retries");
        r.learn_topic_id("mirrored", [7; 16]);
        assert_eq!(code_of(check(&by_id([7; 16]), 13, &g).unwrap()), READ_ONLY_CODE, "known: refused for good");
        assert!(
            matches!(check(&by_id([8; 16]), 13, &g).unwrap().0, Decision::Forward),
            "other topics pass once every id is known"
        );
    }

    #[test]
    fn a_mirror_topic_the_destination_does_not_have_holds_no_other_topic_back() {
        let r = registry();
        r.mark_absent("mirrored");
        assert!(matches!(check(&by_id([8; 16]), 13, &MirrorTopicGuard(&r)).unwrap().0, Decision::Forward));
    }
}
