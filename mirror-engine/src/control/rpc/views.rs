//! The List and Describe answers and a topic's result, built from the proxy's [`Control`] views
//! (the KIP's partition state names and the proxy's own progress and sync extensions).

use std::collections::HashSet;

use kmp_protocol::mirror_api::{
    DescribeRequest, DescribeResponse, DescribedMirror, LastMirror, ListResponse, ListedMirror, PartitionDetail, PartitionProgress, SyncEntry, TopicResult,
    errors,
};

use crate::control::handle::Control;
use crate::control::{PartitionDetail as EnginePartition, TopicResult as EngineResult};
use crate::state::status::{PartitionState, now_ms};

/// One topic's result on the wire.
pub(super) fn result(r: EngineResult) -> TopicResult {
    TopicResult {
        name: r.topic,
        error_code: r.error_code,
        error_message: r.message,
    }
}

/// The List answer.
pub(super) fn list(control: &Control, include_names: bool) -> ListResponse {
    let mirrors = control
        .list()
        .into_iter()
        .map(|m| ListedMirror {
            topic_count: m.topics.len() as i32,
            topic_names: if include_names { m.topics } else { Vec::new() },
            mirror_name: m.name,
            source_bootstrap: m.source_bootstrap,
            source_cluster_id: m.source_cluster_id,
        })
        .collect();
    ListResponse { mirrors, ..Default::default() }
}

/// The Describe answer (without the instance's identity, which the caller adds).
pub(super) fn describe(control: &Control, req: &DescribeRequest) -> DescribeResponse {
    let names: Vec<String> = if req.mirror_names.is_empty() {
        control.list().into_iter().map(|m| m.name).collect()
    } else {
        // Each distinct name once, in the order first asked: the KIP's admin client keys the
        // descriptions by name (a map), so repeats add nothing but a full description each.
        let mut seen = HashSet::new();
        req.mirror_names.iter().filter(|n| seen.insert(n.as_str())).cloned().collect()
    };
    let mirrors = names
        .into_iter()
        .map(|name| {
            if !control.has_mirror(&name) {
                return DescribedMirror {
                    error_code: errors::UNKNOWN_CLUSTER_MIRROR,
                    mirror_name: name,
                    authorized_operations: i32::MIN,
                    ..Default::default()
                };
            }
            let now = now_ms();
            let topics = control
                .describe(&name)
                .into_iter()
                .map(|(topic, parts)| {
                    let details = parts.into_iter().map(|p| described_partition(p, now)).collect();
                    (topic, details)
                })
                .collect();
            let sync = control
                .sync_status(&name)
                .into_iter()
                .map(|(kind, s)| SyncEntry {
                    kind: kind.as_str().to_owned(),
                    interval_ms: i64::try_from(s.interval_ms).unwrap_or(i64::MAX),
                    runs: s.runs as i64,
                    last_run_ms: s.last_run_ms,
                    last_success_ms: s.last_success_ms,
                    synced: s.synced as i64,
                    skipped_active: s.skipped_active as i64,
                    applied_total: s.applied_total as i64,
                    errors_total: s.errors_total as i64,
                    last_error: s.last_error,
                })
                .collect();
            DescribedMirror {
                error_code: errors::NONE,
                mirror_name: name,
                authorized_operations: i32::MIN,
                topics,
                sync,
            }
        })
        .collect();
    let lookup_results = match &req.cluster_id {
        Some(id) if !req.epoch_lookups.is_empty() => control.last_mirror_epochs(id, &req.epoch_lookups),
        _ => Vec::new(),
    };
    DescribeResponse {
        mirrors,
        lookup_results,
        ..Default::default()
    }
}

/// The DescribeClusterMirrors entry of partition `p` at wall-clock time `now_ms` (for the rate
/// window): the KIP's fields (lag -1 while the source's last stable offset is not known) and the
/// proxy's progress extension.
pub fn described_partition(p: EnginePartition, now_ms: i64) -> PartitionDetail {
    let s = p.status;
    let (state, retry_attempt) = kip_state(s.state);
    let recent = s.rate.recent(now_ms);
    let progress = PartitionProgress {
        records_mirrored: i64::try_from(s.records_mirrored).unwrap_or(i64::MAX),
        bytes_mirrored: i64::try_from(s.bytes_mirrored).unwrap_or(i64::MAX),
        window_ms: recent.span_ms,
        window_records: i64::try_from(recent.records).unwrap_or(i64::MAX),
        window_bytes: i64::try_from(recent.bytes).unwrap_or(i64::MAX),
    };
    PartitionDetail {
        partition_index: p.partition,
        source_offset: s.source_high_watermark,
        destination_offset: s.destination_next_offset,
        lag: s.lag_shown(),
        state_value: state.to_owned(),
        retry_attempt,
        last_mirror: (s.destination_next_offset >= 0).then_some(LastMirror {
            epoch: s.last_mirror_epoch,
            offset: s.destination_next_offset,
        }),
        error_message: s.last_error,
        progress: Some(progress),
    }
}

/// KIP-1279 state name and retry attempt (-1 = not retried) of an engine partition state.
/// The broker-internal LOG_TRUNCATION / EPOCH_FENCING steps have no proxy equivalent; the
/// engine's preparation reports the KIP's older name PREPARING.
fn kip_state(state: PartitionState) -> (&'static str, i16) {
    match state {
        PartitionState::Preparing => ("PREPARING", 0),
        PartitionState::Mirroring | PartitionState::Filling => ("MIRRORING", 0),
        PartitionState::Retrying => ("FAILED", 1),
        // Engine FAILED is never retried automatically (retriable errors are `Retrying`).
        PartitionState::Failed => ("FAILED", -1),
        PartitionState::Pausing => ("PAUSING", 0),
        PartitionState::Paused => ("PAUSED", 0),
        PartitionState::Stopping => ("STOPPING", 0),
        PartitionState::Stopped => ("STOPPED", 0),
    }
}

impl PartitionState {
    /// The engine state a described partition's KIP-1279 state name and retry attempt stand for
    /// (the inverse of [`kip_state`]; MIRRORING reads back as [`Self::Mirroring`], since the KIP
    /// has no name for filling), `None` for a name this proxy never sends.
    pub fn from_kip(name: &str, retry_attempt: i16) -> Option<Self> {
        Some(match name {
            "PREPARING" => Self::Preparing,
            "MIRRORING" => Self::Mirroring,
            "FAILED" if retry_attempt < 0 => Self::Failed,
            "FAILED" => Self::Retrying,
            "PAUSING" => Self::Pausing,
            "PAUSED" => Self::Paused,
            "STOPPING" => Self::Stopping,
            "STOPPED" => Self::Stopped,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_kip_name_and_filling_as_mirroring() {
        for state in PartitionState::ALL {
            let (name, retry_attempt) = kip_state(state);
            let back = if state == PartitionState::Filling { PartitionState::Mirroring } else { state };
            assert_eq!(PartitionState::from_kip(name, retry_attempt), Some(back), "{name} {retry_attempt}");
        }
        assert_eq!(PartitionState::from_kip("LOG_TRUNCATION", 0), None, "a KIP step the proxy never reports");
    }
}
