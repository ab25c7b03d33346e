//! Transaction markers (control batches): what a COMMIT or ABORT marker says, read from its one
//! control record (key: version i16, type i16 — 0 abort, 1 commit), checked before it is trusted.
//! The engine replays a source marker on the destination as its own EndTxn; writing markers is
//! the destination coordinator's, never this crate's.

use bytes::Bytes;

use crate::batch::BatchHeader;
use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::reencode::{err, records};

/// The outcome a transaction marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Commit,
    Abort,
}

/// What the control batch `batch` (header `header`, CRC checked here) records. Anything but one
/// control record with a 4-byte key of version 0 and type 0 or 1 is refused: a marker of another
/// kind (a future control type) cannot be replayed, so the mirror writes nothing past it (the
/// partition retries, showing why).
pub fn marker(batch: &Bytes, header: &BatchHeader) -> Result<Marker, ProtocolError> {
    let at = header.base_offset;
    if !header.is_control() {
        return Err(err(format!("batch at {at} is not a control batch")));
    }
    let recs = records(batch, header)?;
    let [record] = recs.as_slice() else {
        return Err(err(format!("control batch at {at} holds {} records, a marker holds one", recs.len())));
    };
    let mut c = Cursor::new(&record.body, 0, "control record", Side::Broker);
    let key_len = c.varint()?;
    if key_len != 4 {
        return Err(err(format!("control record at {at} has a key of {key_len} bytes, a marker's has 4")));
    }
    let version = c.i16()?;
    let kind = c.i16()?;
    match (version, kind) {
        (0, 0) => Ok(Marker::Abort),
        (0, 1) => Ok(Marker::Commit),
        _ => Err(err(format!(
            "control record at {at} is of version {version} type {kind}: not a transaction marker this mirror can replay"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::parse_header;
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    fn control(key: Vec<u8>, records: i64) -> Bytes {
        let recs: Vec<Record> = (0..records)
            .map(|i| Record {
                transactional: true,
                control: true,
                partition_leader_epoch: 0,
                producer_id: 5,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: 7 + i,
                sequence: -1,
                timestamp: 1,
                key: Some(Bytes::from(key.clone())),
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &recs,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        buf.freeze()
    }

    #[test]
    fn commit_and_abort_markers_are_told_apart() {
        for (kind, want) in [(1u8, Marker::Commit), (0, Marker::Abort)] {
            let b = control(vec![0, 0, 0, kind], 1);
            assert_eq!(marker(&b, &parse_header(&b).unwrap()).unwrap(), want);
        }
    }

    #[test]
    fn a_control_record_of_another_type_or_shape_is_refused() {
        for (key, n) in [(vec![0, 0, 0, 2], 1), (vec![0, 1, 0, 1], 1), (vec![0, 0, 1], 1)] {
            let b = control(key.clone(), n);
            assert!(marker(&b, &parse_header(&b).unwrap()).is_err(), "key {key:?} x {n} accepted");
        }
    }

    #[test]
    fn a_data_batch_is_not_a_marker() {
        let mut b = control(vec![0, 0, 0, 1], 1).to_vec();
        let mut h = parse_header(&b).unwrap();
        h.attributes &= !(1 << 5);
        b[21..23].copy_from_slice(&h.attributes.to_be_bytes());
        let b = Bytes::from(b);
        assert!(marker(&b, &h).is_err());
    }
}
