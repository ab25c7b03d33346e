//! The Produce requests the engine builds whole (not through the produce lanes' frame encoder):
//! an acks=all Produce of one batch blob per partition, as the state store writes it, and the
//! version and broker-side timeout every engine Produce uses. Sending mirrored data through
//! per-broker lanes is `copy::produce::mux`'s.

use bytes::Bytes;
use kmp_protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kmp_protocol::kafka_protocol::messages::{ProduceRequest, TopicName};
use kmp_protocol::produce_frame;

/// The engine's Produce version (its lanes' requests are encoded by `produce_frame`).
pub(crate) const PRODUCE_VERSION: i16 = produce_frame::VERSION;
/// Broker-side timeout of the engine's acks=all Produce and DeleteRecords requests (ms).
pub(crate) const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// An acks=all Produce of one batch blob to one partition (the state store's writes).
pub(crate) fn produce_request(topic: TopicName, partition: i32, records: Bytes) -> ProduceRequest {
    request_of([(&topic, partition, &records)])
}

/// An acks=all Produce of one batch blob per `(topic, partition)`.
fn request_of<'a>(batches: impl IntoIterator<Item = (&'a TopicName, i32, &'a Bytes)>) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (topic, partition, records) in batches {
        let mut pd = PartitionProduceData::default();
        pd.index = partition;
        pd.records = Some(records.clone());
        match topics.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t.partition_data.push(pd),
            None => {
                let mut td = TopicProduceData::default();
                td.name = topic.clone();
                td.partition_data = vec![pd];
                topics.push(td);
            }
        }
    }
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = PRODUCE_TIMEOUT_MS;
    req.topic_data = topics;
    req
}
