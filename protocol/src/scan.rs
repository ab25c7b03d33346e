//! Allocation-free scanners that answer one question about a response without decoding it, so
//! the common case stays pass-through. Today: does a Fetch response carry KIP-951
//! `node_endpoints` (top-level tagged field 0, v16+)? Brokers only fill it when a partition
//! reports a new leader, so almost every Fetch response is forwarded untouched.
//!
//! Rewriting what a scan finds belongs to `rewrite`.

use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

/// Tag of `NodeEndpoints` in Fetch (v16+) and Produce (v10+) responses.
const NODE_ENDPOINTS_TAG: u32 = 0;

/// Whether a Fetch response frame (prefix included, flexible version 12+) has `node_endpoints`.
pub fn fetch_has_node_endpoints(frame: &[u8], version: i16) -> Result<bool, ProtocolError> {
    if version < 12 {
        return Ok(false);
    }
    let mut c = Cursor::new(frame, PREFIX + 4, "Fetch response", Side::Broker);
    c.skip_tagged_fields()?; // response header v1
    c.skip(4 + 2 + 4)?; // throttle_time_ms, error_code, session_id
    for _ in 0..c.compact_array_len()? {
        if version >= 13 {
            c.skip(16)?; // topic_id
        } else {
            c.skip_compact_bytes()?; // topic name
        }
        for _ in 0..c.compact_array_len()? {
            c.skip(4 + 2 + 8 + 8 + 8)?; // index, error, high watermark, LSO, log start
            for _ in 0..c.compact_array_len()? {
                c.skip(8 + 8)?; // aborted transaction: producer id, first offset
                c.skip_tagged_fields()?;
            }
            c.skip(4)?; // preferred_read_replica
            c.skip_compact_bytes()?; // records
            c.skip_tagged_fields()?; // diverging epoch, current leader, snapshot id, …
        }
        c.skip_tagged_fields()?;
    }
    c.tagged_fields_contain(Some(NODE_ENDPOINTS_TAG))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_response;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData};
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn response(topics: usize, partitions: usize, aborted: usize, records: usize, leader_hint: bool, endpoints: bool) -> FetchResponse {
        let mut r = FetchResponse::default();
        for t in 0..topics {
            let mut topic = FetchableTopicResponse::default();
            topic.topic = TopicName(StrBytes::from_string(format!("topic-{t}")));
            for p in 0..partitions {
                let mut pd = PartitionData::default();
                pd.partition_index = p as i32;
                pd.high_watermark = 1000;
                pd.aborted_transactions = Some(
                    (0..aborted)
                        .map(|i| {
                            let mut a = AbortedTransaction::default();
                            a.producer_id = kafka_protocol::messages::ProducerId(i as i64);
                            a
                        })
                        .collect(),
                );
                pd.records = Some(Bytes::from(vec![7u8; records]));
                if leader_hint {
                    let mut l = LeaderIdAndEpoch::default();
                    l.leader_id = BrokerId(2);
                    l.leader_epoch = 5;
                    pd.current_leader = l;
                    pd.error_code = 6;
                }
                topic.partitions.push(pd);
            }
            r.responses.push(topic);
        }
        if endpoints {
            let mut e = NodeEndpoint::default();
            e.node_id = BrokerId(2);
            e.host = StrBytes::from_static_str("b2");
            e.port = 9092;
            r.node_endpoints.push(e);
        }
        r
    }

    #[test]
    fn finds_node_endpoints_exactly_when_present_in_every_flexible_version() {
        for v in 12..=18 {
            for endpoints in [false, true] {
                let frame = encode_response(3, ApiKey::Fetch, v, &response(2, 3, 1, 100, endpoints, endpoints)).unwrap();
                let want = endpoints && v >= 16;
                assert_eq!(fetch_has_node_endpoints(&frame, v).unwrap(), want, "v{v} endpoints={endpoints}");
            }
        }
    }

    proptest! {
        #[test]
        fn scan_agrees_with_the_encoder(topics in 0usize..4, partitions in 0usize..4, aborted in 0usize..3,
                                        records in 0usize..300, hint: bool, endpoints: bool, v in 16i16..=18) {
            let frame = encode_response(1, ApiKey::Fetch, v, &response(topics, partitions, aborted, records, hint, endpoints)).unwrap();
            prop_assert_eq!(fetch_has_node_endpoints(&frame, v).unwrap(), endpoints);
            for cut in [0, 4, 9, frame.len() / 2, frame.len().saturating_sub(1)] {
                let _ = fetch_has_node_endpoints(&frame[..cut], v);
            }
        }
    }
}
