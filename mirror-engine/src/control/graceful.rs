//! The wait of a graceful stop: before a topic is stopped, every partition must have copied
//! everything its source partition held *when the stop arrived* — the source's high watermark
//! read then (open transactions' records included; the stop aborts those on the destination),
//! not the last one a Fetch happened to report (which can predate records produced just
//! before the stop). Deciding the stop and making the topic writable belong to `control`.

use std::time::Duration;

use crate::cluster::client::{ClusterClient, READ_UNCOMMITTED, list_offset};
use crate::error::MirrorError;
use crate::state::status::{PartitionState, StatusBoard};

/// ListOffsets timestamp meaning "the end".
const LATEST: i64 = -1;

/// Waits (at most `limit`) until every partition of `topic` is mirroring and has written up to
/// the source's high watermark as read now; the partitions still short of it otherwise, or
/// why the source's ends could not be read.
pub(crate) async fn wait_copied(
    status: &StatusBoard,
    source: &ClusterClient,
    mirror: &str,
    topic: &str,
    partitions: usize,
    limit: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + limit;
    let targets = match tokio::time::timeout(limit, source_ends(source, topic, partitions)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err(format!("cannot read the source's end offsets ({e}), so nothing proves the copy complete")),
        Err(_) => return Err(format!("the source's end offsets were not read within {limit:?}")),
    };
    loop {
        let short: Vec<i32> = (0..partitions)
            .filter(|&p| {
                let key = (mirror.to_owned(), topic.to_owned(), p as i32);
                !status
                    .get(&key)
                    .is_some_and(|s| s.state == PartitionState::Mirroring && s.destination_next_offset >= targets[p])
            })
            .map(|p| p as i32)
            .collect();
        if short.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "partitions {short:?} are not mirroring with zero lag after {limit:?}: not copied up to the source's end offsets {targets:?} read when the stop arrived"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The high watermark of each partition of `topic` on the source (ListOffsets, read_uncommitted):
/// records of transactions still open are copied too, and aborted on the destination at stop.
async fn source_ends(source: &ClusterClient, topic: &str, partitions: usize) -> Result<Vec<i64>, MirrorError> {
    let mut out = Vec::with_capacity(partitions);
    for p in 0..partitions as i32 {
        let (conn, epoch) = source.leader_link(topic, p).await?;
        out.push(list_offset("source", &conn, topic, p, LATEST, READ_UNCOMMITTED, epoch).await?);
    }
    Ok(out)
}
