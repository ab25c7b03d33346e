//! The engine's Produce requests (v9) written as a list of byte segments, so that a mirrored
//! batch's records — most of every request — go from the Fetch answer they arrived in to the
//! destination socket without being copied: only the request framing and each batch's rewritten
//! 61-byte header are new bytes. The output is byte for byte what kafka-protocol's encoder makes
//! of the same request (tested below). Writing the segments is `shared_client`'s; what goes
//! into a request is the engine's.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{ProtocolError, Side};

/// The only Produce version this encoder writes (flexible: compact fields, tagged fields).
pub const VERSION: i16 = 9;
const PRODUCE_KEY: i16 = 0;
/// Pieces of records (a batch header, a records section, a whole merged batch) shorter than this
/// are copied into the framing around them: a segment of its own costs more than copying a few
/// kilobytes.
const COPY_BELOW: usize = 4096;

/// One partition's records as `head ‖ body` (a rewritten batch header and the source's records
/// section, or a whole batch in `head` with an empty `body`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsBlob {
    pub head: Bytes,
    pub body: Bytes,
}

impl RecordsBlob {
    /// A blob of one contiguous buffer.
    pub fn whole(b: Bytes) -> Self {
        Self { head: b, body: Bytes::new() }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The blob as one buffer (copies unless `body` is empty): the tests' view of it, and the
    /// engine's transactional writes, which are built as whole requests.
    pub fn to_bytes(&self) -> Bytes {
        if self.body.is_empty() {
            return self.head.clone();
        }
        let mut b = BytesMut::with_capacity(self.len());
        b.put_slice(&self.head);
        b.put_slice(&self.body);
        b.freeze()
    }
}

/// One partition's part of a request.
pub struct PartitionRecords<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub records: &'a RecordsBlob,
}

fn too_large(what: &str) -> ProtocolError {
    ProtocolError::Codec {
        op: "encode",
        api: "Produce",
        version: VERSION,
        detail: format!("{what} too large"),
        side: Side::Internal,
    }
}

fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_compact_str(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u64 + 1);
    b.put_slice(s.as_bytes());
}

/// The whole frame (length prefix, request header v2, Produce v9 body with `acks`, `timeout_ms`
/// and no transactional id) of `parts`, grouped by topic in order of first appearance, as
/// segments to be written one after the other.
pub fn segments(correlation_id: i32, client_id: &str, acks: i16, timeout_ms: i32, parts: &[PartitionRecords<'_>]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut topics: Vec<(&str, Vec<&PartitionRecords<'_>>)> = Vec::new();
    for p in parts {
        match topics.iter_mut().find(|(t, _)| *t == p.topic) {
            Some((_, ps)) => ps.push(p),
            None => topics.push((p.topic, vec![p])),
        }
    }
    // The framing around the records, and the records copied into it, sized up front.
    let framing: usize = parts
        .iter()
        .map(|p| p.topic.len() + 32 + small(p.records.head.len()) + small(p.records.body.len()))
        .sum();
    let mut out: Vec<Bytes> = vec![Bytes::new()]; // the length prefix, set at the end
    let mut cur = BytesMut::with_capacity(64 + client_id.len() + framing);
    cur.put_i16(PRODUCE_KEY);
    cur.put_i16(VERSION);
    cur.put_i32(correlation_id);
    let id_len = i16::try_from(client_id.len()).map_err(|_| too_large("client id"))?;
    cur.put_i16(id_len);
    cur.put_slice(client_id.as_bytes());
    put_uvarint(&mut cur, 0); // header tagged fields
    put_uvarint(&mut cur, 0); // transactional_id: null
    cur.put_i16(acks);
    cur.put_i32(timeout_ms);
    put_uvarint(&mut cur, topics.len() as u64 + 1);
    for (topic, ps) in &topics {
        put_compact_str(&mut cur, topic);
        put_uvarint(&mut cur, ps.len() as u64 + 1);
        for p in ps {
            cur.put_i32(p.partition);
            put_uvarint(&mut cur, p.records.len() as u64 + 1);
            for piece in [&p.records.head, &p.records.body] {
                if piece.len() < COPY_BELOW {
                    cur.put_slice(piece);
                } else {
                    let rest = cur.capacity() - cur.len();
                    out.push(std::mem::replace(&mut cur, BytesMut::with_capacity(rest)).freeze());
                    out.push(piece.clone());
                }
            }
            put_uvarint(&mut cur, 0); // partition tagged fields
        }
        put_uvarint(&mut cur, 0); // topic tagged fields
    }
    put_uvarint(&mut cur, 0); // request tagged fields
    out.push(cur.freeze());
    let total: usize = out.iter().map(Bytes::len).sum();
    let size = i32::try_from(total).map_err(|_| too_large("request"))?;
    out[0] = Bytes::copy_from_slice(&size.to_be_bytes());
    Ok(out)
}

/// What of a piece of records of `len` bytes is copied into the framing.
fn small(len: usize) -> usize {
    if len < COPY_BELOW { len } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_request;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn reference(correlation_id: i32, client_id: &str, acks: i16, timeout_ms: i32, parts: &[PartitionRecords<'_>]) -> Bytes {
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for p in parts {
            let mut pd = PartitionProduceData::default();
            pd.index = p.partition;
            pd.records = Some(p.records.to_bytes());
            let name = TopicName(StrBytes::from_string(p.topic.to_owned()));
            match topics.iter_mut().find(|t| t.name == name) {
                Some(t) => t.partition_data.push(pd),
                None => {
                    let mut td = TopicProduceData::default();
                    td.name = name;
                    td.partition_data = vec![pd];
                    topics.push(td);
                }
            }
        }
        let mut req = ProduceRequest::default();
        req.acks = acks;
        req.timeout_ms = timeout_ms;
        req.topic_data = topics;
        let mut header = RequestHeader::default();
        header.request_api_key = PRODUCE_KEY;
        header.request_api_version = VERSION;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_string(client_id.to_owned()));
        encode_request(&header, ApiKey::Produce, &req).expect("encodes")
    }

    fn joined(segs: &[Bytes]) -> Vec<u8> {
        segs.iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn large_record_sets_are_their_own_segments_and_the_frame_matches_kafka_protocols_encoding() {
        let big = RecordsBlob {
            head: Bytes::from(vec![7u8; 61]),
            body: Bytes::from(vec![9u8; 200_000]),
        };
        let small = RecordsBlob::whole(Bytes::from_static(b"tiny batch"));
        let parts = [
            PartitionRecords {
                topic: "a",
                partition: 3,
                records: &big,
            },
            PartitionRecords {
                topic: "b",
                partition: 0,
                records: &small,
            },
            PartitionRecords {
                topic: "a",
                partition: 1,
                records: &small,
            },
        ];
        let segs = segments(42, "kafka-mirror-proxy", -1, 30_000, &parts).expect("encodes");
        assert_eq!(joined(&segs), reference(42, "kafka-mirror-proxy", -1, 30_000, &parts).to_vec());
        assert!(segs.iter().any(|s| s.as_ptr() == big.body.as_ptr()), "the large body is not copied");
        let merged = RecordsBlob::whole(Bytes::from(vec![5u8; 100_000]));
        let parts = [PartitionRecords {
            topic: "m",
            partition: 0,
            records: &merged,
        }];
        let segs = segments(7, "c", -1, 1, &parts).expect("encodes");
        assert_eq!(joined(&segs), reference(7, "c", -1, 1, &parts).to_vec());
        assert!(
            segs.iter().any(|s| s.as_ptr() == merged.head.as_ptr()),
            "a large whole batch is not copied either"
        );
    }

    proptest! {
        #[test]
        fn any_request_encodes_exactly_as_kafka_protocol_encodes_it(
            correlation_id in any::<i32>(),
            client_id in "[a-z0-9-]{0,40}",
            acks in prop_oneof![Just(-1i16), Just(0), Just(1)],
            timeout_ms in any::<i32>(),
            spec in proptest::collection::vec((0usize..4, any::<i32>(), 0usize..6_000, 0usize..10_000), 0..12),
        ) {
            let names = ["t", "topic-two", "x.y_z", "a-much-longer-topic-name-than-the-others"];
            let blobs: Vec<RecordsBlob> = spec.iter().map(|&(_, _, h, b)| RecordsBlob {
                head: Bytes::from(vec![1u8; h]),
                body: Bytes::from((0..b).map(|i| i as u8).collect::<Vec<u8>>()),
            }).collect();
            let parts: Vec<PartitionRecords<'_>> = spec.iter().zip(&blobs).map(|(&(t, p, _, _), r)| PartitionRecords {
                topic: names[t], partition: p, records: r,
            }).collect();
            let segs = segments(correlation_id, &client_id, acks, timeout_ms, &parts).expect("encodes");
            prop_assert_eq!(joined(&segs), reference(correlation_id, &client_id, acks, timeout_ms, &parts).to_vec());
        }
    }
}
