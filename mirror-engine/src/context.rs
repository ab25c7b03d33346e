//! What every mirror of one engine term shares ([`Shared`]) and what starting one topic of a
//! mirror needs ([`TopicContext`]). Built by the term (`engine`), used by the mirrors' loops
//! (`mirrors`), metadata sync (`sync`) and worker boot.

use std::sync::Arc;

use kmp_config::MirrorConfig;
use tokio::sync::watch;

use crate::cluster::client::ClusterClient;
use crate::control::TermControl;
use crate::copy::budget::Budget;
use crate::copy::fetch::session::FetchSessions;
use crate::copy::produce::mux::Producers;
use crate::copy::sources::Sources;
use crate::ha::share::Part;
use crate::lease::Lease;
use crate::state::catalog::Catalog;
use crate::state::status::StatusBoard;
use crate::state::store::StateStore;

/// What every mirror shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) destination: ClusterClient,
    pub(crate) status: StatusBoard,
    pub(crate) budget: Budget,
    pub(crate) topics: Catalog,
    pub(crate) control: TermControl,
    pub(crate) max_in_flight: usize,
    /// The destination's produce lanes, one per broker, shared by every mirror.
    pub(crate) producers: Producers,
    /// Writing (data, state, group offsets, configs) is allowed only while this holds.
    pub(crate) lease: Lease,
    /// Which part of the mirror work this term does.
    pub(crate) part: Part,
    pub(crate) stop: watch::Receiver<bool>,
    /// One client and one set of fetch sessions per source setting, shared by every mirror.
    pub(crate) sources: Arc<Sources>,
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

/// What starting one topic of a mirror needs.
#[derive(Clone)]
pub(crate) struct TopicContext {
    pub(crate) mirror: MirrorConfig,
    pub(crate) source: ClusterClient,
    pub(crate) fetchers: FetchSessions,
    pub(crate) shared: Shared,
    pub(crate) store: Arc<StateStore>,
}
