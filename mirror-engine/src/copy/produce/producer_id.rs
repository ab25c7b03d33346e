//! The one producer identity every engine instance of a destination writes mirrored data with,
//! and the sequence numbers that make each write conditional on the destination log end.
//!
//! A batch for destination offset `o` carries sequence `o mod 2^31` under the shared producer
//! id. Kafka appends an idempotent batch only if its first sequence follows the last one it holds
//! for that producer on the partition (and answers a repeat of one of the last five batches as a
//! duplicate, without appending), so a write lands only at the log end the writer planned for:
//! a second engine instance that still believes in an older log end — a frozen former active one
//! woken up, a split brain — is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) instead of appending
//! records at the wrong offsets. Kafka counts a batch's sequences by its offset span
//! (`lastOffsetDelta`), and the engine writes every destination offset exactly once in order
//! (fillers for the gaps), so sequence and offset advance together; both wrap the same way at 2^31.
//!
//! Limits: a broker that holds no state for the producer on a partition (its first write there,
//! after `producer.id.expiration.ms` of silence — one day by default — or after DeleteRecords
//! removed every batch of it) accepts any first sequence; the lease (`lease`) covers those.
//! The identity is allocated once (InitProducerId) and kept in the state topic.

use kmp_protocol::kafka_protocol::messages::{InitProducerIdRequest, ProducerId};
use serde::{Deserialize, Serialize};

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::state::records::ENGINE_PRODUCER_KEY;
use crate::state::store::StateStore;

/// Producer id and epoch of the engine's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The sequence number of a batch whose first record lands at destination offset `offset`.
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
    use super::sequence_at;

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
