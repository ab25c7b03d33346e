//! The KIP-1279 mirror RPCs answered — Create, Start, Stop, Pause, Resume, List, Describe and
//! Delete: a request frame decoded (`kmp_protocol::mirror_api` has the wire format and its
//! hostile-input decoders), carried out by the proxy's [`Control`], and its answer encoded. The
//! proxy's clients reach [`answer`] through `EngineSlot::answer`; the requests standbys forward
//! through the state topic reach it through [`answer_for_standby`], which the term hands to
//! `ha::forward::serve`. Which frames are intercepted, who may send them, and handing them from a
//! standby to the active instance are the proxy's and `ha::forward`'s, not this module's.
//!
//! On a follower instance (`engine.role = "follower"`, or an `auto` standby) List and Describe
//! answer from the followed state topic and every request that changes something
//! ([`is_mutating`]) gets NOT_CONTROLLER (41) with a message saying why.
//!
//! Answers stay within a small multiple of the request: a topics RPC naming a mirror name no
//! mirror can have is refused alone, an unknown mirror is named once at the top (never in each
//! topic's result), per-topic messages are cut to a budget of a few times the request's size, and
//! Describe answers each distinct mirror name once (the views are `views`).

use std::collections::HashSet;

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::mirror_api::{
    self as api, CreateRequest, DeleteRequest, DescribeRequest, DescribeResponse, EngineIdentity, SimpleResponse, TopicResult, TopicsRequest, TopicsResponse,
    error_body, errors,
};

use super::LOADING;
use super::definitions::invalid_mirror_name;
use super::handle::Control;

#[cfg(test)]
mod tests;
mod views;

pub use views::described_partition;

/// Whether `api_key` is a mirror RPC that changes something (only the active instance may).
pub fn is_mutating(api_key: i16) -> bool {
    api::is_answered(api_key) && !matches!(api_key, api::LIST_CLUSTER_MIRRORS | api::DESCRIBE_CLUSTER_MIRRORS)
}

/// Whether request `frame` (a mirror RPC) must be answered by the engine instance: it changes
/// something, or it is a failing-back cluster's lookup of recorded lines (a DescribeClusterMirrors
/// with `ClusterId` and epoch lookups), which only the engine's stored records answer — a
/// follower's -1 would read as "nothing was mirrored". A frame that does not decode is not.
pub fn needs_engine(frame: &Bytes) -> bool {
    let Ok((header, mut r)) = api::read_request(frame) else { return false };
    is_mutating(header.api_key)
        || (header.api_key == api::DESCRIBE_CLUSTER_MIRRORS
            && DescribeRequest::decode(&mut r).is_ok_and(|d| d.cluster_id.is_some() && !d.epoch_lookups.is_empty()))
}

/// Answers one mirror RPC request frame (prefix included) with a response frame; `identity` is
/// carried in the describe answer.
pub async fn answer(frame: &Bytes, control: &Control, identity: EngineIdentity) -> Result<Bytes, ProtocolError> {
    let (header, mut r) = api::read_request(frame)?;
    if needs_engine(frame)
        && let Some((code, message)) = control.follower_refusal()
    {
        // A follower changes nothing and answers no lookup of recorded lines (List and Describe
        // answer from the followed state).
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
                    topics: results.into_iter().map(views::result).collect(),
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
            views::list(control, include_names).encode()
        }
        _ => {
            let req = DescribeRequest::decode(&mut r)?;
            DescribeResponse {
                engine: Some(identity),
                ..views::describe(control, &req)
            }
            .encode()
        }
    };
    Ok(api::response_frame(header.correlation_id, body))
}

/// The active instance's answer to a request frame a standby forwarded (exactly as it answers
/// its own clients); `None` for a frame that is not a version-0 mutating mirror RPC (a standby
/// forwards nothing else) or that does not decode: the standby's caller times out.
pub(crate) async fn answer_for_standby(frame: Bytes, control: Control) -> Option<Bytes> {
    let header = api::read_request(&frame).ok()?.0;
    if !is_mutating(header.api_key) || header.api_version != 0 {
        return None;
    }
    // Only mutating requests get here: none carries the identity (Describe does).
    answer(&frame, &control, EngineIdentity::default()).await.ok()
}

/// The retriable answer of every mirror RPC while the engine loads its stored state.
fn loading(api_key: i16) -> api::W {
    error_body(api_key, errors::COORDINATOR_LOAD_IN_PROGRESS, Some(LOADING.to_owned()))
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
        if let Some(message) = invalid_mirror_name(&req.mirror_name) {
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
        topics: results.into_iter().map(views::result).collect(),
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
