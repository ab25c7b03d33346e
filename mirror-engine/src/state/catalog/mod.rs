//! The instance's catalog of mirror topics: the single owner of "which mirror owns this topic"
//! and of whether clients may write to it. Everything that asks who owns a topic reads it here:
//! the proxy on every Produce it checks and every Fetch it may mask, the management operations
//! (start, list, delete, the checks of pause/resume/stop), the mirrors' discovery loops when they
//! claim a topic, and the state follower when it applies a record. One catalog exists per
//! instance and outlives the engine's terms (`auto`), so a write to a mirror topic is refused
//! throughout a handover.
//!
//! A topic enters the catalog in one of two ways:
//! - **claimed**: a mirror's discovery loop takes a new topic and prepares it (creates or adopts
//!   the destination topic). Nobody else may take it. Right before the destination topic is
//!   created or adopted the claim is **guarded** ([`Catalog::guard`]): from then on clients'
//!   writes to it are refused as for a mirror topic, so none can land at the offsets the mirror
//!   is about to copy (a topic created by CreateTopics is writable at once). Preparing may still
//!   find that an existing topic cannot be this mirror's; the guard is then lifted
//!   ([`Catalog::unguard`]) and the topic's own writers go on. A client request the proxy let
//!   through just before the guard may still be on its way to the broker: the catalog notes
//!   when a claim was last written to, and the engine waits ([`Catalog::drain_before_create`])
//!   until such a request has met a topic that does not exist yet.
//! - **registered**: the topic is a mirror topic. It is read-only for clients in every state but
//!   stopped (KIP-1279 §7), and its fillers are masked. Boot registers what the state topic
//!   records; preparing registers a new topic; a follower registers what it reads.
//!
//! Every change is published on a watch channel ([`Catalog::changes`]), so waiters wake on the
//! change instead of polling.
//!
//! Not here: the mirrors' definitions and the per-topic runtime handles. A term loads the
//! definitions from the state topic, and two terms can run at once (the active one and the
//! follower beside it with shared work): a lagging follower must not overwrite a definition the
//! active term just changed. Runtimes and statuses belong to `control` and `status`. The
//! read-only and filler queries of the proxy's hot path are in `enforce`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio::sync::watch;

mod enforce;
mod shifts;
#[cfg(test)]
mod tests;

/// How long a client request the proxy let through to a claimed topic may take to reach the
/// broker, at most (see [`Catalog::drain_before_create`]): it is written to the broker
/// connection right after the check, behind at most the connection's other pipelined requests.
pub(crate) const ADMITTED_DRAIN: Duration = Duration::from_secs(3);

/// One topic of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTopic {
    /// The mirror that owns the topic.
    pub mirror: String,
    /// Destination topic id (all zero until known).
    pub topic_id: [u8; 16],
    /// Writable by clients (the topic was stopped / failed over).
    pub writable: bool,
    /// A mirror topic (clients' writes are checked); false while its mirror has only claimed it.
    pub registered: bool,
    /// A claim whose destination topic is being created or adopted: clients' writes are refused
    /// already (false once registered, where `writable` decides).
    pub guarded: bool,
}

/// The catalog of mirror topics by name and by destination topic id; cheap to clone.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub(crate) by_name: Arc<DashMap<String, CatalogTopic>>,
    /// Registered topics whose destination id is known.
    pub(crate) by_id: Arc<DashMap<[u8; 16], String>>,
    /// Topics that are or were mirror topics (may hold fillers): name → destination topic id
    /// (all zero until known), and the known ids.
    pub(crate) fillers_by_name: Arc<DashMap<String, [u8; 16]>>,
    pub(crate) fillers_by_id: Arc<DashMap<[u8; 16], ()>>,
    /// How many of them have no known id yet.
    pub(crate) unknown_ids: Arc<AtomicUsize>,
    /// Mirror topics without a known id that the destination does not have (no id to protect).
    pub(crate) absent: Arc<DashMap<String, ()>>,
    /// How many claims are guarded: their destination ids are not known, so while any is, a
    /// request naming an unknown topic id may be naming one of them.
    pub(crate) guarded: Arc<AtomicUsize>,
    /// Claims (not guarded) the proxy let a client request write to, and when it last did:
    /// such a request may still reach the broker after the guard ([`Self::drain_before_create`]).
    pub(crate) admitted: Arc<DashMap<String, Instant>>,
    /// Signalled when a topic without a known id is registered (the id learner wakes up).
    pub(crate) id_wanted: Arc<tokio::sync::Notify>,
    /// The destination topic id of the engine's state topic, once learned (the proxy refuses it
    /// to clients by name and by id).
    pub(crate) state_topic_id: Arc<std::sync::OnceLock<[u8; 16]>>,
    /// Offset shifts by topic name (`shifts`), the shifted topics' known destination ids, and
    /// whether any topic is shifted.
    pub(crate) shifts: Arc<DashMap<String, Arc<[i64]>>>,
    pub(crate) shift_ids: Arc<DashMap<[u8; 16], String>>,
    pub(crate) shifted: Arc<std::sync::atomic::AtomicBool>,
    /// Bumped on every change of ownership or writability.
    changes: Arc<watch::Sender<u64>>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            by_name: Arc::default(),
            by_id: Arc::default(),
            fillers_by_name: Arc::default(),
            fillers_by_id: Arc::default(),
            unknown_ids: Arc::default(),
            absent: Arc::default(),
            guarded: Arc::default(),
            admitted: Arc::default(),
            id_wanted: Arc::default(),
            state_topic_id: Arc::default(),
            shifts: Arc::default(),
            shift_ids: Arc::default(),
            shifted: Arc::default(),
            changes: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Catalog {
    /// A receiver that sees every later change of ownership or writability (subscribe before
    /// reading what you wait on, then await `changed()`).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(crate) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Takes `topic` for `mirror`, which is about to prepare it: true when the topic was free
    /// (it is now claimed, not yet read-only) or already `mirror`'s; false when another mirror
    /// owns it. Whether a term has taken the topic up already is the term's (`control`).
    pub(crate) fn claim(&self, topic: &str, mirror: &str) -> bool {
        match self.by_name.entry(topic.to_owned()) {
            dashmap::Entry::Vacant(v) => {
                v.insert(CatalogTopic {
                    mirror: mirror.to_owned(),
                    topic_id: [0; 16],
                    writable: false,
                    registered: false,
                    guarded: false,
                });
                self.changed();
                true
            }
            dashmap::Entry::Occupied(o) => o.get().mirror == mirror,
        }
    }

    /// Makes `mirror`'s claim on `topic` read-only for clients before its destination topic is
    /// created or adopted: from now on no client write lands in it through the proxy (by name;
    /// by id every id not known is refused retriably while a claim is guarded, [`Self::ids_pending`]).
    /// True when `topic` is `mirror`'s (a registered topic keeps its standing: a stopped one
    /// stays writable); false when it is another mirror's or not claimed.
    pub(crate) fn guard(&self, topic: &str, mirror: &str) -> bool {
        let Some(mut t) = self.by_name.get_mut(topic) else { return false };
        if t.mirror != mirror {
            return false;
        }
        if t.registered {
            return true;
        }
        let newly = !t.guarded;
        if newly {
            t.guarded = true;
            self.guarded.fetch_add(1, Ordering::Relaxed);
        }
        drop(t);
        if newly {
            self.changed();
        }
        true
    }

    /// How long to wait, after [`Self::guard`] and before creating `topic`, for client requests
    /// the proxy let through to the claim before it was guarded: they reach the broker right
    /// after the check, but pipelined behind other requests they may take a while, and one that
    /// arrives after CreateTopics would write to the new topic. `None`: no client wrote to the
    /// claim lately.
    pub(crate) fn drain_before_create(&self, topic: &str) -> Option<Duration> {
        let (_, at) = self.admitted.remove(topic)?;
        ADMITTED_DRAIN.checked_sub(at.elapsed()).filter(|d| !d.is_zero())
    }

    /// Lifts the guard of `mirror`'s claim on `topic`: preparing found an existing topic that
    /// cannot be the mirror's (data it did not write, another partition count), whose own
    /// writers must go on. The claim stays (the topic is still not another mirror's to take).
    pub(crate) fn unguard(&self, topic: &str, mirror: &str) {
        let lifted = match self.by_name.get_mut(topic) {
            Some(mut t) if t.mirror == mirror && !t.registered && t.guarded => {
                t.guarded = false;
                true
            }
            _ => false,
        };
        if lifted {
            self.guarded.fetch_sub(1, Ordering::Relaxed);
            self.changed();
        }
    }

    /// Counts a guarded claim that is gone (registered or dropped).
    fn guard_ended(&self, t: &CatalogTopic) {
        if !t.registered && t.guarded {
            self.guarded.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Forgets the claims that never became mirror topics (an engine term ended while preparing
    /// them): a new term claims again what it still wants.
    pub(crate) fn drop_claims(&self) {
        let before = self.by_name.len();
        self.by_name.retain(|_, t| {
            if !t.registered {
                self.guard_ended(t);
            }
            t.registered
        });
        // Notes are kept for claims only, and every claim is gone.
        self.admitted.clear();
        if self.by_name.len() != before {
            self.changed();
        }
    }

    /// Makes the catalog what a freshly loaded state says (an engine term's boot): claims are
    /// dropped, and a registered topic `owned` does not name is forgotten as a mirror topic
    /// (its mirror was deleted while this instance did not follow, or an ended term registered
    /// it without recording it); its fillers stay masked. The owned ones are then registered by
    /// the caller.
    pub(crate) fn reconcile(&self, owned: &std::collections::HashSet<&str>) {
        let stale: Vec<String> = self
            .by_name
            .iter()
            .filter(|e| !e.registered || !owned.contains(e.key().as_str()))
            .map(|e| e.key().clone())
            .collect();
        for topic in stale {
            self.remove(&topic);
        }
    }

    /// The mirror that owns `topic` (registered or claimed).
    pub fn owner(&self, topic: &str) -> Option<String> {
        self.by_name.get(topic).map(|t| t.mirror.clone())
    }

    /// Topics owned by `mirror` (registered or claimed), sorted.
    pub fn topics_of(&self, mirror: &str) -> Vec<String> {
        let mut out: Vec<String> = self.by_name.iter().filter(|e| e.mirror == mirror).map(|e| e.key().clone()).collect();
        out.sort();
        out
    }

    /// Registers (or updates) `topic` as `mirror`'s mirror topic, read-only unless it was
    /// registered as `mirror`'s and writable already; `topic_id` all zero if unknown.
    pub fn register(&self, topic: &str, mirror: &str, topic_id: [u8; 16]) {
        self.mark_filler_topic(topic, topic_id);
        if topic_id != [0; 16] {
            self.by_id.insert(topic_id, topic.to_owned());
        }
        let mut e = self.by_name.entry(topic.to_owned()).or_insert_with(|| CatalogTopic {
            mirror: mirror.to_owned(),
            topic_id,
            writable: false,
            registered: true,
            guarded: false,
        });
        self.guard_ended(&e);
        e.guarded = false;
        let taken_over = e.mirror != mirror || !e.registered;
        let changed = taken_over || (topic_id != [0; 16] && e.topic_id != topic_id);
        if taken_over {
            // Another mirror's topic, or a claim: nothing of an earlier standing carries over.
            e.writable = false;
        }
        e.mirror = mirror.to_owned();
        e.registered = true;
        if topic_id != [0; 16] {
            e.topic_id = topic_id;
        } else if e.topic_id == [0; 16] {
            self.id_wanted.notify_one();
        }
        drop(e);
        self.admitted.remove(topic);
        if changed {
            self.changed();
        }
    }

    /// Marks a registered `topic` writable (stopped / failed over) or read-only again.
    pub fn set_writable(&self, topic: &str, writable: bool) {
        let mut changed = false;
        if let Some(mut t) = self.by_name.get_mut(topic)
            && t.registered
            && t.writable != writable
        {
            t.writable = writable;
            changed = true;
        }
        if changed {
            self.changed();
        }
    }

    /// Forgets `topic` as a mirror topic (its mirror was deleted; it is an ordinary topic again)
    /// but keeps it among the topics that may hold fillers: the fillers stay in its log.
    pub fn remove(&self, topic: &str) {
        self.admitted.remove(topic);
        if let Some((_, t)) = self.by_name.remove(topic) {
            self.guard_ended(&t);
            if t.topic_id != [0; 16] {
                self.by_id.remove(&t.topic_id);
            }
            self.changed();
        }
    }
}
