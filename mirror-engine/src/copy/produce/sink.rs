//! Writing to a destination partition with the engine's own idempotent producer: the engine-wide
//! producer id with sequence numbers that continue what the partition leader holds for it
//! (`copy::produce::producer_id`: every write is conditional on the writes before it), batches handed to the destination broker's produce lane
//! (`copy::produce::mux`, acks=all, packed with other partitions' batches), up to `max_in_flight`
//! outstanding, and a check that every batch lands at the offset the plan expects. A source
//! transaction's batches and markers go through the partition's destination transactions
//! (`copy::txn`) once everything before them was acknowledged, so offsets stay in source order.
//! Deciding what to write is `plan`'s; accounting what was acknowledged is `partition`'s.
//!
//! Order: a broker accepts *any* sequence number as the first batch of a producer it holds no
//! state for. If the first batches in flight were refused (NOT_LEADER_OR_FOLLOWER while the
//! leader recovers) and a later one was accepted, that later batch would land at the earlier
//! one's offset. So a producer sends a single batch until the broker acknowledged one (then it
//! holds the producer's sequence and refuses gaps), again after DeleteRecords (which may drop
//! that state); `landed` checks what a failed attempt left, whatever the cause.

use std::collections::VecDeque;

use bytes::Bytes;
use kmp_protocol::batch::{self, ProducerFields};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kmp_protocol::kafka_protocol::messages::{DeleteRecordsRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::produce_frame::RecordsBlob;
use kmp_protocol::shared_client::SharedConnection;
use tokio::sync::oneshot;

use crate::cluster::produce::PRODUCE_TIMEOUT_MS;
use crate::copy::produce::mux::{Producers, Reply};
use crate::copy::produce::producer_id::EngineProducer;
use crate::copy::txn::Transactions;
use crate::error::MirrorError;

/// One produced batch, reported back once the destination acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Destination offset the batch had to land at.
    pub base: i64,
    pub records: i32,
    /// Bytes of the batch as sent.
    pub bytes: usize,
    /// The batch's max timestamp (for replication latency).
    pub max_timestamp: i64,
    pub filler: bool,
    /// Producer id and base sequence the batch was sent with (to recognise it on the destination).
    pub producer_id: i64,
    pub sequence: i32,
}

/// An idempotent producer bound to one destination partition leader.
pub struct PartitionSink {
    /// Control connection to the leader (InitProducerId, DeleteRecords).
    conn: SharedConnection,
    producers: Producers,
    topic: TopicName,
    partition: i32,
    producer: EngineProducer,
    /// Sequence of the next batch (`producer_id::first_sequence`).
    next_sequence: i32,
    max_in_flight: usize,
    /// The broker acknowledged a batch of this producer since it was opened or records were
    /// deleted: it holds the producer's sequence, so batches may be pipelined.
    confirmed: bool,
    in_flight: VecDeque<(oneshot::Receiver<Reply>, Written)>,
    acknowledged: Vec<Written>,
    /// The destination transactions replaying the source's (`copy::txn`).
    txns: Transactions,
    /// A transactional batch sent and not yet answered.
    txn_in_flight: Option<Written>,
    /// Source offset minus destination offset (`copy::shift`): offsets here are the source's,
    /// converted where a request or answer carries a destination offset.
    shift: i64,
}

impl PartitionSink {
    /// A producer for the partition whose leader `conn` reaches, writing as `producer`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        conn: SharedConnection,
        producers: Producers,
        producer: EngineProducer,
        next_sequence: i32,
        txns: Transactions,
        topic: &str,
        partition: i32,
        max_in_flight: usize,
        shift: i64,
    ) -> Self {
        Self {
            shift,
            next_sequence,
            txns,
            txn_in_flight: None,
            conn,
            producers,
            topic: TopicName(StrBytes::from_string(topic.to_owned())),
            partition,
            producer,
            max_in_flight: max_in_flight.max(1),
            confirmed: false,
            in_flight: VecDeque::new(),
            acknowledged: Vec::new(),
        }
    }

    /// The header fields of the next batch, whose offsets span `span`; the sequence advances.
    fn take_fields(&mut self, span: i32) -> ProducerFields {
        let base_sequence = self.next_sequence;
        self.next_sequence = crate::copy::produce::producer_id::sequence_after(base_sequence, span);
        ProducerFields {
            producer_id: self.producer.producer_id,
            producer_epoch: self.producer.producer_epoch,
            base_sequence,
        }
    }

    /// Sends a source batch (header rewritten, payload untouched) that must land at `base`.
    pub async fn write_batch(&mut self, batch: &Bytes, records: i32, base: i64, max_timestamp: i64) -> Result<(), MirrorError> {
        let fields = self.take_fields(records);
        let out = batch::rewrite_for_produce(batch, fields).map_err(MirrorError::Source)?;
        let w = Written {
            base,
            records,
            bytes: out.len(),
            max_timestamp,
            filler: false,
            producer_id: self.producer.producer_id,
            sequence: fields.base_sequence,
        };
        self.produce(out, w).await
    }

    /// Sends `count` filler records starting at `base`.
    pub async fn write_fillers(&mut self, count: i32, base: i64) -> Result<(), MirrorError> {
        let fields = self.take_fields(count);
        let out = batch::filler_batch(count, fields).map_err(MirrorError::Destination)?;
        self.send_fillers(out, count, base, fields.base_sequence).await
    }

    /// Sends `count` filler records starting at `base` as one zstd batch stamped 0 around
    /// `section` (`batch::compressed_filler_section(count)`).
    pub async fn write_compressed_fillers(&mut self, count: i32, base: i64, section: &[u8]) -> Result<(), MirrorError> {
        let fields = self.take_fields(count);
        let out = batch::compressed_filler_batch(count, fields, section);
        self.send_fillers(out, count, base, fields.base_sequence).await
    }

    /// Sends a batch of `count` fillers; its accounting carries no timestamp (fillers are not
    /// records a consumer reads, so they count toward no replication latency).
    async fn send_fillers(&mut self, out: Bytes, count: i32, base: i64, sequence: i32) -> Result<(), MirrorError> {
        let w = Written {
            base,
            records: count,
            bytes: out.len(),
            max_timestamp: batch::FILLER_TIMESTAMP,
            filler: true,
            producer_id: self.producer.producer_id,
            sequence,
        };
        self.produce(RecordsBlob::whole(out), w).await
    }

    /// Pipelines one Produce request, first waiting for the oldest if the window is full (a
    /// window of one until the broker confirmed the producer; see the module docs).
    async fn produce(&mut self, records_blob: RecordsBlob, w: Written) -> Result<(), MirrorError> {
        while self.in_flight.len() >= self.window() {
            self.ack_oldest().await?;
        }
        let reply = self.producers.submit(self.conn.addr(), self.topic.clone(), self.partition, records_blob);
        self.in_flight.push_back((reply, w));
        Ok(())
    }

    fn window(&self) -> usize {
        if self.confirmed { self.max_in_flight } else { 1 }
    }

    /// Waits for every request in flight; an error means some may not have been written.
    pub async fn flush(&mut self) -> Result<(), MirrorError> {
        while !self.in_flight.is_empty() {
            self.ack_oldest().await?;
        }
        Ok(())
    }

    /// Batches acknowledged since the last call, in offset order.
    pub fn take_acknowledged(&mut self) -> Vec<Written> {
        std::mem::take(&mut self.acknowledged)
    }

    /// Gives up on this producer after an error: the batches acknowledged but not yet taken,
    /// and those still in flight (whether they were written is unknown).
    pub fn abandon(&mut self) -> (Vec<Written>, Vec<Written>) {
        let mut uncertain: Vec<Written> = self.in_flight.drain(..).map(|(_, w)| w).collect();
        uncertain.extend(self.txn_in_flight.take());
        (std::mem::take(&mut self.acknowledged), uncertain)
    }

    /// Sends a source transaction's batch (source producer `source_producer`; its offsets span
    /// `span`) inside that producer's destination transaction, to land at `base`, once every
    /// earlier write was acknowledged; returns once it has been.
    pub async fn write_txn_batch(
        &mut self,
        source_producer: i64,
        batch: &Bytes,
        records: i32,
        base: i64,
        span: i32,
        max_timestamp: i64,
    ) -> Result<(), MirrorError> {
        self.flush().await?;
        let p = self.txns.prepare(&self.conn, source_producer, batch, span).await?;
        let w = Written {
            base,
            records,
            bytes: p.blob.len(),
            max_timestamp,
            filler: false,
            producer_id: p.producer_id,
            sequence: p.sequence,
        };
        self.txn_in_flight = Some(w);
        self.txns.send(&self.conn, p, base - self.shift).await?;
        self.txn_in_flight = None;
        self.acknowledged.push(w);
        Ok(())
    }

    /// Before the partition jumps from `next` to the source's log start `start` (fillers for what
    /// the source deleted): the destination transactions still open are aborted at the first
    /// offsets of the deleted range, one marker each, so none is left holding the destination's
    /// last stable offset (a source marker for one that comes later opens and ends a new one).
    /// Returns where the fill starts.
    pub async fn abort_before_jump(&mut self, mut next: i64, start: i64) -> Result<i64, MirrorError> {
        self.flush().await?;
        for producer in self.txns.open_producers() {
            if next >= start {
                break;
            }
            self.txns.end(&self.conn, producer, false, next - self.shift).await?;
            next += 1;
        }
        Ok(next)
    }

    /// Ends source producer `source_producer`'s destination transaction where the source's
    /// marker is (offset `at`), once every earlier write was acknowledged; returns once the
    /// destination's marker landed there.
    pub async fn end_txn(&mut self, source_producer: i64, commit: bool, at: i64) -> Result<(), MirrorError> {
        self.flush().await?;
        self.txns.end(&self.conn, source_producer, commit, at - self.shift).await
    }

    async fn ack_oldest(&mut self) -> Result<(), MirrorError> {
        // Popped only once acknowledged: on error it stays for `abandon` to report.
        let Some((reply, w)) = self.in_flight.front_mut() else { return Ok(()) };
        let w = *w;
        let p = match reply.await {
            Ok(r) => r?,
            Err(_) => return Err(MirrorError::aborted("destination", "produce lane closed")),
        };
        if p.error_code != 0 {
            let what = format!(
                "produce to {}-{}: {}",
                self.topic.0.as_str(),
                self.partition,
                p.error_message.as_deref().unwrap_or("")
            );
            return Err(MirrorError::Broker {
                side: "destination",
                what,
                code: p.error_code,
            });
        }
        let got = p.base_offset.saturating_add(self.shift);
        if got != w.base {
            return Err(MirrorError::OffsetMismatch { expected: w.base, got });
        }
        self.in_flight.pop_front();
        self.acknowledged.push(w);
        self.confirmed = true;
        Ok(())
    }
}

impl PartitionSink {
    /// Moves the destination log start to `offset` (DeleteRecords), following the source's.
    pub async fn delete_records_before(&mut self, offset: i64) -> Result<(), MirrorError> {
        self.flush().await?;
        if !self.producers.may_write() {
            return Err(MirrorError::Fenced);
        }
        let mut p = DeleteRecordsPartition::default();
        p.partition_index = self.partition;
        p.offset = offset - self.shift;
        let mut t = DeleteRecordsTopic::default();
        t.name = self.topic.clone();
        t.partitions = vec![p];
        let mut req = DeleteRecordsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = PRODUCE_TIMEOUT_MS;
        // The broker may drop the state of a producer whose batches all lie below the new log
        // start: the next batch goes alone again.
        self.confirmed = false;
        let resp = self.conn.call(&req, 2).await.map_err(MirrorError::Destination)?;
        match resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == self.partition)
        {
            Some(p) if p.error_code == 0 => Ok(()),
            Some(p) => Err(MirrorError::Broker {
                side: "destination",
                what: format!("DeleteRecords before {offset}"),
                code: p.error_code,
            }),
            None => Err(MirrorError::Broker {
                side: "destination",
                what: format!("DeleteRecords before {offset}"),
                code: ResponseError::UnknownTopicOrPartition.code(),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
