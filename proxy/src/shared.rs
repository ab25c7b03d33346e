//! State shared by every connection and background task of one proxy: the configuration, the
//! broker view, metrics, the upstream connector, the mirror engine and the resource limits.
//! Constructed by `server`; nothing here does I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use kmp_config::Config;

use crate::metrics::Metrics;
use crate::net::limits::Limits;
use crate::upstream::cluster::ClusterView;
use crate::upstream::connect::Connector;

/// State shared by every connection and background task.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) cluster: ClusterView,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) connector: Connector,
    /// Set once the upstream answered a metadata refresh; cleared when refreshes fail.
    pub(crate) ready: AtomicBool,
    /// The mirror engine (idle when no mirrors are declared): progress and memory budget.
    /// (`engine.role = "auto"`: whichever of engine and follower runs on this instance now.)
    pub(crate) mirrors: kmp_mirror_engine::EngineSlot,
    /// Connection counts and the request-byte budget (`[limits]`).
    pub(crate) limits: Limits,
    pub(crate) next_connection_id: AtomicU64,
    /// ApiVersions answers kept to answer new connections while their upstream opens.
    pub(crate) early_versions: crate::upstream::early_versions::EarlyVersions,
}
