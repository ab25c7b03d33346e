//! Mirror management over HTTP on the admin endpoint, under `/v1`: create, list, describe and
//! delete mirrors, start / pause / resume / stop (failover) mirror topics, and the OpenAPI document
//! (`/v1/openapi.json`). Mutating routes are refused unless the caller is on loopback or sends
//! `Authorization: Bearer <admin.token>`. The operations and their KIP-1279 error codes are the
//! engine's (`kmp_mirror_engine::Control`); this module only maps them to HTTP and JSON.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use kmp_mirror_engine::{Control, TopicResult, codes};
use kmp_protocol::mirror_api;
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest request body accepted (bytes).
const MAX_BODY: usize = 1024 * 1024;

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
}

/// Body of `POST /v1/mirrors`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    /// KIP-1279 mirror configs (`bootstrap.servers`, `mirror.topics.include`, …).
    configs: std::collections::BTreeMap<String, String>,
}

/// Handles a `/v1/…` request.
pub(crate) async fn handle(req: Request<Incoming>, peer: SocketAddr, token: Option<&str>, control: &Control) -> Response<Full<Bytes>> {
    let path: Vec<String> = req
        .uri()
        .path()
        .trim_start_matches("/v1")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    if path.first() == Some(&"mirrors") && !control.wait_booted().await {
        // Never "does not exist" while the stored mirrors are still being read: retriable.
        return error(StatusCode::SERVICE_UNAVAILABLE, kmp_mirror_engine::LOADING);
    }
    match (req.method().clone(), path.as_slice()) {
        (Method::GET, ["openapi.json"]) => json_response(StatusCode::OK, serde_json::from_str(OPENAPI).unwrap_or(Value::Null)),
        (Method::GET, ["mirrors"]) => json_response(StatusCode::OK, list(control)),
        (Method::GET, ["mirrors", name]) => describe(control, name),
        (method @ (Method::POST | Method::DELETE), rest) => {
            if !authorized(&req, peer, token) {
                return error(
                    StatusCode::FORBIDDEN,
                    "mutating routes need a loopback caller or `Authorization: Bearer <admin.token>`",
                );
            }
            let rest: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("cannot read the body: {e}")),
            };
            mutate(method, &rest, &body, control).await
        }
        _ => error(StatusCode::NOT_FOUND, "no such route; see /v1/openapi.json"),
    }
}

async fn mutate(method: Method, path: &[String], body: &[u8], control: &Control) -> Response<Full<Bytes>> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (method, path.as_slice()) {
        (Method::POST, ["mirrors"]) => {
            let b: CreateBody = match serde_json::from_slice(body) {
                Ok(b) => b,
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body must be {{\"name\": .., \"configs\": {{..}}}}: {e}")),
            };
            let configs: Vec<(String, Option<String>)> = b.configs.into_iter().map(|(k, v)| (k, Some(v))).collect();
            let (code, message) = control.create_mirror(&b.name, &configs).await;
            let status = if code == 0 {
                StatusCode::CREATED
            } else if code == mirror_api::errors::CLUSTER_MIRROR_ALREADY_EXISTS {
                StatusCode::CONFLICT
            } else {
                StatusCode::BAD_REQUEST
            };
            json_response(status, code_json(code, message))
        }
        (Method::DELETE, ["mirrors", name]) => {
            let (code, message) = control.delete_mirror(name).await;
            let status = match code {
                0 => StatusCode::OK,
                codes::UNKNOWN_CLUSTER_MIRROR => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            json_response(status, code_json(code, message))
        }
        (Method::POST, ["mirrors", name, op @ ("start" | "pause" | "resume" | "stop")]) => {
            let body: TopicsBody = match serde_json::from_slice(body) {
                Ok(b) => b,
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body must be {{\"topics\": [..], …}}: {e}")),
            };
            if !control.has_mirror(name) {
                return mirror_unknown(name);
            }
            let results = match *op {
                "start" => {
                    let (code, message, results) = control.start_topics(name, &body.topics, &body.include, &body.exclude).await;
                    if code != codes::NONE {
                        // The request as a whole failed (e.g. its new definition could not be
                        // stored): say so, never 200 with the per-topic results alone.
                        let status = match code {
                            codes::COORDINATOR_NOT_AVAILABLE | codes::COORDINATOR_LOAD_IN_PROGRESS => StatusCode::SERVICE_UNAVAILABLE,
                            codes::UNKNOWN_CLUSTER_MIRROR => StatusCode::NOT_FOUND,
                            _ => StatusCode::BAD_REQUEST,
                        };
                        let mut body = code_json(code, message);
                        body["results"] = Value::Array(results.iter().map(result_json).collect());
                        return json_response(status, body);
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

fn code_json(code: i16, message: Option<String>) -> Value {
    json!({ "error_code": code, "error": mirror_api::errors::name(code), "message": message })
}

fn authorized(req: &Request<Incoming>, peer: SocketAddr, token: Option<&str>) -> bool {
    if peer.ip().is_loopback() {
        return true;
    }
    let Some(token) = token else { return false };
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    let topics: Vec<Value> = control
        .describe(name)
        .into_iter()
        .map(|(topic, parts)| {
            let partitions: Vec<Value> = parts
                .iter()
                .map(|p| {
                    let s = &p.status;
                    json!({
                        "partition": p.partition,
                        "state": s.state.as_str(),
                        "source_offset": s.source_high_watermark,
                        "source_last_stable_offset": s.source_last_stable_offset,
                        "destination_offset": s.destination_next_offset,
                        "lag": s.lag_records(),
                        "records": s.records_mirrored,
                        "fillers": s.filler_records,
                        "last_error": s.last_error,
                    })
                })
                .collect();
            json!({ "topic": topic, "desired": control.desired(&topic).map(|d| d.as_str()), "partitions": partitions })
        })
        .collect();
    let sync: serde_json::Map<String, Value> = control
        .sync_status(name)
        .into_iter()
        .map(|(kind, s)| {
            let v = json!({
                "interval_ms": s.interval_ms,
                "runs": s.runs,
                "last_run_ms": s.last_run_ms,
                "last_success_ms": s.last_success_ms,
                "synced": s.synced,
                "skipped_active_groups": s.skipped_active,
                "applied_total": s.applied_total,
                "errors_total": s.errors_total,
                "last_error": s.last_error,
            });
            (kind.as_str().to_owned(), v)
        })
        .collect();
    json_response(StatusCode::OK, json!({ "name": name, "topics": topics, "sync": sync }))
}

fn result_json(r: &TopicResult) -> Value {
    json!({ "topic": r.topic, "error_code": r.error_code, "error": mirror_api::errors::name(r.error_code), "message": r.message })
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
