//! One mirrored partition: resume at the destination's high watermark (offsets are identical,
//! so that is also the source offset to read next), fetch read_committed from the source leader,
//! plan, write fillers and batches through the partition's idempotent producer, and retry
//! transient failures with exponential backoff. A non-retriable error turns this partition
//! FAILED; the others keep going.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use kmp_protocol::reencode::{Piece, split_holes};

use crate::cluster::{ClusterClient, offsets};
use crate::error::MirrorError;
use crate::plan::{AbortTracker, Action, plan};
use crate::sink::PartitionSink;
use crate::source::fetch;
use crate::status::{PartitionKey, PartitionState, StatusBoard, now_ms};

/// What a partition task needs.
pub struct PartitionTask {
    pub key: PartitionKey,
    pub source: ClusterClient,
    pub destination: ClusterClient,
    pub fetch_max_bytes: i32,
    pub max_filler_batch_records: i32,
    pub max_fill_offsets: i64,
    pub status: StatusBoard,
}

const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNKNOWN_TOPIC_ID: i16 = 100;
/// How long the destination high watermark must stay unchanged before the engine trusts it as
/// the log end (a write of a previous run may still be replicating; see `settled_offsets`).
const SETTLE: Duration = Duration::from_millis(700);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl PartitionTask {
    /// Mirrors until `stop` is set or a non-retriable error.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let result = tokio::select! {
                r = self.copy() => r,
                _ = stop.changed() => return,
            };
            match result {
                Ok(()) => return,
                Err(e) if e.is_retriable() => {
                    warn!(error = %e, ?backoff, "retrying");
                    self.status.update(&self.key, |s| {
                        s.state = PartitionState::Retrying;
                        s.last_error = Some(e.to_string());
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.changed() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => {
                    warn!(error = %e, "partition FAILED");
                    self.status.update(&self.key, |s| {
                        s.state = PartitionState::Failed;
                        s.last_error = Some(e.to_string());
                    });
                    return;
                }
            }
        }
    }

    async fn copy(&self) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (topic, partition) = (topic.as_str(), *partition);
        let mut dest_conn = self.destination.connect_leader(topic, partition).await?;
        let (mut dest_log_start, mut next) = settled_offsets(&mut dest_conn, topic, partition).await?;
        let mut sink = PartitionSink::open(dest_conn, topic, partition).await?;
        let mut src = self.source.connect_leader(topic, partition).await?;
        let mut aborts = AbortTracker::default();
        info!(next, "mirroring from the destination's high watermark");
        self.status.update(&self.key, |s| {
            s.state = PartitionState::Mirroring;
            s.destination_next_offset = next;
            s.last_error = None;
        });
        loop {
            let fetched = match fetch(&mut src, topic, partition, next, self.fetch_max_bytes, 500).await {
                Err(MirrorError::Broker { code: UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID, .. })
                    if self.source.layout(topic).await?.error_code == UNKNOWN_TOPIC_OR_PARTITION =>
                {
                    // The topic existed when this task started, so it was deleted on the source.
                    return Err(MirrorError::SourceTopicDeleted(topic.to_owned()));
                }
                Err(MirrorError::Broker { code: OFFSET_OUT_OF_RANGE, .. }) => {
                    let (start, end) = offsets("source", &mut src, topic, partition).await?;
                    if next < start {
                        // The source deleted this range (retention/DeleteRecords): fill it.
                        next = self.fill(&mut sink, next, start - next, 0).await?;
                        continue;
                    }
                    return Err(MirrorError::Unsupported(format!(
                        "destination is at offset {next} but the source ends at {end}: the source lost data (unclean election or recreated topic)"
                    )));
                }
                other => other?,
            };
            if next < fetched.log_start_offset && fetched.batches.is_empty() {
                next = self.fill(&mut sink, next, fetched.log_start_offset - next, 0).await?;
                continue;
            }
            aborts.extend(fetched.aborted.iter().copied());
            let (actions, _) = plan(next, fetched.batches, &mut aborts);
            for action in actions {
                match action {
                    Action::Fill { base, count, timestamp } => next = self.fill(&mut sink, base, count, timestamp).await?,
                    Action::Write { base, header, batch } => {
                        self.write(&mut sink, &batch, header.records_count, base, header.max_timestamp).await?;
                        next = header.next_offset();
                    }
                    Action::Holes { header, batch, .. } => {
                        // Compaction removed records inside this batch: each contiguous run is
                        // re-encoded as its own batch and the holes become fillers.
                        for piece in split_holes(&batch, &header).map_err(MirrorError::Source)? {
                            match piece {
                                Piece::Run { base: run_base, records, batch } => {
                                    self.write(&mut sink, &batch, records, run_base, header.max_timestamp).await?;
                                }
                                Piece::Gap { base: gap_base, count, timestamp } => {
                                    self.fill(&mut sink, gap_base, count, timestamp).await?;
                                }
                            }
                        }
                        next = header.next_offset();
                        self.status.update(&self.key, |s| s.reencoded_batches += 1);
                    }
                }
            }
            // Retention follows the source: its log start moved past data the destination keeps.
            let follow = fetched.log_start_offset.min(next);
            if follow > dest_log_start {
                sink.delete_records_before(follow).await?;
                dest_log_start = follow;
            }
            self.status.update(&self.key, |s| {
                s.source_high_watermark = fetched.high_watermark;
                s.source_last_stable_offset = fetched.last_stable_offset;
                s.destination_next_offset = next;
            });
        }
    }

    /// Writes one batch of real records at `base` and accounts for it.
    async fn write(&self, sink: &mut PartitionSink, batch: &[u8], records: i32, base: i64, max_timestamp: i64) -> Result<(), MirrorError> {
        sink.write_batch(batch, records, base).await?;
        self.status.update(&self.key, |s| {
            s.records_mirrored += records as u64;
            s.bytes_mirrored += batch.len() as u64;
            s.record_write(max_timestamp, now_ms());
        });
        Ok(())
    }

    /// Writes `count` fillers from `base` in batches; returns the new log end.
    async fn fill(&self, sink: &mut PartitionSink, base: i64, count: i64, timestamp: i64) -> Result<i64, MirrorError> {
        if count > self.max_fill_offsets {
            return Err(MirrorError::FillTooLarge { base, count, limit: self.max_fill_offsets });
        }
        let long = count > i64::from(self.max_filler_batch_records);
        if long {
            info!(base, count, "filling offsets without visible source data");
            self.status.update(&self.key, |s| s.state = PartitionState::Filling);
        }
        let mut next = base;
        let end = base + count;
        while next < end {
            let n = (end - next).min(i64::from(self.max_filler_batch_records)) as i32;
            sink.write_fillers(n, timestamp, next).await?;
            next += i64::from(n);
            self.status.update(&self.key, |s| s.filler_records += n as u64);
        }
        if long {
            self.status.update(&self.key, |s| s.state = PartitionState::Mirroring);
        }
        Ok(next)
    }
}

/// `(log start, high watermark)` once the high watermark has stopped moving. After a crash or a
/// retried write, a batch the previous producer sent may still be on its way to the followers:
/// the leader has it but the high watermark does not yet. Writing before it settles would place
/// the next batch after that one and break the identical-offset invariant.
async fn settled_offsets(conn: &mut kmp_protocol::client::Connection, topic: &str, partition: i32) -> Result<(i64, i64), MirrorError> {
    let mut last = offsets("destination", conn, topic, partition).await?;
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = offsets("destination", conn, topic, partition).await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}
