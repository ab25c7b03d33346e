//! One mirrored partition as the proxy shows it. REST describe (`GET /v1/mirrors/{name}`), the
//! dashboard's state document and the `mirrors --describe` CLI all serialize [`PartitionView`],
//! so its field names are REST's, a public contract (`rest/openapi.json`, docs/, the tests and
//! scripts that read it). REST and the dashboard build it from the engine's partition
//! ([`PartitionView::of`]); the CLI from a DescribeClusterMirrors partition entry
//! ([`PartitionView::of_described`]), which carries less: what it lacks is shown as unknown.
//! The dashboard's row ([`DashboardPartition`]) is that view plus what only the page shows: lag in
//! seconds and replication latency.

use std::borrow::Cow;

use kmp_mirror_engine::{PartitionDetail, PartitionState, Recent};
use kmp_protocol::mirror_api::PartitionDetail as DescribedPartition;
use serde::Serialize;

/// An offset that is not known (REST's value for a source end not read yet).
const UNKNOWN_OFFSET: i64 = -1;

/// A partition's state, offsets, lag, totals and recent copy rate (partition -1: the topic
/// failed as a whole). `null` marks a number the source of the view does not carry (REST and the
/// dashboard always have them; DescribeClusterMirrors has no filler count, and an older proxy
/// sends no copy progress at all).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionView {
    pub partition: i32,
    /// Lower case (`mirroring`, `paused`, `failed`, …). Read from DescribeClusterMirrors, a
    /// filling partition shows as `mirroring` (the KIP has no name for it).
    pub state: Cow<'static, str>,
    /// Source high watermark at the last fetch (-1 until known).
    pub source_offset: i64,
    /// -1 until known; always -1 read from DescribeClusterMirrors, which does not carry it.
    pub source_last_stable_offset: i64,
    /// Next destination offset (= the source offset copied up to).
    pub destination_offset: i64,
    /// Source high watermark minus the destination's next offset, in records; -1 while that
    /// offset is not known (as DescribeClusterMirrors answers it).
    pub lag: i64,
    pub records: Option<u64>,
    pub fillers: Option<u64>,
    pub bytes: Option<u64>,
    pub records_per_sec: Option<f64>,
    pub bytes_per_sec: Option<f64>,
    /// The span the two rates are measured over.
    pub rate_window_ms: Option<i64>,
    /// The source leader epoch of the last copied offset (`destination_offset - 1`), -1 unknown;
    /// with `destination_offset`, the line a stop records (KIP-1279's last mirror epoch and
    /// offset, what a failback starts from). `null` from a proxy that does not send it.
    pub last_mirror_epoch: Option<i32>,
    pub last_error: Option<String>,
}

impl PartitionView {
    /// `p` at wall-clock time `now_ms` (for the rate window).
    pub(crate) fn of(p: &PartitionDetail, now_ms: i64) -> Self {
        let s = &p.status;
        let recent = s.rate.recent(now_ms);
        Self {
            partition: p.partition,
            state: Cow::Borrowed(s.state.as_str()),
            source_offset: s.source_high_watermark,
            source_last_stable_offset: s.source_last_stable_offset,
            destination_offset: s.destination_next_offset,
            lag: s.lag_shown(),
            records: Some(s.records_mirrored),
            fillers: Some(s.filler_records),
            bytes: Some(s.bytes_mirrored),
            records_per_sec: Some(recent.records_per_sec()),
            bytes_per_sec: Some(recent.bytes_per_sec()),
            rate_window_ms: Some(recent.span_ms),
            last_mirror_epoch: Some(s.last_mirror_epoch),
            last_error: s.last_error.clone(),
        }
    }

    /// A partition entry of a DescribeClusterMirrors answer: its state (the KIP's name and retry
    /// attempt read back as the engine's state; a name this proxy never sends, lower-cased),
    /// offsets, lag, error and, from the proxy's progress extension, totals and the rate window
    /// (the rates computed as the engine computes them). The source's last stable offset is -1
    /// and the filler count `null`: the RPC does not carry them; without the extension (an older
    /// proxy), or with a negative count in it, those numbers are `null` too.
    pub fn of_described(p: &DescribedPartition) -> Self {
        let state =
            PartitionState::from_kip(&p.state_value, p.retry_attempt).map_or_else(|| Cow::Owned(p.state_value.to_lowercase()), |s| Cow::Borrowed(s.as_str()));
        let count = |n: i64| u64::try_from(n).ok();
        let progress = p.progress.as_ref();
        let recent = progress.and_then(|g| {
            Some(Recent {
                span_ms: g.window_ms,
                records: count(g.window_records)?,
                bytes: count(g.window_bytes)?,
            })
        });
        Self {
            partition: p.partition_index,
            state,
            source_offset: p.source_offset,
            source_last_stable_offset: UNKNOWN_OFFSET,
            destination_offset: p.destination_offset,
            lag: p.lag,
            records: progress.and_then(|g| count(g.records_mirrored)),
            fillers: None,
            bytes: progress.and_then(|g| count(g.bytes_mirrored)),
            records_per_sec: recent.map(|r| r.records_per_sec()),
            bytes_per_sec: recent.map(|r| r.bytes_per_sec()),
            rate_window_ms: recent.map(|r| r.span_ms),
            last_mirror_epoch: p.last_mirror.map(|l| l.epoch),
            last_error: p.error_message.clone(),
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
    use kmp_mirror_engine::{PartitionDetail, PartitionState, PartitionStatus, described_partition};
    use kmp_protocol::mirror_api::{self as api, DescribeResponse, DescribedMirror};
    use serde_json::{Value, json};

    use super::*;

    const NOW_MS: i64 = 1_700_000_010_500;

    /// A partition 30 records (2 of them in an open transaction) and 2.5 s behind, with writes 4 s and 1 s ago.
    fn detail() -> PartitionDetail {
        let mut status = PartitionStatus {
            state: PartitionState::Mirroring,
            source_high_watermark: 130,
            source_last_stable_offset: 128,
            destination_next_offset: 100,
            last_mirror_epoch: 4,
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
    /// (captured from that code; `last_mirror_epoch` added since): the view must write the same text.
    const REST_BEFORE: &str = r#"{"bytes":65536,"bytes_per_sec":1133.3333333333333,"destination_offset":100,"fillers":3,"lag":30,"last_error":"a \"quoted\" reason","last_mirror_epoch":4,"partition":2,"rate_window_ms":4500,"records":100,"records_per_sec":17.77777777777778,"source_last_stable_offset":128,"source_offset":130,"state":"mirroring"}"#;

    #[test]
    fn rest_describes_a_partition_as_it_did() {
        // REST puts the view into its `json!` answer, which writes an object's keys sorted.
        let inside_rest = json!({ "partitions": [PartitionView::of(&detail(), NOW_MS)] });
        assert_eq!(inside_rest["partitions"][0].to_string(), REST_BEFORE);
    }

    #[test]
    fn the_openapi_document_names_every_field_of_the_view_and_no_other() {
        let doc: Value = serde_json::from_str(include_str!("rest/openapi.json")).expect("openapi.json parses");
        let schema = &doc["components"]["schemas"]["MirrorDescription"]["properties"]["topics"]["items"]["properties"]["partitions"]["items"]["properties"];
        let mut documented: Vec<&String> = schema.as_object().expect("the partition schema has properties").keys().collect();
        documented.sort();
        let view = serde_json::to_value(PartitionView::of(&detail(), NOW_MS)).expect("the view serializes");
        assert_eq!(documented, keys(&view), "openapi.json's partition fields against what REST writes");
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

    /// `p` as the CLI sees it: the engine's DescribeClusterMirrors entry for it, through the wire
    /// (encoded and decoded as a whole answer), turned into the view.
    fn through_the_rpc(p: PartitionDetail) -> Value {
        let answer = DescribeResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                topics: vec![("orders".into(), vec![described_partition(p, NOW_MS)])],
                ..Default::default()
            }],
            ..Default::default()
        };
        let frame = api::response_frame(7, answer.encode());
        let (_, mut r) = api::read_response(&frame).unwrap();
        let decoded = DescribeResponse::decode(&mut r).unwrap();
        serde_json::to_value(PartitionView::of_described(&decoded.mirrors[0].topics[0].1[0])).unwrap()
    }

    /// The view's fields DescribeClusterMirrors does not carry, and how the CLI shows them.
    fn not_carried() -> [(&'static str, Value); 2] {
        [("source_last_stable_offset", json!(-1)), ("fillers", Value::Null)]
    }

    fn keys(v: &Value) -> Vec<&String> {
        v.as_object().unwrap().keys().collect()
    }

    #[test]
    fn a_described_partition_has_the_rest_fields_and_values() {
        let rest = serde_json::to_value(PartitionView::of(&detail(), NOW_MS)).unwrap();
        let cli = through_the_rpc(detail());
        assert_eq!(keys(&cli), keys(&rest), "one set of field names: REST's");
        for (key, value) in rest.as_object().unwrap() {
            match not_carried().iter().find(|(k, _)| k == key) {
                Some((_, unknown)) => assert_eq!(&cli[key], unknown, "{key}: not in the RPC, shown as unknown"),
                None => assert_eq!(&cli[key], value, "{key}: the same value as REST"),
            }
        }
        // The totals and the rate window are the progress extension's, the rates computed as REST does.
        assert_eq!(
            (cli["records"].clone(), cli["bytes"].clone(), cli["rate_window_ms"].clone()),
            (json!(100), json!(65_536), json!(4_500))
        );
        assert_eq!(cli["records_per_sec"], json!(17.77777777777778));
    }

    #[test]
    fn every_state_reads_as_rest_names_it_but_filling_which_the_kip_calls_mirroring() {
        for state in PartitionState::ALL {
            let mut p = detail();
            p.status.state = state;
            let rest = serde_json::to_value(PartitionView::of(&p, NOW_MS)).unwrap();
            let cli = through_the_rpc(p);
            let expected = if state == PartitionState::Filling {
                json!("mirroring")
            } else {
                rest["state"].clone()
            };
            assert_eq!(cli["state"], expected, "{state:?}");
        }
    }

    #[test]
    fn what_the_rpc_does_not_carry_or_know_is_shown_as_unknown() {
        // A partition whose source ends were never read: offsets -1, as REST shows them.
        let preparing = PartitionDetail {
            partition: 0,
            status: PartitionStatus::default(),
        };
        let rest = serde_json::to_value(PartitionView::of(&preparing, NOW_MS)).unwrap();
        let cli = through_the_rpc(preparing);
        for key in ["source_offset", "source_last_stable_offset", "destination_offset"] {
            assert_eq!((&cli[key], &rest[key]), (&json!(-1), &json!(-1)), "{key}");
        }
        // The lag is unknown too: -1 in both (REST said 0 before, as if caught up).
        assert_eq!((&cli["lag"], &rest["lag"]), (&json!(-1), &json!(-1)), "an unknown lag");
        assert_eq!((&cli["fillers"], &cli["last_error"]), (&Value::Null, &Value::Null));

        // An older proxy sends no progress extension: no totals, no rate; a state name this proxy
        // never sends is kept, lower-cased.
        let bare = api::PartitionDetail {
            partition_index: 3,
            source_offset: 50,
            destination_offset: 40,
            lag: 10,
            state_value: "LOG_TRUNCATION".into(),
            retry_attempt: 0,
            error_message: None,
            progress: None,
            last_mirror: None,
        };
        let view = serde_json::to_value(PartitionView::of_described(&bare)).unwrap();
        assert_eq!(keys(&view), keys(&rest));
        assert_eq!(view["state"], json!("log_truncation"));
        for key in [
            "records",
            "fillers",
            "bytes",
            "records_per_sec",
            "bytes_per_sec",
            "rate_window_ms",
            "last_mirror_epoch",
        ] {
            assert_eq!(view[key], Value::Null, "{key}");
        }
        assert_eq!(
            (&view["source_offset"], &view["destination_offset"], &view["lag"]),
            (&json!(50), &json!(40), &json!(10))
        );
    }
}
