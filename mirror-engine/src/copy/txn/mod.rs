//! Replaying source transactions on the destination, so that `read_uncommitted` readers of the
//! destination see every record the source holds (aborted ones included) and `read_committed`
//! readers see what the source's see, with the destination's last stable offset following the
//! source's.
//!
//! Each source producer's transactions on a partition are replayed by a destination
//! transactional producer of their own, under the transactional id
//! `kmp-engine.txn.<destination topic id>.<partition>.<source producer id>` (the proxy refuses
//! every transactional id starting `kmp-engine.txn.` to clients): the source transaction's batches
//! are produced inside a destination transaction, and when the source's marker comes, that
//! transaction is committed or aborted while the destination log ends exactly at the marker's
//! offset, and nothing more is written until the destination's marker has landed there. A
//! marker whose transaction left no data on the destination (the mirror started after it)
//! still gets its destination marker: the partition is added to the transaction, then ended.
//!
//! Adoption: a transactional id is looked up (DescribeTransactions) before its first use in an
//! attempt, and a transaction open under it is continued with its producer id and epoch and the
//! next sequence the partition leader holds (DescribeProducers) — never re-initialised, which
//! would abort it and put a marker where the source has data. InitProducerId is only sent for an
//! id the coordinator does not know.
//!
//! Stop: [`abort_topic`] aborts every destination transaction still open on a stopped topic
//! before it becomes writable (a failover keeps none of a transaction the source had not
//! decided, as KIP-1279 does; `stop`).
//!
//! Markers are checked (`markers`): before a marker is replayed the destination must end where
//! the source's is (or hold exactly that marker already, landed after an attempt gave up
//! waiting), and an attempt that resumes after a marker first checks it against the source's:
//! a marker the destination's coordinator wrote on its own (a transaction that outlived
//! `transaction.max.timeout.ms`) fails the partition instead of being resumed past. A producer
//! fenced or a transaction ended by someone else fails it too (`Diverged`, sticky).
//!
//! Cost: every replayed marker holds its partition for one EndTxn and the marker's landing (tens
//! of milliseconds); the writes of a transaction go one at a time on the partition leader's
//! control connection, not through the packed produce lanes. Partitions without transactions
//! are untouched.

mod markers;
pub(crate) mod requests;
mod stop;

pub(crate) use markers::{LastOffset, check_last as check_last_marker};
pub use stop::abort_topic;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::batch::{ProducerFields, rewrite_for_produce_as};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::shared_client::SharedConnection;
use tracing::{debug, info};

use crate::cluster::client::{ClusterClient, offsets};
use crate::cluster::links::Lane;
use crate::copy::produce::mux::Producers;
use crate::copy::produce::producer_id::{continued_sequence, sequence_after};
use crate::error::MirrorError;
use kmp_protocol::Backoff;

/// Every transactional id the engine uses starts with this.
pub const TXN_ID_PREFIX: &str = "kmp-engine.txn.";
const CONCURRENT_TRANSACTIONS: i16 = ResponseError::ConcurrentTransactions.code();
const RETRY_LATER: i16 = ResponseError::RequestTimedOut.code();
/// Longest wait for a coordinator to finish a previous transaction of the same id, or for a
/// marker to land, before the attempt fails (retriable).
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// Most source producers one partition's attempt keeps a destination producer for. Beyond it,
/// those whose transaction ended are forgotten (looked up again if they come back); a source
/// with more transactions open at once on one partition fails the partition (a source that
/// makes up producer ids must not make the engine hold one destination producer each).
pub(crate) const MAX_SLOTS: usize = 1_000;

/// The transactional id replaying source producer `source_producer` on a destination partition.
pub fn transactional_id(topic_id: [u8; 16], partition: i32, source_producer: i64) -> String {
    format!("{TXN_ID_PREFIX}{}.{partition}.{source_producer}", uuid::Uuid::from_bytes(topic_id).simple())
}

/// One destination transactional producer, as this attempt knows it.
struct Slot {
    id: String,
    coordinator: SharedConnection,
    producer: (i64, i16),
    next_sequence: i32,
    /// The partition is in the producer's ongoing transaction.
    open: bool,
}

/// The destination transactions of one partition during one attempt.
pub struct Transactions {
    destination: ClusterClient,
    producers: Producers,
    topic: String,
    topic_id: [u8; 16],
    partition: i32,
    slots: HashMap<i64, Slot>,
}

/// One transactional batch prepared for sending: the bytes and where they must land.
pub struct Prepared {
    pub blob: kmp_protocol::produce_frame::RecordsBlob,
    pub producer_id: i64,
    pub sequence: i32,
    id: String,
    source_producer: i64,
    span: i32,
}

impl Transactions {
    /// The transactions of `topic` (destination topic id `topic_id`) partition `partition`.
    pub fn new(destination: ClusterClient, producers: Producers, topic: &str, topic_id: [u8; 16], partition: i32) -> Self {
        Self {
            destination,
            producers,
            topic: topic.to_owned(),
            topic_id,
            partition,
            slots: HashMap::new(),
        }
    }

    fn may_write(&self) -> Result<(), MirrorError> {
        if self.producers.may_write() { Ok(()) } else { Err(MirrorError::Fenced) }
    }

    /// The slot replaying `source_producer`, looked up (and adopted) on first use.
    async fn slot(&mut self, leader: &SharedConnection, source_producer: i64) -> Result<&mut Slot, MirrorError> {
        if !self.slots.contains_key(&source_producer) {
            if self.slots.len() >= MAX_SLOTS {
                self.slots.retain(|_, s| s.open);
            }
            if self.slots.len() >= MAX_SLOTS {
                return Err(MirrorError::Unsupported(format!(
                    "{}-{}: more than {MAX_SLOTS} source transactions open at once on one partition",
                    self.topic, self.partition
                )));
            }
            let s = self.resolve(leader, source_producer).await?;
            self.slots.insert(source_producer, s);
        }
        self.slots
            .get_mut(&source_producer)
            .ok_or_else(|| MirrorError::Invariant("a transaction slot vanished".into()))
    }

    async fn resolve(&self, leader: &SharedConnection, source_producer: i64) -> Result<Slot, MirrorError> {
        let id = transactional_id(self.topic_id, self.partition, source_producer);
        let any = self.destination.link_any().await?;
        let addr = requests::coordinator(&any, &id).await?;
        let coordinator = self.destination.link(&addr, Lane::Control).await?;
        let found = requests::describe(&coordinator, &id).await?;
        if let Some(s) = found.as_ref().filter(|s| s.state.starts_with("Prepare")) {
            // Its coordinator is committing or aborting it right now: retried later.
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("transaction {id} is in state {}", s.state),
                code: CONCURRENT_TRANSACTIONS,
            });
        }
        if let Some(s) = found
            .as_ref()
            .filter(|s| !matches!(s.state.as_str(), "Ongoing" | "Empty" | "CompleteCommit" | "CompleteAbort" | "Dead"))
        {
            // A state this engine does not know (a newer Kafka): InitProducerId might abort it.
            return Err(MirrorError::Unsupported(format!(
                "transaction {id} is in state {}, unknown to this engine",
                s.state
            )));
        }
        let Some(s) = found.filter(|s| s.state != "Dead") else {
            self.may_write()?;
            let producer = requests::init_producer(&coordinator, &id).await?;
            debug!(id, ?producer, "new destination transactional producer");
            return Ok(Slot {
                id,
                coordinator,
                producer,
                next_sequence: 0,
                open: false,
            });
        };
        let producer = (s.producer_id, s.producer_epoch);
        let held = crate::cluster::producers::describe(leader, &self.topic, self.partition).await?;
        // A producer the leader holds nothing for (of this epoch) starts a transaction at 0.
        let next_sequence = continued_sequence(&held, producer.0, producer.1).unwrap_or(0);
        let open = s.state == "Ongoing" && s.partitions.iter().any(|(t, p)| *t == self.topic && *p == self.partition);
        if open {
            info!(id, ?producer, next_sequence, "continuing a destination transaction opened before");
        }
        Ok(Slot {
            id,
            coordinator,
            producer,
            next_sequence,
            open,
        })
    }

    /// Adds the partition to `source_producer`'s destination transaction unless it is in it.
    async fn join(&mut self, leader: &SharedConnection, source_producer: i64) -> Result<(), MirrorError> {
        self.may_write()?;
        let (topic, partition) = (self.topic.clone(), self.partition);
        let slot = self.slot(leader, source_producer).await?;
        if slot.open {
            return Ok(());
        }
        let (coordinator, id, producer) = (slot.coordinator.clone(), slot.id.clone(), slot.producer);
        retry_concurrent(&self.producers, || requests::add_partition(&coordinator, &id, producer, &topic, partition)).await?;
        self.slot(leader, source_producer).await?.open = true;
        Ok(())
    }

    /// `batch` (a source transaction's, whose offsets span `span`) ready to be produced at
    /// `base` inside `source_producer`'s destination transaction.
    pub async fn prepare(&mut self, leader: &SharedConnection, source_producer: i64, batch: &Bytes, span: i32) -> Result<Prepared, MirrorError> {
        self.join(leader, source_producer).await?;
        let slot = self.slot(leader, source_producer).await?;
        let fields = ProducerFields {
            producer_id: slot.producer.0,
            producer_epoch: slot.producer.1,
            base_sequence: slot.next_sequence,
        };
        let blob = rewrite_for_produce_as(batch, fields, true).map_err(MirrorError::Source)?;
        Ok(Prepared {
            blob,
            producer_id: slot.producer.0,
            sequence: slot.next_sequence,
            id: slot.id.clone(),
            source_producer,
            span,
        })
    }

    /// Produces a prepared batch; it must land at `base`.
    pub async fn send(&mut self, leader: &SharedConnection, p: Prepared, base: i64) -> Result<(), MirrorError> {
        self.may_write()?;
        let got = requests::produce(leader, &p.id, &self.topic, self.partition, p.blob).await?;
        if got != base {
            return Err(MirrorError::OffsetMismatch { expected: base, got });
        }
        let slot = self.slot(leader, p.source_producer).await?;
        slot.next_sequence = sequence_after(p.sequence, p.span);
        Ok(())
    }

    /// Source producers whose destination transaction is open on the partition.
    pub fn open_producers(&self) -> Vec<i64> {
        let mut open: Vec<i64> = self.slots.iter().filter(|(_, s)| s.open).map(|(p, _)| *p).collect();
        open.sort_unstable();
        open
    }

    /// Ends `source_producer`'s destination transaction (`commit` or abort) where the source's
    /// marker is, at offset `at` — the destination log must end there — and waits until the
    /// destination's marker has landed at `at`.
    pub async fn end(&mut self, leader: &SharedConnection, source_producer: i64, commit: bool, at: i64) -> Result<(), MirrorError> {
        let (_, end) = offsets("destination", leader, &self.topic, self.partition).await?;
        if end == at + 1 {
            // Landed after an earlier attempt gave up waiting for it: only that marker may be there.
            let slot = self.slot(leader, source_producer).await?;
            let producer = slot.producer.0;
            slot.open = false;
            return markers::expect_own(leader, &self.topic, self.topic_id, self.partition, at, producer, commit).await;
        }
        if end != at {
            return Err(MirrorError::Diverged(format!(
                "{}-{}: the source's transaction marker is at {at}, the destination ends at {end}",
                self.topic, self.partition
            )));
        }
        self.join(leader, source_producer).await?;
        let slot = self.slot(leader, source_producer).await?;
        let (coordinator, id, producer) = (slot.coordinator.clone(), slot.id.clone(), slot.producer);
        retry_concurrent(&self.producers, || requests::end(&coordinator, &id, producer, commit)).await?;
        self.slot(leader, source_producer).await?.open = false;
        marker_landed(leader, &self.topic, self.partition, at).await
    }
}

/// Runs `call` (a write) while the engine's lease holds, again while the coordinator answers
/// CONCURRENT_TRANSACTIONS (it is still completing the id's previous transaction), for up to
/// `WAIT_LIMIT`.
pub(crate) async fn retry_concurrent<F, Fut>(producers: &Producers, mut call: F) -> Result<(), MirrorError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), MirrorError>>,
{
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(50));
    loop {
        // Every try is a write: the lease must hold for each.
        if !producers.may_write() {
            return Err(MirrorError::Fenced);
        }
        match call().await {
            Err(MirrorError::Broker {
                code: CONCURRENT_TRANSACTIONS, ..
            }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(backoff.next_pause()).await;
            }
            other => return other,
        }
    }
}

/// Waits until the destination partition's high watermark is `at + 1`: the marker of the
/// transaction just ended landed at `at`. Anything past it means another write got there first.
async fn marker_landed(leader: &SharedConnection, topic: &str, partition: i32, at: i64) -> Result<(), MirrorError> {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(20));
    loop {
        let (_, end) = offsets("destination", leader, topic, partition).await?;
        if end == at + 1 {
            return Ok(());
        }
        if end > at + 1 {
            return Err(MirrorError::Diverged(format!(
                "{topic}-{partition}: the destination ends at {end} after a transaction marker that had to land at {at}"
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("{topic}-{partition}: the transaction marker for offset {at} has not landed (log ends at {end})"),
                code: RETRY_LATER,
            });
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactional_ids_name_the_engine_the_topic_id_the_partition_and_the_source_producer() {
        let id = transactional_id([0xab; 16], 3, 4711);
        assert_eq!(id, "kmp-engine.txn.abababababababababababababababab.3.4711");
        assert!(id.starts_with(TXN_ID_PREFIX));
    }
}
