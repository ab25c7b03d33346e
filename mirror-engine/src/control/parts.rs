//! What a term hands its control when it builds it ([`TermParts`], with the term's [`Role`]),
//! and what the control asks of the term in return ([`TermCommand`], carried out by the term's
//! command loop in `engine::term`).

use std::sync::Arc;

use kmp_config::MirrorConfig;
use tokio::sync::{mpsc, oneshot, watch};

use crate::copy::sources::Sources;
use crate::ha::forward::Forwarding;
use crate::ha::share::Barrier;
use crate::state::status::StatusBoard;
use crate::state::store::StateStore;

/// What a term's control asks of the term: the term's command loop (`engine::term`) carries it
/// out, so control never calls into the mirrors' loops or metadata sync, which sit above it.
pub(crate) enum TermCommand {
    /// Launch a mirror created through the API (its discovery and sync loops); `done` once it
    /// is registered and its loops are spawned.
    Launch { def: Box<MirrorConfig>, done: oneshot::Sender<()> },
    /// Abort the destination transactions still open on `topics` of `mirror`, which are being
    /// stopped (`copy::txn::abort_open`), then run their last consumer- and share-group offset
    /// passes; `done` once they ran, with the topics whose transactions could not be aborted and
    /// why (those must stay read-only).
    FinalSync {
        mirror: String,
        topics: Vec<String>,
        done: oneshot::Sender<Vec<(String, String)>>,
    },
    /// What starting `topics` of mirror `def` would do (a failback's dry run); changes nothing.
    FailbackPlan {
        def: Box<MirrorConfig>,
        topics: Vec<String>,
        done: oneshot::Sender<Vec<crate::failback::Preview>>,
    },
}

/// Which kind of term a control belongs to.
#[derive(Clone)]
pub(crate) enum Role {
    /// An engine term: it changes mirrors. With shared work (`engine.share_work`, the active
    /// instance), the barrier pause and stop wait behind, since every member copies (see
    /// `share`), and the partitions as the members recorded them (a follower's board), which
    /// describe and the graceful stop read.
    Engine { barrier: Option<Barrier>, views: Option<StatusBoard> },
    /// An instance that follows `state_topic` instead of running the engine (`engine.role =
    /// "follower"`, or an `auto` standby): its views are the followed state; it changes nothing.
    Follower { state_topic: String },
}

/// What a term hands its control when it builds it.
pub(crate) struct TermParts {
    /// The term's state store (`None`: a follower, or an engine that is off).
    pub(crate) store: Option<Arc<StateStore>>,
    /// The term's source clients (`None`: a follower or a term that only copies).
    pub(crate) sources: Option<Arc<Sources>>,
    /// `security.mirror_source_allow`: what API-created mirrors may use as `bootstrap.servers`
    /// (empty: nothing).
    pub(crate) source_allow: Vec<String>,
    pub(crate) role: Role,
    /// Management requests forwarded between instances (`auto` only).
    pub(crate) forwarding: Option<Forwarding>,
    /// The term's command loop (`None`: a term without one, e.g. a follower's).
    pub(crate) commands: Option<mpsc::Sender<TermCommand>>,
    /// The term's stop signal (`true` once the term ends: its lease is lost or the instance
    /// stops); `None` for a control whose term never ends on its own (a follower's, a stand-in).
    pub(crate) ended: Option<watch::Receiver<bool>>,
}

impl TermParts {
    /// The parts of a control with nothing behind it (an engine that is off, or a handle's
    /// answer before its term is built): no store, no sources, no commands.
    pub(crate) fn none(source_allow: Vec<String>) -> Self {
        Self {
            store: None,
            sources: None,
            source_allow,
            role: Role::Engine { barrier: None, views: None },
            forwarding: None,
            commands: None,
            ended: None,
        }
    }
}
