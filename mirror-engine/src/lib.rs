//! The mirror engine: background streams that copy source-cluster partitions into the
//! destination so every record keeps its source offset (KIP-1279 §5, our §11.3 design).
//!
//! Entry point [`start`] takes mirror definitions as plain data, so definitions from the config
//! file and (later) from the admin APIs drive the same engine. Module map: `cluster` (reaching a
//! cluster), `topics` (destination topic creation and ownership), `state` (the state topic),
//! `source` (read_committed fetch), `plan` (offset-preserving plan, sans-io), `sink` (pipelined
//! idempotent producer), `budget` (engine-wide memory bound), `partition` (one partition's loop),
//! `select` (which topics), `status` (progress), `topic_configs` (which topic configs are
//! copied), `sync` (metadata sync: group offsets, topic configs), `follow` / `followed` (an
//! instance that runs no mirrors following the state topic, [`follow`]). Client-facing proxying
//! does not belong here.

mod auto;
mod boot_gate;
mod budget;
mod catalog;
mod cluster;
mod coalesce;
mod control;
mod election;
mod error;
mod fetch_growth;
mod fetch_session;
mod follow;
mod followed;
mod followed_writes;
mod forward;
mod graceful;
mod io_stats;
mod landed;
mod lease;
mod lifecycle;
mod links;
mod mirror_settings;
mod mirrors;
mod partition;
mod plan;
mod produce_mux;
mod producer_id;
mod select;
mod share;
mod sink;
mod source;
mod sources;
mod state;
mod status;
mod sync;
#[cfg(test)]
mod test_frames;
mod topic_configs;
mod topics;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use fetch_session::FetchSessions;
use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

pub use auto::{ElectionView, EngineSlot, auto};
pub use budget::Budget;
pub use catalog::{Catalog, CatalogTopic};
pub use cluster::ClusterClient;
pub use control::{Control, Desired, LOADING, MirrorListing, PartitionDetail, TopicResult, codes};
pub use error::MirrorError;
pub use follow::FollowProgress;
pub use forward::{ForwardError, Forwarding, RequestHandler};
pub use io_stats::{IoCounters, io_counters};
pub use lease::Lease;
pub use mirrors::{MAX_MIRROR_NAME_LEN, invalid_mirror_name};
pub(crate) use share::Part;
pub use share::{Share, owner_index};
pub use state::{MirrorRecord, PartitionRecord, StateStore, TopicRecord};
pub use status::{PartitionKey, PartitionState, PartitionStatus, StatusBoard, now_ms};
pub use sync::{SyncKind, SyncStatus};
pub use topic_configs::{FORCED_CONFIGS, NEVER_COPIED};

/// Longest wait at boot for the state topic's destination id before requests are let through
/// (then it is looked up in the background).
const STATE_TOPIC_ID_WAIT: Duration = Duration::from_secs(10);

/// Engine version, reported by the proxy.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A running engine: what the proxy reports from.
#[derive(Debug, Clone)]
pub struct Engine {
    pub status: StatusBoard,
    pub budget: Budget,
    /// Destination topics owned by mirrors (read-only for clients).
    pub topics: Catalog,
    /// Pause / resume / stop and the list / describe views.
    pub control: Control,
    /// Closed once the engine wrote its final state after `stop` (or never started).
    done: watch::Receiver<()>,
    /// On a follower (`engine.role = "follower"`): where reading the state topic stands.
    pub follow: Option<watch::Receiver<FollowProgress>>,
}

impl Engine {
    /// A disabled engine: no mirrors, nothing stored to load (so it counts as booted).
    pub fn idle(engine: &EngineConfig) -> Self {
        let e = Self::unbooted(engine);
        e.control.mark_booted();
        e
    }

    fn unbooted(engine: &EngineConfig) -> Self {
        Self::unbooted_with(engine, Catalog::default())
    }

    /// An engine not booted yet that enforces through `topics` (shared across the terms of an
    /// elected instance, so nothing becomes writable while one term hands over to the next).
    fn unbooted_with(engine: &EngineConfig, topics: Catalog) -> Self {
        let (_, done) = watch::channel(());
        let status = StatusBoard::default();
        let control = Control::new(status.clone(), topics.clone());
        Self {
            status,
            budget: Budget::new(engine.max_buffer_bytes),
            topics,
            control,
            done,
            follow: None,
        }
    }

    /// Resolves once the engine has written its final state after the stop signal.
    pub async fn stopped(&self) {
        let mut done = self.done.clone();
        while done.changed().await.is_ok() {}
    }
}

/// Starts the engine in the background: opens the state topic on the destination (connecting as
/// `destination_security` says; retrying
/// until it is reachable), records the mirror definitions, then starts every mirror's topics.
/// `source_allow` (`security.mirror_source_allow`) bounds the sources of mirrors created or
/// repointed through the API; `mirrors` (the config file's) are not checked against it.
pub fn start(engine: &EngineConfig, mirrors: Vec<MirrorConfig>, links: EngineLinks, stop: watch::Receiver<bool>) -> Engine {
    start_term(engine, mirrors, links, Catalog::default(), Part::Whole(Lease::forever()), None, stop)
}

/// Where the engine (or a follower) reaches the destination, and which sources API-created
/// mirrors may use.
#[derive(Clone)]
pub struct EngineLinks {
    /// The destination cluster's bootstrap brokers (`upstream.bootstrap_servers`).
    pub destination_bootstrap: Vec<String>,
    /// How to connect to the destination (`[upstream]` security).
    pub destination_security: Arc<kmp_protocol::security::ClientSecurity>,
    /// Connect timeout toward either cluster.
    pub timeout: Duration,
    /// `security.mirror_source_allow`.
    pub source_allow: Vec<String>,
}

/// Starts the engine as [`start`] does, enforcing through `topics`, doing `part` of the work and
/// writing only while its lease holds (one term of an elected instance, or a lone engine's whole
/// life); with `forwarding`, it also answers the management requests standbys forward
/// (`forward`).
pub(crate) fn start_term(
    engine: &EngineConfig,
    mirrors: Vec<MirrorConfig>,
    links: EngineLinks,
    topics: Catalog,
    part: Part,
    forwarding: Option<Forwarding>,
    stop: watch::Receiver<bool>,
) -> Engine {
    let EngineLinks {
        destination_bootstrap,
        destination_security,
        timeout,
        source_allow,
    } = links;
    let (done_tx, done) = watch::channel(());
    let handle = Engine {
        done,
        ..Engine::unbooted_with(engine, topics)
    };
    handle.control.set_source_allow(source_allow);
    if let Some(f) = forwarding {
        handle.control.set_forwarding(f);
    }
    let destination = ClusterClient::with_security("destination", destination_bootstrap, timeout, Ok(destination_security));
    let lease = part.lease();
    if let Some(b) = part.barrier() {
        handle.control.set_barrier(b.clone());
    }
    let shared = Shared {
        destination: destination.clone(),
        status: handle.status.clone(),
        budget: handle.budget.clone(),
        topics: handle.topics.clone(),
        control: handle.control.clone(),
        max_in_flight: usize::from(engine.max_in_flight_per_partition),
        producers: produce_mux::Producers::new(destination.clone(), produce_mux::ProduceSettings::default(), lease.clone()),
        lease,
        part,
        stop,
        sources: Arc::new(sources::Sources::new(handle.budget.clone(), timeout)),
    };
    let (state_topic, flush) = (engine.state_topic.clone(), Duration::from_millis(engine.state_flush_interval_ms));
    tokio::spawn(boot(shared, state_topic, flush, mirrors, done_tx).instrument(info_span!("mirror-engine")));
    handle
}

/// Starts a follower (`engine.role = "follower"`): no mirrors run and nothing is written; the
/// state topic on the destination is read and followed in the background, and the returned
/// handle's registry and views show what it says (see `follow`). Mutating management requests
/// are refused ([`Control::follower_refusal`]). Its `status` stays empty, so `/metrics` never
/// repeats the engine instance's per-partition numbers; describe reads the followed ones.
pub fn follow(engine: &EngineConfig, links: EngineLinks, stop: watch::Receiver<bool>) -> Engine {
    let destination = ClusterClient::with_security("destination", links.destination_bootstrap, links.timeout, Ok(links.destination_security));
    follow_with(engine, destination, Catalog::default(), None, None, stop)
}

/// Starts a follower as [`follow`] does, enforcing through `topics`; its writes into `topics`
/// wait while `held_back` says an engine term of this instance runs (`followed_writes`).
pub(crate) fn follow_with(
    engine: &EngineConfig,
    destination: ClusterClient,
    topics: Catalog,
    forwarding: Option<Forwarding>,
    held_back: Option<watch::Receiver<bool>>,
    stop: watch::Receiver<bool>,
) -> Engine {
    let mut handle = Engine::unbooted_with(engine, topics);
    let (views, topics) = (StatusBoard::default(), handle.topics.clone());
    handle.control = Control::new(views, topics.clone());
    handle.control.set_follower(&engine.state_topic);
    if let Some(f) = forwarding {
        handle.control.set_forwarding(f);
    }
    let (progress, watched) = watch::channel(FollowProgress {
        topic: engine.state_topic.clone(),
        high_watermark: -1,
        ..FollowProgress::default()
    });
    handle.follow = Some(watched);
    let follower = follow::Follower {
        destination,
        topic: engine.state_topic.clone(),
        catalog: topics,
        control: handle.control.clone(),
        progress,
        held_back,
    };
    tokio::spawn(follower.run(stop).instrument(info_span!("state-follower")));
    handle
}

/// What every mirror shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) destination: ClusterClient,
    pub(crate) status: StatusBoard,
    pub(crate) budget: Budget,
    pub(crate) topics: Catalog,
    pub(crate) control: Control,
    pub(crate) max_in_flight: usize,
    /// The destination's produce lanes, one per broker, shared by every mirror.
    pub(crate) producers: produce_mux::Producers,
    /// Writing (data, state, group offsets, configs) is allowed only while this holds.
    pub(crate) lease: Lease,
    /// Which part of the mirror work this term does.
    pub(crate) part: Part,
    pub(crate) stop: watch::Receiver<bool>,
    /// One client and one set of fetch sessions per source setting, shared by every mirror.
    pub(crate) sources: Arc<sources::Sources>,
}

impl Shared {
    /// The source client of mirror `def` (one per bootstrap servers and source properties).
    pub(crate) fn source_client(&self, def: &MirrorConfig) -> ClusterClient {
        self.sources.client(def)
    }

    /// The source client of mirror `def` with its fetch sessions (see `sources`).
    pub(crate) fn source_reach(&self, def: &MirrorConfig) -> (ClusterClient, FetchSessions) {
        self.sources.reach(def)
    }
}

/// `done` is dropped when the final state is written (or the engine stops before starting).
async fn boot(shared: Shared, state_topic: String, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    let mut backoff = Duration::from_millis(200);
    let store = loop {
        let opened = async {
            let store = StateStore::open(shared.destination.clone(), &state_topic, shared.lease.clone()).await?;
            let producer = if shared.part.works_only() {
                // Only the active instance allocates the shared producer identity.
                store
                    .engine_producer()
                    .ok_or_else(|| MirrorError::Unsupported("the active instance has not recorded the engine producer yet".into()))?
            } else {
                producer_id::load_or_allocate(&store, &shared.destination).await?
            };
            Ok::<_, MirrorError>((store, producer))
        };
        match opened.await {
            Ok((s, producer)) => {
                shared.control.set_boot_problem(None);
                shared.producers.set_identity(producer);
                info!(producer_id = producer.producer_id, "engine producer identity loaded");
                break Arc::new(s);
            }
            Err(e) => {
                warn!(error = %e, topic = %state_topic, "cannot open the mirror state topic yet; retrying");
                let named = match &e {
                    MirrorError::Broker { code, .. } => kmp_protocol::kafka_protocol::ResponseError::try_from_code(*code)
                        .map(|r| format!(" ({r:?})"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                shared
                    .control
                    .set_boot_problem(Some(format!("cannot open the mirror state topic {state_topic}: {e}{named}")));
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
    if shared.part.works_only() {
        return worker::boot(shared, store, flush, mirrors, done);
    }
    if let Some(b) = shared.part.barrier() {
        let b = b.clone();
        store.on_topic_change(Arc::new(move || b.reassign()));
    }
    // The state topic's id before the proxy lets requests through (it refuses the topic by id
    // too): the topic exists now, so its id is normally known at once.
    if tokio::time::timeout(STATE_TOPIC_ID_WAIT, learn_state_topic_id(shared.clone(), state_topic.clone()))
        .await
        .is_err()
    {
        tokio::spawn(learn_state_topic_id(shared.clone(), state_topic.clone()).in_current_span());
    }
    // The catalog becomes what the loaded state says: a claim an earlier term left while
    // preparing is claimed again if still wanted, a topic no longer recorded is forgotten. Topics
    // the state records as a mirror's are read-only from now on, before any is prepared; the
    // mirrors' discovery loops take them up a moment later.
    let owned = store.owned_topics();
    shared.topics.reconcile(&owned.iter().map(|(t, _)| t.as_str()).collect());
    for (topic, owner) in &owned {
        shared.topics.register(topic, &owner.mirror, [0; 16]);
    }
    // Former mirror topics are writable, but their fillers stay masked.
    for (topic, former) in store.former_topics() {
        shared.topics.mark_filler_topic(&topic, state::id_from_hex(&former.topic_id).unwrap_or([0; 16]));
    }
    // Every destination id not known yet is looked up until it is (requests naming unknown ids
    // are refused meanwhile, `registry`); a former topic the destination lacks is forgotten.
    let ids = follow::learn_ids(
        shared.destination.clone(),
        shared.topics.clone(),
        shared.topics.id_wanted(),
        shared.stop.clone(),
    );
    tokio::spawn(ids.in_current_span());
    record_definitions(&store, &mirrors).await;
    shared.control.set_store(store.clone());
    shared.control.set_sources(shared.sources.clone());
    spawn_persist(&shared, &store, flush, done);
    let (launch_shared, launch_store) = (shared.clone(), store.clone());
    let span = tracing::Span::current();
    let sync_shared = shared.clone();
    shared.control.set_final_sync(Arc::new(move |mirror, topics| {
        Box::pin(sync::final_group_sync(sync_shared.clone(), mirror, topics))
    }));
    shared.control.set_launcher(Arc::new(move |def| {
        let _entered = span.enter();
        mirrors::launch(&launch_shared, &launch_store, def);
    }));
    // Mirrors created through the API (stored) and declared in the config come up alike.
    let created: Vec<MirrorConfig> = store
        .mirrors()
        .into_iter()
        .filter(|r| r.origin == "api" && !mirrors.iter().any(|m| m.name == r.definition.name))
        .map(|r| r.definition)
        // Stored before the allow-list existed or changed since: such a mirror is not started
        // (its topics stay registered and read-only) until the list allows its source again. It
        // is still known: listed, described, and deletable once its topics are stopped.
        .filter(
            |def| match mirror_settings::check_sources(shared.control.source_allow(), &def.source_bootstrap_servers) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(mirror = %def.name, "stored cluster mirror not started: {e}");
                    shared.control.add_mirror(def.clone());
                    false
                }
            },
        )
        .collect();
    for def in mirrors.into_iter().chain(created) {
        mirrors::launch(&shared, &store, def);
    }
    if let Some(forwarding) = shared.control.forwarding() {
        let serve = forward::serve(
            forwarding,
            store.clone(),
            shared.destination.clone(),
            state_topic.clone(),
            store.requests_at_load(),
            shared.stop.clone(),
        );
        tokio::spawn(serve.in_current_span());
    }
    // Every stored and declared mirror is known, every stored mirror topic registered.
    shared.control.mark_booted();
    info!("mirror engine booted");
}

/// Writes the term's partition progress every `flush` until it stops; `done` is dropped once
/// the final write is done.
pub(crate) fn spawn_persist(shared: &Shared, store: &Arc<StateStore>, flush: Duration, done: watch::Sender<()>) {
    let persist = state::persist(store.clone(), shared.status.clone(), flush, shared.stop.clone());
    tokio::spawn(
        async move {
            persist.await;
            drop(done);
        }
        .in_current_span(),
    );
}

/// Looks up the state topic's destination id (Fetch v13+ and DeleteTopics name topics by id),
/// retrying while the destination is unreachable.
async fn learn_state_topic_id(shared: Shared, topic: String) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match shared.destination.topic_ids().await {
            Ok(ids) => match ids.get(&topic) {
                Some(id) => return shared.topics.set_state_topic_id(*id),
                None => warn!(%topic, "the state topic has no id in the destination's metadata yet; retrying"),
            },
            Err(e) => warn!(error = %e, "cannot read the state topic's id yet; retrying"),
        }
        let mut stop = shared.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Stores the config's mirror definitions; drops stored config mirrors no longer declared.
async fn record_definitions(store: &StateStore, mirrors: &[MirrorConfig]) {
    for m in mirrors {
        let r = MirrorRecord {
            origin: "config".into(),
            definition: m.clone(),
        };
        if let Err(e) = store.put_mirror(&r).await {
            warn!(mirror = %m.name, error = %e, "cannot record the mirror definition");
        }
    }
    for stale in store
        .mirrors()
        .into_iter()
        .filter(|r| r.origin == "config" && !mirrors.iter().any(|m| m.name == r.definition.name))
    {
        info!(mirror = %stale.definition.name, "mirror no longer in the config; removing its stored definition (its topics stay)");
        if let Err(e) = store.delete_mirror(&stale.definition.name).await {
            warn!(error = %e, "cannot remove a stale mirror definition");
        }
    }
}

/// What starting one topic of a mirror needs.
#[derive(Clone)]
pub(crate) struct TopicContext {
    pub(crate) mirror: MirrorConfig,
    pub(crate) source: ClusterClient,
    pub(crate) fetchers: FetchSessions,
    pub(crate) shared: Shared,
    pub(crate) store: Arc<StateStore>,
}
