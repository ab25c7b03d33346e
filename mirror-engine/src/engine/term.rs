//! One engine term's boot: opening the state topic, loading what it records into the catalog
//! and the control, launching the mirrors (or, for a term that only copies its share,
//! [`boot_worker`]) and writing progress back ([`spawn_persist`]). What every mirror of the term
//! shares is `context`'s. Starting and stopping terms belongs to `engine` (a lone engine) and
//! `engine::auto` (an elected one); what a mirror does once launched to `mirrors`.

use std::sync::Arc;
use std::time::Duration;

use kmp_config::MirrorConfig;
use tokio::sync::watch;
use tracing::{Instrument, info, warn};

use crate::context::Shared;
use crate::control::settings as mirror_settings;
use crate::copy::produce::producer_id;
use crate::error::MirrorError;
use crate::follow::follower as follow;
use crate::ha::forward;
use crate::mirrors::discovery as mirrors;
use crate::state::records::{MirrorRecord, Origin};
use crate::state::store::StateStore;
use crate::sync;

/// Longest wait at boot for the state topic's destination id before requests are let through
/// (then it is looked up in the background).
const STATE_TOPIC_ID_WAIT: Duration = Duration::from_secs(10);

/// `done` is dropped when the final state is written (or the engine stops before starting).
pub(crate) async fn boot(shared: Shared, state_topic: String, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    let mut backoff = Duration::from_millis(200);
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
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    };
    info!(topic = %state_topic, mirrors = store.mirrors().len(), "mirror state loaded");
    if shared.part.works_only() {
        return boot_worker(shared, store, flush, mirrors, done);
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
        .filter(|r| r.origin.is(Origin::Api) && !mirrors.iter().any(|m| m.name == r.definition.name))
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

/// Boots a term that only copies its share (`Part::Work`): every stored and declared mirror's
/// stored topics, as the state topic recorded them when the generation began; it creates no
/// topic, answers no management request and syncs nothing.
fn boot_worker(shared: Shared, store: Arc<StateStore>, flush: Duration, mirrors: Vec<MirrorConfig>, done: watch::Sender<()>) {
    shared.control.set_store(store.clone());
    spawn_persist(&shared, &store, flush, done);
    let stored = store.mirrors().into_iter().filter(|r| r.origin.is(Origin::Api)).map(|r| r.definition);
    let mut all: Vec<MirrorConfig> = mirrors;
    for def in stored {
        if !all.iter().any(|m| m.name == def.name) && mirror_settings::check_sources(shared.control.source_allow(), &def.source_bootstrap_servers).is_ok() {
            all.push(def);
        }
    }
    for def in all {
        mirrors::launch(&shared, &store, def);
    }
    shared.control.mark_booted();
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
