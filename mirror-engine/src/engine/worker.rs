//! One generation's copying on an instance of `engine.role = "auto"` with `engine.share_work`:
//! an engine term that copies only the partitions of this instance's [`Share`] (`Part::Work`),
//! started when the election hands the share out and ended — its partitions stopped, its final
//! progress written — as soon as the election takes the share back (before the instance
//! rejoins the group). The worker watches the share itself, so its end never waits for whoever
//! started it. Deciding the share is `election`'s and `share`'s; everything else the active
//! instance does stays in its own term (`auto`).

use std::sync::Arc;
use std::time::Duration;

use kmp_config::{EngineConfig, MirrorConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span, warn};

use crate::engine::{Engine, EngineLinks, start_term};
use crate::ha::share::Part;
use crate::ha::share::{Release, Share};
use crate::state::catalog::Catalog;

/// Longest wait for a worker's partitions to stop and write their progress.
const END_WAIT: Duration = Duration::from_secs(10);

/// The running copy of one share.
pub(crate) struct Worker {
    pub(crate) engine: Engine,
    release: Arc<Release>,
    /// Ends the worker although its share is still current (the instance shuts down).
    quit: watch::Sender<bool>,
    ended: JoinHandle<()>,
}

impl Worker {
    /// Starts copying `share` until `shares` (the election's) no longer holds it; `None` if the
    /// election has given it up already.
    pub(crate) fn start(
        config: &EngineConfig,
        mirrors: Vec<MirrorConfig>,
        links: EngineLinks,
        share: &Share,
        shares: watch::Receiver<Option<Share>>,
    ) -> Option<Self> {
        if !share.release.begin() {
            return None;
        }
        let (stop, stopped) = watch::channel(false);
        let generation = share.generation;
        let span = info_span!("mirror-worker", generation, index = share.index, members = share.count);
        let engine = span.in_scope(|| {
            start_term(
                config,
                mirrors,
                links,
                // Enforcement is the instance's own (follower or active term), never a worker's.
                Catalog::default(),
                Part::Work(share.clone()),
                None,
                None,
                stopped,
            )
        });
        info!(
            generation,
            index = share.index,
            members = share.count,
            "copying this instance's share of the mirror partitions"
        );
        let (quit, mut quitting) = watch::channel(false);
        let release = Arc::clone(&share.release);
        let (mine, done) = (Arc::clone(&release), engine.clone());
        let ended = tokio::spawn(
            async move {
                let mut shares = shares;
                let gone = shares.wait_for(|s| !s.as_ref().is_some_and(|s| Arc::ptr_eq(&s.release, &mine)));
                tokio::select! {
                    _ = gone => {}
                    _ = quitting.changed() => {}
                }
                let _ = stop.send(true);
                if tokio::time::timeout(END_WAIT, done.stopped()).await.is_err() {
                    warn!("the share's partitions did not stop within {END_WAIT:?}; their writes are fenced");
                }
                mine.end();
                info!("stopped copying the share of this generation");
            }
            .instrument(span),
        );
        Some(Self { engine, release, quit, ended })
    }

    /// Whether this worker copies `share` (the very share, not just one of the same generation).
    pub(crate) fn copies(&self, share: &Share) -> bool {
        Arc::ptr_eq(&self.release, &share.release)
    }

    /// Waits until the worker has ended (its share was taken back), or ends it first.
    pub(crate) async fn end(self) {
        let _ = self.quit.send(true);
        let _ = self.ended.await;
    }
}
