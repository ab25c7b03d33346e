//! The error answer of a KIP-1279 mirror RPC, in the shape of that RPC's response: given by
//! `authz` when a connection may not manage mirrors, and by `mirror_rpc` when the engine cannot
//! answer (a follower, a standby, still loading).

use bytes::Bytes;
use kmp_protocol::mirror_api::{self as api, DescribeResponse, ListResponse, SimpleResponse, TopicsResponse};

/// An error answer to mirror RPC `api_key` in the shape of its response.
pub(crate) fn error_response(api_key: i16, correlation_id: i32, error_code: i16, message: &str) -> Bytes {
    api::response_frame(correlation_id, error_body(api_key, error_code, Some(message.to_owned())))
}

/// The body of an error answer to mirror RPC `api_key`, in the shape of its response.
pub(crate) fn error_body(api_key: i16, error_code: i16, error_message: Option<String>) -> kmp_protocol::mirror_api::W {
    match api_key {
        api::START_MIRROR_TOPICS | api::STOP_MIRROR_TOPICS | api::PAUSE_MIRROR_TOPICS | api::RESUME_MIRROR_TOPICS => TopicsResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
        api::LIST_CLUSTER_MIRRORS => ListResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
        api::DESCRIBE_CLUSTER_MIRRORS => DescribeResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
        _ => SimpleResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
    }
}
