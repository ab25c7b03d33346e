//! Record batches (magic v2) as the mirror engine handles them: reading the 61-byte header of
//! each batch in a fetched records blob, rewriting the producer fields for the engine's own
//! idempotent producer (producer id, epoch, base sequence, transactional bit) with the CRC-32C
//! recomputed — the compressed payload is never touched — and building *filler* batches that
//! occupy offsets the source has no visible data for.
//!
//! Layout (offsets into the batch): baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch
//! i32 @12, magic i8 @16, crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp
//! i64 @27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
//! recordsCount i32 @57, records @61. The CRC covers attributes..end, so baseOffset, length,
//! leader epoch and magic can change without it.
//!
//! Filler format (documented for operators; also what the proxy masks from consumers): each
//! filler record has key [`FILLER_KEY`], a null value (a tombstone, so compaction on the
//! destination removes it) and one header [`FILLER_HEADER`] = `b"1"`; filler batches never mix
//! with real records. They are uncompressed, or zstd-compressed for long runs stamped with
//! timestamp 0 (a source's retention prefix). Deciding *when* to fill belongs to the engine.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{ProtocolError, Side};

/// Size of a v2 batch header.
pub const HEADER_SIZE: usize = 61;
/// Key of every filler record.
pub const FILLER_KEY: &[u8] = b"__kmp_filler";
/// Header name carried by every filler record.
pub const FILLER_HEADER: &[u8] = b"kmp-filler";

const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// The header fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the `batchLength` field (whole batch = 12 + this).
    pub batch_length: i32,
    /// The leader epoch of the partition when the batch was appended (the broker that appends a
    /// produced batch sets its own).
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Offset after the batch's last offset.
    pub fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }
    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> i16 {
        self.attributes & 0x7
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    /// A control batch (transaction COMMIT/ABORT marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    /// Whether the records' offset deltas can be exactly `0..count` (no compaction holes): the
    /// only shape a broker accepts through Produce without renumbering.
    pub fn is_contiguous(&self) -> bool {
        i64::from(self.last_offset_delta) + 1 == i64::from(self.records_count)
    }
    /// Size of the whole batch in bytes.
    pub fn size(&self) -> usize {
        12 + self.batch_length.max(0) as usize
    }
}

fn malformed(detail: String) -> ProtocolError {
    ProtocolError::Malformed {
        what: "record batch",
        detail,
        side: Side::Broker,
    }
}

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

/// Parses the header at the start of `b` (which must hold at least [`HEADER_SIZE`] bytes).
pub fn parse_header(b: &[u8]) -> Result<BatchHeader, ProtocolError> {
    if b.len() < HEADER_SIZE {
        return Err(malformed(format!("{} bytes is shorter than a batch header", b.len())));
    }
    let h = BatchHeader {
        base_offset: i64::from_be_bytes(be(b, 0)),
        batch_length: i32::from_be_bytes(be(b, 8)),
        partition_leader_epoch: i32::from_be_bytes(be(b, 12)),
        magic: b[16] as i8,
        crc: u32::from_be_bytes(be(b, CRC_OFFSET)),
        attributes: i16::from_be_bytes(be(b, ATTRIBUTES_OFFSET)),
        last_offset_delta: i32::from_be_bytes(be(b, 23)),
        base_timestamp: i64::from_be_bytes(be(b, 27)),
        max_timestamp: i64::from_be_bytes(be(b, 35)),
        producer_id: i64::from_be_bytes(be(b, 43)),
        producer_epoch: i16::from_be_bytes(be(b, 51)),
        base_sequence: i32::from_be_bytes(be(b, 53)),
        records_count: i32::from_be_bytes(be(b, 57)),
    };
    if h.magic != 2 {
        return Err(malformed(format!("magic {} (only v2 batches are supported)", h.magic)));
    }
    if (h.batch_length as i64) < (HEADER_SIZE as i64 - 12) {
        return Err(malformed(format!("batch length {} is shorter than its header", h.batch_length)));
    }
    // `next_offset` must not overflow whatever a broker sent.
    if h.base_offset.checked_add(i64::from(h.last_offset_delta) + 1).is_none() {
        return Err(malformed(format!(
            "base offset {} + last offset delta {} overflows",
            h.base_offset, h.last_offset_delta
        )));
    }
    Ok(h)
}

/// Splits a fetched records blob into whole batches. A partial batch at the end (fetch
/// responses may cut one) is left out; a malformed header is an error.
pub fn split(records: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>, ProtocolError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while records.len() - pos >= HEADER_SIZE {
        let h = parse_header(&records[pos..])?;
        let end = pos + h.size();
        if end > records.len() {
            break;
        }
        out.push((h, records.slice(pos..end)));
        pos = end;
    }
    Ok(out)
}

/// Whether the batch's stored CRC matches its content.
pub fn crc_is_valid(batch: &[u8]) -> bool {
    batch.len() >= HEADER_SIZE && u32::from_be_bytes(be(batch, CRC_OFFSET)) == crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// `Ok` when the batch's stored CRC matches its content, else the error a corrupted batch from the
/// source is (whoever acts on a CRC-covered header field of a batch it does not write checks it).
pub fn verify_crc(batch: &[u8]) -> Result<(), ProtocolError> {
    if crc_is_valid(batch) {
        return Ok(());
    }
    let at = batch.get(..8).map_or(-1, |b| i64::from_be_bytes(be(b, 0)));
    Err(malformed(format!("batch at offset {at} fails its CRC: corrupted")))
}

/// Producer fields the engine writes into a batch before producing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// `batch` with the producer fields replaced, the transactional bit cleared and the CRC
/// recomputed, as a new header and the records section (compressed or not) byte for byte, a
/// slice of `batch` (not copied). The batch's own CRC is checked first, in the same pass over the
/// records: a batch corrupted on its way from the source must not reach the destination under a
/// fresh, valid CRC.
pub fn rewrite_for_produce(batch: &Bytes, fields: ProducerFields) -> Result<crate::produce_frame::RecordsBlob, ProtocolError> {
    rewrite_for_produce_as(batch, fields, false)
}

/// [`rewrite_for_produce`] with the transactional bit set to `transactional` (a source
/// transaction's data replayed in a destination transaction keeps it).
pub fn rewrite_for_produce_as(batch: &Bytes, fields: ProducerFields, transactional: bool) -> Result<crate::produce_frame::RecordsBlob, ProtocolError> {
    let head = rewritten_header(batch, fields, transactional)?;
    Ok(crate::produce_frame::RecordsBlob {
        head: Bytes::copy_from_slice(&head),
        body: batch.slice(HEADER_SIZE..),
    })
}

/// The checks of [`rewrite_for_produce`] and the header it writes (CRC included).
fn rewritten_header(batch: &[u8], fields: ProducerFields, transactional: bool) -> Result<[u8; HEADER_SIZE], ProtocolError> {
    let h = parse_header(batch)?;
    if batch.len() != h.size() {
        return Err(malformed(format!("batch of {} bytes announces {}", batch.len(), h.size())));
    }
    if h.is_control() {
        return Err(malformed("control batches cannot be produced; they become fillers".into()));
    }
    // CRC-32C of attributes..end = the header part combined with the records part, so the
    // records are read once for the check and the new CRC. The shift past the records is built
    // once and serves both CRCs.
    let records_crc = crc32c::crc32c(&batch[HEADER_SIZE..]);
    let past_records = crate::crc_shift::Shift::bytes(batch.len() - HEADER_SIZE);
    let stored = past_records.combine(crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..HEADER_SIZE]), records_crc);
    if stored != h.crc {
        return Err(malformed(format!(
            "batch at offset {} fails its CRC (stored {:#010x}, computed {stored:#010x}): corrupted",
            h.base_offset, h.crc
        )));
    }
    let mut b = [0u8; HEADER_SIZE];
    b.copy_from_slice(&batch[..HEADER_SIZE]);
    b[0..8].copy_from_slice(&0i64.to_be_bytes());
    b[12..16].copy_from_slice(&(-1i32).to_be_bytes());
    b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
        .copy_from_slice(&((h.attributes & !TRANSACTIONAL_BIT) | if transactional { TRANSACTIONAL_BIT } else { 0 }).to_be_bytes());
    b[43..51].copy_from_slice(&fields.producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&fields.producer_epoch.to_be_bytes());
    b[53..57].copy_from_slice(&fields.base_sequence.to_be_bytes());
    let crc = past_records.combine(crc32c::crc32c(&b[ATTRIBUTES_OFFSET..HEADER_SIZE]), records_crc);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(b)
}

/// Appends a zig-zag varint (record fields).
pub(crate) fn put_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

/// Most records in one compressed filler batch ([`compressed_filler_batch`]): about 3.4 MB of
/// filler records, a zstd section of about 40 KB. The proxy decompresses a compressed batch to
/// check that it holds nothing but fillers only up to this many records, so this bounds what one
/// batch can cost it (`fillers`).
pub const MAX_COMPRESSED_FILLER_RECORDS: i32 = 100_000;
/// Bytes of one filler record at most, its length prefix included, once the log cleaner re-based
/// its timestamp delta (a 10-byte varint): what decompressing a filler batch may yield per record.
pub const MAX_FILLER_RECORD_BYTES: usize = 48;
/// Compression codec id of zstd in a batch's attributes.
pub const ZSTD: i16 = 4;

/// The records section of `count` filler records (offset deltas `0..count`, timestamp delta 0).
fn filler_records(count: i32) -> BytesMut {
    let mut records = BytesMut::with_capacity(count.max(0) as usize * 36);
    let mut rec = BytesMut::new();
    for delta in 0..i64::from(count) {
        rec.clear();
        rec.put_i8(0); // attributes
        put_varint(&mut rec, 0); // timestamp delta
        put_varint(&mut rec, delta);
        put_varint(&mut rec, FILLER_KEY.len() as i64);
        rec.put_slice(FILLER_KEY);
        put_varint(&mut rec, -1); // null value
        put_varint(&mut rec, 1); // one header
        put_varint(&mut rec, FILLER_HEADER.len() as i64);
        rec.put_slice(FILLER_HEADER);
        put_varint(&mut rec, 1);
        rec.put_u8(b'1');
        put_varint(&mut records, rec.len() as i64);
        records.put_slice(&rec);
    }
    records
}

/// The timestamp of an uncompressed filler batch: none (`-1`, Kafka's `NO_TIMESTAMP`, which the
/// broker accepts on a CreateTime topic without checking it against its clock). A ListOffsets by
/// timestamp on the destination then passes over fillers as the source passes over the holes they
/// stand in for: a filler stamped with a real time would be the answer for times up to it, an
/// offset the source has no record at.
pub const FILLER_TIMESTAMP: i64 = -1;

/// Builds an uncompressed batch of `count` filler records (offset deltas `0..count`) stamped
/// [`FILLER_TIMESTAMP`], carrying `fields`.
pub fn filler_batch(count: i32, fields: ProducerFields) -> Result<Bytes, ProtocolError> {
    if count <= 0 {
        return Err(malformed(format!("a filler batch needs at least one record, asked for {count}")));
    }
    Ok(filler_batch_around(count, FILLER_TIMESTAMP, fields, 0, &filler_records(count)))
}

/// The zstd-compressed records section of `count` filler records, for
/// [`compressed_filler_batch`]. The same `count` always gives the same bytes, so a caller
/// writing many full batches compresses once.
pub fn compressed_filler_section(count: i32) -> Result<Bytes, ProtocolError> {
    if !(1..=MAX_COMPRESSED_FILLER_RECORDS).contains(&count) {
        return Err(malformed(format!(
            "a compressed filler batch holds 1 to {MAX_COMPRESSED_FILLER_RECORDS} records, asked for {count}"
        )));
    }
    crate::codecs::compress(ZSTD, &filler_records(count))
        .map(BytesMut::freeze)
        .map_err(|e| malformed(format!("compressing fillers: {e}")))
}

/// A zstd batch of `count` filler records around `section` (from
/// [`compressed_filler_section`]`(count)`), stamped 0 (what [`crate::fillers::is_filler_batch`]
/// looks for before it decompresses anything), carrying `fields`. A long run of offsets costs the
/// destination broker about a third of the time uncompressed fillers do, and a hundredth of the
/// bytes. Only a retention prefix is written this way, and deleted as it goes: no lookup by time
/// ever meets it.
pub fn compressed_filler_batch(count: i32, fields: ProducerFields, section: &[u8]) -> Bytes {
    filler_batch_around(count, 0, fields, ZSTD, section)
}

fn filler_batch_around(count: i32, timestamp: i64, fields: ProducerFields, codec: i16, section: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_SIZE + section.len());
    b.put_i64(0);
    b.put_i32((HEADER_SIZE - 12 + section.len()) as i32);
    b.put_i32(-1);
    b.put_i8(2);
    b.put_u32(0); // crc, filled below
    b.put_i16(codec); // attributes: the codec; not transactional, not control
    b.put_i32(count - 1);
    b.put_i64(timestamp);
    b.put_i64(timestamp);
    b.put_i64(fields.producer_id);
    b.put_i16(fields.producer_epoch);
    b.put_i32(fields.base_sequence);
    b.put_i32(count);
    b.put_slice(section);
    let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    use proptest::prelude::*;

    fn encoded(compression: Compression, transactional: bool, n: i64, base_offset: i64) -> Bytes {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional,
                control: false,
                partition_leader_epoch: 3,
                producer_id: 1000,
                producer_epoch: 2,
                timestamp_type: TimestampType::Creation,
                offset: base_offset + i,
                sequence: 40 + i as i32,
                timestamp: 1_700_000_000_000 + i,
                key: Some(Bytes::from(format!("k{i}"))),
                value: (i % 2 == 0).then(|| Bytes::from(format!("value-{i}"))),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
        buf.freeze()
    }

    const FIELDS: ProducerFields = ProducerFields {
        producer_id: 77,
        producer_epoch: 0,
        base_sequence: 500,
    };

    #[test]
    fn header_is_parsed_from_a_real_encoded_batch() {
        let b = encoded(Compression::Gzip, true, 3, 100);
        let h = parse_header(&b).unwrap();
        assert_eq!((h.base_offset, h.last_offset_delta, h.records_count, h.next_offset()), (100, 2, 3, 103));
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (1000, 2, 40));
        assert_eq!(h.partition_leader_epoch, 3, "the epoch the source leader appended it in");
        assert!(h.is_transactional() && !h.is_control() && h.is_contiguous());
        assert_eq!(h.compression(), 1, "gzip");
        assert_eq!(h.size(), b.len());
        assert!(crc_is_valid(&b));
    }

    #[test]
    fn rewrite_changes_only_producer_fields_keeps_the_payload_and_fixes_the_crc() {
        for compression in [Compression::None, Compression::Gzip] {
            let original = encoded(compression, true, 5, 9);
            let parts = rewrite_for_produce(&original, FIELDS).unwrap();
            assert_eq!(parts.body.as_ptr(), original[HEADER_SIZE..].as_ptr(), "the records section is not copied");
            let out = parts.to_bytes();
            assert!(crc_is_valid(&out), "CRC recomputed");
            let h = parse_header(&out).unwrap();
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (77, 0, 500));
            assert!(!h.is_transactional(), "transactional bit cleared");
            assert_eq!(&out[HEADER_SIZE..], &original[HEADER_SIZE..], "records section untouched ({compression:?})");
            let decoded = RecordBatchDecoder::decode(&mut out.clone()).unwrap();
            let keys: Vec<_> = decoded.records.iter().map(|r| r.key.clone().unwrap()).collect();
            assert_eq!(keys, (0..5).map(|i| Bytes::from(format!("k{i}"))).collect::<Vec<_>>());
            assert!(decoded.records.iter().all(|r| r.producer_id == 77 && !r.transactional));
        }
    }

    #[test]
    fn a_batch_corrupted_on_its_way_from_the_source_is_refused_not_given_a_fresh_crc() {
        for compression in [Compression::None, Compression::Lz4] {
            let original = encoded(compression, false, 5, 9);
            // A flipped bit in the records, in a covered header field, and in the CRC itself.
            for at in [original.len() - 2, HEADER_SIZE + 1, ATTRIBUTES_OFFSET + 4, CRC_OFFSET + 1] {
                let mut bad = BytesMut::from(&original[..]);
                bad[at] ^= 0x10;
                let e = rewrite_for_produce(&bad.freeze(), FIELDS).expect_err("a corrupt batch must be refused");
                assert!(e.to_string().contains("CRC"), "{compression:?} byte {at}: {e}");
            }
            // Fields outside the CRC (base offset, leader epoch) may differ: the broker sets them.
            let mut moved = BytesMut::from(&original[..]);
            moved[0..8].copy_from_slice(&1234i64.to_be_bytes());
            moved[12..16].copy_from_slice(&7i32.to_be_bytes());
            assert!(rewrite_for_produce(&moved.freeze(), FIELDS).is_ok());
        }
    }

    #[test]
    fn filler_batches_decode_as_keyed_tombstones_with_the_filler_header() {
        let b = filler_batch(5, FIELDS).unwrap();
        assert!(crc_is_valid(&b));
        let h = parse_header(&b).unwrap();
        assert_eq!((h.records_count, h.last_offset_delta, h.compression()), (5, 4, 0));
        let set = RecordBatchDecoder::decode(&mut b.clone()).unwrap();
        assert_eq!(set.records.len(), 5);
        for (i, r) in set.records.iter().enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!(r.key.as_deref(), Some(FILLER_KEY));
            assert_eq!(r.value, None);
            assert_eq!(r.headers.len(), 1);
            assert_eq!(
                r.headers.get_index(0).map(|(k, v)| (k.as_str().as_bytes(), v.as_deref())),
                Some((FILLER_HEADER, Some(&b"1"[..])))
            );
            assert_eq!(r.sequence, 500 + i as i32);
            assert_eq!(r.timestamp, FILLER_TIMESTAMP, "a filler has no time a lookup could land on");
        }
        assert_eq!((h.base_timestamp, h.max_timestamp), (FILLER_TIMESTAMP, FILLER_TIMESTAMP));
        assert!(filler_batch(0, FIELDS).is_err());
    }

    #[test]
    fn split_returns_whole_batches_and_drops_a_cut_tail() {
        let mut blob = BytesMut::new();
        blob.extend_from_slice(&encoded(Compression::None, false, 2, 0));
        blob.extend_from_slice(&encoded(Compression::Gzip, false, 3, 2));
        let third = encoded(Compression::None, false, 4, 5);
        blob.extend_from_slice(&third[..third.len() - 3]);
        let batches = split(&blob.freeze()).unwrap();
        let offsets: Vec<_> = batches.iter().map(|(h, _)| (h.base_offset, h.next_offset())).collect();
        assert_eq!(offsets, vec![(0, 2), (2, 5)]);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_header(&bytes);
            let _ = split(&Bytes::from(bytes.clone()));
            let _ = rewrite_for_produce(&Bytes::from(bytes.clone()), FIELDS);
            let _ = crc_is_valid(&bytes);
        }
    }
}
