//! One engine term's boot: opening the state topic, loading what it records into the catalog,
//! building the term's control with what it acts on and publishing it to the proxy's handle,
//! launching the mirrors (or, for a term that only copies its share, [`boot_worker`]) and writing
//! progress back ([`spawn_persist`]); then the term's command loop ([`run_commands`]), which
//! carries out what its control asks (launch a created mirror, run a stop's last group offset
//! sync). What every mirror of the term shares is `context`'s. Starting and stopping terms
//! belongs to `engine::auto` (every engine is elected); what a mirror does
//! once launched to `mirrors`.

use std::sync::Arc;
use std::time::Duration;

use kmp_config::MirrorConfig;
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, info, warn};

use crate::cluster::client::ClusterClient;
use crate::context::Shared;
use crate::control::handle::Control;
use crate::control::settings as mirror_settings;
use crate::control::{Role, TermCommand, TermParts, rpc};
use crate::copy::budget::Budget;
use crate::copy::produce::mux::Producers;
use crate::copy::produce::producer_id;
use crate::copy::sources::Sources;
use crate::error::MirrorError;
use crate::follow::follower as follow;
use crate::ha::forward::{self, Forwarding};
use crate::ha::share::Part;
use crate::lease::Lease;
use crate::mirrors::discovery as mirrors;
use crate::state::catalog::Catalog;
use crate::state::records::{MirrorRecord, Origin};
use crate::state::status::StatusBoard;
use crate::state::store::StateStore;
use crate::sync;
use kmp_protocol::Backoff;

/// Longest wait at boot for the state topic's destination id before requests are let through
/// (then it is looked up in the background).
const STATE_TOPIC_ID_WAIT: Duration = Duration::from_secs(10);

/// What a term has before its state store is open: what [`Shared`] will hold but the term's
/// control, the proxy's handle the control is published to, and the control's parts known at
/// the start.
pub(crate) struct Booting {
    pub(crate) destination: ClusterClient,
    pub(crate) status: StatusBoard,
    pub(crate) budget: Budget,
    pub(crate) topics: Catalog,
    /// The proxy's handle of this term.
    pub(crate) control: Control,
    pub(crate) max_in_flight: usize,
    pub(crate) producers: Producers,
    pub(crate) lease: Lease,
    pub(crate) part: Part,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) sources: Arc<Sources>,
    /// `security.mirror_source_allow`.
    pub(crate) source_allow: Vec<String>,
    /// Management requests forwarded between instances (`auto` only).
    pub(crate) forwarding: Option<Forwarding>,
    /// With shared work: the members' partitions as the follower beside this term reads them.
    pub(crate) views: Option<StatusBoard>,
}

impl Booting {
    /// The term's control, built now that `store` is open, published to the handle; and what
    /// every mirror of the term shares. The control's commands go to the returned receiver.
    fn build(self, store: &Arc<StateStore>) -> (Shared, mpsc::Receiver<TermCommand>) {
        let (commands, received) = mpsc::channel(16);
        // A term that only copies answers no management request, so it has no sources of
        // control's own (as before: its control never used them).
        let sources = (!self.part.works_only()).then(|| self.sources.clone());
        let control = self.control.build(TermParts {
            store: Some(store.clone()),
            sources,
            source_allow: self.source_allow,
            role: Role::Engine {
                barrier: self.part.barrier().cloned(),
                views: self.views,
            },
            forwarding: self.forwarding,
            commands: Some(commands.clone()),
            ended: Some(self.stop.clone()),
        });
        self.control.publish(control.clone(), Some(commands));
        let shared = Shared {
            destination: self.destination,
            status: self.status,
            budget: self.budget,
            topics: self.topics,
            control,
            max_in_flight: self.max_in_flight,
            producers: self.producers,
            lease: self.lease,
            part: self.part,
            stop: self.stop,
            sources: self.sources,
        };
        (shared, received)
    }
}

/// `done` is dropped when the final state is written (or the engine stops before starting).
pub(crate) async fn boot(shared: Booting, state_topic: String, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let store = loop {
        let opened = async {
            let store = StateStore::open(shared.destination.clone(), &state_topic, shared.lease.clone()).await?;
            let producer = if shared.part.works_only() {
                // Only the active instance allocates the shared producer identity.
                producer_id::engine_producer(&store)
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
                    _ = tokio::time::sleep(backoff.next_pause()) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    };
    info!(topic = %state_topic, mirrors = store.mirrors().len(), "mirror state loaded");
    if shared.part.works_only() {
        let (handle, (shared, commands)) = (shared.control.clone(), shared.build(&store));
        // Nothing sends a worker's control commands (it answers no management request).
        drop(commands);
        return boot_worker(shared, &handle, store, flush, mirrors, done);
    }
    if let Some(b) = shared.part.barrier() {
        let b = b.clone();
        store.on_topic_change(Arc::new(move || b.reassign()));
    }
    // The state topic's id before the proxy lets requests through (it refuses the topic by id
    // too): the topic exists now, so its id is normally known at once.
    let learn = || learn_state_topic_id(shared.destination.clone(), shared.topics.clone(), shared.stop.clone(), state_topic.clone());
    if tokio::time::timeout(STATE_TOPIC_ID_WAIT, learn()).await.is_err() {
        tokio::spawn(learn().in_current_span());
    }
    // The catalog becomes what the loaded state says: a claim an earlier term left while
    // preparing is claimed again if still wanted, a topic no longer recorded is forgotten. Topics
    // the state records as a mirror's are read-only from now on, before any is prepared; the
    // mirrors' discovery loops take them up a moment later.
    let owned = store.owned_topics();
    shared.topics.reconcile(&owned.iter().map(|(t, _)| t.as_str()).collect());
    for (topic, owner) in &owned {
        shared.topics.set_shifts(topic, &owner.offset_shifts);
        shared.topics.register(topic, &owner.mirror, [0; 16]);
    }
    // Former mirror topics are writable, but their fillers stay masked.
    for (topic, former) in store.former_topics() {
        shared.topics.set_shifts(&topic, &former.offset_shifts);
        shared
            .topics
            .mark_filler_topic(&topic, crate::state::records::id_from_hex(&former.topic_id).unwrap_or([0; 16]));
    }
    // Every destination id not known yet is looked up until it is (requests naming unknown ids
    // are refused meanwhile, see `state::catalog`); a former topic the destination lacks is forgotten.
    let ids = follow::learn_ids(
        shared.destination.clone(),
        shared.topics.clone(),
        shared.topics.id_wanted(),
        shared.stop.clone(),
    );
    tokio::spawn(ids.in_current_span());
    record_definitions(&store, &mirrors).await;
    let handle = shared.control.clone();
    let (shared, commands) = shared.build(&store);
    spawn_persist(&shared, &store, flush, done);
    tokio::spawn(run_commands(shared.clone(), store.clone(), commands).in_current_span());
    // Mirrors created through the API (stored) and declared in the config come up alike.
    let created: Vec<MirrorConfig> = store
        .mirrors()
        .into_iter()
        .filter(|r| r.origin.is(Origin::Api) && !mirrors.iter().any(|m| m.name == r.definition.name))
        .map(|r| r.definition)
        // Stored before the allow-list existed or changed since: such a mirror is not started
        // (its topics stay registered and read-only) until the list allows its source again. It
        // is still known: listed, described, and deletable once its topics are stopped.
        .filter(|def| match mirror_settings::check_endpoints(shared.control.source_allow(), def) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(mirror = %def.name, "stored cluster mirror not started: {e}");
                shared.control.add_mirror(def.clone());
                false
            }
        })
        .collect();
    for def in mirrors.into_iter().chain(created) {
        mirrors::launch(&shared, &store, def);
    }
    if let Some(forwarding) = shared.control.forwarding() {
        // What standbys forward is answered as this term answers its own clients.
        let control = handle.clone();
        let serve = forward::serve(
            forwarding,
            store.clone(),
            shared.destination.clone(),
            state_topic.clone(),
            store.requests_at_load(),
            shared.stop.clone(),
            move |frame| rpc::answer_for_standby(frame, control.clone()),
        );
        tokio::spawn(serve.in_current_span());
    }
    // Every stored and declared mirror is known, every stored mirror topic registered.
    handle.mark_booted();
    info!("mirror engine booted");
}

/// The term's command loop: carries out what the term's control asks, until the proxy's handle
/// of the term (which holds the channel's strong end) is gone.
async fn run_commands(shared: Shared, store: Arc<StateStore>, mut commands: mpsc::Receiver<TermCommand>) {
    while let Some(command) = commands.recv().await {
        match command {
            TermCommand::Launch { def, done } => {
                mirrors::launch(&shared, &store, *def);
                let _ = done.send(());
            }
            TermCommand::FailbackPlan { def, topics, done } => {
                let (destination, source) = (shared.destination.clone(), shared.source_client(&def));
                tokio::spawn(
                    async move {
                        let mut previews = Vec::with_capacity(topics.len());
                        for t in &topics {
                            previews.push(crate::failback::preview(&destination, &source, t).await);
                        }
                        let _ = done.send(previews);
                    }
                    .in_current_span(),
                );
            }
            TermCommand::FinalSync { mirror, topics, done } => {
                // Concurrent stops sync concurrently, as when each ran its pass itself.
                let shared = shared.clone();
                tokio::spawn(
                    async move {
                        let mut failed = Vec::new();
                        for t in &topics {
                            if let Err(e) = crate::copy::txn::abort_topic(&shared.destination, &shared.producers, t).await {
                                warn!(topic = %t, error = %e, "cannot abort the destination transactions still open at stop");
                                failed.push((t.clone(), e.to_string()));
                            }
                        }
                        sync::final_group_sync(shared, mirror, topics).await;
                        let _ = done.send(failed);
                    }
                    .in_current_span(),
                );
            }
        }
    }
}

/// Boots a term that only copies its share (`Part::Work`): every stored and declared mirror's
/// stored topics, as the state topic recorded them when the generation began; it creates no
/// topic, answers no management request and syncs nothing.
fn boot_worker(shared: Shared, handle: &Control, store: Arc<StateStore>, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    spawn_persist(&shared, &store, flush, done);
    let stored = store.mirrors().into_iter().filter(|r| r.origin.is(Origin::Api)).map(|r| r.definition);
    let mut all: Vec<MirrorConfig> = mirrors;
    for def in stored {
        if !all.iter().any(|m| m.name == def.name) && mirror_settings::check_endpoints(shared.control.source_allow(), &def).is_ok() {
            all.push(def);
        }
    }
    for def in all {
        mirrors::launch(&shared, &store, def);
    }
    handle.mark_booted();
    info!("mirror worker booted");
}

/// Writes the term's partition progress every `flush` until it stops; `done` is dropped once
/// the final write is done.
pub(crate) fn spawn_persist(shared: &Shared, store: &Arc<StateStore>, flush: Duration, done: watch::Sender<()>) {
    let persist = crate::state::store::persist(store.clone(), shared.status.clone(), flush, shared.stop.clone());
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
async fn learn_state_topic_id(destination: ClusterClient, topics: Catalog, stop: watch::Receiver<bool>, topic: String) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match destination.topic_ids().await {
            Ok(ids) => match ids.get(&topic) {
                Some(id) => return topics.set_state_topic_id(*id),
                None => warn!(%topic, "the state topic has no id in the destination's metadata yet; retrying"),
            },
            Err(e) => warn!(error = %e, "cannot read the state topic's id yet; retrying"),
        }
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_pause()) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Stores the config's mirror definitions; drops stored config mirrors no longer declared.
async fn record_definitions(store: &StateStore, mirrors: &[MirrorConfig]) {
    for m in mirrors {
        let r = MirrorRecord {
            origin: Origin::Config.into(),
            definition: m.clone(),
        };
        if let Err(e) = store.put_mirror(&r).await {
            warn!(mirror = %m.name, error = %e, "cannot record the mirror definition");
        }
    }
    for stale in store
        .mirrors()
        .into_iter()
        .filter(|r| r.origin.is(Origin::Config) && !mirrors.iter().any(|m| m.name == r.definition.name))
    {
        info!(mirror = %stale.definition.name, "mirror no longer in the config; removing its stored definition (its topics stay)");
        if let Err(e) = store.delete_mirror(&stale.definition.name).await {
            warn!(error = %e, "cannot remove a stale mirror definition");
        }
    }
}
