//! The catalog's answers on the proxy's hot path: whether clients may write to a topic (by
//! name or by destination id) and whether a topic may hold the engine's filler records — those
//! that are or were mirror topics (a deleted mirror's topics keep their fillers) — so the proxy
//! masks fillers there and nowhere else. Only registered topics hold fillers: a claimed one is
//! still being prepared; but a guarded claim (its destination topic is being created or
//! adopted) is read-only already. Deciding states belongs to the engine; refusing writes and
//! masking to the proxy.
//!
//! Requests that name topics by id (Produce v13+, DeleteTopics v6+) can only be checked against
//! mirror topics whose destination id is known: while some mirror topic's id is not known yet
//! (after a restart, before the destination's metadata answered), [`Catalog::ids_pending`] says
//! so and the proxy refuses unknown ids (retriably) rather than let one through. A mirror topic
//! the destination does not have at all has no id to protect; it is marked absent until it
//! appears (`follow::learn_ids` keeps looking).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Catalog, CatalogTopic};

impl Catalog {
    /// Records the state topic's destination id (first value wins).
    pub fn set_state_topic_id(&self, id: [u8; 16]) {
        let _ = self.state_topic_id.set(id);
    }

    /// The state topic's destination id, once learned.
    pub fn state_topic_id(&self) -> Option<[u8; 16]> {
        self.state_topic_id.get().copied()
    }

    /// Woken when a topic whose destination id is unknown is registered.
    pub fn id_wanted(&self) -> Arc<tokio::sync::Notify> {
        self.id_wanted.clone()
    }

    /// Records that the destination has no topic `topic` (a mirror topic whose id is unknown):
    /// until it appears, there is no id by which it could be written.
    pub fn mark_absent(&self, topic: &str) {
        if self.by_name.get(topic).is_some_and(|t| t.registered && t.topic_id == [0; 16]) {
            self.absent.insert(topic.to_owned(), ());
        }
    }

    /// Whether some mirror topic (or former one) the destination has is not known by id yet,
    /// or a claim is guarded (its topic is being created or adopted, its id not known here): a
    /// request naming a topic by an unknown id may then be naming it (no allocation).
    pub fn ids_pending(&self) -> bool {
        self.guarded.load(Ordering::Relaxed) > 0 || self.unknown_ids.load(Ordering::Relaxed) > self.absent.len()
    }

    /// Records that `topic` (destination id `topic_id`, all zero if unknown) holds or may hold
    /// fillers: a mirror topic, or one that was (from the state topic after a restart).
    pub fn mark_filler_topic(&self, topic: &str, topic_id: [u8; 16]) {
        if topic_id != [0; 16] {
            // One id per topic: a mirror topic registered before its id was known learns it
            // here too, or its filler entry would stop counting as pending while requests by
            // its id still went unchecked. Learned first, so the id is checked before it stops
            // counting as pending.
            self.adopt_id(topic, topic_id, true);
        }
        let mut e = self.fillers_by_name.entry(topic.to_owned()).or_insert_with(|| {
            self.unknown_ids.fetch_add(1, Ordering::Relaxed);
            [0; 16]
        });
        if topic_id != [0; 16] {
            let was_unknown = *e == [0; 16];
            *e = topic_id;
            drop(e);
            self.fillers_by_id.insert(topic_id, ());
            self.link_shift_id(topic, topic_id);
            if was_unknown {
                self.unknown_ids.fetch_sub(1, Ordering::Relaxed);
            }
            self.absent.remove(topic);
        }
    }

    /// Gives the registered mirror topic `topic` the destination id `topic_id` (with
    /// `only_unknown`, only if it has none yet). No guard of `by_name` is held while `by_id`
    /// is written: `is_read_only_id` reads `by_name` under a `by_id` guard, and the opposite
    /// nesting could deadlock.
    fn adopt_id(&self, topic: &str, topic_id: [u8; 16], only_unknown: bool) {
        let adopted = match self.by_name.get_mut(topic) {
            Some(mut t) if t.registered && (!only_unknown || t.topic_id == [0; 16]) => {
                t.topic_id = topic_id;
                true
            }
            _ => false,
        };
        if adopted {
            self.by_id.insert(topic_id, topic.to_owned());
        }
    }

    /// Records the destination id of `topic`, whether it is a mirror topic or one that was
    /// (a follower learns ids after the state topic named the topics).
    pub fn learn_topic_id(&self, topic: &str, topic_id: [u8; 16]) {
        if topic_id == [0; 16] {
            return;
        }
        self.adopt_id(topic, topic_id, false);
        if self.fillers_by_name.contains_key(topic) {
            self.mark_filler_topic(topic, topic_id);
        }
    }

    /// Mirror topics, and topics that were, whose destination id is not known yet.
    pub fn topics_without_id(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_name
            .iter()
            .filter(|t| t.registered && t.topic_id == [0; 16])
            .map(|t| t.key().clone())
            .collect();
        out.extend(
            self.fillers_by_name
                .iter()
                .filter(|e| *e.value() == [0; 16] && !self.is_mirror_topic(e.key()))
                .map(|e| e.key().clone()),
        );
        out.sort();
        out
    }

    /// Whether `topic` is a registered mirror topic (read-only or not).
    pub fn is_mirror_topic(&self, topic: &str) -> bool {
        self.by_name.get(topic).is_some_and(|t| t.registered)
    }

    /// Forgets a topic whose id is still unknown because the destination does not have it. A
    /// topic whose id was learned meanwhile (it was just created) is kept.
    pub fn forget_filler_topic(&self, topic: &str) {
        if self.fillers_by_name.remove_if(topic, |_, id| *id == [0; 16]).is_some() {
            self.unknown_ids.fetch_sub(1, Ordering::Relaxed);
            self.absent.remove(topic);
        }
    }

    /// Whether any topic may hold fillers (a proxy without one never looks for them).
    pub fn has_filler_topics(&self) -> bool {
        !self.fillers_by_name.is_empty()
    }

    /// Whether the topic named `topic` is or was a mirror topic.
    pub fn may_hold_fillers(&self, topic: &str) -> bool {
        self.fillers_by_name.contains_key(topic)
    }

    /// Whether the topic with destination id `topic_id` is or was a mirror topic — or may be:
    /// while some such topic the destination has is not known by id yet ([`Self::ids_pending`]),
    /// every id is answered yes. A mirror topic the destination lacks holds no fillers: it does
    /// not hold masking back, or every plain topic read by id would be masked for as long as it
    /// stays absent (records of a plain topic keyed like fillers would vanish).
    pub fn may_hold_fillers_id(&self, topic_id: &[u8; 16]) -> bool {
        self.ids_pending() || self.fillers_by_id.contains_key(topic_id)
    }

    /// Whether some topic that is or was a mirror topic has no known id (absent ones included):
    /// the proxy then learns ids from the Metadata answers it forwards.
    pub fn wants_ids(&self) -> bool {
        self.unknown_ids.load(Ordering::Relaxed) > 0
    }

    /// The destination topic id of a mirror topic, if known.
    pub fn topic_id(&self, topic: &str) -> Option<[u8; 16]> {
        self.by_name.get(topic).filter(|t| t.registered).map(|t| t.topic_id).filter(|id| *id != [0; 16])
    }

    /// Whether no topic is registered or claimed (a proxy without mirrors skips every check).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Whether clients may not write to `topic`: a read-only mirror topic or a guarded claim (no
    /// allocation: the Produce path asks this).
    pub fn is_read_only(&self, topic: &str) -> bool {
        self.by_name.get(topic).is_some_and(|t| self.refuses_or_admits(topic, &t))
    }

    /// Whether clients may not write to the destination topic with this id (no allocation).
    pub fn is_read_only_id(&self, topic_id: &[u8; 16]) -> bool {
        self.by_id.get(topic_id).is_some_and(|name| self.is_read_only(&name))
    }

    /// The mirror owning `topic` if clients may not write to it.
    pub fn read_only(&self, topic: &str) -> Option<String> {
        self.by_name.get(topic).filter(|t| self.refuses_or_admits(topic, t)).map(|t| t.mirror.clone())
    }

    /// Whether clients' writes to `topic` (the catalog's `t`) are refused; a write let through
    /// to a claim is noted ([`Catalog::drain_before_create`]). Called under `t`'s guard, so a
    /// note is in place before [`Catalog::guard`] (which waits for that guard) returns; the lock
    /// order is always `by_name`, then `admitted`.
    fn refuses_or_admits(&self, topic: &str, t: &CatalogTopic) -> bool {
        if refuses_writes(t) {
            return true;
        }
        if !t.registered {
            self.admitted.insert(topic.to_owned(), std::time::Instant::now());
        }
        false
    }

    /// `(topic, mirror)` for a destination topic id clients may not write to.
    pub fn read_only_id(&self, topic_id: &[u8; 16]) -> Option<(String, String)> {
        let name = self.by_id.get(topic_id)?.clone();
        self.read_only(&name).map(|m| (name, m))
    }
}

/// Whether clients' writes to the topic are refused: a mirror topic in any state but stopped, or
/// a claim whose destination topic is being created or adopted.
fn refuses_writes(t: &CatalogTopic) -> bool {
    (t.registered || t.guarded) && !t.writable
}
