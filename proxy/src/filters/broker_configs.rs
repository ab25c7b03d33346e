//! Broker-level defaults of topic configs are refused through the proxy while the engine runs.
//! A BROKER resource (type 4, one broker or the cluster default) in AlterConfigs or
//! IncrementalAlterConfigs that sets, deletes or changes a key whose topic-level synonym exists
//! (`log.retention.ms` → `retention.ms`, `log.roll.ms` → `segment.ms`, ...) reaches every mirror
//! topic that has no explicit value for it — `log.retention.ms=1000` deleted mirrored data. Such
//! resources get POLICY_VIOLATION (44) with a message; other keys and other resources go to the
//! broker. Chosen over writing explicit topic-level values on every mirror topic because it
//! cannot miss a key a future Kafka adds to a topic's defaults only through this list, and
//! operators change broker defaults on the brokers themselves, not through a client proxy.

use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use super::guard::{Decision, split};
use super::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

const BROKER_RESOURCE: i8 = 4;
const POLICY_VIOLATION: i16 = 44;

/// Broker keys that are defaults of topic configs (Kafka's `ServerTopicConfigSynonyms`).
const TOPIC_DEFAULTS: &[&str] = &[
    "log.segment.bytes",
    "log.roll.ms",
    "log.roll.hours",
    "log.roll.jitter.ms",
    "log.roll.jitter.hours",
    "log.index.size.max.bytes",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.retention.bytes",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "message.max.bytes",
    "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio",
    "log.cleanup.policy",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "compression.type",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "log.preallocate",
    "log.message.timestamp.type",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms",
    "log.message.downconversion.enable",
    "log.local.retention.ms",
    "log.local.retention.bytes",
];

fn reaches_topics(key: &str) -> bool {
    TOPIC_DEFAULTS.contains(&key)
}

fn message(keys: &[String]) -> String {
    format!(
        "{} set(s) the broker-level default of a topic config, which would reach read-only mirror topics; kafka-mirror-proxy refuses it while mirroring — set it per topic, or on the brokers directly",
        keys.join(", ")
    )
}

/// The broker-config guard.
pub(crate) struct BrokerConfigGuard;

impl Filter for BrokerConfigGuard {
    fn wants_request(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        conn.shared.masks_fillers && matches!(ApiKey::try_from(api_key), Ok(ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs))
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let decision = check(x)?;
            super::mirror_topics::apply(decision, x, |n| conn.shared.metrics.refused("broker_topic_default", n))
        })
    }
}

fn check(x: &Exchange) -> Result<Decision, ProtocolError> {
    let take = |resources: Vec<(i8, String, Vec<String>)>| -> Vec<(String, String)> {
        resources
            .into_iter()
            .filter(|(kind, _, _)| *kind == BROKER_RESOURCE)
            .filter_map(|(_, name, keys)| {
                let bad: Vec<String> = keys.into_iter().filter(|k| reaches_topics(k)).collect();
                (!bad.is_empty()).then(|| (name, message(&bad)))
            })
            .collect()
    };
    match ApiKey::try_from(x.api_key) {
        Ok(ApiKey::IncrementalAlterConfigs) => split::<IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse>(
            &x.frame,
            ApiKey::IncrementalAlterConfigs,
            x.api_version,
            |req| {
                let refused = take(
                    req.resources
                        .iter()
                        .map(|r| {
                            (
                                r.resource_type,
                                r.resource_name.as_str().to_owned(),
                                r.configs.iter().map(|c| c.name.as_str().to_owned()).collect(),
                            )
                        })
                        .collect(),
                );
                req.resources
                    .retain(|r| !(r.resource_type == BROKER_RESOURCE && refused.iter().any(|(n, _)| n == r.resource_name.as_str())));
                refused
            },
            |req| req.resources.len(),
            |resp, refused| {
                for (name, msg) in refused {
                    let mut r = kmp_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                    r.resource_type = BROKER_RESOURCE;
                    r.resource_name = StrBytes::from_string(name.clone());
                    r.error_code = POLICY_VIOLATION;
                    r.error_message = Some(StrBytes::from_string(msg.clone()));
                    resp.responses.push(r);
                }
            },
        ),
        Ok(ApiKey::AlterConfigs) => split::<AlterConfigsRequest, AlterConfigsResponse>(
            &x.frame,
            ApiKey::AlterConfigs,
            x.api_version,
            |req| {
                // AlterConfigs replaces the whole resource: any topic default in it counts.
                let refused = take(
                    req.resources
                        .iter()
                        .map(|r| {
                            (
                                r.resource_type,
                                r.resource_name.as_str().to_owned(),
                                r.configs.iter().map(|c| c.name.as_str().to_owned()).collect(),
                            )
                        })
                        .collect(),
                );
                req.resources
                    .retain(|r| !(r.resource_type == BROKER_RESOURCE && refused.iter().any(|(n, _)| n == r.resource_name.as_str())));
                refused
            },
            |req| req.resources.len(),
            |resp, refused| {
                for (name, msg) in refused {
                    let mut r = kmp_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default();
                    r.resource_type = BROKER_RESOURCE;
                    r.resource_name = StrBytes::from_string(name.clone());
                    r.error_code = POLICY_VIOLATION;
                    r.error_message = Some(StrBytes::from_string(msg.clone()));
                    resp.responses.push(r);
                }
            },
        ),
        _ => Ok(Decision::Forward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_broker_keys_that_default_topic_configs_are_refused() {
        assert!(reaches_topics("log.retention.ms") && reaches_topics("log.roll.ms") && reaches_topics("unclean.leader.election.enable"));
        assert!(!reaches_topics("background.threads") && !reaches_topics("log.cleaner.threads") && !reaches_topics("retention.ms"));
    }
}
