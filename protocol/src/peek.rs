//! Reading the few header fields the proxy routes on, straight from the frame bytes and without
//! decoding the message: API key, version and correlation id of a request, the correlation id of
//! a response, and the `acks` of a Produce request (to know whether a response will come).
//!
//! Every function takes a whole frame *including* its 4-byte length prefix and never panics on
//! malformed input. Full decoding belongs to `codec`.

use bytes::Buf;
use kafka_protocol::messages::ApiKey;

use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

/// The fixed leading fields of every request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPeek {
    /// Raw API key (may be one kafka-protocol does not know).
    pub api_key: i16,
    /// Requested API version.
    pub api_version: i16,
    /// Correlation id the response must carry.
    pub correlation_id: i32,
}

fn malformed(what: &'static str, detail: impl Into<String>, side: Side) -> ProtocolError {
    ProtocolError::Malformed {
        what,
        detail: detail.into(),
        side,
    }
}

/// Peeks the request header of `frame`.
pub fn request(frame: &[u8]) -> Result<RequestPeek, ProtocolError> {
    let mut b = frame.get(PREFIX..PREFIX + 8).ok_or_else(|| {
        malformed(
            "request header",
            format!("frame of {} bytes is shorter than a header", frame.len()),
            Side::Client,
        )
    })?;
    Ok(RequestPeek {
        api_key: b.get_i16(),
        api_version: b.get_i16(),
        correlation_id: b.get_i32(),
    })
}

/// Peeks the correlation id of a response frame.
pub fn response_correlation_id(frame: &[u8]) -> Result<i32, ProtocolError> {
    let mut b = frame
        .get(PREFIX..PREFIX + 4)
        .ok_or_else(|| malformed("response header", format!("frame of {} bytes has no correlation id", frame.len()), Side::Broker))?;
    Ok(b.get_i32())
}

/// Offset (within the frame) of the request body, i.e. just past the request header.
pub fn request_body_offset(frame: &[u8], peek: &RequestPeek) -> Result<usize, ProtocolError> {
    let key = ApiKey::try_from(peek.api_key).map_err(|_| malformed("request header", format!("unknown api key {}", peek.api_key), Side::Client))?;
    let header_version = key.request_header_version(peek.api_version);
    let mut cur = Cursor::new(frame, PREFIX + 8, "request", Side::Client);
    // client_id: a nullable legacy (i16-length) string in header v1 and v2.
    if header_version >= 1 {
        let len = cur.i16()?;
        if len > 0 {
            cur.skip(len as usize)?;
        }
    }
    if header_version >= 2 {
        cur.skip_tagged_fields()?;
    }
    Ok(cur.pos)
}

/// The `acks` of a Produce request frame (`0` means the broker sends no response).
pub fn produce_acks(frame: &[u8], peek: &RequestPeek) -> Result<i16, ProtocolError> {
    let mut cur = Cursor::new(frame, request_body_offset(frame, peek)?, "request", Side::Client);
    // transactional_id: nullable string, compact from v9 on (flexible versions).
    if peek.api_version >= 9 {
        let len = cur.uvarint()?;
        if len > 1 {
            cur.skip(len as usize - 1)?;
        }
    } else {
        let len = cur.i16()?;
        if len > 0 {
            cur.skip(len as usize)?;
        }
    }
    cur.i16()
}

/// A topic as a Produce request names it: by name (v3-12) or by topic id (v13+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceTopic<'a> {
    Name(&'a [u8]),
    Id(&'a [u8; 16]),
}

/// Whether any topic of a Produce request frame satisfies `hit`, without decoding it: the
/// records are skipped by their length. The proxy's guards decode a Produce only when this says
/// it names a topic they protect.
pub fn produce_names_any(frame: &[u8], peek: &RequestPeek, mut hit: impl FnMut(ProduceTopic<'_>) -> bool) -> Result<bool, ProtocolError> {
    let flexible = peek.api_version >= 9;
    let mut cur = Cursor::new(frame, request_body_offset(frame, peek)?, "Produce request", Side::Client);
    if flexible {
        cur.skip_compact_bytes()?; // transactional_id (compact nullable string)
    } else {
        let len = cur.i16()?;
        if len > 0 {
            cur.skip(len as usize)?;
        }
    }
    cur.skip(2 + 4)?; // acks, timeout_ms
    let topics = cur.array_len(flexible)?;
    for _ in 0..topics {
        let topic = if peek.api_version >= 13 {
            let id: &[u8; 16] = cur.take(16)?.try_into().map_err(|_| malformed("Produce request", "topic id", Side::Client))?;
            ProduceTopic::Id(id)
        } else if flexible {
            let len = cur.uvarint()? as usize;
            ProduceTopic::Name(cur.take(len.saturating_sub(1))?)
        } else {
            let len = cur.i16()?;
            ProduceTopic::Name(cur.take(usize::try_from(len).unwrap_or(0))?)
        };
        if hit(topic) {
            return Ok(true);
        }
        let partitions = cur.array_len(flexible)?;
        for _ in 0..partitions {
            cur.skip(4)?; // index
            if flexible {
                cur.skip_compact_bytes()?;
                cur.skip_tagged_fields()?;
            } else {
                let len = cur.i32()?;
                if len > 0 {
                    cur.skip(len as usize)?;
                }
            }
        }
        if flexible {
            cur.skip_tagged_fields()?;
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader, TransactionalId};
    use kafka_protocol::protocol::{Encodable, StrBytes, encode_request_header_into_buffer};
    use proptest::prelude::*;

    fn produce_with_topics(version: i16, topics: &[(&str, u8)]) -> Vec<u8> {
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let mut buf = BytesMut::new();
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::Produce as i16;
        h.request_api_version = version;
        h.client_id = Some(StrBytes::from_static_str("c"));
        encode_request_header_into_buffer(&mut buf, &h).unwrap();
        let mut req = ProduceRequest::default();
        req.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
        for (name, id) in topics {
            let mut t = TopicProduceData::default();
            t.name = TopicName(StrBytes::from_string((*name).to_owned()));
            t.topic_id = uuid::Uuid::from_bytes([*id; 16]);
            for p in 0..2 {
                let mut d = PartitionProduceData::default();
                d.index = p;
                // Records that contain the other topic's name must not be mistaken for it.
                d.records = Some(bytes::Bytes::from(format!("records mentioning {name}-x and __kmp_mirror_state")));
                t.partition_data.push(d);
            }
            req.topic_data.push(t);
        }
        req.encode(&mut buf, version).unwrap();
        crate::frame::with_prefix(&buf).to_vec()
    }

    #[test]
    fn produce_topics_are_found_by_name_or_id_without_decoding_and_records_are_skipped() {
        for version in 3i16..=13 {
            let frame = produce_with_topics(version, &[("plain", 1), ("mirrored", 2)]);
            let p = request(&frame).unwrap();
            let names = |wanted: &'static [u8], id: u8| {
                produce_names_any(&frame, &p, |t| match t {
                    ProduceTopic::Name(n) => n == wanted,
                    ProduceTopic::Id(i) => i == &[id; 16],
                })
                .unwrap()
            };
            assert!(names(b"mirrored", 2), "v{version}: the second topic is found");
            assert!(!names(b"__kmp_mirror_state", 9), "v{version}: a name inside records is not a topic");
            assert!(!names(b"mirrored-x", 9), "v{version}");
            for cut in 0..frame.len() {
                let _ = produce_names_any(&frame[..cut], &p, |_| false); // never panics
            }
        }
    }

    fn produce_frame(version: i16, acks: i16, txn: Option<&str>, client_id: Option<&str>) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::Produce as i16;
        h.request_api_version = version;
        h.correlation_id = 77;
        h.client_id = client_id.map(|c| StrBytes::from_string(c.to_owned()));
        encode_request_header_into_buffer(&mut buf, &h).unwrap();
        let mut req = ProduceRequest::default();
        req.acks = acks;
        req.timeout_ms = 1000;
        req.transactional_id = txn.map(|t| TransactionalId(StrBytes::from_string(t.to_owned())));
        req.encode(&mut buf, version).unwrap();
        crate::frame::with_prefix(&buf).to_vec()
    }

    #[test]
    fn produce_acks_is_found_in_every_supported_version() {
        let range = ApiKey::Produce.valid_versions();
        for v in range.min..=range.max {
            for (acks, txn, cid) in [(0, None, None), (-1, Some("txn-abc"), Some("client-1")), (1, Some(""), Some(""))] {
                let f = produce_frame(v, acks, txn, cid);
                let p = request(&f).unwrap();
                assert_eq!((p.api_key, p.api_version, p.correlation_id), (0, v, 77));
                assert_eq!(produce_acks(&f, &p).unwrap(), acks, "acks of produce v{v} txn={txn:?} client={cid:?}");
            }
        }
    }

    #[test]
    fn short_frames_are_malformed_not_panics() {
        assert!(request(&[0, 0, 0, 2, 0, 0]).is_err());
        assert!(response_correlation_id(&[0, 0, 0, 1, 0]).is_err());
        let f = produce_frame(9, 1, Some("t"), Some("c"));
        let p = request(&f).unwrap();
        for cut in 0..f.len() - 1 {
            let _ = produce_acks(&f[..cut], &p);
        }
    }

    proptest! {
        #[test]
        fn peeking_random_frames_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(p) = request(&bytes) {
                let _ = request_body_offset(&bytes, &p);
                let _ = produce_acks(&bytes, &p);
            }
            let _ = response_correlation_id(&bytes);
        }

        #[test]
        fn truncated_produce_frames_never_panic(version in 3i16..=13, cut in 0usize..200) {
            let f = produce_frame(version, -1, Some("transaction"), Some("client"));
            let cut = cut.min(f.len());
            if let Ok(p) = request(&f[..cut]) {
                let _ = produce_acks(&f[..cut], &p);
            }
        }
    }
}
