//! Mirror management over HTTP on the admin endpoint, under `/v1`: create, list, describe and
//! delete mirrors, start / pause / resume / stop (failover) mirror topics, show and change the
//! log filter (`/v1/log-level`, owned by `logging`), and the OpenAPI document
//! (`/v1/openapi.json`). Every route needs a loopback caller (IPv4, IPv6 or IPv4-mapped; not a
//! browser sent by another site, see `origin`) or `Authorization: Bearer <admin.token>`
//! ([`AdminAuth`]); reads are open to everyone with `security.admin_read_open`. The operations and their KIP-1279 error codes are the
//! engine's (`kmp_mirror_engine::Control`); this module only maps them to HTTP and JSON.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::{Method, Request, Response, StatusCode};
use kmp_mirror_engine::{Control, TopicResult, codes};
use kmp_protocol::mirror_api;
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest request body accepted (bytes).
const MAX_BODY: usize = 1024 * 1024;

/// Most `include` (and most `exclude`) patterns one `start` body may carry.
#[cfg(test)]
const MAX_PATTERNS: usize = kmp_config::MAX_REQUEST_PATTERNS;

/// Longest `include` / `exclude` pattern accepted (bytes).
#[cfg(test)]
const MAX_PATTERN_LEN: usize = kmp_config::MAX_REQUEST_PATTERN_LEN;

mod auth;
mod forward;
mod origin;

pub(crate) use auth::AdminAuth;

use super::partition_view::PartitionView;

/// Body of the start / pause / resume / stop routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicsBody {
    #[serde(default)]
    topics: Vec<String>,
    /// Stop only: wait at most this long for zero lag before failing over.
    #[serde(default)]
    graceful_timeout_ms: Option<u64>,
    /// Start only: include / exclude patterns kept for auto-discovery.
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    /// Start only: answer what starting the topics would do (a failback's path and quarantine
    /// per partition) and change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// Body of `POST /v1/mirrors`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    /// KIP-1279 mirror configs (`bootstrap.servers`, `mirror.topics.include`, …).
    configs: std::collections::BTreeMap<String, String>,
}

/// Body of `PUT /v1/log-level`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogLevelBody {
    /// The new filter, tracing `EnvFilter` syntax (`info,kafka_mirror_engine=debug`).
    filter: String,
}

/// Handles a `/v1/…` request.
/// `body_timeout`: how long the caller has to send the whole request body (408 after it);
/// `election`: where this instance stands in the engine election (`engine.role = "auto"`);
/// `slot`: where a standby hands mutations to the active instance (`None`: it cannot).
pub(crate) async fn handle<B>(
    req: Request<B>,
    peer: SocketAddr,
    auth: AdminAuth<'_>,
    body_timeout: Duration,
    control: &Control,
    election: Option<kmp_mirror_engine::ElectionView>,
    slot: Option<&kmp_mirror_engine::EngineSlot>,
) -> Response<Full<Bytes>>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path: Vec<String> = req
        .uri()
        .path()
        .trim_start_matches("/v1")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    // Who may ask comes first: nothing (not even "still loading") is told to others.
    let refused = match *req.method() {
        Method::GET => auth.refuse_read(req.headers(), peer),
        Method::POST | Method::PUT | Method::DELETE => auth.refuse_mutation(req.headers(), peer),
        _ => Some(error(StatusCode::NOT_FOUND, "no such route; see /v1/openapi.json")),
    };
    if let Some(refused) = refused {
        return refused;
    }
    if path.first() == Some(&"mirrors") && !control.wait_booted().await {
        // Never "does not exist" while the stored mirrors are still being read: retriable.
        return error(StatusCode::SERVICE_UNAVAILABLE, kmp_mirror_engine::LOADING);
    }
    match (req.method().clone(), path.as_slice()) {
        (Method::GET, ["openapi.json"]) => json_response(StatusCode::OK, serde_json::from_str(OPENAPI).unwrap_or(Value::Null)),
        (Method::GET, ["log-level"]) => log_level(crate::logging::current()),
        (Method::GET, ["engine"]) => json_response(StatusCode::OK, engine_json(control, election.as_ref())),
        (Method::PUT, ["log-level"]) => {
            // Per process, so a follower changes its own too (never refused as a mirror change).
            let body = match read_body(req.into_body(), body_timeout).await {
                Ok(b) => b,
                Err(refused) => return refused,
            };
            match serde_json::from_slice::<LogLevelBody>(&body) {
                Ok(b) => log_level(crate::logging::set(&b.filter)),
                Err(e) => error(
                    StatusCode::BAD_REQUEST,
                    &format!("body must be {{\"filter\": \"info,kafka_mirror_engine=debug\"}}: {e}"),
                ),
            }
        }
        (Method::GET, ["mirrors"]) => json_response(StatusCode::OK, list(control)),
        (Method::GET, ["mirrors", name]) => describe(control, name),
        (method @ (Method::POST | Method::DELETE), rest) => {
            let rest: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
            let body = match read_body(req.into_body(), body_timeout).await {
                Ok(b) => b,
                Err(refused) => return refused,
            };
            mutate(method, &rest, &body, control, slot).await
        }
        _ => error(StatusCode::NOT_FOUND, "no such route; see /v1/openapi.json"),
    }
}

/// The request body, at most [`MAX_BODY`] bytes and within `timeout` (a caller that sends its
/// headers and then trickles or never ends its body must not hold the handler); the answer to
/// give instead when it is too large or unreadable (400) or late (408).
async fn read_body<B>(body: B, timeout: Duration) -> Result<Bytes, Response<Full<Bytes>>>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match tokio::time::timeout(timeout, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) => Err(error(StatusCode::BAD_REQUEST, &format!("cannot read the body: {e}"))),
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {} ms", timeout.as_millis()),
        )),
    }
}

async fn mutate(method: Method, path: &[String], body: &[u8], control: &Control, slot: Option<&kmp_mirror_engine::EngineSlot>) -> Response<Full<Bytes>> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    if let Some((code, message)) = control.follower_refusal() {
        // An `auto` standby hands the change to the active instance.
        if let Some(slot) = slot.filter(|s| s.can_forward()) {
            return forward::mutate(method, &path, body, slot).await;
        }
        // A follower changes nothing: 421 Misdirected Request, the body says where to go.
        return json_response(StatusCode::MISDIRECTED_REQUEST, code_json(code, Some(message)));
    }
    match (method, path.as_slice()) {
        (Method::POST, ["mirrors"]) => {
            let (name, configs) = match create_body(body) {
                Ok(b) => b,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            let (code, message) = control.create_mirror(&name, &configs).await;
            json_response(create_status(code), code_json(code, message))
        }
        (Method::DELETE, ["mirrors", name]) => {
            let (code, message) = control.delete_mirror(name).await;
            json_response(delete_status(code), code_json(code, message))
        }
        (Method::POST, ["mirrors", name, op @ ("start" | "pause" | "resume" | "stop")]) => {
            let body = match topics_body(body).await {
                Ok(b) => b,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            if !control.has_mirror(name) {
                return mirror_unknown(name);
            }
            if *op == "start" && body.dry_run {
                return match control.failback_plan(name, &body.topics).await {
                    Ok(previews) => json_response(StatusCode::OK, json!({ "dry_run": true, "topics": previews })),
                    Err((code, message)) => json_response(StatusCode::BAD_REQUEST, code_json(code, Some(message))),
                };
            }
            let results = match *op {
                "start" => {
                    let (code, message, results) = control.start_topics(name, &body.topics, &body.include, &body.exclude).await;
                    if code != codes::NONE {
                        return start_failed(code, message, &results);
                    }
                    results
                }
                "pause" => control.pause_topics(name, &body.topics).await,
                "resume" => control.resume_topics(name, &body.topics).await,
                _ => {
                    control
                        .stop_topics(name, &body.topics, body.graceful_timeout_ms.map(Duration::from_millis))
                        .await
                }
            };
            json_response(StatusCode::OK, json!({ "results": results.iter().map(result_json).collect::<Vec<_>>() }))
        }
        _ => error(StatusCode::NOT_FOUND, "no such route; see /v1/openapi.json"),
    }
}

/// A mirror's configs as a create carries them.
type Configs = Vec<(String, Option<String>)>;

/// A create's body: the mirror's name and configs, or why it is refused (400).
fn create_body(body: &[u8]) -> Result<(String, Configs), String> {
    match serde_json::from_slice::<CreateBody>(body) {
        Ok(b) => Ok((b.name, b.configs.into_iter().map(|(k, v)| (k, Some(v))).collect())),
        Err(e) => Err(format!("body must be {{\"name\": .., \"configs\": {{..}}}}: {e}")),
    }
}

/// A start / pause / resume / stop body, or why it is refused (400). Patterns are checked here,
/// whatever the mirror's state: an invalid one is the caller's error, never an empty success.
/// Compiling them is CPU work, so it runs on the blocking pool, not on an async worker.
async fn topics_body(body: &[u8]) -> Result<TopicsBody, String> {
    let body: TopicsBody = serde_json::from_slice(body).map_err(|e| format!("body must be {{\"topics\": [..], …}}: {e}"))?;
    let (include, exclude) = (body.include.clone(), body.exclude.clone());
    match tokio::task::spawn_blocking(move || kmp_config::check_request_patterns(&include, &exclude)).await {
        Ok(checked) => checked?,
        Err(e) => return Err(format!("cannot check the patterns: {e}")),
    }
    Ok(body)
}

fn code_json(code: i16, message: Option<String>) -> Value {
    json!({ "error_code": code, "error": mirror_api::errors::name(code), "message": message })
}

fn list(control: &Control) -> Value {
    let mirrors: Vec<Value> = control
        .list()
        .into_iter()
        .map(|m| json!({ "name": m.name, "source_bootstrap": m.source_bootstrap, "topic_count": m.topics.len(), "topics": m.topics }))
        .collect();
    json!({ "mirrors": mirrors })
}

fn describe(control: &Control, name: &str) -> Response<Full<Bytes>> {
    if !control.has_mirror(name) {
        return mirror_unknown(name);
    }
    let now = kmp_mirror_engine::now_ms();
    let topics: Vec<Value> = control
        .describe(name)
        .into_iter()
        .map(|(topic, parts)| {
            let partitions: Vec<PartitionView> = parts.iter().map(|p| PartitionView::of(p, now)).collect();
            json!({ "topic": topic, "desired": control.desired(&topic).map(|d| d.as_str()), "partitions": partitions })
        })
        .collect();
    let sync: serde_json::Map<String, Value> = control
        .sync_status(name)
        .into_iter()
        .map(|(kind, s)| (kind.as_str().to_owned(), sync_json(&s)))
        .collect();
    json_response(StatusCode::OK, json!({ "name": name, "topics": topics, "sync": sync }))
}

/// The answer of `/v1/log-level`: the filter in force, 400 for an invalid one, 503 when this
/// process did not set up its logging (embedded).
fn log_level(outcome: Result<String, crate::logging::LoggingError>) -> Response<Full<Bytes>> {
    use crate::logging::LoggingError;
    match outcome {
        Ok(filter) => json_response(StatusCode::OK, json!({ "filter": filter })),
        Err(e @ LoggingError::InvalidFilter { .. }) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e @ (LoggingError::NotInstalled | LoggingError::Subscriber(_))) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// The status of a create's answer.
fn create_status(code: i16) -> StatusCode {
    match code {
        codes::NONE => StatusCode::CREATED,
        mirror_api::errors::CLUSTER_MIRROR_ALREADY_EXISTS => StatusCode::CONFLICT,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The status of a delete's answer.
fn delete_status(code: i16) -> StatusCode {
    match code {
        codes::NONE => StatusCode::OK,
        codes::UNKNOWN_CLUSTER_MIRROR => StatusCode::NOT_FOUND,
        _ => StatusCode::CONFLICT,
    }
}

/// A start that failed as a whole (e.g. its new definition could not be stored): said so,
/// never 200 with the per-topic results alone.
fn start_failed(code: i16, message: Option<String>, results: &[TopicResult]) -> Response<Full<Bytes>> {
    let status = match code {
        codes::COORDINATOR_NOT_AVAILABLE | codes::COORDINATOR_LOAD_IN_PROGRESS => StatusCode::SERVICE_UNAVAILABLE,
        codes::UNKNOWN_CLUSTER_MIRROR => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut body = code_json(code, message);
    body["results"] = Value::Array(results.iter().map(result_json).collect());
    json_response(status, body)
}

fn result_json(r: &TopicResult) -> Value {
    json!({ "topic": r.topic, "error_code": r.error_code, "error": mirror_api::errors::name(r.error_code), "message": r.message })
}

/// This instance's part in running the engine: its role, and for `auto` the election's view.
fn engine_json(control: &Control, election: Option<&kmp_mirror_engine::ElectionView>) -> Value {
    match election {
        Some(e) => json!({
            "role": e.role_name(),
            "fenced": e.fenced(),
            "instance_id": e.instance_id,
            "group_id": e.group_id,
            "active": e.active,
            "generation": e.generation,
            "active_instance": if e.active_instance.is_empty() { Value::Null } else { Value::from(e.active_instance.clone()) },
            "takeovers": e.takeovers,
            "problem": e.problem,
            "share_work": e.share_work,
            "share": e.share.filter(|_| e.share_work).map(|(index, members)| json!({ "index": index, "members": members })),
        }),
        None => json!({
            "role": if control.follower_refusal().is_some() { "follower" } else { "engine" },
        }),
    }
}

/// One metadata sync loop's status as JSON (REST describe and the dashboard's state).
pub(crate) fn sync_json(s: &kmp_mirror_engine::SyncStatus) -> Value {
    json!({
        "interval_ms": s.interval_ms,
        "runs": s.runs,
        "last_run_ms": s.last_run_ms,
        "last_success_ms": s.last_success_ms,
        "synced": s.synced,
        "skipped_active_groups": s.skipped_active,
        "applied_total": s.applied_total,
        "errors_total": s.errors_total,
        "last_error": s.last_error,
    })
}

fn mirror_unknown(name: &str) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::NOT_FOUND,
        json!({ "error_code": codes::UNKNOWN_CLUSTER_MIRROR, "error": "UNKNOWN_CLUSTER_MIRROR", "message": format!("cluster mirror {name} does not exist") }),
    )
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_response(status, json!({ "message": message }))
}

fn json_response(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    if let Ok(v) = "application/json".parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The OpenAPI 3 description of these routes.
const OPENAPI: &str = include_str!("openapi.json");

#[cfg(test)]
mod tests;

#[cfg(test)]
mod engine_route_tests {
    use super::*;

    #[test]
    fn the_engine_route_names_the_role_and_for_auto_the_instance_and_generation() {
        let control = kmp_mirror_engine::Engine::idle(&kmp_config::EngineConfig::default()).control().clone();
        assert_eq!(engine_json(&control, None), json!({"role": "engine"}));
        let view = kmp_mirror_engine::ElectionView {
            instance_id: "p2".into(),
            group_id: "kmp-engine.s".into(),
            active: false,
            generation: 4,
            active_instance: "p1".into(),
            takeovers: 1,
            problem: None,
            share: Some((2, 3)),
            share_work: true,
            alone: false,
        };
        let v = engine_json(&control, Some(&view));
        assert_eq!(
            v,
            json!({"role": "auto", "fenced": false, "instance_id": "p2", "group_id": "kmp-engine.s", "active": false, "generation": 4, "active_instance": "p1", "takeovers": 1, "problem": null, "share_work": true, "share": {"index": 2, "members": 3}})
        );
    }
}
