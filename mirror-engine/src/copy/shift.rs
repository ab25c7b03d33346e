//! Offset shifts: a source partition whose log starts very far from 0 (a topic that ran for
//! years under retention starts at 10^9..10^11) is not filled offset by offset — the destination
//! broker validates every filler record, about 8 million a second on one partition, so 10^10
//! would take 20 minutes. Instead, when the mirror creates the destination topic, a partition
//! whose source log start is at least the mirror's `shift_prefix_from` gets a constant shift Δ
//! (that log start): source offset s lands at destination offset s − Δ, the destination
//! partition starts at 0, and the proxy adds Δ to every offset it shows clients for the partition
//! and takes it off every offset they send (`kmp_protocol::offset_shift`), for the life of the
//! topic — after a failover too. Clients that reach the destination directly see the unshifted
//! offsets.
//!
//! Δ is decided before the topic exists and recorded with it (`TopicRecord::offset_shifts`)
//! before the mirror's first write; a partition task works in source offsets throughout and
//! converts only where it talks to the destination about offsets: the settled log end at resume,
//! the base offsets produce answers, DeleteRecords, the read-back of uncertain batches, and the
//! destination transactions' markers (`partition::resume`, `produce::sink`).

use kmp_protocol::kafka_protocol::ResponseError;

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;

/// The shifts of a new mirror topic's `partitions` partitions: each partition's source log start
/// where it is at least `from`, else 0; empty when no partition is shifted. One ListOffsets per
/// source leader; a partition whose log start cannot be read fails the attempt (retriably: the
/// topic is prepared again), since guessing would fill a prefix meant to be shifted or the
/// reverse, for the life of the topic.
pub(crate) async fn decide(source: &ClusterClient, topic: &str, partitions: usize, from: i64) -> Result<Vec<i64>, MirrorError> {
    let ends = crate::cluster::groups::watermarks(source, &[topic.to_owned()]).await?;
    let mut shifts = Vec::with_capacity(partitions);
    for p in 0..partitions {
        let p = i32::try_from(p).map_err(|_| MirrorError::Invariant(format!("{topic} has more partitions than Kafka allows")))?;
        let Some(&(log_start, _)) = ends.get(&(topic.to_owned(), p)) else {
            return Err(MirrorError::Broker {
                side: "source",
                what: format!("{topic}-{p}: the log start (to decide its offset shift) could not be read"),
                code: ResponseError::LeaderNotAvailable.code(),
            });
        };
        shifts.push(if log_start >= from { log_start } else { 0 });
    }
    if shifts.iter().all(|&s| s == 0) {
        shifts.clear();
    } else {
        tracing::info!(
            ?shifts,
            "partitions whose source log start is past shift_prefix_from are shifted instead of filled"
        );
    }
    Ok(shifts)
}

/// Partition `p`'s shift in `shifts` (0 past the end).
pub(crate) fn of(shifts: &[i64], p: i32) -> i64 {
    usize::try_from(p).ok().and_then(|p| shifts.get(p).copied()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_partition_past_the_recorded_shifts_is_not_shifted() {
        assert_eq!(super::of(&[0, 5], 1), 5);
        assert_eq!(super::of(&[0, 5], 2), 0);
        assert_eq!(super::of(&[], 0), 0);
        assert_eq!(super::of(&[5], -1), 0);
    }
}
