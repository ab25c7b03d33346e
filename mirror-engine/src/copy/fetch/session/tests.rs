//! The request a broker session builds: full without a session, then only what changed, with
//! withdrawn partitions forgotten; and when its answers count as latency-bound.

use super::*;

fn session() -> BrokerSession {
    BrokerSession {
        addr: "b:1".into(),
        lane: 0,
        phase: Arc::default(),
        data_round_trip: RoundTrip::default(),
        client: ClusterClient::new("source", vec![], Duration::from_secs(1)),
        budget: Budget::new(1 << 30),
        settings: SessionSettings::default(),
        id: 0,
        epoch: 0,
        known: HashMap::new(),
        interests: HashMap::new(),
        busy: HashMap::new(),
        round_trip: RoundTrip::default(),
        growth: GrowthShare::default(),
        throttle: Throttle::default(),
    }
}

fn ask(s: &mut BrokerSession, partition: i32, offset: i64) -> oneshot::Receiver<Answer> {
    let (tx, rx) = oneshot::channel();
    s.add(Interest {
        want: Wanted {
            topic: "t".into(),
            topic_id: [7; 16],
            partition,
            offset,
            leader_epoch: 3,
            max_bytes: 1000,
            heard: None,
        },
        staggered: false,
        reply: tx,
    });
    rx
}

fn sent_partitions(req: &FetchRequest) -> Vec<(i32, i64)> {
    let mut v: Vec<_> = req
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition, p.fetch_offset))
        .collect();
    v.sort_unstable();
    v
}

fn forgotten(req: &FetchRequest) -> Vec<i32> {
    let mut v: Vec<_> = req.forgotten_topics_data.iter().flat_map(|t| t.partitions.iter().copied()).collect();
    v.sort_unstable();
    v
}

#[test]
fn the_first_request_is_a_full_fetch_that_creates_a_session() {
    let mut s = session();
    let _a = ask(&mut s, 0, 10);
    let _b = ask(&mut s, 1, 20);
    let (req, sent) = s.request();
    assert_eq!((req.session_id, req.session_epoch), (0, 0), "no session yet: create one");
    assert_eq!(sent_partitions(&req), vec![(0, 10), (1, 20)]);
    assert_eq!(sent.len(), 2);
    assert_eq!(req.max_bytes, 2000, "the response is bounded by what the partitions asked for");
    assert_eq!(req.isolation_level, READ_COMMITTED);
}

#[test]
fn an_incremental_request_carries_only_changed_partitions_and_forgets_withdrawn_ones() {
    let mut s = session();
    let _a = ask(&mut s, 0, 10);
    let _b = ask(&mut s, 1, 20);
    let c = ask(&mut s, 2, 30);
    let _ = s.request();
    s.id = 42;
    s.epoch = 1;
    // Partition 0 got data and asks at a new offset; 1 still waits; 2 withdrew; 3 is new.
    let _a2 = ask(&mut s, 0, 15);
    drop(c);
    s.interests.retain(|_, i| !i.reply.is_closed());
    let _d = ask(&mut s, 3, 40);
    let (req, sent) = s.request();
    assert_eq!((req.session_id, req.session_epoch), (42, 1));
    assert_eq!(sent_partitions(&req), vec![(0, 15), (3, 40)], "unchanged partition 1 is not repeated");
    assert_eq!(forgotten(&req), vec![2], "the withdrawn partition leaves the session");
    assert_eq!(sent.len(), 3, "answers for 0, 1 and 3 are expected");
    let (req, _) = s.request();
    assert!(
        sent_partitions(&req).is_empty() && forgotten(&req).is_empty(),
        "nothing changed: an empty incremental poll"
    );
}

#[test]
fn after_a_reset_the_next_request_is_full_again() {
    let mut s = session();
    let _a = ask(&mut s, 0, 10);
    let _ = s.request();
    s.id = 42;
    s.epoch = 5;
    s.reset();
    let (req, _) = s.request();
    assert_eq!((req.session_id, req.session_epoch), (0, 0));
    assert_eq!(sent_partitions(&req), vec![(0, 10)], "every waiting partition is sent again");
}

#[test]
fn polls_stay_short_while_a_partition_that_just_received_data_is_writing_it() {
    let mut s = session();
    let _a = ask(&mut s, 0, 10);
    let (req, _) = s.request();
    assert_eq!(req.max_wait_ms, s.settings.max_wait_ms, "all idle: long poll");
    s.busy.insert(([7; 16], 1), Instant::now());
    let (req, _) = s.request();
    assert_eq!(req.max_wait_ms, s.settings.busy_wait_ms, "partition 1 will ask again soon");
}

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

fn arrival(asked: Instant, wait_ms: u64, transfer_ms: u64) -> kmp_protocol::client::Arrival {
    let first_byte = asked + Duration::from_millis(wait_ms);
    kmp_protocol::client::Arrival {
        first_byte,
        last_byte: first_byte + Duration::from_millis(transfer_ms),
    }
}

#[test]
fn an_answer_is_latency_bound_while_its_transfer_takes_under_four_round_trips() {
    let t = Instant::now();
    let mut far = RoundTrip::default();
    assert!(far.latency_bound(t, arrival(t, 100, 5)), "a distant broker, a quick transfer");
    assert!(far.latency_bound(t, arrival(t, 101, 390)), "still under four round trips");
    assert!(!far.latency_bound(t, arrival(t, 100, 400)), "four round trips of transfer: not latency-bound");
}

#[test]
fn the_round_trip_is_the_shortest_recent_wait_so_a_busy_brokers_slow_answers_do_not_count_as_distance() {
    let t = Instant::now();
    let mut near = RoundTrip::default();
    assert!(near.latency_bound(t, arrival(t, 2, 1)));
    // A busy broker took 40 ms to start answering: its 10 ms transfer is still five round trips.
    assert!(!near.latency_bound(t, arrival(t, 40, 10)));
    // After a window of slow answers the short one is forgotten.
    for _ in 0..ROUND_TRIP_WINDOW {
        near.latency_bound(t, arrival(t, 40, 100));
    }
    assert!(near.latency_bound(t, arrival(t, 40, 10)), "the round trip is now 40 ms");
}

#[test]
fn a_session_sends_half_a_round_trip_after_the_other_session_of_its_broker() {
    let phase = Phase::default();
    let t0 = Instant::now();
    let rt = Duration::from_millis(100);
    assert_eq!(phase.next_send(0, rt, t0), None, "nothing sent yet: no wait");
    phase.note_sent(1, t0);
    assert_eq!(phase.next_send(0, rt, t0 + Duration::from_millis(10)), Some(t0 + Duration::from_millis(50)));
    assert_eq!(phase.next_send(0, rt, t0 + Duration::from_millis(60)), None, "already half a round trip later");
    assert_eq!(phase.next_send(1, rt, t0 + Duration::from_millis(10)), None, "its own request does not hold it");
    phase.note_sent(0, t0 + Duration::from_millis(50));
    assert_eq!(
        phase.next_send(1, rt, t0 + Duration::from_millis(90)),
        Some(t0 + Duration::from_millis(100)),
        "the other session keeps the alternation"
    );
}

#[tokio::test(start_paused = true)]
async fn only_a_session_carrying_staggered_fetches_waits_for_its_phase() {
    let mut s = session();
    let (_tx, mut rx) = mpsc::unbounded_channel();
    s.data_round_trip.waits[0] = Duration::from_millis(100);
    s.data_round_trip.seen = 1;
    s.phase.note_sent(1, Instant::now());
    let _plain = ask(&mut s, 0, 5);
    let started = Instant::now();
    assert!(s.keep_phase(&mut rx).await);
    assert_eq!(started.elapsed(), Duration::ZERO, "no staggered Fetch: sent at once");
    let (tx, _answer) = oneshot::channel();
    s.add(Interest {
        want: Wanted {
            topic: "t".into(),
            topic_id: [7; 16],
            partition: 1,
            offset: 9,
            leader_epoch: 3,
            max_bytes: 1000,
            heard: None,
        },
        staggered: true,
        reply: tx,
    });
    assert!(s.keep_phase(&mut rx).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(50),
        "a staggered Fetch waits half a round trip after the other session"
    );
}
