//! An instance of `engine.role = "auto"`: it follows the state topic and enforces it like a
//! follower, and runs the engine for as long as the election (`election`) names it active —
//! starting a fresh engine term (state loaded again, every partition resumed from the
//! destination log end) when it is elected, ending the term and following again when it is not.
//! The proxy reads whichever engine runs through an [`EngineSlot`]. One registry of mirror
//! topics outlives the terms, so a write to a mirror topic is refused throughout a handover.
//! Deciding who is active belongs to `election`; what a term does to `lib`'s engine.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

use crate::election::{self, ElectionSettings, Role};
use crate::lease::Lease;
use crate::registry::MirrorTopics;
use crate::{ClusterClient, Engine, EngineLinks, Forwarding, follow_with, start_term};

/// Longest wait for an ended term to write its final state before the follower takes over.
const TERM_END_WAIT: Duration = Duration::from_secs(10);

/// What the election decided, for `/readyz`, `/metrics` and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionView {
    /// This instance's name (`engine.instance_id`).
    pub instance_id: String,
    /// The group this instance elects in (`engine.group_id`).
    pub group_id: String,
    /// Whether this instance runs the engine now.
    pub active: bool,
    /// The group generation of the last decision (-1 before the first).
    pub generation: i32,
    /// The active instance as last announced by the group leader (empty if unknown).
    pub active_instance: String,
    /// How many times this instance became active.
    pub takeovers: u64,
    /// Why the last attempt to take part in the election failed, until a decision is made again
    /// (e.g. a destination that refuses the group: authorization, a foreign group of that id).
    pub problem: Option<String>,
}

/// The engine the proxy reads from: fixed for the `engine` and `follower` roles, switched by
/// the election for `auto`. Cheap to clone.
#[derive(Clone)]
pub struct EngineSlot {
    current: Arc<RwLock<Engine>>,
    election: Option<watch::Receiver<ElectionView>>,
    election_problem: Option<watch::Receiver<Option<String>>>,
    /// Closed once the last term wrote its final state and the group was left (`auto`).
    done: Option<watch::Receiver<()>>,
    /// Management requests handed between instances, and where (`auto` only).
    forwarding: Option<(Forwarding, ClusterClient, String)>,
}

impl EngineSlot {
    /// A slot that always holds `engine`.
    pub fn fixed(engine: Engine) -> Self {
        Self {
            current: Arc::new(RwLock::new(engine)),
            election: None,
            election_problem: None,
            done: None,
            forwarding: None,
        }
    }

    /// Sets how this instance answers management requests other instances forward while it is
    /// the active one (`auto` only; elsewhere nothing forwards).
    pub fn answer_forwarded_with(&self, handler: crate::RequestHandler) {
        if let Some((f, _, _)) = &self.forwarding {
            f.set_handler(handler);
        }
    }

    /// Whether a management request this instance cannot carry out (a standby) can be handed
    /// to the active instance.
    pub fn can_forward(&self) -> bool {
        self.forwarding.is_some()
    }

    /// Hands a management request frame to the active instance and returns its answer frame.
    /// A create the active instance would refuse whatever its state (unknown configs, inline
    /// secrets) is refused here, before anything is written to the state topic.
    pub async fn forward(&self, frame: bytes::Bytes) -> Result<bytes::Bytes, crate::ForwardError> {
        if let Some((code, message)) = crate::mirror_settings::refuse_before_handover(&frame) {
            return Err(crate::ForwardError::Refused { code, message });
        }
        match &self.forwarding {
            Some((f, destination, topic)) => f.forward(destination, topic, frame, crate::forward::FORWARD_TIMEOUT).await,
            None => Err(crate::ForwardError::NoAnswer(Duration::ZERO)),
        }
    }

    /// The engine (or follower) running now.
    pub fn get(&self) -> Engine {
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Engine> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The registry of mirror topics the running engine (or follower) enforces.
    pub fn topics(&self) -> crate::MirrorTopics {
        self.read().topics.clone()
    }

    /// Management of the running engine (or the follower's views).
    pub fn control(&self) -> crate::Control {
        self.read().control.clone()
    }

    /// Where reading the state topic stands, on a follower (or an `auto` standby).
    pub fn follow(&self) -> Option<watch::Receiver<crate::FollowProgress>> {
        self.read().follow.clone()
    }

    /// The election's last decision (`auto` only).
    pub fn election(&self) -> Option<ElectionView> {
        let mut view = self.election.as_ref().map(|e| e.borrow().clone())?;
        view.problem = self.election_problem.as_ref().and_then(|p| p.borrow().clone());
        Some(view)
    }

    /// Resolves once the engine wrote its final state after the stop signal (and, for `auto`,
    /// the instance left the election group).
    pub async fn stopped(&self) {
        match &self.done {
            Some(done) => {
                let mut done = done.clone();
                while done.changed().await.is_ok() {}
            }
            None => self.get().stopped().await,
        }
    }

    fn set(&self, engine: Engine) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = engine;
    }
}

/// Starts an `auto` instance: a follower now, the engine whenever elected.
pub fn auto(engine: &EngineConfig, mirrors: Vec<MirrorConfig>, links: EngineLinks, stop: watch::Receiver<bool>) -> EngineSlot {
    let destination = ClusterClient::with_security(
        "destination",
        links.destination_bootstrap.clone(),
        links.timeout,
        Ok(links.destination_security.clone()),
    );
    let settings = ElectionSettings {
        group_id: engine.effective_group_id(),
        instance_id: instance_id(engine),
        session_timeout: Duration::from_millis(engine.session_timeout_ms),
        heartbeat_interval: Duration::from_millis(engine.heartbeat_interval_ms),
    };
    let topics = MirrorTopics::default();
    let (follower_stop, stopped_follower) = watch::channel(false);
    let forwarding = Forwarding::default();
    let slot = EngineSlot::fixed(follow_with(
        engine,
        destination.clone(),
        topics.clone(),
        Some(forwarding.clone()),
        stopped_follower,
    ));
    let (view_tx, view) = watch::channel(ElectionView {
        instance_id: settings.instance_id.clone(),
        group_id: settings.group_id.clone(),
        generation: -1,
        ..ElectionView::default()
    });
    let (done_tx, done) = watch::channel(());
    let (problem_tx, problem) = watch::channel(None);
    let slot = EngineSlot {
        election: Some(view),
        election_problem: Some(problem),
        done: Some(done),
        forwarding: Some((forwarding.clone(), destination.clone(), engine.state_topic.clone())),
        ..slot
    };
    let (role_tx, role) = watch::channel(Role::Standby {
        generation: -1,
        active_instance: String::new(),
    });
    let (leave, left) = watch::channel(false);
    let span = info_span!("engine-election", instance = %settings.instance_id);
    let election = tokio::spawn(election::run(destination.clone(), settings, role_tx, problem_tx, left).instrument(span.clone()));
    let supervisor = Supervisor {
        config: engine.clone(),
        mirrors,
        sources: links,
        destination,
        topics,
        slot: slot.clone(),
        forwarding,
        view: view_tx,
        follower_stop: Some(follower_stop),
        term: None,
    };
    tokio::spawn(
        async move {
            supervisor.run(role, stop).await;
            let _ = leave.send(true);
            let _ = election.await;
            drop(done_tx);
        }
        .instrument(span),
    );
    slot
}

/// `engine.instance_id`, or `<hostname>-<pid>`.
fn instance_id(engine: &EngineConfig) -> String {
    if !engine.instance_id.is_empty() {
        return engine.instance_id.clone();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kmp".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A running engine term: the engine, its lease and what stops it.
struct Term {
    engine: Engine,
    lease: Lease,
    stop: watch::Sender<bool>,
}

struct Supervisor {
    config: EngineConfig,
    mirrors: Vec<MirrorConfig>,
    sources: EngineLinks,
    destination: ClusterClient,
    topics: MirrorTopics,
    slot: EngineSlot,
    forwarding: Forwarding,
    view: watch::Sender<ElectionView>,
    follower_stop: Option<watch::Sender<bool>>,
    term: Option<Term>,
}

impl Supervisor {
    async fn run(mut self, mut role: watch::Receiver<Role>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                changed = role.changed() => if changed.is_err() { break },
                _ = stop.changed() => break,
            }
            let decided = role.borrow_and_update().clone();
            match decided {
                Role::Active { generation, lease } => {
                    self.view.send_modify(|v| {
                        v.generation = generation;
                        v.active_instance = v.instance_id.clone();
                    });
                    if self.term.as_ref().is_some_and(|t| !t.lease.same(&lease)) {
                        self.end_term().await; // an older term whose lease ended
                    }
                    if self.term.is_none() {
                        self.begin_term(lease, generation);
                    }
                }
                Role::Standby { generation, active_instance } => {
                    self.view.send_modify(|v| {
                        v.generation = generation;
                        if !active_instance.is_empty() {
                            v.active_instance = active_instance;
                        }
                    });
                    if self.term.is_some() {
                        self.end_term().await;
                        self.follow();
                    }
                }
            }
        }
        self.end_term().await;
        if let Some(f) = self.follower_stop.take() {
            let _ = f.send(true);
        }
    }

    fn begin_term(&mut self, lease: Lease, generation: i32) {
        if let Some(f) = self.follower_stop.take() {
            let _ = f.send(true);
        }
        let (stop, stopped) = watch::channel(false);
        let engine = start_term(
            &self.config,
            self.mirrors.clone(),
            self.sources.clone(),
            self.topics.clone(),
            lease.clone(),
            Some(self.forwarding.clone()),
            stopped,
        );
        self.slot.set(engine.clone());
        self.view.send_modify(|v| {
            v.active = true;
            v.takeovers += 1;
        });
        info!(generation, "active: the mirror engine runs on this instance");
        self.term = Some(Term { engine, lease, stop });
    }

    async fn end_term(&mut self) {
        let Some(term) = self.term.take() else { return };
        // A demoted term's lease is already revoked (by the election); a term ended by the
        // instance's own shutdown still holds it, so its final state is written before it
        // leaves the group and a peer takes over.
        let _ = term.stop.send(true);
        self.view.send_modify(|v| v.active = false);
        if tokio::time::timeout(TERM_END_WAIT, term.engine.stopped()).await.is_err() {
            warn!("the ended engine term did not finish within {TERM_END_WAIT:?}; following anyway (its writes are fenced)");
        }
        term.lease.revoke();
        info!("standby: the mirror engine no longer runs on this instance");
    }

    fn follow(&mut self) {
        let (stop, stopped) = watch::channel(false);
        let forwarding = Some(self.forwarding.clone());
        self.slot
            .set(follow_with(&self.config, self.destination.clone(), self.topics.clone(), forwarding, stopped));
        self.follower_stop = Some(stop);
    }
}
