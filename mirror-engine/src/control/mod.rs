//! Operator control of mirror topics at runtime — pause, resume, stop (failover) — and the
//! list/describe views, shared by every management front end (Kafka RPCs, REST). Per topic the
//! operator sets a *desired* state, persisted in the state topic first, then the partition tasks
//! follow it (KIP-1279 §2.2 desired vs actual). Results carry KIP-1279 error codes. This folder
//! owns the operations and their data: the state changes (`transitions`), the graceful stop's wait
//! (`graceful`), mirror definitions (`definitions`), the settings the API shows and changes
//! (`settings`), a failing-back cluster's lookup of the recorded lines (`lookup`), and the
//! KIP-1279 mirror RPCs answered with them (`rpc`). Copying is `copy`'s.
//!
//! Two objects: a term's [`TermControl`] (here), built by the term once its state store is open
//! and handed everything it acts on — store, sources, allow-list, role, barrier, views,
//! forwarding and the term's command channel ([`TermCommand`]) — as constructor arguments; and
//! the proxy's [`handle::Control`], which exists from the term's start (the boot gate, why boot is
//! stuck, the status and sync boards, the catalog) and reaches the term's control once the term
//! has published it.

use std::sync::Arc;
use std::time::Duration;

use dashmap::{DashMap, DashSet};
use kmp_config::MirrorConfig;
use tokio::sync::{Notify, mpsc, watch};

mod answers;
pub(crate) mod definitions;
pub(crate) mod graceful;
pub(crate) mod handle;
mod lookup;
mod parts;
pub(crate) mod rpc;
pub(crate) mod settings;
mod transitions;

pub use answers::{MirrorListing, PartitionDetail, TopicResult};
pub(crate) use parts::{Role, TermCommand, TermParts};

use crate::copy::sources::Sources;
use crate::ha::forward::Forwarding;
use crate::ha::share::Barrier;
use crate::state::boot_gate::BootGate;
use crate::state::catalog::Catalog;
use crate::state::records::Desired;
use crate::state::status::StatusBoard;
use crate::state::store::StateStore;
use crate::state::sync_status::SyncBoard;

/// Kafka and KIP-1279 error codes of the control operations (one table, in the protocol crate).
pub use kmp_protocol::mirror_api::errors as codes;

/// A running mirror topic.
pub(crate) struct TopicRuntime {
    pub(crate) mirror: String,
    pub(crate) partitions: usize,
    pub(crate) desired: watch::Sender<Desired>,
    /// Starts (again) the copy task of one partition.
    pub(crate) spawn: Arc<dyn Fn(i32) + Send + Sync>,
}

/// What the proxy's handle and each of its term's controls share: the boards, the catalog and
/// the boot gate.
struct Common {
    status: StatusBoard,
    sync: SyncBoard,
    /// The instance's catalog of mirror topics (outlives this term).
    catalog: Catalog,
    /// Open once the stored state is loaded.
    booted: BootGate,
    /// Why the state topic cannot be opened, while the engine keeps retrying (for `/readyz`).
    boot_problem: std::sync::Mutex<Option<String>>,
}

impl Common {
    /// Fresh boards and a closed boot gate over the instance's `status` board and `catalog`.
    fn new(status: StatusBoard, catalog: Catalog) -> Arc<Self> {
        Arc::new(Common {
            status,
            sync: SyncBoard::default(),
            catalog,
            booted: BootGate::default(),
            boot_problem: std::sync::Mutex::new(None),
        })
    }
}

/// One term's control of its mirrors; cheap to clone. Built by the term once its state store
/// is open (see the module doc).
#[derive(Clone)]
pub(crate) struct TermControl {
    inner: Arc<Term>,
}

/// The mirror definitions a term knows (config file or API), and what wakes their loops.
#[derive(Default)]
struct Definitions {
    /// Mirror name → its current definition.
    mirrors: DashMap<String, MirrorConfig>,
    /// Wakes a mirror's discovery loop when its definition changed.
    wake: DashMap<String, Arc<Notify>>,
}

/// The mirror topics a term runs (or, on a follower, shows).
struct Runtimes {
    topics: DashMap<String, TopicRuntime>,
    /// Topics this term took up (a discovery loop prepares and copies them); which mirror owns
    /// a topic is the catalog's.
    taken: DashSet<String>,
    /// Bumped whenever `topics` gains or loses a topic (waiters subscribe instead of polling).
    changes: watch::Sender<u64>,
    /// With shared work: topics whose pause or stop was recorded but whose barrier has not
    /// passed yet (a retry passes one).
    unsettled: DashSet<String>,
}

struct Term {
    common: Arc<Common>,
    definitions: Definitions,
    runtimes: Runtimes,
    store: Option<Arc<StateStore>>,
    sources: Option<Arc<Sources>>,
    source_allow: Vec<String>,
    role: Role,
    forwarding: Option<Forwarding>,
    /// Weak: the term's command loop holds this control, so a strong sender here would keep
    /// the loop alive forever; the strong one is the handle's (`handle::Control::publish`).
    commands: Option<mpsc::WeakSender<TermCommand>>,
    /// The term's stop signal: a state change waiting for this term's partition tasks stops
    /// waiting when it flips (a later term, not this one, applies the recorded change).
    ended: Option<watch::Receiver<bool>>,
    /// Whether the boot wait applies (a handle's stand-in before its term is built answers at
    /// once: its caller waited already).
    waits_for_boot: bool,
}

/// The answer to a management request while the stored state is still loading (retriable).
pub const LOADING: &str = "the mirror engine is still loading its stored state; retry";

/// Connect timeout toward a mirror's source for the graceful stop's end-offset read.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a management request waits for the engine to finish booting.
const BOOT_WAIT: Duration = Duration::from_secs(30);

/// How long a pause or stop waits for the partition tasks to finish.
const HALT_TIMEOUT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for TermControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermControl").field("topics", &self.inner.runtimes.topics.len()).finish()
    }
}

impl TermControl {
    fn with(common: Arc<Common>, parts: TermParts, waits_for_boot: bool) -> Self {
        let TermParts {
            store,
            sources,
            source_allow,
            role,
            forwarding,
            commands,
            ended,
        } = parts;
        Self {
            inner: Arc::new(Term {
                common,
                definitions: Definitions::default(),
                runtimes: Runtimes {
                    topics: DashMap::new(),
                    taken: DashSet::new(),
                    changes: watch::Sender::new(0),
                    unsettled: DashSet::new(),
                },
                store,
                sources,
                source_allow,
                role,
                forwarding,
                commands: commands.as_ref().map(mpsc::Sender::downgrade),
                ended,
                waits_for_boot,
            }),
        }
    }

    /// The shared-work barrier state changes wait behind, if copying is shared.
    fn barrier(&self) -> Option<&Barrier> {
        match &self.inner.role {
            Role::Engine { barrier, .. } => barrier.as_ref(),
            Role::Follower { .. } => None,
        }
    }

    /// The members' partitions, where copying is shared.
    fn views(&self) -> Option<&StatusBoard> {
        match &self.inner.role {
            Role::Engine { views, .. } => views.as_ref(),
            Role::Follower { .. } => None,
        }
    }

    /// The board partition progress is read from: the members' records where copying is
    /// shared, else this engine's own.
    pub(crate) fn progress_board(&self) -> &StatusBoard {
        self.views().unwrap_or(&self.inner.common.status)
    }

    /// Whether this instance follows the state topic instead of running the engine.
    pub(crate) fn is_follower(&self) -> bool {
        matches!(self.inner.role, Role::Follower { .. })
    }

    /// The refusal every mutating management request (create, start, stop, pause, resume,
    /// delete, config changes) gets on a follower: NOT_CONTROLLER (41) and why. `None` on the
    /// engine instance. The front ends ask before doing anything.
    pub(crate) fn follower_refusal(&self) -> Option<(i16, String)> {
        match &self.inner.role {
            Role::Follower { state_topic: topic } => Some((
                codes::NOT_CONTROLLER,
                format!(
                    "this kafka-mirror-proxy instance does not run the mirror engine (engine.role = follower; it follows the state topic {topic} and enforces it); send mirror changes to an instance that runs the engine (engine.role = auto, the default, or engine)"
                ),
            )),
            Role::Engine { .. } => None,
        }
    }

    /// The follower's view of one mirror topic (it has no copy tasks) in the list and describe
    /// views, with its desired state; the follower registers it in the catalog
    /// (`follow::writes`).
    pub(crate) fn show_followed_topic(&self, topic: &str, mirror: &str, partitions: usize, desired: Desired) {
        if let Some(mut rt) = self.inner.runtimes.topics.get_mut(topic) {
            rt.mirror = mirror.to_owned();
            rt.partitions = partitions;
            rt.desired.send_replace(desired);
            return;
        }
        let (desired, _) = watch::channel(desired);
        let spawn: Arc<dyn Fn(i32) + Send + Sync> = Arc::new(|_| {});
        self.add_topic(
            topic,
            TopicRuntime {
                mirror: mirror.to_owned(),
                partitions,
                desired,
                spawn,
            },
        );
    }

    /// The board the list and describe views read (a follower fills it from the state topic).
    pub(crate) fn status_board(&self) -> &StatusBoard {
        &self.inner.common.status
    }

    /// The `host:port` patterns API-created mirrors' sources must match (empty: none allowed).
    pub(crate) fn source_allow(&self) -> &[String] {
        &self.inner.source_allow
    }

    pub(crate) fn add_mirror(&self, def: MirrorConfig) {
        self.inner.definitions.mirrors.insert(def.name.clone(), def);
    }

    pub(crate) fn remove_mirror(&self, name: &str) {
        self.inner.definitions.mirrors.remove(name);
        self.inner.common.sync.remove(name);
        self.wake(name);
        self.inner.definitions.wake.remove(name);
    }

    /// The current definition of mirror `name`.
    pub(crate) fn definition(&self, name: &str) -> Option<MirrorConfig> {
        self.inner.definitions.mirrors.get(name).map(|d| d.clone())
    }

    pub(crate) fn set_definition(&self, def: MirrorConfig) {
        let name = def.name.clone();
        self.inner.definitions.mirrors.insert(name.clone(), def);
        self.wake(&name);
    }

    /// Claims `topic` for `mirror` so its discovery loop takes it up: true once per term for a
    /// topic that is free or already `mirror`'s in the catalog (a stored topic is registered at
    /// boot, before its loop takes it up); false if another mirror owns it or this term took it
    /// up before.
    pub(crate) fn claim_topic(&self, topic: &str, mirror: &str) -> bool {
        self.inner.common.catalog.claim(topic, mirror) && self.inner.runtimes.taken.insert(topic.to_owned())
    }

    /// The mirror that owns `topic` (the catalog's answer).
    pub(crate) fn claimed_by(&self, topic: &str) -> Option<String> {
        self.inner.common.catalog.owner(topic)
    }

    /// Topics owned by `mirror`, sorted (the catalog's answer).
    pub(crate) fn claimed_topics(&self, mirror: &str) -> Vec<String> {
        self.inner.common.catalog.topics_of(mirror)
    }

    /// Forgets a topic of a deleted mirror: it is an ordinary topic again (the catalog keeps
    /// masking its fillers), and this term no longer runs it.
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.inner.common.catalog.remove(topic);
        self.forget_view(topic);
    }

    /// Forgets what this term runs or shows of `topic` (the catalog is left as it is).
    pub(crate) fn forget_view(&self, topic: &str) {
        let runtimes = &self.inner.runtimes;
        runtimes.taken.remove(topic);
        if let Some((_, rt)) = runtimes.topics.remove(topic) {
            for p in 0..rt.partitions as i32 {
                self.inner.common.status.remove(&(rt.mirror.clone(), topic.to_owned(), p));
            }
            runtimes.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A receiver that sees every later change of the term's running topics.
    pub(crate) fn runtime_changes(&self) -> watch::Receiver<u64> {
        self.inner.runtimes.changes.subscribe()
    }

    pub(crate) fn notifier(&self, name: &str) -> Arc<Notify> {
        self.inner
            .definitions
            .wake
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone()
    }

    fn wake(&self, name: &str) {
        if let Some(n) = self.inner.definitions.wake.get(name) {
            n.notify_one();
        }
    }

    /// Hands `command` to the term's command loop; false if the term has none (a follower's,
    /// an engine that is off) or it is gone.
    async fn command(&self, command: TermCommand) -> bool {
        let Some(tx) = self.inner.commands.as_ref().and_then(mpsc::WeakSender::upgrade) else {
            return false;
        };
        tx.send(command).await.is_ok()
    }

    /// Where metadata sync reports.
    pub(crate) fn sync_board(&self) -> &SyncBoard {
        &self.inner.common.sync
    }

    /// Running topics of `mirror` whose desired state is `desired`, sorted.
    pub(crate) fn topics_in_state(&self, mirror: &str, desired: Desired) -> Vec<String> {
        let mut out: Vec<String> = self
            .inner
            .runtimes
            .topics
            .iter()
            .filter(|t| t.mirror == mirror && *t.desired.borrow() == desired)
            .map(|t| t.key().clone())
            .collect();
        out.sort();
        out
    }

    /// The instance's forwarding of management requests (`auto` only).
    pub(crate) fn forwarding(&self) -> Option<Forwarding> {
        self.inner.forwarding.clone()
    }

    /// The shared client of mirror `def`'s source (a client of its own without the term's).
    pub(crate) fn source_client(&self, def: &MirrorConfig) -> crate::cluster::client::ClusterClient {
        match &self.inner.sources {
            Some(sources) => sources.client(def),
            None => crate::cluster::client::ClusterClient::source_of(def, SOURCE_TIMEOUT),
        }
    }

    /// Drops the source clients no remaining mirror uses (after a delete).
    pub(crate) fn release_unused_sources(&self) {
        if let Some(sources) = &self.inner.sources {
            let remaining: Vec<MirrorConfig> = self.inner.definitions.mirrors.iter().map(|m| m.value().clone()).collect();
            sources.keep_only(&remaining);
        }
    }

    pub(crate) fn store(&self) -> Option<Arc<StateStore>> {
        self.inner.store.clone()
    }

    /// The state store once the engine has booted, waiting at most `BOOT_WAIT` (a request can
    /// arrive while the state topic is still being read).
    pub(crate) async fn booted_store(&self) -> Option<Arc<StateStore>> {
        if !self.inner.waits_for_boot {
            return None;
        }
        if self.inner.common.booted.wait(BOOT_WAIT).await { self.store() } else { None }
    }

    /// Marks the stored state as loaded (every stored mirror known, its topics registered).
    pub(crate) fn mark_booted(&self) {
        self.inner.common.booted.open();
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        &self.inner.common.catalog
    }

    pub(crate) fn add_topic(&self, topic: &str, rt: TopicRuntime) {
        let runtimes = &self.inner.runtimes;
        runtimes.topics.insert(topic.to_owned(), rt);
        runtimes.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// `(partitions, desired)` of a running mirror topic of `mirror`.
    pub(crate) fn topic_shape(&self, topic: &str, mirror: &str) -> Option<(usize, Desired)> {
        self.inner
            .runtimes
            .topics
            .get(topic)
            .filter(|rt| rt.mirror == mirror)
            .map(|rt| (rt.partitions, *rt.desired.borrow()))
    }

    /// Records that `topic` now has `partitions` and starts the copy tasks of the new ones
    /// (when the topic is mirroring).
    pub(crate) fn grow_topic(&self, topic: &str, partitions: usize) {
        let Some(mut rt) = self.inner.runtimes.topics.get_mut(topic) else { return };
        let old = rt.partitions;
        rt.partitions = partitions.max(old);
        let mirroring = *rt.desired.borrow() == Desired::Mirroring;
        let spawn = rt.spawn.clone();
        drop(rt);
        if mirroring {
            for p in old..partitions {
                spawn(p as i32);
            }
        }
    }

    /// Every known mirror with its topics, by name.
    pub(crate) fn list(&self) -> Vec<MirrorListing> {
        let mut out: Vec<MirrorListing> = self
            .inner
            .definitions
            .mirrors
            .iter()
            .map(|m| MirrorListing {
                name: m.key().clone(),
                source_bootstrap: shown_servers(&m.value().source_bootstrap_servers),
                source_cluster_id: self.inner.sources.as_ref().and_then(|s| s.client(m.value()).cluster_id()).unwrap_or_default(),
                topics: self.claimed_topics(m.key()),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Whether `name` is a known mirror.
    pub(crate) fn has_mirror(&self, name: &str) -> bool {
        self.inner.definitions.mirrors.contains_key(name)
    }

    /// Per topic, per partition status of mirror `name` (topic-level failures as partition -1).
    pub(crate) fn describe(&self, name: &str) -> Vec<(String, Vec<PartitionDetail>)> {
        let mut topics: Vec<(String, Vec<PartitionDetail>)> = Vec::new();
        let mut entries = self.inner.common.status.snapshot();
        if let Some(views) = self.views() {
            // Shared work: partitions as the members recorded them; topic-level problems
            // (partition -1) are this engine's own.
            entries.retain(|((_, _, p), _)| *p < 0);
            entries.extend(views.snapshot().into_iter().filter(|((_, _, p), _)| *p >= 0));
        }
        for ((mirror, topic, partition), status) in entries {
            if mirror != name {
                continue;
            }
            let detail = PartitionDetail { partition, status };
            match topics.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, parts)) => parts.push(detail),
                None => topics.push((topic, vec![detail])),
            }
        }
        topics
    }

    /// The desired state of a mirror topic, if it is one (a stored topic not taken up yet
    /// since boot: what the state topic records).
    pub(crate) fn desired(&self, topic: &str) -> Option<Desired> {
        if let Some(rt) = self.inner.runtimes.topics.get(topic) {
            return Some(*rt.desired.borrow());
        }
        self.claimed_by(topic)?;
        self.store()?.topic_owner(topic).map(|o| o.desired_state())
    }
}

/// A follower's control with nothing else behind it (tests).
#[cfg(test)]
pub(crate) fn follower_for_tests(status: StatusBoard, catalog: Catalog) -> TermControl {
    let parts = TermParts {
        role: Role::Follower { state_topic: "__state".into() },
        ..TermParts::none(Vec::new())
    };
    term_for_tests(status, catalog, parts)
}

/// An engine term's control with `parts` and a fresh handle's boards (tests).
#[cfg(test)]
pub(crate) fn term_for_tests(status: StatusBoard, catalog: Catalog, parts: TermParts) -> TermControl {
    TermControl::with(Common::new(status, catalog), parts, true)
}

/// `servers` as shown to users: the user-info part of an address with `@` (stored before such
/// addresses were refused) is replaced by `***`.
pub(crate) fn shown_servers(servers: &[String]) -> String {
    servers
        .iter()
        .map(|s| match s.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => s.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}
