//! The APIs that report or move a partition's offsets outside Fetch and the groups: ListOffsets,
//! OffsetForLeaderEpoch, DeleteRecords, Produce and DescribeProducers.

use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeProducersResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse, ProduceResponse,
};

use super::TopicKey;
use super::edit::{BelowStart, Edit};

/// First Produce version naming topics by id instead of by name.
const PRODUCE_TOPIC_IDS_FROM: i16 = 13;
/// First Produce version with a partition's `log_start_offset`.
const PRODUCE_LOG_START_FROM: i16 = 5;

/// ListOffsets response: the `offset` found (−1 when there is none stays).
pub(super) fn list_offsets_response(r: &mut ListOffsetsResponse, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.up(&mut p.offset, delta);
        }
    }
}

/// OffsetForLeaderEpoch response: the epoch's `end_offset`.
pub(super) fn offset_for_leader_epoch_response(r: &mut OffsetForLeaderEpochResponse, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.topic.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition);
            e.up(&mut p.end_offset, delta);
        }
    }
}

/// DeleteRecords request: the `offset` to delete before (−1, "up to the high watermark", stays;
/// below the start → 0, which deletes nothing).
pub(super) fn delete_records_request(r: &mut DeleteRecordsRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.down(&mut p.offset, delta, BelowStart::Zero);
        }
    }
}

/// DeleteRecords response: the partition's new `low_watermark`.
pub(super) fn delete_records_response(r: &mut DeleteRecordsResponse, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.up(&mut p.low_watermark, delta);
        }
    }
}

/// Produce response: the appended batch's `base_offset` and the partition's `log_start_offset`.
pub(super) fn produce_response(r: &mut ProduceResponse, version: i16, e: &mut Edit<'_>) {
    for t in &mut r.responses {
        let topic = if version >= PRODUCE_TOPIC_IDS_FROM {
            TopicKey::Id(*t.topic_id.as_bytes())
        } else {
            TopicKey::Name(t.name.0.as_str())
        };
        for p in &mut t.partition_responses {
            let delta = e.delta(topic, p.index);
            e.up(&mut p.base_offset, delta);
            if version >= PRODUCE_LOG_START_FROM {
                e.up(&mut p.log_start_offset, delta);
            }
        }
    }
}

/// DescribeProducers response: each active producer's `current_txn_start_offset` (−1 without an
/// open transaction stays).
pub(super) fn describe_producers_response(r: &mut DescribeProducersResponse, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            for producer in &mut p.active_producers {
                e.up(&mut producer.current_txn_start_offset, delta);
            }
        }
    }
}
