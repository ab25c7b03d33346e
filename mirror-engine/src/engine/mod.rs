//! Running the engine: a follower ([`follow`]) and the terms of an elected instance — the
//! active one's (`auto`; every engine is elected, so instances sharing a state topic never both
//! write it) and a member's share of the copying (`worker`) — each booted by `term`. [`Engine`] is the handle the proxy reports from.

pub(crate) mod auto;
pub(crate) mod term;
pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tracing::{Instrument, info_span};

use crate::cluster::client::ClusterClient;
use crate::control::handle::Control;
use crate::control::{Role, TermParts};
use crate::copy::budget::Budget;
use crate::copy::produce::mux::{ProduceSettings, Producers};
use crate::copy::sources::Sources;
use crate::follow::follower::{FollowProgress, Follower};
use crate::ha::forward::Forwarding;
use crate::ha::share::Part;
use crate::state::catalog::Catalog;
use crate::state::status::StatusBoard;

/// Engine version, reported by the proxy.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A running engine: what the proxy reports from.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) status: StatusBoard,
    pub(crate) budget: Budget,
    /// Destination topics owned by mirrors (read-only for clients).
    pub(crate) topics: Catalog,
    /// Pause / resume / stop and the list / describe views.
    pub(crate) control: Control,
    /// Closed once the engine wrote its final state after `stop` (or never started).
    done: watch::Receiver<()>,
    /// On a follower (`engine.role = "follower"`): where reading the state topic stands.
    pub(crate) follow: Option<watch::Receiver<FollowProgress>>,
}

impl Engine {
    /// The partitions this engine copies and where each stands (what `/metrics` renders).
    pub fn status(&self) -> &StatusBoard {
        &self.status
    }

    /// The engine-wide memory budget of fetched data not yet written.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Which destination topics are mirror topics and whether clients may write them.
    pub fn topics(&self) -> &Catalog {
        &self.topics
    }

    /// The management operations (create, start, pause, resume, stop, delete) and the list and
    /// describe views.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// A disabled engine: no mirrors, nothing stored to load (so it counts as booted; its
    /// term control is never built, so management answers as an engine without a store).
    pub fn idle(engine: &EngineConfig) -> Self {
        let e = Self::unbooted_with(engine, Catalog::default(), Vec::new());
        e.control.mark_booted();
        e
    }

    /// An engine not booted yet that enforces through `topics` (shared across the terms of an
    /// elected instance, so nothing becomes writable while one term hands over to the next);
    /// `source_allow` bounds API-created mirrors' sources.
    fn unbooted_with(engine: &EngineConfig, topics: Catalog, source_allow: Vec<String>) -> Self {
        let (_, done) = watch::channel(());
        let status = StatusBoard::default();
        let control = Control::new(status.clone(), topics.clone(), source_allow);
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

/// Starts an engine term: opens the state topic on the destination (retrying until it is
/// reachable), records the mirror definitions, then starts every mirror's topics, enforcing
/// through `topics`, doing `part` of the work and writing only while its lease holds; with `forwarding`, it also answers the management requests standbys forward
/// (`ha::forward`); with `views` (shared work), describe shows the members' partitions from it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_term(
    engine: &EngineConfig,
    mirrors: Vec<MirrorConfig>,
    links: EngineLinks,
    topics: Catalog,
    part: Part,
    forwarding: Option<Forwarding>,
    views: Option<StatusBoard>,
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
        ..Engine::unbooted_with(engine, topics, source_allow.clone())
    };
    let destination = ClusterClient::with_security("destination", destination_bootstrap, timeout, Ok(destination_security));
    let lease = part.lease();
    let booting = term::Booting {
        destination: destination.clone(),
        status: handle.status.clone(),
        budget: handle.budget.clone(),
        topics: handle.topics.clone(),
        control: handle.control.clone(),
        max_in_flight: usize::from(engine.max_in_flight_per_partition),
        producers: Producers::new(destination.clone(), ProduceSettings::default(), lease.clone()),
        lease,
        part,
        stop,
        sources: Arc::new(Sources::new(handle.budget.clone(), timeout)),
        source_allow,
        forwarding,
        views,
    };
    let (state_topic, flush) = (engine.state_topic.clone(), Duration::from_millis(engine.state_flush_interval_ms));
    tokio::spawn(term::boot(booting, state_topic, flush, mirrors, done_tx).instrument(info_span!("mirror-engine")));
    handle
}

/// Starts a follower (`engine.role = "follower"`): no mirrors run and nothing is written; the
/// state topic on the destination is read and followed in the background, and the returned
/// handle's catalog and views show what it says (see `follow::follower`). Mutating management requests
/// are refused ([`Control::follower_refusal`]). Its `status` stays empty, so `/metrics` never
/// repeats the engine instance's per-partition numbers; describe reads the followed ones.
pub fn follow(engine: &EngineConfig, links: EngineLinks, stop: watch::Receiver<bool>) -> Engine {
    let destination = ClusterClient::with_security("destination", links.destination_bootstrap, links.timeout, Ok(links.destination_security));
    follow_with(engine, destination, Catalog::default(), None, None, stop)
}

/// Starts a follower as [`follow`] does, enforcing through `topics`; its writes into `topics`
/// wait while `held_back` says an engine term of this instance runs (`follow::writes`).
pub(crate) fn follow_with(
    engine: &EngineConfig,
    destination: ClusterClient,
    topics: Catalog,
    forwarding: Option<Forwarding>,
    held_back: Option<watch::Receiver<bool>>,
    stop: watch::Receiver<bool>,
) -> Engine {
    let mut handle = Engine::unbooted_with(engine, topics, Vec::new());
    let (views, topics) = (StatusBoard::default(), handle.topics.clone());
    handle.control = Control::new(views, topics.clone(), Vec::new());
    // A follower's control is built at once: it has no store to open.
    let control = handle.control.build(TermParts {
        role: Role::Follower {
            state_topic: engine.state_topic.clone(),
        },
        forwarding,
        ..TermParts::none(Vec::new())
    });
    handle.control.publish(control.clone(), None);
    let (progress, watched) = watch::channel(FollowProgress {
        topic: engine.state_topic.clone(),
        high_watermark: -1,
        ..FollowProgress::default()
    });
    handle.follow = Some(watched);
    let follower = Follower {
        destination,
        topic: engine.state_topic.clone(),
        catalog: topics,
        control,
        progress,
        held_back,
    };
    tokio::spawn(follower.run(stop).instrument(info_span!("state-follower")));
    handle
}
