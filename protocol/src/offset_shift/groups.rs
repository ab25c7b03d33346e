//! Committed offsets of consumer groups: OffsetCommit and TxnOffsetCommit requests (client →
//! destination) and OffsetFetch responses (destination → client). OffsetCommit v10, which
//! kafka-protocol cannot decode, is `commit_v10`'s.

use kafka_protocol::messages::{OffsetCommitRequest, OffsetFetchResponse, TxnOffsetCommitRequest};

use super::TopicKey;
use super::edit::{BelowStart, Edit};

/// First OffsetFetch version answering per group (`groups`) instead of one group's `topics`.
const FETCH_GROUPS_FROM: i16 = 8;
/// First OffsetFetch version naming topics by id instead of by name.
const FETCH_TOPIC_IDS_FROM: i16 = 10;

/// OffsetCommit request v2-9: each `committed_offset` (below the start → 0, the destination
/// partition's first offset).
pub(super) fn offset_commit_request(r: &mut OffsetCommitRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.down(&mut p.committed_offset, delta, BelowStart::Zero);
        }
    }
}

/// TxnOffsetCommit request: each `committed_offset` (below the start → 0).
pub(super) fn txn_offset_commit_request(r: &mut TxnOffsetCommitRequest, _version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = TopicKey::Name(t.name.0.as_str());
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            e.down(&mut p.committed_offset, delta, BelowStart::Zero);
        }
    }
}

/// OffsetFetch response: each `committed_offset` (−1, nothing committed, stays), in the single
/// group form (v1-7) and the per-group form (v8+; topics by id from v10).
pub(super) fn offset_fetch_response(r: &mut OffsetFetchResponse, version: i16, e: &mut Edit<'_>) {
    if version < FETCH_GROUPS_FROM {
        for t in &mut r.topics {
            let topic = TopicKey::Name(t.name.0.as_str());
            for p in &mut t.partitions {
                let delta = e.delta(topic, p.partition_index);
                e.up(&mut p.committed_offset, delta);
            }
        }
        return;
    }
    for g in &mut r.groups {
        for t in &mut g.topics {
            let topic = if version >= FETCH_TOPIC_IDS_FROM {
                TopicKey::Id(*t.topic_id.as_bytes())
            } else {
                TopicKey::Name(t.name.0.as_str())
            };
            for p in &mut t.partitions {
                let delta = e.delta(topic, p.partition_index);
                e.up(&mut p.committed_offset, delta);
            }
        }
    }
}
