//! The proxy's handle on one engine term's management ([`Control`]): it exists from the term's
//! start, before the state store is open, and holds what the proxy needs meanwhile — the boot
//! gate (requests wait on it, then answer `LOADING`), why boot is stuck (`/readyz`), the status
//! and sync boards, the catalog — plus the slot the term publishes its [`TermControl`] in, once,
//! when it has built it. Management operations wait for boot, then run on the term's control.

use std::sync::Arc;
use std::time::Duration;

use kmp_config::MirrorConfig;
use tokio::sync::{mpsc, watch};

use super::{BOOT_WAIT, Common, MirrorListing, PartitionDetail, TermCommand, TermControl, TermParts, TopicResult};
use crate::state::catalog::Catalog;
use crate::state::records::Desired;
use crate::state::status::StatusBoard;
use crate::state::sync_status::{SyncKind, SyncStatus};

/// Management of one engine term (or a follower's views), as the proxy sees it; cheap to clone.
#[derive(Clone)]
pub struct Control {
    inner: Arc<Handle>,
}

struct Handle {
    common: Arc<Common>,
    /// The term's control once the term built it (set once per term; a new term comes with a
    /// new handle), with the strong end of its command channel.
    term: watch::Sender<Option<Published>>,
    /// What answers before the term's control is built: no store, no mirrors, the allow-list.
    stand_in: TermControl,
}

#[derive(Clone)]
struct Published {
    control: TermControl,
    /// Keeps the term's command loop alive while this handle is (see `Term::commands`).
    _commands: Option<mpsc::Sender<TermCommand>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("term", &self.current()).finish()
    }
}

impl Control {
    /// A handle whose term is not built yet; `source_allow` is what its stand-in checks a
    /// create against meanwhile.
    pub(crate) fn new(status: StatusBoard, catalog: Catalog, source_allow: Vec<String>) -> Self {
        let common = Common::new(status, catalog);
        let stand_in = TermControl::with(common.clone(), TermParts::none(source_allow), false);
        Self {
            inner: Arc::new(Handle {
                common,
                term: watch::Sender::new(None),
                stand_in,
            }),
        }
    }

    /// Builds this handle's term control from `parts` (it shares the handle's boards, catalog
    /// and boot gate).
    pub(crate) fn build(&self, parts: TermParts) -> TermControl {
        TermControl::with(self.inner.common.clone(), parts, true)
    }

    /// Publishes the term's control; the handle keeps `commands` (the strong end of the
    /// channel the control holds weakly) so the term's command loop lives as long as the
    /// handle does. Once per term.
    pub(crate) fn publish(&self, control: TermControl, commands: Option<mpsc::Sender<TermCommand>>) {
        self.inner.term.send_replace(Some(Published { control, _commands: commands }));
    }

    /// The term's control if it is built yet.
    pub(crate) fn current(&self) -> Option<TermControl> {
        self.inner.term.borrow().as_ref().map(|p| p.control.clone())
    }

    /// The term's control, or the stand-in before it is built (an empty registry).
    fn now(&self) -> TermControl {
        self.current().unwrap_or_else(|| self.inner.stand_in.clone())
    }

    /// The term's control once the engine has booted, waiting at most `BOOT_WAIT`; the
    /// stand-in if it did not (its answers: still loading, still starting, no such mirror).
    async fn booted(&self) -> TermControl {
        if self.wait_booted().await {
            return self.now();
        }
        self.inner.stand_in.clone()
    }

    /// The board the views read (a follower fills it from the state topic).
    pub(crate) fn status_board(&self) -> &StatusBoard {
        &self.inner.common.status
    }

    /// Marks the stored state as loaded (every stored mirror known, its topics registered).
    pub(crate) fn mark_booted(&self) {
        self.inner.common.booted.open();
    }

    /// Records why booting is stuck (`None`: it is not, or no longer).
    pub(crate) fn set_boot_problem(&self, problem: Option<String>) {
        *self.inner.common.boot_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = problem;
    }

    /// Why the engine has not booted yet, when the last attempt to open its state topic failed.
    pub fn boot_problem(&self) -> Option<String> {
        self.inner.common.boot_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Whether the stored state is loaded: until then "no such mirror" may be wrong.
    pub fn is_booted(&self) -> bool {
        self.inner.common.booted.is_open()
    }

    /// Waits (at most `BOOT_WAIT`) until the stored state is loaded; whether it is.
    pub async fn wait_booted(&self) -> bool {
        self.inner.common.booted.wait(BOOT_WAIT).await
    }

    /// Waits at most `limit` for the stored state to be loaded; `true` once it is.
    pub async fn wait_booted_for(&self, limit: Duration) -> bool {
        self.inner.common.booted.wait(limit).await
    }

    /// Metadata sync status of mirror `name` per kind (last run, groups synced, errors).
    pub fn sync_status(&self, name: &str) -> Vec<(SyncKind, SyncStatus)> {
        self.inner.common.sync.get(name)
    }

    /// Metadata sync status of every mirror.
    pub fn sync_snapshot(&self) -> Vec<((String, SyncKind), SyncStatus)> {
        self.inner.common.sync.snapshot()
    }

    /// Whether this instance follows the state topic instead of running the engine.
    pub fn is_follower(&self) -> bool {
        self.now().is_follower()
    }

    /// The refusal every mutating management request (create, start, stop, pause, resume,
    /// delete, config changes) gets on a follower: NOT_CONTROLLER (41) and why. `None` on the
    /// engine instance. The front ends ask before doing anything.
    pub fn follower_refusal(&self) -> Option<(i16, String)> {
        self.now().follower_refusal()
    }

    /// The current definition of mirror `name`.
    pub fn definition(&self, name: &str) -> Option<MirrorConfig> {
        self.now().definition(name)
    }

    /// Every known mirror with its topics, by name.
    pub fn list(&self) -> Vec<MirrorListing> {
        self.now().list()
    }

    /// Whether `name` is a known mirror.
    pub fn has_mirror(&self, name: &str) -> bool {
        self.now().has_mirror(name)
    }

    /// Per topic, per partition status of mirror `name` (topic-level failures as partition -1).
    pub fn describe(&self, name: &str) -> Vec<(String, Vec<PartitionDetail>)> {
        self.now().describe(name)
    }

    /// A failing-back cluster's lookup of the last mirror epochs recorded for its topics (see
    /// `lookup`).
    pub fn last_mirror_epochs(&self, cluster_id: &str, lookups: &[kmp_protocol::mirror_api::EpochLookup]) -> Vec<kmp_protocol::mirror_api::LookupResult> {
        self.now().last_mirror_epochs(cluster_id, lookups)
    }

    /// The desired state of a mirror topic, if it is one (a stored topic not taken up yet
    /// since boot: what the state topic records).
    pub fn desired(&self, topic: &str) -> Option<Desired> {
        self.now().desired(topic)
    }

    /// The mirror's configs as KIP-1279 names them (DescribeConfigs on resource type 64):
    /// `(name, value, sensitive)`; a secret's value is never returned (`None`, sensitive).
    pub fn mirror_configs(&self, name: &str) -> Option<Vec<(String, Option<String>, bool)>> {
        self.now().mirror_configs(name)
    }

    /// CreateClusterMirror (see `definitions`): the error code and message.
    pub async fn create_mirror(&self, name: &str, configs: &[(String, Option<String>)]) -> (i16, Option<String>) {
        self.booted().await.create_mirror(name, configs).await
    }

    /// StartMirrorTopics: adds topics (and include/exclude patterns) to a mirror and starts them.
    pub async fn start_topics(&self, name: &str, topics: &[String], include: &[String], exclude: &[String]) -> (i16, Option<String>, Vec<TopicResult>) {
        self.booted().await.start_topics(name, topics, include, exclude).await
    }

    /// A failback's dry run: what starting `topics` of mirror `name` would do (see
    /// `TermControl::failback_plan`).
    pub async fn failback_plan(&self, name: &str, topics: &[String]) -> Result<Vec<crate::failback::Preview>, (i16, String)> {
        self.booted().await.failback_plan(name, topics).await
    }

    /// DeleteClusterMirror: only when every topic of the mirror is stopped.
    pub async fn delete_mirror(&self, name: &str) -> (i16, Option<String>) {
        self.booted().await.delete_mirror(name).await
    }

    /// IncrementalAlterConfigs on a mirror (see `settings`): the error code and message.
    pub async fn alter_mirror(&self, name: &str, ops: &[(String, i8, Option<String>)]) -> (i16, Option<String>) {
        self.booted().await.alter_mirror(name, ops).await
    }

    /// Pauses topics: copying stops, they stay read-only.
    pub async fn pause_topics(&self, mirror: &str, topics: &[String]) -> Vec<TopicResult> {
        self.booted().await.pause_topics(mirror, topics).await
    }

    /// Resumes paused topics.
    pub async fn resume_topics(&self, mirror: &str, topics: &[String]) -> Vec<TopicResult> {
        self.booted().await.resume_topics(mirror, topics).await
    }

    /// Stops topics (failover), after a graceful wait when `graceful` is set (see
    /// `transitions`).
    pub async fn stop_topics(&self, mirror: &str, topics: &[String], graceful: Option<Duration>) -> Vec<TopicResult> {
        self.booted().await.stop_topics(mirror, topics, graceful).await
    }
}
