//! What `mirrors --describe` prints from a DescribeClusterMirrors answer. Each partition is a
//! [`PartitionView`] — the view REST describe and the dashboard serialize, so the field names are
//! REST's — with its mirror and topic and the KIP's retry attempt. `--output json` writes them
//! under `partitions`, next to the per-topic copy progress (`topics`, [`progress`]'s), the
//! metadata sync status (`sync`) and the answering instance (`engine`); the text form is the
//! partition table, then the progress table, the sync table and the instance line ([`table`]'s).
//! Asking for the answer is `mirrors`'.

use kafka_mirror_proxy::PartitionView;
use kmp_mirror_engine::PartitionState;
use kmp_protocol::mirror_api::{DescribeResponse, errors};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::progress;
use super::table::{self, table};

/// One described partition: its mirror and topic, the view's fields, and the KIP's retry attempt
/// (-1: not retried), which REST does not have.
#[derive(Debug, Serialize)]
struct PartitionRow<'a> {
    mirror: &'a str,
    topic: &'a str,
    #[serde(flatten)]
    view: PartitionView,
    retry_attempt: i16,
}

/// Prints the description `d` (JSON when `json_out`, tables otherwise; with `failed_only` only
/// the partitions the KIP calls FAILED, i.e. failed or retrying). `false` — exit status 1 — when
/// a mirror could not be described or a partition has failed (not when it is retrying: that
/// passes by itself), each said on stderr, so a script can tell.
#[allow(clippy::print_stdout, clippy::print_stderr, reason = "CLI output")]
pub(super) fn print(d: &DescribeResponse, json_out: bool, failed_only: bool) -> bool {
    let mut ok = true;
    for m in d.mirrors.iter().filter(|m| m.error_code != 0) {
        ok = false;
        eprintln!("{}", not_described(&m.mirror_name, m.error_code));
    }
    let rows = rows(d, failed_only);
    let failed = rows.iter().filter(|r| r.view.state == PartitionState::Failed.as_str()).count();
    if json_out {
        println!("{}", json_doc(d, &rows));
    } else if d.mirrors.iter().any(|m| m.error_code == 0) {
        print!("{}", partition_table(&rows));
        if !failed_only {
            progress::print_table(&d.mirrors);
        }
        table::print_sync(&d.mirrors);
        if let Some(e) = &d.engine {
            println!("\n{}", table::identity_line(e));
        }
    }
    if failed > 0 {
        ok = false;
        eprintln!("{failed} partition(s) failed (state failed: see last_error; --failed lists only those)");
    }
    ok
}

/// Why mirror `name` was not described, for stderr.
fn not_described(name: &str, code: i16) -> String {
    match code {
        errors::UNKNOWN_CLUSTER_MIRROR => {
            format!("mirror {name}: UNKNOWN_CLUSTER_MIRROR: this proxy has no mirror of that name (mirrors --list lists them)")
        }
        _ => format!("mirror {name}: not described: {}", errors::name(code)),
    }
}

/// The partition rows of `d`, in answer order.
fn rows(d: &DescribeResponse, failed_only: bool) -> Vec<PartitionRow<'_>> {
    let mut out = Vec::new();
    for m in &d.mirrors {
        for (topic, parts) in &m.topics {
            for p in parts.iter().filter(|p| !failed_only || p.state_value == "FAILED") {
                out.push(PartitionRow {
                    mirror: &m.mirror_name,
                    topic,
                    view: PartitionView::of_described(p),
                    retry_attempt: p.retry_attempt,
                });
            }
        }
    }
    out
}

/// The `--output json` document: `partitions`, `topics`, `sync` (per mirror, per kind), `engine`.
fn json_doc(d: &DescribeResponse, rows: &[PartitionRow<'_>]) -> Value {
    let topics: Vec<Value> = progress::per_topic(&d.mirrors, |_| true).iter().map(progress::TopicProgress::json).collect();
    let sync: Map<String, Value> = d
        .mirrors
        .iter()
        .map(|m| {
            let kinds: Map<String, Value> = m
                .sync
                .iter()
                .map(|e| {
                    let v = json!({"interval_ms": e.interval_ms, "runs": e.runs, "last_run_ms": e.last_run_ms, "last_success_ms": e.last_success_ms,
                        "synced": e.synced, "skipped_active_groups": e.skipped_active, "applied_total": e.applied_total, "errors_total": e.errors_total, "last_error": e.last_error});
                    (e.kind.clone(), v)
                })
                .collect();
            (m.mirror_name.clone(), Value::Object(kinds))
        })
        .collect();
    let engine = d.engine.as_ref().map(|e| {
        let mut v = json!({"instance_id": e.instance_id, "role": e.role, "active": e.active, "generation": e.generation, "active_instance": e.active_instance});
        if let Some((index, members)) = e.share {
            v["share"] = json!({"index": index, "members": members});
        }
        v
    });
    json!({ "partitions": rows, "topics": topics, "sync": sync, "engine": engine })
}

/// The partition table: offsets, lag, the source epoch of the last copied offset (with the
/// destination offset, the line a stop records; `-` from a proxy that does not send it), state
/// (the view's, upper case) and error.
fn partition_table(rows: &[PartitionRow<'_>]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let v = &r.view;
            vec![
                r.mirror.to_owned(),
                r.topic.to_owned(),
                v.partition.to_string(),
                v.source_offset.to_string(),
                v.destination_offset.to_string(),
                v.lag.to_string(),
                v.last_mirror_epoch.map_or_else(|| "-".to_owned(), |e| e.to_string()),
                v.state.to_uppercase(),
                v.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "MIRROR",
            "TOPIC",
            "PARTITION",
            "SOURCE-OFFSET",
            "DESTINATION-OFFSET",
            "LAG",
            "LAST-MIRROR-EPOCH",
            "STATE",
            "ERROR",
        ],
        &[2, 3, 4, 5, 6],
        &cells,
    )
}

#[cfg(test)]
mod tests {
    use kmp_protocol::mirror_api::{DescribedMirror, PartitionDetail, PartitionProgress};

    use super::*;

    /// Mirror `dr`, topic `orders`: partition 0 copying (28 behind, 500 records in the last 10 s),
    /// partition 1 retrying after an error.
    fn answer() -> DescribeResponse {
        let copying = PartitionDetail {
            partition_index: 0,
            source_offset: 130,
            destination_offset: 100,
            lag: 28,
            state_value: "MIRRORING".into(),
            retry_attempt: 0,
            error_message: None,
            progress: Some(PartitionProgress {
                records_mirrored: 100,
                bytes_mirrored: 65_536,
                window_ms: 10_000,
                window_records: 500,
                window_bytes: 32_000,
            }),
            last_mirror: Some(kmp_protocol::mirror_api::LastMirror { epoch: 4, offset: 100 }),
        };
        let retrying = PartitionDetail {
            partition_index: 1,
            state_value: "FAILED".into(),
            retry_attempt: 1,
            error_message: Some("source leader unreachable".into()),
            ..copying.clone()
        };
        DescribeResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                topics: vec![("orders".into(), vec![copying, retrying])],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_json_partition_is_its_mirror_and_topic_the_rest_view_and_the_retry_attempt() {
        let d = answer();
        let doc = json_doc(&d, &rows(&d, false));
        let row = &doc["partitions"][0];
        let view = serde_json::to_value(PartitionView::of_described(&d.mirrors[0].topics[0].1[0])).unwrap();
        let mut expected = view.as_object().unwrap().clone();
        expected.insert("mirror".into(), json!("dr"));
        expected.insert("topic".into(), json!("orders"));
        expected.insert("retry_attempt".into(), json!(0));
        assert_eq!(row, &Value::Object(expected));
        assert_eq!(
            row.to_string(),
            r#"{"bytes":65536,"bytes_per_sec":3200.0,"destination_offset":100,"fillers":null,"lag":28,"last_error":null,"last_mirror_epoch":4,"mirror":"dr","partition":0,"rate_window_ms":10000,"records":100,"records_per_sec":50.0,"retry_attempt":0,"source_last_stable_offset":-1,"source_offset":130,"state":"mirroring","topic":"orders"}"#
        );
        // The CLI's own earlier names are gone: one set of names, REST's.
        for old in ["records_mirrored", "bytes_mirrored", "error"] {
            assert!(row.get(old).is_none(), "{old}");
        }
        let retrying = &doc["partitions"][1];
        assert_eq!(
            (&retrying["state"], &retrying["retry_attempt"], &retrying["last_error"]),
            (&json!("retrying"), &json!(1), &json!("source leader unreachable"))
        );
        // The per-topic progress keeps its names.
        assert_eq!(doc["topics"][0]["records_mirrored"], json!(200));
    }

    #[test]
    fn failed_only_keeps_what_the_kip_calls_failed_retrying_included() {
        let d = answer();
        let failed = rows(&d, true);
        assert_eq!(failed.iter().map(|r| r.view.partition).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn the_partition_table_shows_the_view_state_in_upper_case() {
        let d = answer();
        let text = partition_table(&rows(&d, false));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "MIRROR  TOPIC   PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  LAG  LAST-MIRROR-EPOCH  STATE      ERROR",
                "dr      orders          0            130                 100   28                  4  MIRRORING",
                "dr      orders          1            130                 100   28                  4  RETRYING   source leader unreachable",
            ]
        );
    }
}
