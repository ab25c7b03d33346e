//! Metadata sync (KIP-1279 §6): per mirror, a loop per kind — consumer-group offsets,
//! share-group offsets and topic configs — each on the mirror's own interval, over the mirror's topics that are
//! mirroring (nothing is synced for paused or stopped topics), plus one group offset pass for
//! topics being stopped (failover) before they become writable. Results go to the
//! sync board (`state::sync_status`). Partition counts and deleted source topics are followed by the mirror's
//! discovery loop and partition tasks, not here.

mod configs;
mod groups;
mod share_groups;

use std::time::Duration;

use kmp_config::MirrorConfig;
use tracing::{Instrument, debug, info_span, warn};

use crate::state::sync_status::{PassOutcome, SyncKind};

use crate::context::Shared;
use crate::state::records::Desired;

/// Longest a pass may take; a source that stopped answering must not hold a failover.
const PASS_TIMEOUT: Duration = Duration::from_secs(20);

fn interval_ms(def: &MirrorConfig, kind: SyncKind) -> u64 {
    match kind {
        SyncKind::GroupOffsets | SyncKind::ShareGroupOffsets => def.group_offset_sync_interval_ms,
        SyncKind::TopicConfigs => def.topic_config_sync_interval_ms,
    }
}

/// Starts mirror `name`'s sync loops.
pub(crate) fn launch(shared: &Shared, name: &str) {
    for kind in SyncKind::ALL {
        let span = info_span!("mirror-sync", mirror = %name, kind = kind.as_str());
        tokio::spawn(run(shared.clone(), name.to_owned(), kind).instrument(span));
    }
}

/// Runs passes of `kind` until the mirror is deleted or the engine stops; the interval is read
/// from the current definition before every pass.
async fn run(shared: Shared, name: String, kind: SyncKind) {
    let mut stop = shared.stop.clone();
    loop {
        let Some(def) = shared.control.definition(&name) else {
            debug!("mirror deleted; sync ends");
            return;
        };
        let interval = interval_ms(&def, kind);
        shared.control.sync_board().announce(&name, kind, interval);
        // Off: look again later in case the definition changes.
        let wait = if interval == 0 { 5_000 } else { interval };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = stop.changed() => return,
        }
        if interval == 0 {
            continue;
        }
        let Some(def) = shared.control.definition(&name) else { return };
        let topics = shared.control.topics_in_state(&name, Desired::Mirroring);
        pass(&shared, &def, kind, &topics).await;
    }
}

/// One pass of `kind` over `topics` of mirror `def`, recorded on the board.
pub(crate) async fn pass(shared: &Shared, def: &MirrorConfig, kind: SyncKind, topics: &[String]) {
    if !shared.lease.holds() {
        // No longer the active engine: the one that is syncs.
        return;
    }
    let source = shared.source_client(def);
    let work = async {
        match kind {
            SyncKind::GroupOffsets => groups::sync(&source, &shared.destination, def, topics, &shared.topics)
                .await
                .map(|r| PassOutcome {
                    synced: r.in_sync as u64,
                    skipped_active: r.skipped_active.len() as u64,
                    applied: r.offsets_committed,
                    errors: r.errors,
                }),
            SyncKind::ShareGroupOffsets => share_groups::sync(&source, &shared.destination, def, topics, &shared.topics)
                .await
                .map(|r| PassOutcome {
                    synced: r.in_sync as u64,
                    skipped_active: r.skipped_active.len() as u64,
                    applied: r.offsets_committed,
                    errors: r.errors,
                }),
            SyncKind::TopicConfigs => {
                let filter = crate::topics::configs::ConfigFilter::new(&def.topic_config_exclude)?;
                configs::sync(&source, &shared.destination, &filter, topics).await.map(|r| PassOutcome {
                    synced: r.topics as u64,
                    skipped_active: 0,
                    applied: r.changes_applied,
                    errors: r.errors,
                })
            }
        }
    };
    let outcome = match tokio::time::timeout(PASS_TIMEOUT, work).await {
        Ok(Ok(o)) => {
            for e in &o.errors {
                warn!(error = %e, "metadata sync problem");
            }
            Ok(o)
        }
        Ok(Err(e)) => {
            warn!(error = %e, "metadata sync pass failed; retrying at the next interval");
            Err(e.to_string())
        }
        Err(_) => {
            warn!("metadata sync pass timed out");
            Err(format!("pass did not finish within {PASS_TIMEOUT:?}"))
        }
    };
    shared.control.sync_board().record(&def.name, kind, interval_ms(def, kind), outcome);
}

/// The last consumer- and share-group offset passes for `topics` of mirror `name`, run when
/// they are stopped (failover): the groups' latest source positions reach the destination
/// before producers may write there.
pub(crate) async fn final_group_sync(shared: Shared, name: String, topics: Vec<String>) {
    let Some(def) = shared.control.definition(&name) else { return };
    for kind in [SyncKind::GroupOffsets, SyncKind::ShareGroupOffsets] {
        let span = info_span!("mirror-sync", mirror = %name, kind = kind.as_str(), at = "stop");
        pass(&shared, &def, kind, &topics).instrument(span).await;
    }
}
