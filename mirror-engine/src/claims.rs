//! Which mirror owns which topic inside one engine: the claim a mirror takes before it prepares
//! a topic, and the reservations made at boot for topics the state topic records as a mirror's.
//!
//! A reservation makes a stored topic count as its mirror's from the moment the engine has
//! booted — for listing, for refusing another mirror's start and for refusing a delete of a
//! mirror that still has running topics — even though the mirror's discovery loop takes it up
//! (prepares it, starts its copy tasks) only a little later. What a topic's copy does belongs to
//! `lifecycle`; the desired state and the runtime handles belong to `control`.

use dashmap::{DashMap, DashSet};

/// Topic → owning mirror, plus the stored topics not taken up by their discovery loop yet.
#[derive(Default)]
pub(crate) struct Claims {
    owner: DashMap<String, String>,
    reserved: DashSet<String>,
}

impl Claims {
    /// Takes `topic` for `mirror` so its discovery loop prepares it: true when the topic was
    /// free, or reserved for this very mirror at boot and not taken up yet (the reservation is
    /// consumed); false when some mirror already has it.
    pub(crate) fn claim(&self, topic: &str, mirror: &str) -> bool {
        match self.owner.entry(topic.to_owned()) {
            dashmap::Entry::Vacant(v) => {
                v.insert(mirror.to_owned());
                true
            }
            dashmap::Entry::Occupied(o) => o.get() == mirror && self.reserved.remove(topic).is_some(),
        }
    }

    /// Records at boot that the stored `topic` is `mirror`'s; its discovery loop still has to
    /// `claim` it to take it up. A topic someone already owns is left alone.
    pub(crate) fn reserve(&self, topic: &str, mirror: &str) {
        if let dashmap::Entry::Vacant(v) = self.owner.entry(topic.to_owned()) {
            v.insert(mirror.to_owned());
            self.reserved.insert(topic.to_owned());
        }
    }

    /// Marks `topic` as `mirror`'s without any task taking it up (a follower's view).
    pub(crate) fn show(&self, topic: &str, mirror: &str) {
        self.owner.insert(topic.to_owned(), mirror.to_owned());
    }

    /// The mirror that owns `topic`.
    pub(crate) fn owner(&self, topic: &str) -> Option<String> {
        self.owner.get(topic).map(|m| m.clone())
    }

    /// Topics owned by `mirror`, sorted.
    pub(crate) fn topics_of(&self, mirror: &str) -> Vec<String> {
        let mut out: Vec<String> = self.owner.iter().filter(|e| e.value() == mirror).map(|e| e.key().clone()).collect();
        out.sort();
        out
    }

    /// Forgets `topic` (its mirror was deleted).
    pub(crate) fn release(&self, topic: &str) {
        self.owner.remove(topic);
        self.reserved.remove(topic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_topic_is_owned_at_once_and_taken_up_once_by_its_own_mirror() {
        let c = Claims::default();
        c.reserve("orders", "m1");
        assert_eq!(c.owner("orders").as_deref(), Some("m1"));
        assert_eq!(c.topics_of("m1"), vec!["orders".to_owned()]);
        assert!(!c.claim("orders", "m2"), "another mirror cannot take a reserved topic");
        assert!(c.claim("orders", "m1"), "its own mirror takes it up");
        assert!(!c.claim("orders", "m1"), "and only once");
    }

    #[test]
    fn a_reservation_never_displaces_a_claim() {
        let c = Claims::default();
        assert!(c.claim("orders", "m1"));
        c.reserve("orders", "m2");
        assert_eq!(c.owner("orders").as_deref(), Some("m1"));
        assert!(!c.claim("orders", "m1"), "a claimed topic is not taken up twice");
        c.release("orders");
        assert!(c.claim("orders", "m2"), "a released topic is free");
    }
}
