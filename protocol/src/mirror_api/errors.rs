//! KIP-1279 error codes (prototype `Errors.java`) and the Kafka codes the mirror operations use,
//! with their names for humans (CLI tables, REST bodies).
//!
//! Kafka's own codes come from kafka-protocol's `ResponseError`; only the KIP's new codes (134 and
//! up) are numbers here. Only code values and names live here. Which operation returns which
//! code, and why, is the engine's and the proxy's business, not this module's.

use kafka_protocol::ResponseError;

pub const NONE: i16 = 0;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
pub const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = ResponseError::CoordinatorLoadInProgress.code();
pub const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();
pub const INVALID_CONFIG: i16 = ResponseError::InvalidConfig.code();
/// A mutating mirror RPC sent to a proxy instance that does not run the mirror engine
/// (`engine.role = "follower"`): send it to the engine instance.
pub const NOT_CONTROLLER: i16 = ResponseError::NotController.code();
pub const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();
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
