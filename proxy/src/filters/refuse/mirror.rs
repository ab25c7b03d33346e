//! The read-only mirror topics as a [`Protected`] set: which topics the engine owns (its
//! `Catalog`) and the refusal message naming the mirror and how to make the topic writable. The
//! `mirror_topics` filter guards them with it.

use super::Protected;

/// The read-only mirror topics (the engine's registry).
pub(crate) struct MirrorTopicGuard<'a>(pub(crate) &'a kmp_mirror_engine::Catalog);

fn message(topic: &str, mirror: &str) -> String {
    format!(
        "topic {topic} is a read-only mirror topic of cluster mirror {mirror}; stop mirroring it (kafka-mirror-proxy mirrors --stop --mirror {mirror} --topics {topic}) to make it writable"
    )
}

impl Protected for MirrorTopicGuard<'_> {
    fn by_name(&self, topic: &str) -> Option<String> {
        self.0.read_only(topic).map(|m| message(topic, &m))
    }
    fn by_id(&self, id: &[u8; 16]) -> Option<(String, String)> {
        self.0.read_only_id(id).map(|(t, m)| {
            let msg = message(&t, &m);
            (t, msg)
        })
    }
    fn any(&self) -> bool {
        !self.0.is_empty()
    }
    fn produce_code(&self) -> i16 {
        super::produce::READ_ONLY_CODE
    }
    fn pending_id(&self, id: &[u8; 16]) -> Option<String> {
        (self.0.ids_pending() && !self.0.is_read_only_id(id)).then(|| {
            format!(
                "topic id {} may be a read-only mirror topic's: the proxy has not learned every mirror topic's id from the destination yet; retry shortly",
                uuid_text(id)
            )
        })
    }
}

/// A topic id as Kafka prints it (its UUID form).
pub(crate) fn uuid_text(id: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*id).to_string()
}
