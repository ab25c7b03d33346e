//! Stopping a mirror topic (failover): the destination transactions of the engine still open on
//! its partitions are aborted before the topic becomes writable, so its `read_committed` readers
//! never see records of a transaction the source had not decided and its last stable offset is
//! not held by a transaction nobody will end. Runs once every partition halted (whatever state
//! it was in: copying, paused or failed), from the stop's final pass.

use std::time::Duration;

use kmp_protocol::shared_client::SharedConnection;
use tracing::{info, warn};

use super::requests;
use super::{RETRY_LATER, TXN_ID_PREFIX, WAIT_LIMIT, retry_concurrent};
use crate::cluster::client::ClusterClient;
use crate::cluster::links::Lane;
use crate::copy::produce::mux::Producers;
use crate::error::MirrorError;
use kmp_protocol::Backoff;

/// Tries per partition (retriable errors, with backoff) before the stop reports it cannot.
const TRIES: usize = 5;

/// [`abort_open`] for every partition of `topic` on the destination.
pub async fn abort_topic(destination: &ClusterClient, producers: &Producers, topic: &str) -> Result<(), MirrorError> {
    let layout = destination.layout_now(topic).await?;
    for &(p, _, _) in &layout.partitions {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut tries = 0;
        loop {
            let attempt = async {
                let (conn, _) = destination.leader_link(topic, p).await?;
                abort_open(destination, producers, &conn, topic, p).await
            };
            match attempt.await {
                Ok(()) => break,
                Err(e) if e.is_retriable() && tries + 1 < TRIES => {
                    tries += 1;
                    tokio::time::sleep(backoff.next_pause()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Aborts every destination transaction of the engine's still open on `topic`-`partition`
/// (leader connection `leader`) and waits until none is: a stopped mirror topic keeps no
/// transaction the source had not decided. An open transaction of another transactional id (not
/// the engine's; a mirror topic is written only by the engine) is left alone and reported.
pub(crate) async fn abort_open(
    destination: &ClusterClient,
    producers: &Producers,
    leader: &SharedConnection,
    topic: &str,
    partition: i32,
) -> Result<(), MirrorError> {
    let open: Vec<i64> = crate::cluster::producers::describe(leader, topic, partition)
        .await?
        .iter()
        .filter(|p| p.current_txn_start_offset >= 0)
        .map(|p| p.producer_id)
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::new();
    for (_, addr) in crate::cluster::groups::brokers(destination).await? {
        let conn = destination.link(&addr, Lane::Control).await?;
        ids.extend(requests::list(&conn, &open).await?);
    }
    for (id, pid) in &ids {
        if !id.starts_with(TXN_ID_PREFIX) {
            warn!(id, pid, "a transaction of another producer is open on a mirror topic; left as it is");
            continue;
        }
        let any = destination.link_any().await?;
        let coordinator = destination.link(&requests::coordinator(&any, id).await?, Lane::Control).await?;
        let Some(s) = requests::describe(&coordinator, id).await? else { continue };
        if s.state != "Ongoing" {
            continue;
        }
        info!(id, "aborting a destination transaction the source had not decided at stop");
        retry_concurrent(producers, || requests::end(&coordinator, id, (s.producer_id, s.producer_epoch), false)).await?;
    }
    let ours: Vec<i64> = ids.iter().filter(|(id, _)| id.starts_with(TXN_ID_PREFIX)).map(|(_, p)| *p).collect();
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let still = crate::cluster::producers::describe(leader, topic, partition)
            .await?
            .iter()
            .any(|p| p.current_txn_start_offset >= 0 && ours.contains(&p.producer_id));
        if !still {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("{topic}-{partition}: aborted transactions still open"),
                code: RETRY_LATER,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
