//! One mirrored partition as the admin endpoint shows it. REST describe (`GET /v1/mirrors/{name}`)
//! and the dashboard's state document both serialize [`PartitionView`], so its field names are
//! REST's, a public contract (`rest/openapi.json`, docs/, the tests and scripts that read it).
//! The dashboard's row ([`DashboardPartition`]) is that view plus what only the page shows: lag in
//! seconds and replication latency.

use kmp_mirror_engine::PartitionDetail;
use serde::Serialize;

/// A partition's state, offsets, lag, totals and recent copy rate (partition -1: the topic
/// failed as a whole).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PartitionView {
    pub(crate) partition: i32,
    /// Lower case (`mirroring`, `paused`, `failed`, …).
    pub(crate) state: &'static str,
    /// Source high watermark at the last fetch (-1 until known).
    pub(crate) source_offset: i64,
    pub(crate) source_last_stable_offset: i64,
    /// Next destination offset (= the source offset copied up to).
    pub(crate) destination_offset: i64,
    /// Source last stable offset minus the destination's next offset, in records.
    pub(crate) lag: i64,
    pub(crate) records: u64,
    pub(crate) fillers: u64,
    pub(crate) bytes: u64,
    pub(crate) records_per_sec: f64,
    pub(crate) bytes_per_sec: f64,
    /// The span the two rates are measured over.
    pub(crate) rate_window_ms: i64,
    pub(crate) last_error: Option<String>,
}

impl PartitionView {
    /// `p` at wall-clock time `now_ms` (for the rate window).
    pub(crate) fn of(p: &PartitionDetail, now_ms: i64) -> Self {
        let s = &p.status;
        let recent = s.rate.recent(now_ms);
        Self {
            partition: p.partition,
            state: s.state.as_str(),
            source_offset: s.source_high_watermark,
            source_last_stable_offset: s.source_last_stable_offset,
            destination_offset: s.destination_next_offset,
            lag: s.lag_records(),
            records: s.records_mirrored,
            fillers: s.filler_records,
            bytes: s.bytes_mirrored,
            records_per_sec: recent.records_per_sec(),
            bytes_per_sec: recent.bytes_per_sec(),
            rate_window_ms: recent.span_ms,
            last_error: s.last_error.clone(),
        }
    }
}

/// A partition's row on the dashboard: the REST view's fields, then lag in seconds (the same
/// number as `kmp_mirror_lag_seconds`) and replication latency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DashboardPartition {
    #[serde(flatten)]
    pub(crate) view: PartitionView,
    pub(crate) lag_seconds: f64,
    pub(crate) replication_latency_ms: i64,
}

impl DashboardPartition {
    pub(crate) fn of(p: &PartitionDetail, now_ms: i64) -> Self {
        Self {
            view: PartitionView::of(p, now_ms),
            lag_seconds: p.status.lag_seconds(now_ms),
            replication_latency_ms: p.status.replication_latency_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use kmp_mirror_engine::{PartitionDetail, PartitionState, PartitionStatus};
    use serde_json::json;

    use super::*;

    const NOW_MS: i64 = 1_700_000_010_500;

    /// A partition 28 records and 2.5 s behind, with writes 4 s and 1 s ago.
    fn detail() -> PartitionDetail {
        let mut status = PartitionStatus {
            state: PartitionState::Mirroring,
            source_high_watermark: 130,
            source_last_stable_offset: 128,
            destination_next_offset: 100,
            records_mirrored: 100,
            filler_records: 3,
            bytes_mirrored: 65_536,
            last_mirrored_timestamp_ms: NOW_MS - 2_500,
            replication_latency_ms: 12,
            last_error: Some("a \"quoted\" reason".into()),
            ..PartitionStatus::default()
        };
        status.rate.add(NOW_MS - 4_000, 50, 3_200);
        status.rate.add(NOW_MS - 1_000, 30, 1_900);
        PartitionDetail { partition: 2, status }
    }

    /// What REST describe wrote for [`detail`] from its own `json!` object before this view
    /// (captured from that code): the view must write the same text.
    const REST_BEFORE: &str = r#"{"bytes":65536,"bytes_per_sec":1133.3333333333333,"destination_offset":100,"fillers":3,"lag":28,"last_error":"a \"quoted\" reason","partition":2,"rate_window_ms":4500,"records":100,"records_per_sec":17.77777777777778,"source_last_stable_offset":128,"source_offset":130,"state":"mirroring"}"#;

    #[test]
    fn rest_describes_a_partition_as_it_did() {
        // REST puts the view into its `json!` answer, which writes an object's keys sorted.
        let inside_rest = json!({ "partitions": [PartitionView::of(&detail(), NOW_MS)] });
        assert_eq!(inside_rest["partitions"][0].to_string(), REST_BEFORE);
    }

    #[test]
    fn the_dashboard_row_is_the_rest_view_plus_lag_seconds_and_latency() {
        let row = serde_json::to_value(DashboardPartition::of(&detail(), NOW_MS)).unwrap();
        let mut expected: serde_json::Value = serde_json::from_str(REST_BEFORE).unwrap();
        expected["lag_seconds"] = json!(2.5);
        expected["replication_latency_ms"] = json!(12);
        assert_eq!(row, expected);
        // The dashboard's earlier name for the lag in records is gone: one name, REST's.
        assert!(row.get("lag_records").is_none());
    }
}
