//! Writing for many partitions over one connection per destination broker: partition sinks hand
//! over their next batch, and one task per broker packs the waiting batches (at most one per
//! partition, in each partition's order) into multi-partition acks=all Produce requests, several
//! in flight. Each partition gets its own outcome back; what it means (offset checks, retries)
//! belongs to `sink` and `partition`.
//!
//! Fencing: no batch is handed to a broker unless the engine's lease (`lease`) holds at that
//! moment — checked when a sink submits and again just before the request is written.
//!
//! Order: a partition's batches go out in the order they were handed over, one per request, and
//! requests reach the broker in the order they were built, so a partition's sequence numbers
//! arrive in order. A batch whose partition withdrew (its sink gave up) is never sent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{ProduceRequest, TopicName};
use kmp_protocol::produce_frame::{self, PartitionRecords, RecordsBlob};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::{Instrument, debug, info_span};

use crate::cluster::client::ClusterClient;
use crate::cluster::io_stats;
use crate::cluster::links::{Lane, Tasks};
use crate::cluster::produce::PRODUCE_TIMEOUT_MS;
use crate::copy::produce::producer_id::EngineProducer;
use crate::copy::throttle::Throttle;
use crate::error::MirrorError;
use crate::lease::Lease;

/// Produce lanes (and connections) per destination broker; a partition always uses the same one.
/// Kafka allows one batch per partition per request and answers a connection's requests one at
/// a time: two lanes let the broker append two requests at once.
pub const LANES_PER_BROKER: usize = 2;

/// How batches are packed.
#[derive(Debug, Clone, Copy)]
pub struct ProduceSettings {
    /// Produce requests in flight per destination broker.
    pub max_in_flight_requests: usize,
    /// Bytes of batches packed into one request (a single larger batch still goes alone).
    pub request_max_bytes: usize,
}

impl Default for ProduceSettings {
    fn default() -> Self {
        Self {
            max_in_flight_requests: 5,
            request_max_bytes: 16 * 1024 * 1024,
        }
    }
}

/// What the broker answered for one partition's batch.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub error_code: i16,
    pub base_offset: i64,
    pub error_message: Option<String>,
}

pub type Reply = Result<Outcome, MirrorError>;

struct Item {
    topic: TopicName,
    partition: i32,
    records: RecordsBlob,
    reply: oneshot::Sender<Reply>,
}

/// The produce lanes of the destination, one per broker address; cheap to clone.
#[derive(Clone)]
pub struct Producers {
    inner: Arc<Inner>,
}

struct Inner {
    client: ClusterClient,
    settings: ProduceSettings,
    brokers: Tasks<Item>,
    /// Writing is allowed only while this holds.
    lease: Lease,
    /// Who the engine writes as (`copy::produce::producer_id`); set once at boot, before any mirror starts.
    identity: std::sync::OnceLock<EngineProducer>,
}

impl Producers {
    pub fn new(client: ClusterClient, settings: ProduceSettings, lease: Lease) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                settings,
                brokers: Tasks::default(),
                lease,
                identity: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Sets the producer identity every partition writes with (the first call wins).
    pub(crate) fn set_identity(&self, p: EngineProducer) {
        let _ = self.inner.identity.set(p);
    }

    /// The producer identity, once the engine booted.
    pub(crate) fn identity(&self) -> Result<EngineProducer, MirrorError> {
        self.inner
            .identity
            .get()
            .copied()
            .ok_or_else(|| MirrorError::Invariant("no producer identity before boot".into()))
    }

    /// Whether this engine may write now (its lease holds): DeleteRecords and other writes
    /// that do not go through a lane ask here.
    pub(crate) fn may_write(&self) -> bool {
        self.inner.lease.holds()
    }

    /// Whether this engine's term is over (its lease revoked): a write refused because the lease
    /// only lapsed for now is retried, one refused after this is final.
    pub(crate) fn term_over(&self) -> bool {
        self.inner.lease.is_revoked()
    }

    /// Hands `records` for `topic`-`partition` to broker `addr`'s lane; the receiver gets the
    /// broker's answer (dropping it withdraws the batch if it was not sent yet).
    pub fn submit(&self, addr: &str, topic: TopicName, partition: i32, records: RecordsBlob) -> oneshot::Receiver<Reply> {
        let lane = crate::copy::fetch::session::lane_of(topic.0.as_bytes(), partition, LANES_PER_BROKER);
        let (tx, rx) = oneshot::channel();
        if !self.inner.lease.holds() {
            let _ = tx.send(Err(MirrorError::Fenced));
            return rx;
        }
        let item = Item {
            topic,
            partition,
            records,
            reply: tx,
        };
        // If even a fresh lane would not take the item, it is dropped: the receiver reports a
        // closed lane.
        let _ = self.inner.brokers.send(addr, lane, item, || self.start(addr, lane));
        rx
    }

    /// Spawns the lane task of `(addr, lane)`.
    fn start(&self, addr: &str, lane: u8) -> mpsc::UnboundedSender<Item> {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = BrokerLane {
            addr: addr.to_owned(),
            lane,
            client: self.inner.client.clone(),
            settings: self.inner.settings,
            lease: self.inner.lease.clone(),
            throttle: Arc::default(),
        };
        tokio::spawn(task.run(rx).instrument(info_span!("produce_lane", broker = %addr, lane)));
        tx
    }
}

struct BrokerLane {
    addr: String,
    lane: u8,
    client: ClusterClient,
    settings: ProduceSettings,
    lease: Lease,
    /// The broker's quota throttle on this lane's connection: the next request waits it out.
    throttle: Arc<Throttle>,
}

/// Fails every batch of `batch` with `e` (whether they were written is unknown).
fn fail(batch: Vec<Item>, e: &MirrorError) {
    let text = e.to_string();
    for i in batch {
        let _ = i.reply.send(Err(MirrorError::aborted("destination", text.clone())));
    }
}

impl BrokerLane {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Item>) {
        let slots = Arc::new(Semaphore::new(self.settings.max_in_flight_requests.max(1)));
        let mut queue: VecDeque<Item> = VecDeque::new();
        loop {
            if queue.is_empty() {
                match rx.recv().await {
                    Some(i) => queue.push_back(i),
                    None => return,
                }
            }
            // Wait for a free request slot, collecting what arrives meanwhile.
            let permit = loop {
                tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => break p,
                        Err(_) => return,
                    },
                    i = rx.recv() => match i {
                        Some(i) => queue.push_back(i),
                        None if queue.is_empty() => return,
                        None => {}
                    },
                }
            };
            // A throttled connection sends nothing until its throttle is over (KIP-219); what
            // arrives meanwhile goes into the next request.
            self.throttle.wait().await;
            while let Ok(i) = rx.try_recv() {
                queue.push_back(i);
            }
            queue.retain(|i| !i.reply.is_closed());
            let mut batch = self.take_batch(&mut queue);
            if batch.is_empty() {
                continue;
            }
            if !self.lease.holds() {
                for i in batch {
                    let _ = i.reply.send(Err(MirrorError::Fenced));
                }
                continue;
            }
            io_stats::add(&io_stats::PRODUCE_REQUESTS, 1);
            io_stats::add(&io_stats::PRODUCE_BATCHES, batch.len() as u64);
            let submitted = async {
                let conn = self.client.link(&self.addr, Lane::Produce(self.lane)).await?;
                // The batches' records go out as segments of their own, uncopied.
                conn.submit_segments::<ProduceRequest>(produce_frame::VERSION, |id, client_id| request_segments(&batch, id, client_id))
                    .await
                    .map_err(|e| self.client.wrap(e))
            }
            .await;
            // The records are slices of whole Fetch answers (up to 32 MiB each, counted in the
            // engine's memory budget only while their partitions hold their shares): once the
            // frame is queued the request holds them until it is written, and the batches waiting
            // for the answer need only where the answer goes.
            for i in &mut batch {
                i.records = RecordsBlob::default();
            }
            match submitted {
                Ok(pending) => {
                    let client = self.client.clone();
                    let throttle = self.throttle.clone();
                    tokio::spawn(async move {
                        let resp = pending.response().await.map_err(|e| client.wrap(e));
                        if let Ok(r) = &resp {
                            throttle.note(r.throttle_time_ms, "produce");
                        }
                        dispatch(batch, resp);
                        drop(permit);
                    });
                }
                Err(e) => {
                    debug!(error = %e, "cannot send a produce request");
                    fail(batch, &e);
                }
            }
        }
    }

    /// The next request's batches: the oldest waiting batch of each partition, up to the byte
    /// limit (at least one batch).
    fn take_batch(&self, queue: &mut VecDeque<Item>) -> Vec<Item> {
        let mut seen: HashSet<(TopicName, i32)> = HashSet::new();
        let mut taken = Vec::new();
        let mut rest = VecDeque::with_capacity(queue.len());
        let mut bytes = 0usize;
        for i in queue.drain(..) {
            let k = (i.topic.clone(), i.partition);
            let fits = taken.is_empty() || bytes + i.records.len() <= self.settings.request_max_bytes;
            if fits && !seen.contains(&k) {
                bytes += i.records.len();
                seen.insert(k);
                taken.push(i);
            } else {
                // A partition's later batches must not overtake its earlier ones.
                seen.insert(k);
                rest.push_back(i);
            }
        }
        *queue = rest;
        taken
    }
}

/// The frame of one lane request carrying `batch`.
fn request_segments(batch: &[Item], correlation_id: i32, client_id: &str) -> Result<Vec<Bytes>, kmp_protocol::ProtocolError> {
    let parts: Vec<PartitionRecords<'_>> = batch
        .iter()
        .map(|i| PartitionRecords {
            topic: i.topic.0.as_str(),
            partition: i.partition,
            records: &i.records,
        })
        .collect();
    produce_frame::segments(correlation_id, client_id, -1, PRODUCE_TIMEOUT_MS, &parts)
}

fn dispatch(batch: Vec<Item>, resp: Result<kmp_protocol::kafka_protocol::messages::ProduceResponse, MirrorError>) {
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return fail(batch, &e),
    };
    let mut answers: HashMap<(TopicName, i32), Outcome> = HashMap::new();
    for t in resp.responses {
        for p in t.partition_responses {
            answers.insert(
                (t.name.clone(), p.index),
                Outcome {
                    error_code: p.error_code,
                    base_offset: p.base_offset,
                    error_message: p.error_message.map(|m| m.as_str().to_owned()),
                },
            );
        }
    }
    for i in batch {
        let answer = answers.remove(&(i.topic.clone(), i.partition)).ok_or_else(|| MirrorError::Broker {
            side: "destination",
            what: format!("produce to {}-{}: no answer for the partition", i.topic.0.as_str(), i.partition),
            code: ResponseError::UnknownTopicOrPartition.code(),
        });
        let _ = i.reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use kmp_protocol::kafka_protocol::protocol::StrBytes;

    use super::*;

    fn item(topic: &str, partition: i32, bytes: usize) -> (Item, oneshot::Receiver<Reply>) {
        let (tx, rx) = oneshot::channel();
        let i = Item {
            topic: TopicName(StrBytes::from_string(topic.to_owned())),
            partition,
            records: RecordsBlob::whole(Bytes::from(vec![0u8; bytes])),
            reply: tx,
        };
        (i, rx)
    }

    fn lane(limit: usize) -> BrokerLane {
        BrokerLane {
            addr: "b:1".into(),
            lane: 0,
            client: ClusterClient::new("destination", vec![], std::time::Duration::from_secs(1)),
            settings: ProduceSettings {
                max_in_flight_requests: 5,
                request_max_bytes: limit,
            },
            lease: Lease::forever(),
            throttle: Arc::default(),
        }
    }

    fn keys(items: &[Item]) -> Vec<(String, i32, usize)> {
        items.iter().map(|i| (i.topic.0.to_string(), i.partition, i.records.len())).collect()
    }

    #[test]
    fn a_request_takes_one_batch_per_partition_and_never_lets_a_later_batch_overtake() {
        let mut queue = VecDeque::new();
        let mut keep = Vec::new();
        for (t, p, n) in [("a", 0, 1), ("a", 0, 2), ("a", 1, 3), ("b", 0, 4), ("a", 1, 5)] {
            let (i, rx) = item(t, p, n);
            queue.push_back(i);
            keep.push(rx);
        }
        let l = lane(1 << 20);
        assert_eq!(
            keys(&l.take_batch(&mut queue)),
            vec![("a".into(), 0, 1), ("a".into(), 1, 3), ("b".into(), 0, 4)]
        );
        assert_eq!(keys(&l.take_batch(&mut queue)), vec![("a".into(), 0, 2), ("a".into(), 1, 5)]);
        assert!(queue.is_empty());
    }

    #[test]
    fn the_byte_limit_defers_batches_but_a_single_large_batch_still_goes() {
        let mut queue = VecDeque::new();
        let mut keep = Vec::new();
        for (t, p, n) in [("a", 0, 100), ("a", 1, 50), ("a", 2, 10), ("a", 1, 1)] {
            let (i, rx) = item(t, p, n);
            queue.push_back(i);
            keep.push(rx);
        }
        let l = lane(60);
        assert_eq!(keys(&l.take_batch(&mut queue)), vec![("a".into(), 0, 100)], "larger than the limit, alone");
        assert_eq!(keys(&l.take_batch(&mut queue)), vec![("a".into(), 1, 50), ("a".into(), 2, 10)]);
        assert_eq!(keys(&l.take_batch(&mut queue)), vec![("a".into(), 1, 1)]);
    }
}
