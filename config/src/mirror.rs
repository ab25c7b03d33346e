//! Mirror definitions declared in the config file (`[[mirrors]]`). The engine receives them as
//! plain data; mirrors created at runtime through the admin APIs (a later issue) use the same
//! shape. Validation rules for them live in `validate`.

use serde::{Deserialize, Serialize};

/// Largest compiled form of one topic pattern (bytes, `regex::RegexBuilder::size_limit`). A
/// pattern above it is refused: without a bound, 8 bytes such as `\w{200}` take a fifth of a
/// second of CPU to compile, and the management APIs take patterns from callers.
pub const TOPIC_PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// Compiles a topic pattern the way mirrors use it: a Rust `regex` matched against the whole
/// topic name (include/exclude, and the topic patterns of the management APIs), refused when its
/// compiled form exceeds [`TOPIC_PATTERN_SIZE_LIMIT`].
pub fn topic_pattern(p: &str) -> Result<regex::Regex, regex::Error> {
    let build = |p: &str| regex::RegexBuilder::new(p).size_limit(TOPIC_PATTERN_SIZE_LIMIT).build();
    // The pattern must be a regex on its own: `)(` or `a)|(b` would otherwise balance against
    // the anchoring group and match names the operator never wrote.
    build(p)?;
    build(&format!("^(?:{p})$"))
}

/// Most include (and most exclude) patterns one management request may carry (REST and the
/// Kafka RPCs alike).
pub const MAX_REQUEST_PATTERNS: usize = 256;

/// Longest topic pattern a management request may carry (bytes).
pub const MAX_REQUEST_PATTERN_LEN: usize = 1024;

/// Checks the patterns of one management request: at most [`MAX_REQUEST_PATTERNS`] include and
/// as many exclude patterns, each at most [`MAX_REQUEST_PATTERN_LEN`] bytes, every one compiling
/// as [`topic_pattern`] compiles it. Compiling can take milliseconds per pattern: callers on an
/// async runtime run this on the blocking pool. The error says what is wrong, for the caller.
pub fn check_request_patterns(include: &[String], exclude: &[String]) -> Result<(), String> {
    for (what, patterns) in [("include", include), ("exclude", exclude)] {
        if patterns.len() > MAX_REQUEST_PATTERNS {
            return Err(format!("{} {what} patterns, more than the {MAX_REQUEST_PATTERNS} allowed", patterns.len()));
        }
        if let Some(p) = patterns.iter().find(|p| p.len() > MAX_REQUEST_PATTERN_LEN) {
            return Err(format!(
                "an {what} pattern of {} bytes, longer than the {MAX_REQUEST_PATTERN_LEN} allowed",
                p.len()
            ));
        }
    }
    for (what, patterns) in [("include", include), ("exclude", exclude)] {
        for p in patterns {
            if let Err(e) = topic_pattern(p) {
                return Err(format!("invalid {what} pattern `{p}`: {e}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod pattern_tests {
    #[test]
    fn a_pattern_that_only_compiles_inside_the_anchoring_group_is_rejected() {
        for p in ["(unclosed", ")(", "a)|(b"] {
            assert!(super::topic_pattern(p).is_err(), "`{p}` accepted");
        }
        let r = super::topic_pattern("orders-.*|audit").unwrap();
        assert!(r.is_match("orders-eu") && r.is_match("audit") && !r.is_match("xaudit"));
    }

    #[test]
    fn a_pattern_too_expensive_to_compile_is_refused_quickly() {
        let started = std::time::Instant::now();
        let err = super::topic_pattern(r"\w{200}").expect_err("over the size limit");
        assert!(matches!(err, regex::Error::CompiledTooBig(_)), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_millis(100), "took {:?}", started.elapsed());
        for ok in [r"[\w.-]+", r"orders-\d{1,4}", "(?i)pay(ment)?s-.*"] {
            assert!(super::topic_pattern(ok).is_ok(), "{ok}");
        }
    }
}

/// Settings shared by every mirror of this proxy (`[engine]`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Whether the mirror engine runs: the state topic, mirrors from the config and the
    /// KIP-1279 admin RPCs. Default true; false makes the proxy a plain pass-through proxy
    /// (it neither refuses writes to mirror topics nor masks fillers).
    pub enabled: bool,
    /// What this instance does when `enabled` (`KMP_ENGINE_ROLE` overrides it). Whatever the
    /// role, every instance reads `state_topic` continuously and enforces what it says (writes
    /// to mirror topics refused, fillers masked), and instances sharing a state topic can never
    /// both copy or both write it. `auto` (default): the instances elect one *active* engine
    /// among themselves through a Kafka group on the destination (`group_id`) — a lone instance
    /// elects itself — and a standby takes over within about `session_timeout_ms` when the
    /// active one dies; management requests sent to a standby are handed to the active one.
    /// Run as many as you like with one configuration; see docs/high-availability.md.
    /// `engine`: an instance that expects to be the only engine. It takes part in the same
    /// election, so it never writes beside another active engine: finding one, it *fences
    /// itself* — copies and writes nothing, logs an error, shows `engine: fenced` in `/readyz`
    /// and `kmp_engine_fenced 1` in `/metrics` — and runs the mirrors only once no other engine
    /// is active. `follower`: never runs the engine; it copies and writes nothing and refuses
    /// the mutating mirror RPCs with NOT_CONTROLLER (41); `[[mirrors]]` declared on it are
    /// ignored (the engine instance records them).
    pub role: EngineRole,
    /// `role = "auto"`: the Kafka group (classic group protocol, protocol type
    /// `kmp-mirror-engine`) the instances elect the active engine in. Default (empty): derived
    /// from `state_topic` as `kmp-engine.<state_topic>`, so instances sharing a state topic meet.
    pub group_id: String,
    /// `role = "auto"`: this instance's name in the group, shown in `/readyz`, `/metrics` and
    /// logs (`KMP_INSTANCE_ID`). Default (empty): `<hostname>-<process id>`.
    pub instance_id: String,
    /// `role = "auto"`: milliseconds without a heartbeat after which the destination's group
    /// coordinator drops an instance and a standby takes over; the active instance itself stops
    /// writing once this long has passed since its last acknowledged heartbeat was sent
    /// (`KMP_ENGINE_SESSION_TIMEOUT_MS`). Bounded by the brokers'
    /// `group.min/max.session.timeout.ms` (6000..1800000 by default). Default 6000.
    pub session_timeout_ms: u64,
    /// `role = "auto"`: milliseconds between heartbeats to the group coordinator. Must be below a
    /// third of `session_timeout_ms`. Default 1000.
    pub heartbeat_interval_ms: u64,
    /// `role = "auto"`: whether the instances share the copying (`KMP_ENGINE_SHARE_WORK`).
    /// `false` (default): the active instance copies every mirror partition, the others only
    /// enforce. `true`: every instance copies the partitions the group's current generation
    /// assigns it (a topic's partitions spread round-robin over the instances), the active one
    /// still does everything else (topic creation, management, offset and config sync); a pause,
    /// resume, stop or new topic starts a new generation (a pause of about a second in copying),
    /// and a stop makes a topic writable only once every instance has stopped copying it. Every
    /// instance of a group must use the same value. See docs/high-availability.md.
    pub share_work: bool,
    /// Compacted topic on the destination holding mirror definitions, topic ownership and
    /// per-partition state. Created on first start (compacted, one partition, the
    /// destination's default replication factor). Default `__kmp_mirror_state`.
    pub state_topic: String,
    /// Bytes of fetched source data all mirrors together may hold before it is acknowledged by the
    /// destination; a partition waits for room before its next Fetch, so a slow destination slows
    /// the source reads instead of growing memory. Each source fetch session reserves its next
    /// response's bound (at most 32 MiB) here before asking. Must be at least every mirror's
    /// `fetch_max_bytes`. Default 268435456 (256 MiB).
    pub max_buffer_bytes: u64,
    /// Batches each mirrored partition keeps in flight to its destination leader (handed to the
    /// broker's produce lane, which packs many partitions into one request). Default 5, like
    /// Kafka's idempotent producer.
    pub max_in_flight_per_partition: u16,
    /// Milliseconds between writes of changed per-partition state to the state topic. Default 5000.
    pub state_flush_interval_ms: u64,
}

impl EngineConfig {
    /// The election group of `role = "auto"` (`group_id`, or one derived from the state topic).
    pub fn effective_group_id(&self) -> String {
        if self.group_id.is_empty() {
            format!("kmp-engine.{}", self.state_topic)
        } else {
            self.group_id.clone()
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            role: EngineRole::Auto,
            state_topic: "__kmp_mirror_state".to_owned(),
            max_buffer_bytes: 256 * 1024 * 1024,
            max_in_flight_per_partition: 5,
            state_flush_interval_ms: 5_000,
            group_id: String::new(),
            instance_id: String::new(),
            session_timeout_ms: 6_000,
            heartbeat_interval_ms: 1_000,
            share_work: false,
        }
    }
}

/// What an instance with the engine enabled does (`engine.role`).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EngineRole {
    /// Expects to be the only engine: runs the mirrors while elected, fenced (and alerting)
    /// while another instance is the active engine.
    Engine,
    /// Follows the state topic and enforces it; copies and writes nothing.
    Follower,
    /// Enforces like a follower and runs the engine while elected active among its peers.
    #[default]
    Auto,
}

impl EngineRole {
    /// The role named `s` (`engine`, `follower` or `auto`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "engine" => Some(Self::Engine),
            "follower" => Some(Self::Follower),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }
}

/// One mirror: topics copied from a source cluster into the destination at identical offsets.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// Mirror name, unique within the proxy. Required.
    pub name: String,
    /// Bootstrap brokers of the source cluster, `host:port` each. Required.
    pub source_bootstrap_servers: Vec<String>,
    /// Source topics to mirror, by exact name. Default: none.
    #[serde(default)]
    pub topics: Vec<String>,
    /// Regular expressions (Rust `regex` syntax, matched against the whole name) selecting more
    /// source topics; topics created on the source later are picked up within
    /// `topic_refresh_interval_ms`. Internal topics (`__…`) never match. Default: none.
    #[serde(default)]
    pub include: Vec<String>,
    /// Regular expressions of source topics never mirrored, even if listed or included.
    /// Default: none.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Milliseconds between looks for new source topics matching `include`. Default 10000.
    #[serde(default = "default_topic_refresh")]
    pub topic_refresh_interval_ms: u64,
    /// Where a partition starts when the destination has nothing yet: `earliest` (default; the
    /// source log start, with the offsets below it filled) — the only position that keeps
    /// offsets identical.
    #[serde(default = "default_start")]
    pub start_position: String,
    /// Replication factor of destination topics the mirror creates; -1 (default) uses the
    /// destination cluster's `default.replication.factor`.
    #[serde(default = "default_rf")]
    pub replication_factor: i16,
    /// Most filler records (offsets without visible source data) in one produced batch; larger
    /// gaps are filled with several batches. A filler record takes about 36 bytes, so the batch
    /// must stay under the destination topic's `max.message.bytes` (1 MiB by default).
    /// Default 20000 (about 720 KB).
    #[serde(default = "default_max_filler")]
    pub max_filler_batch_records: i32,
    /// Most bytes in one destination batch made by merging consecutive small source batches
    /// (each under a sixteenth of this, 16 KiB by default) of one Fetch answer. A source whose
    /// producers do not batch (linger 0) holds one record per batch, and Kafka takes one batch
    /// per partition per Produce request, so without merging such a copy is bound by Produce
    /// requests. Every record keeps its offset, timestamp, key, value and headers; merged
    /// batches are re-encoded (compressed ones decompressed and compressed again with the same
    /// codec) and checked record by record before they are written. Must stay under the
    /// destination topic's `max.message.bytes` (1 MiB by default). Bytes; default 262144
    /// (256 KiB); 0 turns merging off (every source batch is written as it came).
    #[serde(default = "default_coalesce", skip_serializing_if = "is_default_coalesce")]
    pub coalesce_max_bytes: i32,
    /// Largest run of offsets without visible source data (a retention prefix, a huge compaction
    /// gap) the engine fills; a larger one turns the partition FAILED with a reason instead of
    /// breaking the identical-offset invariant; its error says how long the fill would take.
    /// Default 10^11 (a topic that took 3,000 records/s for a year starts near 10^11); a
    /// retention prefix fills at about 5 million offsets/s per partition and is deleted from the
    /// destination as it goes (docs/mirroring.md).
    #[serde(default = "default_max_fill", skip_serializing_if = "is_default_max_fill")]
    pub max_fill_offsets: i64,
    /// Source log starts from which a new mirror topic's partition is not filled but shifted: the
    /// destination partition starts at offset 0 and the proxy shows its offsets plus the source's
    /// log start (Δ) in every API that carries one, for the life of the topic (clients that reach
    /// the destination directly see the unshifted offsets). Decided per partition when the mirror
    /// creates the destination topic; partitions with a smaller prefix are filled as before.
    /// Default 10^9 (about two minutes of filling on a 2-core machine, docs/mirroring.md); set it
    /// to 9223372036854775807 to fill every prefix.
    #[serde(default = "default_shift_from", skip_serializing_if = "is_default_shift_from")]
    pub shift_prefix_from: i64,
    /// Bytes fetched per source partition per request while it is catching up; default 1048576
    /// (1 MiB): the size a partition starts at and never drops below while behind; once caught
    /// up, each half-empty answer halves it, down to 64 KiB (see `fetch_grow_max_bytes`).
    #[serde(default = "default_fetch_bytes")]
    pub fetch_max_bytes: i32,
    /// Largest Fetch size a partition grows to while its Fetches keep coming back full
    /// (catching up, or a distant source): each full answer doubles the next request from
    /// `fetch_max_bytes` up to this, a half-empty one drops back. One partition reads at most
    /// this many bytes per source round trip, so 16 MiB allows ~160 MB/s at 100 ms. The
    /// allowance is shared by the source's partitions that are grown at the same time (each
    /// gets this divided by their number, at least `fetch_max_bytes`): their Fetches travel in
    /// the same requests, so together they fill the round trip with less memory. For a distant
    /// source (answers that transfer in less than four round trips) the shared total widens up
    /// to one allowance per grown partition. Bytes;
    /// default (unset) 16777216 (16 MiB), raised to `fetch_max_bytes` and capped at
    /// `engine.max_buffer_bytes`; equal to `fetch_max_bytes` turns growth off. A value that is
    /// set must lie between those two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_grow_max_bytes: Option<i32>,
    /// Keeps a second Fetch in flight for a caught-up partition whose source answers take at
    /// least this long (the shortest time to a Fetch answer that brought data, over its last
    /// eight): the two Fetches run on the broker's two fetch sessions, kept half a round trip apart, so
    /// a new source record waits at most half a round trip for one to arrive instead of a whole
    /// one (lag at steady load about one round trip instead of 1.5). Costs up to twice the source
    /// bytes while caught up, and a second place in the broker's fetch sessions per partition; a
    /// partition behind the source reads with one Fetch. A source with sparse data looks farther
    /// than it is (its Fetches wait for data), so set it only for a distant source.
    /// Milliseconds; default (unset) off; 0: whenever the partition is caught up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_hedge_min_rtt_ms: Option<u32>,
    /// Milliseconds between consumer-group offset syncs (source commits copied to the
    /// destination for groups with no active members there; one more sync runs when topics are
    /// stopped). 0 disables the periodic sync (the one at stop still runs). Default 10000.
    #[serde(default = "default_sync_interval")]
    pub group_offset_sync_interval_ms: u64,
    /// Regular expressions (whole group id) of source consumer groups whose offsets are synced.
    /// Default `[".*"]` (every group); empty = none.
    #[serde(default = "default_groups_include")]
    pub groups_include: Vec<String>,
    /// Regular expressions of groups never synced, even if included. Default: none.
    #[serde(default)]
    pub groups_exclude: Vec<String>,
    /// Milliseconds between topic config syncs (dynamic configs of the source topics applied to
    /// the destination topics). 0 disables the periodic sync (configs are still copied when a
    /// topic is created). Default 10000.
    #[serde(default = "default_sync_interval")]
    pub topic_config_sync_interval_ms: u64,
    /// Regular expressions (whole config name) of source topic configs never copied, on top of
    /// the settings identical offsets require (`compression.type`, `message.timestamp.*`), which
    /// are never copied whatever this says. Default: KIP-1279's list of cluster-local settings
    /// (see [`DEFAULT_TOPIC_CONFIG_EXCLUDE`]).
    #[serde(default = "default_topic_config_exclude")]
    pub topic_config_exclude: Vec<String>,
    /// Kafka client properties of the connections to this mirror's source cluster
    /// (`[mirrors.source_properties]`; the same names as `[upstream.properties]`: `security.protocol`,
    /// `ssl.*`, `sasl.*`). Secrets inline or as `file:`/`env:` references here; mirrors created through
    /// the APIs must use references. Default: empty, PLAINTEXT.
    #[serde(default, skip_serializing_if = "crate::ClientProperties::is_empty")]
    pub source_properties: crate::ClientProperties,
}

/// Topic configs a mirror does not copy unless told otherwise: settings local to a cluster
/// (durability, replication throttles, tiered storage) and vendor extensions. KIP-1279's
/// `mirror.topic.properties.exclude` default plus tiered-storage and `confluent.` settings.
pub const DEFAULT_TOPIC_CONFIG_EXCLUDE: &[&str] = &[
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "confluent\\..*",
];

impl MirrorConfig {
    /// `fetch_grow_max_bytes` as the engine applies it under a buffer of `max_buffer_bytes`.
    pub fn effective_fetch_grow_max_bytes(&self, max_buffer_bytes: u64) -> i32 {
        const DEFAULT: i32 = 16 * 1024 * 1024;
        let budget = i32::try_from(max_buffer_bytes).unwrap_or(i32::MAX);
        self.fetch_grow_max_bytes.unwrap_or_else(|| DEFAULT.min(budget)).max(self.fetch_max_bytes)
    }

    /// A mirror of no topics yet, every optional setting at its default (mirrors created
    /// through the admin APIs start like this).
    pub fn new(name: &str, source_bootstrap_servers: Vec<String>) -> Self {
        Self {
            name: name.to_owned(),
            source_bootstrap_servers,
            topics: Vec::new(),
            include: Vec::new(),
            exclude: Vec::new(),
            topic_refresh_interval_ms: default_topic_refresh(),
            start_position: default_start(),
            replication_factor: default_rf(),
            max_filler_batch_records: default_max_filler(),
            coalesce_max_bytes: default_coalesce(),
            max_fill_offsets: default_max_fill(),
            shift_prefix_from: default_shift_from(),
            fetch_max_bytes: default_fetch_bytes(),
            fetch_grow_max_bytes: None,
            fetch_hedge_min_rtt_ms: None,
            group_offset_sync_interval_ms: default_sync_interval(),
            groups_include: default_groups_include(),
            groups_exclude: Vec::new(),
            topic_config_sync_interval_ms: default_sync_interval(),
            topic_config_exclude: default_topic_config_exclude(),
            source_properties: crate::ClientProperties::default(),
        }
    }
}

fn default_max_fill() -> i64 {
    100_000_000_000
}
fn is_default_max_fill(v: &i64) -> bool {
    *v == default_max_fill()
}
fn default_shift_from() -> i64 {
    1_000_000_000
}
fn is_default_shift_from(v: &i64) -> bool {
    *v == default_shift_from()
}
fn default_topic_refresh() -> u64 {
    10_000
}
fn default_start() -> String {
    "earliest".to_owned()
}
fn default_rf() -> i16 {
    -1
}
fn default_max_filler() -> i32 {
    20_000
}
fn default_coalesce() -> i32 {
    256 * 1024
}
// Mirror definitions are stored in the state topic: an unchanged default is left out, so an
// instance of an older build (which refuses unknown fields) still reads them.
fn is_default_coalesce(v: &i32) -> bool {
    *v == default_coalesce()
}
fn default_fetch_bytes() -> i32 {
    1024 * 1024
}
fn default_sync_interval() -> u64 {
    10_000
}
fn default_groups_include() -> Vec<String> {
    vec![".*".to_owned()]
}
fn default_topic_config_exclude() -> Vec<String> {
    DEFAULT_TOPIC_CONFIG_EXCLUDE.iter().map(|s| (*s).to_owned()).collect()
}
