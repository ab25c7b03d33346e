//! REST mutations on an `auto` standby: the route's request is turned into the equivalent
//! KIP-1279 RPC frame, handed to the active instance (the engine's `forward`, through the state
//! topic) and its answer turned back into the same status and body the active instance's own
//! REST route gives. What each route means, its body and its statuses are the parent module's;
//! only the translation lives here.
//!
//! A graceful stop (`graceful_timeout_ms`) is not handed over: its wait can outlast the
//! hand-over's bound. It is refused with 421 naming the active instance (the CLI's graceful stop
//! waits on any instance and then stops through it).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode};
use kmp_mirror_engine::{EngineSlot, TopicResult, codes};
use kmp_protocol::mirror_api::{self as api, CreateRequest, DeleteRequest, SimpleResponse, TopicsRequest, TopicsResponse};

use super::{code_json, create_body, create_status, delete_status, error, json_response, mirror_unknown, result_json, start_failed, topics_body};

/// Correlation id of the frames built here (the answer is matched by the hand-over, not by it).
const CORRELATION_ID: i32 = 1;

/// The answer to a mutating route on a standby.
pub(super) async fn mutate(method: Method, path: &[&str], body: &[u8], slot: &EngineSlot) -> Response<Full<Bytes>> {
    match (method, path) {
        (Method::POST, ["mirrors"]) => {
            let (mirror_name, configs) = match create_body(body) {
                Ok(b) => b,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            let req = CreateRequest { mirror_name, configs };
            match hand_over(slot, api::CREATE_CLUSTER_MIRROR, req.encode()).await {
                Ok(bytes) => match decode_simple(&bytes) {
                    Some(r) => json_response(create_status(r.error_code), code_json(r.error_code, r.error_message)),
                    None => garbled(),
                },
                Err(r) => r,
            }
        }
        (Method::DELETE, ["mirrors", name]) => {
            let req = DeleteRequest {
                mirror_name: (*name).to_owned(),
                ..Default::default()
            };
            match hand_over(slot, api::DELETE_CLUSTER_MIRROR, req.encode()).await {
                Ok(bytes) => match decode_simple(&bytes) {
                    Some(r) => json_response(delete_status(r.error_code), code_json(r.error_code, r.error_message)),
                    None => garbled(),
                },
                Err(r) => r,
            }
        }
        (Method::POST, ["mirrors", name, op @ ("start" | "pause" | "resume" | "stop")]) => {
            let body = match topics_body(body).await {
                Ok(b) => b,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            if body.graceful_timeout_ms.is_some() {
                return json_response(
                    StatusCode::MISDIRECTED_REQUEST,
                    code_json(
                        codes::NOT_CONTROLLER,
                        Some(format!(
                            "this instance is a standby: send a graceful stop to the active instance ({}), or use `mirrors --stop --graceful-timeout-ms` through any instance",
                            slot.election()
                                .map(|e| e.active_instance)
                                .filter(|a| !a.is_empty())
                                .unwrap_or_else(|| "unknown right now".into())
                        )),
                    ),
                );
            }
            let api_key = match *op {
                "start" => api::START_MIRROR_TOPICS,
                "pause" => api::PAUSE_MIRROR_TOPICS,
                "resume" => api::RESUME_MIRROR_TOPICS,
                _ => api::STOP_MIRROR_TOPICS,
            };
            // Patterns are kept by a start only (a stop's patterns mean something else).
            let (patterns, exclude_patterns) = if api_key == api::START_MIRROR_TOPICS {
                (body.include, body.exclude)
            } else {
                Default::default()
            };
            let req = TopicsRequest {
                mirror_name: (*name).to_owned(),
                topics: body.topics,
                patterns,
                exclude_patterns,
                ..Default::default()
            };
            let bytes = match hand_over(slot, api_key, req.encode(api_key)).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let Some(r) = decode_topics(&bytes) else { return garbled() };
            let results: Vec<TopicResult> = r
                .topics
                .into_iter()
                .map(|t| TopicResult {
                    topic: t.name,
                    error_code: t.error_code,
                    message: t.error_message,
                })
                .collect();
            if r.error_code == codes::UNKNOWN_CLUSTER_MIRROR || results.iter().any(|t| t.error_code == codes::UNKNOWN_CLUSTER_MIRROR) {
                return mirror_unknown(name);
            }
            if r.error_code != codes::NONE {
                return start_failed(r.error_code, r.error_message, &results);
            }
            json_response(
                StatusCode::OK,
                serde_json::json!({ "results": results.iter().map(result_json).collect::<Vec<_>>() }),
            )
        }
        _ => error(StatusCode::NOT_FOUND, "no such route; see /v1/openapi.json"),
    }
}

/// Hands one request to the active instance; its answer frame, or the response to give.
async fn hand_over(slot: &EngineSlot, api_key: i16, body: api::W) -> Result<Bytes, Response<Full<Bytes>>> {
    let frame = api::request_frame(api_key, CORRELATION_ID, "kmp-admin", body);
    slot.forward(frame).await.map_err(|e| {
        if let kmp_mirror_engine::ForwardError::Refused { code, message } = e {
            // Only a create is refused before the hand-over: its statuses.
            return json_response(create_status(code), code_json(code, Some(message)));
        }
        tracing::warn!(api_key, error = %e, "REST request not forwarded to the active instance");
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            code_json(codes::REQUEST_TIMED_OUT, Some(format!("this instance is a standby; {e}"))),
        )
    })
}

fn decode_simple(frame: &Bytes) -> Option<SimpleResponse> {
    let (_, mut r) = api::read_response(frame).ok()?;
    SimpleResponse::decode(&mut r).ok()
}

fn decode_topics(frame: &Bytes) -> Option<TopicsResponse> {
    let (_, mut r) = api::read_response(frame).ok()?;
    TopicsResponse::decode(&mut r).ok()
}

/// The active instance's answer did not decode.
fn garbled() -> Response<Full<Bytes>> {
    error(StatusCode::BAD_GATEWAY, "the active instance's answer could not be read")
}
