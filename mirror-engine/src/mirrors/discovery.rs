//! Mirrors at runtime: launching a mirror — its metadata sync loops and its topic discovery
//! loop, which re-reads the mirror's current definition so topics and patterns added later are
//! picked up — and following the source's partition counts. Preparing a topic and starting its
//! partitions is `lifecycle`'s; changing definitions is `control::definitions`'.

use std::sync::Arc;
use std::time::Duration;

use kmp_config::MirrorConfig;
use tracing::{Instrument, info, info_span, warn};

use crate::cluster::client::ClusterClient;
use crate::context::{Shared, TopicContext};
use crate::mirrors::lifecycle;
use crate::state::records::Desired;
use crate::state::store::StateStore;
use crate::topics::select::TopicSelector;

/// Starts mirror `def`: registers its definition and spawns its discovery loop.
pub(crate) fn launch(shared: &Shared, store: &Arc<StateStore>, def: MirrorConfig) {
    let name = def.name.clone();
    shared.control.add_mirror(def);
    if !shared.part.works_only() {
        crate::sync::launch(shared, &name);
    }
    let (shared, store) = (shared.clone(), store.clone());
    tokio::spawn(discover(shared, store, name.clone()).instrument(info_span!("mirror-topics", mirror = %name)));
}

/// Starts the mirror's named topics and, with include patterns, matching source topics — again
/// every `topic_refresh_interval_ms` and whenever the definition changes — until the mirror is
/// deleted or the engine stops.
async fn discover(shared: Shared, store: Arc<StateStore>, name: String) {
    let wake = shared.control.notifier(&name);
    let mut stop = shared.stop.clone();
    loop {
        let Some(def) = shared.control.definition(&name) else {
            info!("mirror deleted; topic discovery ends");
            return;
        };
        // Shared with every mirror of the same source setting (see `sources`).
        let (source, fetchers) = shared.source_reach(&def);
        match TopicSelector::new(&def.topics, &def.include, &def.exclude) {
            Ok(selector) => {
                let ctx = TopicContext {
                    mirror: def.clone(),
                    source: source.clone(),
                    fetchers: fetchers.clone(),
                    shared: shared.clone(),
                    store: store.clone(),
                };
                // Topics the state records as this mirror's come back whatever the source says
                // (it may be gone: they must still be managed and failed over).
                for (topic, _) in store.owned_topics().into_iter().filter(|(_, o)| o.mirror == name) {
                    if shared.control.claim_topic(&topic, &name) {
                        lifecycle::start_topic(ctx.clone(), topic);
                    }
                }
                // A term that only copies takes up what the state records, nothing new.
                if shared.part.works_only() {
                    return;
                }
                for topic in selector.named() {
                    if shared.control.claim_topic(topic, &name) {
                        lifecycle::start_topic(ctx.clone(), topic.clone());
                    }
                }
                follow_partition_counts(&shared, &store, &source, &name).await;
                if selector.has_patterns() {
                    match source.topic_names().await {
                        Ok(names) => {
                            for topic in names.into_iter().filter(|t| selector.matches(t)) {
                                if shared.control.claim_topic(&topic, &name) {
                                    info!(%topic, "new source topic matches the mirror; starting it");
                                    lifecycle::start_topic(ctx.clone(), topic);
                                }
                            }
                        }
                        Err(e) => warn!(error = %e, "cannot list source topics; retrying"),
                    }
                }
            }
            Err(e) => warn!(error = %e, "invalid topic selection; waiting for a new definition"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(def.topic_refresh_interval_ms)) => {}
            _ = wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

/// New source partitions of the mirror's running topics: the destination topic gets them too
/// (CreatePartitions) and their copy tasks start; new partitions start at offset 0 on both sides.
async fn follow_partition_counts(shared: &Shared, store: &StateStore, source: &ClusterClient, mirror: &str) {
    for topic in shared.control.claimed_topics(mirror) {
        let Some((have, desired)) = shared.control.topic_shape(&topic, mirror) else {
            continue;
        };
        if desired == Desired::Stopped {
            continue;
        }
        let layout = match source.layout(&topic).await {
            Ok(l) if l.error_code == 0 => l,
            _ => continue,
        };
        if let Some(mut record) = store.topic_owner(&topic) {
            match crate::state::records::id_from_hex(&record.source_topic_id) {
                // Another topic under the same name: its partitions fail; never grow for it.
                Some(known) if known != layout.topic_id => continue,
                Some(_) => {}
                None => {
                    // A record from before ids were kept: remember the id now.
                    record.source_topic_id = crate::state::records::id_to_hex(layout.topic_id);
                    if let Err(e) = store.put_topic(&topic, &record).await {
                        warn!(%topic, error = %e, "cannot record the source topic id");
                    }
                }
            }
        }
        let want = layout.partitions.len();
        if want <= have {
            continue;
        }
        match crate::topics::create::add_partitions(&shared.destination, &topic, have, want).await {
            Ok(()) => {
                info!(%topic, from = have, to = want, "source topic gained partitions; mirroring the new ones");
                if let Some(mut record) = store.topic_owner(&topic) {
                    record.partitions = want;
                    if let Err(e) = store.put_topic(&topic, &record).await {
                        warn!(%topic, error = %e, "cannot record the new partition count");
                    }
                }
                shared.control.grow_topic(&topic, want);
            }
            Err(e) => warn!(%topic, error = %e, "cannot add the new partitions on the destination yet"),
        }
    }
}
