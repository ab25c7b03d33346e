//! Mirror progress on `/metrics`: the engine's memory and request counters, metadata sync per
//! mirror and kind, and per-partition gauges, read from the engine at scrape time (the engine owns
//! the numbers; this module only says which families they make). Collected by `collectors`.

use std::fmt;

use kmp_mirror_engine::{Engine, IoCounters, PartitionKey, PartitionState, PartitionStatus, SyncKind, SyncStatus};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::collectors::{family, single};

/// What one scrape reads from the engine.
#[derive(Debug, Clone, Default)]
pub(crate) struct MirrorSample {
    pub(crate) now_ms: i64,
    pub(crate) buffer_in_use: u64,
    pub(crate) buffer_peak: u64,
    pub(crate) buffer_limit: u64,
    pub(crate) booted: bool,
    pub(crate) io: IoCounters,
    pub(crate) partitions: Vec<(PartitionKey, PartitionStatus)>,
    pub(crate) sync: Vec<((String, SyncKind), SyncStatus)>,
}

impl MirrorSample {
    /// The engine's numbers now.
    pub(crate) fn of(engine: &Engine) -> Self {
        let b = engine.budget();
        Self {
            now_ms: kmp_mirror_engine::now_ms(),
            buffer_in_use: b.in_use(),
            buffer_peak: b.peak(),
            buffer_limit: b.limit(),
            booted: engine.control().is_booted(),
            io: kmp_mirror_engine::io_counters(),
            partitions: engine.status().snapshot(),
            sync: engine.control().sync_snapshot(),
        }
    }
}

/// Reads one gauge's value from a partition's status.
type Gauge = fn(&PartitionStatus) -> i64;

/// The per-partition gauges after `mirror_lag_seconds` (a float) and the sync families.
const PARTITION_GAUGES: [(&str, &str, Gauge); 13] = [
    (
        "mirror_lag_records",
        "Source high watermark minus the destination's next offset (open transactions are copied too)",
        |s| s.lag_records(),
    ),
    (
        "mirror_replication_latency_ms",
        "Write time minus the source timestamp of the newest record of the last batch written",
        |s| s.replication_latency_ms,
    ),
    ("mirror_source_high_watermark", "Source high watermark at the last fetch", |s| {
        s.source_high_watermark
    }),
    (
        "mirror_destination_next_offset",
        "Next destination offset (identical to the source offset copied up to)",
        |s| s.destination_next_offset,
    ),
    ("mirror_records", "Source records written to the destination", |s| s.records_mirrored as i64),
    ("mirror_filler_records", "Filler records written for offsets without visible source data", |s| {
        s.filler_records as i64
    }),
    ("mirror_bytes", "Record batch bytes written to the destination", |s| s.bytes_mirrored as i64),
    (
        "mirror_reencoded_batches",
        "Source batches re-encoded record by record (compaction holes, or the destination log end inside the batch)",
        |s| s.reencoded_batches as i64,
    ),
    (
        "mirror_coalesced_batches",
        "Small source batches merged into larger destination batches (records, offsets and timestamps kept; mirror setting coalesce_max_bytes)",
        |s| s.coalesced_batches as i64,
    ),
    (
        "mirror_invariant_violations",
        "Plans refused for breaking an engine invariant (a filler over a source record, offsets skipped) and destinations found to differ from the source after a failed write; each turns the partition FAILED",
        |s| s.invariant_violations as i64,
    ),
    ("mirror_filling", "1 while the partition writes a fill that takes several batches", |s| {
        i64::from(s.state == PartitionState::Filling)
    }),
    (
        "mirror_stalled",
        "1 while the partition has made no progress for 30 s although the source holds records it has not copied (reason in describe's last error)",
        |s| i64::from(s.stalled_since_ms >= 0),
    ),
    ("mirror_failed", "1 when the partition is FAILED (see logs / describe for the reason)", |s| {
        i64::from(s.state == PartitionState::Failed)
    }),
];

/// The families of the engine and every mirrored partition.
pub(crate) fn encode(m: &MirrorSample, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    for (name, help, value) in [
        (
            "mirror_buffer_bytes",
            "Fetched source bytes reserved until the destination acknowledges them",
            m.buffer_in_use,
        ),
        (
            "mirror_buffer_peak_bytes",
            "Most fetched source bytes reserved at once since start",
            m.buffer_peak,
        ),
        ("mirror_buffer_limit_bytes", "engine.max_buffer_bytes", m.buffer_limit),
        (
            "mirror_engine_booted",
            "1 once the mirror engine has loaded its stored state and runs its mirrors, 0 while it cannot (see /readyz)",
            u64::from(m.booted),
        ),
    ] {
        single(e, name, help, ConstGauge::new(value))?;
    }
    let io = m.io;
    for (name, help, value) in [
        (
            "mirror_fetch_requests",
            "Fetch requests sent to source brokers (each carries every waiting partition of one broker)",
            io.fetch_requests,
        ),
        (
            "mirror_fetch_session_resets",
            "Fetch sessions a source broker dropped (evicted or expired) and the engine started again with a full fetch",
            io.fetch_session_resets,
        ),
        (
            "mirror_fetch_second_sent",
            "Second Fetches caught-up partitions sent beside their first (mirror fetch_hedge_min_rtt_ms)",
            io.fetch_second_sent,
        ),
        (
            "mirror_fetch_answers_cut",
            "Answers to a Fetch asked at an older offset that brought new data after the part already copied was cut off",
            io.fetch_answers_cut,
        ),
        ("mirror_produce_requests", "Produce requests sent to destination brokers", io.produce_requests),
        ("mirror_produce_batches", "Record batches carried by those Produce requests", io.produce_batches),
    ] {
        single(e, name, help, ConstCounter::new(value))?;
    }
    family(
        e,
        "mirror_lag_seconds",
        "Age of the newest mirrored record while the partition lags (0 when caught up)",
        m.partitions
            .iter()
            .map(|(key, s)| (partition_labels(key), ConstGauge::new(s.lag_seconds(m.now_ms)))),
    )?;
    encode_sync(&m.sync, e)?;
    for (name, help, value) in PARTITION_GAUGES {
        family(
            e,
            name,
            help,
            m.partitions.iter().map(|(key, s)| (partition_labels(key), ConstGauge::new(value(s)))),
        )?;
    }
    Ok(())
}

/// The labels of a per-partition sample: `mirror` and `topic`, then `partition`.
type PartitionLabels<'a> = ([(&'static str, &'a str); 2], [(&'static str, i32); 1]);

/// Reads one number from a mirror's sync status.
type SyncValue<T> = fn(&SyncStatus) -> T;

/// `mirror`, `topic` and `partition`.
fn partition_labels((mirror, topic, partition): &PartitionKey) -> PartitionLabels<'_> {
    ([("mirror", mirror), ("topic", topic)], [("partition", *partition)])
}

/// `mirror` and `kind`.
fn sync_labels((mirror, kind): &(String, SyncKind)) -> [(&'static str, &str); 2] {
    [("mirror", mirror), ("kind", kind.as_str())]
}

/// Metadata sync per mirror and kind (`group_offsets`, `topic_configs`, …).
fn encode_sync(sync: &[((String, SyncKind), SyncStatus)], e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let counters: [(&str, &str, SyncValue<u64>); 3] = [
        ("mirror_sync_runs", "Metadata sync passes run", |s| s.runs),
        (
            "mirror_sync_errors",
            "Failed metadata sync passes plus per-group / per-topic sync errors",
            |s| s.errors_total,
        ),
        (
            "mirror_sync_applied",
            "Group offsets committed / topic config changes applied on the destination",
            |s| s.applied_total,
        ),
    ];
    for (name, help, value) in counters {
        family(e, name, help, sync.iter().map(|(key, s)| (sync_labels(key), ConstCounter::new(value(s)))))?;
    }
    let timestamps: [(&str, &str, SyncValue<i64>); 2] = [
        (
            "mirror_sync_last_run_timestamp_seconds",
            "End of the last metadata sync pass (0 = never)",
            |s| s.last_run_ms,
        ),
        (
            "mirror_sync_last_success_timestamp_seconds",
            "End of the last metadata sync pass without errors (0 = never)",
            |s| s.last_success_ms,
        ),
    ];
    for (name, help, ms) in timestamps {
        let seconds = |s: &SyncStatus| ConstGauge::new(ms(s) as f64 / 1000.0);
        family(e, name, help, sync.iter().map(|(key, s)| (sync_labels(key), seconds(s))))?;
    }
    let gauges: [(&str, &str, SyncValue<u64>); 2] = [
        (
            "mirror_sync_synced",
            "Groups whose destination offsets equal their source offsets / topics compared, in the last pass",
            |s| s.synced,
        ),
        (
            "mirror_sync_skipped_active_groups",
            "Groups left alone in the last pass because they have members on the destination",
            |s| s.skipped_active,
        ),
    ];
    for (name, help, value) in gauges {
        family(e, name, help, sync.iter().map(|(key, s)| (sync_labels(key), ConstGauge::new(value(s)))))?;
    }
    Ok(())
}
