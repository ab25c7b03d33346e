//! A failing-back cluster's lookup of the lines its topics were mirrored up to (KIP-1279's
//! `LastMirrorEpochLookups` in DescribeClusterMirrors): per source topic id and partition, the
//! last mirror epoch this engine recorded for a mirror topic copied from that cluster (the
//! highest across mirrors), -1 where none is recorded. Read from the stored topic and partition
//! records, which a stop writes together with the topic's writable flag.

use super::TermControl;
use crate::state::records::id_to_hex;

impl TermControl {
    /// The answers to `lookups` asked by cluster `cluster_id`, in the order asked.
    pub(crate) fn last_mirror_epochs(
        &self,
        cluster_id: &str,
        lookups: &[kmp_protocol::mirror_api::EpochLookup],
    ) -> Vec<kmp_protocol::mirror_api::LookupResult> {
        let store = self.store();
        let owned = store.as_ref().map(|s| s.owned_topics()).unwrap_or_default();
        lookups
            .iter()
            .map(|(id, partitions)| {
                let hex = id_to_hex(*id);
                // Mirror topics copied from that very source topic of that cluster.
                let copied: Vec<(&str, &str)> = owned
                    .iter()
                    .filter(|(_, r)| r.source_topic_id == hex && r.source_cluster_id.as_deref() == Some(cluster_id))
                    .map(|(t, r)| (t.as_str(), r.mirror.as_str()))
                    .collect();
                let answers = partitions
                    .iter()
                    .map(|&p| {
                        let epoch = copied
                            .iter()
                            .filter_map(|(t, mirror)| store.as_ref()?.partition(t, p).filter(|r| r.mirror == *mirror))
                            .map(|r| r.last_mirror_epoch)
                            .max()
                            .unwrap_or(-1);
                        (p, epoch)
                    })
                    .collect();
                (*id, answers)
            })
            .collect()
    }
}
