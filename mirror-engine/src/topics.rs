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

pub(crate) const TOPIC_ALREADY_EXISTS: i16 = 36;
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

/// A topic to create.
pub struct TopicSpec<'a> {
    pub name: &'a str,
    pub partitions: i32,
    /// -1 = the cluster's default.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// Sends CreateTopics for `spec`; returns the Kafka error code (0 = created).
pub async fn create_topic(destination: &ClusterClient, spec: &TopicSpec<'_>) -> Result<i16, MirrorError> {
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(spec.name.to_owned()));
    t.num_partitions = spec.partitions;
    t.replication_factor = spec.replication_factor;
    t.configs = spec
        .configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k.clone());
            c.value = Some(StrBytes::from_string(v.clone()));
            c
        })
        .collect();
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 30_000;
    let mut conn = destination.connect_any().await?;
    let resp = conn.send(&req, 7).await.map_err(MirrorError::Destination)?;
    Ok(resp.topics.first().map_or(0, |t| t.error_code))
}

/// Raises the destination topic's partition count to `partitions` (the source grew). A
/// destination that already has them (a previous attempt) is fine.
pub async fn add_partitions(destination: &ClusterClient, topic: &str, partitions: usize) -> Result<(), MirrorError> {
    use kmp_protocol::kafka_protocol::messages::CreatePartitionsRequest;
    use kmp_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    let mut t = CreatePartitionsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_owned()));
    t.count = partitions as i32;
    t.assignments = None;
    let mut req = CreatePartitionsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 30_000;
    let mut conn = destination.connect_any().await?;
    let resp = conn.send(&req, 3).await.map_err(MirrorError::Destination)?;
    match resp.results.first().map_or(0, |r| r.error_code) {
        0 => Ok(()),
        37 if destination.layout(topic).await?.partitions.len() >= partitions => Ok(()), // INVALID_PARTITIONS: already there
        code => Err(MirrorError::Broker { side: "destination", what: format!("add partitions to {topic}"), code }),
    }
}

/// How a destination topic came to be the mirror's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// The engine created it now.
    Created(usize),
    /// It existed, with the source's partition count and no data: safe to fill.
    AdoptedEmpty(usize),
    /// The state topic already records it as this mirror's.
    Owned(usize),
}

impl Prepared {
    pub fn partitions(self) -> usize {
        match self {
            Self::Created(n) | Self::AdoptedEmpty(n) | Self::Owned(n) => n,
        }
    }
}

/// Makes sure `topic` exists on the destination with the source's partition count. `owned`:
/// the state topic says this mirror already owns it. An existing topic the mirror does not own
/// is accepted only if every partition is empty (high watermark 0): appending to data the mirror
/// did not write would break the identical-offset invariant.
pub async fn ensure_destination_topic(
    source: &ClusterClient,
    destination: &ClusterClient,
    topic: &str,
    replication_factor: i16,
    owned: bool,
) -> Result<Prepared, MirrorError> {
    let src = source.layout(topic).await?;
    if src.error_code != 0 {
        return Err(MirrorError::Broker { side: "source", what: format!("metadata of {topic}"), code: src.error_code });
    }
    let partitions = src.partitions.len();
    let copied = source_configs(source, topic).await?;
    let forced = FORCED_CONFIGS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    let spec = TopicSpec { name: topic, partitions: partitions as i32, replication_factor, configs: copied.into_iter().chain(forced).collect() };
    match create_topic(destination, &spec).await? {
        0 => Ok(Prepared::Created(partitions)),
        TOPIC_ALREADY_EXISTS => {
            let dst = destination.layout(topic).await?;
            if owned && dst.partitions.len() < partitions {
                // The source grew while the engine was down: follow it.
                add_partitions(destination, topic, partitions).await?;
                return Ok(Prepared::Owned(partitions));
            }
            if dst.partitions.len() != partitions {
                return Err(MirrorError::DestinationConflict {
                    topic: topic.to_owned(),
                    reason: format!("it has {} partitions, the source has {partitions}", dst.partitions.len()),
                });
            }
            if owned {
                return Ok(Prepared::Owned(partitions));
            }
            for p in 0..partitions as i32 {
                let (mut conn, _) = destination.connect_leader(topic, p).await?;
                let (_, end) = crate::cluster::offsets("destination", &mut conn, topic, p).await?;
                if end > 0 {
                    return Err(MirrorError::DestinationConflict {
                        topic: topic.to_owned(),
                        reason: format!("partition {p} already holds offsets up to {end} that this mirror did not write"),
                    });
                }
            }
            Ok(Prepared::AdoptedEmpty(partitions))
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
