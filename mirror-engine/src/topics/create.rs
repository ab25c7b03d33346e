//! Destination topics of a mirror: created with the source's partition count, the topic configs
//! the source sets explicitly (those `topics::configs::ConfigFilter` copies) and the settings
//! identical offsets need (`FORCED_CONFIGS`: `compression.type=producer` so batches are not
//! recompressed, CreateTime with unbounded timestamp windows so old records are accepted).
//! Keeping configs in sync later is `sync::configs`' job; per-partition copying is `copy::partition`'s.

use std::time::Duration;

use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kmp_protocol::kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kmp_protocol::kafka_protocol::messages::{CreateTopicsRequest, IncrementalAlterConfigsRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::topics::configs::{self as topic_configs, ConfigFilter, FORCED_CONFIGS};

pub(crate) const TOPIC_ALREADY_EXISTS: i16 = ResponseError::TopicAlreadyExists.code();

/// Partitions created or added by one CreateTopics / CreatePartitions request. A KRaft controller
/// refuses an operation that writes more than 10,000 metadata records (one per partition, plus
/// the topic and each of its configs) with POLICY_VIOLATION, so a topic of 10,000 partitions or
/// more is created with this many and grown to its size in steps of at most this many.
pub(crate) const PARTITIONS_PER_OPERATION: usize = 5_000;

/// The partition counts a topic passes through when grown from `from` to `to` partitions, at most
/// [`PARTITIONS_PER_OPERATION`] apart; the last is `to` (empty when `to <= from`).
pub(crate) fn growth_steps(from: usize, to: usize) -> Vec<usize> {
    let mut steps = Vec::new();
    let mut at = from;
    while at < to {
        at = (at + PARTITIONS_PER_OPERATION).min(to);
        steps.push(at);
    }
    steps
}

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

/// Sends CreateTopics for `spec`; returns the Kafka error code (0 = created). A topic of more
/// than [`PARTITIONS_PER_OPERATION`] partitions is created with that many and then grown in steps.
pub async fn create_topic(destination: &ClusterClient, spec: &TopicSpec<'_>) -> Result<i16, MirrorError> {
    create_topic_with_id(destination, spec).await.map(|(code, _)| code)
}

/// [`create_topic`], also returning the created topic's destination id (all zero if the answer
/// did not carry one).
async fn create_topic_with_id(destination: &ClusterClient, spec: &TopicSpec<'_>) -> Result<(i16, [u8; 16]), MirrorError> {
    let first = spec.partitions.min(PARTITIONS_PER_OPERATION as i32);
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(spec.name.to_owned()));
    t.num_partitions = first;
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
    let (code, id) = resp.topics.first().map_or((0, [0; 16]), |t| (t.error_code, *t.topic_id.as_bytes()));
    if code == 0 && first < spec.partitions {
        add_partitions(destination, spec.name, first as usize, spec.partitions as usize).await?;
    }
    Ok((code, id))
}

/// Raises the destination topic's partition count from `from` to `partitions` (the source grew,
/// or a large topic is being created), in [`growth_steps`]. A destination that already has a
/// step's count (a previous attempt) is fine.
pub async fn add_partitions(destination: &ClusterClient, topic: &str, from: usize, partitions: usize) -> Result<(), MirrorError> {
    for step in growth_steps(from, partitions) {
        add_partitions_to(destination, topic, step).await?;
    }
    Ok(())
}

async fn add_partitions_to(destination: &ClusterClient, topic: &str, partitions: usize) -> Result<(), MirrorError> {
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
        INVALID_PARTITIONS if already_has(destination, topic, partitions).await? => Ok(()),
        code => Err(MirrorError::Broker {
            side: "destination",
            what: format!("add partitions to {topic}"),
            code,
        }),
    }
}

const INVALID_PARTITIONS: i16 = ResponseError::InvalidPartitions.code();

/// Whether `topic` has at least `partitions` partitions, as the destination's metadata shows
/// within a few seconds. Asked after CreatePartitions answered INVALID_PARTITIONS, which (sent
/// without assignments) means the controller has that many already: an earlier try grew the
/// topic and then failed on something else. The brokers' metadata follows the controller's
/// shortly, so a cached or just-read layout can still show fewer.
async fn already_has(destination: &ClusterClient, topic: &str, partitions: usize) -> Result<bool, MirrorError> {
    let mut backoff = crate::Backoff::new(Duration::from_millis(50), Duration::from_millis(1_000));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if destination.layout_now(topic).await?.partitions.len() >= partitions {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(backoff.next_pause()).await;
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
    /// It held the data this cluster had been the source of, and a failback takes it over where
    /// it ends (`failback`).
    FailedBack(usize),
}

impl Prepared {
    pub fn partitions(self) -> usize {
        match self {
            Self::Created(n) | Self::AdoptedEmpty(n) | Self::Owned(n) | Self::FailedBack(n) => n,
        }
    }
}

/// What the source topic says its destination topic must be: its partition count, the configs
/// a mirror copies, and the source topic's id.
#[derive(Debug, Clone)]
pub struct SourceShape {
    pub partitions: usize,
    /// Copied configs followed by [`FORCED_CONFIGS`].
    pub configs: Vec<(String, String)>,
    pub topic_id: [u8; 16],
}

/// Reads the source topic's [`SourceShape`].
pub async fn source_shape(source: &ClusterClient, topic: &str, filter: &ConfigFilter) -> Result<SourceShape, MirrorError> {
    let src = source.layout(topic).await?;
    if src.error_code != 0 {
        return Err(MirrorError::Broker {
            side: "source",
            what: format!("metadata of {topic}"),
            code: src.error_code,
        });
    }
    let copied = source_configs(source, topic, filter).await?;
    let forced = FORCED_CONFIGS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    Ok(SourceShape {
        partitions: src.partitions.len(),
        configs: copied.into_iter().chain(forced).collect(),
        topic_id: src.topic_id,
    })
}

/// Makes sure `topic` exists on the destination with the source's partition count (`shape`).
/// `owned`: the state topic says this mirror already owns it. An existing topic the mirror does
/// not own is accepted only if every partition is empty ([`partitions_holding_data`]), and grown
/// to the source's partition count first if it has fewer (never shrunk: more is refused); appending
/// to data the mirror did not write would break the identical-offset invariant. Also returns the
/// destination topic's id when CreateTopics answered it (all zero otherwise).
///
/// The caller makes the topic read-only for clients before this runs (`Catalog::guard`): a topic
/// CreateTopics creates is writable at once, and a write landing before the mirror's first would
/// take offset 0.
pub async fn create_or_adopt(
    destination: &ClusterClient,
    topic: &str,
    shape: &SourceShape,
    replication_factor: i16,
    owned: bool,
) -> Result<(Prepared, [u8; 16]), MirrorError> {
    let partitions = shape.partitions;
    let spec = TopicSpec {
        name: topic,
        partitions: partitions as i32,
        replication_factor,
        configs: shape.configs.clone(),
    };
    match create_topic_with_id(destination, &spec).await? {
        (0, id) => Ok((Prepared::Created(partitions), id)),
        (TOPIC_ALREADY_EXISTS, _) => {
            let dst = destination.layout(topic).await?;
            if owned && dst.partitions.len() < partitions {
                // The source grew while the engine was down: follow it.
                add_partitions(destination, topic, dst.partitions.len(), partitions).await?;
                return Ok((Prepared::Owned(partitions), dst.topic_id));
            }
            let mut have = dst.partitions.len();
            if have < partitions {
                // Fewer partitions than the source, none holding data: a topic this engine
                // created and did not record as its own before it stopped, the source having
                // grown since (seen in the 200-seed run: created with 3, killed, the source at 4),
                // or a large topic it began to create in steps. Grown to the source's count and
                // adopted below like any empty topic; one that holds data stays refused.
                if let Some(&(p, end)) = partitions_holding_data(destination, topic, have).await?.first() {
                    return Err(MirrorError::DestinationConflict {
                        topic: topic.to_owned(),
                        reason: format!(
                            "it has {have} partitions, the source has {partitions}, and partition {p} already holds offsets up to {end} that this mirror did not write"
                        ),
                    });
                }
                add_partitions(destination, topic, have, partitions).await?;
                have = partitions;
            }
            if have != partitions {
                return Err(MirrorError::DestinationConflict {
                    topic: topic.to_owned(),
                    reason: format!("it has {have} partitions, the source has {partitions}"),
                });
            }
            if owned {
                return Ok((Prepared::Owned(partitions), dst.topic_id));
            }
            if let Some(&(p, end)) = partitions_holding_data(destination, topic, partitions).await?.first() {
                return Err(MirrorError::DestinationConflict {
                    topic: topic.to_owned(),
                    reason: format!("partition {p} already holds offsets up to {end} that this mirror did not write"),
                });
            }
            // Whoever created it may have set what identical records forbid (LogAppendTime
            // would restamp every copied record, a compression type would recompress it).
            set_forced_configs(destination, topic).await?;
            Ok((Prepared::AdoptedEmpty(partitions), dst.topic_id))
        }
        (code, _) => Err(MirrorError::Broker {
            side: "destination",
            what: format!("create topic {topic}"),
            code,
        }),
    }
}

/// The partitions of the destination topic `topic` (of `partitions` partitions) that are not
/// empty, with their log end: offset 0 already taken. The end is the leader's (writes the
/// in-sync replicas have not confirmed yet count too), else the high watermark.
pub async fn partitions_holding_data(destination: &ClusterClient, topic: &str, partitions: usize) -> Result<Vec<(i32, i64)>, MirrorError> {
    let mut holding = Vec::new();
    for p in 0..partitions as i32 {
        let (conn, epoch) = destination.leader_link(topic, p).await?;
        let (_, high_watermark) = crate::cluster::client::offsets("destination", &conn, topic, p).await?;
        let end = if epoch >= 0 {
            crate::cluster::client::leader_log_end("destination", &conn, topic, p, epoch)
                .await?
                .max(high_watermark)
        } else {
            high_watermark
        };
        if end > 0 {
            holding.push((p, end));
        }
    }
    Ok(holding)
}

/// Sets [`FORCED_CONFIGS`] on an existing destination topic the mirror adopts.
pub(crate) async fn set_forced_configs(destination: &ClusterClient, topic: &str) -> Result<(), MirrorError> {
    let mut r = AlterConfigsResource::default();
    r.resource_type = topic_configs::TOPIC_RESOURCE;
    r.resource_name = StrBytes::from_string(topic.to_owned());
    r.configs = FORCED_CONFIGS
        .iter()
        .map(|(k, v)| {
            let mut a = AlterableConfig::default();
            a.name = StrBytes::from_static_str(k);
            a.config_operation = 0; // SET
            a.value = Some(StrBytes::from_static_str(v));
            a
        })
        .collect();
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let conn = destination.link_any().await?;
    let resp = conn.call(&req, 1).await.map_err(|e| destination.wrap(e))?;
    match resp.responses.iter().find(|r| r.resource_name.as_str() == topic) {
        Some(r) if r.error_code == 0 => Ok(()),
        other => Err(MirrorError::Broker {
            side: "destination",
            what: format!("set the mirror's forced configs on the adopted topic {topic}"),
            code: other.map_or(-1, |r| r.error_code),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{PARTITIONS_PER_OPERATION, growth_steps};

    #[test]
    fn a_large_topic_grows_in_steps_that_each_stay_under_kraft_s_records_per_operation_limit() {
        assert_eq!(growth_steps(5_000, 10_000), vec![10_000]);
        assert_eq!(growth_steps(5_000, 12_345), vec![10_000, 12_345]);
        assert_eq!(growth_steps(3, 4), vec![4]);
        assert!(growth_steps(10, 10).is_empty() && growth_steps(10, 4).is_empty());
        let steps = growth_steps(PARTITIONS_PER_OPERATION, 40_001);
        let mut at = PARTITIONS_PER_OPERATION;
        for s in &steps {
            assert!(s - at <= PARTITIONS_PER_OPERATION && *s > at, "step {at} -> {s}");
            at = *s;
        }
        assert_eq!(at, 40_001);
        // One topic record, its partitions and up to a few hundred config records per operation.
        const { assert!(PARTITIONS_PER_OPERATION + 1 + 500 < 10_000) };
    }
}
