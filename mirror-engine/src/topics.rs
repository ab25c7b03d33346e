//! Destination topics of a mirror: created with the source's partition count and the settings
//! identical offsets need (`compression.type=producer` so batches are not recompressed,
//! CreateTime with unbounded timestamp windows so old records are accepted). Copying the
//! source's other topic configs comes with metadata sync; per-partition copying is `partition`'s.

use kmp_protocol::kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kmp_protocol::kafka_protocol::messages::{CreateTopicsRequest, TopicName};
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

const TOPIC_ALREADY_EXISTS: i16 = 36;

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
    t.configs = FORCED_CONFIGS
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_static_str(k);
            c.value = Some(StrBytes::from_static_str(v));
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
