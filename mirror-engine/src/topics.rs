//! Destination topics of a mirror: created with the source's partition count, the topic configs
//! the source sets explicitly (those `topic_configs::ConfigFilter` copies) and the settings
//! identical offsets need (`FORCED_CONFIGS`: `compression.type=producer` so batches are not
//! recompressed, CreateTime with unbounded timestamp windows so old records are accepted).
//! Keeping configs in sync later is `sync::configs`' job; per-partition copying is `partition`'s.

use kmp_protocol::kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kmp_protocol::kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::ClusterClient;
use crate::error::MirrorError;
use crate::topic_configs::{self, ConfigFilter, FORCED_CONFIGS};

pub(crate) const TOPIC_ALREADY_EXISTS: i16 = 36;

/// The configs set explicitly on the source topic that a mirror copies.
async fn source_configs(source: &ClusterClient, topic: &str, filter: &ConfigFilter) -> Result<Vec<(String, String)>, MirrorError> {
    let mut all = topic_configs::describe(source, &[topic.to_owned()]).await?;
    match all.remove(topic) {
        Some(Ok(configs)) => Ok(topic_configs::copied(&configs, filter)),
        Some(Err(code)) => Err(MirrorError::Broker {
            side: "source",
            what: format!("DescribeConfigs {topic}"),
            code,
        }),
        None => Ok(Vec::new()),
    }
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
        code => Err(MirrorError::Broker {
            side: "destination",
            what: format!("add partitions to {topic}"),
            code,
        }),
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
/// did not write would break the identical-offset invariant. Also returns the source topic's id.
pub async fn ensure_destination_topic(
    source: &ClusterClient,
    destination: &ClusterClient,
    topic: &str,
    replication_factor: i16,
    owned: bool,
    filter: &ConfigFilter,
) -> Result<(Prepared, [u8; 16]), MirrorError> {
    let src = source.layout(topic).await?;
    if src.error_code != 0 {
        return Err(MirrorError::Broker {
            side: "source",
            what: format!("metadata of {topic}"),
            code: src.error_code,
        });
    }
    let partitions = src.partitions.len();
    let copied = source_configs(source, topic, filter).await?;
    let forced = FORCED_CONFIGS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    let spec = TopicSpec {
        name: topic,
        partitions: partitions as i32,
        replication_factor,
        configs: copied.into_iter().chain(forced).collect(),
    };
    match create_topic(destination, &spec).await? {
        0 => Ok((Prepared::Created(partitions), src.topic_id)),
        TOPIC_ALREADY_EXISTS => {
            let dst = destination.layout(topic).await?;
            if owned && dst.partitions.len() < partitions {
                // The source grew while the engine was down: follow it.
                add_partitions(destination, topic, partitions).await?;
                return Ok((Prepared::Owned(partitions), src.topic_id));
            }
            if dst.partitions.len() != partitions {
                return Err(MirrorError::DestinationConflict {
                    topic: topic.to_owned(),
                    reason: format!("it has {} partitions, the source has {partitions}", dst.partitions.len()),
                });
            }
            if owned {
                return Ok((Prepared::Owned(partitions), src.topic_id));
            }
            for p in 0..partitions as i32 {
                let (conn, _) = destination.leader_link(topic, p).await?;
                let (_, end) = crate::cluster::offsets("destination", &conn, topic, p).await?;
                if end > 0 {
                    return Err(MirrorError::DestinationConflict {
                        topic: topic.to_owned(),
                        reason: format!("partition {p} already holds offsets up to {end} that this mirror did not write"),
                    });
                }
            }
            Ok((Prepared::AdoptedEmpty(partitions), src.topic_id))
        }
        code => Err(MirrorError::Broker {
            side: "destination",
            what: format!("create topic {topic}"),
            code,
        }),
    }
}
