//! DescribeProducers of one partition on its leader: the producer state the leader holds (last
//! sequence, epoch, open transaction's first offset), which the engine's idempotent producer
//! continues (`copy::produce::producer_id`) and its transactions are adopted and aborted from
//! (`copy::txn`).

use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::describe_producers_request::TopicRequest;
use kmp_protocol::kafka_protocol::messages::{DescribeProducersRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::shared_client::SharedConnection;

use crate::error::MirrorError;

/// One producer the partition leader holds state for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    /// First offset of the producer's open transaction, -1 if none.
    pub current_txn_start_offset: i64,
}

/// DescribeProducers of one partition on its leader `conn`.
pub(crate) async fn describe(conn: &SharedConnection, topic: &str, partition: i32) -> Result<Vec<ActiveProducer>, MirrorError> {
    let mut tr = TopicRequest::default();
    tr.name = TopicName(StrBytes::from_string(topic.to_owned()));
    tr.partition_indexes = vec![partition];
    let mut req = DescribeProducersRequest::default();
    req.topics = vec![tr];
    let resp = conn.call(&req, 0).await.map_err(MirrorError::Destination)?;
    let p = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| MirrorError::Broker {
            side: "destination",
            what: format!("DescribeProducers {topic}-{partition}: no answer"),
            code: ResponseError::NotLeaderOrFollower.code(),
        })?;
    if p.error_code != 0 {
        return Err(MirrorError::Broker {
            side: "destination",
            what: format!("DescribeProducers {topic}-{partition}"),
            code: p.error_code,
        });
    }
    Ok(p.active_producers
        .iter()
        .map(|a| ActiveProducer {
            producer_id: a.producer_id.0,
            producer_epoch: a.producer_epoch,
            last_sequence: a.last_sequence,
            current_txn_start_offset: a.current_txn_start_offset,
        })
        .collect())
}
