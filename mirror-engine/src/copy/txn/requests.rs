//! The transaction requests the engine sends to the destination, one function each: finding a
//! transactional id's coordinator, InitProducerId, DescribeTransactions, AddPartitionsToTxn,
//! EndTxn, ListTransactions and a transactional Produce (DescribeProducers is `cluster::producers`). Versions are the
//! ones a throw-away spike checked against Kafka 4.1.2 (docs/design.md): AddPartitionsToTxn v3
//! and EndTxn v3 keep the producer epoch across transactions (transaction version 1 semantics),
//! which lets a restarted engine continue a transaction it opened before.

use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kmp_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ListTransactionsRequest, ProducerId,
    TopicName, TransactionalId,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::produce_frame::RecordsBlob;
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::produce::{PRODUCE_VERSION, produce_request};
use crate::error::MirrorError;

/// How long a destination transaction may stay open before its coordinator aborts it: Kafka's
/// default `transaction.max.timeout.ms` (15 min), the longest a source broker with default
/// settings lets a source transaction stay open too.
pub(crate) const TRANSACTION_TIMEOUT_MS: i32 = 900_000;
/// FindCoordinator's key type of a transactional id.
const TRANSACTION_KEY: i8 = 1;
/// TRANSACTIONAL_ID_NOT_FOUND: no transaction was ever started under the id.
pub(crate) const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

fn tid(t: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(t.to_owned()))
}

/// The error for a refusal: a fenced producer, a stale epoch or a transaction in a state the
/// engine did not leave it in means someone else ended or took over the engine's transaction
/// (the destination's coordinator after `transaction.max.timeout.ms`, or another writer): the
/// partition fails for good (`Diverged`) rather than write on.
fn broker(what: impl Into<String>, code: i16) -> MirrorError {
    const TAKEN_OVER: [ResponseError; 3] = [
        ResponseError::ProducerFenced,
        ResponseError::InvalidProducerEpoch,
        ResponseError::InvalidTxnState,
    ];
    let what = what.into();
    if TAKEN_OVER.iter().any(|e| e.code() == code) {
        return MirrorError::Diverged(format!(
            "{what}: Kafka error {code} — the engine's destination transaction was ended or fenced by someone else (its coordinator after transaction.max.timeout.ms?)"
        ));
    }
    MirrorError::Broker {
        side: "destination",
        what,
        code,
    }
}

const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();
const NOT_LEADER: i16 = ResponseError::NotLeaderOrFollower.code();

fn wire(e: kmp_protocol::ProtocolError) -> MirrorError {
    MirrorError::Destination(e)
}

/// `host:port` of the coordinator of transactional id `t`.
pub(crate) async fn coordinator(conn: &SharedConnection, t: &str) -> Result<String, MirrorError> {
    let mut req = FindCoordinatorRequest::default();
    req.key_type = TRANSACTION_KEY;
    req.coordinator_keys = vec![StrBytes::from_string(t.to_owned())];
    let resp = conn.call(&req, 4).await.map_err(wire)?;
    let c = resp
        .coordinators
        .first()
        .ok_or_else(|| broker(format!("FindCoordinator {t}: no answer"), COORDINATOR_NOT_AVAILABLE))?;
    if c.error_code != 0 {
        return Err(broker(format!("FindCoordinator {t}"), c.error_code));
    }
    Ok(format!("{}:{}", c.host.as_str(), c.port))
}

/// A producer id and epoch for transactional id `t` (on its coordinator `conn`). Aborts a
/// transaction open under `t`: only for an id with none (see `copy::txn`).
pub(crate) async fn init_producer(conn: &SharedConnection, t: &str) -> Result<(i64, i16), MirrorError> {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(tid(t));
    req.transaction_timeout_ms = TRANSACTION_TIMEOUT_MS;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let resp = conn.call(&req, 4).await.map_err(wire)?;
    if resp.error_code != 0 {
        return Err(broker(format!("InitProducerId {t}"), resp.error_code));
    }
    Ok((resp.producer_id.0, resp.producer_epoch))
}

/// What the coordinator holds for a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnState {
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// `(topic, partition)` in the ongoing transaction.
    pub partitions: Vec<(String, i32)>,
}

/// DescribeTransactions for `t` on its coordinator: `None` if the id is unknown there.
pub(crate) async fn describe(conn: &SharedConnection, t: &str) -> Result<Option<TxnState>, MirrorError> {
    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = vec![tid(t)];
    let resp = conn.call(&req, 0).await.map_err(wire)?;
    let s = resp
        .transaction_states
        .into_iter()
        .next()
        .ok_or_else(|| broker(format!("DescribeTransactions {t}: no answer"), COORDINATOR_NOT_AVAILABLE))?;
    match s.error_code {
        0 => Ok(Some(TxnState {
            state: s.transaction_state.as_str().to_owned(),
            producer_id: s.producer_id.0,
            producer_epoch: s.producer_epoch,
            partitions: s
                .topics
                .iter()
                .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.0.as_str().to_owned(), *p)))
                .collect(),
        })),
        TRANSACTIONAL_ID_NOT_FOUND => Ok(None),
        code => Err(broker(format!("DescribeTransactions {t}"), code)),
    }
}

/// AddPartitionsToTxn (v3) of one partition to `t`'s transaction.
pub(crate) async fn add_partition(conn: &SharedConnection, t: &str, producer: (i64, i16), topic: &str, partition: i32) -> Result<(), MirrorError> {
    let mut tp = AddPartitionsToTxnTopic::default();
    tp.name = TopicName(StrBytes::from_string(topic.to_owned()));
    tp.partitions = vec![partition];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = tid(t);
    req.v3_and_below_producer_id = ProducerId(producer.0);
    req.v3_and_below_producer_epoch = producer.1;
    req.v3_and_below_topics = vec![tp];
    let resp = conn.call(&req, 3).await.map_err(wire)?;
    let code = resp
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|r| r.results_by_partition.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| p.partition_error_code)
        .ok_or_else(|| {
            broker(
                format!("AddPartitionsToTxn {t}: no answer for the partition"),
                if resp.error_code != 0 { resp.error_code } else { COORDINATOR_NOT_AVAILABLE },
            )
        })?;
    if code != 0 {
        return Err(broker(format!("AddPartitionsToTxn {t} {topic}-{partition}"), code));
    }
    Ok(())
}

/// EndTxn (v3): commits or aborts `t`'s transaction (its markers are written afterwards).
pub(crate) async fn end(conn: &SharedConnection, t: &str, producer: (i64, i16), commit: bool) -> Result<(), MirrorError> {
    let mut req = EndTxnRequest::default();
    req.transactional_id = tid(t);
    req.producer_id = ProducerId(producer.0);
    req.producer_epoch = producer.1;
    req.committed = commit;
    let resp = conn.call(&req, 3).await.map_err(wire)?;
    if resp.error_code != 0 {
        return Err(broker(format!("EndTxn {t} ({})", if commit { "commit" } else { "abort" }), resp.error_code));
    }
    Ok(())
}

/// The transactional ids (with their producer ids) a broker `conn` coordinates for `producer_ids`.
pub(crate) async fn list(conn: &SharedConnection, producer_ids: &[i64]) -> Result<Vec<(String, i64)>, MirrorError> {
    let mut req = ListTransactionsRequest::default();
    req.producer_id_filters = producer_ids.iter().map(|p| ProducerId(*p)).collect();
    let resp = conn.call(&req, 0).await.map_err(wire)?;
    if resp.error_code != 0 {
        return Err(broker("ListTransactions", resp.error_code));
    }
    Ok(resp
        .transaction_states
        .iter()
        .map(|s| (s.transactional_id.0.as_str().to_owned(), s.producer_id.0))
        .collect())
}

/// A transactional Produce of one batch to `topic`-`partition` on its leader `conn`: the base
/// offset the broker gave it.
pub(crate) async fn produce(conn: &SharedConnection, t: &str, topic: &str, partition: i32, batch: RecordsBlob) -> Result<i64, MirrorError> {
    let mut req = produce_request(TopicName(StrBytes::from_string(topic.to_owned())), partition, batch.to_bytes());
    req.transactional_id = Some(tid(t));
    let resp = conn.call(&req, PRODUCE_VERSION).await.map_err(wire)?;
    let p = resp
        .responses
        .iter()
        .flat_map(|r| r.partition_responses.iter())
        .find(|p| p.index == partition)
        .ok_or_else(|| broker(format!("transactional produce to {topic}-{partition}: no answer"), NOT_LEADER))?;
    if p.error_code != 0 {
        return Err(broker(
            format!(
                "transactional produce to {topic}-{partition} as {t}: {}",
                p.error_message.as_ref().map_or("", |m| m.as_str())
            ),
            p.error_code,
        ));
    }
    Ok(p.base_offset)
}
