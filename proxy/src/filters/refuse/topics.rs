//! Admin and transaction requests that would change a read-only mirror topic behind the
//! engine's back — DeleteTopics, CreatePartitions, DeleteRecords, AlterConfigs,
//! IncrementalAlterConfigs (topic resources) and AddPartitionsToTxn (v0-3); CreateTopics,
//! reassignments, log-directory moves and unclean elections are `layout`'s — are refused for
//! those topics with TOPIC_AUTHORIZATION_FAILED and a message naming the mirror; the other topics
//! of the same request go to the broker and both answers are merged (AddPartitionsToTxn is
//! all-or-nothing in Kafka, so there the others get OPERATION_NOT_ATTEMPTED). DescribeProducers is
//! refused for them too: a mirror topic's producer state holds the engine's own producer id and
//! epoch, the identity its conditional writes rely on (issue #35, L-f); the source cluster shows
//! the mirrored producers. Produce has its own module (`produce`). Which topics are mirror
//! topics is the engine's (`Catalog`).

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeProducersRequest, DescribeProducersResponse, RequestHeader, TopicName,
};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use std::collections::HashMap;

use super::produce::REFUSED_CODE;
use super::text::Shown;

/// Merges the refused part into the broker's response to the rest.
pub(crate) type Merge = Box<dyn FnOnce(Bytes) -> Result<Bytes, ProtocolError> + Send>;

/// What to do with a request.
pub(crate) enum Decision {
    Forward,
    /// Answer with this response (empty: an acks=0 Produce, which gets none); `u64` = topics
    /// (Produce: partitions) refused.
    Refuse(Bytes, u64),
    /// Forward `frame`, then `merge` the broker's response; `u64` = topics refused.
    Split(Bytes, Merge, u64),
}

const OPERATION_NOT_ATTEMPTED: i16 = 55;
const TOPIC_RESOURCE: i8 = 2;

/// Whether `key`/`version` can touch a mirror topic in a way the proxy refuses.
pub(crate) fn is_guarded(key: i16, version: i16) -> bool {
    match ApiKey::try_from(key) {
        Ok(
            ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::DeleteRecords
            | ApiKey::AlterConfigs
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::DescribeProducers,
        ) => true,
        Ok(ApiKey::AddPartitionsToTxn) => version <= 3,
        Ok(k) => super::layout::guards(k),
        _ => false,
    }
}

/// Which topics a guard protects, and the refusal message for each.
pub(crate) trait Protected: Sync {
    /// The refusal message when `topic` is protected.
    fn by_name(&self, topic: &str) -> Option<String>;
    /// `(topic name, message)` when the topic with this id is protected.
    fn by_id(&self, id: &[u8; 16]) -> Option<(String, String)>;
    /// The refusal message when it cannot be told yet whether the topic with this id (not
    /// protected as far as is known) is protected: some protected topic's id is not known yet.
    /// Such a refusal is retriable.
    fn pending_id(&self, _id: &[u8; 16]) -> Option<String> {
        None
    }
    /// Whether any topic is protected at all.
    fn any(&self) -> bool {
        true
    }
}

/// The read-only mirror topics (the engine's registry).
pub(crate) struct MirrorTopicGuard<'a>(pub(crate) &'a kmp_mirror_engine::Catalog);

fn message(topic: &str, mirror: &str) -> String {
    format!(
        "topic {topic} is a read-only mirror topic of cluster mirror {mirror}; stop mirroring it (kafka-mirror-proxy mirrors --stop --mirror {mirror} --topics {topic}) to make it writable"
    )
}

impl Protected for MirrorTopicGuard<'_> {
    fn by_name(&self, topic: &str) -> Option<String> {
        self.0.read_only(topic).map(|m| message(topic, &m))
    }
    fn by_id(&self, id: &[u8; 16]) -> Option<(String, String)> {
        self.0.read_only_id(id).map(|(t, m)| {
            let msg = message(&t, &m);
            (t, msg)
        })
    }
    fn any(&self) -> bool {
        !self.0.is_empty()
    }
    fn pending_id(&self, id: &[u8; 16]) -> Option<String> {
        (self.0.ids_pending() && !self.0.is_read_only_id(id)).then(|| {
            format!(
                "topic id {} may be a read-only mirror topic's: the proxy has not learned every mirror topic's id from the destination yet; retry shortly",
                uuid_text(id)
            )
        })
    }
}

/// A topic id as Kafka prints it (its UUID form).
fn uuid_text(id: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*id).to_string()
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Checks one guarded request frame (prefix included).
pub(crate) fn check(frame: &Bytes, key: i16, version: i16, topics: &dyn Protected) -> Result<Decision, ProtocolError> {
    let ro = |t: &str| topics.by_name(t).map(|m| (t.to_owned(), m));
    match ApiKey::try_from(key) {
        Ok(ApiKey::DeleteTopics) => {
            let by_id = |id: &[u8; 16]| topics.by_id(id);
            split::<DeleteTopicsRequest, DeleteTopicsResponse>(
                frame,
                ApiKey::DeleteTopics,
                version,
                |req| {
                    let mut out = take(&mut req.topic_names, |n| ro(n.0.as_str()));
                    out.extend(take(&mut req.topics, |t| match &t.name {
                        Some(n) => ro(n.0.as_str()),
                        None => {
                            by_id(t.topic_id.as_bytes()).or_else(|| topics.pending_id(t.topic_id.as_bytes()).map(|m| (uuid_text(t.topic_id.as_bytes()), m)))
                        }
                    }));
                    out
                },
                |req| req.topic_names.len() + req.topics.len(),
                |resp, refused| {
                    let mut shown = Shown::default();
                    for (t, msg) in refused {
                        let mut r = kmp_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult::default();
                        r.name = Some(name(t));
                        r.error_code = REFUSED_CODE;
                        r.error_message = shown.text(msg);
                        resp.responses.push(r);
                    }
                },
            )
        }
        Ok(ApiKey::CreatePartitions) => split::<CreatePartitionsRequest, CreatePartitionsResponse>(
            frame,
            ApiKey::CreatePartitions,
            version,
            |req| take(&mut req.topics, |t| ro(t.name.0.as_str())),
            |req| req.topics.len(),
            |resp, refused| {
                let mut shown = Shown::default();
                for (t, msg) in refused {
                    let mut r = kmp_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult::default();
                    r.name = name(t);
                    r.error_code = REFUSED_CODE;
                    r.error_message = shown.text(msg);
                    resp.results.push(r);
                }
            },
        ),
        Ok(ApiKey::DeleteRecords) => {
            let (_, req) = decode_request::<DeleteRecordsRequest>(frame, ApiKey::DeleteRecords, version)?;
            let partitions = partitions_by_topic(req.topics.iter().map(|t| (t.name.0.as_str(), t.partitions.iter().map(|p| p.partition_index))));
            split::<DeleteRecordsRequest, DeleteRecordsResponse>(
                frame,
                ApiKey::DeleteRecords,
                version,
                |req| take(&mut req.topics, |t| ro(t.name.0.as_str())),
                |req| req.topics.len(),
                move |resp, refused| {
                    for (t, _) in refused {
                        let mut r = kmp_protocol::kafka_protocol::messages::delete_records_response::DeleteRecordsTopicResult::default();
                        r.name = name(t);
                        for &p in partitions_of(&partitions, t) {
                            let mut pr = kmp_protocol::kafka_protocol::messages::delete_records_response::DeleteRecordsPartitionResult::default();
                            pr.partition_index = p;
                            pr.low_watermark = -1;
                            pr.error_code = REFUSED_CODE;
                            r.partitions.push(pr);
                        }
                        resp.topics.push(r);
                    }
                },
            )
        }
        Ok(ApiKey::DescribeProducers) => {
            let (_, req) = decode_request::<DescribeProducersRequest>(frame, ApiKey::DescribeProducers, version)?;
            let partitions = partitions_by_topic(req.topics.iter().map(|t| (t.name.0.as_str(), t.partition_indexes.iter().copied())));
            split::<DescribeProducersRequest, DescribeProducersResponse>(
                frame,
                ApiKey::DescribeProducers,
                version,
                |req| take(&mut req.topics, |t| ro(t.name.0.as_str())),
                |req| req.topics.len(),
                move |resp, refused| {
                    let mut shown = Shown::default();
                    for (t, msg) in refused {
                        let mut r = kmp_protocol::kafka_protocol::messages::describe_producers_response::TopicResponse::default();
                        r.name = name(t);
                        for &p in partitions_of(&partitions, t) {
                            let mut pr = kmp_protocol::kafka_protocol::messages::describe_producers_response::PartitionResponse::default();
                            pr.partition_index = p;
                            pr.error_code = REFUSED_CODE;
                            pr.error_message = shown.text(msg);
                            r.partitions.push(pr);
                        }
                        resp.topics.push(r);
                    }
                },
            )
        }
        Ok(ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs) => {
            let pick = |r: &super::configs::Resource<'_>| if r.kind == TOPIC_RESOURCE { topics.by_name(r.name) } else { None };
            super::configs::refuse_any(frame, key, version, REFUSED_CODE, &pick)
        }
        Ok(ApiKey::AddPartitionsToTxn) => add_partitions_to_txn(frame, version, topics),
        Ok(k) if super::layout::guards(k) => super::layout::check(frame, k, version, topics),
        _ => Ok(Decision::Forward),
    }
}

/// Removes the items `hit` refuses and returns, once per distinct name, the name and the
/// (shared) message (see `text`).
pub(crate) fn take<T>(items: &mut Vec<T>, hit: impl Fn(&T) -> Option<(String, String)>) -> Vec<(String, StrBytes)> {
    super::text::take_refused(items, hit)
}

/// Decodes a request, takes the mirror topics out, and decides: forward untouched, refuse it
/// whole, or forward the rest and merge.
pub(crate) fn split<Req, Resp>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    take_mirror: impl FnOnce(&mut Req) -> Vec<(String, StrBytes)>,
    remaining: impl Fn(&Req) -> usize,
    add: impl FnOnce(&mut Resp, &[(String, StrBytes)]) + Send + 'static,
) -> Result<Decision, ProtocolError>
where
    Req: Decodable + Encodable,
    Resp: Decodable + Encodable + Default,
{
    split_by(frame, key, version, take_mirror, remaining, add)
}

/// [`split`] of items named by another key than a topic name (a group, a coordinator key, a
/// quota entity): `take_out` takes them out with their messages, `remaining` counts what is
/// left, `add` puts the refusals in the answer.
pub(crate) fn split_by<Req, Resp, K>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    take_out: impl FnOnce(&mut Req) -> Vec<(K, StrBytes)>,
    remaining: impl Fn(&Req) -> usize,
    add: impl FnOnce(&mut Resp, &[(K, StrBytes)]) + Send + 'static,
) -> Result<Decision, ProtocolError>
where
    Req: Decodable + Encodable,
    Resp: Decodable + Encodable + Default,
    K: Send + 'static,
{
    let (header, mut req): (RequestHeader, Req) = decode_request(frame, key, version)?;
    let refused = take_out(&mut req);
    if refused.is_empty() {
        return Ok(Decision::Forward);
    }
    let n = refused.len() as u64;
    if remaining(&req) == 0 {
        let mut resp = Resp::default();
        add(&mut resp, &refused);
        return Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, n));
    }
    let rest = encode_request(&header, key, &req)?;
    let merge: Merge = Box::new(move |broker: Bytes| {
        let (h, mut resp): (_, Resp) = decode_response(&broker, key, version)?;
        add(&mut resp, &refused);
        encode_response(h.correlation_id, key, version, &resp)
    });
    Ok(Decision::Split(rest, merge, n))
}

/// The partitions a request names, by topic (a topic named twice gets the partitions of both),
/// for the answer to its refused topics.
pub(crate) fn partitions_by_topic<'a, P: IntoIterator<Item = i32>>(topics: impl Iterator<Item = (&'a str, P)>) -> HashMap<String, Vec<i32>> {
    let mut by_topic: HashMap<String, Vec<i32>> = HashMap::new();
    for (t, ps) in topics {
        by_topic.entry(t.to_owned()).or_default().extend(ps);
    }
    by_topic
}

/// The partitions of `topic` in a map of [`partitions_by_topic`] (none when it is not there).
pub(crate) fn partitions_of<'a>(partitions: &'a HashMap<String, Vec<i32>>, topic: &str) -> &'a [i32] {
    partitions.get(topic).map(Vec::as_slice).unwrap_or(&[])
}

/// AddPartitionsToTxn v0-3 is all-or-nothing: any mirror topic refuses the request, the mirror
/// partitions with TOPIC_AUTHORIZATION_FAILED and the others with OPERATION_NOT_ATTEMPTED.
fn add_partitions_to_txn(frame: &Bytes, version: i16, topics: &dyn Protected) -> Result<Decision, ProtocolError> {
    use kmp_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult};
    let (header, req) = decode_request::<AddPartitionsToTxnRequest>(frame, ApiKey::AddPartitionsToTxn, version)?;
    let refused = req.v3_and_below_topics.iter().filter(|t| topics.by_name(t.name.0.as_str()).is_some()).count() as u64;
    if refused == 0 {
        return Ok(Decision::Forward);
    }
    let mut resp = AddPartitionsToTxnResponse::default();
    for t in &req.v3_and_below_topics {
        let code = if topics.by_name(t.name.0.as_str()).is_some() {
            REFUSED_CODE
        } else {
            OPERATION_NOT_ATTEMPTED
        };
        let mut r = AddPartitionsToTxnTopicResult::default();
        r.name = t.name.clone();
        r.results_by_partition = t
            .partitions
            .iter()
            .map(|&p| {
                let mut pr = AddPartitionsToTxnPartitionResult::default();
                pr.partition_index = p;
                pr.partition_error_code = code;
                pr
            })
            .collect();
        resp.results_by_topic_v3_and_below.push(r);
    }
    Ok(Decision::Refuse(
        encode_response(header.correlation_id, ApiKey::AddPartitionsToTxn, version, &resp)?,
        refused,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_mirror_engine::Catalog;
    use kmp_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;

    fn registry() -> Catalog {
        let r = Catalog::default();
        r.register("mirrored", "dr", [0; 16]);
        r
    }

    fn create_partitions(topics: &[&str]) -> Bytes {
        let mut req = CreatePartitionsRequest::default();
        for t in topics {
            let mut c = CreatePartitionsTopic::default();
            c.name = name(t);
            c.count = 4;
            req.topics.push(c);
        }
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::CreatePartitions as i16;
        h.request_api_version = 3;
        h.correlation_id = 5;
        encode_request(&h, ApiKey::CreatePartitions, &req).unwrap()
    }

    #[test]
    fn create_partitions_for_a_mirror_topic_is_refused_and_other_topics_are_forwarded_and_merged() {
        let key = ApiKey::CreatePartitions as i16;
        assert!(matches!(
            check(&create_partitions(&["plain"]), key, 3, &MirrorTopicGuard(&registry())).unwrap(),
            Decision::Forward
        ));
        let Decision::Refuse(frame, 1) = check(&create_partitions(&["mirrored"]), key, 3, &MirrorTopicGuard(&registry())).unwrap() else {
            panic!("refused")
        };
        let (_, resp) = decode_response::<CreatePartitionsResponse>(&frame, ApiKey::CreatePartitions, 3).unwrap();
        assert_eq!(resp.results[0].error_code, REFUSED_CODE);
        assert!(resp.results[0].error_message.as_ref().is_some_and(|m| m.contains("cluster mirror dr")));
        let Decision::Split(rest, merge, 1) = check(&create_partitions(&["plain", "mirrored"]), key, 3, &MirrorTopicGuard(&registry())).unwrap() else {
            panic!("split")
        };
        let (_, fwd) = decode_request::<CreatePartitionsRequest>(&rest, ApiKey::CreatePartitions, 3).unwrap();
        assert_eq!(fwd.topics.len(), 1);
        let mut broker = CreatePartitionsResponse::default();
        let mut ok = kmp_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult::default();
        ok.name = name("plain");
        broker.results.push(ok);
        let merged = merge(encode_response(5, ApiKey::CreatePartitions, 3, &broker).unwrap()).unwrap();
        let (_, resp) = decode_response::<CreatePartitionsResponse>(&merged, ApiKey::CreatePartitions, 3).unwrap();
        let got: Vec<_> = resp.results.iter().map(|r| (r.name.0.as_str().to_owned(), r.error_code)).collect();
        assert_eq!(got, vec![("plain".to_owned(), 0), ("mirrored".to_owned(), REFUSED_CODE)]);
    }

    #[test]
    fn delete_topics_by_an_id_not_known_yet_is_refused_while_a_mirror_topics_id_is_unknown() {
        use kmp_protocol::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
        let mut req = DeleteTopicsRequest::default();
        let mut t = DeleteTopicState::default();
        t.topic_id = uuid::Uuid::from_bytes([7; 16]);
        req.topics.push(t);
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::DeleteTopics as i16;
        h.request_api_version = 6;
        let frame = encode_request(&h, ApiKey::DeleteTopics, &req).unwrap();
        let r = registry();
        let key = ApiKey::DeleteTopics as i16;
        assert!(
            matches!(check(&frame, key, 6, &MirrorTopicGuard(&r)).unwrap(), Decision::Refuse(_, 1)),
            "id unknown: refused"
        );
        r.learn_topic_id("mirrored", [7; 16]);
        assert!(
            matches!(check(&frame, key, 6, &MirrorTopicGuard(&r)).unwrap(), Decision::Refuse(_, 1)),
            "the mirror topic's id"
        );
        let other = {
            let mut req = DeleteTopicsRequest::default();
            let mut t = DeleteTopicState::default();
            t.topic_id = uuid::Uuid::from_bytes([8; 16]);
            req.topics.push(t);
            encode_request(&h, ApiKey::DeleteTopics, &req).unwrap()
        };
        assert!(
            matches!(check(&other, key, 6, &MirrorTopicGuard(&r)).unwrap(), Decision::Forward),
            "other topics pass"
        );
    }
}
