//! One generation's copying on an instance of `engine.role = "auto"` with `engine.share_work`:
//! an engine term that copies only the partitions of this instance's [`Share`] (`Part::Work`),
//! started when the election hands the share out and ended — its partitions stopped, its final
//! progress written — before the instance rejoins the group. Deciding the share is `election`'s
//! and `share`'s; everything else the active instance does stays in its own term (`auto`).

use std::sync::Arc;
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

use crate::share::Share;
use crate::{Engine, EngineLinks, MirrorTopics, Part, start_term};

/// Longest wait for a worker's partitions to stop and write their progress.
const END_WAIT: Duration = Duration::from_secs(10);

/// The running copy of one share.
pub(crate) struct Worker {
    pub(crate) engine: Engine,
    share: Share,
    stop: watch::Sender<bool>,
}

impl Worker {
    /// Starts copying `share`, unless the election has given it up already (`None`).
    pub(crate) fn start(config: &EngineConfig, mirrors: Vec<MirrorConfig>, links: EngineLinks, share: &Share) -> Option<Self> {
        if !share.release.begin() {
            return None;
        }
        let (stop, stopped) = watch::channel(false);
        let span = info_span!("mirror-worker", generation = share.generation, index = share.index, members = share.count);
        let engine = span.in_scope(|| {
            start_term(
                config,
                mirrors,
                links,
                // Enforcement is the instance's own (follower or active term), never a worker's.
                MirrorTopics::default(),
                Part::Work(share.clone()),
                None,
                stopped,
            )
        });
        info!(
            generation = share.generation,
            index = share.index,
            members = share.count,
            "copying this instance's share of the mirror partitions"
        );
        Some(Self {
            engine,
            share: share.clone(),
            stop,
        })
    }

    /// The generation this worker copies for.
    pub(crate) fn generation(&self) -> i32 {
        self.share.generation
    }

    /// Stops the partitions, waits (bounded) for their final progress, and tells the election
    /// the share may be given up.
    pub(crate) async fn end(self) {
        let _ = self.stop.send(true);
        let generation = self.share.generation;
        let release = Arc::clone(&self.share.release);
        let ended = async move {
            if tokio::time::timeout(END_WAIT, self.engine.stopped()).await.is_err() {
                warn!(generation, "the share's partitions did not stop within {END_WAIT:?}; their writes are fenced");
            }
        };
        ended.instrument(info_span!("mirror-worker", generation)).await;
        release.end();
        info!(generation, "stopped copying the share of this generation");
    }
}
