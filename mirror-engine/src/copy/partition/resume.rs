//! Where an attempt of a partition task starts: the destination's log end once it has settled
//! (the source offset to read next), what the previous attempt left there (its uncertain batches
//! checked and accounted, a fresh topic still empty), and the attempt's new producer.

use kmp_protocol::kafka_protocol::ResponseError;
use std::time::Duration;

use tracing::debug;

use super::PartitionTask;
use crate::cluster::client::{leader_log_end, offsets};
use crate::copy::fetch::session::Heard;
use crate::copy::produce::landed::{self, ReadBack};
use crate::copy::produce::sink::{PartitionSink, Written};
use crate::copy::txn::Transactions;
use crate::error::MirrorError;

/// How long the destination high watermark must stay unchanged before the engine trusts it as
/// the log end (a write of a previous run may still be replicating; see `settled_offsets`).
const SETTLE: Duration = Duration::from_millis(700);
/// Longest wait for the destination high watermark to reach the leader's log end before the
/// attempt fails (retriable) and reports why.
const UNSETTLED_LIMIT: Duration = Duration::from_secs(45);

impl PartitionTask {
    /// One attempt: settle the destination, check what the previous attempt left, then copy
    /// through a new producer (left in `slot` for the caller to abandon when this ends).
    pub(super) async fn copy(&self, slot: &mut Option<PartitionSink>, uncertain: &mut Vec<Written>, heard: &Heard) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (topic, partition) = (topic.as_str(), *partition);
        let (dest_conn, epoch) = self.destination.leader_link(topic, partition).await?;
        let (dest_log_start, next) = self.settled(&dest_conn, epoch).await?;
        if let Some(want) = self.expect_end
            && uncertain.is_empty()
            && next - self.shift != want
        {
            return Err(crate::copy::fresh_topic::forged(topic, partition, want, next - self.shift));
        }
        self.epochs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .resume(self.stored_line, next);
        self.account_landed(&dest_conn, epoch, uncertain.clone(), dest_log_start, next).await?;
        uncertain.clear();
        let dest_topic_id = self.destination.layout(topic).await?.topic_id;
        if next > dest_log_start {
            // The destination may end with a marker its coordinator wrote on its own.
            let known = self.source_topic_id.get().copied();
            let last = crate::copy::txn::LastOffset {
                source: next - 1,
                destination: next - 1 - self.shift,
            };
            crate::copy::txn::check_last_marker(&dest_conn, dest_topic_id, &self.source, known, topic, partition, last).await?;
        }
        let producer = self.producers.identity()?;
        let held = crate::cluster::producers::describe(&dest_conn, topic, partition).await?;
        // Sequence numbers follow destination offsets.
        let next_sequence = crate::copy::produce::producer_id::first_sequence(&held, producer, next - self.shift);
        let txns = Transactions::new(self.destination.clone(), self.producers.clone(), topic, dest_topic_id, partition);
        let sink = slot.insert(PartitionSink::open(
            dest_conn,
            self.producers.clone(),
            producer,
            next_sequence,
            txns,
            topic,
            partition,
            self.max_in_flight,
            self.shift,
        ));
        self.stream(sink, dest_log_start, next, heard).await
    }

    /// The destination's `(log start, settled log end)` (`settled_offsets`) in source offsets.
    pub(super) async fn settled(&self, conn: &kmp_protocol::shared_client::SharedConnection, epoch: i32) -> Result<(i64, i64), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (log_start, end) = settled_offsets(conn, topic, *partition, epoch).await?;
        Ok((log_start.saturating_add(self.shift), end.saturating_add(self.shift)))
    }

    /// Checks on the destination (leader connection `conn`, leader epoch `epoch`) which batches of
    /// a failed or cancelled attempt landed between the log start `log_start` and the settled log
    /// end `end` (source offsets, like the batches), and accounts them;
    /// fails closed if anything else is there (`landed`).
    pub(super) async fn account_landed(
        &self,
        conn: &kmp_protocol::shared_client::SharedConnection,
        epoch: i32,
        uncertain: Vec<Written>,
        log_start: i64,
        end: i64,
    ) -> Result<(), MirrorError> {
        if uncertain.is_empty() {
            return Ok(());
        }
        let (_, topic, partition) = &self.key;
        let topic_id = self.destination.layout(topic).await?.topic_id;
        let at = ReadBack {
            conn,
            topic,
            topic_id,
            partition: *partition,
            leader_epoch: epoch,
        };
        // Read back in destination offsets.
        let shift = self.shift;
        let moved = |mut w: Written, by: i64| {
            w.base += by;
            w
        };
        let uncertain = uncertain.into_iter().map(|w| moved(w, -shift)).collect();
        let landed = landed::verify(&at, uncertain, log_start - shift, end - shift).await?;
        debug!(end, ?landed, "batches of the previous attempt found on the destination");
        self.account(landed.into_iter().map(|w| moved(w, shift)).collect());
        Ok(())
    }
}

/// `(log start, high watermark)` once the high watermark has stopped moving and equals the
/// leader's log end. After a crash or a retried write, a batch the previous producer sent may
/// still be on its way to the followers: the leader has it but the high watermark does not yet —
/// for up to `replica.lag.time.max.ms` when an in-sync follower is down. Writing before it
/// settles would place the next batch after that one and break the identical-offset invariant,
/// so the engine waits (bounded by `UNSETTLED_LIMIT`, then retries with backoff).
pub(crate) async fn settled_offsets(
    conn: &kmp_protocol::shared_client::SharedConnection,
    topic: &str,
    partition: i32,
    epoch: i32,
) -> Result<(i64, i64), MirrorError> {
    let deadline = tokio::time::Instant::now() + UNSETTLED_LIMIT;
    let mut last = offsets("destination", conn, topic, partition).await?;
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = offsets("destination", conn, topic, partition).await?;
        if now == last {
            // Epoch -1 (unknown) cannot be asked about; the high watermark alone then.
            let end = if epoch >= 0 {
                leader_log_end("destination", conn, topic, partition, epoch).await?
            } else {
                now.1
            };
            if end == now.1 {
                return Ok(now);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MirrorError::Broker {
                    side: "destination",
                    what: format!(
                        "{topic}-{partition}: the leader holds offsets up to {end} beyond the high watermark {} (an in-sync replica down?); waiting before writing",
                        now.1
                    ),
                    code: ResponseError::RequestTimedOut.code(), // retried with backoff
                });
            }
        }
        last = now;
    }
}
