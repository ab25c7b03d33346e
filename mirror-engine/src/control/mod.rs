//! Operator control of mirror topics at runtime — pause, resume, stop (failover) — and the
//! list/describe views, shared by every management front end (Kafka RPCs, REST). Per topic the
//! operator sets a *desired* state; it is persisted in the state topic first, then the
//! partition tasks follow it (KIP-1279 §2.2 desired vs actual). Results carry KIP-1279 error
//! codes. This folder owns the operations and their data: the state changes (`transitions`),
//! the graceful stop's wait for copied data (`graceful`), the mirror definitions — create, start
//! topics, delete (`definitions`) — and mirror settings shown and changed through the API
//! (`settings`). Copying data belongs to `copy::partition`; what the front ends look like to the
//! proxy.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use kmp_config::MirrorConfig;
use tokio::sync::{Notify, watch};

pub(crate) mod definitions;
pub(crate) mod graceful;
pub(crate) mod settings;
mod transitions;

use crate::copy::sources::Sources;
use crate::state::boot_gate::BootGate;
use crate::state::catalog::Catalog;
use crate::state::records::Desired;
use crate::state::status::{PartitionStatus, StatusBoard};
use crate::state::store::StateStore;
use crate::state::sync_status::{SyncBoard, SyncKind, SyncStatus};

/// Runs the last group offset sync of a mirror's topics when they are stopped.
pub(crate) type FinalSync = Arc<dyn Fn(String, Vec<String>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// Kafka and KIP-1279 error codes of the control operations (one table, in the protocol crate).
pub use kmp_protocol::mirror_api::errors as codes;

/// The outcome of an operation for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicResult {
    pub topic: String,
    pub error_code: i16,
    pub message: Option<String>,
}

impl TopicResult {
    fn ok(topic: &str) -> Self {
        Self {
            topic: topic.to_owned(),
            error_code: codes::NONE,
            message: None,
        }
    }
    fn err(topic: &str, error_code: i16, message: String) -> Self {
        Self {
            topic: topic.to_owned(),
            error_code,
            message: Some(message),
        }
    }
}

/// A mirror as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorListing {
    pub name: String,
    pub source_bootstrap: String,
    pub topics: Vec<String>,
}

/// One partition as described.
#[derive(Debug, Clone)]
pub struct PartitionDetail {
    pub partition: i32,
    pub status: PartitionStatus,
}

/// A running mirror topic.
pub(crate) struct TopicRuntime {
    pub(crate) mirror: String,
    pub(crate) partitions: usize,
    pub(crate) desired: watch::Sender<Desired>,
    /// Starts (again) the copy task of one partition.
    pub(crate) spawn: Arc<dyn Fn(i32) + Send + Sync>,
}

/// Runtime control of the engine's mirrors; cheap to clone.
#[derive(Clone)]
pub struct Control {
    inner: Arc<Inner>,
}

struct Inner {
    topics: DashMap<String, TopicRuntime>,
    /// Mirror name → its current definition (config file or API).
    mirrors: DashMap<String, MirrorConfig>,
    /// Topics this term took up (a discovery loop prepares and copies them); which mirror owns
    /// a topic is the catalog's.
    taken: dashmap::DashSet<String>,
    /// Bumped whenever `topics` gains or loses a topic (waiters subscribe instead of polling).
    runtimes: watch::Sender<u64>,
    /// Wakes a mirror's discovery loop when its definition changed.
    wake: DashMap<String, Arc<Notify>>,
    /// Starts a new mirror's discovery (set when the engine has booted).
    launcher: OnceLock<Arc<dyn Fn(MirrorConfig) + Send + Sync>>,
    store: OnceLock<Arc<StateStore>>,
    /// Management requests forwarded between instances (`auto` only).
    forwarding: OnceLock<crate::ha::forward::Forwarding>,
    /// The engine's source clients (set at boot; a follower has none).
    sources: OnceLock<Arc<Sources>>,
    /// The group offset pass run before stopped topics become writable (set at boot).
    final_sync: OnceLock<FinalSync>,
    status: StatusBoard,
    sync: SyncBoard,
    /// The instance's catalog of mirror topics (outlives this term).
    catalog: Catalog,
    /// Open once the stored state is loaded.
    booted: BootGate,
    /// Why the state topic cannot be opened, while the engine keeps retrying (for `/readyz`).
    boot_problem: std::sync::Mutex<Option<String>>,
    /// `security.mirror_source_allow`: what API-created mirrors may use as `bootstrap.servers`
    /// (unset: nothing).
    source_allow: OnceLock<Vec<String>>,
    /// Set on an instance that follows the state topic instead of running the engine
    /// (`engine.role = "follower"`): its views are the followed state, and it changes nothing.
    follower: OnceLock<String>,
    /// With shared work (`engine.share_work`, the active instance): what pause and stop wait
    /// behind, since the partitions are copied by every member (see `share`).
    barrier: OnceLock<crate::ha::share::Barrier>,
    /// With shared work: the partitions as the members recorded them in the state topic (a
    /// follower's board), which describe and the graceful stop read.
    views: OnceLock<StatusBoard>,
    /// With shared work: topics whose pause or stop was recorded but whose barrier has not
    /// passed yet (a retry passes one).
    unsettled: dashmap::DashSet<String>,
}

/// The answer to a management request while the stored state is still loading (retriable).
pub const LOADING: &str = "the mirror engine is still loading its stored state; retry";

/// Connect timeout toward a mirror's source for the graceful stop's end-offset read.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a management request waits for the engine to finish booting.
const BOOT_WAIT: Duration = Duration::from_secs(30);

/// How long a pause or stop waits for the partition tasks to finish.
const HALT_TIMEOUT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("topics", &self.inner.topics.len()).finish()
    }
}

impl Control {
    pub(crate) fn new(status: StatusBoard, catalog: Catalog) -> Self {
        Self {
            inner: Arc::new(Inner {
                topics: DashMap::new(),
                mirrors: DashMap::new(),
                taken: dashmap::DashSet::new(),
                runtimes: watch::Sender::new(0),
                wake: DashMap::new(),
                launcher: OnceLock::new(),
                store: OnceLock::new(),
                sources: OnceLock::new(),
                forwarding: OnceLock::new(),
                final_sync: OnceLock::new(),
                status,
                sync: SyncBoard::default(),
                catalog,
                booted: BootGate::default(),
                boot_problem: std::sync::Mutex::new(None),
                source_allow: OnceLock::new(),
                follower: OnceLock::new(),
                barrier: OnceLock::new(),
                views: OnceLock::new(),
                unsettled: dashmap::DashSet::new(),
            }),
        }
    }

    /// Marks this instance as a follower of `state_topic` (once, at start).
    pub(crate) fn set_follower(&self, state_topic: &str) {
        let _ = self.inner.follower.set(state_topic.to_owned());
    }

    /// Shares the copying with the other members: state changes wait behind `barrier` (once).
    pub(crate) fn set_barrier(&self, barrier: crate::ha::share::Barrier) {
        let _ = self.inner.barrier.set(barrier);
    }

    /// Shows partitions as `views` has them (the followed state topic) where copying is shared.
    pub(crate) fn set_views(&self, views: StatusBoard) {
        let _ = self.inner.views.set(views);
    }

    /// The board partition progress is read from: the members' records where copying is
    /// shared, else this engine's own.
    pub(crate) fn progress_board(&self) -> &StatusBoard {
        self.inner.views.get().unwrap_or(&self.inner.status)
    }

    /// Whether this instance follows the state topic instead of running the engine.
    pub fn is_follower(&self) -> bool {
        self.inner.follower.get().is_some()
    }

    /// The refusal every mutating management request (create, start, stop, pause, resume,
    /// delete, config changes) gets on a follower: NOT_CONTROLLER (41) and why. `None` on the
    /// engine instance. The front ends ask before doing anything.
    pub fn follower_refusal(&self) -> Option<(i16, String)> {
        self.inner.follower.get().map(|topic| {
            (
                codes::NOT_CONTROLLER,
                format!(
                    "this kafka-mirror-proxy instance does not run the mirror engine (engine.role = follower; it follows the state topic {topic} and enforces it); send mirror changes to the instance with engine.role = engine"
                ),
            )
        })
    }

    /// The follower's view of one mirror topic (it has no copy tasks) in the list and describe
    /// views, with its desired state; the follower registers it in the catalog
    /// (`follow::writes`).
    pub(crate) fn show_followed_topic(&self, topic: &str, mirror: &str, partitions: usize, desired: Desired) {
        if let Some(mut rt) = self.inner.topics.get_mut(topic) {
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
        &self.inner.status
    }

    /// Sets the `host:port` patterns API-created mirrors' sources must match (once, at start).
    pub(crate) fn set_source_allow(&self, patterns: Vec<String>) {
        let _ = self.inner.source_allow.set(patterns);
    }

    /// The `host:port` patterns API-created mirrors' sources must match (empty: none allowed).
    pub(crate) fn source_allow(&self) -> &[String] {
        self.inner.source_allow.get().map_or(&[], Vec::as_slice)
    }

    pub(crate) fn set_store(&self, store: Arc<StateStore>) {
        let _ = self.inner.store.set(store);
    }

    pub(crate) fn add_mirror(&self, def: MirrorConfig) {
        self.inner.mirrors.insert(def.name.clone(), def);
    }

    pub(crate) fn remove_mirror(&self, name: &str) {
        self.inner.mirrors.remove(name);
        self.inner.sync.remove(name);
        self.wake(name);
        self.inner.wake.remove(name);
    }

    /// The current definition of mirror `name`.
    pub fn definition(&self, name: &str) -> Option<MirrorConfig> {
        self.inner.mirrors.get(name).map(|d| d.clone())
    }

    pub(crate) fn set_definition(&self, def: MirrorConfig) {
        let name = def.name.clone();
        self.inner.mirrors.insert(name.clone(), def);
        self.wake(&name);
    }

    /// Claims `topic` for `mirror` so its discovery loop takes it up: true once per term for a
    /// topic that is free or already `mirror`'s in the catalog (a stored topic is registered at
    /// boot, before its loop takes it up); false if another mirror owns it or this term took it
    /// up before.
    pub(crate) fn claim_topic(&self, topic: &str, mirror: &str) -> bool {
        self.inner.catalog.claim(topic, mirror) && self.inner.taken.insert(topic.to_owned())
    }

    /// The mirror that owns `topic` (the catalog's answer).
    pub(crate) fn claimed_by(&self, topic: &str) -> Option<String> {
        self.inner.catalog.owner(topic)
    }

    /// Topics owned by `mirror`, sorted (the catalog's answer).
    pub(crate) fn claimed_topics(&self, mirror: &str) -> Vec<String> {
        self.inner.catalog.topics_of(mirror)
    }

    /// Forgets a topic of a deleted mirror: it is an ordinary topic again (the catalog keeps
    /// masking its fillers), and this term no longer runs it.
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.inner.catalog.remove(topic);
        self.forget_view(topic);
    }

    /// Forgets what this term runs or shows of `topic` (the catalog is left as it is).
    pub(crate) fn forget_view(&self, topic: &str) {
        self.inner.taken.remove(topic);
        if let Some((_, rt)) = self.inner.topics.remove(topic) {
            for p in 0..rt.partitions as i32 {
                self.inner.status.remove(&(rt.mirror.clone(), topic.to_owned(), p));
            }
            self.inner.runtimes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A receiver that sees every later change of the term's running topics.
    pub(crate) fn runtime_changes(&self) -> watch::Receiver<u64> {
        self.inner.runtimes.subscribe()
    }

    pub(crate) fn notifier(&self, name: &str) -> Arc<Notify> {
        self.inner.wake.entry(name.to_owned()).or_insert_with(|| Arc::new(Notify::new())).clone()
    }

    fn wake(&self, name: &str) {
        if let Some(n) = self.inner.wake.get(name) {
            n.notify_one();
        }
    }

    pub(crate) fn inner_launcher(&self) -> Option<Arc<dyn Fn(MirrorConfig) + Send + Sync>> {
        self.inner.launcher.get().cloned()
    }

    pub(crate) fn set_launcher(&self, launch: Arc<dyn Fn(MirrorConfig) + Send + Sync>) {
        let _ = self.inner.launcher.set(launch);
    }

    pub(crate) fn set_final_sync(&self, f: FinalSync) {
        let _ = self.inner.final_sync.set(f);
    }

    /// Where metadata sync reports.
    pub(crate) fn sync_board(&self) -> &SyncBoard {
        &self.inner.sync
    }

    /// Metadata sync status of mirror `name` per kind (last run, groups synced, errors).
    pub fn sync_status(&self, name: &str) -> Vec<(SyncKind, SyncStatus)> {
        self.inner.sync.get(name)
    }

    /// Metadata sync status of every mirror.
    pub fn sync_snapshot(&self) -> Vec<((String, SyncKind), SyncStatus)> {
        self.inner.sync.snapshot()
    }

    /// Running topics of `mirror` whose desired state is `desired`, sorted.
    pub(crate) fn topics_in_state(&self, mirror: &str, desired: Desired) -> Vec<String> {
        let mut out: Vec<String> = self
            .inner
            .topics
            .iter()
            .filter(|t| t.mirror == mirror && *t.desired.borrow() == desired)
            .map(|t| t.key().clone())
            .collect();
        out.sort();
        out
    }

    pub(crate) fn set_forwarding(&self, forwarding: crate::ha::forward::Forwarding) {
        let _ = self.inner.forwarding.set(forwarding);
    }

    /// The instance's forwarding of management requests (`auto` only).
    pub(crate) fn forwarding(&self) -> Option<crate::ha::forward::Forwarding> {
        self.inner.forwarding.get().cloned()
    }

    pub(crate) fn set_sources(&self, sources: Arc<Sources>) {
        let _ = self.inner.sources.set(sources);
    }

    /// The shared client of mirror `def`'s source (a client of its own before boot).
    pub(crate) fn source_client(&self, def: &MirrorConfig) -> crate::cluster::client::ClusterClient {
        match self.inner.sources.get() {
            Some(sources) => sources.client(def),
            None => crate::cluster::client::ClusterClient::source_of(def, SOURCE_TIMEOUT),
        }
    }

    /// Drops the source clients no remaining mirror uses (after a delete).
    pub(crate) fn release_unused_sources(&self) {
        if let Some(sources) = self.inner.sources.get() {
            let remaining: Vec<MirrorConfig> = self.inner.mirrors.iter().map(|m| m.value().clone()).collect();
            sources.keep_only(&remaining);
        }
    }

    pub(crate) fn store(&self) -> Option<Arc<StateStore>> {
        self.inner.store.get().cloned()
    }

    /// The state store once the engine has booted, waiting at most `BOOT_WAIT` (a request can
    /// arrive while the state topic is still being read).
    pub(crate) async fn booted_store(&self) -> Option<Arc<StateStore>> {
        if self.wait_booted().await { self.store() } else { None }
    }

    /// Marks the stored state as loaded (every stored mirror known, its topics registered).
    pub(crate) fn mark_booted(&self) {
        self.inner.booted.open();
    }

    /// Records why booting is stuck (`None`: it is not, or no longer).
    pub(crate) fn set_boot_problem(&self, problem: Option<String>) {
        *self.inner.boot_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = problem;
    }

    /// Why the engine has not booted yet, when the last attempt to open its state topic failed.
    pub fn boot_problem(&self) -> Option<String> {
        self.inner.boot_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Whether the stored state is loaded: until then "no such mirror" may be wrong.
    pub fn is_booted(&self) -> bool {
        self.inner.booted.is_open()
    }

    /// Waits (at most `BOOT_WAIT`) until the stored state is loaded; whether it is.
    pub async fn wait_booted(&self) -> bool {
        self.inner.booted.wait(BOOT_WAIT).await
    }

    /// Waits at most `limit` for the stored state to be loaded; `true` once it is.
    pub async fn wait_booted_for(&self, limit: std::time::Duration) -> bool {
        self.inner.booted.wait(limit).await
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    pub(crate) fn add_topic(&self, topic: &str, rt: TopicRuntime) {
        self.inner.topics.insert(topic.to_owned(), rt);
        self.inner.runtimes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// `(partitions, desired)` of a running mirror topic of `mirror`.
    pub(crate) fn topic_shape(&self, topic: &str, mirror: &str) -> Option<(usize, Desired)> {
        self.inner
            .topics
            .get(topic)
            .filter(|rt| rt.mirror == mirror)
            .map(|rt| (rt.partitions, *rt.desired.borrow()))
    }

    /// Records that `topic` now has `partitions` and starts the copy tasks of the new ones
    /// (when the topic is mirroring).
    pub(crate) fn grow_topic(&self, topic: &str, partitions: usize) {
        let Some(mut rt) = self.inner.topics.get_mut(topic) else { return };
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
    pub fn list(&self) -> Vec<MirrorListing> {
        let mut out: Vec<MirrorListing> = self
            .inner
            .mirrors
            .iter()
            .map(|m| MirrorListing {
                name: m.key().clone(),
                source_bootstrap: shown_servers(&m.value().source_bootstrap_servers),
                topics: self.claimed_topics(m.key()),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Whether `name` is a known mirror.
    pub fn has_mirror(&self, name: &str) -> bool {
        self.inner.mirrors.contains_key(name)
    }

    /// Per topic, per partition status of mirror `name` (topic-level failures as partition -1).
    pub fn describe(&self, name: &str) -> Vec<(String, Vec<PartitionDetail>)> {
        let mut topics: Vec<(String, Vec<PartitionDetail>)> = Vec::new();
        let mut entries = self.inner.status.snapshot();
        if let Some(views) = self.inner.views.get() {
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
    pub fn desired(&self, topic: &str) -> Option<Desired> {
        if let Some(rt) = self.inner.topics.get(topic) {
            return Some(*rt.desired.borrow());
        }
        self.claimed_by(topic)?;
        self.store()?.topic_owner(topic).map(|o| o.desired_state())
    }
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
