//! The KIP-1279 cluster-mirror admin RPCs, as the public prototype defines them
//! (`shared/reference/kip-1279-schemas`, aiven/inkless `8b4a597`): API keys, versions, and the
//! request/response bodies the proxy answers and its CLI sends. All are version 0, flexible
//! (compact strings and arrays, tagged fields), with request header v2 and response header v1.
//! Keys and error codes are provisional until the KIP is accepted: they live here only.
//!
//! Sans-io; the flexible-version codec underneath is `compact`. What the operations do is the
//! engine's; routing them is the proxy's.
//!
//! This file owns the API keys, the table of RPCs the proxy answers, and the public surface
//! (every message type is re-exported here, so callers keep using `mirror_api::X`). The
//! messages themselves live in one submodule per RPC family: [`errors`] (error codes),
//! `admin` (Create / Delete), `topics` (Start / Stop / Pause / Resume), `list`, `describe`, and
//! `extensions` (the proxy's own tagged fields in Describe), and `error_answer` (an error answer in
//! the shape of an RPC's response). No message layout belongs here.

mod admin;
mod describe;
mod error_answer;
pub mod errors;
mod extensions;
mod list;
#[cfg(test)]
mod tests;
mod topics;

pub use crate::compact::{Header, R, W, read_request, read_response, request_frame, response_frame};
pub use admin::{CreateRequest, DeleteRequest, SimpleResponse};
pub use describe::{DescribeRequest, DescribeResponse, DescribedMirror, EpochLookup, LookupResult, PartitionDetail};
pub use error_answer::{error_body, error_response};
pub use extensions::{ENGINE_IDENTITY_TAG, EngineIdentity, LAST_MIRROR_TAG, LastMirror, PARTITION_PROGRESS_TAG, PartitionProgress, SYNC_STATUS_TAG, SyncEntry};
pub use list::{ListResponse, ListedMirror};
pub use topics::{TopicResult, TopicsRequest, TopicsResponse};

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

/// The KIP-1279 name of mirror RPC `key` (as in its JSON schema), or `None` for other keys.
pub fn api_name(key: i16) -> Option<&'static str> {
    Some(match key {
        CREATE_CLUSTER_MIRROR => "CreateClusterMirror",
        START_MIRROR_TOPICS => "StartMirrorTopics",
        STOP_MIRROR_TOPICS => "StopMirrorTopics",
        LIST_CLUSTER_MIRRORS => "ListClusterMirrors",
        DESCRIBE_CLUSTER_MIRRORS => "DescribeClusterMirrors",
        PAUSE_MIRROR_TOPICS => "PauseMirrorTopics",
        RESUME_MIRROR_TOPICS => "ResumeMirrorTopics",
        DELETE_CLUSTER_MIRROR => "DeleteClusterMirror",
        _ => return None,
    })
}

/// Whether the proxy answers `key` itself.
pub fn is_answered(key: i16) -> bool {
    ANSWERED.iter().any(|&(k, _, _)| k == key)
}
