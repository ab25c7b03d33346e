//! A follower's view of the state topic (sans-io): each entry read from it — `mirror/…`,
//! `topic/…`, `former/…`, `partition/…/…` (see `state`) — is applied to what the rest of the proxy
//! consults: the instance's catalog of mirror topics (`catalog`, which the Produce and
//! Fetch filters ask), and the list / describe views of the follower's `TermControl`. Nothing polls: a change is visible
//! to every connection as soon as it is applied here.
//!
//! The entries come from the destination cluster, so each one is checked before it is used:
//! keys must name legal topics and partitions, values must parse as the engine's records (the
//! same types and parser the engine's own load uses), a mirror record must name the mirror of
//! its key. Anything else is ignored with a warning and changes nothing — a topic already known
//! keeps its last good state. Reading the topic belongs to `follow`.

use std::collections::HashMap;

use tracing::{debug, warn};

use crate::control::TermControl;
use crate::follow::writes::CatalogWrites;
use crate::state::records::{FormerTopicRecord, MirrorRecord, PartitionRecord, TopicRecord, id_from_hex};
use crate::state::store::parse_value;

/// Partition numbers above this are not believed (a forged count would make views iterate it).
const MAX_PARTITIONS: usize = 1 << 20;

/// What one entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The views changed (or were confirmed).
    Changed,
    /// The entry was not used, and why.
    Ignored(String),
}

/// The followed state, applied entry by entry.
pub(crate) struct FollowedState {
    control: TermControl,
    /// What this follower writes into the instance's catalog (held while a term runs beside it).
    writes: CatalogWrites,
    /// `(topic, partition)` → mirror of the partition records shown (for their tombstones).
    partitions: HashMap<(String, i32), String>,
}

/// Whether `name` is a legal Kafka topic (and mirror) name.
fn legal_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 249 && name != "." && name != ".." && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

impl FollowedState {
    #[cfg(test)]
    pub(crate) fn new(control: TermControl) -> Self {
        Self::held_back_by(control, None)
    }

    /// A followed state whose catalog writes wait while `held_back` says an engine term of this
    /// instance runs (see `follow::writes`).
    pub(crate) fn held_back_by(control: TermControl, held_back: Option<tokio::sync::watch::Receiver<bool>>) -> Self {
        Self {
            writes: CatalogWrites::new(control.catalog().clone(), held_back),
            control,
            partitions: HashMap::new(),
        }
    }

    /// Applies the catalog writes held while an engine term ran beside this follower.
    pub(crate) fn release_held(&mut self) {
        self.writes.release();
    }

    /// Applies one entry (`None`: a tombstone).
    pub(crate) fn apply(&mut self, key: &str, value: Option<&[u8]>) -> Applied {
        let applied = match key.split_once('/') {
            Some(("mirror", name)) => self.mirror(key, name, value),
            Some(("topic", topic)) => self.topic(key, topic, value),
            Some(("former", topic)) => self.former(key, topic, value),
            Some(("partition", rest)) => self.partition(key, rest, value),
            // The engine's producer identity: nothing a follower enforces or shows.
            Some(("engine", "producer")) => Applied::Changed,
            // How a failback took a topic back: the topic's own record says what clients may do.
            Some(("failback", _)) => Applied::Changed,
            // A management request forwarded by a standby: the active instance answers it.
            Some(("request", _)) => Applied::Changed,
            // The answer to one: handed to the caller waiting on this instance, if it is here.
            Some(("response", id)) => {
                if let (Some(frame), Some(forwarding)) = (value, self.control.forwarding()) {
                    forwarding.deliver(id, frame);
                }
                Applied::Changed
            }
            _ => Applied::Ignored(format!("unknown key {key:?}")),
        };
        match &applied {
            Applied::Ignored(why) => warn!(key, why, "state topic entry ignored"),
            Applied::Changed => debug!(key, tombstone = value.is_none(), "state topic entry applied"),
        }
        applied
    }

    fn mirror(&mut self, key: &str, name: &str, value: Option<&[u8]>) -> Applied {
        if !legal_name(name) {
            return Applied::Ignored("not a legal mirror name".into());
        }
        let Some(raw) = value else {
            self.control.remove_mirror(name);
            return Applied::Changed;
        };
        let Some(record) = parse_value::<MirrorRecord>(key, raw) else {
            return Applied::Ignored("unreadable mirror record".into());
        };
        if record.definition.name != name {
            return Applied::Ignored(format!("the record defines mirror {:?}, not {name:?}", record.definition.name));
        }
        self.control.add_mirror(record.definition);
        Applied::Changed
    }

    fn topic(&mut self, key: &str, topic: &str, value: Option<&[u8]>) -> Applied {
        if !legal_name(topic) {
            return Applied::Ignored("not a legal topic name".into());
        }
        let Some(raw) = value else {
            // Its mirror was deleted: an ordinary topic again (its fillers stay masked).
            self.control.forget_view(topic);
            self.writes.topic(topic, None);
            return Applied::Changed;
        };
        let Some(record) = parse_value::<TopicRecord>(key, raw) else {
            return Applied::Ignored("unreadable topic record".into());
        };
        if !legal_name(&record.mirror) || record.partitions > MAX_PARTITIONS {
            return Applied::Ignored(format!("mirror {:?} with {} partitions is not believable", record.mirror, record.partitions));
        }
        if !believable_shifts(&record.offset_shifts, record.partitions) {
            return Applied::Ignored("offset shifts that are not believable".into());
        }
        if let crate::state::records::Stored::Unknown(other) = &record.desired {
            warn!(key, desired = %other, "the stored desired state is not one this version knows; shown as mirroring");
        }
        self.control
            .show_followed_topic(topic, &record.mirror, record.partitions, record.desired_state());
        // A topic's shifts are fixed before its first record: applied at once, never held.
        self.writes.shifts(topic, &record.offset_shifts);
        self.writes.topic(topic, Some((&record.mirror, record.is_writable())));
        Applied::Changed
    }

    fn former(&mut self, key: &str, topic: &str, value: Option<&[u8]>) -> Applied {
        if !legal_name(topic) {
            return Applied::Ignored("not a legal topic name".into());
        }
        let Some(raw) = value else {
            // Fillers stay in the log whatever the state says: keep masking them.
            return Applied::Changed;
        };
        let Some(record) = parse_value::<FormerTopicRecord>(key, raw) else {
            return Applied::Ignored("unreadable former-topic record".into());
        };
        if !believable_shifts(&record.offset_shifts, MAX_PARTITIONS) {
            return Applied::Ignored("offset shifts that are not believable".into());
        }
        self.writes.shifts(topic, &record.offset_shifts);
        self.writes.former(topic, id_from_hex(&record.topic_id).unwrap_or([0; 16]));
        Applied::Changed
    }

    fn partition(&mut self, key: &str, rest: &str, value: Option<&[u8]>) -> Applied {
        let Some((topic, p)) = rest.rsplit_once('/') else {
            return Applied::Ignored("no partition number".into());
        };
        let partition = match p.parse::<i32>() {
            Ok(p) if p >= 0 && (p as usize) < MAX_PARTITIONS => p,
            _ => return Applied::Ignored("not a partition number".into()),
        };
        if !legal_name(topic) {
            return Applied::Ignored("not a legal topic name".into());
        }
        let board = self.control.status_board();
        let Some(raw) = value else {
            if let Some(mirror) = self.partitions.remove(&(topic.to_owned(), partition)) {
                board.remove(&(mirror, topic.to_owned(), partition));
            }
            return Applied::Changed;
        };
        let Some(record) = parse_value::<PartitionRecord>(key, raw) else {
            return Applied::Ignored("unreadable partition record".into());
        };
        if !legal_name(&record.mirror) {
            return Applied::Ignored("not a legal mirror name".into());
        }
        let shown = (topic.to_owned(), partition);
        if let Some(before) = self.partitions.insert(shown, record.mirror.clone())
            && before != record.mirror
        {
            board.remove(&(before, topic.to_owned(), partition));
        }
        board.update(&(record.mirror.clone(), topic.to_owned(), partition), |s| record.show_in(s));
        Applied::Changed
    }
}

/// Offset shifts a record may carry: at most one per partition, none negative.
fn believable_shifts(shifts: &[i64], partitions: usize) -> bool {
    shifts.len() <= partitions && shifts.iter().all(|&s| s >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::catalog::Catalog;
    use crate::state::records::Desired;
    use crate::state::status::{PartitionState, StatusBoard};

    fn followed() -> (FollowedState, Catalog, TermControl) {
        let registry = Catalog::default();
        let control = crate::control::follower_for_tests(StatusBoard::default(), registry.clone());
        (FollowedState::new(control.clone()), registry, control)
    }

    fn topic_record(desired: &str, writable: Option<bool>) -> Vec<u8> {
        let w = writable.map_or(String::new(), |w| format!(r#","writable":{w}"#));
        format!(r#"{{"mirror":"dr","partitions":2,"how":"created","at_ms":1,"desired":"{desired}"{w}}}"#).into_bytes()
    }

    #[test]
    fn a_mirror_topic_is_read_only_until_the_engine_records_its_stop_as_finished() {
        let (mut c, registry, control) = followed();
        let def = serde_json::json!({"origin": "api", "definition": {"name": "dr", "source_bootstrap_servers": ["s:1"]}});
        assert_eq!(c.apply("mirror/dr", Some(def.to_string().as_bytes())), Applied::Changed);
        assert_eq!(c.apply("topic/orders", Some(&topic_record("mirroring", Some(false)))), Applied::Changed);
        assert_eq!(registry.read_only("orders").as_deref(), Some("dr"));
        assert!(registry.may_hold_fillers("orders"));
        let listed = control.list();
        assert_eq!((listed[0].name.as_str(), listed[0].topics.clone()), ("dr", vec!["orders".to_owned()]));

        c.apply("topic/orders", Some(&topic_record("stopped", Some(false))));
        assert!(registry.is_read_only("orders"), "stop requested: copying may still run on the engine");
        assert_eq!(control.desired("orders"), Some(Desired::Stopped));
        c.apply("topic/orders", Some(&topic_record("stopped", Some(true))));
        assert!(!registry.is_read_only("orders"), "the stop finished: writable");

        c.apply("topic/orders", None);
        assert!(
            !registry.is_mirror_topic("orders") && registry.may_hold_fillers("orders"),
            "deleted mirror: fillers stay masked"
        );
        assert!(control.list()[0].topics.is_empty());
        c.apply("mirror/dr", None);
        assert!(control.list().is_empty() && !control.has_mirror("dr"));
    }

    #[test]
    fn partition_records_feed_describe_and_their_tombstones_remove_them() {
        let (mut c, _, control) = followed();
        let def = serde_json::json!({"origin": "config", "definition": {"name": "dr", "source_bootstrap_servers": ["s:1"]}});
        c.apply("mirror/dr", Some(def.to_string().as_bytes()));
        let rec = r#"{"mirror":"dr","state":"mirroring","next_offset":40,"source_high_watermark":42,"records":30,"fillers":10,"bytes":999,"error":null,"sticky":false}"#;
        assert_eq!(c.apply("partition/orders/1", Some(rec.as_bytes())), Applied::Changed);
        let described = control.describe("dr");
        let (topic, parts) = &described[0];
        let s = &parts[0].status;
        assert_eq!((topic.as_str(), parts[0].partition), ("orders", 1));
        assert_eq!(
            (s.state, s.destination_next_offset, s.lag_records(), s.filler_records),
            (PartitionState::Mirroring, 40, 2, 10)
        );
        c.apply("partition/orders/1", None);
        assert!(control.describe("dr").is_empty());
    }

    #[test]
    fn hostile_entries_are_ignored_and_change_nothing() {
        let (mut c, registry, control) = followed();
        c.apply("topic/orders", Some(&topic_record("mirroring", None)));
        for (key, value) in [
            ("topic/orders", Some(&b"{not json"[..])),
            ("topic/orders", Some(&b"[]"[..])),
            ("topic/bad name", Some(&topic_record("stopped", Some(true))[..])),
            ("topic/../x", Some(&topic_record("stopped", Some(true))[..])),
            ("topic/", None),
            ("partition/orders/-1", Some(&b"{}"[..])),
            ("partition/orders/x", Some(&b"{}"[..])),
            ("partition/orders", Some(&b"{}"[..])),
            ("partition/orders/99999999999", Some(&b"{}"[..])),
            (
                "mirror/dr",
                Some(&br#"{"origin":"api","definition":{"name":"other","source_bootstrap_servers":[]}}"#[..]),
            ),
            ("nonsense", None),
            ("", Some(&b"\xff\xfe"[..])),
        ] {
            assert!(matches!(c.apply(key, value), Applied::Ignored(_)), "{key:?} must be ignored");
        }
        let huge = br#"{"mirror":"dr","partitions":99999999999,"how":"created","at_ms":1,"desired":"stopped","writable":true}"#;
        assert!(matches!(c.apply("topic/orders", Some(huge)), Applied::Ignored(_)));
        assert!(registry.is_read_only("orders"), "a topic keeps its last good state");
        assert!(!control.has_mirror("other") && !control.has_mirror("dr"));
    }
}
