//! The error answer of a mirror RPC in the shape of that RPC's response: what the engine answers
//! when it cannot carry a request out (a follower, still loading) and what the proxy answers when
//! a connection may not manage mirrors or a standby cannot hand a request over.

use bytes::Bytes;

use super::{DESCRIBE_CLUSTER_MIRRORS, LIST_CLUSTER_MIRRORS, PAUSE_MIRROR_TOPICS, RESUME_MIRROR_TOPICS, START_MIRROR_TOPICS, STOP_MIRROR_TOPICS};
use super::{DescribeResponse, ListResponse, SimpleResponse, TopicsResponse, W, response_frame};

/// An error answer frame to mirror RPC `api_key` in the shape of its response.
pub fn error_response(api_key: i16, correlation_id: i32, error_code: i16, message: &str) -> Bytes {
    response_frame(correlation_id, error_body(api_key, error_code, Some(message.to_owned())))
}

/// The body of an error answer to mirror RPC `api_key`, in the shape of its response.
pub fn error_body(api_key: i16, error_code: i16, error_message: Option<String>) -> W {
    match api_key {
        START_MIRROR_TOPICS | STOP_MIRROR_TOPICS | PAUSE_MIRROR_TOPICS | RESUME_MIRROR_TOPICS => TopicsResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
        LIST_CLUSTER_MIRRORS => ListResponse {
            error_code,
            error_message,
            ..Default::default()
        }
        .encode(),
        DESCRIBE_CLUSTER_MIRRORS => DescribeResponse {
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
