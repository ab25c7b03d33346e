//! The request a broker session builds: full without a session, then only what changed, with
//! withdrawn partitions forgotten; and how the broker's two sessions keep apart.

use tokio::sync::oneshot;

use super::*;
use crate::copy::fetch::session::Answer;

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
    assert_eq!(req.isolation_level, READ_UNCOMMITTED);
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
