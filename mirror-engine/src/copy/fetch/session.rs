//! Fetching for many partitions over one connection per source broker: each partition task asks
//! for its next offset, and one task per broker sends a single Fetch request for every partition
//! waiting on that broker, as an incremental fetch session (KIP-227) so that a request only
//! carries what changed and an idle partition costs nothing per poll. Results go back to each
//! partition; a partition error reaches only that partition.
//!
//! Memory: the request's `max_bytes` is reserved from the engine budget before it is sent (and
//! lowered to what could be reserved: at most the whole budget), and what each partition received
//! is handed over with its share of that reservation.
//!
//! Planning, writing and per-partition retries belong to `partition`; what one partition's answer
//! means belongs to `source::parse`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kmp_protocol::kafka_protocol::messages::{BrokerId, FetchRequest};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span};
use uuid::Uuid;

use crate::cluster::client::ClusterClient;
use crate::cluster::fetch::{FETCH_VERSION, Fetched, READ_COMMITTED, parse};
use crate::cluster::io_stats;
use crate::cluster::links::{Lane, Tasks};
use crate::copy::budget::{Budget, Reservation};
use crate::copy::fetch::growth::GrowthShare;
use crate::copy::throttle::Throttle;
use crate::error::MirrorError;

const FETCH_SESSION_ID_NOT_FOUND: i16 = ResponseError::FetchSessionIdNotFound.code();
const INVALID_FETCH_SESSION_EPOCH: i16 = ResponseError::InvalidFetchSessionEpoch.code();
/// How long a partition that just received data counts as "coming back soon" (it keeps polls
/// short so it does not wait behind a long poll for idle partitions).
const BUSY_FOR: Duration = Duration::from_secs(1);
/// Fetch sessions (and connections) per source broker. A partition always uses the same one
/// (chosen by topic id and partition); two let the broker serve two requests at once, which a
/// single connection cannot (it answers a connection's requests one at a time).
pub const SESSIONS_PER_BROKER: usize = 2;
/// Pause after a failed connection before the next request to that broker.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// A Fetch whose answer took less than this many round trips to transfer is latency-bound: a
/// larger one would raise throughput noticeably (one Fetch of `F` bytes per round trip `L` at
/// bandwidth `B` moves `F / (L + F/B)`, so at four round trips of transfer it already moves
/// four fifths of `B`). The growth allowance settles where answers take about this long.
const LATENCY_BOUND_FACTOR: u32 = 4;
/// How many recent answers the round trip is estimated from: the shortest wait for a first byte
/// among them (a busy broker's wait also holds its work on the request, which varies).
const ROUND_TRIP_WINDOW: usize = 16;
/// Answers bringing fewer record bytes than this do not count towards the growth allowance.
const GROWTH_VOTE_BYTES: u64 = 1 << 20;

/// How fetch sessions poll.
#[derive(Debug, Clone, Copy)]
pub struct SessionSettings {
    /// Long-poll wait while every partition is idle (ms).
    pub max_wait_ms: i32,
    /// Poll wait while a partition that just received data is still writing it (ms).
    pub busy_wait_ms: i32,
    /// Longest wait for partitions that received data to ask again before the next request.
    pub regather: Duration,
    /// Upper bound of one Fetch response (bytes), reserved from the budget per request.
    pub request_max_bytes: i32,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            max_wait_ms: 500,
            busy_wait_ms: 5,
            regather: Duration::from_millis(2),
            request_max_bytes: 32 * 1024 * 1024,
        }
    }
}

/// What a partition asks for.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub topic: String,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub max_bytes: i32,
    /// Set to the time (ms) of every Fetch response of the session that carried this want,
    /// whether or not the partition was in it (an incremental response leaves out partitions
    /// without news): the source answered for it then (`progress_watch`).
    pub heard: Option<Heard>,
}

/// When (wall-clock ms) the source last answered a Fetch carrying a partition; -1 never.
pub(crate) type Heard = Arc<std::sync::atomic::AtomicI64>;

/// Data (or an error) for one partition, with its share of the budget.
pub(crate) type Answer = Result<(Fetched, Reservation), MirrorError>;

struct Interest {
    want: Wanted,
    /// A Fetch kept beside another of the same partition on the broker's other session
    /// (`copy::fetch::stream`): this session's requests then keep half a round trip from the other's.
    staggered: bool,
    reply: oneshot::Sender<Answer>,
}

type Key = ([u8; 16], i32);

/// The fetch sessions of one source cluster client, one per broker address; cheap to clone.
#[derive(Clone)]
pub struct FetchSessions {
    inner: Arc<Inner>,
}

struct Inner {
    client: ClusterClient,
    budget: Budget,
    settings: SessionSettings,
    brokers: Tasks<Interest>,
    /// When each broker's sessions last sent a request (see [`Phase`]).
    phases: std::sync::Mutex<HashMap<String, Arc<Phase>>>,
    /// How many of this source's partitions are grown beyond their base Fetch size.
    growth: GrowthShare,
}

/// When each of one broker's sessions last sent a request. While a session carries staggered
/// Fetches (two per partition, one on each session), it sends no sooner than half a round trip
/// after the other session did, so that a Fetch of every such partition reaches the broker
/// every half round trip: with one request at a time per session, keeping each partition's two
/// Fetches apart is not enough when the sessions carry many partitions.
#[derive(Debug, Default)]
struct Phase {
    sent: std::sync::Mutex<[Option<Instant>; SESSIONS_PER_BROKER]>,
}

impl Phase {
    /// When session `lane` may send next: half of `round_trip` after another session's last
    /// request, if that is still to come.
    fn next_send(&self, lane: u8, round_trip: Duration, now: Instant) -> Option<Instant> {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter()
            .enumerate()
            .filter(|(i, _)| *i != usize::from(lane))
            .filter_map(|(_, t)| t.map(|t| t + round_trip / 2))
            .filter(|at| *at > now)
            .max()
    }

    fn note_sent(&self, lane: u8, at: Instant) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = sent.get_mut(usize::from(lane)) {
            *slot = Some(at);
        }
    }
}

impl FetchSessions {
    pub fn new(client: ClusterClient, budget: Budget, settings: SessionSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                budget,
                settings,
                brokers: Tasks::default(),
                phases: std::sync::Mutex::default(),
                growth: GrowthShare::default(),
            }),
        }
    }

    /// The count of this source's grown partitions, among which `fetch_grow_max_bytes` is shared.
    pub fn growth(&self) -> &GrowthShare {
        &self.inner.growth
    }

    /// The next data (or error) for `want` from broker `addr`, through the partition's own
    /// session (the partitions' copy loops go through `copy::fetch::stream`).
    #[cfg(test)]
    pub async fn fetch(&self, addr: &str, want: Wanted) -> Answer {
        let lane = lane_of(&want.topic_id, want.partition, SESSIONS_PER_BROKER);
        self.fetch_in(addr, lane, want, false).await
    }

    /// The next data (or error) for `want` from broker `addr` through its session `lane` (of
    /// [`SESSIONS_PER_BROKER`]), with its share of the budget. Waits while the partition has
    /// nothing new; dropping the future withdraws the request.
    /// `staggered`: the partition keeps another Fetch on the broker's other session.
    pub(crate) async fn fetch_in(&self, addr: &str, lane: u8, want: Wanted, staggered: bool) -> Answer {
        let (tx, rx) = oneshot::channel();
        let interest = Interest { want, staggered, reply: tx };
        match self.inner.brokers.send(addr, lane, interest, || self.start(addr, lane)) {
            Ok(()) => rx.await.unwrap_or_else(|_| Err(closed("fetch session ended"))),
            Err(_) => Err(closed("fetch session unavailable")),
        }
    }

    /// Spawns the session task of `(addr, lane)`.
    fn start(&self, addr: &str, lane: u8) -> mpsc::UnboundedSender<Interest> {
        let (tx, rx) = mpsc::unbounded_channel();
        let phase = {
            let mut phases = self.inner.phases.lock().unwrap_or_else(|e| e.into_inner());
            phases.entry(addr.to_owned()).or_default().clone()
        };
        let session = BrokerSession {
            addr: addr.to_owned(),
            lane,
            phase,
            data_round_trip: RoundTrip::default(),
            client: self.inner.client.clone(),
            budget: self.inner.budget.clone(),
            settings: self.inner.settings,
            id: 0,
            epoch: 0,
            known: HashMap::new(),
            interests: HashMap::new(),
            busy: HashMap::new(),
            round_trip: RoundTrip::default(),
            growth: self.inner.growth.clone(),
            throttle: Throttle::default(),
        };
        let span = info_span!("fetch_session", broker = %addr, lane);
        tokio::spawn(session.run(rx).instrument(span));
        tx
    }
}

/// The session or lane (of `lanes`) a partition always uses.
pub(crate) fn lane_of(topic: &[u8], partition: i32, lanes: usize) -> u8 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    topic.hash(&mut h);
    partition.hash(&mut h);
    u8::try_from(h.finish() % lanes.max(1) as u64).unwrap_or(0)
}

fn closed(detail: &str) -> MirrorError {
    MirrorError::aborted("source", detail)
}

/// A copy of a request-wide error for each partition of the request.
fn each(e: &MirrorError) -> MirrorError {
    match e {
        MirrorError::Broker { side, what, code } => MirrorError::Broker {
            side,
            what: what.clone(),
            code: *code,
        },
        MirrorError::Source(ProtocolError::Authentication { addr, detail }) => MirrorError::Source(ProtocolError::Authentication {
            addr: addr.clone(),
            detail: detail.clone(),
        }),
        MirrorError::Source(ProtocolError::Connect { addr, detail }) => MirrorError::Source(ProtocolError::Connect {
            addr: addr.clone(),
            detail: detail.clone(),
        }),
        MirrorError::Source(ProtocolError::Io { source, side }) => MirrorError::Source(ProtocolError::Io {
            source: std::io::Error::new(source.kind(), source.to_string()),
            side: *side,
        }),
        other => closed(&other.detail()),
    }
}

/// Fetch position of a partition as the broker's session holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    offset: i64,
    leader_epoch: i32,
    max_bytes: i32,
}

/// The session with one broker, run by one task.
struct BrokerSession {
    addr: String,
    /// Which of the broker's sessions (and connections) this is.
    lane: u8,
    /// When the broker's sessions last sent (staggering, see [`Phase`]).
    phase: Arc<Phase>,
    /// Waits for the first byte of the latest answers that brought data: the round trip the
    /// staggering uses (a long poll's wait on an idle source says nothing about it).
    data_round_trip: RoundTrip,
    client: ClusterClient,
    budget: Budget,
    settings: SessionSettings,
    /// Session id (0: none yet, the next request is a full one).
    id: i32,
    epoch: i32,
    /// Partitions in the broker's session and their positions there.
    known: HashMap<Key, Position>,
    interests: HashMap<Key, Interest>,
    /// Partitions that received data and have not asked again yet, since when.
    busy: HashMap<Key, Instant>,
    /// Waits for the first byte of the latest answers (see [`RoundTrip`]).
    round_trip: RoundTrip,
    /// Told whether each answer was latency-bound (how far grown partitions may grow).
    growth: GrowthShare,
    /// The broker's quota throttle: the next Fetch waits it out (see `throttle`).
    throttle: Throttle,
}

/// The round trip to a broker as the shortest wait for an answer's first byte among the latest
/// [`ROUND_TRIP_WINDOW`] answers.
#[derive(Debug, Default)]
struct RoundTrip {
    waits: [Duration; ROUND_TRIP_WINDOW],
    seen: usize,
}

impl RoundTrip {
    /// Notes the answer to a Fetch sent at `asked` that arrived as `arrival`; whether that Fetch
    /// was bound by the round trip rather than by transferring its answer.
    fn latency_bound(&mut self, asked: Instant, arrival: kmp_protocol::client::Arrival) -> bool {
        let wait = self.note(asked, arrival);
        let transfer = arrival.last_byte.saturating_duration_since(arrival.first_byte);
        transfer < self.estimate().unwrap_or(wait) * LATENCY_BOUND_FACTOR
    }

    /// Notes the wait for the first byte of the answer to a Fetch sent at `asked`.
    fn note(&mut self, asked: Instant, arrival: kmp_protocol::client::Arrival) -> Duration {
        let wait = arrival.first_byte.saturating_duration_since(asked);
        self.waits[self.seen % ROUND_TRIP_WINDOW] = wait;
        self.seen = self.seen.wrapping_add(1);
        wait
    }

    /// The shortest wait noted so far among the latest ones (`None` before the first).
    fn estimate(&self) -> Option<Duration> {
        self.waits[..self.seen.min(ROUND_TRIP_WINDOW)].iter().min().copied()
    }
}

fn key_of(w: &Wanted) -> Key {
    (w.topic_id, w.partition)
}

fn position_of(w: &Wanted) -> Position {
    Position {
        offset: w.offset,
        leader_epoch: w.leader_epoch,
        max_bytes: w.max_bytes,
    }
}

impl BrokerSession {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Interest>) {
        loop {
            self.interests.retain(|_, i| !i.reply.is_closed());
            if self.interests.is_empty() {
                match rx.recv().await {
                    Some(i) => self.add(i),
                    None => return,
                }
            }
            // Partitions that just got data usually ask again within microseconds: include them.
            let deadline = Instant::now() + self.settings.regather;
            while self.busy.keys().any(|k| !self.interests.contains_key(k)) {
                tokio::select! {
                    i = rx.recv() => match i {
                        Some(i) => self.add(i),
                        None => return,
                    },
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
            while let Ok(i) = rx.try_recv() {
                self.add(i);
            }
            self.interests.retain(|_, i| !i.reply.is_closed());
            let now = Instant::now();
            self.busy.retain(|_, since| now.duration_since(*since) < BUSY_FOR);
            if self.interests.is_empty() {
                continue;
            }
            if !self.keep_phase(&mut rx).await {
                return;
            }
            // What was withdrawn during the wait is not asked for.
            self.interests.retain(|_, i| !i.reply.is_closed());
            if self.interests.is_empty() {
                continue;
            }
            self.round().await;
        }
    }

    /// While this session carries staggered Fetches, waits until half a round trip after the
    /// broker's other session last sent (taking in new interests meanwhile). False: the
    /// channel closed.
    async fn keep_phase(&mut self, rx: &mut mpsc::UnboundedReceiver<Interest>) -> bool {
        if !self.interests.values().any(|i| i.staggered) {
            return true;
        }
        let Some(round_trip) = self.data_round_trip.estimate() else {
            return true;
        };
        let Some(at) = self.phase.next_send(self.lane, round_trip, Instant::now()) else {
            return true;
        };
        loop {
            tokio::select! {
                i = rx.recv() => match i {
                    Some(i) => self.add(i),
                    None => return false,
                },
                _ = tokio::time::sleep_until(at) => return true,
            }
        }
    }

    fn add(&mut self, i: Interest) {
        let k = key_of(&i.want);
        self.busy.remove(&k);
        self.interests.insert(k, i);
    }

    /// One Fetch request and the delivery of its answers.
    async fn round(&mut self) {
        // A throttled connection sends nothing until its throttle is over (KIP-219); the
        // partitions keep waiting for their answers meanwhile.
        self.throttle.wait().await;
        let (mut req, sent) = self.request();
        let room = self.budget.reserve(u64::try_from(req.max_bytes).unwrap_or(0)).await;
        // A request asking more than the whole budget got the whole budget: it must not ask
        // for more than that (Kafka still answers one whole batch beyond it, accounted below).
        req.max_bytes = req.max_bytes.min(i32::try_from(room.bytes()).unwrap_or(i32::MAX)).max(1);
        io_stats::add(&io_stats::FETCH_REQUESTS, 1);
        let result = async {
            let conn = self.client.link(&self.addr, Lane::Fetch(self.lane)).await?;
            let asked = Instant::now();
            self.phase.note_sent(self.lane, asked);
            Ok::<_, MirrorError>((self.client.call_timed(&conn, &req, FETCH_VERSION).await?, asked))
        }
        .await;
        let (resp, latency_bound, asked, arrival) = match result {
            Ok(((resp, arrival), asked)) => {
                self.throttle.note(resp.throttle_time_ms, "fetch");
                (resp, self.round_trip.latency_bound(asked, arrival), asked, arrival)
            }
            Err(e) => {
                debug!(error = %e.detail(), "fetch request failed; every waiting partition retries");
                return self.fail_waiting(e).await;
            }
        };
        // A session error answering a request that had no session cannot be cured by starting
        // one: it is handled like any other error (with a pause), so a broker that keeps
        // answering it cannot make this task spin.
        if req.session_id != 0 && matches!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND | INVALID_FETCH_SESSION_EPOCH) {
            debug!(code = resp.error_code, "the broker dropped the fetch session; starting a new one (full fetch)");
            io_stats::add(&io_stats::FETCH_SESSION_RESETS, 1);
            self.reset();
            return;
        }
        if resp.error_code != 0 {
            let e = MirrorError::Broker {
                side: "source",
                what: format!("fetch session on {}", self.addr),
                code: resp.error_code,
            };
            return self.fail_waiting(e).await;
        }
        let heard_at = crate::state::status::now_ms();
        for (k, at) in &sent {
            if let Some(h) = self
                .interests
                .get(k)
                .filter(|i| position_of(&i.want) == *at)
                .and_then(|i| i.want.heard.as_ref())
            {
                h.store(heard_at, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // The session now holds what was sent.
        if self.id == 0 || resp.session_id != self.id {
            self.id = resp.session_id;
            self.epoch = if self.id == 0 { 0 } else { 1 };
        } else {
            self.epoch = if self.epoch == i32::MAX { 1 } else { self.epoch + 1 };
        }
        if self.id == 0 {
            // No session (the broker's cache is full): every request is a full one.
            self.known.clear();
        }
        let mut room = room;
        let now = Instant::now();
        let mut delivered = 0u64;
        for t in resp.responses {
            let topic_id = *t.topic_id.as_bytes();
            for p in t.partitions {
                let k = (topic_id, p.partition_index);
                // Only an answer for the position this request asked at is delivered: a
                // partition that withdrew and asked again elsewhere gets its own answer later.
                let Some(at) = sent.get(&k) else { continue };
                if self.interests.get(&k).map(|i| position_of(&i.want)) != Some(*at) {
                    continue;
                }
                let Some(i) = self.interests.remove(&k) else { continue };
                let answer = parse("source", &i.want.topic, at.offset, p).map(|f| {
                    let got: u64 = f.batches.iter().map(|(_, b)| b.len() as u64).sum();
                    delivered = delivered.saturating_add(got);
                    let mut share = room.split(got);
                    share.grow_to(got);
                    (f, share)
                });
                if matches!(&answer, Ok((f, _)) if !f.batches.is_empty()) {
                    self.busy.insert(k, now);
                }
                let _ = i.reply.send(answer);
            }
        }
        // Only answers that moved data say whether larger Fetches would help (an idle
        // long-poll's answer is always quick to transfer).
        if delivered > 0 {
            self.data_round_trip.note(asked, arrival);
        }
        if delivered >= GROWTH_VOTE_BYTES {
            self.growth.note_answer(latency_bound);
        }
    }

    /// Ends the session after a request-wide failure: every waiting partition gets `e` (and
    /// retries with its back-off), then a pause before the next request.
    async fn fail_waiting(&mut self, e: MirrorError) {
        self.reset();
        for (_, i) in self.interests.drain() {
            let _ = i.reply.send(Err(each(&e)));
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }

    /// The next request (full without a session, incremental with one) and the position each
    /// partition is fetched at by it.
    fn request(&mut self) -> (FetchRequest, HashMap<Key, Position>) {
        let full = self.id == 0;
        if full {
            self.known.clear();
        }
        let mut topics: HashMap<[u8; 16], Vec<FetchPartition>> = HashMap::new();
        let mut sent = HashMap::new();
        let mut total: i64 = 0;
        for (k, i) in &self.interests {
            let pos = position_of(&i.want);
            total += i64::from(pos.max_bytes);
            sent.insert(*k, pos);
            if self.known.get(k) == Some(&pos) {
                continue;
            }
            let mut p = FetchPartition::default();
            p.partition = k.1;
            p.fetch_offset = pos.offset;
            p.current_leader_epoch = pos.leader_epoch;
            p.last_fetched_epoch = -1;
            p.log_start_offset = -1;
            p.partition_max_bytes = pos.max_bytes;
            topics.entry(k.0).or_default().push(p);
            self.known.insert(*k, pos);
        }
        let mut forgotten: HashMap<[u8; 16], Vec<i32>> = HashMap::new();
        let gone: Vec<Key> = self.known.keys().filter(|k| !self.interests.contains_key(*k)).copied().collect();
        for k in gone {
            self.known.remove(&k);
            if !full {
                forgotten.entry(k.0).or_default().push(k.1);
            }
        }
        let busy_elsewhere = self.busy.keys().any(|k| !self.interests.contains_key(k));
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_wait_ms = if busy_elsewhere {
            self.settings.busy_wait_ms
        } else {
            self.settings.max_wait_ms
        };
        req.min_bytes = 1;
        req.max_bytes = i32::try_from(total.clamp(1, i64::from(self.settings.request_max_bytes))).unwrap_or(i32::MAX);
        req.isolation_level = READ_COMMITTED;
        req.session_id = self.id;
        req.session_epoch = self.epoch;
        req.topics = topics
            .into_iter()
            .map(|(id, partitions)| {
                let mut t = FetchTopic::default();
                t.topic_id = Uuid::from_bytes(id);
                t.partitions = partitions;
                t
            })
            .collect();
        req.forgotten_topics_data = forgotten
            .into_iter()
            .map(|(id, partitions)| {
                let mut t = ForgottenTopic::default();
                t.topic_id = Uuid::from_bytes(id);
                t.partitions = partitions;
                t
            })
            .collect();
        (req, sent)
    }

    /// Forgets the session: the next request is a full one that creates a new session.
    fn reset(&mut self) {
        self.id = 0;
        self.epoch = 0;
        self.known.clear();
    }
}

#[cfg(test)]
mod tests;
