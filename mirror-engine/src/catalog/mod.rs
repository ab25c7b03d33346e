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
//!   the destination topic). Nobody else may take it, but clients' writes are not refused yet:
//!   preparing may still find that the topic cannot be this mirror's.
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
use std::sync::atomic::AtomicUsize;

use dashmap::DashMap;
use tokio::sync::watch;

mod enforce;
#[cfg(test)]
mod tests;

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
    /// Signalled when a topic without a known id is registered (the id learner wakes up).
    pub(crate) id_wanted: Arc<tokio::sync::Notify>,
    /// The destination topic id of the engine's state topic, once learned (the proxy refuses it
    /// to clients by name and by id).
    pub(crate) state_topic_id: Arc<std::sync::OnceLock<[u8; 16]>>,
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
            id_wanted: Arc::default(),
            state_topic_id: Arc::default(),
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
                });
                self.changed();
                true
            }
            dashmap::Entry::Occupied(o) => o.get().mirror == mirror,
        }
    }

    /// Forgets the claims that never became mirror topics (an engine term ended while preparing
    /// them): a new term claims again what it still wants.
    pub(crate) fn drop_claims(&self) {
        let before = self.by_name.len();
        self.by_name.retain(|_, t| t.registered);
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
        });
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
        if let Some((_, t)) = self.by_name.remove(topic) {
            if t.topic_id != [0; 16] {
                self.by_id.remove(&t.topic_id);
            }
            self.changed();
        }
    }
}
