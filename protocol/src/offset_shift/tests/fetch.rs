//! Fetch requests and responses, every version.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData, SnapshotId};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use proptest::prelude::*;

use super::*;

fn fetch_request(v: i16, offset: impl Fn(Topic, i32, i64) -> i64) -> FetchRequest {
    let mut r = FetchRequest::default().with_max_wait_ms(500).with_min_bytes(1).with_max_bytes(1 << 20);
    for t in TOPICS {
        let mut topic = if v >= 13 {
            FetchTopic::default().with_topic_id(t.id())
        } else {
            FetchTopic::default().with_topic(t.topic_name())
        };
        for &p in t.partitions() {
            topic.partitions.push(
                FetchPartition::default()
                    .with_partition(p)
                    .with_current_leader_epoch(4)
                    .with_fetch_offset(offset(t, p, 0))
                    .with_log_start_offset(offset(t, p, 1))
                    .with_partition_max_bytes(1 << 16)
                    .with_high_watermark(offset(t, p, 2)),
            );
        }
        r.topics.push(topic);
    }
    r
}

#[test]
fn fetch_request_positions_move_down_and_those_below_the_start_become_minus_one_in_every_version() {
    check_request::<FetchRequest>(
        ApiKey::Fetch,
        |v| fetch_request(v, client),
        |r, v| {
            for t in &mut r.topics {
                let topic = Topic::of(&t.topic, &t.topic_id);
                for p in &mut t.partitions {
                    let i = p.partition;
                    p.fetch_offset = sent(topic, i, 0, -1);
                    if v >= 5 {
                        p.log_start_offset = sent(topic, i, 1, -1);
                    }
                    if v >= 18 {
                        p.high_watermark = sent(topic, i, 2, -1);
                    }
                }
            }
        },
    );
}

#[test]
fn a_followers_high_watermark_meaning_not_supported_is_kept() {
    let r = fetch_request(18, |t, p, field| if field == 2 { i64::MAX } else { client(t, p, field) });
    let frame = request_frame(ApiKey::Fetch, 18, &r);
    let out = shift_request(&frame, ApiKey::Fetch as i16, 18, &Catalog)
        .expect("translates")
        .expect("fetch offsets move");
    let (_, got) = decode_request::<FetchRequest>(&out, ApiKey::Fetch, 18).expect("decodes");
    assert!(
        got.topics.iter().flat_map(|t| &t.partitions).all(|p| p.high_watermark == i64::MAX),
        "i64::MAX (not supported) is not an offset"
    );
}

pub(super) fn fetch_response(v: i16) -> FetchResponse {
    let mut r = FetchResponse::default().with_throttle_time_ms(3).with_session_id(if v >= 7 { 11 } else { 0 });
    for t in TOPICS {
        let mut topic = if v >= 13 {
            FetchableTopicResponse::default().with_topic_id(t.id())
        } else {
            FetchableTopicResponse::default().with_topic(t.topic_name())
        };
        for &p in t.partitions() {
            let mut pd = PartitionData::default()
                .with_partition_index(p)
                .with_high_watermark(dest(t, p, 0))
                .with_last_stable_offset(dest(t, p, 1))
                .with_log_start_offset(if v >= 5 { dest(t, p, 2) } else { -1 })
                .with_aborted_transactions(Some(vec![
                    AbortedTransaction::default().with_producer_id(ProducerId(9)).with_first_offset(dest(t, p, 3)),
                ]))
                .with_records((dest(t, p, 0) >= 0 && dest(t, p, 0) < 1 << 40).then(|| blob(dest(t, p, 0))));
            if v >= 12 {
                pd.diverging_epoch = EpochEndOffset::default().with_epoch(2).with_end_offset(dest(t, p, 4));
                // A KRaft snapshot id is not an offset of a client topic: it must stay.
                pd.snapshot_id = SnapshotId::default().with_epoch(1).with_end_offset(dest(t, p, 5));
            }
            topic.partitions.push(pd);
        }
        r.responses.push(topic);
    }
    r
}

#[test]
fn fetch_response_offsets_and_every_batch_base_offset_move_up_in_every_version() {
    check_response::<FetchResponse>(ApiKey::Fetch, fetch_response, |r, v| {
        for t in &mut r.responses {
            let topic = Topic::of(&t.topic, &t.topic_id);
            for p in &mut t.partitions {
                let i = p.partition_index;
                p.high_watermark = shown(topic, i, 0);
                p.last_stable_offset = shown(topic, i, 1);
                if v >= 5 {
                    p.log_start_offset = shown(topic, i, 2);
                }
                for a in p.aborted_transactions.iter_mut().flatten() {
                    a.first_offset = shown(topic, i, 3);
                }
                if v >= 12 {
                    p.diverging_epoch.end_offset = shown(topic, i, 4);
                }
                if p.records.is_some() {
                    p.records = Some(blob(shown(topic, i, 0)));
                }
            }
        }
    });
}

#[test]
fn a_trailing_partial_batch_is_left_as_the_broker_sent_it() {
    let whole = blob(500);
    let partial = batch(509, 4, Compression::None);
    let cut = partial.len() - 7;
    let mut records = BytesMut::from(&whole[..]);
    records.extend_from_slice(&partial[..cut]);
    let mut r = FetchResponse::default();
    r.responses.push(
        FetchableTopicResponse::default()
            .with_topic(Mirrored.topic_name())
            .with_partitions(vec![PartitionData::default().with_partition_index(0).with_records(Some(records.freeze()))]),
    );
    let frame = response_frame(ApiKey::Fetch, 12, &r);
    let out = shift_response(&frame, ApiKey::Fetch as i16, 12, &Catalog)
        .expect("translates")
        .expect("batches move");
    let (_, got) = decode_response::<FetchResponse>(&out, ApiKey::Fetch, 12).expect("decodes");
    let got = got.responses[0].partitions[0].records.clone().expect("records kept");
    assert_eq!(&got[..whole.len()], &blob(500 + DELTA)[..], "the whole batches moved");
    assert_eq!(&got[whole.len()..], &partial[..cut], "the partial batch is untouched");
}

#[test]
fn a_fetch_response_of_only_sentinels_on_shifted_partitions_is_not_re_encoded() {
    let mut r = FetchResponse::default();
    r.responses
        .push(FetchableTopicResponse::default().with_topic(Mirrored.topic_name()).with_partitions(vec![
        PartitionData::default().with_partition_index(0).with_high_watermark(-1).with_records(Some(Bytes::new())),
    ]));
    let frame = response_frame(ApiKey::Fetch, 11, &r);
    assert!(shift_response(&frame, ApiKey::Fetch as i16, 11, &Catalog).expect("translates").is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A consumer that fetches from `s` gets the batch at destination offset `s − Δ` shown at `s`.
    #[test]
    fn a_fetch_position_from_the_start_on_comes_back_as_the_same_offset(above in 0i64..1 << 50, v in 4i16..=18) {
        let s = DELTA + above;
        let mut req = fetch_request(v, client);
        req.topics[0].partitions[0].fetch_offset = s;
        let frame = request_frame(ApiKey::Fetch, v, &req);
        let out = shift_request(&frame, ApiKey::Fetch as i16, v, &Catalog).expect("translates").expect("moves");
        let (_, got) = decode_request::<FetchRequest>(&out, ApiKey::Fetch, v).expect("decodes");
        let d = got.topics[0].partitions[0].fetch_offset;
        prop_assert_eq!(d, above, "destination position");

        let mut resp = FetchResponse::default();
        let topic = if v >= 13 { FetchableTopicResponse::default().with_topic_id(Mirrored.id()) } else { FetchableTopicResponse::default().with_topic(Mirrored.topic_name()) };
        resp.responses.push(topic.with_partitions(vec![PartitionData::default().with_partition_index(0).with_high_watermark(d + 9).with_records(Some(blob(d)))]));
        let frame = response_frame(ApiKey::Fetch, v, &resp);
        let out = shift_response(&frame, ApiKey::Fetch as i16, v, &Catalog).expect("translates").expect("moves");
        let (_, got) = decode_response::<FetchResponse>(&out, ApiKey::Fetch, v).expect("decodes");
        let p = &got.responses[0].partitions[0];
        prop_assert_eq!(p.high_watermark, s + 9);
        let mut records = p.records.clone().expect("records");
        let first = kafka_protocol::records::RecordBatchDecoder::decode(&mut records).expect("the moved batch decodes, CRC valid");
        prop_assert_eq!(first.records[0].offset, s, "the first record is shown at the position fetched");
    }
}

/// One partition of a generated Fetch response: which sample partition it is and what it
/// carries (offset fields as drawn, including sentinels and values near `i64::MAX`).
#[derive(Debug, Clone)]
struct Drawn {
    topic: Topic,
    partition: i32,
    offsets: [i64; 4],
    aborted: Option<Vec<i64>>,
    records: Option<(i64, bool)>,
    diverging: Option<i64>,
    leader_hint: bool,
    snapshot: bool,
}

fn an_offset() -> impl Strategy<Value = i64> {
    prop_oneof![Just(-1i64), Just(0i64), 0i64..1 << 40, (i64::MAX - 5)..=i64::MAX, any::<i64>()]
}

fn a_partition() -> impl Strategy<Value = Drawn> {
    (
        prop_oneof![Just(Mirrored), Just(Plain)],
        0i32..4,
        [an_offset(), an_offset(), an_offset(), an_offset()],
        proptest::option::of(proptest::collection::vec(an_offset(), 0..3)),
        proptest::option::of((0i64..1 << 40, any::<bool>())),
        proptest::option::of(an_offset()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(topic, partition, offsets, aborted, records, diverging, leader_hint, snapshot)| Drawn {
            topic,
            partition,
            offsets,
            aborted,
            records,
            diverging,
            leader_hint,
            snapshot,
        })
}

/// A Fetch response of version `v` with `parts` grouped by topic, as a broker would send it.
fn drawn_response(v: i16, parts: &[Drawn], endpoints: bool) -> FetchResponse {
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::fetch_response::{LeaderIdAndEpoch, NodeEndpoint};
    let mut r = FetchResponse::default().with_throttle_time_ms(1).with_session_id(if v >= 7 { 5 } else { 0 });
    for t in TOPICS {
        let mut topic = if v >= 13 {
            FetchableTopicResponse::default().with_topic_id(t.id())
        } else {
            FetchableTopicResponse::default().with_topic(t.topic_name())
        };
        for d in parts.iter().filter(|d| d.topic == t) {
            let mut pd = PartitionData::default()
                .with_partition_index(d.partition)
                .with_high_watermark(d.offsets[0])
                .with_last_stable_offset(d.offsets[1])
                .with_log_start_offset(if v >= 5 { d.offsets[2] } else { -1 })
                .with_aborted_transactions(d.aborted.as_ref().map(|a| {
                    a.iter()
                        .map(|&o| AbortedTransaction::default().with_producer_id(ProducerId(3)).with_first_offset(o))
                        .collect()
                }))
                .with_preferred_read_replica(BrokerId(if v >= 11 { 2 } else { -1 }))
                .with_records(d.records.map(|(base, cut)| {
                    let whole = blob(base);
                    if cut { whole.slice(..whole.len() - 5) } else { whole }
                }));
            if v >= 12 {
                if let Some(end) = d.diverging {
                    pd.diverging_epoch = EpochEndOffset::default().with_epoch(4).with_end_offset(end);
                }
                if d.leader_hint {
                    pd.current_leader = LeaderIdAndEpoch::default().with_leader_id(BrokerId(1)).with_leader_epoch(7);
                }
                if d.snapshot {
                    pd.snapshot_id = SnapshotId::default().with_epoch(1).with_end_offset(d.offsets[3]);
                }
            }
            topic.partitions.push(pd);
        }
        if !topic.partitions.is_empty() {
            r.responses.push(topic);
        }
    }
    if v >= 16 && endpoints {
        r.node_endpoints = vec![
            NodeEndpoint::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("b1"))
                .with_port(9092),
        ];
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The in-place patch of a Fetch response gives the very bytes the decoding translation
    /// gives (or, like it, nothing to change), whatever the partitions carry, in every version.
    #[test]
    fn the_in_place_fetch_patch_equals_the_decoding_translation(
        v in 4i16..=18,
        parts in proptest::collection::vec(a_partition(), 0..6),
        endpoints in any::<bool>(),
    ) {
        let frame = response_frame(ApiKey::Fetch, v, &drawn_response(v, &parts, endpoints));
        let patched = crate::offset_shift::fetch_in_place::response(&frame, v, &Catalog).expect("a well-formed frame is walked");
        let decoded = edit_response(&frame, ApiKey::Fetch, v, &Catalog, crate::offset_shift::fetch::response).expect("decodes");
        prop_assert_eq!(patched, decoded, "v{}: {:?}", v, parts);
    }

    /// A Fetch response cut short or grown anywhere is never patched in place: the walk refuses
    /// it (and the decoding translation decides), it does not panic.
    #[test]
    fn a_fetch_response_cut_or_padded_is_refused_by_the_in_place_walk(
        v in 4i16..=18,
        parts in proptest::collection::vec(a_partition(), 1..4),
        cut in any::<prop::sample::Index>(),
        pad in 1usize..16,
    ) {
        let frame = response_frame(ApiKey::Fetch, v, &drawn_response(v, &parts, false));
        let at = 8 + cut.index(frame.len() - 8);
        let short = frame.slice(..at);
        prop_assert!(crate::offset_shift::fetch_in_place::response(&short, v, &Catalog).is_err(), "cut at {} of {}", at, frame.len());
        let mut long = BytesMut::from(&frame[..]);
        long.extend_from_slice(&vec![0u8; pad]);
        prop_assert!(crate::offset_shift::fetch_in_place::response(&long.freeze(), v, &Catalog).is_err(), "{} bytes added", pad);
    }
}
