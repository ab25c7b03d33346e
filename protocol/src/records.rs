//! Plain key/value record batches for the engine's own internal topics (the state topic): encode
//! a few records into one uncompressed, non-idempotent batch, and decode fetched batches back
//! into `(offset, key, value)`. Mirrored data never goes through here (see `batch`).

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::error::{ProtocolError, Side};

/// One record read back: offset, key, value (`None` = tombstone).
pub type KeyValue = (i64, Option<Bytes>, Option<Bytes>);

/// Encodes `entries` (key, value; `None` deletes the key under compaction) as one batch.
pub fn encode(entries: &[(Bytes, Option<Bytes>)], timestamp: i64) -> Result<Bytes, ProtocolError> {
    let records: Vec<Record> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence stays constant; the
            // batch's base sequence is then -1 (no idempotence), as Kafka expects.
            sequence: i as i32 - 1,
            timestamp,
            key: Some(k.clone()),
            value: v.clone(),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| ProtocolError::Malformed {
        what: "record batch",
        detail: format!("cannot encode: {e}"),
        side: Side::Internal,
    })?;
    Ok(buf.freeze())
}

/// Decodes every record of the batches in `blob` (as a Fetch returns them), control records
/// excluded.
pub fn decode(blob: &Bytes) -> Result<Vec<KeyValue>, ProtocolError> {
    let mut buf = blob.clone();
    let mut out = Vec::new();
    while !buf.is_empty() {
        let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| ProtocolError::Malformed {
            what: "record batch",
            detail: format!("cannot decode: {e}"),
            side: Side::Broker,
        })?;
        out.extend(set.records.into_iter().filter(|r| !r.control).map(|r| (r.offset, r.key, r.value)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_records_decode_to_the_same_keys_values_and_tombstones() {
        let entries = vec![(Bytes::from_static(b"a"), Some(Bytes::from_static(b"1"))), (Bytes::from_static(b"b"), None)];
        let blob = encode(&entries, 42).expect("encode");
        assert_eq!(
            crate::batch::split(&blob).expect("split").len(),
            1,
            "one batch (one Produce of a batch per partition)"
        );
        let back = decode(&blob).expect("decode");
        assert_eq!(
            back,
            vec![
                (0, Some(Bytes::from_static(b"a")), Some(Bytes::from_static(b"1"))),
                (1, Some(Bytes::from_static(b"b")), None)
            ]
        );
    }
}
