//! ListOffsets, OffsetForLeaderEpoch, DeleteRecords, Produce and DescribeProducers, every version.

use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeProducersResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse, ProduceResponse, ProducerId,
};

use super::*;

#[test]
fn list_offsets_response_offset_moves_up_and_the_timestamp_stays_in_every_version() {
    check_response::<ListOffsetsResponse>(
        ApiKey::ListOffsets,
        |v| {
            let mut r = ListOffsetsResponse::default();
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p)
                            .with_timestamp(dest(t, p, 1))
                            .with_offset(dest(t, p, 0))
                            .with_leader_epoch(if v >= 4 { 5 } else { -1 })
                    })
                    .collect();
                r.topics
                    .push(ListOffsetsTopicResponse::default().with_name(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.offset = shown(topic, p.partition_index, 0);
                }
            }
        },
    );
}

#[test]
fn offset_for_leader_epoch_response_end_offset_moves_up_in_every_version() {
    check_response::<OffsetForLeaderEpochResponse>(
        ApiKey::OffsetForLeaderEpoch,
        |_| {
            let mut r = OffsetForLeaderEpochResponse::default();
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| EpochEndOffset::default().with_partition(p).with_leader_epoch(6).with_end_offset(dest(t, p, 0)))
                    .collect();
                r.topics
                    .push(OffsetForLeaderTopicResult::default().with_topic(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.topic, &Uuid::nil());
                for p in &mut t.partitions {
                    p.end_offset = shown(topic, p.partition, 0);
                }
            }
        },
    );
}

#[test]
fn delete_records_request_offset_moves_down_keeps_minus_one_and_below_the_start_deletes_nothing_in_every_version() {
    check_request::<DeleteRecordsRequest>(
        ApiKey::DeleteRecords,
        |_| {
            let mut r = DeleteRecordsRequest::default().with_timeout_ms(30_000);
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| DeleteRecordsPartition::default().with_partition_index(p).with_offset(client(t, p, 0)))
                    .collect();
                r.topics
                    .push(DeleteRecordsTopic::default().with_name(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.offset = sent(topic, p.partition_index, 0, 0);
                }
            }
        },
    );
}

#[test]
fn delete_records_response_low_watermark_moves_up_in_every_version() {
    check_response::<DeleteRecordsResponse>(
        ApiKey::DeleteRecords,
        |_| {
            let mut r = DeleteRecordsResponse::default();
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(p)
                            .with_low_watermark(dest(t, p, 0))
                    })
                    .collect();
                r.topics
                    .push(DeleteRecordsTopicResult::default().with_name(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    p.low_watermark = shown(topic, p.partition_index, 0);
                }
            }
        },
    );
}

#[test]
fn produce_response_base_and_log_start_offsets_move_up_by_name_and_by_id_in_every_version() {
    check_response::<ProduceResponse>(
        ApiKey::Produce,
        |v| {
            let mut r = ProduceResponse::default();
            for t in TOPICS {
                let topic = if v >= 13 {
                    TopicProduceResponse::default().with_topic_id(t.id())
                } else {
                    TopicProduceResponse::default().with_name(t.topic_name())
                };
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        PartitionProduceResponse::default()
                            .with_index(p)
                            .with_base_offset(dest(t, p, 0))
                            .with_log_append_time_ms(dest(t, p, 1))
                            .with_log_start_offset(dest(t, p, 2))
                    })
                    .collect();
                r.responses.push(topic.with_partition_responses(partitions));
            }
            r
        },
        |r, v| {
            for t in &mut r.responses {
                let topic = Topic::of(&t.name, &t.topic_id);
                for p in &mut t.partition_responses {
                    p.base_offset = shown(topic, p.index, 0);
                    if v >= 5 {
                        p.log_start_offset = shown(topic, p.index, 2);
                    }
                }
            }
        },
    );
}

#[test]
fn describe_producers_response_transaction_start_offsets_move_up() {
    check_response::<DescribeProducersResponse>(
        ApiKey::DescribeProducers,
        |_| {
            let mut r = DescribeProducersResponse::default();
            for t in TOPICS {
                let partitions = t
                    .partitions()
                    .iter()
                    .map(|&p| {
                        let producers = (0..2)
                            .map(|n| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(100 + n))
                                    .with_last_timestamp(dest(t, p, 1))
                                    .with_current_txn_start_offset(dest(t, p, n))
                            })
                            .collect();
                        PartitionResponse::default().with_partition_index(p).with_active_producers(producers)
                    })
                    .collect();
                r.topics.push(TopicResponse::default().with_name(t.topic_name()).with_partitions(partitions));
            }
            r
        },
        |r, _| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.name, &Uuid::nil());
                for p in &mut t.partitions {
                    for (n, producer) in p.active_producers.iter_mut().enumerate() {
                        producer.current_txn_start_offset = shown(topic, p.partition_index, n as i64);
                    }
                }
            }
        },
    );
}
