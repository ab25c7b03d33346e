//! The one producer identity every engine instance of a destination writes mirrored data with,
//! and the sequence numbers that make each write conditional on the writes before it.
//!
//! An attempt's first batch continues the sequence the partition leader holds for the shared
//! producer id (DescribeProducers: its last sequence + 1), or, when the leader holds none, starts
//! at the destination log end `o mod 2^31`; each batch then advances it by its offset span (as
//! Kafka counts, `lastOffsetDelta` + 1). Kafka appends an idempotent batch only if its first
//! sequence follows the last one it holds for that producer on the partition (and answers a
//! repeat of one of the last five batches as a duplicate, without appending), so a second engine
//! instance that still believes in an older state — a frozen former active one woken up, a split
//! brain — is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) instead of appending records at the wrong
//! offsets. (Sequence and offset no longer advance together: a source transaction's records and
//! markers are written by other producers, `copy::txn`.)
//!
//! Limits: a broker that holds no state for the producer on a partition (its first write there,
//! after `producer.id.expiration.ms` of silence — one day by default — or after DeleteRecords
//! removed every batch of it) accepts any first sequence; the lease (`lease`) covers those.
//! The identity is allocated once (InitProducerId) and kept in the state topic.

use kmp_protocol::kafka_protocol::messages::{InitProducerIdRequest, ProducerId};
use serde::{Deserialize, Serialize};

use crate::cluster::client::ClusterClient;
use crate::cluster::producers::ActiveProducer;
use crate::error::MirrorError;
use crate::state::records::ENGINE_PRODUCER_KEY;
use crate::state::store::StateStore;

/// Producer id and epoch of the engine's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Kafka's sequence after a batch with first sequence `base` whose offsets span `span` (it wraps
/// to 0 after `i32::MAX`).
pub fn sequence_after(base: i32, span: i32) -> i32 {
    ((i64::from(base) + i64::from(span)) & i64::from(i32::MAX)) as i32
}

/// The sequence continuing what the partition leader holds (`held`, from DescribeProducers) for
/// producer id `producer_id` at epoch `epoch`; `None` if it holds no sequence of that epoch.
pub(crate) fn continued_sequence(held: &[ActiveProducer], producer_id: i64, epoch: i16) -> Option<i32> {
    held.iter()
        .find(|p| p.producer_id == producer_id)
        .filter(|p| p.producer_epoch == i32::from(epoch) && p.last_sequence >= 0)
        .map(|p| sequence_after(p.last_sequence, 1))
}

/// The first sequence of an attempt writing as `producer` from destination offset `next`, given
/// what the partition leader holds (`held`): the continued sequence, else the log end's.
pub(crate) fn first_sequence(held: &[ActiveProducer], producer: EngineProducer, next: i64) -> i32 {
    continued_sequence(held, producer.producer_id, producer.producer_epoch).unwrap_or_else(|| sequence_at(next))
}

/// The sequence number of a batch whose first record lands at destination offset `offset`, for a
/// producer the partition leader holds no state for.
pub fn sequence_at(offset: i64) -> i32 {
    // 2^31 divides 2^63, so the low 31 bits are `offset mod 2^31` for any offset >= 0.
    (offset & i64::from(i32::MAX)) as i32
}

/// The producer identity every engine instance writes mirrored data with, as stored.
pub(crate) fn engine_producer(store: &StateStore) -> Option<EngineProducer> {
    store.record(ENGINE_PRODUCER_KEY)
}

/// Stores the engine's producer identity.
async fn put_engine_producer(store: &StateStore, p: &EngineProducer) -> Result<(), MirrorError> {
    store.put_record(ENGINE_PRODUCER_KEY, p).await
}

/// The stored identity, or a new one from the destination, stored before it is used.
pub(crate) async fn load_or_allocate(store: &StateStore, destination: &ClusterClient) -> Result<EngineProducer, MirrorError> {
    if let Some(p) = engine_producer(store) {
        return Ok(p);
    }
    let mut req = InitProducerIdRequest::default();
    // kafka-protocol defaults this to Some(""), which brokers reject as INVALID_REQUEST.
    req.transactional_id = None;
    req.transaction_timeout_ms = i32::MAX; // no transaction: what the Java idempotent producer sends
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let conn = destination.link_any().await?;
    let resp = conn.call(&req, 4).await.map_err(|e| destination.wrap(e))?;
    if resp.error_code != 0 {
        return Err(MirrorError::Broker {
            side: "destination",
            what: "InitProducerId".into(),
            code: resp.error_code,
        });
    }
    let p = EngineProducer {
        producer_id: resp.producer_id.0,
        producer_epoch: resp.producer_epoch,
    };
    put_engine_producer(store, &p).await?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::{ActiveProducer, EngineProducer, first_sequence, sequence_after, sequence_at};

    #[test]
    fn an_attempt_continues_the_sequence_the_leader_holds_and_starts_at_the_log_end_otherwise() {
        let p = EngineProducer {
            producer_id: 9,
            producer_epoch: 2,
        };
        let held = |epoch, last| {
            vec![ActiveProducer {
                producer_id: 9,
                producer_epoch: epoch,
                last_sequence: last,
                current_txn_start_offset: -1,
            }]
        };
        assert_eq!(
            first_sequence(&held(2, 41), p, 100),
            42,
            "after writes by other producers, sequence and offset differ"
        );
        assert_eq!(first_sequence(&[], p, 100), 100);
        assert_eq!(first_sequence(&held(1, 41), p, 100), 100, "state of another epoch is not this producer's");
        assert_eq!(first_sequence(&held(2, i32::MAX), p, 100), 0, "wraps");
        assert_eq!(sequence_after(5, 3), 8);
        assert_eq!(sequence_after(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn sequences_follow_offsets_and_wrap_where_kafka_wraps_them() {
        assert_eq!(sequence_at(0), 0);
        assert_eq!(sequence_at(12_345), 12_345);
        assert_eq!(sequence_at(i64::from(i32::MAX)), i32::MAX);
        // Kafka's incrementSequence: after Integer.MAX_VALUE comes 0.
        assert_eq!(sequence_at(i64::from(i32::MAX) + 1), 0);
        assert_eq!(sequence_at((1 << 31) * 7 + 42), 42);
    }
}
