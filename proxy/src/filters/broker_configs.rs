//! Broker-level defaults of topic configs are refused through the proxy while the engine runs.
//! A BROKER resource (type 4, one broker or the cluster default) in AlterConfigs or
//! IncrementalAlterConfigs that sets, deletes or changes a key whose topic-level synonym exists
//! (`log.retention.ms` → `retention.ms`, `log.roll.ms` → `segment.ms`, ...) reaches every mirror
//! topic that has no explicit value for it — `log.retention.ms=1000` deleted mirrored data. Such
//! resources get POLICY_VIOLATION (44) with a message; other keys and other resources go to the
//! broker. Legacy AlterConfigs (key 33) on a BROKER resource is refused whatever keys it names
//! (same code, a message pointing to IncrementalAlterConfigs): it replaces the resource's whole
//! dynamic config, so every key it does not name — an operator's per-broker `log.retention.ms`,
//! say — would be deleted, and mirror topics inheriting it would change. Other resources of the
//! same request still go to the broker. Chosen over writing explicit topic-level values on every mirror topic because it
//! cannot miss a key a future Kafka adds to a topic's defaults only through this list, and
//! operators change broker defaults on the brokers themselves, not through a client proxy.

use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::ApiKey;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::refuse::{self, Decision, configs};
use crate::error::ProxyError;

const BROKER_RESOURCE: i8 = 4;
const POLICY_VIOLATION: i16 = ResponseError::PolicyViolation.code();

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

fn replace_message(name: &str) -> String {
    let which = if name.is_empty() {
        "the cluster-wide broker default".to_owned()
    } else {
        format!("broker {name}")
    };
    format!(
        "legacy AlterConfigs replaces every dynamic config of {which}, deleting the topic-config defaults it does not name, which would reach read-only mirror topics; kafka-mirror-proxy refuses it on BROKER resources while mirroring — use IncrementalAlterConfigs"
    )
}

/// The broker-config guard.
pub(crate) struct BrokerConfigGuard;

impl Filter for BrokerConfigGuard {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let api_key = x.api_key;
        matches!(ApiKey::try_from(api_key), Ok(ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs))
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let decision = check(x)?;
            refuse::apply(decision, x, |n| conn.shared.metrics.refused("broker_topic_default", n))
        })
    }
}

fn check(x: &Exchange) -> Result<Decision, ProtocolError> {
    // IncrementalAlterConfigs changes the keys it names: a topic default among them refuses the
    // resource. AlterConfigs replaces the whole resource, deleting every dynamic key it does not
    // name — topic defaults included — so a BROKER resource is refused whatever it names.
    let legacy = x.api_key == ApiKey::AlterConfigs as i16;
    let pick = |r: &configs::Resource<'_>| {
        if r.kind != BROKER_RESOURCE {
            return None;
        }
        if legacy {
            return Some(replace_message(r.name));
        }
        let bad: Vec<String> = r.keys.iter().filter(|k| reaches_topics(k)).map(|k| (*k).to_owned()).collect();
        (!bad.is_empty()).then(|| message(&bad))
    };
    configs::refuse_any(x.frame(), x.api_key, x.api_version, POLICY_VIOLATION, &pick)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
    use kmp_protocol::kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kmp_protocol::kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, RequestHeader, alter_configs_response};
    use kmp_protocol::kafka_protocol::protocol::StrBytes;

    fn alter_configs(resources: &[(i8, &str, &[&str])]) -> Exchange {
        let mut req = AlterConfigsRequest::default();
        for (kind, name, keys) in resources {
            let mut r = AlterConfigsResource::default();
            r.resource_type = *kind;
            r.resource_name = StrBytes::from_string((*name).to_owned());
            for k in *keys {
                let mut c = AlterableConfig::default();
                c.name = StrBytes::from_string((*k).to_owned());
                c.value = Some(StrBytes::from_static_str("1"));
                r.configs.push(c);
            }
            req.resources.push(r);
        }
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::AlterConfigs as i16;
        h.request_api_version = 2;
        h.correlation_id = 9;
        let frame: Bytes = encode_request(&h, ApiKey::AlterConfigs, &req).unwrap();
        Exchange::new(frame, ApiKey::AlterConfigs as i16, 2, 9)
    }

    #[test]
    fn legacy_alter_configs_on_a_broker_resource_is_refused_whatever_keys_it_names() {
        // Keys that are not topic defaults: the replace would still delete every other dynamic key.
        for name in ["", "1"] {
            let x = alter_configs(&[(BROKER_RESOURCE, name, &["background.threads"])]);
            let Decision::Refuse(frame, 1) = check(&x).unwrap() else {
                panic!("broker `{name}`: refused whole")
            };
            let (h, resp) = decode_response::<AlterConfigsResponse>(&frame, ApiKey::AlterConfigs, 2).unwrap();
            assert_eq!((h.correlation_id, resp.responses.len()), (9, 1));
            let r = &resp.responses[0];
            assert_eq!(
                (r.resource_type, r.resource_name.as_str(), r.error_code),
                (BROKER_RESOURCE, name, POLICY_VIOLATION)
            );
            let msg = r.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
            assert!(msg.contains("IncrementalAlterConfigs"), "{msg}");
        }
        // No keys at all: a replace by nothing deletes every dynamic key.
        assert!(matches!(check(&alter_configs(&[(BROKER_RESOURCE, "", &[])])).unwrap(), Decision::Refuse(_, 1)));
    }

    #[test]
    fn legacy_alter_configs_refuses_only_the_broker_resource_of_a_mixed_request() {
        let x = alter_configs(&[(2, "t", &["retention.ms"]), (BROKER_RESOURCE, "1", &["background.threads"])]);
        let Decision::Split(rest, merge, 1) = check(&x).unwrap() else {
            panic!("split")
        };
        let (_, fwd) = decode_request::<AlterConfigsRequest>(&rest, ApiKey::AlterConfigs, 2).unwrap();
        assert_eq!(fwd.resources.iter().map(|r| r.resource_type).collect::<Vec<_>>(), vec![2]);
        let mut broker = AlterConfigsResponse::default();
        let mut ok = alter_configs_response::AlterConfigsResourceResponse::default();
        ok.resource_type = 2;
        ok.resource_name = StrBytes::from_static_str("t");
        broker.responses.push(ok);
        let merged = merge(encode_response(9, ApiKey::AlterConfigs, 2, &broker).unwrap()).unwrap();
        let (_, resp) = decode_response::<AlterConfigsResponse>(&merged, ApiKey::AlterConfigs, 2).unwrap();
        let got: Vec<_> = resp.responses.iter().map(|r| (r.resource_type, r.error_code)).collect();
        assert_eq!(got, vec![(2, 0), (BROKER_RESOURCE, POLICY_VIOLATION)]);
        // Topic resources alone are not this filter's business.
        assert!(matches!(check(&alter_configs(&[(2, "t", &["retention.ms"])])).unwrap(), Decision::Forward));
    }

    #[test]
    fn only_broker_keys_that_default_topic_configs_are_refused() {
        assert!(reaches_topics("log.retention.ms") && reaches_topics("log.roll.ms") && reaches_topics("unclean.leader.election.enable"));
        assert!(!reaches_topics("background.threads") && !reaches_topics("log.cleaner.threads") && !reaches_topics("retention.ms"));
    }
}
