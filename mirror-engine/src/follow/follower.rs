//! Following the state topic (`engine.role = "follower"`): an instance that runs no mirrors reads
//! the engine instance's state topic from its start and then keeps reading it — a long-poll Fetch
//! (500 ms) on its own connection to the partition leader, which the broker answers as soon as a
//! record arrives — and applies every entry to the instance's catalog (`followed`). So a stop
//! (failover), a pause or a new mirror done through the engine instance is enforced here within
//! one round trip of the engine's state write. Progress (position, the topic's end, the last
//! answer, the last error) is published on a watch channel for `/readyz` and `/metrics`.
//!
//! Leader moves and broker restarts are retried with back-off (100 ms doubling to 1 s; a failure is
//! logged when it differs from the last one); a position
//! that fell below the log start is read again from the start, and keys that disappeared meanwhile
//! are removed. A batch that does not decode stops the reading at that offset (retried, reported
//! as the last error) rather than skipping what it may say. Destination topic ids (Produce v13+
//! and Fetch v13+ name topics by id) are looked up for every topic the state names.

use kmp_protocol::kafka_protocol::ResponseError;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::cluster::client::ClusterClient;
use crate::cluster::links::Lane;
use crate::control::TermControl;
use crate::error::MirrorError;
use crate::follow::followed::FollowedState;
use crate::state::catalog::Catalog;
use crate::state::reader::StateReader;
use crate::state::status::now_ms;
use kmp_protocol::Backoff;

/// How long one Fetch waits at the end of the state topic for a new record.
const LONG_POLL_MS: i32 = 500;
/// Bytes asked for per Fetch (a larger first batch still comes whole).
const FETCH_BYTES: i32 = 4 << 20;
/// How often a missing state topic is looked for again.
const ABSENT_RECHECK: Duration = Duration::from_secs(1);
/// Longest pause between attempts while the state topic cannot be read. Short: one Metadata
/// request and one connection attempt per second, and a dead leader is replaced only after the
/// destination's broker session timeout, so a longer pause would add directly to the time until
/// a failover is seen.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
const OFFSET_OUT_OF_RANGE: i16 = ResponseError::OffsetOutOfRange.code();

/// Where the follower stands; published after every answer and failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowProgress {
    /// The state topic (`engine.state_topic`).
    pub topic: String,
    /// The state topic was read to its end once (or does not exist yet): its mirror topics are
    /// known and enforced.
    pub loaded: bool,
    /// The next offset to read.
    pub position: i64,
    /// The state topic's high watermark at the last answer (-1: none yet, or no topic).
    pub high_watermark: i64,
    /// When the last Fetch (or the check for a missing topic) answered, ms since the epoch; 0 never.
    pub last_read_ms: i64,
    /// The last failure, cleared by the next answer.
    pub error: Option<String>,
}

impl FollowProgress {
    /// Read to the end as of the last answer.
    pub fn caught_up(&self) -> bool {
        self.loaded && self.position >= self.high_watermark
    }
}

/// Reads the state topic and applies it until `stop`.
pub(crate) struct Follower {
    pub(crate) destination: ClusterClient,
    pub(crate) topic: String,
    pub(crate) catalog: Catalog,
    pub(crate) control: TermControl,
    pub(crate) progress: watch::Sender<FollowProgress>,
    /// True while an engine term of this instance runs: the catalog writes wait.
    pub(crate) held_back: Option<watch::Receiver<bool>>,
}

/// The reading position and what a re-read from the start must reconcile.
struct Cursor {
    next: Option<i64>,
    /// Keys applied with a value (a re-read removes those it no longer finds).
    live: HashSet<String>,
    /// During a re-read from the start: the end to reach and the keys not seen again yet.
    reread: Option<(i64, HashSet<String>)>,
    /// Before the first load: the end to reach.
    load_target: Option<i64>,
}

impl Cursor {
    fn new() -> Self {
        Self {
            next: None,
            live: HashSet::new(),
            reread: None,
            load_target: None,
        }
    }

    /// Applies the entries of one batch that ends before `batch_end` (entries below the position
    /// were applied already) and moves the position past it. A re-read that reaches its end
    /// removes the keys it did not find again (their tombstones were compacted away meanwhile).
    fn apply_batch(&mut self, state: &mut FollowedState, entries: Vec<(i64, String, Option<bytes::Bytes>)>, batch_end: i64) {
        let position = self.next.unwrap_or(0);
        for (offset, key, value) in entries {
            if offset < position {
                continue;
            }
            if let Some((_, unseen)) = self.reread.as_mut() {
                unseen.remove(&key);
            }
            match value {
                Some(_) => self.live.insert(key.clone()),
                None => self.live.remove(&key),
            };
            state.apply(&key, value.as_deref());
        }
        let position = position.max(batch_end);
        self.next = Some(position);
        if self.reread.as_ref().is_some_and(|(end, _)| position >= *end)
            && let Some((_, unseen)) = self.reread.take()
        {
            for key in unseen {
                self.live.remove(&key);
                state.apply(&key, None);
            }
        }
    }
}

impl Follower {
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let ids = Arc::new(Notify::new());
        tokio::spawn(learn_ids(self.destination.clone(), self.catalog.clone(), ids.clone(), stop.clone()));
        let mut state = FollowedState::held_back_by(self.control.clone(), self.held_back.clone());
        let mut cursor = Cursor::new();
        let mut reader = StateReader::new(self.destination.clone(), self.topic.clone(), Lane::Fetch(0));
        let mut backoff = Backoff::new(Duration::from_millis(100), MAX_BACKOFF);
        // Never changes when nothing holds the writes back.
        let mut held_back = self.held_back.clone().unwrap_or_else(|| watch::channel(false).1);
        loop {
            let step = tokio::select! {
                r = self.step(&mut state, &mut cursor, &mut reader, &ids) => r,
                _ = stop.changed() => return,
                // A term beside this follower ended: what was held applies now, not at the
                // next record. (A step cut short here is read again: the cursor moves only
                // once a batch is applied.)
                Ok(()) = held_back.changed() => {
                    state.release_held();
                    continue;
                }
            };
            let pause = match step {
                Ok(None) => {
                    backoff.reset();
                    continue;
                }
                Ok(Some(pause)) => pause,
                Err(e) => {
                    reader.forget_layout();
                    let why = e.to_string();
                    if self.progress.borrow().error.as_ref() != Some(&why) {
                        warn!(topic = %self.topic, error = %why, "cannot read the mirror state topic; retrying");
                    }
                    self.progress.send_modify(|p| p.error = Some(why));
                    backoff.next_pause()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.changed() => return,
                Ok(()) = held_back.changed() => state.release_held(),
            }
        }
    }

    /// One Fetch (or one look for a missing topic); `Some(pause)` to wait before the next.
    async fn step(&self, state: &mut FollowedState, cursor: &mut Cursor, reader: &mut StateReader, ids: &Notify) -> Result<Option<Duration>, MirrorError> {
        // The layout is kept while reads succeed (one Metadata request per leader change, not
        // per poll); any failure drops it.
        let layout = reader.layout().await?;
        if layout.error_code == UNKNOWN_TOPIC_OR_PARTITION {
            // No state topic yet (the engine creates it on its first start): nothing is a mirror
            // topic. Looked for again every second.
            self.loaded(ids).await;
            self.progress.send_modify(|p| {
                p.high_watermark = -1;
                p.last_read_ms = now_ms();
                p.error = None;
            });
            return Ok(Some(ABSENT_RECHECK));
        }
        if layout.topic_id != [0; 16] {
            // Refused to clients by id too (Fetch and Produce v13+), as on the engine instance.
            self.catalog.set_state_topic_id(layout.topic_id);
        }
        let next = match cursor.next {
            Some(n) => n,
            None => {
                let (start, end) = reader.bounds().await?;
                if self.progress.borrow().loaded {
                    cursor.reread = Some((end, cursor.live.clone()));
                } else {
                    cursor.load_target = Some(end);
                }
                cursor.next = Some(start);
                start
            }
        };
        let fetched = match reader.read(next, FETCH_BYTES, LONG_POLL_MS).await {
            Err(MirrorError::Broker { code: OFFSET_OUT_OF_RANGE, .. }) => {
                warn!(topic = %self.topic, offset = next, "state topic position out of range; reading it again from its start");
                cursor.next = None;
                return Ok(None);
            }
            r => r?,
        };
        let read_any = !fetched.batches.is_empty();
        for (batch_end, entries) in fetched.batches {
            cursor.apply_batch(state, entries?, batch_end);
        }
        let position = cursor.next.unwrap_or(next);
        if cursor.reread.is_some() {
            // A re-read whose end is where it started (nothing left to read) is complete too.
            cursor.apply_batch(state, Vec::new(), position);
        }
        if read_any && !self.catalog.topics_without_id().is_empty() {
            ids.notify_one();
        }
        if cursor.load_target.is_some_and(|end| position >= end) {
            cursor.load_target = None;
            self.loaded(ids).await;
        }
        self.progress.send_modify(|p| {
            p.position = position;
            p.high_watermark = fetched.high_watermark;
            p.last_read_ms = now_ms();
            p.error = None;
        });
        Ok(None)
    }

    /// The stored state is known: ids of its topics are looked up once (bounded), then writes
    /// are let through (the handle's `Control::is_booted`).
    async fn loaded(&self, ids: &Notify) {
        if self.progress.borrow().loaded {
            return;
        }
        if !self.catalog.topics_without_id().is_empty() {
            let _ = tokio::time::timeout(Duration::from_secs(5), learn_once(&self.destination, &self.catalog)).await;
            ids.notify_one();
        }
        self.progress.send_modify(|p| p.loaded = true);
        self.control.mark_booted();
        info!(topic = %self.topic, mirrors = self.control.list().len(), "mirror state loaded; following it");
    }
}

/// Looks up the destination ids of the topics that lack one, once. A former mirror topic the
/// destination does not have is forgotten; a mirror topic is kept (just created: retried).
async fn learn_once(destination: &ClusterClient, registry: &Catalog) -> Result<bool, MirrorError> {
    let pending = registry.topics_without_id();
    if pending.is_empty() {
        return Ok(true);
    }
    let ids = destination.topic_ids().await?;
    for topic in &pending {
        match ids.get(topic) {
            Some(id) => registry.learn_topic_id(topic, *id),
            None if !registry.is_mirror_topic(topic) => registry.forget_filler_topic(topic),
            // Nothing to protect by id until it is created; looked up again until then.
            None => registry.mark_absent(topic),
        }
    }
    Ok(registry.topics_without_id().is_empty())
}

/// Keeps looking up missing topic ids: woken when the state names new topics, retrying every
/// 200 ms (doubling to 5 s) while some are missing.
pub(crate) async fn learn_ids(destination: ClusterClient, registry: Catalog, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let done = match learn_once(&destination, &registry).await {
            Ok(done) => done,
            Err(e) => {
                warn!(error = %e, "cannot read the destination topic ids yet; retrying");
                false
            }
        };
        let pause = if done {
            backoff.reset();
            None
        } else {
            Some(backoff.next_pause())
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = async {
                match pause {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::state::status::StatusBoard;

    fn entry(offset: i64, key: &str, value: Option<&str>) -> (i64, String, Option<Bytes>) {
        (offset, key.to_owned(), value.map(|v| Bytes::from(v.to_owned())))
    }

    fn topic(mirror: &str) -> String {
        format!(r#"{{"mirror":"{mirror}","partitions":1,"how":"created","at_ms":1,"desired":"mirroring"}}"#)
    }

    #[test]
    fn batches_move_the_position_and_entries_below_it_are_not_applied_twice() {
        let registry = Catalog::default();
        let mut state = FollowedState::new(crate::control::follower_for_tests(StatusBoard::default(), registry.clone()));
        let mut cursor = Cursor::new();
        cursor.next = Some(5);
        let (a, b) = (topic("dr"), topic("dr"));
        cursor.apply_batch(&mut state, vec![entry(4, "topic/old", Some(&a)), entry(5, "topic/orders", Some(&b))], 6);
        assert_eq!(cursor.next, Some(6));
        assert!(!registry.is_mirror_topic("old"), "an entry below the position was applied before");
        assert!(registry.is_read_only("orders"));
        cursor.apply_batch(&mut state, vec![entry(6, "topic/orders", None)], 7);
        assert!(!registry.is_mirror_topic("orders") && cursor.live.is_empty(), "a tombstone removes the topic");
    }

    #[test]
    fn a_re_read_from_the_start_removes_what_it_no_longer_finds() {
        let registry = Catalog::default();
        let mut state = FollowedState::new(crate::control::follower_for_tests(StatusBoard::default(), registry.clone()));
        let mut cursor = Cursor::new();
        cursor.next = Some(0);
        let t = topic("dr");
        cursor.apply_batch(&mut state, vec![entry(0, "topic/kept", Some(&t)), entry(1, "topic/gone", Some(&t))], 2);
        assert!(registry.is_read_only("gone"));
        // The position fell below the log start; the topic is read again from 10 to its end 12, and
        // "gone"'s tombstone was compacted away meanwhile.
        cursor.next = Some(10);
        cursor.reread = Some((12, cursor.live.clone()));
        cursor.apply_batch(&mut state, vec![entry(10, "topic/kept", Some(&t))], 11);
        assert!(registry.is_read_only("gone"), "not decided before the re-read reaches its end");
        cursor.apply_batch(&mut state, vec![entry(11, "partition/kept/0", None)], 12);
        assert!(cursor.reread.is_none());
        assert!(
            registry.is_read_only("kept") && !registry.is_mirror_topic("gone"),
            "the key not found again is removed"
        );
    }
}
