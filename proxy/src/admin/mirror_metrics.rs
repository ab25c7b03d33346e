//! Mirror progress on `/metrics`: per-partition gauges rendered from the engine's status board
//! at scrape time (the engine owns the numbers; this module only formats them).

use std::fmt::Write;

use kmp_mirror_engine::{Engine, PartitionState};

/// Reads one gauge's value from a partition's status.
type Gauge = fn(&kmp_mirror_engine::PartitionStatus) -> i64;

/// OpenMetrics lines for the engine and every mirrored partition (no trailing `# EOF`).
pub(crate) fn render(engine: &Engine) -> String {
    let snapshot = engine.status().snapshot();
    let now = kmp_mirror_engine::now_ms();
    let mut out = String::new();
    let b = engine.budget();
    for (name, help, value) in [
        (
            "kmp_mirror_buffer_bytes",
            "Fetched source bytes reserved until the destination acknowledges them",
            b.in_use(),
        ),
        (
            "kmp_mirror_buffer_peak_bytes",
            "Most fetched source bytes reserved at once since start",
            b.peak(),
        ),
        ("kmp_mirror_buffer_limit_bytes", "engine.max_buffer_bytes", b.limit()),
        (
            "kmp_mirror_engine_booted",
            "1 once the mirror engine has loaded its stored state and runs its mirrors, 0 while it cannot (see /readyz)",
            u64::from(engine.control().is_booted()),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} gauge\n{name} {value}");
    }
    let io = kmp_mirror_engine::io_counters();
    for (name, help, value) in [
        (
            "kmp_mirror_fetch_requests",
            "Fetch requests sent to source brokers (each carries every waiting partition of one broker)",
            io.fetch_requests,
        ),
        (
            "kmp_mirror_fetch_session_resets",
            "Fetch sessions a source broker dropped (evicted or expired) and the engine started again with a full fetch",
            io.fetch_session_resets,
        ),
        (
            "kmp_mirror_fetch_second_sent",
            "Second Fetches caught-up partitions sent beside their first (mirror fetch_hedge_min_rtt_ms)",
            io.fetch_second_sent,
        ),
        (
            "kmp_mirror_fetch_answers_cut",
            "Answers to a Fetch asked at an older offset that brought new data after the part already copied was cut off",
            io.fetch_answers_cut,
        ),
        (
            "kmp_mirror_produce_requests",
            "Produce requests sent to destination brokers",
            io.produce_requests,
        ),
        (
            "kmp_mirror_produce_batches",
            "Record batches carried by those Produce requests",
            io.produce_batches,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter\n{name}_total {value}");
    }
    let gauges: [(&str, &str, Gauge); 13] = [
        ("kmp_mirror_lag_records", "Source last stable offset minus the destination's next offset", |s| {
            s.lag_records()
        }),
        (
            "kmp_mirror_replication_latency_ms",
            "Write time minus the source timestamp of the newest record of the last batch written",
            |s| s.replication_latency_ms,
        ),
        ("kmp_mirror_source_high_watermark", "Source high watermark at the last fetch", |s| {
            s.source_high_watermark
        }),
        (
            "kmp_mirror_destination_next_offset",
            "Next destination offset (identical to the source offset copied up to)",
            |s| s.destination_next_offset,
        ),
        ("kmp_mirror_records", "Source records written to the destination", |s| s.records_mirrored as i64),
        (
            "kmp_mirror_filler_records",
            "Filler records written for offsets without visible source data",
            |s| s.filler_records as i64,
        ),
        ("kmp_mirror_bytes", "Record batch bytes written to the destination", |s| s.bytes_mirrored as i64),
        (
            "kmp_mirror_reencoded_batches",
            "Source batches re-encoded record by record (compaction holes, or the destination log end inside the batch)",
            |s| s.reencoded_batches as i64,
        ),
        (
            "kmp_mirror_coalesced_batches",
            "Small source batches merged into larger destination batches (records, offsets and timestamps kept; mirror setting coalesce_max_bytes)",
            |s| s.coalesced_batches as i64,
        ),
        (
            "kmp_mirror_invariant_violations",
            "Plans refused for breaking an engine invariant (a filler over a source record, offsets skipped) and destinations found to differ from the source after a failed write; each turns the partition FAILED",
            |s| s.invariant_violations as i64,
        ),
        ("kmp_mirror_filling", "1 while the partition writes a fill that takes several batches", |s| {
            i64::from(s.state == PartitionState::Filling)
        }),
        (
            "kmp_mirror_stalled",
            "1 while the partition has made no progress for 30 s although the source holds records it has not copied (reason in describe's last error)",
            |s| i64::from(s.stalled_since_ms >= 0),
        ),
        (
            "kmp_mirror_failed",
            "1 when the partition is FAILED (see logs / describe for the reason)",
            |s| i64::from(s.state == PartitionState::Failed),
        ),
    ];
    let _ = writeln!(
        out,
        "# HELP kmp_mirror_lag_seconds Age of the newest mirrored record while the partition lags (0 when caught up).\n# TYPE kmp_mirror_lag_seconds gauge"
    );
    for ((mirror, topic, partition), s) in &snapshot {
        let _ = writeln!(
            out,
            "kmp_mirror_lag_seconds{{mirror=\"{mirror}\",topic=\"{topic}\",partition=\"{partition}\"}} {}",
            s.lag_seconds(now)
        );
    }
    render_sync(engine, &mut out);
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} gauge");
        for ((mirror, topic, partition), s) in &snapshot {
            let _ = writeln!(out, "{name}{{mirror=\"{mirror}\",topic=\"{topic}\",partition=\"{partition}\"}} {}", value(s));
        }
    }
    out
}

/// Reads one number from a mirror's sync status.
type SyncValue = fn(&kmp_mirror_engine::SyncStatus) -> f64;

/// Metadata sync per mirror and kind (`group_offsets`, `topic_configs`).
fn render_sync(engine: &Engine, out: &mut String) {
    let snapshot = engine.control().sync_snapshot();
    let series: [(&str, &str, &str, SyncValue); 7] = [
        ("kmp_mirror_sync_runs", "counter", "Metadata sync passes run", |s| s.runs as f64),
        (
            "kmp_mirror_sync_errors",
            "counter",
            "Failed metadata sync passes plus per-group / per-topic sync errors",
            |s| s.errors_total as f64,
        ),
        (
            "kmp_mirror_sync_applied",
            "counter",
            "Group offsets committed / topic config changes applied on the destination",
            |s| s.applied_total as f64,
        ),
        (
            "kmp_mirror_sync_last_run_timestamp_seconds",
            "gauge",
            "End of the last metadata sync pass (0 = never)",
            |s| s.last_run_ms as f64 / 1000.0,
        ),
        (
            "kmp_mirror_sync_last_success_timestamp_seconds",
            "gauge",
            "End of the last metadata sync pass without errors (0 = never)",
            |s| s.last_success_ms as f64 / 1000.0,
        ),
        (
            "kmp_mirror_sync_synced",
            "gauge",
            "Groups whose destination offsets equal their source offsets / topics compared, in the last pass",
            |s| s.synced as f64,
        ),
        (
            "kmp_mirror_sync_skipped_active_groups",
            "gauge",
            "Groups left alone in the last pass because they have members on the destination",
            |s| s.skipped_active as f64,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} {kind}");
        let sample = if kind == "counter" { format!("{name}_total") } else { name.to_owned() };
        for ((mirror, k), s) in &snapshot {
            let _ = writeln!(out, "{sample}{{mirror=\"{mirror}\",kind=\"{}\"}} {}", k.as_str(), value(s));
        }
    }
}
