//! A destination topic the mirror just created (or adopted empty) must hold nothing but what the
//! mirror writes, from offset 0 on: offsets are identical, so a record that landed first takes
//! source offset 0's place and every later source record would be copied one offset late — or,
//! as the copy resumes at the destination's log end, source record 0 would never be copied.
//!
//! Clients cannot write there through the proxy (the catalog guards the topic before it is
//! created), but a writer that reaches the destination's brokers directly, or a proxy instance
//! that had not heard of the mirror yet, can. So once the topic is registered read-only every
//! partition is checked to be empty ([`verify_empty`]); a partition that is not is stored FAILED
//! for good with the reason ([`record_forged`]) before the topic is recorded as the mirror's, and
//! never copied. The partition tasks of such a topic check the same again until their first
//! write lands (`PartitionTask::expect_empty`), which covers the moment between this check and
//! their start. Preparing the topic is `lifecycle`'s; copying `partition`'s.

use std::time::Duration;

use tracing::{debug, warn};

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::state::records::PartitionRecord;
use crate::state::status::PartitionState;
use crate::state::store::StateStore;
use crate::topics::create as topics;
use kmp_protocol::Backoff;

/// The error of a partition of a just-created (or adopted empty) destination topic whose offsets
/// `start..end` hold records the mirror did not write.
pub(crate) fn forged(topic: &str, partition: i32, start: i64, end: i64) -> MirrorError {
    MirrorError::Diverged(format!(
        "{topic}-{partition}: offsets {start}..{end} were written by someone other than this mirror after it created (or adopted) the empty destination topic and before its first write (a forged write at offset {start}); the partition is not mirrored: delete the destination topic and start the mirror topic again"
    ))
}

/// The partitions of `topic` (of `partitions`) that are not empty, with their log end: retried
/// while the new topic's leaders are not elected or not known yet, until `stop` ends the wait
/// ([`MirrorError::Fenced`]).
pub(crate) async fn verify_empty(
    destination: &ClusterClient,
    topic: &str,
    partitions: usize,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<(i32, i64)>, MirrorError> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut stop = stop.clone();
    loop {
        match topics::partitions_holding_data(destination, topic, partitions).await {
            Ok(holding) => return Ok(holding),
            Err(e) if e.is_retriable() => {
                debug!(error = %e, "cannot read the new destination topic's log ends yet; retrying");
                if *stop.borrow_and_update() {
                    return Err(MirrorError::Fenced);
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff.next_pause()) => {}
                    _ = stop.changed() => return Err(MirrorError::Fenced),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The stored state of a partition that holds a forged write: FAILED for good, with the reason.
pub(crate) fn forged_record(mirror: &str, topic: &str, partition: i32, end: i64) -> PartitionRecord {
    PartitionRecord {
        mirror: mirror.to_owned(),
        state: PartitionState::Failed.as_str().to_owned(),
        next_offset: end,
        last_mirror_epoch: -1,
        source_high_watermark: -1,
        records: 0,
        fillers: 0,
        bytes: 0,
        error: Some(forged(topic, partition, 0, end).to_string()),
        sticky: true,
    }
}

/// Stores the partitions of `holding` FAILED for good (before the topic is recorded as the
/// mirror's: a restart must not take them up as the mirror's data).
pub(crate) async fn record_forged(store: &StateStore, mirror: &str, topic: &str, holding: &[(i32, i64)]) -> Result<(), MirrorError> {
    for &(p, end) in holding {
        warn!(
            partition = p,
            end, "the new destination topic holds records this mirror did not write; partition FAILED"
        );
        store.put_partition(topic, p, &forged_record(mirror, topic, p, end)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_partition_is_stored_failed_for_good_with_the_offsets_that_were_forged() {
        let r = forged_record("dr", "orders", 2, 1);
        assert!(r.sticky, "it stays FAILED after a restart");
        assert_eq!(r.state, PartitionState::Failed.as_str());
        let why = r.error.expect("a reason");
        assert!(
            why.contains("orders-2") && why.contains("offsets 0..1") && why.contains("forged write at offset 0"),
            "the reason names the partition and the forged offsets: {why}"
        );
    }

    #[test]
    fn a_forged_write_fails_the_partition_for_good_and_is_not_retried() {
        let e = forged("orders", 0, 0, 3);
        assert!(e.is_sticky() && !e.is_retriable(), "{e:?}");
        assert!(e.to_string().contains("offsets 0..3"), "{e}");
    }
}
