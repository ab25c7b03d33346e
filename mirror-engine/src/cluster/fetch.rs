//! Reading a partition: read_uncommitted Fetch (every record, transactions replayed by `copy::txn`) from the source,
//! and single reads of the destination (the state topic, checking what a failed attempt left).
//! Turning what was read into writes belongs to `plan`.

use bytes::Bytes;
use kmp_protocol::batch::{self, BatchHeader};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kmp_protocol::kafka_protocol::messages::fetch_response::PartitionData;
use kmp_protocol::kafka_protocol::messages::{BrokerId, FetchRequest};
use kmp_protocol::shared_client::SharedConnection;
use uuid::Uuid;

use crate::error::MirrorError;

/// Fetch version used against the source: topics by id (v13+, every Kafka 4.x broker), so a
/// source topic deleted and recreated under the same name answers UNKNOWN_TOPIC_ID instead of
/// handing out another topic's records at the same offsets.
pub(crate) const FETCH_VERSION: i16 = 13;
/// Every engine Fetch reads up to the high watermark: a source's open transactions must not hold
/// back other producers' records (they are replayed in destination transactions, `copy::txn`),
/// and reading back the destination must see the engine's own open transactions.
pub(crate) use crate::cluster::client::READ_UNCOMMITTED;

/// What one Fetch returned for one partition.
#[derive(Debug)]
pub struct Fetched {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub batches: Vec<(BatchHeader, Bytes)>,
}

/// Where and how much to fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchAt<'a> {
    /// Which cluster is read ("source" or "destination"): errors are classified by it.
    pub side: &'static str,
    pub topic: &'a str,
    /// The source topic's id as the mirror first saw it.
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub offset: i64,
    /// Leader epoch from the metadata used to find the leader, or -1.
    pub leader_epoch: i32,
    pub max_bytes: i32,
    pub max_wait_ms: i32,
}

/// Fetches `at.topic`-`at.partition` from `at.offset` on a connection to its leader, alone (the
/// state store's load; mirrored partitions fetch through `copy::fetch::session`).
pub async fn fetch(conn: &SharedConnection, at: FetchAt<'_>) -> Result<Fetched, MirrorError> {
    let FetchAt {
        side,
        topic,
        topic_id,
        partition,
        offset,
        leader_epoch,
        max_bytes,
        max_wait_ms,
    } = at;
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.current_leader_epoch = leader_epoch;
    p.last_fetched_epoch = -1;
    p.log_start_offset = -1;
    p.partition_max_bytes = max_bytes;
    let mut t = FetchTopic::default();
    t.topic_id = Uuid::from_bytes(topic_id);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = max_bytes;
    req.isolation_level = READ_UNCOMMITTED;
    req.session_epoch = -1; // no fetch session
    req.topics = vec![t];
    let resp = conn.call(&req, FETCH_VERSION).await.map_err(|e| MirrorError::on(side, e))?;
    let part = resp
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| MirrorError::Broker {
            side,
            what: format!("fetch {topic}-{partition}"),
            code: ResponseError::UnknownTopicOrPartition.code(),
        })?;
    parse(side, topic, offset, part)
}

/// What one partition of a Fetch response from `side` holds, or its error.
pub(crate) fn parse(side: &'static str, topic: &str, offset: i64, part: PartitionData) -> Result<Fetched, MirrorError> {
    let partition = part.partition_index;
    if part.error_code != 0 {
        return Err(MirrorError::Broker {
            side,
            what: format!("fetch {topic}-{partition}@{offset}"),
            code: part.error_code,
        });
    }
    let batches = match &part.records {
        Some(r) => batch::split(r).map_err(|e| MirrorError::on(side, e))?,
        None => Vec::new(),
    };
    Ok(Fetched {
        high_watermark: part.high_watermark,
        last_stable_offset: part.last_stable_offset,
        log_start_offset: part.log_start_offset,
        batches,
    })
}
