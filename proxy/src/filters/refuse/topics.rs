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
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeProducersRequest, DescribeProducersResponse, TopicName,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use super::mirror::uuid_text;
use super::text::Shown;
use super::{Decision, Protected, REFUSED_CODE, partitions_by_topic, partitions_of, split, take};
use super::{configs, layout};

const OPERATION_NOT_ATTEMPTED: i16 = ResponseError::OperationNotAttempted.code();
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
        Ok(k) => layout::guards(k),
        _ => false,
    }
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
            let pick = |r: &configs::Resource<'_>| if r.kind == TOPIC_RESOURCE { topics.by_name(r.name) } else { None };
            configs::refuse_any(frame, key, version, REFUSED_CODE, &pick)
        }
        Ok(ApiKey::AddPartitionsToTxn) => add_partitions_to_txn(frame, version, topics),
        Ok(k) if layout::guards(k) => layout::check(frame, k, version, topics),
        _ => Ok(Decision::Forward),
    }
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
    use super::super::mirror::MirrorTopicGuard;
    use super::*;
    use kmp_mirror_engine::Catalog;
    use kmp_protocol::codec::{decode_response, encode_request};
    use kmp_protocol::kafka_protocol::messages::RequestHeader;
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
    fn the_layout_requests_are_guarded_here_and_checked_by_layout() {
        use kmp_protocol::kafka_protocol::messages::CreateTopicsRequest;
        use kmp_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
        for key in [
            ApiKey::CreateTopics,
            ApiKey::AlterPartitionReassignments,
            ApiKey::AlterReplicaLogDirs,
            ApiKey::ElectLeaders,
        ] {
            assert!(is_guarded(key as i16, 2), "{key:?}");
        }
        let mut req = CreateTopicsRequest::default();
        let mut t = CreatableTopic::default();
        t.name = name("mirrored");
        req.topics.push(t);
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::CreateTopics as i16;
        h.request_api_version = 5;
        let frame = encode_request(&h, ApiKey::CreateTopics, &req).unwrap();
        let key = ApiKey::CreateTopics as i16;
        assert!(matches!(check(&frame, key, 5, &MirrorTopicGuard(&registry())).unwrap(), Decision::Refuse(_, 1)));
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
