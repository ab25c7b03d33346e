//! Tests of offset translation. Every API test builds a sample of two topics — `mirrored`, whose
//! partitions 0, 2 and 3 are shifted by [`DELTA`] and partition 1 is not, and `plain`, not
//! shifted — in every version kafka-protocol knows, translates it, and compares the decoded
//! result with the decoded sample in which exactly the listed fields were moved by hand.
//!
//! Sample values per partition of `mirrored`: 0 real offsets, 1 real offsets (unshifted), 2
//! the sentinel −1, 3 an edge: just below the start in requests, just below `i64::MAX` in
//! responses (saturates). Each offset field of a partition gets its own value (`field` number),
//! so a field translated into another's place shows.

mod commit_v10;
mod fetch;
mod groups;
mod hostile;
mod offsets;
mod records;
mod share;

use std::fmt::Debug;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use uuid::Uuid;

use super::*;

/// Δ of the shifted sample partitions.
pub(super) const DELTA: i64 = 10_000_000_000;
pub(super) const CORRELATION_ID: i32 = 42;

/// The two sample topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Topic {
    /// Partitions 0, 2, 3 shifted; 1 not.
    Mirrored,
    /// Not shifted.
    Plain,
}
use Topic::{Mirrored, Plain};

pub(super) const TOPICS: [Topic; 2] = [Mirrored, Plain];

impl Topic {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mirrored => "mirrored",
            Plain => "plain",
        }
    }
    pub(super) fn topic_name(self) -> TopicName {
        TopicName(StrBytes::from_static_str(self.name()))
    }
    pub(super) fn id(self) -> Uuid {
        Uuid::from_bytes(match self {
            Mirrored => [0xa1; 16],
            Plain => [0xb2; 16],
        })
    }
    /// The sample topic a decoded topic entry is, by name or (versions without names) by id.
    pub(super) fn of(name: &str, id: &Uuid) -> Topic {
        TOPICS
            .into_iter()
            .find(|t| t.name() == name || t.id() == *id)
            .unwrap_or_else(|| panic!("not a sample topic: {name:?} / {id}"))
    }
    pub(super) fn partitions(self) -> &'static [i32] {
        match self {
            Mirrored => &[0, 1, 2, 3],
            Plain => &[0],
        }
    }
}

/// The caller's catalog in every test: `mirrored` partitions 0, 2, 3 by name or id.
pub(super) struct Catalog;
impl Shifts for Catalog {
    fn shift(&self, topic: TopicKey<'_>, partition: i32) -> i64 {
        let mirrored = topic == TopicKey::Name(Mirrored.name()) || topic == TopicKey::Id(*Mirrored.id().as_bytes());
        if mirrored && matches!(partition, 0 | 2 | 3) { DELTA } else { 0 }
    }
}

/// A catalog without shifted partitions.
pub(super) struct NoShifts;
impl Shifts for NoShifts {
    fn shift(&self, _: TopicKey<'_>, _: i32) -> i64 {
        0
    }
}

/// A real offset: distinct per field and partition.
fn real(p: i32, field: i64) -> i64 {
    1_000 * (field + 1) + 100 * i64::from(p) + 7
}

/// Destination offset number `field` of partition `p` in a response sample.
pub(super) fn dest(t: Topic, p: i32, field: i64) -> i64 {
    match (t, p) {
        (Mirrored, 2) => -1,
        (Mirrored, 3) => i64::MAX - 1 - field,
        _ => real(p, field),
    }
}

/// What a response translation must make of [`dest`].
pub(super) fn shown(t: Topic, p: i32, field: i64) -> i64 {
    match (t, p) {
        (Mirrored, 0) => real(p, field) + DELTA,
        (Mirrored, 3) => i64::MAX,
        _ => dest(t, p, field),
    }
}

/// Client offset number `field` of partition `p` in a request sample.
pub(super) fn client(t: Topic, p: i32, field: i64) -> i64 {
    match (t, p) {
        (Mirrored, 2) => -1,
        (Mirrored, 3) => DELTA - 1 - field,
        _ => DELTA + real(p, field),
    }
}

/// What a request translation must make of [`client`], `below` being the field's value for
/// offsets below the start.
pub(super) fn sent(t: Topic, p: i32, field: i64, below: i64) -> i64 {
    match (t, p) {
        (Mirrored, 0) => real(p, field),
        (Mirrored, 3) => below,
        _ => client(t, p, field),
    }
}

pub(super) fn request_frame<T: Encodable>(key: ApiKey, version: i16, msg: &T) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.correlation_id = CORRELATION_ID;
    h.client_id = Some(StrBytes::from_static_str("offset-shift-test"));
    encode_request(&h, key, msg).unwrap_or_else(|e| panic!("{key:?} v{version} sample does not encode: {e}"))
}

pub(super) fn response_frame<T: Encodable>(key: ApiKey, version: i16, msg: &T) -> Bytes {
    encode_response(CORRELATION_ID, key, version, msg).unwrap_or_else(|e| panic!("{key:?} v{version} sample does not encode: {e}"))
}

/// For every version of `T`: the sample `build(v)` translated with [`Catalog`] decodes to the
/// decoded sample edited by `expect`, and with [`NoShifts`] is not translated at all.
pub(super) fn check_request<T>(key: ApiKey, build: impl Fn(i16) -> T, expect: impl Fn(&mut T, i16))
where
    T: Decodable + Encodable + Message + PartialEq + Debug,
{
    for v in T::VERSIONS.min..=T::VERSIONS.max {
        let frame = request_frame(key, v, &build(v));
        let (_, mut want) = decode_request::<T>(&frame, key, v).expect("the sample decodes");
        let (_, original) = decode_request::<T>(&frame, key, v).expect("the sample decodes");
        expect(&mut want, v);
        assert_ne!(want, original, "{key:?} v{v}: the test expects no change (test bug)");
        let out = shift_request(&frame, key as i16, v, &Catalog)
            .unwrap_or_else(|e| panic!("{key:?} v{v} request: {e}"))
            .unwrap_or_else(|| panic!("{key:?} v{v} request: shifted partitions were not translated"));
        let (header, got) = decode_request::<T>(&out, key, v).unwrap_or_else(|e| panic!("{key:?} v{v}: the translated request does not decode: {e}"));
        assert_eq!(
            (header.correlation_id, header.request_api_version),
            (CORRELATION_ID, v),
            "{key:?} v{v}: header kept"
        );
        assert_eq!(got, want, "{key:?} v{v} request: exactly the listed fields of shifted partitions move");
        let untouched = shift_request(&frame, key as i16, v, &NoShifts).unwrap_or_else(|e| panic!("{key:?} v{v}: {e}"));
        assert!(untouched.is_none(), "{key:?} v{v} request without shifted partitions must come back as None");
    }
}

/// [`check_request`] for responses.
pub(super) fn check_response<T>(key: ApiKey, build: impl Fn(i16) -> T, expect: impl Fn(&mut T, i16))
where
    T: Decodable + Encodable + Message + PartialEq + Debug,
{
    for v in T::VERSIONS.min..=T::VERSIONS.max {
        let frame = response_frame(key, v, &build(v));
        let (_, mut want) = decode_response::<T>(&frame, key, v).expect("the sample decodes");
        let (_, original) = decode_response::<T>(&frame, key, v).expect("the sample decodes");
        expect(&mut want, v);
        assert_ne!(want, original, "{key:?} v{v}: the test expects no change (test bug)");
        let out = shift_response(&frame, key as i16, v, &Catalog)
            .unwrap_or_else(|e| panic!("{key:?} v{v} response: {e}"))
            .unwrap_or_else(|| panic!("{key:?} v{v} response: shifted partitions were not translated"));
        let (header, got) = decode_response::<T>(&out, key, v).unwrap_or_else(|e| panic!("{key:?} v{v}: the translated response does not decode: {e}"));
        assert_eq!(header.correlation_id, CORRELATION_ID, "{key:?} v{v}: correlation id kept");
        assert_eq!(got, want, "{key:?} v{v} response: exactly the listed fields of shifted partitions move");
        let untouched = shift_response(&frame, key as i16, v, &NoShifts).unwrap_or_else(|e| panic!("{key:?} v{v}: {e}"));
        assert!(untouched.is_none(), "{key:?} v{v} response without shifted partitions must come back as None");
    }
}

/// A batch of `n` records at offsets `base..base + n`, as a broker stores it.
pub(super) fn batch(base: i64, n: i64, compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 3,
            producer_id: 77,
            producer_epoch: 1,
            timestamp_type: TimestampType::Creation,
            offset: base + i,
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("value {i}"))),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression }).expect("sample batch encodes");
    buf.freeze()
}

/// Batches of 3, 1 and 5 records from `base` on, back to back, the second one compressed.
pub(super) fn blob(base: i64) -> Bytes {
    let mut out = BytesMut::new();
    out.extend_from_slice(&batch(base, 3, Compression::None));
    out.extend_from_slice(&batch(base + 3, 1, Compression::Gzip));
    out.extend_from_slice(&batch(base + 4, 5, Compression::None));
    out.freeze()
}

#[test]
fn the_may_shift_predicates_agree_with_what_the_translators_look_at() {
    // A frame that decodes as nothing: every API the predicates name fails on it, every other
    // API is not even looked at.
    let garbage = Bytes::from_static(&[0, 0, 0, 6, 0, 0, 0, 1, 0xff, 0xff]);
    for key in ApiKey::iter() {
        let v = key.valid_versions().max;
        let req = shift_request(&garbage, key as i16, v, &Catalog);
        assert_eq!(
            req.is_err(),
            request_may_shift(key as i16),
            "{key:?} request: predicate and translation disagree"
        );
        let resp = shift_response(&garbage, key as i16, v, &Catalog);
        assert_eq!(
            resp.is_err(),
            response_may_shift(key as i16),
            "{key:?} response: predicate and translation disagree"
        );
    }
    assert!(!request_may_shift(-1) && !response_may_shift(9_999), "unknown keys are never translated");
    assert!(shift_request(&garbage, 9_999, 0, &Catalog).expect("unknown key").is_none());
}

#[test]
fn a_request_whose_header_names_another_version_is_refused_not_re_encoded_at_the_wrong_one() {
    use kafka_protocol::messages::DeleteRecordsRequest;
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    let mut r = DeleteRecordsRequest::default();
    r.topics.push(
        DeleteRecordsTopic::default()
            .with_name(Mirrored.topic_name())
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(DELTA + 5)]),
    );
    let frame = request_frame(ApiKey::DeleteRecords, 1, &r);
    // v0 and v1 share their layout, so the body decodes at either; the header says v1.
    let err = shift_request(&frame, ApiKey::DeleteRecords as i16, 0, &Catalog).expect_err("header v1, caller v0");
    assert_eq!(err.side(), crate::error::Side::Client);
}
