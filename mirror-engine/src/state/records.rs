//! What the state topic holds (`engine.state_topic`, default `__kmp_mirror_state`): its key
//! schema and the JSON records under each key. Reading and writing them is `store`'s.
//!
//! - `mirror/<name>` → [`MirrorRecord`]: the definition and where it came from;
//! - `topic/<topic>` → [`TopicRecord`]: the destination topic belongs to this mirror (written once
//!   the engine created it or adopted it empty; a destination topic with data and no such record
//!   is refused), with the operator's [`Desired`] state;
//! - `former/<topic>` → [`FormerTopicRecord`]: the topic was a mirror topic and its mirror was
//!   deleted; it is an ordinary topic now, but its log still holds fillers (masked for clients);
//! - `partition/<topic>/<p>` → [`PartitionRecord`]: state and progress, written every
//!   `engine.state_flush_interval_ms` when changed and on shutdown;
//! - `engine/producer` ([`ENGINE_PRODUCER_KEY`]): the engine's producer identity
//!   (`copy::produce::producer_id`);
//! - `request/<id>` and `response/<id>` ([`REQUEST_PREFIX`], [`RESPONSE_PREFIX`]): management
//!   requests forwarded by a standby and their answers (`ha::forward`), one-shot messages, not
//!   state.

use kmp_config::MirrorConfig;
use serde::{Deserialize, Serialize};

use crate::state::status::{PartitionState, PartitionStatus};

/// A mirror definition as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorRecord {
    /// `config` (declared in the config file) — the admin APIs will add `api`.
    pub origin: String,
    pub definition: MirrorConfig,
}

/// Ownership of a destination topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub mirror: String,
    pub partitions: usize,
    /// `created` (the engine created it) or `adopted` (it existed and was empty).
    pub how: String,
    pub at_ms: i64,
    /// What the operator asked for: `mirroring` (default), `paused` or `stopped`.
    #[serde(default = "mirroring")]
    pub desired: String,
    /// The source topic's id (32 hex digits) when the mirror took it up; a source topic of the
    /// same name with another id is a different topic (deleted and recreated). Empty in records
    /// written before ids were kept: learned at the next contact.
    #[serde(default)]
    pub source_topic_id: String,
    /// Whether clients may write to the topic. The engine records `true` only once a stop
    /// (failover) has finished — copying halted, in-flight writes settled, the last group offset
    /// sync done — so proxies that follow the state topic open it no earlier; every other state
    /// change records `false`. Absent in records written before followers existed: then
    /// `desired == "stopped"` decides (see [`TopicRecord::is_writable`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
}

impl TopicRecord {
    /// Whether clients may write to the topic, as the engine recorded it.
    pub fn is_writable(&self) -> bool {
        self.writable.unwrap_or(self.desired == "stopped")
    }
}

/// A destination topic that was a mirror topic (its fillers stay in its log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormerTopicRecord {
    pub mirror: String,
    /// The destination topic's id (32 hex digits; empty if it was never learned).
    pub topic_id: String,
    pub at_ms: i64,
}

/// A topic id as 32 hex digits (the state topic's form).
pub fn id_to_hex(id: [u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A topic id from its 32 hex digits; `None` for anything else (an empty field included).
pub fn id_from_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn mirroring() -> String {
    "mirroring".to_owned()
}

/// State and progress of one mirrored partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub mirror: String,
    pub state: String,
    /// Next destination offset at the time of writing (informational; resume uses the log end).
    pub next_offset: i64,
    pub source_high_watermark: i64,
    pub records: u64,
    pub fillers: u64,
    pub bytes: u64,
    pub error: Option<String>,
    /// A FAILED partition that must stay FAILED after a restart (offset drift, deleted source).
    pub sticky: bool,
}

impl PartitionRecord {
    /// Carries the stored progress counters into a fresh status (after a restart).
    pub(crate) fn restore_counters(&self, s: &mut PartitionStatus) {
        s.records_mirrored = self.records;
        s.filler_records = self.fillers;
        s.bytes_mirrored = self.bytes;
    }

    /// Shows the stored state and progress in `s` (a follower's view of a partition). The
    /// source end is known only as the stored high watermark, so lag is measured against it.
    pub(crate) fn show_in(&self, s: &mut PartitionStatus) {
        self.restore_counters(s);
        s.state = PartitionState::parse(&self.state).unwrap_or(PartitionState::Retrying);
        s.destination_next_offset = self.next_offset;
        s.source_high_watermark = self.source_high_watermark;
        s.source_last_stable_offset = self.source_high_watermark;
        s.last_error = self.error.clone();
        s.sticky = self.sticky;
    }

    pub(super) fn of(mirror: &str, s: &PartitionStatus) -> Self {
        Self {
            mirror: mirror.to_owned(),
            state: s.state.as_str().to_owned(),
            next_offset: s.destination_next_offset,
            source_high_watermark: s.source_high_watermark,
            records: s.records_mirrored,
            fillers: s.filler_records,
            bytes: s.bytes_mirrored,
            error: s.last_error.clone(),
            sticky: s.sticky,
        }
    }
}

/// What the operator wants a mirror topic to do (stored as [`TopicRecord::desired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desired {
    Mirroring,
    Paused,
    Stopped,
}

impl Desired {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mirroring => "mirroring",
            Self::Paused => "paused",
            Self::Stopped => "stopped",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "paused" => Self::Paused,
            "stopped" => Self::Stopped,
            _ => Self::Mirroring,
        }
    }
}

/// State key of the engine's producer identity.
pub(crate) const ENGINE_PRODUCER_KEY: &str = "engine/producer";

/// Key prefix of a forwarded request.
pub(crate) const REQUEST_PREFIX: &str = "request/";
/// Key prefix of the answer to a forwarded request.
pub(crate) const RESPONSE_PREFIX: &str = "response/";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_round_trip_through_hex_and_old_records_have_none() {
        let id = [0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xff];
        assert_eq!(id_from_hex(&id_to_hex(id)), Some(id));
        assert_eq!(id_from_hex(""), None, "records written before ids were kept");
        assert_eq!(id_from_hex("zz"), None);
        let old: TopicRecord = serde_json::from_str(r#"{"mirror":"m","partitions":2,"how":"created","at_ms":1}"#).unwrap();
        assert_eq!((old.desired.as_str(), old.source_topic_id.as_str()), ("mirroring", ""));
        assert!(!old.is_writable());
    }

    #[test]
    fn a_stopped_topic_is_writable_once_the_engine_recorded_it_and_old_records_follow_desired() {
        let rec = |json: &str| serde_json::from_str::<TopicRecord>(json).unwrap();
        let base = r#""mirror":"m","partitions":2,"how":"created","at_ms":1"#;
        assert!(
            rec(&format!(r#"{{{base},"desired":"stopped"}}"#)).is_writable(),
            "written before followers existed"
        );
        assert!(
            !rec(&format!(r#"{{{base},"desired":"stopped","writable":false}}"#)).is_writable(),
            "stop requested, copying not yet halted"
        );
        assert!(rec(&format!(r#"{{{base},"desired":"stopped","writable":true}}"#)).is_writable());
        let json = serde_json::to_string(&rec(&format!("{{{base}}}"))).unwrap();
        assert!(!json.contains("writable"), "an unset flag is not written: {json}");
    }
}
