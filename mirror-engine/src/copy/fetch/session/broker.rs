//! One broker session's task: gathering the partitions' wants into the next request (taking in
//! those that ask again at once, keeping a staggered session half a round trip from the broker's
//! other one), and the KIP-227 session bookkeeping — which partitions the broker's session holds
//! at which position, a full request without a session and an incremental one with it, and
//! forgetting the session.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kmp_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kmp_protocol::kafka_protocol::messages::{BrokerId, FetchRequest};
use tokio::sync::mpsc;
use tokio::time::Instant;
use uuid::Uuid;

use super::round_trip::RoundTrip;
use super::{Interest, Key, SESSIONS_PER_BROKER, SessionSettings, Wanted};
use crate::cluster::client::ClusterClient;
use crate::cluster::fetch::READ_UNCOMMITTED;
use crate::copy::budget::Budget;
use crate::copy::fetch::growth::GrowthShare;
use crate::copy::throttle::Throttle;

/// How long a partition that just received data counts as "coming back soon" (it keeps polls
/// short so it does not wait behind a long poll for idle partitions).
const BUSY_FOR: Duration = Duration::from_secs(1);

/// When each of one broker's sessions last sent a request. While a session carries staggered
/// Fetches (two per partition, one on each session), it sends no sooner than half a round trip
/// after the other session did, so that a Fetch of every such partition reaches the broker
/// every half round trip: with one request at a time per session, keeping each partition's two
/// Fetches apart is not enough when the sessions carry many partitions.
#[derive(Debug, Default)]
pub(super) struct Phase {
    sent: std::sync::Mutex<[Option<Instant>; SESSIONS_PER_BROKER]>,
}

impl Phase {
    /// When session `lane` may send next: half of `round_trip` after another session's last
    /// request, if that is still to come.
    pub(super) fn next_send(&self, lane: u8, round_trip: Duration, now: Instant) -> Option<Instant> {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter()
            .enumerate()
            .filter(|(i, _)| *i != usize::from(lane))
            .filter_map(|(_, t)| t.map(|t| t + round_trip / 2))
            .filter(|at| *at > now)
            .max()
    }

    pub(super) fn note_sent(&self, lane: u8, at: Instant) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = sent.get_mut(usize::from(lane)) {
            *slot = Some(at);
        }
    }
}

/// Fetch position of a partition as the broker's session holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) offset: i64,
    leader_epoch: i32,
    max_bytes: i32,
}

/// The session with one broker, run by one task.
pub(super) struct BrokerSession {
    pub(super) addr: String,
    /// Which of the broker's sessions (and connections) this is.
    pub(super) lane: u8,
    /// When the broker's sessions last sent (staggering, see [`Phase`]).
    pub(super) phase: Arc<Phase>,
    /// Waits for the first byte of the latest answers that brought data: the round trip the
    /// staggering uses (a long poll's wait on an idle source says nothing about it).
    pub(super) data_round_trip: RoundTrip,
    pub(super) client: ClusterClient,
    pub(super) budget: Budget,
    pub(super) settings: SessionSettings,
    /// Session id (0: none yet, the next request is a full one).
    pub(super) id: i32,
    pub(super) epoch: i32,
    /// Partitions in the broker's session and their positions there.
    pub(super) known: HashMap<Key, Position>,
    pub(super) interests: HashMap<Key, Interest>,
    /// Partitions that received data and have not asked again yet, since when.
    pub(super) busy: HashMap<Key, Instant>,
    /// Waits for the first byte of the latest answers (see [`RoundTrip`]).
    pub(super) round_trip: RoundTrip,
    /// Told whether each answer was latency-bound (how far grown partitions may grow).
    pub(super) growth: GrowthShare,
    /// The broker's quota throttle: the next Fetch waits it out (see `throttle`).
    pub(super) throttle: Throttle,
}

fn key_of(w: &Wanted) -> Key {
    (w.topic_id, w.partition)
}

pub(super) fn position_of(w: &Wanted) -> Position {
    Position {
        offset: w.offset,
        leader_epoch: w.leader_epoch,
        max_bytes: w.max_bytes,
    }
}

impl BrokerSession {
    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Interest>) {
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

    /// The next request (full without a session, incremental with one) and the position each
    /// partition is fetched at by it.
    pub(super) fn request(&mut self) -> (FetchRequest, HashMap<Key, Position>) {
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
        req.isolation_level = READ_UNCOMMITTED;
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
    pub(super) fn reset(&mut self) {
        self.id = 0;
        self.epoch = 0;
        self.known.clear();
    }
}

#[cfg(test)]
mod tests;
