//! Which destination topics belong to a mirror and whether clients may write to them: the
//! proxy consults this on every Produce it has to check. A mirror topic is read-only in every
//! state except stopped (KIP-1279 §7). Deciding states belongs to the engine; refusing writes to
//! the proxy.

use std::sync::Arc;

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
}

impl MirrorTopics {
    /// Registers (or updates) `topic` as `mirror`'s, read-only; `topic_id` all zero if unknown.
    pub fn register(&self, topic: &str, mirror: &str, topic_id: [u8; 16]) {
        if topic_id != [0; 16] {
            self.by_id.insert(topic_id, topic.to_owned());
        }
        let mut e = self.by_name.entry(topic.to_owned()).or_insert_with(|| MirrorTopic { mirror: mirror.to_owned(), topic_id, writable: false });
        e.mirror = mirror.to_owned();
        if topic_id != [0; 16] {
            e.topic_id = topic_id;
        }
    }

    /// Marks `topic` writable (stopped / failed over) or read-only again.
    pub fn set_writable(&self, topic: &str, writable: bool) {
        if let Some(mut t) = self.by_name.get_mut(topic) {
            t.writable = writable;
        }
    }

    /// Forgets `topic` (its mirror was deleted; it is an ordinary topic again).
    pub fn remove(&self, topic: &str) {
        if let Some((_, t)) = self.by_name.remove(topic) {
            self.by_id.remove(&t.topic_id);
        }
    }

    /// Whether any topic is registered (a proxy without mirrors skips every check).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
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
    }
}
