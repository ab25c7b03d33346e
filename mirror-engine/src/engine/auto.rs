//! An instance of `engine.role = "auto"` (or `"engine"`, which also warns when it is not the one
//! elected, [`ElectionView::fenced`]): it follows the state topic and enforces it like a
//! follower, and runs the engine for as long as the election (`election`) names it active —
//! starting a fresh engine term (state loaded again, every partition resumed from the
//! destination log end) when it is elected, ending the term and following again when it is not.
//! The proxy reads whichever engine runs through an [`EngineSlot`]. One registry of mirror
//! topics outlives the terms, so a write to a mirror topic is refused throughout a handover.
//! Deciding who is active belongs to `ha::election`; what a term does to `engine::term`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use kmp_protocol::mirror_api::EngineIdentity;
use tokio::sync::watch;
use tracing::{Instrument, error, info, info_span, warn};

use crate::cluster::client::ClusterClient;
use crate::control::handle::Control;
use crate::engine::worker::Worker;
use crate::engine::{Engine, EngineLinks, follow_with, start_term};
use crate::follow::follower::FollowProgress;
use crate::ha::election::{self, ElectionSettings, Role, Sharing};
use crate::ha::forward::{ForwardError, Forwarding};
use crate::ha::share::Part;
use crate::ha::share::{Barrier, Share};
use crate::lease::Lease;
use crate::state::catalog::Catalog;

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
    /// This instance's place among the current generation's members and how many there are
    /// (`None` between generations). With `engine.share_work` it copies the partitions of
    /// that place (see [`crate::ha::share::owner_index`]).
    pub share: Option<(usize, usize)>,
    /// Whether the instances share the copying (`engine.share_work`).
    pub share_work: bool,
    /// `engine.role = "engine"`: this instance expects to be the only engine on its state
    /// topic, so another active one is an alert ([`ElectionView::fenced`]), not a standby's
    /// normal wait.
    pub alone: bool,
}

impl ElectionView {
    /// Whether this instance, configured as the only engine (`alone`), found another instance
    /// active on its state topic and writes nothing.
    pub fn fenced(&self) -> bool {
        self.alone && !self.active && !self.active_instance.is_empty() && self.active_instance != self.instance_id
    }

    /// The configured role as the answers name it: `engine` or `auto`.
    pub fn role_name(&self) -> &'static str {
        if self.alone { "engine" } else { "auto" }
    }
}

/// The engine the proxy reads from: fixed for a follower or a disabled engine, switched by the
/// election for `auto` and `engine`. Cheap to clone.
#[derive(Clone)]
pub struct EngineSlot {
    current: Arc<RwLock<Engine>>,
    election: Option<watch::Receiver<ElectionView>>,
    election_problem: Option<watch::Receiver<Option<String>>>,
    /// Closed once the last term wrote its final state and the group was left (`auto`).
    done: Option<watch::Receiver<()>>,
    /// Management requests handed between instances, and where (`auto` only).
    forwarding: Option<(Forwarding, ClusterClient, String)>,
    /// The copy of this instance's share (`auto` with `engine.share_work`).
    worker: Arc<RwLock<Option<Engine>>>,
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
            worker: Arc::default(),
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
    pub async fn forward(&self, frame: bytes::Bytes) -> Result<bytes::Bytes, ForwardError> {
        if let Some((code, message)) = crate::control::settings::refuse_before_handover(&frame) {
            return Err(ForwardError::Refused { code, message });
        }
        match &self.forwarding {
            Some((f, destination, topic)) => f.forward(destination, topic, frame, crate::ha::forward::FORWARD_TIMEOUT).await,
            None => Err(ForwardError::NoAnswer(Duration::ZERO)),
        }
    }

    /// Answers one mirror RPC request frame (prefix included) of this instance's clients with a
    /// response frame (`control::rpc`), with the running engine's control and this instance's
    /// identity in the describe answer. Who may send it is the proxy's to decide beforehand.
    pub async fn answer(&self, frame: &bytes::Bytes) -> Result<bytes::Bytes, kmp_protocol::ProtocolError> {
        crate::control::rpc::answer(frame, &self.control(), self.identity()).await
    }

    /// Which instance this is, for the describe answer.
    fn identity(&self) -> EngineIdentity {
        match self.election() {
            Some(e) => EngineIdentity {
                role: e.role_name().into(),
                instance_id: e.instance_id,
                active: e.active,
                generation: e.generation,
                active_instance: e.active_instance,
                share: e
                    .share
                    .filter(|_| e.share_work)
                    .map(|(index, members)| (i32::try_from(index).unwrap_or(i32::MAX), i32::try_from(members).unwrap_or(i32::MAX))),
            },
            None => {
                let follower = self.control().follower_refusal().is_some();
                EngineIdentity {
                    role: if follower { "follower" } else { "engine" }.into(),
                    active: !follower,
                    generation: -1,
                    ..Default::default()
                }
            }
        }
    }

    /// The engine (or follower) running now.
    pub fn get(&self) -> Engine {
        self.read().clone()
    }

    /// What `/metrics` reports: the running engine, with the partition progress and memory of
    /// this instance's share where the copying is shared.
    pub fn copying(&self) -> Engine {
        let main = self.get();
        match self.worker.read().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
            Some(w) => Engine {
                status: w.status.clone(),
                budget: w.budget.clone(),
                ..main
            },
            None => main,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Engine> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The registry of mirror topics the running engine (or follower) enforces.
    pub fn topics(&self) -> Catalog {
        self.read().topics.clone()
    }

    /// Management of the running engine (or the follower's views).
    pub fn control(&self) -> Control {
        self.read().control.clone()
    }

    /// Where reading the state topic stands, on a follower (or an `auto` standby).
    pub fn follow(&self) -> Option<watch::Receiver<FollowProgress>> {
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

/// Starts an instance that takes part in the engine election (`engine.role` `auto` or
/// `engine`): a follower now, the engine whenever elected.
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
        share_work: engine.share_work,
    };
    let topics = Catalog::default();
    let (follower_stop, stopped_follower) = watch::channel(false);
    let term_runs = watch::Sender::new(false);
    let forwarding = Forwarding::default();
    let slot = EngineSlot::fixed(follow_with(
        engine,
        destination.clone(),
        topics.clone(),
        Some(forwarding.clone()),
        Some(term_runs.subscribe()),
        stopped_follower,
    ));
    let (view_tx, view) = watch::channel(ElectionView {
        instance_id: settings.instance_id.clone(),
        group_id: settings.group_id.clone(),
        generation: -1,
        share_work: engine.share_work,
        alone: engine.role == kmp_config::EngineRole::Engine,
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
    let (share_tx, share) = watch::channel(None);
    let sharing = Sharing {
        tx: share_tx,
        rejoin: Arc::default(),
    };
    let barrier = Barrier {
        share: share.clone(),
        rejoin: sharing.rejoin.clone(),
    };
    let span = info_span!("engine-election", instance = %settings.instance_id);
    let election = tokio::spawn(election::run(destination.clone(), settings, role_tx, problem_tx, sharing, left).instrument(span.clone()));
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
        term_runs,
        follower: Some(slot.get()),
        term: None,
        barrier,
        worker: None,
    };
    tokio::spawn(
        async move {
            supervisor.run(role, share, stop).await;
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
    topics: Catalog,
    slot: EngineSlot,
    forwarding: Forwarding,
    view: watch::Sender<ElectionView>,
    follower_stop: Option<watch::Sender<bool>>,
    /// True while an engine term runs: the follower beside it (shared work) holds its catalog
    /// writes back, since the term owns the catalog then (`follow::writes`).
    term_runs: watch::Sender<bool>,
    /// The follower while it runs (with shared work it runs beside the active term too: its
    /// board is what describe shows of the members' partitions).
    follower: Option<Engine>,
    term: Option<Term>,
    /// What a state change waits behind with shared work.
    barrier: Barrier,
    /// The copy of this instance's share (`engine.share_work`).
    worker: Option<Worker>,
}

impl Supervisor {
    async fn run(mut self, mut role: watch::Receiver<Role>, mut share: watch::Receiver<Option<Share>>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                changed = role.changed() => if changed.is_err() { break },
                changed = share.changed() => {
                    if changed.is_err() { break }
                    let current = share.borrow_and_update().clone();
                    self.follow_share(current).await;
                    continue;
                }
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
                    let was_fenced = self.view.borrow().fenced();
                    self.view.send_modify(|v| {
                        v.generation = generation;
                        if !active_instance.is_empty() {
                            v.active_instance = active_instance;
                        }
                    });
                    let view = self.view.borrow().clone();
                    if view.fenced() && !was_fenced {
                        error!(
                            active = %view.active_instance,
                            state_topic = %self.config.state_topic,
                            group = %view.group_id,
                            "engine.role = \"engine\" expects this instance to be the only engine, but another instance is the active engine on this state topic: this one is fenced (copies and writes nothing) until no other engine is active; give the instances role \"auto\" to run them as standbys"
                        );
                    }
                    if self.term.is_some() {
                        self.end_term().await;
                        self.follow();
                    }
                }
            }
        }
        self.follow_share(None).await;
        self.end_term().await;
        if let Some(f) = self.follower_stop.take() {
            let _ = f.send(true);
        }
    }

    /// Copies the partitions of `share` (with `engine.share_work`): the worker of an earlier
    /// share has ended (it ends by itself when the election takes its share back).
    async fn follow_share(&mut self, share: Option<Share>) {
        self.view.send_modify(|v| v.share = share.as_ref().map(|s| (s.index, s.count)));
        if !self.config.share_work {
            return;
        }
        if let Some(w) = self.worker.take_if(|w| share.as_ref().is_none_or(|s| !w.copies(s))) {
            *self.slot.worker.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            w.end().await;
        }
        let Some(share) = share else { return };
        if self.worker.is_none()
            && let Some(w) = Worker::start(&self.config, self.mirrors.clone(), self.sources.clone(), &share, self.barrier.share.clone())
        {
            *self.slot.worker.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(w.engine.clone());
            self.worker = Some(w);
        }
    }

    fn begin_term(&mut self, lease: Lease, generation: i32) {
        self.term_runs.send_replace(true);
        // With shared work the follower stays: describe shows the members' partitions from it.
        let part = if self.config.share_work {
            Part::Manage(lease.clone(), self.barrier.clone())
        } else {
            if let Some(f) = self.follower_stop.take() {
                let _ = f.send(true);
            }
            self.follower = None;
            Part::Whole(lease.clone())
        };
        let (stop, stopped) = watch::channel(false);
        let views = self.follower.as_ref().map(|f| f.control.status_board().clone());
        let engine = start_term(
            &self.config,
            self.mirrors.clone(),
            self.sources.clone(),
            self.topics.clone(),
            part,
            Some(self.forwarding.clone()),
            views,
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
        // What the term claimed but never prepared is nobody's; then the follower's held
        // writes apply (the records a new active instance writes come after them).
        self.topics.drop_claims();
        self.term_runs.send_replace(false);
        info!("standby: the mirror engine no longer runs on this instance");
    }

    fn follow(&mut self) {
        if let Some(f) = &self.follower {
            // Still running beside the ended term (shared work).
            self.slot.set(f.clone());
            return;
        }
        let (stop, stopped) = watch::channel(false);
        let forwarding = Some(self.forwarding.clone());
        let held_back = Some(self.term_runs.subscribe());
        let follower = follow_with(&self.config, self.destination.clone(), self.topics.clone(), forwarding, held_back, stopped);
        self.slot.set(follower.clone());
        self.follower = Some(follower);
        self.follower_stop = Some(stop);
    }
}
