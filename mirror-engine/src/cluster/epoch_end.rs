//! Where an epoch ends in a partition's log (OffsetForLeaderEpoch as a follower asks it): the
//! largest epoch the log holds that is at most the one asked, and the offset after that epoch's
//! last record. A failback compares the line another cluster copied up to (an offset and the
//! epoch of the record before it) with this log: the same epoch reaching that far means the same
//! records, since one leader wrote each epoch and never rewrote it.

use kmp_protocol::kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kmp_protocol::kafka_protocol::messages::{BrokerId, OffsetForLeaderEpochRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::client::side_error;
use crate::error::MirrorError;

/// `(epoch, end offset)` of `epoch` in the log of `topic`-`partition` on its leader `conn`
/// (`current_leader_epoch` from the metadata, -1 unchecked): the largest epoch at most `epoch`
/// the log holds and where it ends; `(-1, -1)` when the log holds none that old.
pub(crate) async fn epoch_end(
    side: &'static str,
    conn: &SharedConnection,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    epoch: i32,
) -> Result<(i32, i64), MirrorError> {
    let mut p = OffsetForLeaderPartition::default();
    p.partition = partition;
    p.current_leader_epoch = current_leader_epoch;
    p.leader_epoch = epoch;
    let mut t = OffsetForLeaderTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_owned()));
    t.partitions = vec![p];
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let resp = conn.call(&req, 4).await.map_err(|e| side_error(side, e))?;
    let found = resp.topics.iter().flat_map(|t| t.partitions.iter()).find(|p| p.partition == partition);
    match found {
        Some(p) if p.error_code == 0 => Ok((p.leader_epoch, p.end_offset)),
        other => Err(MirrorError::Broker {
            side,
            what: format!("OffsetForLeaderEpoch {topic}-{partition} epoch {epoch}"),
            code: other.map_or(kmp_protocol::kafka_protocol::ResponseError::UnknownTopicOrPartition.code(), |p| p.error_code),
        }),
    }
}
