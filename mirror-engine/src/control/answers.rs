//! What the control operations answer: a per-topic result with its KIP-1279 error code, a mirror
//! as listed and a partition as described — the values every management front end (the mirror
//! RPCs, REST, the CLI) turns into its own shape.

use super::codes;
use crate::state::status::PartitionStatus;

/// The outcome of an operation for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicResult {
    pub topic: String,
    pub error_code: i16,
    pub message: Option<String>,
}

impl TopicResult {
    pub(crate) fn ok(topic: &str) -> Self {
        Self {
            topic: topic.to_owned(),
            error_code: codes::NONE,
            message: None,
        }
    }
    pub(crate) fn err(topic: &str, error_code: i16, message: String) -> Self {
        Self {
            topic: topic.to_owned(),
            error_code,
            message: Some(message),
        }
    }
}

/// A mirror as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorListing {
    pub name: String,
    pub source_bootstrap: String,
    /// The source cluster's id as the engine last read it (empty until it has).
    pub source_cluster_id: String,
    pub topics: Vec<String>,
}

/// One partition as described.
#[derive(Debug, Clone)]
pub struct PartitionDetail {
    pub partition: i32,
    pub status: PartitionStatus,
}
