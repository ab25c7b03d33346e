//! Share groups (KIP-932): the offsets share consumers acknowledge and are handed, and the
//! share-partition start offsets an administrator reads and sets.

use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, ShareAcknowledgeRequest, ShareFetchRequest, ShareFetchResponse,
};

use super::TopicKey;
use super::edit::{BelowStart, Edit};
use super::records;

/// ShareFetch request: the `first_offset`/`last_offset` of every acknowledgement batch, each
/// max(s − Δ, 0).
pub(super) fn share_fetch_request(r: &mut ShareFetchRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Id(*t.topic_id.as_bytes());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            for b in &mut p.acknowledgement_batches {
                e.down(&mut b.first_offset, delta, BelowStart::Zero);
                e.down(&mut b.last_offset, delta, BelowStart::Zero);
            }
        }
    }
}

/// ShareAcknowledge request: as the acknowledgements of a ShareFetch request.
pub(super) fn share_acknowledge_request(r: &mut ShareAcknowledgeRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Id(*t.topic_id.as_bytes());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            for b in &mut p.acknowledgement_batches {
                e.down(&mut b.first_offset, delta, BelowStart::Zero);
                e.down(&mut b.last_offset, delta, BelowStart::Zero);
            }
        }
    }
}

/// AlterShareGroupOffsets request: each new `start_offset` (below the start → 0).
pub(super) fn alter_share_group_offsets_request(r: &mut AlterShareGroupOffsetsRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.topic_name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.down(&mut p.start_offset, delta, BelowStart::Zero);
        }
    }
}

/// ShareFetch response: the acquired ranges' `first_offset`/`last_offset` and the record
/// batches' base offsets.
pub(super) fn share_fetch_response(r: &mut ShareFetchResponse, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.responses {
        let topic = TopicKey::Id(*t.topic_id.as_bytes());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            if delta == 0 {
                continue;
            }
            for a in &mut p.acquired_records {
                e.up(&mut a.first_offset, delta);
                e.up(&mut a.last_offset, delta);
            }
            if let Some(blob) = &p.records
                && let Some(moved) = records::shifted(blob, delta)
            {
                p.records = Some(moved);
                e.mark_changed();
            }
        }
    }
}

/// DescribeShareGroupOffsets response: each share-partition `start_offset` (−1, not
/// initialized, stays). The topic is looked up by its name, which every version carries.
pub(super) fn describe_share_group_offsets_response(r: &mut DescribeShareGroupOffsetsResponse, _version: i16, e: &mut Edit<'_>) {
    for g in &mut r.groups {
        for t in &mut g.topics {
            let topic = TopicKey::Name(t.topic_name.0.as_str());
            for p in &mut t.partitions {
                let delta = e.delta(topic, p.partition_index);
                e.up(&mut p.start_offset, delta);
            }
        }
    }
}
