//! Tests of `stream_copy` with in-process fakes: a scripted reader (every read returns the next
//! piece) or a tokio duplex for the broker, a `Vec` for the client.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use kmp_protocol::codec::{decode_response, encode_response};
use kmp_protocol::frame::{ByteBudget, with_prefix};
use kmp_protocol::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData};
use kmp_protocol::kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use proptest::prelude::*;
use tokio::io::ReadBuf;

/// A budget no test response reaches.
fn big_budget() -> ByteBudget {
    ByteBudget::new(1 << 30)
}

use super::*;

/// A broker whose every read returns the next scripted piece (then end of stream).
struct Pieces(VecDeque<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if let Some(mut p) = self.0.pop_front() {
            let n = p.len().min(out.remaining());
            out.put_slice(&p[..n]);
            if n < p.len() {
                self.0.push_front(p.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn pieces(bytes: &[u8], cuts: &[usize]) -> Pieces {
    let mut out = VecDeque::new();
    let mut at = 0;
    for &c in cuts.iter().filter(|&&c| c > 0 && c < bytes.len()) {
        out.push_back(bytes[at..c].to_vec());
        at = c;
    }
    out.push_back(bytes[at..].to_vec());
    // An empty read is the end of the stream: never script one before the end.
    out.retain(|p| !p.is_empty());
    Pieces(out)
}

/// A response frame: correlation id `id`, then `body`.
fn response(id: i32, body: &[u8]) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend_from_slice(body);
    with_prefix(&b).to_vec()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

#[tokio::test]
async fn several_pipelined_frames_are_copied_exactly_and_mixed_with_whole_reads() {
    let frames: Vec<Vec<u8>> = (0..5).map(|i| response(i, &vec![i as u8; 1000 * i as usize + 3])).collect();
    let all = frames.concat();
    // One read carries everything: what belongs to later frames stays for them.
    let mut up = Upstream::with_chunk(pieces(&all, &[]), 1 << 20, 1500);
    let mut client = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        if i == 2 {
            let (whole, _held) = up.whole(i as i32, &big_budget()).await.unwrap().unwrap();
            assert_eq!(&whole[..], &f[..]);
            client.extend_from_slice(&whole);
        } else {
            assert_eq!(up.stream(&mut client, i as i32, Scan::Plain).await.unwrap(), Some(f.len()));
        }
    }
    assert_eq!(client, all);
    assert!(matches!(up.stream(&mut client, 5, Scan::Plain).await, Ok(None)), "clean end between frames");
}

#[tokio::test]
async fn frames_through_a_duplex_arrive_in_order() {
    let (mut broker, proxy_side) = tokio::io::duplex(4096);
    let frames: Vec<Vec<u8>> = (0..20).map(|i| response(i, &vec![7; 3000 + i as usize])).collect();
    let expected = frames.concat();
    let writer = tokio::spawn(async move {
        for f in frames {
            broker.write_all(&f).await.unwrap();
        }
    });
    let mut up = Upstream::with_chunk(proxy_side, 1 << 20, 1024);
    let mut client = Vec::new();
    for i in 0..20 {
        up.stream(&mut client, i, Scan::Plain).await.unwrap().unwrap();
    }
    writer.await.unwrap();
    assert_eq!(client, expected);
}

#[tokio::test]
async fn an_oversized_length_is_refused_before_anything_is_written() {
    let mut bytes = response(1, &[0; 10]);
    bytes.extend_from_slice(&(1000i32).to_be_bytes());
    bytes.extend_from_slice(&[0; 20]);
    let mut up = Upstream::new(pieces(&bytes, &[]), 999);
    let mut client = Vec::new();
    up.stream(&mut client, 1, Scan::Plain).await.unwrap().unwrap();
    let before = client.len();
    match up.stream(&mut client, 2, Scan::Plain).await {
        Err(CopyError::Broker(ProtocolError::FrameTooLarge { size: 1000, max: 999, .. })) => {}
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    assert_eq!(client.len(), before, "nothing of the refused frame reached the client");
    let mut up = Upstream::new(pieces(&(-5i32).to_be_bytes(), &[]), 999);
    assert!(matches!(up.whole(1, &big_budget()).await, Err(ProtocolError::NegativeFrameSize { .. })));
}

#[tokio::test]
async fn a_mismatched_correlation_id_is_refused_before_anything_is_written() {
    let bytes = response(41, &[1; 100]);
    let mut client = Vec::new();
    let r = Upstream::new(pieces(&bytes, &[2, 6]), 1 << 20).stream(&mut client, 42, Scan::Plain).await;
    assert!(
        matches!(r, Err(CopyError::Broker(ProtocolError::CorrelationMismatch { expected: 42, got: 41 }))),
        "{r:?}"
    );
    assert!(client.is_empty());
    let r = Upstream::new(pieces(&bytes, &[]), 1 << 20).whole(42, &big_budget()).await;
    assert!(matches!(r, Err(ProtocolError::CorrelationMismatch { .. })), "{r:?}");
    // Too short to hold a correlation id at all.
    let r = Upstream::new(pieces(&with_prefix(&[1, 2]), &[]), 1 << 20)
        .stream(&mut client, 0, Scan::Plain)
        .await;
    assert!(matches!(r, Err(CopyError::Broker(_))), "{r:?}");
    assert!(client.is_empty());
}

/// A broker closing mid-frame: the client has at most a prefix of that frame (never anything
/// after it) and the copy fails, so the session closes the client connection.
#[tokio::test]
async fn a_truncated_frame_ends_with_an_error_and_the_client_has_only_a_prefix_of_it() {
    let first = response(1, &[5; 50]);
    let second = response(2, &[6; 5000]);
    for cut in [
        first.len() + 1,
        first.len() + 6,
        first.len() + 8,
        first.len() + 3000,
        first.len() + second.len() - 1,
    ] {
        let bytes = [first.clone(), second.clone()].concat();
        let mut up = Upstream::with_chunk(pieces(&bytes[..cut], &[first.len() + 2]), 1 << 20, 1024);
        let mut client = Vec::new();
        up.stream(&mut client, 1, Scan::Plain).await.unwrap().unwrap();
        let r = up.stream(&mut client, 2, Scan::Plain).await;
        assert!(matches!(r, Err(CopyError::Broker(ProtocolError::TruncatedFrame { .. }))), "cut {cut}: {r:?}");
        assert!(client.starts_with(&first), "cut {cut}");
        assert!(second.starts_with(&client[first.len()..]), "cut {cut}: only a prefix of the second frame");
        assert!(client.len() - first.len() < second.len(), "cut {cut}: never the whole second frame");
        let mut up = Upstream::new(pieces(&second[..cut - first.len()], &[]), 1 << 20);
        assert!(
            matches!(up.whole(2, &big_budget()).await, Err(ProtocolError::TruncatedFrame { .. })),
            "cut {cut}"
        );
    }
}

/// A client that stopped reading: the copy fails with a client error.
#[tokio::test]
async fn a_failing_client_is_a_client_error() {
    let (client, reader) = tokio::io::duplex(64);
    drop(reader);
    let mut client = client;
    let bytes = response(3, &[1; 1000]);
    let r = Upstream::new(pieces(&bytes, &[]), 1 << 20).stream(&mut client, 3, Scan::Plain).await;
    assert!(matches!(r, Err(CopyError::Client(_))), "{r:?}");
}

fn fetch(version: i16, endpoints: bool, records: usize) -> Vec<u8> {
    let mut r = FetchResponse::default();
    for t in 0..2 {
        let mut topic = FetchableTopicResponse::default();
        topic.topic = TopicName(StrBytes::from_string(format!("topic-{t}")));
        for p in 0..2 {
            let mut pd = PartitionData::default();
            pd.partition_index = p;
            pd.records = Some(Bytes::from(vec![p as u8 + 9; records]));
            if endpoints && p == 1 {
                let mut l = LeaderIdAndEpoch::default();
                l.leader_id = BrokerId(2);
                l.leader_epoch = 5;
                pd.current_leader = l;
                pd.error_code = 6;
                pd.records = None;
            }
            topic.partitions.push(pd);
        }
        r.responses.push(topic);
    }
    if endpoints {
        let mut e = NodeEndpoint::default();
        e.node_id = BrokerId(2);
        e.host = StrBytes::from_static_str("broker-2.internal");
        e.port = 9092;
        r.node_endpoints.push(e);
    }
    encode_response(7, ApiKey::Fetch, version, &r).unwrap().to_vec()
}

fn stream_all(bytes: &[u8], cuts: &[usize], chunk: usize, expected: i32, scan: Scan) -> Result<Vec<u8>, CopyError> {
    block_on(async {
        let mut up = Upstream::with_chunk(pieces(bytes, cuts), 1 << 20, chunk);
        let mut client = Vec::new();
        up.stream(&mut client, expected, scan).await?;
        Ok(client)
    })
}

/// Every read boundary (one cut at each offset) and every buffer size gives the same bytes.
#[test]
fn a_small_frame_is_copied_the_same_at_every_chunk_boundary() {
    let frame = response(9, b"0123456789abcdefghij");
    for chunk in 8..=frame.len() + 1 {
        for cut in 0..=frame.len() {
            assert_eq!(stream_all(&frame, &[cut], chunk, 9, Scan::Plain).unwrap(), frame, "chunk {chunk} cut {cut}");
        }
    }
    let fetch = fetch(16, true, 3);
    for chunk in [8, 9, 13, 32, 100, fetch.len()] {
        for cut in 0..=fetch.len() {
            let out = stream_all(&fetch, &[cut], chunk, 7, Scan::FetchEndpoints(16)).unwrap();
            assert_eq!(
                out,
                stream_all(&fetch, &[], 1 << 16, 7, Scan::FetchEndpoints(16)).unwrap(),
                "chunk {chunk} cut {cut}"
            );
        }
    }
}

#[test]
fn a_streamed_fetch_keeps_everything_but_node_endpoints() {
    for version in 12..=17 {
        let plain = fetch(version, false, 700);
        assert_eq!(
            stream_all(&plain, &[], 64, 7, Scan::of(ApiKey::Fetch as i16, version)).unwrap(),
            plain,
            "v{version}"
        );
        let hinted = fetch(version, true, 700);
        let out = stream_all(&hinted, &[], 64, 7, Scan::of(ApiKey::Fetch as i16, version)).unwrap();
        assert_eq!(out.len(), hinted.len(), "v{version}: same length");
        let (_, got) = decode_response::<FetchResponse>(&Bytes::from(out.clone()), ApiKey::Fetch, version).unwrap();
        assert!(got.node_endpoints.is_empty(), "v{version}: endpoints neutralised");
        assert_eq!(got.responses[0].partitions[0].records.as_ref().map(|r| r.len()), Some(700));
        assert_eq!(got.responses[1].partitions[1].current_leader.leader_id, BrokerId(2), "v{version}");
        let host = b"broker-2.internal";
        assert!(
            !out.windows(host.len()).any(|w| w == host),
            "v{version}: the broker's host does not reach the client"
        );
    }
}

proptest! {
    /// Hostile bytes after a valid header never panic and never write more than the broker sent.
    #[test]
    fn hostile_fetch_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600), chunk in 8usize..200, cut in 0usize..700) {
        let frame = response(7, &body);
        let cut = cut.min(frame.len());
        for scan in [Scan::Plain, Scan::FetchEndpoints(16), Scan::FetchEndpoints(12)] {
            if let Ok(out) = stream_all(&frame, &[cut], chunk, 7, scan) {
                prop_assert_eq!(out.len(), frame.len());
            }
        }
    }

    /// Valid Fetch responses of any shape: without endpoints the copy is exact.
    #[test]
    fn valid_fetch_responses_pass_unchanged(records in 0usize..300, version in 12i16..=17, chunk in 8usize..300, cut in 0usize..400) {
        let frame = fetch(version, false, records);
        let cut = cut.min(frame.len());
        prop_assert_eq!(stream_all(&frame, &[cut], chunk, 7, Scan::of(ApiKey::Fetch as i16, version)).unwrap(), frame);
    }
}

#[tokio::test]
async fn the_buffer_stays_small_for_small_responses_and_grows_only_for_a_large_streamed_one() {
    let small: Vec<Vec<u8>> = (0..3).map(|i| response(i, &[i as u8; 100])).collect();
    let large = response(3, &(0..300_000u32).map(|i| i as u8).collect::<Vec<_>>());
    let all = [small.concat(), large.clone()].concat();
    // The broker hands everything over in 10 KiB pieces.
    let cuts: Vec<usize> = (1..all.len() / 10_240 + 1).map(|i| i * 10_240).collect();
    let mut up = Upstream::with_chunk(pieces(&all, &cuts), 1 << 20, 128 * 1024);
    assert_eq!(up.buf.len(), INITIAL_BUF, "a new connection starts with the small buffer");
    for (i, f) in small.iter().enumerate() {
        let mut client = Vec::new();
        up.stream(&mut client, i as i32, Scan::Plain).await.unwrap();
        assert_eq!(&client, f);
    }
    assert_eq!(up.buf.len(), INITIAL_BUF, "small responses never grow it");
    let mut client = Vec::new();
    up.stream(&mut client, 3, Scan::Plain).await.unwrap();
    assert_eq!(client, large, "the large response is copied exactly while the buffer grows");
    assert_eq!(up.buf.len(), 128 * 1024, "a large response grows it up to the chunk, not beyond");
}

impl SpliceSocket for Pieces {}
impl SpliceSocket for Vec<u8> {}
impl SpliceSocket for tokio::io::DuplexStream {}

mod splice;
