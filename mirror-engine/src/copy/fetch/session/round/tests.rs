//! A Fetch round against a fake broker: a session the broker dropped is started again, a broker
//! that keeps dropping it fails the partition without a request storm, and a request asks no more
//! than the budget could reserve.

use kmp_protocol::kafka_protocol::messages::FetchRequest;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::*;
use crate::cluster::client::ClusterClient;
use crate::copy::budget::Budget;
use crate::copy::fetch::session::{FetchSessions, SessionSettings, Wanted};

/// A fake source broker for the session life cycle: answers the first Fetch (full) with session
/// 77, the second (incremental) with FETCH_SESSION_ID_NOT_FOUND, every later one with no session
/// and a high watermark of 5 (or, `hostile`, every one with FETCH_SESSION_ID_NOT_FOUND). Reports
/// `(session_id, epoch, partitions sent, request max_bytes)` of each request.
type Seen = (i32, i32, usize, i32);

async fn evicting_broker() -> (String, mpsc::UnboundedReceiver<Seen>) {
    fake_broker(false).await
}

async fn fake_broker(hostile: bool) -> (String, mpsc::UnboundedReceiver<Seen>) {
    use kmp_protocol::codec::{decode_request, encode_response};
    use kmp_protocol::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kmp_protocol::kafka_protocol::messages::{ApiKey, FetchResponse};
    use tokio::io::AsyncWriteExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        for n in 0.. {
            let Some(frame) = crate::cluster::test_frames::read_request(&mut s).await else {
                return;
            };
            let (header, req): (_, FetchRequest) = decode_request(&frame, ApiKey::Fetch, FETCH_VERSION).unwrap();
            let sent = req.topics.iter().map(|t| t.partitions.len()).sum();
            let _ = seen_tx.send((req.session_id, req.session_epoch, sent, req.max_bytes));
            let mut resp = FetchResponse::default();
            if n == 1 || hostile {
                resp.error_code = FETCH_SESSION_ID_NOT_FOUND;
            } else {
                resp.session_id = if n == 0 { 77 } else { 0 };
                let mut p = PartitionData::default();
                p.partition_index = 0;
                p.high_watermark = if n == 0 { 3 } else { 5 };
                p.last_stable_offset = p.high_watermark;
                let mut t = FetchableTopicResponse::default();
                t.topic_id = Uuid::from_bytes([7; 16]);
                t.partitions = vec![p];
                resp.responses = vec![t];
            }
            let out = encode_response(header.correlation_id, ApiKey::Fetch, FETCH_VERSION, &resp).unwrap();
            s.write_all(&out).await.unwrap();
        }
    });
    (addr, seen_rx)
}

fn wanted_at_zero() -> Wanted {
    Wanted {
        topic: "t".into(),
        topic_id: [7; 16],
        partition: 0,
        offset: 0,
        leader_epoch: 3,
        max_bytes: 1000,
        heard: None,
    }
}

#[tokio::test]
async fn a_session_the_broker_dropped_is_started_again_with_a_full_fetch_and_the_partition_is_answered() {
    let (addr, mut seen) = evicting_broker().await;
    let client = ClusterClient::new("source", vec![addr.clone()], Duration::from_secs(5));
    let settings = SessionSettings {
        max_wait_ms: 10,
        ..SessionSettings::default()
    };
    let sessions = FetchSessions::new(client, Budget::new(1 << 20), settings);
    let want = wanted_at_zero();
    let resets = io_stats::io_counters().fetch_session_resets;
    let (first, _) = sessions.fetch(&addr, want.clone()).await.expect("first answer");
    assert_eq!(first.high_watermark, 3);
    let (second, _) = tokio::time::timeout(Duration::from_secs(5), sessions.fetch(&addr, want))
        .await
        .expect("answered after the reset")
        .expect("no error reaches the partition");
    assert_eq!(second.high_watermark, 5, "the answer comes from the full fetch after the reset");
    let requests: Vec<_> = std::iter::from_fn(|| seen.try_recv().ok())
        .map(|(id, epoch, sent, _)| (id, epoch, sent))
        .collect();
    assert_eq!(
        requests[..3],
        [(0, 0, 1), (77, 1, 0), (0, 0, 1)],
        "full (create), incremental (nothing changed), full again after FETCH_SESSION_ID_NOT_FOUND"
    );
    assert!(io_stats::io_counters().fetch_session_resets > resets, "the reset is counted");
}

#[tokio::test]
async fn a_broker_answering_every_full_fetch_with_a_session_error_fails_the_partition_retriably_without_spinning() {
    let (addr, mut seen) = fake_broker(true).await;
    let client = ClusterClient::new("source", vec![addr.clone()], Duration::from_secs(5));
    let sessions = FetchSessions::new(client, Budget::new(1 << 20), SessionSettings::default());
    let want = wanted_at_zero();
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), sessions.fetch(&addr, want))
        .await
        .expect("answered");
    let e = answer.expect_err("the partition gets the error");
    assert!(e.is_retriable(), "retried with the partition's back-off: {e}");
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let requests: Vec<_> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert!(requests.len() <= 2, "no request storm: {} requests in {:?}", requests.len(), started.elapsed());
}

#[tokio::test]
async fn a_request_never_asks_for_more_than_the_budget_could_reserve() {
    let (addr, mut seen) = evicting_broker().await;
    let client = ClusterClient::new("source", vec![addr.clone()], Duration::from_secs(5));
    // The partition asks 1000 bytes; the whole engine budget is 600.
    let sessions = FetchSessions::new(client, Budget::new(600), SessionSettings::default());
    let (_, room) = sessions.fetch(&addr, wanted_at_zero()).await.expect("answered");
    drop(room);
    let (_, _, _, max_bytes) = seen.try_recv().expect("one request seen");
    assert_eq!(max_bytes, 600, "the response is bounded by what could be reserved, not by what was asked");
}
