//! The engine's transactional ids (`kmp-engine.txn.…`: the destination transactions that replay
//! source transactions, `kmp_mirror_engine::copy::txn`) in the transaction APIs. A client that
//! could use one could fence the engine's producer (InitProducerId aborts the open transaction),
//! end its transaction early (EndTxn: a marker where the source has a record, the partition
//! FAILs) or add its own offsets to it. InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
//! EndTxn and TxnOffsetCommit naming one are refused whole with
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53); DescribeTransactions and FindCoordinator for
//! transactional ids lose only the engine's ids, answered with that error next to the broker's
//! answer to the rest. Produce is not among them: a mirror topic refuses every client write, and a stopped
//! one's engine transactions were aborted (a Produce under the id then fails the broker's
//! transaction verification).

use bytes::Bytes;
use kmp_mirror_engine::TXN_ID_PREFIX;
use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse, add_partitions_to_txn_response, describe_transactions_response, txn_offset_commit_response,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use crate::filters::refuse::text::take_refused;
use crate::filters::refuse::{Decision, refuse_whole, split_by};

/// FindCoordinator's key type of a transactional id.
const TXN_KEY: i8 = 1;

fn refused() -> i16 {
    ResponseError::TransactionalIdAuthorizationFailed.code()
}

fn text() -> StrBytes {
    StrBytes::from_static_str("this transactional id is kafka-mirror-proxy's engine's; clients may not use it")
}

fn ours(id: &str) -> bool {
    id.starts_with(TXN_ID_PREFIX)
}

/// Whether `key` is a transaction API this filter looks at (FindCoordinator is `find_coordinator`'s).
pub(super) fn txn_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::InitProducerId | ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn | ApiKey::EndTxn | ApiKey::TxnOffsetCommit | ApiKey::DescribeTransactions
    )
}

/// Whether `frame` may name an engine transactional id. Allocation-free.
pub(super) fn may_name(frame: &[u8]) -> bool {
    memchr::memmem::find(frame, TXN_ID_PREFIX.as_bytes()).is_some()
}

fn is_ours(t: &TransactionalId) -> bool {
    ours(t.as_str())
}

/// Decides one transaction request the predicate let through.
pub(super) fn check(frame: &Bytes, key: ApiKey, version: i16) -> Result<Decision, ProtocolError> {
    match key {
        ApiKey::InitProducerId => refuse_whole::<InitProducerIdRequest, InitProducerIdResponse>(
            frame,
            key,
            version,
            |r| r.transactional_id.as_ref().is_some_and(is_ours),
            |_, resp| {
                resp.error_code = refused();
                resp.producer_id = ProducerId(-1);
                resp.producer_epoch = -1;
            },
        ),
        ApiKey::AddPartitionsToTxn => refuse_whole::<AddPartitionsToTxnRequest, AddPartitionsToTxnResponse>(
            frame,
            key,
            version,
            |r| is_ours(&r.v3_and_below_transactional_id) || r.transactions.iter().any(|t| is_ours(&t.transactional_id)),
            |r, resp| {
                resp.error_code = refused();
                for t in &r.v3_and_below_topics {
                    let mut rt = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                    rt.name = t.name.clone();
                    rt.results_by_partition = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                            rp.partition_index = *p;
                            rp.partition_error_code = refused();
                            rp
                        })
                        .collect();
                    resp.results_by_topic_v3_and_below.push(rt);
                }
            },
        ),
        ApiKey::AddOffsetsToTxn => refuse_whole::<AddOffsetsToTxnRequest, AddOffsetsToTxnResponse>(
            frame,
            key,
            version,
            |r| is_ours(&r.transactional_id),
            |_, resp| resp.error_code = refused(),
        ),
        ApiKey::EndTxn => {
            refuse_whole::<EndTxnRequest, EndTxnResponse>(frame, key, version, |r| is_ours(&r.transactional_id), |_, resp| resp.error_code = refused())
        }
        ApiKey::TxnOffsetCommit => refuse_whole::<TxnOffsetCommitRequest, TxnOffsetCommitResponse>(
            frame,
            key,
            version,
            |r| is_ours(&r.transactional_id),
            |r, resp| {
                for t in &r.topics {
                    let mut rt = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                            rp.partition_index = p.partition_index;
                            rp.error_code = refused();
                            rp
                        })
                        .collect();
                    resp.topics.push(rt);
                }
            },
        ),
        ApiKey::DescribeTransactions => split_by::<DescribeTransactionsRequest, DescribeTransactionsResponse, TransactionalId>(
            frame,
            key,
            version,
            |req| take_refused(&mut req.transactional_ids, |t| is_ours(t).then(|| (t.clone(), text()))),
            |req| req.transactional_ids.len(),
            |resp, refused_ids| {
                for (t, _) in refused_ids {
                    let mut s = describe_transactions_response::TransactionState::default();
                    s.transactional_id = t.clone();
                    s.error_code = refused();
                    s.producer_id = ProducerId(-1);
                    resp.transaction_states.push(s);
                }
            },
        ),
        _ => Ok(Decision::Forward),
    }
}

/// FindCoordinator for an engine transactional id (key type 1): v0-3 (one key) refused whole,
/// v4+ loses the engine's keys, answered next to the broker's answer to the rest.
pub(super) fn find_coordinator(frame: &Bytes, version: i16) -> Result<Decision, ProtocolError> {
    super::groups::refuse_coordinator_keys(frame, version, TXN_KEY, ours, refused(), text())
}
