//! Share-group APIs (KIP-932), every version.

use kafka_protocol::messages::alter_share_group_offsets_request::{AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic};
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition, DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::share_acknowledge_request::{AcknowledgePartition, AcknowledgeTopic};
use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::share_fetch_response::{AcquiredRecords, PartitionData, ShareFetchableTopicResponse};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse, share_acknowledge_request, share_fetch_request,
};

use super::*;

fn group() -> GroupId {
    GroupId(StrBytes::from_static_str("share-readers"))
}

#[test]
fn share_fetch_request_acknowledgement_ranges_move_down_and_clamp_at_zero() {
    check_request::<ShareFetchRequest>(
        ApiKey::ShareFetch,
        |_| {
            let mut r = ShareFetchRequest::default()
                .with_group_id(Some(group()))
                .with_member_id(Some(StrBytes::from_static_str("m")))
                .with_share_session_epoch(1)
                .with_max_records(500)
                .with_batch_size(100);
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        let batches = (0..2)
                            .map(|n| {
                                share_fetch_request::AcknowledgementBatch::default()
                                    .with_first_offset(client(t, p, 2 * n))
                                    .with_last_offset(client(t, p, 2 * n + 1))
                                    .with_acknowledge_types(vec![1])
                            })
                            .collect();
                        FetchPartition::default().with_partition_index(p).with_acknowledgement_batches(batches)
                    })
                    .collect();
                r.topics.push(FetchTopic::default().with_topic_id(t.id()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of("", &t.topic_id);
                for p in &mut t.partitions {
                    for (n, b) in p.acknowledgement_batches.iter_mut().enumerate() {
                        let n = n as i64;
                        b.first_offset = sent(topic, p.partition_index, 2 * n, 0);
                        b.last_offset = sent(topic, p.partition_index, 2 * n + 1, 0);
                    }
                }
            }
        },
    );
}

#[test]
fn share_acknowledge_request_acknowledgement_ranges_move_down_and_clamp_at_zero() {
    check_request::<ShareAcknowledgeRequest>(
        ApiKey::ShareAcknowledge,
        |_| {
            let mut r = ShareAcknowledgeRequest::default()
                .with_group_id(Some(group()))
                .with_member_id(Some(StrBytes::from_static_str("m")))
                .with_share_session_epoch(2);
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        let batch = share_acknowledge_request::AcknowledgementBatch::default()
                            .with_first_offset(client(t, p, 0))
                            .with_last_offset(client(t, p, 1))
                            .with_acknowledge_types(vec![1, 2]);
                        AcknowledgePartition::default()
                            .with_partition_index(p)
                            .with_acknowledgement_batches(vec![batch])
                    })
                    .collect();
                r.topics.push(AcknowledgeTopic::default().with_topic_id(t.id()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of("", &t.topic_id);
                for p in &mut t.partitions {
                    for b in &mut p.acknowledgement_batches {
                        b.first_offset = sent(topic, p.partition_index, 0, 0);
                        b.last_offset = sent(topic, p.partition_index, 1, 0);
                    }
                }
            }
        },
    );
}

#[test]
fn alter_share_group_offsets_request_start_offsets_move_down_and_below_the_start_become_zero() {
    check_request::<AlterShareGroupOffsetsRequest>(
        ApiKey::AlterShareGroupOffsets,
        |_| {
            let mut r = AlterShareGroupOffsetsRequest::default().with_group_id(group());
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(p)
                            .with_start_offset(client(t, p, 0))
                    })
                    .collect();
                r.topics.push(
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(t.topic_name())
                        .with_partitions(partitions),
                );
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.topic_name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.start_offset = sent(topic, p.partition_index, 0, 0);
                }
            }
        },
    );
}

#[test]
fn share_fetch_response_acquired_ranges_and_batch_base_offsets_move_up() {
    check_response::<ShareFetchResponse>(
        ApiKey::ShareFetch,
        |_| {
            let mut r = ShareFetchResponse::default().with_acquisition_lock_timeout_ms(30_000);
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        let acquired = AcquiredRecords::default()
                            .with_first_offset(dest(t, p, 0))
                            .with_last_offset(dest(t, p, 1))
                            .with_delivery_count(1);
                        let real = dest(t, p, 0) >= 0 && dest(t, p, 0) < 1 << 40;
                        PartitionData::default()
                            .with_partition_index(p)
                            .with_acquired_records(vec![acquired])
                            .with_records(real.then(|| blob(dest(t, p, 0))))
                    })
                    .collect();
                r.responses
                    .push(ShareFetchableTopicResponse::default().with_topic_id(t.id()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.responses {
                let topic = Topic::of("", &t.topic_id);
                for p in &mut t.partitions {
                    let i = p.partition_index;
                    for a in &mut p.acquired_records {
                        a.first_offset = shown(topic, i, 0);
                        a.last_offset = shown(topic, i, 1);
                    }
                    if p.records.is_some() {
                        p.records = Some(blob(shown(topic, i, 0)));
                    }
                }
            }
        },
    );
}

#[test]
fn describe_share_group_offsets_response_start_offsets_move_up() {
    check_response::<DescribeShareGroupOffsetsResponse>(
        ApiKey::DescribeShareGroupOffsets,
        |_| {
            let mut g = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(group());
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        DescribeShareGroupOffsetsResponsePartition::default()
                            .with_partition_index(p)
                            .with_start_offset(dest(t, p, 0))
                            .with_leader_epoch(3)
                    })
                    .collect();
                g.topics.push(
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_name(t.topic_name())
                        .with_topic_id(t.id())
                        .with_partitions(partitions),
                );
            }
            DescribeShareGroupOffsetsResponse::default().with_groups(vec![g])
        },
        |r, _| {
            for g in &mut r.groups {
                for t in &mut g.topics {
                    let topic = Topic::of(&t.topic_name, &t.topic_id);
                    for p in &mut t.partitions {
                        p.start_offset = shown(topic, p.partition_index, 0);
                    }
                }
            }
        },
    );
}

#[test]
fn share_acknowledge_responses_carry_no_offsets_and_are_never_translated() {
    assert!(!response_may_shift(ApiKey::ShareAcknowledge as i16));
    let frame = response_frame(ApiKey::ShareAcknowledge, 1, &ShareAcknowledgeResponse::default());
    assert!(
        shift_response(&frame, ApiKey::ShareAcknowledge as i16, 1, &Catalog)
            .expect("not looked at")
            .is_none()
    );
}
