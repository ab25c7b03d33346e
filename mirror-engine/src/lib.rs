//! The mirror engine: background streams that copy source-cluster partitions into the
//! destination so every record keeps its source offset (KIP-1279 §5, our §11.3 design).
//!
//! Entry point [`start`] takes mirror definitions as plain data, so definitions from the config
//! file and (later) from the admin APIs drive the same engine. Module map: `cluster` (reaching a
//! cluster), `topics` (destination topic creation), `source` (read_committed fetch), `plan`
//! (offset-preserving plan, sans-io), `sink` (idempotent producer), `partition` (one partition's
//! loop), `select` (which topics), `status` (progress). Client-facing proxying does not belong here.

mod cluster;
mod error;
mod partition;
mod plan;
mod select;
mod sink;
mod source;
mod status;
mod topics;

use std::time::Duration;

use kmp_config::MirrorConfig;
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

pub use cluster::ClusterClient;
pub use error::MirrorError;
pub use status::{PartitionKey, PartitionState, PartitionStatus, StatusBoard, now_ms};
pub use topics::{EXCLUDED_CONFIGS, FORCED_CONFIGS};

use partition::PartitionTask;
use select::TopicSelector;

/// Engine version, reported by the proxy.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Starts every mirror's topics in the background; returns the status board they report to.
pub fn start(mirrors: Vec<MirrorConfig>, destination_bootstrap: Vec<String>, timeout: Duration, stop: watch::Receiver<bool>) -> StatusBoard {
    let status = StatusBoard::default();
    let destination = ClusterClient::new("destination", destination_bootstrap, timeout);
    for m in mirrors {
        let source = ClusterClient::new("source", m.source_bootstrap_servers.clone(), timeout);
        let selector = match TopicSelector::new(&m.topics, &m.include, &m.exclude) {
            Ok(s) => s,
            Err(e) => {
                warn!(mirror = %m.name, error = %e, "mirror not started");
                continue;
            }
        };
        let ctx = TopicContext { mirror: m, source, destination: destination.clone(), status: status.clone(), stop: stop.clone() };
        tokio::spawn(discover(ctx, selector).instrument(info_span!("mirror-topics")));
    }
    status
}

/// What starting one topic of a mirror needs.
#[derive(Clone)]
struct TopicContext {
    mirror: MirrorConfig,
    source: ClusterClient,
    destination: ClusterClient,
    status: StatusBoard,
    stop: watch::Receiver<bool>,
}

/// Starts the named topics, then (with include patterns) looks for new matching source topics
/// every `topic_refresh_interval_ms` until stopped.
async fn discover(mut ctx: TopicContext, selector: TopicSelector) {
    let mut started = std::collections::HashSet::new();
    for topic in selector.named() {
        started.insert(topic.clone());
        start_topic(ctx.clone(), topic.clone());
    }
    if !selector.has_patterns() {
        return;
    }
    let interval = Duration::from_millis(ctx.mirror.topic_refresh_interval_ms);
    loop {
        match ctx.source.topic_names().await {
            Ok(names) => {
                for topic in names {
                    if selector.matches(&topic) && started.insert(topic.clone()) {
                        info!(mirror = %ctx.mirror.name, %topic, "new source topic matches the mirror; starting it");
                        start_topic(ctx.clone(), topic);
                    }
                }
            }
            Err(e) => warn!(mirror = %ctx.mirror.name, error = %e, "cannot list source topics; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = ctx.stop.changed() => return,
        }
    }
}

/// Prepares the destination topic, then spawns one task per partition.
fn start_topic(ctx: TopicContext, topic: String) {
    let span = info_span!("mirror", mirror = %ctx.mirror.name, %topic);
    tokio::spawn(
        async move {
            let TopicContext { mirror: m, source, destination, status, stop } = ctx;
            let mut backoff = Duration::from_millis(200);
            let partitions = loop {
                match topics::ensure_destination_topic(&source, &destination, &topic, m.replication_factor).await {
                    Ok(n) => break n,
                    Err(e) if e.is_retriable() => {
                        warn!(error = %e, "cannot prepare the destination topic yet; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                    Err(e) => {
                        warn!(error = %e, "mirror topic FAILED");
                        status.update(&(m.name.clone(), topic.clone(), -1), |s| {
                            s.state = PartitionState::Failed;
                            s.last_error = Some(e.to_string());
                        });
                        return;
                    }
                }
            };
            for p in 0..partitions as i32 {
                let task = PartitionTask {
                    key: (m.name.clone(), topic.clone(), p),
                    source: source.clone(),
                    destination: destination.clone(),
                    fetch_max_bytes: m.fetch_max_bytes,
                    max_filler_batch_records: m.max_filler_batch_records,
                    max_fill_offsets: m.max_fill_offsets,
                    status: status.clone(),
                };
                tokio::spawn(task.run(stop.clone()).instrument(info_span!("partition", partition = p)));
            }
        }
        .instrument(span),
    );
}
