//! Round trips that cross RPC families: each test encodes and decodes several of the message
//! types, so none belongs to a single submodule. Tests of one family alone live beside its code
//! (e.g. the `topics` tests); no production code belongs here.

use super::*;

#[test]
fn start_create_and_delete_requests_round_trip() {
    let start = TopicsRequest {
        mirror_name: "dr".into(),
        topics: vec!["a".into()],
        patterns: vec!["o-.*".into()],
        exclude_patterns: vec!["o-tmp".into()],
        state_validation_offset: -1,
    };
    let f = request_frame(START_MIRROR_TOPICS, 1, "c", start.encode(START_MIRROR_TOPICS));
    let (_, mut r) = read_request(&f).unwrap();
    assert_eq!(TopicsRequest::decode(&mut r, START_MIRROR_TOPICS).unwrap(), start);
    let create = CreateRequest {
        mirror_name: "dr".into(),
        configs: vec![("bootstrap.servers".into(), Some("s:1".into())), ("x".into(), None)],
    };
    let f = request_frame(CREATE_CLUSTER_MIRROR, 2, "c", create.encode());
    let (_, mut r) = read_request(&f).unwrap();
    assert_eq!(CreateRequest::decode(&mut r).unwrap(), create);
    let delete = DeleteRequest {
        mirror_name: "dr".into(),
        state_validation_offset: -1,
    };
    let f = request_frame(DELETE_CLUSTER_MIRROR, 3, "c", delete.encode());
    let (_, mut r) = read_request(&f).unwrap();
    assert_eq!(DeleteRequest::decode(&mut r).unwrap(), delete);
    let resp = SimpleResponse {
        throttle_time_ms: 0,
        error_code: 136,
        error_message: Some("exists".into()),
    };
    let f = response_frame(4, resp.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(SimpleResponse::decode(&mut r).unwrap(), resp);
}

#[test]
fn responses_round_trip() {
    let t = TopicsResponse {
        topics: vec![TopicResult {
            name: "a".into(),
            error_code: 139,
            error_message: Some("no".into()),
        }],
        ..Default::default()
    };
    let f = response_frame(3, t.encode());
    let (cid, mut r) = read_response(&f).unwrap();
    assert_eq!((cid, TopicsResponse::decode(&mut r).unwrap()), (3, t));
    let l = ListResponse {
        mirrors: vec![ListedMirror {
            mirror_name: "dr".into(),
            source_bootstrap: "s:1".into(),
            source_cluster_id: String::new(),
            topic_count: 1,
            topic_names: vec!["a".into()],
        }],
        ..Default::default()
    };
    let f = response_frame(4, l.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(ListResponse::decode(&mut r).unwrap(), l);
    let d = DescribeResponse {
        mirrors: vec![DescribedMirror {
            error_code: 0,
            mirror_name: "dr".into(),
            authorized_operations: i32::MIN,
            topics: vec![(
                "a".into(),
                vec![PartitionDetail {
                    partition_index: 0,
                    source_offset: 10,
                    destination_offset: 9,
                    lag: 1,
                    state_value: "MIRRORING".into(),
                    retry_attempt: 0,
                    error_message: None,
                    progress: None,
                    last_mirror: None,
                }],
            )],
            sync: Vec::new(),
        }],
        ..Default::default()
    };
    let f = response_frame(5, d.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(DescribeResponse::decode(&mut r).unwrap(), d);
    // With the proxy's sync status extension (a tagged field) on the first of two mirrors.
    let mut two = d.clone();
    two.mirrors[0].sync = vec![SyncEntry {
        kind: "group_offsets".into(),
        interval_ms: 10_000,
        runs: 3,
        last_run_ms: 5,
        last_success_ms: 4,
        synced: 2,
        skipped_active: 1,
        applied_total: 7,
        errors_total: 1,
        last_error: Some("x".into()),
    }];
    // … and the copy progress extension on its partition.
    two.mirrors[0].topics[0].1[0].progress = Some(PartitionProgress {
        records_mirrored: 1_000,
        bytes_mirrored: 64_000,
        window_ms: 10_000,
        window_records: 500,
        window_bytes: 32_000,
    });
    two.mirrors.push(DescribedMirror {
        mirror_name: "other".into(),
        ..d.mirrors[0].clone()
    });
    // … and which instance answered.
    two.engine = Some(EngineIdentity {
        instance_id: "proxy-b".into(),
        role: "auto".into(),
        active: false,
        generation: 7,
        active_instance: "proxy-a".into(),
        share: None,
    });
    let f = response_frame(6, two.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(DescribeResponse::decode(&mut r).unwrap(), two);
    // With shared work the identity carries the share (a tagged field inside it).
    let mut sharing = two.clone();
    if let Some(e) = sharing.engine.as_mut() {
        e.share = Some((1, 3));
    }
    let f = response_frame(6, sharing.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(DescribeResponse::decode(&mut r).unwrap(), sharing);
    // … and a stopped partition's line, with a failback's lookup answered (two tags on the
    // partition entry, two at the top, each section in tag order).
    let mut stopped = two.clone();
    stopped.mirrors[0].topics[0].1[0].last_mirror = Some(LastMirror { epoch: 4, offset: 10 });
    stopped.lookup_results = vec![([7; 16], vec![(0, 4), (1, -1)])];
    let f = response_frame(7, stopped.encode());
    let (_, mut r) = read_response(&f).unwrap();
    assert_eq!(DescribeResponse::decode(&mut r).unwrap(), stopped);
    let mut q = DescribeRequest {
        mirror_names: vec!["dr".into()],
        include_authorized_operations: false,
        ..Default::default()
    };
    let f = request_frame(DESCRIBE_CLUSTER_MIRRORS, 1, "c", q.encode());
    let (_, mut r) = read_request(&f).unwrap();
    assert_eq!(DescribeRequest::decode(&mut r).unwrap(), q);
    // A failback's lookup: the asking cluster's id and the partitions of its topic ids.
    q.cluster_id = Some("AAAAAAAAAAAAAAAAAAAAAA".into());
    q.epoch_lookups = vec![([1; 16], vec![0, 2]), ([2; 16], Vec::new())];
    let f = request_frame(DESCRIBE_CLUSTER_MIRRORS, 1, "c", q.encode());
    let (_, mut r) = read_request(&f).unwrap();
    assert_eq!(DescribeRequest::decode(&mut r).unwrap(), q);
}

#[test]
fn a_describe_request_with_a_lookup_count_beyond_its_bytes_is_refused_before_it_allocates() {
    let mut lookups = W::default();
    lookups.uvarint(u32::MAX); // compact array of 2^32 - 2 entries, and nothing after it
    let mut body = W::default();
    body.strs(&[]).bool(false).tagged(1, lookups);
    let f = request_frame(DESCRIBE_CLUSTER_MIRRORS, 1, "c", body);
    let (_, mut r) = read_request(&f).unwrap();
    assert!(DescribeRequest::decode(&mut r).is_err(), "a count the bytes cannot hold");
}

#[test]
fn an_engine_identity_reads_with_or_without_a_share_and_a_short_share_is_left_out() {
    let id = |share| EngineIdentity {
        instance_id: "p".into(),
        role: "auto".into(),
        active: true,
        generation: 3,
        active_instance: "p".into(),
        share,
    };
    for e in [id(None), id(Some((2, 3)))] {
        let bytes = e.encode_value().finish();
        assert_eq!(EngineIdentity::decode_value(&bytes).expect("decode"), e);
    }
    // An identity of an earlier version: the same fields, an empty tag section or none at all.
    let mut old = W::default();
    old.str("p").str("auto").bool(true).i32(3).str("p");
    let untagged = old.finish();
    assert_eq!(EngineIdentity::decode_value(&untagged).expect("no tag section"), id(None));
    let mut old = W::default();
    old.str("p").str("auto").bool(true).i32(3).str("p").tags();
    assert_eq!(EngineIdentity::decode_value(&old.finish()).expect("empty tag section"), id(None));
    // A share tag too short for its two numbers (a hostile or garbled peer): left out.
    let mut short = W::default();
    let mut half = W::default();
    half.i32(2);
    short.str("p").str("auto").bool(true).i32(3).str("p").tagged(0, half);
    assert_eq!(EngineIdentity::decode_value(&short.finish()).expect("short share"), id(None));
}
