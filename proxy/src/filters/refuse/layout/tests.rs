//! CreateTopics, reassignments, log-directory moves and unclean elections of protected topics.

use kmp_mirror_engine::Catalog;
use kmp_protocol::codec::{decode_request, decode_response, encode_request};
use kmp_protocol::kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kmp_protocol::kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
use kmp_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use kmp_protocol::kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kmp_protocol::kafka_protocol::messages::{BrokerId, RequestHeader};

use super::super::mirror::MirrorTopicGuard;
use super::*;

fn registry() -> Catalog {
    let r = Catalog::default();
    r.register("mirrored", "dr", [7; 16]);
    r
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn frame<R: kmp_protocol::kafka_protocol::protocol::Encodable + kmp_protocol::kafka_protocol::protocol::Message>(key: ApiKey, version: i16, req: &R) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.correlation_id = 9;
    encode_request(&h, key, req).unwrap()
}

fn decide(frame: &Bytes, key: ApiKey, version: i16) -> Decision {
    let r = registry();
    assert!(guards(key), "{key:?} is guarded");
    check(frame, key, version, &MirrorTopicGuard(&r)).unwrap()
}

#[test]
fn creating_a_topic_under_a_mirror_topics_name_is_refused_and_other_topics_are_created() {
    let req = |names: &[&str]| {
        let mut r = CreateTopicsRequest::default();
        for n in names {
            let mut t = CreatableTopic::default();
            t.name = name(n);
            t.num_partitions = 1;
            t.replication_factor = 1;
            r.topics.push(t);
        }
        r
    };
    let key = ApiKey::CreateTopics;
    assert!(matches!(decide(&frame(key, 7, &req(&["plain"])), key, 7), Decision::Forward));
    let Decision::Refuse(answer, 1) = decide(&frame(key, 7, &req(&["mirrored"])), key, 7) else {
        panic!("a mirror topic's name is refused")
    };
    let (_, resp) = decode_response::<CreateTopicsResponse>(&answer, key, 7).unwrap();
    assert_eq!((resp.topics[0].name.0.as_str(), resp.topics[0].error_code), ("mirrored", REFUSED_CODE));
    let Decision::Split(rest, _, 1) = decide(&frame(key, 7, &req(&["plain", "mirrored"])), key, 7) else {
        panic!("split")
    };
    let (_, fwd) = decode_request::<CreateTopicsRequest>(&rest, key, 7).unwrap();
    assert_eq!(fwd.topics.iter().map(|t| t.name.0.as_str()).collect::<Vec<_>>(), vec!["plain"]);
}

#[test]
fn reassigning_a_mirror_topics_replicas_is_refused_for_every_partition_named() {
    let mut req = AlterPartitionReassignmentsRequest::default();
    for (n, ps) in [("mirrored", vec![0, 1]), ("plain", vec![0])] {
        let mut t = ReassignableTopic::default();
        t.name = name(n);
        for p in ps {
            let mut rp = ReassignablePartition::default();
            rp.partition_index = p;
            rp.replicas = Some(vec![BrokerId(2)]);
            t.partitions.push(rp);
        }
        req.topics.push(t);
    }
    let key = ApiKey::AlterPartitionReassignments;
    let Decision::Split(rest, merge, 1) = decide(&frame(key, 0, &req), key, 0) else {
        panic!("split")
    };
    let (_, fwd) = decode_request::<AlterPartitionReassignmentsRequest>(&rest, key, 0).unwrap();
    assert_eq!(fwd.topics.len(), 1, "only the plain topic is forwarded");
    let merged = merge(encode_response(9, key, 0, &AlterPartitionReassignmentsResponse::default()).unwrap()).unwrap();
    let (_, resp) = decode_response::<AlterPartitionReassignmentsResponse>(&merged, key, 0).unwrap();
    let refused: Vec<(i32, i16)> = resp.responses[0].partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
    assert_eq!(refused, vec![(0, REFUSED_CODE), (1, REFUSED_CODE)]);
}

#[test]
fn moving_a_mirror_topics_log_directory_is_refused() {
    let mut req = AlterReplicaLogDirsRequest::default();
    let mut d = AlterReplicaLogDir::default();
    d.path = StrBytes::from_static_str("/data/2");
    let mut t = AlterReplicaLogDirTopic::default();
    t.name = name("mirrored");
    t.partitions = vec![3];
    d.topics.push(t);
    req.dirs.push(d);
    let key = ApiKey::AlterReplicaLogDirs;
    let Decision::Refuse(answer, 1) = decide(&frame(key, 2, &req), key, 2) else {
        panic!("refused")
    };
    let (_, resp) = decode_response::<AlterReplicaLogDirsResponse>(&answer, key, 2).unwrap();
    assert_eq!(resp.results[0].partitions[0].partition_index, 3);
    assert_eq!(resp.results[0].partitions[0].error_code, REFUSED_CODE);
}

#[test]
fn unclean_elections_of_mirror_topics_are_refused_and_preferred_ones_pass() {
    let key = ApiKey::ElectLeaders;
    let req = |election_type: i8, topics: Option<&[&str]>| {
        let mut r = ElectLeadersRequest::default();
        r.election_type = election_type;
        r.topic_partitions = topics.map(|ts| {
            ts.iter()
                .map(|n| {
                    let mut t = TopicPartitions::default();
                    t.topic = name(n);
                    t.partitions = vec![0];
                    t
                })
                .collect()
        });
        r
    };
    assert!(
        matches!(decide(&frame(key, 2, &req(0, Some(&["mirrored"]))), key, 2), Decision::Forward),
        "preferred"
    );
    assert!(
        matches!(decide(&frame(key, 2, &req(1, Some(&["plain"]))), key, 2), Decision::Forward),
        "not a mirror topic"
    );
    let Decision::Refuse(answer, 1) = decide(&frame(key, 2, &req(1, Some(&["mirrored"]))), key, 2) else {
        panic!("unclean election of a mirror topic")
    };
    let (_, resp) = decode_response::<ElectLeadersResponse>(&answer, key, 2).unwrap();
    assert_eq!(resp.replica_election_results[0].partition_result[0].error_code, REFUSED_CODE);
    let Decision::Refuse(answer, 1) = decide(&frame(key, 2, &req(1, None)), key, 2) else {
        panic!("an unclean election of every partition")
    };
    let (_, resp) = decode_response::<ElectLeadersResponse>(&answer, key, 2).unwrap();
    assert_eq!(resp.error_code, REFUSED_CODE);
}
