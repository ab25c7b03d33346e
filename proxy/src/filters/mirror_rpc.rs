//! The KIP-1279 mirror admin RPCs answered by the proxy itself (never forwarded): Create, Start,
//! Stop, Pause, Resume, List, Describe and Delete (`kmp_protocol::mirror_api` has the wire format, the engine's
//! `Control` the operations). Deciding that a frame is one of them happens on the API key, in
//! the filter's predicate, before anything is decoded. Who may call them is `authz`'s. On a
//! follower instance (`engine.role = "follower"`) List and Describe answer from the followed state
//! topic and every other RPC gets NOT_CONTROLLER (41) with a message saying why; an `auto`
//! standby hands those to the active instance instead (the engine's `forward`) and relays its
//! answer, and as the active instance it answers what standbys hand it with the same code.
//!
//! Answers stay within a small multiple of the request: a topics RPC naming a mirror name no
//! mirror can have is refused alone, an unknown mirror is named once at the top (never in each
//! topic's result), per-topic messages are cut to a budget of a few times the request's size, and
//! Describe answers each distinct mirror name once.

use std::collections::HashSet;

use bytes::Bytes;
use kmp_mirror_engine::{Control, PartitionState, TopicResult as EngineResult, codes};
use kmp_protocol::ProtocolError;
use kmp_protocol::mirror_api::{
    self as api, CreateRequest, DeleteRequest, DescribeRequest, DescribeResponse, DescribedMirror, EngineIdentity, ListResponse, ListedMirror, PartitionDetail,
    PartitionProgress, SimpleResponse, SyncEntry, TopicResult, TopicsRequest, TopicsResponse, error_body, error_response, errors,
};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

/// The filter answering the mirror RPCs.
pub(crate) struct MirrorRpc;

impl Filter for MirrorRpc {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let (api_key, api_version) = (x.api_key, x.api_version);
        api::is_answered(api_key) && api_version == 0
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let slot = &conn.shared.mirrors;
            if mutating(x.api_key) && slot.can_forward() && slot.control().follower_refusal().is_some() {
                let (frame, api_key, correlation_id) = (x.frame().clone(), x.api_key, x.correlation_id);
                return Ok(Flow::Answer(Some(forward(frame, api_key, correlation_id, slot).await)));
            }
            Ok(Flow::Answer(Some(answer(x.frame(), &slot.control(), identity(slot)).await?)))
        })
    }
}

/// Whether `api_key` is a mirror RPC that changes something (only the active instance may).
fn mutating(api_key: i16) -> bool {
    api::is_answered(api_key) && !matches!(api_key, api::LIST_CLUSTER_MIRRORS | api::DESCRIBE_CLUSTER_MIRRORS)
}

/// A standby's answer to a mutating request: the active instance's, or a retriable error.
async fn forward(frame: Bytes, api_key: i16, correlation_id: i32, slot: &kmp_mirror_engine::EngineSlot) -> Bytes {
    match slot.forward(frame).await {
        Ok(answer) => answer,
        Err(kmp_mirror_engine::ForwardError::Refused { code, message }) => error_response(api_key, correlation_id, code, &message),
        Err(e) => {
            tracing::warn!(api_key, error = %e, "management request not forwarded to the active instance");
            let code = match e {
                kmp_mirror_engine::ForwardError::TooLarge(_) => errors::INVALID_REQUEST,
                _ => errors::REQUEST_TIMED_OUT,
            };
            error_response(api_key, correlation_id, code, &format!("this instance is a standby; {e}"))
        }
    }
}

/// Lets the active instance answer the mutating requests standbys hand it, exactly as it
/// answers its own clients (`auto` only; a no-op for other roles).
pub(crate) fn answer_forwarded_requests(slot: &kmp_mirror_engine::EngineSlot) {
    let me = slot.clone();
    slot.answer_forwarded_with(std::sync::Arc::new(move |frame: Bytes| {
        let slot = me.clone();
        Box::pin(async move {
            let header = api::read_request(&frame).ok()?.0;
            if !mutating(header.api_key) || header.api_version != 0 {
                return None;
            }
            answer(&frame, &slot.control(), identity(&slot)).await.ok()
        })
    }));
}

/// Which instance this is, for the describe answer.
fn identity(slot: &kmp_mirror_engine::EngineSlot) -> EngineIdentity {
    match slot.election() {
        Some(e) => EngineIdentity {
            instance_id: e.instance_id,
            role: "auto".into(),
            active: e.active,
            generation: e.generation,
            active_instance: e.active_instance,
            share: e
                .share
                .filter(|_| e.share_work)
                .map(|(index, members)| (i32::try_from(index).unwrap_or(i32::MAX), i32::try_from(members).unwrap_or(i32::MAX))),
        },
        None => {
            let follower = slot.control().follower_refusal().is_some();
            EngineIdentity {
                role: if follower { "follower" } else { "engine" }.into(),
                active: !follower,
                generation: -1,
                ..Default::default()
            }
        }
    }
}

/// Answers one mirror RPC request frame (prefix included) with a response frame; `identity` is
/// carried in the describe answer.
pub(crate) async fn answer(frame: &Bytes, control: &Control, identity: EngineIdentity) -> Result<Bytes, ProtocolError> {
    let (header, mut r) = api::read_request(frame)?;
    if mutating(header.api_key)
        && let Some((code, message)) = control.follower_refusal()
    {
        // A follower changes nothing (List and Describe answer from the followed state).
        return Ok(api::response_frame(header.correlation_id, error_body(header.api_key, code, Some(message))));
    }
    if !control.wait_booted().await {
        // Never "does not exist" while the stored mirrors are still being read: retriable.
        return Ok(api::response_frame(header.correlation_id, loading(header.api_key)));
    }
    let body = match header.api_key {
        api::CREATE_CLUSTER_MIRROR => {
            let req = CreateRequest::decode(&mut r)?;
            let (error_code, error_message) = control.create_mirror(&req.mirror_name, &req.configs).await;
            SimpleResponse {
                error_code,
                error_message,
                ..Default::default()
            }
            .encode()
        }
        api::DELETE_CLUSTER_MIRROR => {
            let req = DeleteRequest::decode(&mut r)?;
            let (error_code, error_message) = control.delete_mirror(&req.mirror_name).await;
            SimpleResponse {
                error_code,
                error_message,
                ..Default::default()
            }
            .encode()
        }
        api::START_MIRROR_TOPICS => {
            let req = TopicsRequest::decode(&mut r, header.api_key)?;
            let (error_code, error_message, results) = match checked_patterns(&req.patterns, &req.exclude_patterns).await {
                Err(message) => (errors::INVALID_REQUEST, Some(message), Vec::new()),
                Ok(()) => control.start_topics(&req.mirror_name, &req.topics, &req.patterns, &req.exclude_patterns).await,
            };
            bounded(
                TopicsResponse {
                    error_code,
                    error_message,
                    topics: results.into_iter().map(result).collect(),
                    ..Default::default()
                },
                frame.len(),
            )
            .encode()
        }
        api::STOP_MIRROR_TOPICS | api::PAUSE_MIRROR_TOPICS | api::RESUME_MIRROR_TOPICS => {
            let req = TopicsRequest::decode(&mut r, header.api_key)?;
            bounded(topics_op(header.api_key, req, control).await, frame.len()).encode()
        }
        api::LIST_CLUSTER_MIRRORS => {
            let include_names = r.bool()?;
            list(control, include_names).encode()
        }
        _ => {
            let req = DescribeRequest::decode(&mut r)?;
            DescribeResponse {
                engine: Some(identity),
                ..describe(control, &req)
            }
            .encode()
        }
    };
    Ok(api::response_frame(header.correlation_id, body))
}

/// The retriable answer of every mirror RPC while the engine loads its stored state.
fn loading(api_key: i16) -> kmp_protocol::mirror_api::W {
    error_body(api_key, errors::COORDINATOR_LOAD_IN_PROGRESS, Some(kmp_mirror_engine::LOADING.to_owned()))
}

async fn topics_op(key: i16, req: TopicsRequest, control: &Control) -> TopicsResponse {
    // The message goes in the top-level field only: copied into every topic's result it made
    // an answer thousands of times the request's size (a long name or pattern, many topics).
    let fail_all = |code: i16, message: String| TopicsResponse {
        error_code: code,
        error_message: Some(message),
        topics: req
            .topics
            .iter()
            .map(|t| TopicResult {
                name: t.clone(),
                error_code: code,
                error_message: None,
            })
            .collect(),
        ..Default::default()
    };
    if !control.has_mirror(&req.mirror_name) {
        if let Some(message) = kmp_mirror_engine::invalid_mirror_name(&req.mirror_name) {
            // No mirror can have this name: refused alone, before any per-topic work.
            return TopicsResponse {
                error_code: errors::INVALID_REQUEST,
                error_message: Some(message),
                ..Default::default()
            };
        }
        return fail_all(errors::UNKNOWN_CLUSTER_MIRROR, format!("cluster mirror {} does not exist", req.mirror_name));
    }
    let mut topics = req.topics.clone();
    if key == api::STOP_MIRROR_TOPICS && !req.patterns.is_empty() {
        if let Err(message) = checked_patterns(&req.patterns, &[]).await {
            return fail_all(errors::INVALID_REQUEST, message);
        }
        // Patterns match the mirror's destination topic names (whole name), as in the KIP's CLI.
        let mut regexes = Vec::new();
        for p in &req.patterns {
            match kmp_config::topic_pattern(p) {
                Ok(r) => regexes.push(r),
                Err(e) => return fail_all(errors::INVALID_REQUEST, format!("`{p}` is not a valid regular expression: {e}")),
            }
        }
        let mine = control
            .list()
            .into_iter()
            .find(|m| m.name == req.mirror_name)
            .map(|m| m.topics)
            .unwrap_or_default();
        let named: HashSet<&String> = req.topics.iter().collect();
        let matched: Vec<String> = mine
            .into_iter()
            .filter(|t| !named.contains(t) && regexes.iter().any(|r| r.is_match(t)))
            .collect();
        topics.extend(matched);
    }
    let results = match key {
        api::STOP_MIRROR_TOPICS => control.stop_topics(&req.mirror_name, &topics, None).await,
        api::PAUSE_MIRROR_TOPICS => control.pause_topics(&req.mirror_name, &topics).await,
        _ => control.resume_topics(&req.mirror_name, &topics).await,
    };
    TopicsResponse {
        topics: results.into_iter().map(result).collect(),
        ..Default::default()
    }
}

/// Per-topic messages of a topics answer may take at most this many times the request's size.
const MESSAGE_BUDGET_PER_REQUEST_BYTE: usize = 4;

/// `resp` with its per-topic messages cut to a budget of a few times the request's size
/// (`request_len` bytes): messages past it become null, their error codes stay. Without the
/// messages a topic's result is its name and a few bytes, so the answer is bounded by a small
/// multiple of the request (plus, for Stop with patterns, the mirror's own matching topics).
fn bounded(mut resp: TopicsResponse, request_len: usize) -> TopicsResponse {
    let mut budget = request_len.saturating_mul(MESSAGE_BUDGET_PER_REQUEST_BYTE);
    let mut dropped = 0usize;
    for t in &mut resp.topics {
        let len = t.error_message.as_ref().map_or(0, String::len);
        if len > budget {
            t.error_message = None;
            dropped += 1;
        } else {
            budget -= len;
        }
    }
    if dropped > 0 {
        tracing::debug!(dropped, "per-topic error messages left out of a mirror topics answer (size bound)");
    }
    resp
}

fn result(r: EngineResult) -> TopicResult {
    TopicResult {
        name: r.topic,
        error_code: r.error_code,
        error_message: r.message,
    }
}

fn list(control: &Control, include_names: bool) -> ListResponse {
    let mirrors = control
        .list()
        .into_iter()
        .map(|m| ListedMirror {
            topic_count: m.topics.len() as i32,
            topic_names: if include_names { m.topics } else { Vec::new() },
            mirror_name: m.name,
            source_bootstrap: m.source_bootstrap,
            source_cluster_id: String::new(),
        })
        .collect();
    ListResponse { mirrors, ..Default::default() }
}

fn describe(control: &Control, req: &DescribeRequest) -> DescribeResponse {
    let names: Vec<String> = if req.mirror_names.is_empty() {
        control.list().into_iter().map(|m| m.name).collect()
    } else {
        // Each distinct name once, in the order first asked: the KIP's admin client keys the
        // descriptions by name (a map), so repeats add nothing but a full description each.
        let mut seen = HashSet::new();
        req.mirror_names.iter().filter(|n| seen.insert(n.as_str())).cloned().collect()
    };
    let mirrors = names
        .into_iter()
        .map(|name| {
            if !control.has_mirror(&name) {
                return DescribedMirror {
                    error_code: errors::UNKNOWN_CLUSTER_MIRROR,
                    mirror_name: name,
                    authorized_operations: i32::MIN,
                    ..Default::default()
                };
            }
            let now = kmp_mirror_engine::now_ms();
            let topics = control
                .describe(&name)
                .into_iter()
                .map(|(topic, parts)| {
                    let details = parts
                        .into_iter()
                        .map(|p| {
                            let s = p.status;
                            let (state, retry_attempt) = kip_state(s.state);
                            let recent = s.rate.recent(now);
                            let progress = PartitionProgress {
                                records_mirrored: i64::try_from(s.records_mirrored).unwrap_or(i64::MAX),
                                bytes_mirrored: i64::try_from(s.bytes_mirrored).unwrap_or(i64::MAX),
                                window_ms: recent.span_ms,
                                window_records: i64::try_from(recent.records).unwrap_or(i64::MAX),
                                window_bytes: i64::try_from(recent.bytes).unwrap_or(i64::MAX),
                            };
                            PartitionDetail {
                                partition_index: p.partition,
                                source_offset: s.source_high_watermark,
                                destination_offset: s.destination_next_offset,
                                lag: if s.source_last_stable_offset < 0 { -1 } else { s.lag_records() },
                                state_value: state.to_owned(),
                                retry_attempt,
                                error_message: s.last_error,
                                progress: Some(progress),
                            }
                        })
                        .collect();
                    (topic, details)
                })
                .collect();
            let sync = control
                .sync_status(&name)
                .into_iter()
                .map(|(kind, s)| SyncEntry {
                    kind: kind.as_str().to_owned(),
                    interval_ms: i64::try_from(s.interval_ms).unwrap_or(i64::MAX),
                    runs: s.runs as i64,
                    last_run_ms: s.last_run_ms,
                    last_success_ms: s.last_success_ms,
                    synced: s.synced as i64,
                    skipped_active: s.skipped_active as i64,
                    applied_total: s.applied_total as i64,
                    errors_total: s.errors_total as i64,
                    last_error: s.last_error,
                })
                .collect();
            DescribedMirror {
                error_code: codes::NONE,
                mirror_name: name,
                authorized_operations: i32::MIN,
                topics,
                sync,
            }
        })
        .collect();
    DescribeResponse { mirrors, ..Default::default() }
}

/// KIP-1279 state name and retry attempt (-1 = not retried) of an engine partition state.
/// The broker-internal LOG_TRUNCATION / EPOCH_FENCING steps have no proxy equivalent; the
/// engine's preparation reports the KIP's older name PREPARING.
fn kip_state(state: PartitionState) -> (&'static str, i16) {
    match state {
        PartitionState::Preparing => ("PREPARING", 0),
        PartitionState::Mirroring | PartitionState::Filling => ("MIRRORING", 0),
        PartitionState::Retrying => ("FAILED", 1),
        // Engine FAILED is never retried automatically (retriable errors are `Retrying`).
        PartitionState::Failed => ("FAILED", -1),
        PartitionState::Pausing => ("PAUSING", 0),
        PartitionState::Paused => ("PAUSED", 0),
        PartitionState::Stopping => ("STOPPING", 0),
        PartitionState::Stopped => ("STOPPED", 0),
    }
}

/// The request's patterns within the management limits and compiling
/// (`kmp_config::check_request_patterns`), checked on the blocking pool: a request's compiles
/// must not hold up the runtime serving other connections.
async fn checked_patterns(include: &[String], exclude: &[String]) -> Result<(), String> {
    if include.is_empty() && exclude.is_empty() {
        return Ok(());
    }
    let (include, exclude) = (include.to_vec(), exclude.to_vec());
    match tokio::task::spawn_blocking(move || kmp_config::check_request_patterns(&include, &exclude)).await {
        Ok(checked) => checked,
        Err(e) => Err(format!("cannot check the patterns: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_control() -> Control {
        kmp_mirror_engine::Engine::idle(&kmp_config::EngineConfig::default()).control().clone()
    }

    fn topics_answer(resp: &Bytes) -> TopicsResponse {
        let (_, mut r) = api::read_response(resp).unwrap();
        TopicsResponse::decode(&mut r).unwrap()
    }

    #[tokio::test]
    async fn rpc_patterns_have_the_rest_limits_and_are_compiled_off_the_runtime() {
        let many = vec!["t".to_owned(); kmp_config::MAX_REQUEST_PATTERNS + 1];
        let refused = checked_patterns(&many, &[]).await.expect_err("one pattern too many");
        assert!(refused.contains("257 include patterns"), "{refused}");
        let long = vec!["a".repeat(kmp_config::MAX_REQUEST_PATTERN_LEN + 1)];
        assert!(checked_patterns(&[], &long).await.is_err(), "an overlong exclude pattern");
        let costly = vec![r"\w{200}".to_owned(); 6];
        let started = std::time::Instant::now();
        assert!(checked_patterns(&costly, &[]).await.is_err(), "over the regex size limit");
        assert!(started.elapsed() < std::time::Duration::from_millis(500), "took {:?}", started.elapsed());
        assert_eq!(checked_patterns(&["orders-.*".to_owned()], &["tmp".to_owned()]).await, Ok(()));
        assert_eq!(checked_patterns(&[], &[]).await, Ok(()));
    }

    const TOPIC_KEYS: [i16; 4] = [
        api::PAUSE_MIRROR_TOPICS,
        api::RESUME_MIRROR_TOPICS,
        api::STOP_MIRROR_TOPICS,
        api::START_MIRROR_TOPICS,
    ];

    #[tokio::test]
    async fn an_unknown_mirror_name_is_not_copied_into_every_topic_result() {
        let control = idle_control();
        for key in TOPIC_KEYS {
            let req = TopicsRequest {
                mirror_name: "m".repeat(4096),
                topics: vec![String::new(); 4096],
                ..Default::default()
            };
            let frame = api::request_frame(key, 1, "c", req.encode(key));
            let resp = answer(&frame, &control, EngineIdentity::default()).await.unwrap();
            assert!(
                resp.len() <= 64 * frame.len(),
                "api key {key}: a {}-byte request got a {}-byte answer",
                frame.len(),
                resp.len()
            );
        }
    }

    #[tokio::test]
    async fn an_overlong_mirror_name_is_refused_once_at_the_top() {
        let control = idle_control();
        for key in TOPIC_KEYS {
            let req = TopicsRequest {
                mirror_name: "m".repeat(kmp_mirror_engine::MAX_MIRROR_NAME_LEN + 1),
                topics: vec!["t".to_owned(); 100],
                ..Default::default()
            };
            let frame = api::request_frame(key, 1, "c", req.encode(key));
            let got = topics_answer(&answer(&frame, &control, EngineIdentity::default()).await.unwrap());
            assert_eq!(got.error_code, errors::INVALID_REQUEST, "api key {key}");
            assert!(got.error_message.is_some_and(|m| m.len() < 200), "api key {key}: the name is not echoed");
            assert!(got.topics.is_empty(), "api key {key}: no per-topic results");
        }
    }

    #[tokio::test]
    async fn an_unknown_mirror_is_named_only_in_the_top_level_message() {
        let control = idle_control();
        for key in TOPIC_KEYS {
            let req = TopicsRequest {
                mirror_name: "missing".into(),
                topics: vec!["a".into(), "b".into()],
                ..Default::default()
            };
            let frame = api::request_frame(key, 1, "c", req.encode(key));
            let got = topics_answer(&answer(&frame, &control, EngineIdentity::default()).await.unwrap());
            assert_eq!(got.error_code, errors::UNKNOWN_CLUSTER_MIRROR, "api key {key}");
            assert!(got.error_message.is_some_and(|m| m.contains("missing")), "api key {key}");
            assert_eq!(got.topics.len(), 2, "api key {key}");
            assert!(
                got.topics
                    .iter()
                    .all(|t| t.error_code == errors::UNKNOWN_CLUSTER_MIRROR && t.error_message.is_none()),
                "api key {key}: {:?}",
                got.topics
            );
        }
    }

    #[test]
    fn per_topic_messages_past_a_few_times_the_request_size_are_left_out() {
        let resp = TopicsResponse {
            topics: (0..100)
                .map(|i| TopicResult {
                    name: format!("t{i}"),
                    error_code: 1,
                    error_message: Some("x".repeat(100)),
                })
                .collect(),
            ..Default::default()
        };
        let got = bounded(resp, 1000);
        let kept: usize = got.topics.iter().filter_map(|t| t.error_message.as_ref()).map(String::len).sum();
        assert_eq!(kept, 1000 * MESSAGE_BUDGET_PER_REQUEST_BYTE);
        assert!(got.topics.iter().all(|t| t.error_code == 1), "codes are kept");
    }

    #[tokio::test]
    async fn describe_answers_a_repeated_mirror_name_once() {
        let control = idle_control();
        let req = DescribeRequest {
            mirror_names: [vec!["x".to_owned(); 1000], vec!["y".to_owned(), "x".to_owned()]].concat(),
            include_authorized_operations: false,
        };
        let frame = api::request_frame(api::DESCRIBE_CLUSTER_MIRRORS, 1, "c", req.encode());
        let resp = answer(&frame, &control, EngineIdentity::default()).await.unwrap();
        let (_, mut r) = api::read_response(&resp).unwrap();
        let got = DescribeResponse::decode(&mut r).unwrap();
        let names: Vec<&str> = got.mirrors.iter().map(|m| m.mirror_name.as_str()).collect();
        assert_eq!(names, ["x", "y"], "each distinct name once, in the order first asked");
    }
}
