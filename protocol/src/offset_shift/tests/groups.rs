//! OffsetCommit (v2-9; v10 is `commit_v10`'s), TxnOffsetCommit and OffsetFetch, every version.

use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic};
use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchResponse, ProducerId, TransactionalId, TxnOffsetCommitRequest};
use proptest::prelude::*;

use super::*;

fn group() -> GroupId {
    GroupId(StrBytes::from_static_str("readers"))
}

fn offset_commit(offset: impl Fn(Topic, i32) -> i64) -> OffsetCommitRequest {
    let mut r = OffsetCommitRequest::default()
        .with_group_id(group())
        .with_generation_id_or_member_epoch(3)
        .with_member_id(StrBytes::from_static_str("member-1"));
    for t in TOPICS {
        let partitions = t
            .partitions()
            .iter()
            .map(|&p| {
                OffsetCommitRequestPartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(offset(t, p))
                    .with_committed_leader_epoch(2)
                    .with_committed_metadata(Some(StrBytes::from_static_str("meta")))
            })
            .collect();
        r.topics
            .push(OffsetCommitRequestTopic::default().with_name(t.topic_name()).with_partitions(partitions));
    }
    r
}

#[test]
fn offset_commit_request_offsets_move_down_and_below_the_start_commit_zero_in_every_decodable_version() {
    check_request::<OffsetCommitRequest>(
        ApiKey::OffsetCommit,
        |_| offset_commit(|t, p| client(t, p, 0)),
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.committed_offset = sent(topic, p.partition_index, 0, 0);
                }
            }
        },
    );
}

#[test]
fn txn_offset_commit_request_offsets_move_down_and_below_the_start_commit_zero_in_every_version() {
    check_request::<TxnOffsetCommitRequest>(
        ApiKey::TxnOffsetCommit,
        |_| {
            let mut r = TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
                .with_group_id(group())
                .with_producer_id(ProducerId(5));
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(client(t, p, 0))
                            .with_committed_leader_epoch(2)
                    })
                    .collect();
                r.topics
                    .push(TxnOffsetCommitRequestTopic::default().with_name(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.committed_offset = sent(topic, p.partition_index, 0, 0);
                }
            }
        },
    );
}

fn offset_fetch_response(v: i16, offset: impl Fn(Topic, i32) -> i64) -> OffsetFetchResponse {
    let mut r = OffsetFetchResponse::default();
    if v < 8 {
        for t in TOPICS {
            let partitions = t
                .partitions()
                .iter()
                .map(|&p| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset(t, p))
                        .with_metadata(Some(StrBytes::from_static_str("m")))
                })
                .collect();
            r.topics
                .push(OffsetFetchResponseTopic::default().with_name(t.topic_name()).with_partitions(partitions));
        }
        return r;
    }
    // Two groups, so the per-group form is walked past its first entry.
    for g in ["readers", "others"] {
        let mut group = OffsetFetchResponseGroup::default().with_group_id(GroupId(StrBytes::from_static_str(g)));
        for t in TOPICS {
            let partitions = t
                .partitions()
                .iter()
                .map(|&p| {
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset(t, p))
                        .with_committed_leader_epoch(1)
                })
                .collect();
            let topic = if v >= 10 {
                OffsetFetchResponseTopics::default().with_topic_id(t.id())
            } else {
                OffsetFetchResponseTopics::default().with_name(t.topic_name())
            };
            group.topics.push(topic.with_partitions(partitions));
        }
        r.groups.push(group);
    }
    r
}

#[test]
fn offset_fetch_response_committed_offsets_move_up_in_the_topics_and_groups_forms_in_every_version() {
    check_response::<OffsetFetchResponse>(
        ApiKey::OffsetFetch,
        |v| offset_fetch_response(v, |t, p| dest(t, p, 0)),
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.committed_offset = shown(topic, p.partition_index, 0);
                }
            }
            for g in &mut r.groups {
                for t in &mut g.topics {
                    let topic = Topic::of(&t.name, &t.topic_id);
                    for p in &mut t.partitions {
                        p.committed_offset = shown(topic, p.partition_index, 0);
                    }
                }
            }
        },
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// What a consumer commits from the start on, it reads back unchanged.
    #[test]
    fn a_committed_offset_from_the_start_on_is_fetched_back_unchanged(above in 0i64..i64::MAX - DELTA, commit_v in 2i16..=9, fetch_v in 1i16..=10) {
        let s = DELTA + above;
        let frame = request_frame(ApiKey::OffsetCommit, commit_v, &offset_commit(|_, _| s));
        let out = shift_request(&frame, ApiKey::OffsetCommit as i16, commit_v, &Catalog).expect("translates").expect("moves");
        let (_, stored) = decode_request::<OffsetCommitRequest>(&out, ApiKey::OffsetCommit, commit_v).expect("decodes");
        let d = stored.topics[0].partitions[0].committed_offset;
        prop_assert_eq!(d, above);

        let frame = response_frame(ApiKey::OffsetFetch, fetch_v, &offset_fetch_response(fetch_v, |_, _| d));
        let out = shift_response(&frame, ApiKey::OffsetFetch as i16, fetch_v, &Catalog).expect("translates").expect("moves");
        let (_, got) = decode_response::<OffsetFetchResponse>(&out, ApiKey::OffsetFetch, fetch_v).expect("decodes");
        let back = if fetch_v < 8 { got.topics[0].partitions[0].committed_offset } else { got.groups[0].topics[0].partitions[0].committed_offset };
        prop_assert_eq!(back, s);
    }
}
