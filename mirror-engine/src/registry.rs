//! Which destination topics belong to a mirror and whether clients may write to them: the
//! proxy consults this on every Produce it has to check. A mirror topic is read-only in every
//! state except stopped (KIP-1279 §7). Also which topics may hold the engine's filler records —
//! those that are or were mirror topics (a deleted mirror's topics keep their fillers) — so the
//! proxy masks fillers there and nowhere else. Deciding states belongs to the engine; refusing
//! writes and masking to the proxy.
//!
//! Requests that name topics by id (Produce v13+, DeleteTopics v6+) can only be checked against
//! mirror topics whose destination id is known: while some mirror topic's id is not known yet
//! (after a restart, before the destination's metadata answered), [`MirrorTopics::ids_pending`]
//! says so and the proxy refuses unknown ids (retriably) rather than let one through. A mirror
//! topic the destination does not have at all has no id to protect; it is marked absent until it
//! appears (`follow::learn_ids` keeps looking).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

/// One registered mirror topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorTopic {
    pub mirror: String,
    /// Destination topic id (all zero until known).
    pub topic_id: [u8; 16],
    /// Writable by clients (the topic was stopped / failed over).
    pub writable: bool,
}

/// Mirror topics by name and by destination topic id; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct MirrorTopics {
    by_name: Arc<DashMap<String, MirrorTopic>>,
    by_id: Arc<DashMap<[u8; 16], String>>,
    /// Topics that are or were mirror topics (may hold fillers): name → destination topic id
    /// (all zero until known), and the known ids.
    fillers_by_name: Arc<DashMap<String, [u8; 16]>>,
    fillers_by_id: Arc<DashMap<[u8; 16], ()>>,
    /// How many of them have no known id yet.
    unknown_ids: Arc<AtomicUsize>,
    /// Mirror topics without a known id that the destination does not have (no id to protect).
    absent: Arc<DashMap<String, ()>>,
    /// Signalled when a topic without a known id is registered (the id learner wakes up).
    id_wanted: Arc<tokio::sync::Notify>,
    /// The destination topic id of the engine's state topic, once learned (the proxy refuses it
    /// to clients by name and by id).
    state_topic_id: Arc<std::sync::OnceLock<[u8; 16]>>,
}

impl MirrorTopics {
    /// Records the state topic's destination id (first value wins).
    pub fn set_state_topic_id(&self, id: [u8; 16]) {
        let _ = self.state_topic_id.set(id);
    }

    /// The state topic's destination id, once learned.
    pub fn state_topic_id(&self) -> Option<[u8; 16]> {
        self.state_topic_id.get().copied()
    }

    /// Registers (or updates) `topic` as `mirror`'s, read-only; `topic_id` all zero if unknown.
    pub fn register(&self, topic: &str, mirror: &str, topic_id: [u8; 16]) {
        self.mark_filler_topic(topic, topic_id);
        if topic_id != [0; 16] {
            self.by_id.insert(topic_id, topic.to_owned());
        }
        let mut e = self.by_name.entry(topic.to_owned()).or_insert_with(|| MirrorTopic {
            mirror: mirror.to_owned(),
            topic_id,
            writable: false,
        });
        e.mirror = mirror.to_owned();
        if topic_id != [0; 16] {
            e.topic_id = topic_id;
        } else if e.topic_id == [0; 16] {
            self.id_wanted.notify_one();
        }
    }

    /// Woken when a topic whose destination id is unknown is registered.
    pub fn id_wanted(&self) -> Arc<tokio::sync::Notify> {
        self.id_wanted.clone()
    }

    /// Records that the destination has no topic `topic` (a mirror topic whose id is unknown):
    /// until it appears, there is no id by which it could be written.
    pub fn mark_absent(&self, topic: &str) {
        if self.by_name.get(topic).is_some_and(|t| t.topic_id == [0; 16]) {
            self.absent.insert(topic.to_owned(), ());
        }
    }

    /// Whether some mirror topic (or former one) the destination has is not known by id yet:
    /// a request naming a topic by an unknown id may then be naming it (no allocation).
    pub fn ids_pending(&self) -> bool {
        self.unknown_ids.load(Ordering::Relaxed) > self.absent.len()
    }

    /// Marks `topic` writable (stopped / failed over) or read-only again.
    pub fn set_writable(&self, topic: &str, writable: bool) {
        if let Some(mut t) = self.by_name.get_mut(topic) {
            t.writable = writable;
        }
    }

    /// Records that `topic` (destination id `topic_id`, all zero if unknown) holds or may hold
    /// fillers: a mirror topic, or one that was (from the state topic after a restart).
    pub fn mark_filler_topic(&self, topic: &str, topic_id: [u8; 16]) {
        let mut e = self.fillers_by_name.entry(topic.to_owned()).or_insert_with(|| {
            self.unknown_ids.fetch_add(1, Ordering::Relaxed);
            [0; 16]
        });
        if topic_id != [0; 16] {
            if *e == [0; 16] {
                self.unknown_ids.fetch_sub(1, Ordering::Relaxed);
            }
            *e = topic_id;
            self.fillers_by_id.insert(topic_id, ());
            drop(e);
            self.absent.remove(topic);
            // One id per topic: a mirror topic registered before its id was known learns it
            // here too, or its filler entry would stop counting as pending while requests by
            // its id still went unchecked.
            if let Some(mut t) = self.by_name.get_mut(topic)
                && t.topic_id == [0; 16]
            {
                t.topic_id = topic_id;
                self.by_id.insert(topic_id, topic.to_owned());
            }
        }
    }

    /// Records the destination id of `topic`, whether it is a mirror topic or one that was
    /// (a follower learns ids after the state topic named the topics).
    pub fn learn_topic_id(&self, topic: &str, topic_id: [u8; 16]) {
        if topic_id == [0; 16] {
            return;
        }
        if let Some(mut t) = self.by_name.get_mut(topic) {
            t.topic_id = topic_id;
            self.by_id.insert(topic_id, topic.to_owned());
        }
        if self.fillers_by_name.contains_key(topic) {
            self.mark_filler_topic(topic, topic_id);
        }
    }

    /// Mirror topics, and topics that were, whose destination id is not known yet.
    pub fn topics_without_id(&self) -> Vec<String> {
        let mut out: Vec<String> = self.by_name.iter().filter(|t| t.topic_id == [0; 16]).map(|t| t.key().clone()).collect();
        out.extend(
            self.fillers_by_name
                .iter()
                .filter(|e| *e.value() == [0; 16] && !self.by_name.contains_key(e.key()))
                .map(|e| e.key().clone()),
        );
        out.sort();
        out
    }

    /// Whether `topic` is a registered mirror topic (read-only or not).
    pub fn is_mirror_topic(&self, topic: &str) -> bool {
        self.by_name.contains_key(topic)
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
        self.by_name.get(topic).map(|t| t.topic_id).filter(|id| *id != [0; 16])
    }

    /// Forgets `topic` as a mirror topic (its mirror was deleted; it is an ordinary topic again)
    /// but keeps it among the topics that may hold fillers: the fillers stay in its log.
    pub fn remove(&self, topic: &str) {
        if let Some((_, t)) = self.by_name.remove(topic) {
            self.by_id.remove(&t.topic_id);
        }
    }

    /// Whether any topic is registered (a proxy without mirrors skips every check).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Whether clients may not write to `topic` (no allocation: the Produce path asks this).
    pub fn is_read_only(&self, topic: &str) -> bool {
        self.by_name.get(topic).is_some_and(|t| !t.writable)
    }

    /// Whether clients may not write to the destination topic with this id (no allocation).
    pub fn is_read_only_id(&self, topic_id: &[u8; 16]) -> bool {
        self.by_id.get(topic_id).is_some_and(|name| self.is_read_only(&name))
    }

    /// The mirror owning `topic` if clients may not write to it.
    pub fn read_only(&self, topic: &str) -> Option<String> {
        self.by_name.get(topic).filter(|t| !t.writable).map(|t| t.mirror.clone())
    }

    /// `(topic, mirror)` for a destination topic id clients may not write to.
    pub fn read_only_id(&self, topic_id: &[u8; 16]) -> Option<(String, String)> {
        let name = self.by_id.get(topic_id)?.clone();
        self.read_only(&name).map(|m| (name, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_topics_are_read_only_by_name_and_by_id() {
        let r = MirrorTopics::default();
        assert!(r.is_empty());
        r.register("orders", "dr", [0; 16]);
        assert_eq!(r.read_only("orders").as_deref(), Some("dr"));
        assert_eq!(r.read_only_id(&[7; 16]), None, "id not known yet");
        r.register("orders", "dr", [7; 16]);
        assert_eq!(r.read_only_id(&[7; 16]), Some(("orders".into(), "dr".into())));
        assert_eq!(r.read_only("payments"), None);
        assert!(r.is_read_only("orders") && r.is_read_only_id(&[7; 16]), "the allocation-free forms agree");
        assert!(!r.is_read_only("payments") && !r.is_read_only_id(&[8; 16]));
        r.set_writable("orders", true);
        assert!(!r.is_read_only("orders") && !r.is_read_only_id(&[7; 16]), "a stopped topic is writable");
    }

    #[test]
    fn ids_learned_later_reach_the_read_only_and_filler_checks() {
        let r = MirrorTopics::default();
        r.register("orders", "dr", [0; 16]);
        r.mark_filler_topic("old", [0; 16]);
        assert_eq!(r.topics_without_id(), vec!["old".to_owned(), "orders".to_owned()]);
        r.learn_topic_id("orders", [7; 16]);
        r.learn_topic_id("old", [9; 16]);
        r.learn_topic_id("unknown", [5; 16]);
        assert!(r.topics_without_id().is_empty());
        assert!(r.is_read_only_id(&[7; 16]) && r.may_hold_fillers_id(&[7; 16]));
        assert!(!r.is_read_only_id(&[9; 16]) && r.may_hold_fillers_id(&[9; 16]));
        assert!(!r.may_hold_fillers_id(&[5; 16]) && !r.is_mirror_topic("unknown"), "only known topics learn ids");
    }

    #[test]
    fn ids_are_pending_while_a_mirror_topic_the_destination_has_is_not_known_by_id() {
        let r = MirrorTopics::default();
        assert!(!r.ids_pending(), "nothing registered");
        r.register("orders", "dr", [0; 16]);
        r.register("payments", "dr", [0; 16]);
        assert!(r.ids_pending(), "restarted: ids not learned yet");
        r.learn_topic_id("orders", [7; 16]);
        assert!(r.ids_pending(), "payments is still unknown");
        r.mark_absent("orders");
        r.mark_absent("payments");
        assert!(!r.ids_pending(), "the destination has no payments topic: no id to protect");
        r.learn_topic_id("payments", [8; 16]);
        assert!(!r.ids_pending() && r.is_read_only_id(&[8; 16]), "created later: learned, protected");
        r.register("refunds", "dr", [0; 16]);
        assert!(r.ids_pending(), "a new topic without id");
        r.mark_absent("refunds");
        r.remove("refunds");
        r.forget_filler_topic("refunds");
        assert!(!r.ids_pending(), "a forgotten absent topic leaves the counts even");
        r.mark_filler_topic("old", [0; 16]);
        assert!(r.ids_pending(), "a former mirror topic may still hold fillers under an unknown id");
    }

    #[test]
    fn an_id_learned_for_filler_masking_protects_the_mirror_topic_too() {
        // Boot registers stored mirror topics by name; the filler-id lookup learns their ids.
        let r = MirrorTopics::default();
        r.register("orders", "dr", [0; 16]);
        r.mark_filler_topic("orders", [7; 16]);
        assert!(!r.ids_pending());
        assert!(r.is_read_only_id(&[7; 16]), "the id that ended the pending state is checked");
    }

    #[test]
    fn only_topics_that_are_or_were_mirror_topics_may_hold_fillers() {
        let r = MirrorTopics::default();
        assert!(!r.has_filler_topics());
        r.register("orders", "dr", [0; 16]);
        assert!(
            r.may_hold_fillers_id(&[8; 16]),
            "while a mirror topic's id is unknown, every id may hold fillers"
        );
        r.register("orders", "dr", [7; 16]);
        r.remove("orders");
        assert_eq!(r.read_only("orders"), None, "a deleted mirror's topic is writable");
        assert!(r.may_hold_fillers("orders") && r.may_hold_fillers_id(&[7; 16]), "its fillers are still masked");
        assert!(!r.may_hold_fillers("payments") && !r.may_hold_fillers_id(&[8; 16]));
        r.mark_filler_topic("old", [9; 16]);
        assert!(
            r.may_hold_fillers_id(&[9; 16]) && r.read_only("old").is_none(),
            "a former mirror topic from the state topic"
        );
        r.mark_filler_topic("gone", [0; 16]);
        assert!(r.may_hold_fillers_id(&[8; 16]));
        r.forget_filler_topic("gone");
        assert!(
            !r.may_hold_fillers_id(&[8; 16]) && !r.may_hold_fillers("gone"),
            "a topic deleted on the destination is forgotten"
        );
    }

    #[test]
    fn a_mirror_topic_the_destination_lacks_does_not_mask_other_topics_read_by_id() {
        let r = MirrorTopics::default();
        r.register("orders", "dr", [7; 16]);
        r.register("not-created-yet", "dr", [0; 16]);
        assert!(r.may_hold_fillers_id(&[8; 16]), "its id may be any id until the destination answered");
        r.mark_absent("not-created-yet");
        assert!(r.wants_ids(), "still looked for");
        assert!(
            !r.may_hold_fillers_id(&[8; 16]),
            "a plain topic read by id is not masked because a mirror topic does not exist yet"
        );
        assert!(r.may_hold_fillers_id(&[7; 16]), "the existing mirror topic is still masked");
        r.learn_topic_id("not-created-yet", [9; 16]);
        assert!(r.may_hold_fillers_id(&[9; 16]) && !r.wants_ids(), "once created and learned, masked");
    }
}
