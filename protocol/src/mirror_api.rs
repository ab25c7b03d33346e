//! The KIP-1279 cluster-mirror admin RPCs, as the public prototype defines them
//! (`shared/reference/kip-1279-schemas`, aiven/inkless `8b4a597`): API keys, versions, and the
//! request/response bodies the proxy answers and its CLI sends. All are version 0, flexible
//! (compact strings and arrays, tagged fields), with request header v2 and response header v1.
//! Keys and error codes are provisional until the KIP is accepted: they live here only.
//!
//! Sans-io; the flexible-version codec underneath is `compact`. What the operations do is the
//! engine's; routing them is the proxy's.

use bytes::BufMut;

pub use crate::compact::{Header, R, W, read_request, read_response, request_frame, response_frame};
use crate::error::{ProtocolError, Side};

pub const CREATE_CLUSTER_MIRROR: i16 = 94;
pub const START_MIRROR_TOPICS: i16 = 95;
pub const STOP_MIRROR_TOPICS: i16 = 96;
pub const LIST_CLUSTER_MIRRORS: i16 = 98;
pub const DESCRIBE_CLUSTER_MIRRORS: i16 = 99;
pub const PAUSE_MIRROR_TOPICS: i16 = 102;
pub const RESUME_MIRROR_TOPICS: i16 = 103;
pub const DELETE_CLUSTER_MIRROR: i16 = 104;

/// The mirror RPCs the proxy answers itself, `(key, min version, max version)`; advertised in
/// its ApiVersions responses.
pub const ANSWERED: &[(i16, i16, i16)] = &[
    (CREATE_CLUSTER_MIRROR, 0, 0),
    (START_MIRROR_TOPICS, 0, 0),
    (STOP_MIRROR_TOPICS, 0, 0),
    (LIST_CLUSTER_MIRRORS, 0, 0),
    (DESCRIBE_CLUSTER_MIRRORS, 0, 0),
    (PAUSE_MIRROR_TOPICS, 0, 0),
    (RESUME_MIRROR_TOPICS, 0, 0),
    (DELETE_CLUSTER_MIRROR, 0, 0),
];

/// Whether the proxy answers `key` itself.
pub fn is_answered(key: i16) -> bool {
    ANSWERED.iter().any(|&(k, _, _)| k == key)
}

/// KIP-1279 error codes (prototype `Errors.java`) and the Kafka codes the mirror operations use.
pub mod errors {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const INVALID_CONFIG: i16 = 40;
    /// A mutating mirror RPC sent to a proxy instance that does not run the mirror engine
    /// (`engine.role = "follower"`): send it to the engine instance.
    pub const NOT_CONTROLLER: i16 = 41;
    pub const INVALID_REQUEST: i16 = 42;
    pub const READ_ONLY_TOPIC: i16 = 134;
    pub const CLUSTER_MIRROR_ALREADY_EXISTS: i16 = 136;
    pub const UNKNOWN_CLUSTER_MIRROR: i16 = 137;
    pub const TOPIC_ALREADY_IN_CLUSTER_MIRROR: i16 = 138;
    pub const TOPIC_NOT_IN_CLUSTER_MIRROR: i16 = 139;
    pub const MIRROR_TOPIC_ALREADY_PAUSED: i16 = 140;
    pub const MIRROR_TOPIC_NOT_PAUSED: i16 = 141;
    pub const MIRROR_TOPIC_BEING_STOPPED: i16 = 142;
    pub const CLUSTER_MIRROR_NOT_EMPTY: i16 = 143;
    pub const CLUSTER_MIRROR_AUTHORIZATION_FAILED: i16 = 144;
    pub const INVALID_CLUSTER_MIRROR_STATES: i16 = 145;
    pub const MIRROR_TOPIC_NOT_STOPPED: i16 = 146;

    /// The name of a code the mirror RPCs return (Kafka's own codes included).
    pub fn name(code: i16) -> &'static str {
        match code {
            NONE => "NONE",
            UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
            REQUEST_TIMED_OUT => "REQUEST_TIMED_OUT",
            COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
            COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
            35 => "UNSUPPORTED_VERSION",
            INVALID_CONFIG => "INVALID_CONFIG",
            NOT_CONTROLLER => "NOT_CONTROLLER",
            INVALID_REQUEST => "INVALID_REQUEST",
            READ_ONLY_TOPIC => "READ_ONLY_TOPIC",
            CLUSTER_MIRROR_ALREADY_EXISTS => "CLUSTER_MIRROR_ALREADY_EXISTS",
            UNKNOWN_CLUSTER_MIRROR => "UNKNOWN_CLUSTER_MIRROR",
            TOPIC_ALREADY_IN_CLUSTER_MIRROR => "TOPIC_ALREADY_IN_CLUSTER_MIRROR",
            TOPIC_NOT_IN_CLUSTER_MIRROR => "TOPIC_NOT_IN_CLUSTER_MIRROR",
            MIRROR_TOPIC_ALREADY_PAUSED => "MIRROR_TOPIC_ALREADY_PAUSED",
            MIRROR_TOPIC_NOT_PAUSED => "MIRROR_TOPIC_NOT_PAUSED",
            MIRROR_TOPIC_BEING_STOPPED => "MIRROR_TOPIC_BEING_STOPPED",
            CLUSTER_MIRROR_NOT_EMPTY => "CLUSTER_MIRROR_NOT_EMPTY",
            CLUSTER_MIRROR_AUTHORIZATION_FAILED => "CLUSTER_MIRROR_AUTHORIZATION_FAILED",
            INVALID_CLUSTER_MIRROR_STATES => "INVALID_CLUSTER_MIRROR_STATES",
            MIRROR_TOPIC_NOT_STOPPED => "MIRROR_TOPIC_NOT_STOPPED",
            _ => "UNKNOWN",
        }
    }
}

/// Start / Stop / Pause / Resume request body (Start's and Stop's tagged patterns included;
/// Start's topic ids and partition counts are left to the proxy, which reads the source).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsRequest {
    pub mirror_name: String,
    pub topics: Vec<String>,
    /// StopMirrorTopics `Patterns` / StartMirrorTopics `IncludePatterns` (tag 0).
    pub patterns: Vec<String>,
    /// StartMirrorTopics `ExcludePatterns` (tag 1).
    pub exclude_patterns: Vec<String>,
    pub state_validation_offset: i64,
}

/// CreateClusterMirror request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateRequest {
    pub mirror_name: String,
    pub configs: Vec<(String, Option<String>)>,
}

/// DeleteClusterMirror request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    pub mirror_name: String,
    pub state_validation_offset: i64,
}

/// CreateClusterMirror / DeleteClusterMirror response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

/// A per-topic result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicResult {
    pub name: String,
    pub error_code: i16,
    pub error_message: Option<String>,
}

/// Stop / Pause / Resume response body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub topics: Vec<TopicResult>,
}

/// ListClusterMirrors response entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedMirror {
    pub mirror_name: String,
    pub source_bootstrap: String,
    pub source_cluster_id: String,
    pub topic_count: i32,
    pub topic_names: Vec<String>,
}

/// ListClusterMirrors response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub mirrors: Vec<ListedMirror>,
}

/// DescribeClusterMirrors partition detail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionDetail {
    pub partition_index: i32,
    pub source_offset: i64,
    pub destination_offset: i64,
    pub lag: i64,
    pub state_value: String,
    pub retry_attempt: i16,
    pub error_message: Option<String>,
    /// Proxy extension, tagged field [`PARTITION_PROGRESS_TAG`] of the partition entry (readers
    /// that do not know it skip it): copy counters and the recent rate.
    pub progress: Option<PartitionProgress>,
}

/// Tag of the proxy's copy progress in a DescribeClusterMirrors partition entry (next to
/// [`SYNC_STATUS_TAG`], far above the KIP's tags).
pub const PARTITION_PROGRESS_TAG: u32 = 10_001;

/// Copy progress of one described partition: totals since the mirror started, and what was
/// written over the last `window_ms` (the rate is `window_records / window_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionProgress {
    /// Source records written to the destination (fillers not counted).
    pub records_mirrored: i64,
    /// Record batch bytes of those records.
    pub bytes_mirrored: i64,
    /// Span of the recent window, ms (0 = nothing written yet).
    pub window_ms: i64,
    pub window_records: i64,
    pub window_bytes: i64,
}

/// DescribeClusterMirrors mirror entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedMirror {
    pub error_code: i16,
    pub mirror_name: String,
    pub authorized_operations: i32,
    pub topics: Vec<(String, Vec<PartitionDetail>)>,
    /// Proxy extension, tagged field [`SYNC_STATUS_TAG`] of the mirror entry (readers that do
    /// not know it skip it, as for any tagged field): metadata sync status per kind.
    pub sync: Vec<SyncEntry>,
}

/// Tag of the proxy's metadata sync status in a DescribeClusterMirrors mirror entry; far above
/// the tags KIP-1279 uses, so a later KIP field cannot collide.
pub const SYNC_STATUS_TAG: u32 = 10_000;

/// Metadata sync status of one kind (`group_offsets`, `topic_configs`) of a described mirror.
/// Times are wall-clock milliseconds, 0 = never.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncEntry {
    pub kind: String,
    pub interval_ms: i64,
    pub runs: i64,
    pub last_run_ms: i64,
    pub last_success_ms: i64,
    /// Groups in sync (group offsets) or topics compared (topic configs) in the last pass.
    pub synced: i64,
    /// Groups left alone in the last pass because they are active on the destination.
    pub skipped_active: i64,
    /// Offsets committed / config changes applied since the proxy started.
    pub applied_total: i64,
    pub errors_total: i64,
    pub last_error: Option<String>,
}

/// DescribeClusterMirrors request (tagged ClusterId / epoch lookups are read and ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeRequest {
    /// Empty = all mirrors.
    pub mirror_names: Vec<String>,
    pub include_authorized_operations: bool,
}

/// DescribeClusterMirrors response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub mirrors: Vec<DescribedMirror>,
}

impl TopicsRequest {
    pub fn encode(&self, api_key: i16) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).array_len(self.topics.len());
        for t in &self.topics {
            if api_key == START_MIRROR_TOPICS {
                w.0.put_slice(&[0u8; 16]); // topic id: unknown to the client, the proxy reads the source
            }
            w.str(t);
            if api_key == START_MIRROR_TOPICS {
                w.i32(-1); // partition count: likewise
            }
            w.tags();
        }
        w.i64(self.state_validation_offset);
        let mut tagged: Vec<(u32, &Vec<String>)> = Vec::new();
        if (api_key == STOP_MIRROR_TOPICS || api_key == START_MIRROR_TOPICS) && !self.patterns.is_empty() {
            tagged.push((0, &self.patterns));
        }
        if api_key == START_MIRROR_TOPICS && !self.exclude_patterns.is_empty() {
            tagged.push((1, &self.exclude_patterns));
        }
        w.uvarint(tagged.len() as u32);
        for (tag, list) in tagged {
            let mut inner = W::default();
            inner.strs(list);
            let inner = inner.finish();
            w.uvarint(tag).uvarint(inner.len() as u32);
            w.0.put_slice(&inner);
        }
        w
    }
}

impl CreateRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).array_len(self.configs.len());
        for (k, v) in &self.configs {
            w.str(k).nstr(v.as_deref()).tags();
        }
        w.tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let mirror_name = r.str()?;
        let mut configs = Vec::new();
        for _ in 0..r.array_len()? {
            configs.push((r.str()?, r.nstr()?));
            r.tags()?;
        }
        r.tags()?;
        Ok(Self { mirror_name, configs })
    }
}

impl DeleteRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).i64(self.state_validation_offset).tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (mirror_name, state_validation_offset) = (r.str()?, r.i64()?);
        r.tags()?;
        Ok(Self {
            mirror_name,
            state_validation_offset,
        })
    }
}

impl SimpleResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms).i16(self.error_code).nstr(self.error_message.as_deref()).tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let out = Self {
            throttle_time_ms: r.i32()?,
            error_code: r.i16()?,
            error_message: r.nstr()?,
        };
        r.tags()?;
        Ok(out)
    }
}

impl TopicsResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.topics.len());
        for t in &self.topics {
            w.str(&t.name).i16(t.error_code).nstr(t.error_message.as_deref()).tags();
        }
        w.tags();
        w
    }
}

impl ListResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.mirrors.len());
        for m in &self.mirrors {
            w.str(&m.mirror_name)
                .str(&m.source_bootstrap)
                .str(&m.source_cluster_id)
                .i32(m.topic_count)
                .strs(&m.topic_names)
                .tags();
        }
        w.tags();
        w
    }
}

impl DescribeRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.strs(&self.mirror_names).bool(self.include_authorized_operations).tags();
        w
    }
}

impl DescribeResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.mirrors.len());
        for m in &self.mirrors {
            w.i16(m.error_code).str(&m.mirror_name).i32(m.authorized_operations).array_len(m.topics.len());
            for (topic, parts) in &m.topics {
                w.str(topic).array_len(parts.len());
                for p in parts {
                    w.i32(p.partition_index)
                        .i64(p.source_offset)
                        .i64(p.destination_offset)
                        .i64(p.lag)
                        .str(&p.state_value);
                    w.i16(p.retry_attempt).nstr(p.error_message.as_deref());
                    match &p.progress {
                        None => w.tags(),
                        Some(g) => {
                            let mut inner = W::default();
                            inner
                                .i64(g.records_mirrored)
                                .i64(g.bytes_mirrored)
                                .i64(g.window_ms)
                                .i64(g.window_records)
                                .i64(g.window_bytes)
                                .tags();
                            w.tagged(PARTITION_PROGRESS_TAG, inner)
                        }
                    };
                }
                w.tags();
            }
            if m.sync.is_empty() {
                w.tags();
            } else {
                let mut inner = W::default();
                inner.array_len(m.sync.len());
                for e in &m.sync {
                    inner
                        .str(&e.kind)
                        .i64(e.interval_ms)
                        .i64(e.runs)
                        .i64(e.last_run_ms)
                        .i64(e.last_success_ms)
                        .i64(e.synced);
                    inner
                        .i64(e.skipped_active)
                        .i64(e.applied_total)
                        .i64(e.errors_total)
                        .nstr(e.last_error.as_deref())
                        .tags();
                }
                w.tagged(SYNC_STATUS_TAG, inner);
            }
        }
        w.tags();
        w
    }
}

impl TopicsRequest {
    pub fn decode(r: &mut R<'_>, api_key: i16) -> Result<Self, ProtocolError> {
        let mirror_name = r.str()?;
        let mut topics = Vec::new();
        for _ in 0..r.array_len()? {
            if api_key == START_MIRROR_TOPICS {
                r.0.skip(16)?; // topic id
            }
            topics.push(r.str()?);
            if api_key == START_MIRROR_TOPICS {
                r.i32()?; // num partitions
            }
            r.tags()?;
        }
        let state_validation_offset = r.i64()?;
        let (mut patterns, mut exclude_patterns) = (Vec::new(), Vec::new());
        for (tag, bytes) in r.tags()? {
            let mut inner = R::new(bytes, 0, Side::Client);
            match (tag, api_key) {
                (0, STOP_MIRROR_TOPICS | START_MIRROR_TOPICS) => patterns = inner.strs()?,
                (1, START_MIRROR_TOPICS) => exclude_patterns = inner.strs()?,
                _ => {}
            }
        }
        Ok(Self {
            mirror_name,
            topics,
            patterns,
            exclude_patterns,
            state_validation_offset,
        })
    }
}

impl TopicsResponse {
    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut topics = Vec::new();
        for _ in 0..r.array_len()? {
            topics.push(TopicResult {
                name: r.str()?,
                error_code: r.i16()?,
                error_message: r.nstr()?,
            });
            r.tags()?;
        }
        r.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            topics,
        })
    }
}

impl ListResponse {
    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut mirrors = Vec::new();
        for _ in 0..r.array_len()? {
            mirrors.push(ListedMirror {
                mirror_name: r.str()?,
                source_bootstrap: r.str()?,
                source_cluster_id: r.str()?,
                topic_count: r.i32()?,
                topic_names: r.strs()?,
            });
            r.tags()?;
        }
        r.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
        })
    }
}

impl DescribeRequest {
    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let mirror_names = r.strs()?;
        let include_authorized_operations = r.bool()?;
        r.tags()?; // ClusterId, LastMirrorEpochLookups: failback lookups a proxy cannot answer
        Ok(Self {
            mirror_names,
            include_authorized_operations,
        })
    }
}

impl DescribeResponse {
    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut mirrors = Vec::new();
        for _ in 0..r.array_len()? {
            let (error_code, mirror_name, authorized_operations) = (r.i16()?, r.str()?, r.i32()?);
            let mut topics = Vec::new();
            for _ in 0..r.array_len()? {
                let name = r.str()?;
                let mut parts = Vec::new();
                for _ in 0..r.array_len()? {
                    let mut p = PartitionDetail {
                        partition_index: r.i32()?,
                        source_offset: r.i64()?,
                        destination_offset: r.i64()?,
                        lag: r.i64()?,
                        state_value: r.str()?,
                        retry_attempt: r.i16()?,
                        error_message: r.nstr()?,
                        progress: None,
                    };
                    for (tag, bytes) in r.tags()? {
                        if tag == PARTITION_PROGRESS_TAG {
                            let mut inner = R::new(bytes, 0, Side::Broker);
                            p.progress = Some(PartitionProgress {
                                records_mirrored: inner.i64()?,
                                bytes_mirrored: inner.i64()?,
                                window_ms: inner.i64()?,
                                window_records: inner.i64()?,
                                window_bytes: inner.i64()?,
                            });
                        }
                    }
                    parts.push(p);
                }
                r.tags()?;
                topics.push((name, parts));
            }
            let mut sync = Vec::new();
            for (tag, bytes) in r.tags()? {
                if tag != SYNC_STATUS_TAG {
                    continue;
                }
                let mut inner = R::new(bytes, 0, Side::Broker);
                for _ in 0..inner.array_len()? {
                    sync.push(SyncEntry {
                        kind: inner.str()?,
                        interval_ms: inner.i64()?,
                        runs: inner.i64()?,
                        last_run_ms: inner.i64()?,
                        last_success_ms: inner.i64()?,
                        synced: inner.i64()?,
                        skipped_active: inner.i64()?,
                        applied_total: inner.i64()?,
                        errors_total: inner.i64()?,
                        last_error: inner.nstr()?,
                    });
                    inner.tags()?;
                }
            }
            mirrors.push(DescribedMirror {
                error_code,
                mirror_name,
                authorized_operations,
                topics,
                sync,
            });
        }
        r.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn body_of(frame: &Bytes) -> (Header, Vec<u8>) {
        let (h, r) = read_request(frame).unwrap();
        let at = frame.len() - r.0.remaining();
        (h, frame[at..].to_vec())
    }

    #[test]
    fn topics_requests_round_trip_with_stop_patterns_as_a_tagged_field() {
        let req = TopicsRequest {
            mirror_name: "dr".into(),
            topics: vec!["a".into(), "b".into()],
            patterns: vec!["x.*".into()],
            exclude_patterns: vec![],
            state_validation_offset: -1,
        };
        let frame = request_frame(STOP_MIRROR_TOPICS, 9, "cli", req.encode(STOP_MIRROR_TOPICS));
        let (h, _) = body_of(&frame);
        assert_eq!((h.api_key, h.api_version, h.correlation_id, h.client_id.as_deref()), (96, 0, 9, Some("cli")));
        let (_, mut r) = read_request(&frame).unwrap();
        assert_eq!(TopicsRequest::decode(&mut r, STOP_MIRROR_TOPICS).unwrap(), req);
    }

    #[test]
    fn start_create_and_delete_requests_round_trip() {
        let start = TopicsRequest {
            mirror_name: "dr".into(),
            topics: vec!["a".into()],
            patterns: vec!["o-.*".into()],
            exclude_patterns: vec!["o-tmp".into()],
            state_validation_offset: -1,
        };
        let f = request_frame(START_MIRROR_TOPICS, 1, "c", start.encode(START_MIRROR_TOPICS));
        let (_, mut r) = read_request(&f).unwrap();
        assert_eq!(TopicsRequest::decode(&mut r, START_MIRROR_TOPICS).unwrap(), start);
        let create = CreateRequest {
            mirror_name: "dr".into(),
            configs: vec![("bootstrap.servers".into(), Some("s:1".into())), ("x".into(), None)],
        };
        let f = request_frame(CREATE_CLUSTER_MIRROR, 2, "c", create.encode());
        let (_, mut r) = read_request(&f).unwrap();
        assert_eq!(CreateRequest::decode(&mut r).unwrap(), create);
        let delete = DeleteRequest {
            mirror_name: "dr".into(),
            state_validation_offset: -1,
        };
        let f = request_frame(DELETE_CLUSTER_MIRROR, 3, "c", delete.encode());
        let (_, mut r) = read_request(&f).unwrap();
        assert_eq!(DeleteRequest::decode(&mut r).unwrap(), delete);
        let resp = SimpleResponse {
            throttle_time_ms: 0,
            error_code: 136,
            error_message: Some("exists".into()),
        };
        let f = response_frame(4, resp.encode());
        let (_, mut r) = read_response(&f).unwrap();
        assert_eq!(SimpleResponse::decode(&mut r).unwrap(), resp);
    }

    #[test]
    fn responses_round_trip() {
        let t = TopicsResponse {
            topics: vec![TopicResult {
                name: "a".into(),
                error_code: 139,
                error_message: Some("no".into()),
            }],
            ..Default::default()
        };
        let f = response_frame(3, t.encode());
        let (cid, mut r) = read_response(&f).unwrap();
        assert_eq!((cid, TopicsResponse::decode(&mut r).unwrap()), (3, t));
        let l = ListResponse {
            mirrors: vec![ListedMirror {
                mirror_name: "dr".into(),
                source_bootstrap: "s:1".into(),
                source_cluster_id: String::new(),
                topic_count: 1,
                topic_names: vec!["a".into()],
            }],
            ..Default::default()
        };
        let f = response_frame(4, l.encode());
        let (_, mut r) = read_response(&f).unwrap();
        assert_eq!(ListResponse::decode(&mut r).unwrap(), l);
        let d = DescribeResponse {
            mirrors: vec![DescribedMirror {
                error_code: 0,
                mirror_name: "dr".into(),
                authorized_operations: i32::MIN,
                topics: vec![(
                    "a".into(),
                    vec![PartitionDetail {
                        partition_index: 0,
                        source_offset: 10,
                        destination_offset: 9,
                        lag: 1,
                        state_value: "MIRRORING".into(),
                        retry_attempt: 0,
                        error_message: None,
                        progress: None,
                    }],
                )],
                sync: Vec::new(),
            }],
            ..Default::default()
        };
        let f = response_frame(5, d.encode());
        let (_, mut r) = read_response(&f).unwrap();
        assert_eq!(DescribeResponse::decode(&mut r).unwrap(), d);
        // With the proxy's sync status extension (a tagged field) on the first of two mirrors.
        let mut two = d.clone();
        two.mirrors[0].sync = vec![SyncEntry {
            kind: "group_offsets".into(),
            interval_ms: 10_000,
            runs: 3,
            last_run_ms: 5,
            last_success_ms: 4,
            synced: 2,
            skipped_active: 1,
            applied_total: 7,
            errors_total: 1,
            last_error: Some("x".into()),
        }];
        // … and the copy progress extension on its partition.
        two.mirrors[0].topics[0].1[0].progress = Some(PartitionProgress {
            records_mirrored: 1_000,
            bytes_mirrored: 64_000,
            window_ms: 10_000,
            window_records: 500,
            window_bytes: 32_000,
        });
        two.mirrors.push(DescribedMirror {
            mirror_name: "other".into(),
            ..d.mirrors[0].clone()
        });
        let f = response_frame(6, two.encode());
        let (_, mut r) = read_response(&f).unwrap();
        assert_eq!(DescribeResponse::decode(&mut r).unwrap(), two);
        let q = DescribeRequest {
            mirror_names: vec!["dr".into()],
            include_authorized_operations: false,
        };
        let f = request_frame(DESCRIBE_CLUSTER_MIRRORS, 1, "c", q.encode());
        let (_, mut r) = read_request(&f).unwrap();
        assert_eq!(DescribeRequest::decode(&mut r).unwrap(), q);
    }

    #[test]
    fn truncated_requests_are_errors_not_panics() {
        let req = TopicsRequest {
            mirror_name: "dr".into(),
            topics: vec!["a".into()],
            ..Default::default()
        };
        let frame = request_frame(PAUSE_MIRROR_TOPICS, 1, "c", req.encode(PAUSE_MIRROR_TOPICS));
        for cut in 0..frame.len() {
            if let Ok((_, mut r)) = read_request(&frame[..cut]) {
                let _ = TopicsRequest::decode(&mut r, PAUSE_MIRROR_TOPICS);
            }
        }
    }
}
