//! Transaction markers on the destination checked against what they must be: the one an
//! earlier attempt's EndTxn put at the source marker's offset, and the last batch a resuming
//! attempt finds below the destination log end when it is a marker (it must be the source's
//! marker at that offset, of the same kind). A marker written by the destination's coordinator
//! on its own (a transaction that outlived `transaction.max.timeout.ms`) or by anyone else is
//! `Diverged`: the partition fails for good instead of resuming past an offset whose record the
//! destination never got.

use kmp_protocol::batch::BatchHeader;
use kmp_protocol::control::{Marker, marker};
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::client::ClusterClient;
use crate::cluster::fetch::{FetchAt, fetch};
use crate::error::MirrorError;

/// Bytes read to find the batch at one offset (a marker batch is a few dozen bytes; a larger
/// data batch there comes whole anyway).
const READ_BYTES: i32 = 64 * 1024;

/// What the batch holding offset `at` of a partition is: a marker (of which producer, which
/// kind), other data, or nothing (below the log start, or past the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtOffset {
    Marker { producer_id: i64, marker: Marker },
    Data,
    Nothing,
}

/// Reads the batch holding offset `at` on `side` (`conn`: the partition leader).
pub(crate) async fn at_offset(
    conn: &SharedConnection,
    side: &'static str,
    topic: &str,
    topic_id: [u8; 16],
    partition: i32,
    at: i64,
) -> Result<AtOffset, MirrorError> {
    let fetched = fetch(
        conn,
        FetchAt {
            side,
            topic,
            topic_id,
            partition,
            offset: at,
            leader_epoch: -1,
            max_bytes: READ_BYTES,
            max_wait_ms: 0,
        },
    )
    .await?;
    let wrap = |e| {
        if side == "source" {
            MirrorError::Source(e)
        } else {
            MirrorError::Destination(e)
        }
    };
    let Some((h, b)) = fetched
        .batches
        .iter()
        .find(|(h, _): &&(BatchHeader, _)| h.base_offset <= at && at < h.next_offset())
    else {
        return Ok(AtOffset::Nothing);
    };
    if !h.is_control() || h.records_count == 0 {
        return Ok(AtOffset::Data);
    }
    Ok(AtOffset::Marker {
        producer_id: h.producer_id,
        marker: marker(b, h).map_err(wrap)?,
    })
}

fn kind(commit: bool) -> Marker {
    if commit { Marker::Commit } else { Marker::Abort }
}

/// The destination holds at `at` the marker of producer `producer_id` ending its transaction as
/// `commit` says (an earlier attempt's EndTxn), and nothing else.
pub(crate) async fn expect_own(
    leader: &SharedConnection,
    topic: &str,
    topic_id: [u8; 16],
    partition: i32,
    at: i64,
    producer_id: i64,
    commit: bool,
) -> Result<(), MirrorError> {
    match at_offset(leader, "destination", topic, topic_id, partition, at).await? {
        AtOffset::Marker { producer_id: p, marker: m } if p == producer_id && m == kind(commit) => Ok(()),
        found => Err(MirrorError::Diverged(format!(
            "{topic}-{partition}: the destination holds {found:?} at offset {at}, where the source's transaction marker goes ({:?} of destination producer {producer_id})",
            kind(commit)
        ))),
    }
}

/// The destination's last offset, as the source numbers it and as the destination does (they
/// differ by the partition's shift, `copy::shift`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LastOffset {
    pub source: i64,
    pub destination: i64,
}

/// A resuming attempt's check of the destination's last offset `last` when it holds a marker:
/// the source (`source`; the topic id the mirror knows, if it does) must hold a marker of the
/// same kind there. Nothing to check when the destination's last batch is data, or when the source
/// no longer holds the offset (retention moved past it).
pub(crate) async fn check_last(
    destination: &SharedConnection,
    dest_topic_id: [u8; 16],
    source: &ClusterClient,
    known_source_topic_id: Option<[u8; 16]>,
    topic: &str,
    partition: i32,
    at: LastOffset,
) -> Result<(), MirrorError> {
    let last = at.source;
    let AtOffset::Marker { marker: ours, .. } = at_offset(destination, "destination", topic, dest_topic_id, partition, at.destination).await? else {
        return Ok(());
    };
    // The source is asked only now: a partition whose source topic was deleted must reach the
    // copy loop, which fails it for that reason (a deleted or replaced topic is not checked here).
    let at_source = async {
        let (conn, _) = source.leader_link(topic, partition).await?;
        let id = match known_source_topic_id {
            Some(id) => id,
            None => source.layout(topic).await?.topic_id,
        };
        at_offset(&conn, "source", topic, id, partition, last).await
    };
    match at_source.await {
        Ok(AtOffset::Marker { marker: theirs, .. }) if theirs == ours => Ok(()),
        // OFFSET_OUT_OF_RANGE: deleted on the source; UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID:
        // the topic is gone (the copy loop fails the partition for it).
        Ok(AtOffset::Nothing) | Err(MirrorError::Broker { code: 1 | 3 | 100, .. }) => Ok(()),
        Ok(found) => Err(MirrorError::Diverged(format!(
            "{topic}-{partition}: the destination ends with a {ours:?} marker at offset {last}, where the source holds {found:?} \
             (a destination transaction ended by its coordinator, e.g. after transaction.max.timeout.ms, or by another writer)"
        ))),
        Err(e) => Err(e),
    }
}
