//! Copying the part of a partition a failback cannot keep (`[from, end)`, `plan::Path::Restore`)
//! into the quarantine topic before the topic is re-created: one quarantine record per data
//! record, in the partition of the same index, each with its key, value, headers and timestamp
//! and headers naming where it was (`kmp_protocol::quarantine`). Transaction markers and the
//! mirror's own fillers are counted, not copied (they carry no data).
//!
//! The copy resumes after a crash without writing a record twice: the quarantine partition holds
//! one offset per record copied (plain acks=all writes, never retried blind), so its end says
//! how many of the range's records are there already.

use bytes::Bytes;
use kmp_protocol::kafka_protocol::messages::TopicName;
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::quarantine::quarantine_batch;

use crate::cluster::client::ClusterClient;
use crate::cluster::fetch::{FetchAt, fetch};
use crate::cluster::produce::{PRODUCE_VERSION, produce_request};
use crate::copy::partition::settled_offsets;
use crate::error::MirrorError;

/// Bytes one read of the partition asks for.
const READ_BYTES: i32 = 1024 * 1024;

/// What a partition's quarantine holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counts {
    /// Data records copied to the quarantine topic.
    pub records: u64,
    /// Offsets of transaction markers in the range (not copied).
    pub markers: u64,
    /// Offsets of the mirror's fillers in the range (not copied).
    pub fillers: u64,
}

/// Copies `topic`-`partition` (`topic_id`) from `from` to `end` into `quarantine`'s partition of
/// the same index, on `cluster`.
pub(crate) async fn copy_tail(
    cluster: &ClusterClient,
    topic: &str,
    topic_id: [u8; 16],
    partition: i32,
    range: std::ops::Range<i64>,
    quarantine: &str,
) -> Result<Counts, MirrorError> {
    let (qconn, qepoch) = cluster.leader_link(quarantine, partition).await?;
    // Settled: a write of an earlier attempt still replicating counts (it is not written again).
    let (_, written) = settled_offsets(&qconn, quarantine, partition, qepoch).await?;
    let mut counts = Counts::default();
    let mut skip = usize::try_from(written).unwrap_or(0);
    let mut next_out = written;
    let mut next = range.start;
    while next < range.end {
        let (conn, epoch) = cluster.leader_link(topic, partition).await?;
        let read = fetch(
            &conn,
            FetchAt {
                side: "destination",
                topic,
                topic_id,
                partition,
                offset: next,
                leader_epoch: epoch,
                max_bytes: READ_BYTES,
                max_wait_ms: 0,
            },
        )
        .await?;
        let Some(last) = read.batches.last().map(|(h, _)| h.next_offset()) else {
            return Err(MirrorError::Diverged(format!(
                "{topic}-{partition}: nothing to read at {next} below {}, where the failback's plan saw records (the log start is {})",
                range.end, read.log_start_offset
            )));
        };
        for (h, b) in &read.batches {
            if h.next_offset() <= next || h.base_offset >= range.end {
                continue;
            }
            let overlap = (h.next_offset().min(range.end) - h.base_offset.max(next)).max(0) as u64;
            if h.is_control() {
                counts.markers += overlap;
                continue;
            }
            if kmp_protocol::fillers::is_filler_batch(b) {
                counts.fillers += overlap;
                continue;
            }
            let q = quarantine_batch(b, h, topic, partition, next.max(range.start)..range.end, skip).map_err(MirrorError::Destination)?;
            skip = skip.saturating_sub(q.in_range);
            counts.records += q.in_range as u64;
            if let Some((batch, n)) = q.batch {
                append(&qconn, quarantine, partition, batch, next_out).await?;
                next_out += n as i64;
            }
        }
        next = last;
    }
    Ok(counts)
}

/// Writes `batch` to `quarantine`-`partition`, which must land at `at`.
async fn append(conn: &kmp_protocol::shared_client::SharedConnection, quarantine: &str, partition: i32, batch: Bytes, at: i64) -> Result<(), MirrorError> {
    let req = produce_request(TopicName(StrBytes::from_string(quarantine.to_owned())), partition, batch);
    let resp = conn.call(&req, PRODUCE_VERSION).await.map_err(MirrorError::Destination)?;
    let got = resp.responses.iter().flat_map(|t| t.partition_responses.iter()).find(|p| p.index == partition);
    match got {
        Some(p) if p.error_code == 0 && p.base_offset == at => Ok(()),
        Some(p) if p.error_code == 0 => Err(MirrorError::Diverged(format!(
            "quarantine topic {quarantine}-{partition}: a write landed at {} instead of {at} (someone else writes to it)",
            p.base_offset
        ))),
        other => Err(MirrorError::Broker {
            side: "destination",
            what: format!("write to the quarantine topic {quarantine}-{partition}"),
            code: other.map_or(-1, |p| p.error_code),
        }),
    }
}
