//! Requests that would recreate a protected topic or change where and how its data lives —
//! CreateTopics (a protected name: the engine owns it), AlterPartitionReassignments (its
//! replicas), AlterReplicaLogDirs (its log directories) and unclean ElectLeaders (a leader that
//! may lack acknowledged records, truncating what was mirrored) — are refused for protected
//! topics (read-only mirror topics, the state topic) with TOPIC_AUTHORIZATION_FAILED; the other
//! topics of the same request go to the broker and both answers are merged. An unclean election
//! of every partition (no topics named) is refused whole while any topic is protected. Operators
//! who must move a mirror topic's replicas do so on the destination cluster directly.
//! Which topics are protected is the caller's (`topics::Protected`); the other guarded requests
//! are `topics`'.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ApiKey,
    CreateTopicsRequest, CreateTopicsResponse, ElectLeadersRequest, ElectLeadersResponse, TopicName,
};
use kmp_protocol::kafka_protocol::messages::{alter_partition_reassignments_response as reassign, alter_replica_log_dirs_response as log_dirs};
use kmp_protocol::kafka_protocol::messages::{create_topics_response as create, elect_leaders_response as elect};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use super::text::Shown;
use super::{Decision, Protected, REFUSED_CODE, partitions_by_topic, partitions_of, split, take};

/// ElectLeaders' election type of an unclean election (0: preferred replica).
const UNCLEAN: i8 = 1;

/// Whether `key` is one this module guards.
pub(crate) fn guards(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::CreateTopics | ApiKey::AlterPartitionReassignments | ApiKey::AlterReplicaLogDirs | ApiKey::ElectLeaders
    )
}

/// Checks one request frame (prefix included) of a key [`guards`] accepts.
pub(crate) fn check(frame: &Bytes, key: ApiKey, version: i16, topics: &dyn Protected) -> Result<Decision, ProtocolError> {
    let ro = |t: &TopicName| topics.by_name(t.0.as_str()).map(|m| (t.0.as_str().to_owned(), m));
    match key {
        ApiKey::CreateTopics => split::<CreateTopicsRequest, CreateTopicsResponse>(
            frame,
            key,
            version,
            |req| take(&mut req.topics, |t| ro(&t.name)),
            |req| req.topics.len(),
            |resp, refused| {
                let mut shown = Shown::default();
                for (t, msg) in refused {
                    let mut r = create::CreatableTopicResult::default();
                    r.name = TopicName(StrBytes::from_string(t.clone()));
                    r.error_code = REFUSED_CODE;
                    r.error_message = shown.text(msg);
                    r.num_partitions = -1;
                    r.replication_factor = -1;
                    resp.topics.push(r);
                }
            },
        ),
        ApiKey::AlterPartitionReassignments => {
            let (_, req) = decode_request::<AlterPartitionReassignmentsRequest>(frame, key, version)?;
            let partitions = partitions_by_topic(req.topics.iter().map(|t| (t.name.0.as_str(), t.partitions.iter().map(|p| p.partition_index))));
            split::<AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse>(
                frame,
                key,
                version,
                |req| take(&mut req.topics, |t| ro(&t.name)),
                |req| req.topics.len(),
                move |resp, refused| {
                    let mut shown = Shown::default();
                    for (t, msg) in refused {
                        let mut r = reassign::ReassignableTopicResponse::default();
                        r.name = TopicName(StrBytes::from_string(t.clone()));
                        for &p in partitions_of(&partitions, t) {
                            let mut pr = reassign::ReassignablePartitionResponse::default();
                            pr.partition_index = p;
                            pr.error_code = REFUSED_CODE;
                            pr.error_message = shown.text(msg);
                            r.partitions.push(pr);
                        }
                        resp.responses.push(r);
                    }
                },
            )
        }
        ApiKey::AlterReplicaLogDirs => {
            let (_, req) = decode_request::<AlterReplicaLogDirsRequest>(frame, key, version)?;
            let partitions = partitions_by_topic(
                req.dirs
                    .iter()
                    .flat_map(|d| d.topics.iter())
                    .map(|t| (t.name.0.as_str(), t.partitions.iter().copied())),
            );
            split::<AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse>(
                frame,
                key,
                version,
                |req| req.dirs.iter_mut().flat_map(|d| take(&mut d.topics, |t| ro(&t.name))).collect(),
                |req| req.dirs.iter().map(|d| d.topics.len()).sum(),
                move |resp, refused| {
                    for (t, _) in refused {
                        let mut r = log_dirs::AlterReplicaLogDirTopicResult::default();
                        r.topic_name = TopicName(StrBytes::from_string(t.clone()));
                        for &p in partitions_of(&partitions, t) {
                            let mut pr = log_dirs::AlterReplicaLogDirPartitionResult::default();
                            pr.partition_index = p;
                            pr.error_code = REFUSED_CODE;
                            r.partitions.push(pr);
                        }
                        resp.results.push(r);
                    }
                },
            )
        }
        ApiKey::ElectLeaders => elect_leaders(frame, version, topics),
        _ => Ok(Decision::Forward),
    }
}

/// Preferred-replica elections move no data and pass; unclean ones are refused for protected
/// topics, and whole when they name no topics (every partition) while any topic is protected.
fn elect_leaders(frame: &Bytes, version: i16, topics: &dyn Protected) -> Result<Decision, ProtocolError> {
    let key = ApiKey::ElectLeaders;
    let (header, req) = decode_request::<ElectLeadersRequest>(frame, key, version)?;
    if version == 0 || req.election_type != UNCLEAN {
        return Ok(Decision::Forward);
    }
    let Some(named) = &req.topic_partitions else {
        if !topics.any() {
            return Ok(Decision::Forward);
        }
        let mut resp = ElectLeadersResponse::default();
        resp.error_code = REFUSED_CODE;
        return Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, 1));
    };
    let partitions = partitions_by_topic(named.iter().map(|t| (t.topic.0.as_str(), t.partitions.iter().copied())));
    split::<ElectLeadersRequest, ElectLeadersResponse>(
        frame,
        key,
        version,
        |req| match &mut req.topic_partitions {
            Some(ts) => take(ts, |t| topics.by_name(t.topic.0.as_str()).map(|m| (t.topic.0.as_str().to_owned(), m))),
            None => Vec::new(),
        },
        |req| req.topic_partitions.as_ref().map_or(0, Vec::len),
        move |resp, refused| {
            let mut shown = Shown::default();
            for (t, msg) in refused {
                let mut r = elect::ReplicaElectionResult::default();
                r.topic = TopicName(StrBytes::from_string(t.clone()));
                for &p in partitions_of(&partitions, t) {
                    let mut pr = elect::PartitionResult::default();
                    pr.partition_id = p;
                    pr.error_code = REFUSED_CODE;
                    pr.error_message = shown.text(msg);
                    r.partition_result.push(pr);
                }
                resp.replica_election_results.push(r);
            }
        },
    )
}

#[cfg(test)]
mod tests;
