//! The mirror engine: background streams that copy source-cluster partitions into the
//! destination so every record keeps its source offset (KIP-1279 §5, our §11.3 design).
//!
//! Entry point [`start`] takes mirror definitions as plain data, so definitions from the config
//! file and (later) from the admin APIs drive the same engine. Module map: `cluster` (reaching a
//! cluster), `topics` (destination topic creation and ownership), `state` (the state topic),
//! `source` (read_committed fetch), `plan` (offset-preserving plan, sans-io), `sink` (pipelined
//! idempotent producer), `budget` (engine-wide memory bound), `partition` (one partition's loop),
//! `select` (which topics), `status` (progress). Client-facing proxying does not belong here.

mod budget;
mod cluster;
mod error;
mod partition;
mod plan;
mod registry;
mod select;
mod sink;
mod source;
mod state;
mod status;
mod topics;

use std::sync::Arc;
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

pub use budget::Budget;
pub use cluster::ClusterClient;
pub use error::MirrorError;
pub use state::{MirrorRecord, PartitionRecord, StateStore, TopicRecord};
pub use registry::{MirrorTopic, MirrorTopics};
pub use status::{PartitionKey, PartitionState, PartitionStatus, StatusBoard, now_ms};
pub use topics::{EXCLUDED_CONFIGS, FORCED_CONFIGS};

use partition::PartitionTask;
use select::TopicSelector;
use topics::Prepared;

/// Engine version, reported by the proxy.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A running engine: what the proxy reports from.
#[derive(Debug, Clone)]
pub struct Engine {
    pub status: StatusBoard,
    pub budget: Budget,
    /// Destination topics owned by mirrors (read-only for clients).
    pub topics: MirrorTopics,
    /// Closed once the engine wrote its final state after `stop` (or never started).
    done: watch::Receiver<()>,
}

impl Engine {
    /// An engine with no mirrors (nothing configured).
    pub fn idle(engine: &EngineConfig) -> Self {
        let (_, done) = watch::channel(());
        Self { status: StatusBoard::default(), budget: Budget::new(engine.max_buffer_bytes), topics: MirrorTopics::default(), done }
    }

    /// Resolves once the engine has written its final state after the stop signal.
    pub async fn stopped(&self) {
        let mut done = self.done.clone();
        while done.changed().await.is_ok() {}
    }
}

/// Starts the engine in the background: opens the state topic on the destination (retrying
/// until it is reachable), records the mirror definitions, then starts every mirror's topics.
pub fn start(
    engine: &EngineConfig,
    mirrors: Vec<MirrorConfig>,
    destination_bootstrap: Vec<String>,
    timeout: Duration,
    stop: watch::Receiver<bool>,
) -> Engine {
    let (done_tx, done) = watch::channel(());
    let handle = Engine { done, ..Engine::idle(engine) };
    let destination = ClusterClient::new("destination", destination_bootstrap, timeout);
    let shared = Shared {
        destination,
        status: handle.status.clone(),
        budget: handle.budget.clone(),
        topics: handle.topics.clone(),
        max_in_flight: usize::from(engine.max_in_flight_per_partition),
        stop,
    };
    let (state_topic, flush) = (engine.state_topic.clone(), Duration::from_millis(engine.state_flush_interval_ms));
    tokio::spawn(boot(shared, state_topic, flush, mirrors, done_tx).instrument(info_span!("mirror-engine")));
    handle
}

/// What every mirror shares.
#[derive(Clone)]
struct Shared {
    destination: ClusterClient,
    status: StatusBoard,
    budget: Budget,
    topics: MirrorTopics,
    max_in_flight: usize,
    stop: watch::Receiver<bool>,
}

/// `done` is dropped when the final state is written (or the engine stops before starting).
async fn boot(shared: Shared, state_topic: String, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    let mut backoff = Duration::from_millis(200);
    let store = loop {
        match StateStore::open(shared.destination.clone(), &state_topic).await {
            Ok(s) => break Arc::new(s),
            Err(e) => {
                warn!(error = %e, topic = %state_topic, "cannot open the mirror state topic yet; retrying");
                let mut stop = shared.stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    };
    info!(topic = %state_topic, mirrors = store.mirrors().len(), "mirror state loaded");
    // Topics the state records as a mirror's are read-only from now on, before any is prepared.
    for (topic, owner) in store.owned_topics() {
        shared.topics.register(&topic, &owner.mirror, [0; 16]);
    }
    record_definitions(&store, &mirrors).await;
    let persist = state::persist(store.clone(), shared.status.clone(), flush, shared.stop.clone());
    tokio::spawn(
        async move {
            persist.await;
            drop(done);
        }
        .in_current_span(),
    );
    for m in mirrors {
        let source = ClusterClient::new("source", m.source_bootstrap_servers.clone(), shared.destination.timeout());
        let selector = match TopicSelector::new(&m.topics, &m.include, &m.exclude) {
            Ok(s) => s,
            Err(e) => {
                warn!(mirror = %m.name, error = %e, "mirror not started");
                continue;
            }
        };
        let ctx = TopicContext { mirror: m, source, shared: shared.clone(), store: store.clone() };
        tokio::spawn(discover(ctx, selector).instrument(info_span!("mirror-topics")));
    }
}

/// Stores the config's mirror definitions; drops stored config mirrors no longer declared.
async fn record_definitions(store: &StateStore, mirrors: &[MirrorConfig]) {
    for m in mirrors {
        let r = MirrorRecord { origin: "config".into(), definition: m.clone() };
        if let Err(e) = store.put_mirror(&r).await {
            warn!(mirror = %m.name, error = %e, "cannot record the mirror definition");
        }
    }
    for stale in store.mirrors().into_iter().filter(|r| r.origin == "config" && !mirrors.iter().any(|m| m.name == r.definition.name)) {
        info!(mirror = %stale.definition.name, "mirror no longer in the config; removing its stored definition (its topics stay)");
        if let Err(e) = store.delete_mirror(&stale.definition.name).await {
            warn!(error = %e, "cannot remove a stale mirror definition");
        }
    }
}

/// What starting one topic of a mirror needs.
#[derive(Clone)]
struct TopicContext {
    mirror: MirrorConfig,
    source: ClusterClient,
    shared: Shared,
    store: Arc<StateStore>,
}

/// Starts the named topics, then (with include patterns) looks for new matching source topics
/// every `topic_refresh_interval_ms` until stopped.
async fn discover(ctx: TopicContext, selector: TopicSelector) {
    let mut started = std::collections::HashSet::new();
    for topic in selector.named() {
        started.insert(topic.clone());
        start_topic(ctx.clone(), topic.clone());
    }
    if !selector.has_patterns() {
        return;
    }
    let interval = Duration::from_millis(ctx.mirror.topic_refresh_interval_ms);
    let mut stop = ctx.shared.stop.clone();
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
            _ = stop.changed() => return,
        }
    }
}

/// Prepares the destination topic, then spawns one task per partition.
fn start_topic(ctx: TopicContext, topic: String) {
    let span = info_span!("mirror", mirror = %ctx.mirror.name, %topic);
    tokio::spawn(
        async move {
            let status = ctx.shared.status.clone();
            let m = &ctx.mirror;
            if let Some(n) = all_partitions_failed_for_good(&ctx, &topic) {
                // E.g. the source topic was deleted before this restart: nothing to prepare.
                for p in 0..n as i32 {
                    start_partition(&ctx, &topic, p);
                }
                return;
            }
            match prepare_topic(&ctx, &topic).await {
                Ok(partitions) => {
                    for p in 0..partitions as i32 {
                        start_partition(&ctx, &topic, p);
                    }
                }
                Err(e) => {
                    warn!(error = %e, "mirror topic FAILED");
                    status.update(&(m.name.clone(), topic.clone(), -1), |s| {
                        s.state = PartitionState::Failed;
                        s.last_error = Some(e.to_string());
                    });
                }
            }
        }
        .instrument(span),
    );
}

/// Creates or adopts the destination topic (retrying transient errors) and records ownership.
async fn prepare_topic(ctx: &TopicContext, topic: &str) -> Result<usize, MirrorError> {
    let m = &ctx.mirror;
    let owner = ctx.store.topic_owner(topic);
    if let Some(o) = &owner
        && o.mirror != m.name
    {
        return Err(MirrorError::DestinationConflict { topic: topic.to_owned(), reason: format!("the state topic records it as mirror `{}`'s", o.mirror) });
    }
    let mut backoff = Duration::from_millis(200);
    let prepared = loop {
        match topics::ensure_destination_topic(&ctx.source, &ctx.shared.destination, topic, m.replication_factor, owner.is_some()).await {
            Ok(p) => break p,
            Err(e) if e.is_retriable() => {
                warn!(error = %e, "cannot prepare the destination topic yet; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    };
    register_topic_id(ctx, topic).await;
    let how = match prepared {
        Prepared::Owned(n) => return Ok(n),
        Prepared::Created(_) => "created",
        Prepared::AdoptedEmpty(_) => "adopted",
    };
    info!(how, partitions = prepared.partitions(), "destination topic is the mirror's");
    let record = TopicRecord { mirror: m.name.clone(), partitions: prepared.partitions(), how: how.into(), at_ms: now_ms() };
    // Without this record a restart would see a non-empty topic it does not own and refuse it.
    let mut backoff = Duration::from_millis(200);
    while let Err(e) = ctx.store.put_topic(topic, &record).await {
        warn!(error = %e, "cannot record topic ownership yet; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    Ok(prepared.partitions())
}

/// Registers `topic` as read-only with its destination topic id (Produce v13+ names topics by
/// id). A just-created topic may take a moment to appear in metadata: retried for a while; until
/// the id is known, Produce by name is still refused.
async fn register_topic_id(ctx: &TopicContext, topic: &str) {
    let m = &ctx.mirror;
    ctx.shared.topics.register(topic, &m.name, [0; 16]);
    let mut backoff = Duration::from_millis(50);
    for _ in 0..40 {
        match ctx.shared.destination.layout(topic).await {
            Ok(l) if l.error_code == 0 && l.topic_id != [0; 16] => {
                ctx.shared.topics.register(topic, &m.name, l.topic_id);
                return;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot read the destination topic id yet"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    warn!("destination topic id still unknown; Produce requests naming the topic by id are not checked");
}

/// The partition count of an owned topic whose every partition is stored as FAILED for good.
fn all_partitions_failed_for_good(ctx: &TopicContext, topic: &str) -> Option<usize> {
    let owner = ctx.store.topic_owner(topic).filter(|o| o.mirror == ctx.mirror.name)?;
    let all = (0..owner.partitions as i32).all(|p| ctx.store.partition(topic, p).is_some_and(|r| r.sticky && r.mirror == ctx.mirror.name));
    (all && owner.partitions > 0).then_some(owner.partitions)
}

/// Spawns one partition's task, or restores its sticky FAILED state from the state topic.
fn start_partition(ctx: &TopicContext, topic: &str, p: i32) {
    let m = &ctx.mirror;
    let key = (m.name.clone(), topic.to_owned(), p);
    let stored = ctx.store.partition(topic, p).filter(|r| r.mirror == m.name);
    if let Some(r) = &stored {
        ctx.shared.status.update(&key, |s| {
            s.records_mirrored = r.records;
            s.filler_records = r.fillers;
            s.bytes_mirrored = r.bytes;
            if r.sticky {
                s.state = PartitionState::Failed;
                s.last_error = r.error.clone();
                s.sticky = true;
            }
        });
        if r.sticky {
            warn!(partition = p, error = ?r.error, "partition stays FAILED (stored state)");
            return;
        }
    }
    let task = PartitionTask {
        key,
        source: ctx.source.clone(),
        destination: ctx.shared.destination.clone(),
        fetch_max_bytes: m.fetch_max_bytes,
        max_filler_batch_records: m.max_filler_batch_records,
        max_fill_offsets: m.max_fill_offsets,
        max_in_flight: ctx.shared.max_in_flight,
        budget: ctx.shared.budget.clone(),
        status: ctx.shared.status.clone(),
    };
    tokio::spawn(task.run(ctx.shared.stop.clone()).instrument(info_span!("partition", partition = p)));
}
