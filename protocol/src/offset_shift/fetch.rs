//! Fetch: the positions a consumer (or follower) asks for, and every offset a Fetch response
//! reports for a partition, including the base offsets of the record batches it carries.

use kafka_protocol::messages::{FetchRequest, FetchResponse};

use super::TopicKey;
use super::edit::{BelowStart, Edit};
use super::records;

/// First version naming topics by id instead of by name.
const TOPIC_IDS_FROM: i16 = 13;
/// First version with a partition's `log_start_offset` (request and response).
const LOG_START_FROM: i16 = 5;
/// First version with the response's `diverging_epoch`.
const DIVERGING_EPOCH_FROM: i16 = 12;
/// First version with the request's follower `high_watermark`.
const FOLLOWER_HIGH_WATERMARK_FROM: i16 = 18;
/// A follower's `high_watermark` when it does not support the field: kept as it is.
const HIGH_WATERMARK_NOT_SUPPORTED: i64 = i64::MAX;

/// Fetch request: `fetch_offset` (below the start → −1, which the broker answers with
/// OFFSET_OUT_OF_RANGE as the source would), and the follower fields `log_start_offset` and
/// `high_watermark` (below the start → −1, "unknown").
pub(super) fn request(r: &mut FetchRequest, version: i16, e: &mut Edit<'_>) {
    for t in &mut r.topics {
        let topic = if version >= TOPIC_IDS_FROM {
            TopicKey::Id(*t.topic_id.as_bytes())
        } else {
            TopicKey::Name(t.topic.0.as_str())
        };
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition);
            if delta == 0 {
                continue;
            }
            e.down(&mut p.fetch_offset, delta, BelowStart::Unknown);
            if version >= LOG_START_FROM {
                e.down(&mut p.log_start_offset, delta, BelowStart::Unknown);
            }
            if version >= FOLLOWER_HIGH_WATERMARK_FROM && p.high_watermark != HIGH_WATERMARK_NOT_SUPPORTED {
                e.down(&mut p.high_watermark, delta, BelowStart::Unknown);
            }
        }
    }
}

/// Fetch response: `high_watermark`, `last_stable_offset`, `log_start_offset`, every aborted
/// transaction's `first_offset`, `diverging_epoch.end_offset` and the record batches' base
/// offsets.
pub(super) fn response(r: &mut FetchResponse, version: i16, e: &mut Edit<'_>) {
    for t in &mut r.responses {
        let topic = if version >= TOPIC_IDS_FROM {
            TopicKey::Id(*t.topic_id.as_bytes())
        } else {
            TopicKey::Name(t.topic.0.as_str())
        };
        for p in &mut t.partitions {
            let delta = e.delta(topic, p.partition_index);
            if delta == 0 {
                continue;
            }
            e.up(&mut p.high_watermark, delta);
            e.up(&mut p.last_stable_offset, delta);
            if version >= LOG_START_FROM {
                e.up(&mut p.log_start_offset, delta);
            }
            for a in p.aborted_transactions.iter_mut().flatten() {
                e.up(&mut a.first_offset, delta);
            }
            if version >= DIVERGING_EPOCH_FROM {
                e.up(&mut p.diverging_epoch.end_offset, delta);
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
