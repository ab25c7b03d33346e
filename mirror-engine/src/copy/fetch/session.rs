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
//!
//! This file owns the partitions' side: what they ask for and get back, and the sessions of a
//! source cluster that route each want to its broker's session task. One broker session's task
//! and its KIP-227 bookkeeping are `broker`'s; one Fetch request and the delivery of its answer
//! are `round`'s; the round-trip estimate is `round_trip`'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::{Instrument, info_span};

use crate::cluster::client::ClusterClient;
use crate::cluster::fetch::Fetched;
use crate::cluster::links::Tasks;
use crate::copy::budget::{Budget, Reservation};
use crate::copy::fetch::growth::GrowthShare;
use crate::copy::throttle::Throttle;
use crate::error::MirrorError;

mod broker;
mod round;
mod round_trip;

use broker::{BrokerSession, Phase};
use round_trip::RoundTrip;

/// Fetch sessions (and connections) per source broker. A partition always uses the same one
/// (chosen by topic id and partition); two let the broker serve two requests at once, which a
/// single connection cannot (it answers a connection's requests one at a time).
pub const SESSIONS_PER_BROKER: usize = 2;

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
