//! Destination topics of a mirror: created with the source's partition count, the topic configs
//! the source sets explicitly (except [`EXCLUDED_CONFIGS`]) and the settings identical offsets
//! need ([`FORCED_CONFIGS`]: `compression.type=producer` so batches are not recompressed,
//! CreateTime with unbounded timestamp windows so old records are accepted). Keeping configs in
//! sync later is metadata sync's job; per-partition copying is `partition`'s.

use kmp_protocol::kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kmp_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kmp_protocol::kafka_protocol::messages::{CreateTopicsRequest, DescribeConfigsRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::ClusterClient;
use crate::error::MirrorError;

/// Topic settings every mirror topic gets, whatever the source has.
pub const FORCED_CONFIGS: &[(&str, &str)] = &[
    ("compression.type", "producer"),
    ("message.timestamp.type", "CreateTime"),
    ("message.timestamp.before.max.ms", "9223372036854775807"),
    ("message.timestamp.after.max.ms", "9223372036854775807"),
];

/// Source topic configs never copied: the forced ones, settings that are local to a cluster
/// (durability, replication throttles, tiered storage), and vendor extensions.
pub const EXCLUDED_CONFIGS: &[&str] = &[
    "compression.type",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
    "min.insync.replicas",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "unclean.leader.election.enable",
];
/// Prefixes of configs never copied (vendor extensions).
const EXCLUDED_PREFIXES: &[&str] = &["confluent."];

const TOPIC_ALREADY_EXISTS: i16 = 36;
const TOPIC_RESOURCE: i8 = 2;
/// `config_source` of a value set on the topic itself.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// Whether a source topic config is copied to the destination.
pub fn is_copied(name: &str) -> bool {
    !EXCLUDED_CONFIGS.contains(&name) && !EXCLUDED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The configs set explicitly on the source topic that a mirror copies.
async fn source_configs(source: &ClusterClient, topic: &str) -> Result<Vec<(String, String)>, MirrorError> {
    let mut r = DescribeConfigsResource::default();
    r.resource_type = TOPIC_RESOURCE;
    r.resource_name = StrBytes::from_string(topic.to_owned());
    r.configuration_keys = None; // all
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![r];
    let mut conn = source.connect_any().await?;
    let resp = conn.send(&req, 4).await.map_err(MirrorError::Source)?;
    let Some(result) = resp.results.into_iter().next() else { return Ok(Vec::new()) };
    if result.error_code != 0 {
        return Err(MirrorError::Broker { side: "source", what: format!("DescribeConfigs {topic}"), code: result.error_code });
    }
    Ok(result
        .configs
        .into_iter()
        .filter(|c| c.config_source == DYNAMIC_TOPIC_CONFIG && !c.is_sensitive && is_copied(c.name.as_str()))
        .filter_map(|c| Some((c.name.as_str().to_owned(), c.value?.as_str().to_owned())))
        .collect())
}

/// Makes sure `topic` exists on the destination with the source's partition count; returns it.
pub async fn ensure_destination_topic(
    source: &ClusterClient,
    destination: &ClusterClient,
    topic: &str,
    replication_factor: i16,
) -> Result<usize, MirrorError> {
    let src = source.layout(topic).await?;
    if src.error_code != 0 {
        return Err(MirrorError::Broker { side: "source", what: format!("metadata of {topic}"), code: src.error_code });
    }
    let partitions = src.partitions.len();
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_owned()));
    t.num_partitions = partitions as i32;
    t.replication_factor = replication_factor;
    let copied = source_configs(source, topic).await?;
    let forced = FORCED_CONFIGS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    t.configs = copied
        .into_iter()
        .chain(forced)
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k);
            c.value = Some(StrBytes::from_string(v));
            c
        })
        .collect();
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 30_000;
    let mut conn = destination.connect_any().await?;
    let resp = conn.send(&req, 7).await.map_err(MirrorError::Destination)?;
    let code = resp.topics.first().map_or(0, |t| t.error_code);
    match code {
        0 => Ok(partitions),
        TOPIC_ALREADY_EXISTS => {
            let dst = destination.layout(topic).await?;
            if dst.partitions.len() != partitions {
                return Err(MirrorError::DestinationConflict {
                    topic: topic.to_owned(),
                    partitions: dst.partitions.len(),
                    source_partitions: partitions,
                });
            }
            Ok(partitions)
        }
        code => Err(MirrorError::Broker { side: "destination", what: format!("create topic {topic}"), code }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_and_cluster_local_configs_are_never_copied() {
        for (k, _) in FORCED_CONFIGS {
            assert!(!is_copied(k), "{k} is forced, not copied");
        }
        assert!(!is_copied("min.insync.replicas"));
        assert!(!is_copied("confluent.placement.constraints"));
        assert!(is_copied("retention.ms") && is_copied("cleanup.policy") && is_copied("max.message.bytes"));
    }
}
