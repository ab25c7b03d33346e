//! The decode budget (issue #35, N1): what a frame decodes into is bounded by a small multiple of
//! its size. Before it, an 8 MiB AlterConfigs v2 of 2,097,143 empty BROKER resources decoded into
//! hundreds of megabytes of structs (each 4-byte resource a ~90-byte struct) and the proxy
//! answered it with 572 MiB.
//!
//! * Property: for every API the proxy decodes, requests and responses, every version
//!   kafka-protocol knows, hostile bodies built for the most structs per byte (a huge count, then
//!   the same short element over and over, in both count encodings, and seeded random bytes) decode
//!   or fail — and every byte the decode allocates, counted by an instrumented allocator, stays
//!   within `codec::decode_limit` of the frame.
//! * Real shapes still decode: requests as tools send them (thousands of topics, partitions,
//!   resources) fit well within the factors.

use std::alloc::System;
use std::sync::Mutex;

use bytes::{BufMut, Bytes, BytesMut};
use kmp_protocol::codec::{self, REQUEST_DECODE_FACTOR, RESPONSE_DECODE_FACTOR, decode_limit};
use kmp_protocol::kafka_protocol::messages::*;
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

// ---- heap measured --------------------------------------------------------------------------------

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One test at a time: the allocator's counters are process-wide, so another test's allocations
/// would count in this one's measurements.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` and returns what it returned and every byte it allocated (an upper bound of the most
/// it held at once).
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let region = Region::new(GLOBAL);
    let r = f();
    let c = region.change();
    (r, c.bytes_allocated + c.bytes_reallocated.max(0) as usize)
}

// ---- frames -------------------------------------------------------------------------------------

fn request_frame(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.correlation_id = 1;
    h.client_id = Some(StrBytes::from_static_str("budget"));
    let hv = key.request_header_version(version);
    let mut b = BytesMut::new();
    b.put_i32(0);
    h.encode(&mut b, hv).expect("header encodes");
    b.put_slice(body);
    let len = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

fn response_frame(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut h = ResponseHeader::default();
    h.correlation_id = 1;
    let hv = key.response_header_version(version);
    let mut b = BytesMut::new();
    b.put_i32(0);
    h.encode(&mut b, hv).expect("header encodes");
    b.put_slice(body);
    let len = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

/// Bodies with the most elements per byte: a huge count (i32 and unsigned varint forms) before a
/// repeated short element, and seeded random bytes.
fn hostile_bodies(len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let patterns: [&[u8]; 5] = [&[0x00], &[0x01], &[0x00, 0x01], &[0x01, 0x00, 0x00], &[0x02, 0x01, 0x01]];
    for prefix in [
        &0x7fff_ffffi32.to_be_bytes()[..],
        &[0xff, 0xff, 0xff, 0xff, 0x07][..],
        &[0x00, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff][..],
    ] {
        for p in patterns {
            let mut b = prefix.to_vec();
            while b.len() < len {
                b.extend_from_slice(p);
            }
            out.push(b);
        }
    }
    // xorshift: random bytes that still lean toward small values (short elements).
    let mut x = seed | 1;
    for _ in 0..4 {
        let mut b = Vec::with_capacity(len);
        while b.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(if x.is_multiple_of(4) { (x >> 8) as u8 } else { (x >> 8) as u8 & 0x03 });
        }
        out.push(b);
    }
    out
}

const BODY_BYTES: usize = 64 * 1024;

/// What building a decode error allocates (its message, and a backtrace where RUST_BACKTRACE asks
/// for one): a failed decode may take this beyond its budget, once.
fn error_cost() -> usize {
    let frame = request_frame(ApiKey::Metadata, 12, &[]);
    let (r, cost) = peak_of(|| codec::decode_request::<MetadataRequest>(&frame, ApiKey::Metadata, 12).map(|_| ()));
    assert!(r.is_err(), "an empty Metadata body fails to decode");
    cost * 2
}

fn check_requests<T: Decodable + Message>(key: ApiKey) {
    let error = error_cost();
    for v in T::VERSIONS.min..=T::VERSIONS.max {
        for (i, body) in hostile_bodies(BODY_BYTES, 0x9e37_79b9 ^ (key as u64) << 8 ^ v as u64).into_iter().enumerate() {
            let frame = request_frame(key, v, &body);
            let (r, peak) = peak_of(|| codec::decode_request::<T>(&frame, key, v).map(|_| ()));
            let limit = decode_limit(frame.len(), REQUEST_DECODE_FACTOR) + if r.is_err() { error } else { 0 };
            assert!(
                peak <= limit,
                "{key:?} v{v} request body #{i} of {} bytes took {peak} bytes of heap while decoding, over its budget of {limit}",
                frame.len()
            );
        }
    }
}

fn check_responses<T: Decodable + Message>(key: ApiKey) {
    let error = error_cost();
    for v in T::VERSIONS.min..=T::VERSIONS.max {
        for (i, body) in hostile_bodies(BODY_BYTES, 0x85eb_ca6b ^ (key as u64) << 8 ^ v as u64).into_iter().enumerate() {
            let frame = response_frame(key, v, &body);
            let (r, peak) = peak_of(|| codec::decode_response::<T>(&frame, key, v).map(|_| ()));
            let limit = decode_limit(frame.len(), RESPONSE_DECODE_FACTOR) + if r.is_err() { error } else { 0 };
            assert!(
                peak <= limit,
                "{key:?} v{v} response body #{i} of {} bytes took {peak} bytes of heap while decoding, over its budget of {limit}",
                frame.len()
            );
        }
    }
}

#[test]
fn every_request_the_proxy_decodes_stays_within_its_decode_budget() {
    let _serial = serial();
    check_requests::<ProduceRequest>(ApiKey::Produce);
    check_requests::<FetchRequest>(ApiKey::Fetch);
    check_requests::<ShareFetchRequest>(ApiKey::ShareFetch);
    check_requests::<ShareAcknowledgeRequest>(ApiKey::ShareAcknowledge);
    check_requests::<DeleteTopicsRequest>(ApiKey::DeleteTopics);
    check_requests::<CreateTopicsRequest>(ApiKey::CreateTopics);
    check_requests::<CreatePartitionsRequest>(ApiKey::CreatePartitions);
    check_requests::<DeleteRecordsRequest>(ApiKey::DeleteRecords);
    check_requests::<AlterConfigsRequest>(ApiKey::AlterConfigs);
    check_requests::<IncrementalAlterConfigsRequest>(ApiKey::IncrementalAlterConfigs);
    check_requests::<DescribeConfigsRequest>(ApiKey::DescribeConfigs);
    check_requests::<AddPartitionsToTxnRequest>(ApiKey::AddPartitionsToTxn);
    check_requests::<AlterPartitionReassignmentsRequest>(ApiKey::AlterPartitionReassignments);
    check_requests::<AlterReplicaLogDirsRequest>(ApiKey::AlterReplicaLogDirs);
    check_requests::<ElectLeadersRequest>(ApiKey::ElectLeaders);
    check_requests::<SaslHandshakeRequest>(ApiKey::SaslHandshake);
    check_requests::<SaslAuthenticateRequest>(ApiKey::SaslAuthenticate);
    check_requests::<FindCoordinatorRequest>(ApiKey::FindCoordinator);
    check_requests::<JoinGroupRequest>(ApiKey::JoinGroup);
    check_requests::<SyncGroupRequest>(ApiKey::SyncGroup);
    check_requests::<HeartbeatRequest>(ApiKey::Heartbeat);
    check_requests::<LeaveGroupRequest>(ApiKey::LeaveGroup);
    check_requests::<DescribeGroupsRequest>(ApiKey::DescribeGroups);
    check_requests::<DeleteGroupsRequest>(ApiKey::DeleteGroups);
    check_requests::<OffsetCommitRequest>(ApiKey::OffsetCommit);
    check_requests::<OffsetFetchRequest>(ApiKey::OffsetFetch);
    check_requests::<OffsetDeleteRequest>(ApiKey::OffsetDelete);
    check_requests::<TxnOffsetCommitRequest>(ApiKey::TxnOffsetCommit);
    check_requests::<ConsumerGroupHeartbeatRequest>(ApiKey::ConsumerGroupHeartbeat);
    check_requests::<ConsumerGroupDescribeRequest>(ApiKey::ConsumerGroupDescribe);
    check_requests::<AlterClientQuotasRequest>(ApiKey::AlterClientQuotas);
    check_requests::<CreateAclsRequest>(ApiKey::CreateAcls);
    check_requests::<DeleteAclsRequest>(ApiKey::DeleteAcls);
    check_requests::<AlterUserScramCredentialsRequest>(ApiKey::AlterUserScramCredentials);
    check_requests::<CreateDelegationTokenRequest>(ApiKey::CreateDelegationToken);
    check_requests::<MetadataRequest>(ApiKey::Metadata);
    check_requests::<ListOffsetsRequest>(ApiKey::ListOffsets);
}

#[test]
fn every_response_the_proxy_and_engine_decode_stays_within_its_decode_budget() {
    let _serial = serial();
    check_responses::<MetadataResponse>(ApiKey::Metadata);
    check_responses::<FindCoordinatorResponse>(ApiKey::FindCoordinator);
    check_responses::<DescribeClusterResponse>(ApiKey::DescribeCluster);
    check_responses::<ApiVersionsResponse>(ApiKey::ApiVersions);
    check_responses::<FetchResponse>(ApiKey::Fetch);
    check_responses::<ShareFetchResponse>(ApiKey::ShareFetch);
    check_responses::<ShareAcknowledgeResponse>(ApiKey::ShareAcknowledge);
    check_responses::<ProduceResponse>(ApiKey::Produce);
    check_responses::<SaslAuthenticateResponse>(ApiKey::SaslAuthenticate);
    check_responses::<DescribeConfigsResponse>(ApiKey::DescribeConfigs);
    check_responses::<AlterConfigsResponse>(ApiKey::AlterConfigs);
    check_responses::<IncrementalAlterConfigsResponse>(ApiKey::IncrementalAlterConfigs);
    check_responses::<CreateTopicsResponse>(ApiKey::CreateTopics);
    check_responses::<DeleteTopicsResponse>(ApiKey::DeleteTopics);
    check_responses::<CreatePartitionsResponse>(ApiKey::CreatePartitions);
    check_responses::<DeleteRecordsResponse>(ApiKey::DeleteRecords);
    check_responses::<AlterPartitionReassignmentsResponse>(ApiKey::AlterPartitionReassignments);
    check_responses::<AlterReplicaLogDirsResponse>(ApiKey::AlterReplicaLogDirs);
    check_responses::<ElectLeadersResponse>(ApiKey::ElectLeaders);
    check_responses::<ListOffsetsResponse>(ApiKey::ListOffsets);
    check_responses::<OffsetFetchResponse>(ApiKey::OffsetFetch);
    check_responses::<DescribeGroupsResponse>(ApiKey::DescribeGroups);
    check_responses::<ListGroupsResponse>(ApiKey::ListGroups);
    check_responses::<JoinGroupResponse>(ApiKey::JoinGroup);
}

/// The finding's frame: AlterConfigs v1 with 2,097,143 BROKER resources named "" (8 MiB), each
/// seven bytes decoding into an 88-byte struct. It decodes within its budget (16× its size; it
/// took 2.6 GiB in the proxy before), and the same resources in four bytes each (v2, compact) are
/// refused by the budget before they are built.
#[test]
fn an_8_mib_alter_configs_of_two_million_empty_resources_decodes_within_its_budget_or_is_refused() {
    let _serial = serial();
    let count: i32 = 2_097_143;
    let mut body = BytesMut::new();
    body.put_i32(count);
    for _ in 0..count {
        body.put_i8(4); // BROKER
        body.put_i16(0); // name ""
        body.put_i32(0); // no configs
    }
    body.put_i8(0); // validate_only
    let frame = request_frame(ApiKey::AlterConfigs, 1, &body);
    let (r, peak) = peak_of(|| codec::decode_request::<AlterConfigsRequest>(&frame, ApiKey::AlterConfigs, 1).map(|_| ()));
    assert!(r.is_ok(), "v1 (seven bytes a resource) fits the budget: {r:?}");
    assert!(
        peak <= decode_limit(frame.len(), REQUEST_DECODE_FACTOR),
        "decoding took {peak} bytes of heap for a frame of {} bytes",
        frame.len()
    );

    let mut compact = BytesMut::new();
    compact.put_slice(&[0x80, 0x80, 0x80, 0x01]); // 2^21 resources + 1
    for _ in 0..(1 << 21) {
        compact.put_slice(&[4, 1, 1, 0]); // BROKER, "", no configs, no tagged fields
    }
    compact.put_slice(&[0, 0]); // validate_only, no tagged fields
    let frame = request_frame(ApiKey::AlterConfigs, 2, &compact);
    let (r, peak) = peak_of(|| codec::decode_request::<AlterConfigsRequest>(&frame, ApiKey::AlterConfigs, 2).map(|_| ()));
    let err = r.expect_err("four-byte resources decoding into 88-byte structs exceed the budget").to_string();
    assert!(err.contains("decode budget"), "the error names the budget: {err}");
    assert!(
        peak <= decode_limit(frame.len(), REQUEST_DECODE_FACTOR) + error_cost(),
        "refusing it took {peak} bytes of heap for a frame of {} bytes",
        frame.len()
    );
}

// ---- real shapes --------------------------------------------------------------------------------

fn topic(i: usize) -> StrBytes {
    StrBytes::from_string(format!("orders.eu-{i:05}"))
}

fn encode_request<T: Encodable>(key: ApiKey, version: i16, req: &T) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.client_id = Some(StrBytes::from_static_str("adminclient-1"));
    codec::encode_request(&h, key, req).expect("encodes")
}

fn decodes_within<T: Decodable>(what: &str, key: ApiKey, version: i16, frame: &Bytes) {
    let (r, peak) = peak_of(|| codec::decode_request::<T>(frame, key, version).map(|_| ()));
    if let Err(e) = r {
        panic!("{what} ({} bytes) was refused: {e}", frame.len());
    }
    let ratio = peak as f64 / frame.len() as f64;
    assert!(
        ratio <= REQUEST_DECODE_FACTOR as f64 * 0.75,
        "{what} v{version} decoded into {ratio:.1}× its size: too close to the budget of {REQUEST_DECODE_FACTOR}×"
    );
}

#[test]
fn requests_as_real_tools_send_them_decode_well_within_the_budget() {
    let _serial = serial();
    use kmp_protocol::kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    use kmp_protocol::kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kmp_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kmp_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kmp_protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};

    let mut describe = DescribeConfigsRequest::default();
    for i in 0..20_000 {
        let mut r = DescribeConfigsResource::default();
        r.resource_type = 2;
        r.resource_name = topic(i);
        describe.resources.push(r);
    }
    for v in [1, 4] {
        decodes_within::<DescribeConfigsRequest>(
            "DescribeConfigs of 20,000 topics",
            ApiKey::DescribeConfigs,
            v,
            &encode_request(ApiKey::DescribeConfigs, v, &describe),
        );
    }

    // kafka-reassign-partitions --cancel: every partition with replicas null (the leanest shape).
    let mut cancel = AlterPartitionReassignmentsRequest::default();
    for t in 0..200 {
        let mut rt = ReassignableTopic::default();
        rt.name = TopicName(topic(t));
        for p in 0..50 {
            let mut rp = ReassignablePartition::default();
            rp.partition_index = p;
            rp.replicas = None;
            rt.partitions.push(rp);
        }
        cancel.topics.push(rt);
    }
    decodes_within::<AlterPartitionReassignmentsRequest>(
        "a reassignment cancel of 10,000 partitions",
        ApiKey::AlterPartitionReassignments,
        0,
        &encode_request(ApiKey::AlterPartitionReassignments, 0, &cancel),
    );

    let mut delete = DeleteRecordsRequest::default();
    for t in 0..100 {
        let mut dt = DeleteRecordsTopic::default();
        dt.name = TopicName(topic(t));
        for p in 0..100 {
            let mut dp = DeleteRecordsPartition::default();
            dp.partition_index = p;
            dp.offset = 1_000_000;
            dt.partitions.push(dp);
        }
        delete.topics.push(dt);
    }
    for v in [1, 2] {
        decodes_within::<DeleteRecordsRequest>(
            "DeleteRecords of 10,000 partitions",
            ApiKey::DeleteRecords,
            v,
            &encode_request(ApiKey::DeleteRecords, v, &delete),
        );
    }

    let mut fetch = FetchRequest::default();
    for t in 0..50 {
        let mut ft = FetchTopic::default();
        ft.topic = TopicName(topic(t));
        ft.topic_id = uuid::Uuid::from_bytes([t as u8; 16]);
        for p in 0..40 {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = 123_456;
            fp.partition_max_bytes = 1 << 20;
            ft.partitions.push(fp);
        }
        fetch.topics.push(ft);
    }
    for v in [11, 13, 17] {
        decodes_within::<FetchRequest>(
            "a consumer's Fetch of 2,000 partitions",
            ApiKey::Fetch,
            v,
            &encode_request(ApiKey::Fetch, v, &fetch),
        );
    }

    let mut produce = ProduceRequest::default();
    produce.acks = -1;
    for t in 0..20 {
        let mut td = TopicProduceData::default();
        td.name = TopicName(topic(t));
        for p in 0..50 {
            let mut pd = PartitionProduceData::default();
            pd.index = p;
            pd.records = Some(Bytes::from(vec![0u8; 100]));
            td.partition_data.push(pd);
        }
        produce.topic_data.push(td);
    }
    for v in [3, 9, 12] {
        decodes_within::<ProduceRequest>(
            "a Produce of 1,000 small batches",
            ApiKey::Produce,
            v,
            &encode_request(ApiKey::Produce, v, &produce),
        );
    }
}
