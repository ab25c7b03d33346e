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
use kmp_protocol::kafka_protocol::messages::ApiKey;

use super::guard::Decision;
use super::{BoxFuture, Conn, Exchange, Filter, Flow, config_resources};
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
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        let api_key = x.api_key;
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
    // AlterConfigs replaces a whole resource, IncrementalAlterConfigs changes the keys it names:
    // either way a topic default among the keys refuses the resource.
    let pick = |r: &config_resources::Resource<'_>| {
        if r.kind != BROKER_RESOURCE {
            return None;
        }
        let bad: Vec<String> = r.keys.iter().filter(|k| reaches_topics(k)).map(|k| (*k).to_owned()).collect();
        (!bad.is_empty()).then(|| message(&bad))
    };
    config_resources::refuse_any(&x.frame, x.api_key, x.api_version, POLICY_VIOLATION, &pick)
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
