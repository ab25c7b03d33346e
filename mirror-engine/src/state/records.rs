//! What the state topic holds (`engine.state_topic`, default `__kmp_mirror_state`): its key
//! schema and the JSON records under each key. Reading and writing them is `store`'s.
//!
//! - `mirror/<name>` → [`MirrorRecord`]: the definition and where it came from;
//! - `topic/<topic>` → [`TopicRecord`]: the destination topic belongs to this mirror (written once
//!   the engine created it or adopted it empty; a destination topic with data and no such record
//!   is refused), with the operator's [`Desired`] state;
//! - `former/<topic>` → [`FormerTopicRecord`]: the topic was a mirror topic and its mirror was
//!   deleted; it is an ordinary topic now, but its log still holds fillers (masked for clients);
//! - `failback/<topic>` → [`FailbackRecord`]: how a failback took the topic back (per partition,
//!   incremental from the line or restored after quarantining what lay past it), and how far
//!   it got (a restart resumes from it);
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
    /// Where the definition came from: the config file or the management API.
    pub origin: Stored<Origin>,
    pub definition: MirrorConfig,
}

/// Ownership of a destination topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub mirror: String,
    pub partitions: usize,
    /// Whether the engine created the topic or adopted it (it existed and was empty).
    pub how: Stored<How>,
    pub at_ms: i64,
    /// What the operator asked for: `mirroring` (default), `paused` or `stopped`.
    #[serde(default = "mirroring")]
    pub desired: Stored<Desired>,
    /// The source topic's id (32 hex digits) when the mirror took it up; a source topic of the
    /// same name with another id is a different topic (deleted and recreated). Empty in records
    /// written before ids were kept: learned at the next contact.
    #[serde(default)]
    pub source_topic_id: String,
    /// Whether clients may write to the topic. The engine records `true` only once a stop
    /// (failover) has finished — copying halted, in-flight writes settled, the last group offset
    /// sync done — so proxies that follow the state topic open it no earlier; every other state
    /// change records `false`. Absent in records written before followers existed: then
    /// `desired == stopped` decides (see [`TopicRecord::is_writable`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
    /// Per partition, the constant the proxy adds to every destination offset it shows for the
    /// partition (the source's log start when the mirror created the topic, if at least
    /// `shift_prefix_from`; see `copy::shift`); a partition past the end has none. Fixed when the
    /// topic is recorded, before the mirror's first write, for the life of the topic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offset_shifts: Vec<i64>,
    /// The source cluster's id as the engine last read it, recorded when the topic is stopped
    /// (with its partitions' lines): which cluster a failback may start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<String>,
}

impl TopicRecord {
    /// Whether clients may write to the topic, as the engine recorded it.
    pub fn is_writable(&self) -> bool {
        self.writable.unwrap_or(self.desired == Stored::Known(Desired::Stopped))
    }

    /// The desired state the engine acts on: a value this version does not know (written by
    /// another version) is acted on as `mirroring`, as every earlier version did; it stays in
    /// the record as written ([`Stored::Unknown`]), and the engine logs it where it takes the
    /// topic up.
    pub fn desired_state(&self) -> Desired {
        match &self.desired {
            Stored::Known(d) => *d,
            Stored::Unknown(_) => Desired::Mirroring,
        }
    }
}

/// A destination topic that was a mirror topic (its fillers stay in its log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormerTopicRecord {
    pub mirror: String,
    /// The destination topic's id (32 hex digits; empty if it was never learned).
    pub topic_id: String,
    pub at_ms: i64,
    /// The offset shifts the topic had as a mirror topic: they stay for its life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offset_shifts: Vec<i64>,
}

/// Key prefix of a failback's record.
pub(crate) const FAILBACK_PREFIX: &str = "failback/";

/// A failback of a destination topic: the mirror started for a topic that held data, copied
/// from here to the source's cluster before a failover (`failback`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailbackRecord {
    /// The mirror here that takes the topic back.
    pub mirror: String,
    /// The mirror on the source's proxy that had copied it there (and was stopped).
    pub source_mirror: String,
    /// The destination topic's id when the failback was planned (32 hex digits): a record of an
    /// earlier topic of that name is not this failback's.
    pub topic_id: String,
    pub at_ms: i64,
    /// `incremental` (every partition continues at its line), `quarantining`, `quarantined`
    /// (the tail is in the quarantine topic; the topic is being re-created) or `restoring`.
    pub phase: String,
    /// Where the records past the line went (empty for an incremental failback).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quarantine_topic: String,
    pub partitions: Vec<FailbackPartition>,
}

/// One partition of a [`FailbackRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailbackPartition {
    pub partition: i32,
    /// The line the source recorded (first offset not copied; -1 none) and its epoch.
    pub line: i64,
    pub line_epoch: i32,
    /// This cluster's log end when planned.
    pub end: i64,
    /// First offset quarantined (= `end` when nothing is).
    pub quarantined_from: i64,
    /// Data records, transaction markers and fillers in `[quarantined_from, end)`, once copied.
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub markers: u64,
    #[serde(default)]
    pub fillers: u64,
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

fn unknown_epoch() -> i32 {
    -1
}

fn mirroring() -> Stored<Desired> {
    Stored::Known(Desired::Mirroring)
}

/// State and progress of one mirrored partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub mirror: String,
    pub state: String,
    /// Next destination offset at the time of writing (informational; resume uses the log end).
    pub next_offset: i64,
    /// The source leader epoch of the last copied offset (`next_offset - 1`), -1 unknown. Once
    /// the topic is stopped, `next_offset` and this are the line a failback starts from.
    #[serde(default = "unknown_epoch")]
    pub last_mirror_epoch: i32,
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
        s.last_mirror_epoch = self.last_mirror_epoch;
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
            last_mirror_epoch: s.last_mirror_epoch,
            source_high_watermark: s.source_high_watermark,
            records: s.records_mirrored,
            fillers: s.filler_records,
            bytes: s.bytes_mirrored,
            error: s.last_error.clone(),
            sticky: s.sticky,
        }
    }
}

/// A value of an enumerated field of a stored record (the state topic holds it as a JSON
/// string): one this version knows, or the text another version wrote. An unknown value is kept
/// exactly as written — a record this version re-writes carries it on unchanged — and it is
/// never mistaken for a known one; what the engine does with it is decided where the field is
/// used (e.g. [`TopicRecord::desired_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored<T> {
    Known(T),
    Unknown(String),
}

impl<T: Named> Stored<T> {
    /// Whether the stored value is `value`.
    pub fn is(&self, value: T) -> bool {
        matches!(self, Self::Known(v) if *v == value)
    }

    /// The stored text.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(v) => v.as_str(),
            Self::Unknown(s) => s,
        }
    }
}

impl<T> From<T> for Stored<T> {
    fn from(value: T) -> Self {
        Self::Known(value)
    }
}

impl<T: Named> Serialize for Stored<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de, T: Named> Deserialize<'de> for Stored<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(match T::from_name(&text) {
            Some(v) => Self::Known(v),
            None => Self::Unknown(text),
        })
    }
}

/// An enumerated value with the name the state topic stores it under.
pub trait Named: Copy + Eq + Sized + 'static {
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == name)
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
}

impl Named for Desired {
    const ALL: &'static [Self] = &[Self::Mirroring, Self::Paused, Self::Stopped];
    fn as_str(self) -> &'static str {
        Desired::as_str(self)
    }
}

/// Where a mirror definition came from (stored as [`MirrorRecord::origin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Declared in the proxy's config file (changed there, dropped when no longer declared).
    Config,
    /// Created through the management API (CreateClusterMirror, REST).
    Api,
}

impl Named for Origin {
    const ALL: &'static [Self] = &[Self::Config, Self::Api];
    fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Api => "api",
        }
    }
}

/// How a destination topic became a mirror's (stored as [`TopicRecord::how`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The engine created it.
    Created,
    /// It existed and was empty.
    Adopted,
    /// It existed with data this cluster had been the source of, and a failback took it over at
    /// the line the other cluster's copy stopped at (`failback`).
    FailedBack,
}

impl Named for How {
    const ALL: &'static [Self] = &[Self::Created, Self::Adopted, Self::FailedBack];
    fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Adopted => "adopted",
            Self::FailedBack => "failed-back",
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
        assert_eq!((old.desired_state(), old.source_topic_id.as_str()), (Desired::Mirroring, ""));
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

    /// Records exactly as the version before the typed fields wrote them.
    const WRITTEN: [&str; 5] = [
        r#"{"mirror":"m","partitions":3,"how":"created","at_ms":1700000000000,"desired":"mirroring","source_topic_id":"00112233445566778899aabbccddeeff","writable":false}"#,
        r#"{"mirror":"m","partitions":3,"how":"adopted","at_ms":1700000000000,"desired":"paused","source_topic_id":"00112233445566778899aabbccddeeff"}"#,
        r#"{"mirror":"m","partitions":3,"how":"created","at_ms":1700000000000,"desired":"stopped","source_topic_id":"00112233445566778899aabbccddeeff","writable":true}"#,
        r#"{"origin":"config","definition":{"name":"m","source_bootstrap_servers":["src:9092"],"topics":[],"include":[],"exclude":[],"topic_refresh_interval_ms":10000,"start_position":"earliest","replication_factor":-1,"max_filler_batch_records":20000,"max_fill_offsets":100000000,"fetch_max_bytes":1048576,"group_offset_sync_interval_ms":10000,"groups_include":[".*"],"groups_exclude":[],"topic_config_sync_interval_ms":10000,"topic_config_exclude":["min.insync.replicas","unclean.leader.election.enable","leader.replication.throttled.replicas","follower.replication.throttled.replicas","remote.storage.enable","local.retention.ms","local.retention.bytes","confluent\\..*"]}}"#,
        r#"{"origin":"api","definition":{"name":"m","source_bootstrap_servers":["src:9092"],"topics":[],"include":[],"exclude":[],"topic_refresh_interval_ms":10000,"start_position":"earliest","replication_factor":-1,"max_filler_batch_records":20000,"max_fill_offsets":100000000,"fetch_max_bytes":1048576,"group_offset_sync_interval_ms":10000,"groups_include":[".*"],"groups_exclude":[],"topic_config_sync_interval_ms":10000,"topic_config_exclude":["min.insync.replicas","unclean.leader.election.enable","leader.replication.throttled.replicas","follower.replication.throttled.replicas","remote.storage.enable","local.retention.ms","local.retention.bytes","confluent\\..*"]}}"#,
    ];

    #[test]
    fn records_written_before_the_typed_fields_round_trip_byte_for_byte() {
        for json in &WRITTEN[..3] {
            let r: TopicRecord = serde_json::from_str(json).unwrap();
            assert!(matches!((&r.how, &r.desired), (Stored::Known(_), Stored::Known(_))), "{json}");
            assert_eq!(serde_json::to_string(&r).unwrap(), *json);
        }
        for json in &WRITTEN[3..] {
            let r: MirrorRecord = serde_json::from_str(json).unwrap();
            assert!(matches!(r.origin, Stored::Known(_)), "{json}");
            assert_eq!(serde_json::to_string(&r).unwrap(), *json);
        }
        let topic = |how: How, desired: Desired, writable| TopicRecord {
            mirror: "m".into(),
            partitions: 3,
            how: how.into(),
            at_ms: 1_700_000_000_000,
            desired: desired.into(),
            source_topic_id: "00112233445566778899aabbccddeeff".into(),
            writable,
            offset_shifts: Vec::new(),
            source_cluster_id: None,
        };
        // What this version writes for each known value is what the last one wrote.
        assert_eq!(
            serde_json::to_string(&topic(How::Created, Desired::Mirroring, Some(false))).unwrap(),
            WRITTEN[0]
        );
        assert_eq!(serde_json::to_string(&topic(How::Adopted, Desired::Paused, None)).unwrap(), WRITTEN[1]);
        assert_eq!(serde_json::to_string(&topic(How::Created, Desired::Stopped, Some(true))).unwrap(), WRITTEN[2]);
        let mirror = |origin: Origin| MirrorRecord {
            origin: origin.into(),
            definition: MirrorConfig::new("m", vec!["src:9092".into()]),
        };
        // ... except `max_fill_offsets`: its default rose from 10^8 to 10^11 and, like other
        // defaults, is now left out (a definition stored with 10^8 keeps it: it reads back as set).
        let without_fill_limit = |json: &str| json.replace(r#""max_fill_offsets":100000000,"#, "");
        assert_eq!(serde_json::to_string(&mirror(Origin::Config)).unwrap(), without_fill_limit(WRITTEN[3]));
        assert_eq!(serde_json::to_string(&mirror(Origin::Api)).unwrap(), without_fill_limit(WRITTEN[4]));
    }

    #[test]
    fn an_unknown_stored_value_is_kept_as_written_and_never_taken_for_a_known_one() {
        let json = r#"{"mirror":"m","partitions":1,"how":"restored","at_ms":1,"desired":"draining","source_topic_id":""}"#;
        let r: TopicRecord = serde_json::from_str(json).unwrap();
        assert_eq!(r.desired, Stored::Unknown("draining".into()));
        assert_eq!(r.how, Stored::Unknown("restored".into()));
        assert!(!r.desired.is(Desired::Mirroring) && !r.is_writable());
        assert_eq!(r.desired_state(), Desired::Mirroring, "acted on as every earlier version did");
        assert_eq!(serde_json::to_string(&r).unwrap(), json, "re-written unchanged");
        let m: MirrorRecord = serde_json::from_str(r#"{"origin":"operator","definition":{"name":"m","source_bootstrap_servers":["s:1"]}}"#).unwrap();
        assert!(!m.origin.is(Origin::Api) && !m.origin.is(Origin::Config));
        assert_eq!(m.origin.as_str(), "operator");
        assert!(
            serde_json::from_str::<TopicRecord>(r#"{"mirror":"m","partitions":1,"how":7,"at_ms":1}"#).is_err(),
            "not a string: unreadable as before"
        );
    }
}
