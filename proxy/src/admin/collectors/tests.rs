//! `/metrics` through the collectors against what the hand-written renderers wrote before them
//! (`golden.prom`: their output for the fixed scrape below, captured from that code), and label
//! escaping.

use kmp_mirror_engine::{ElectionView, FollowProgress, IoCounters, PartitionState, PartitionStatus, SyncKind, SyncStatus};
use prometheus_client::registry::Registry;

use super::Scraped;
use crate::admin::mirror_metrics::{self, MirrorSample};
use crate::admin::{election_status, follower_status};
use crate::metrics::Metrics;

/// What the hand-written renderers (mirror engine, follower, election) wrote for the scrape of
/// [`mirror_sample`], [`follow_progress`] and [`election_view`], before `# EOF`.
const GOLDEN: &str = include_str!("golden.prom");

/// Wall-clock time of the fixed scrape.
const NOW_MS: i64 = 1_700_000_010_500;

/// A scrape of an engine with two mirrors: one partition copying and behind, one caught up, one
/// FAILED, one filling and stalled; group offsets synced, topic configs never run.
fn mirror_sample() -> MirrorSample {
    let behind = PartitionStatus {
        state: PartitionState::Mirroring,
        source_high_watermark: 130,
        source_last_stable_offset: 128,
        destination_next_offset: 100,
        records_mirrored: 100,
        filler_records: 3,
        bytes_mirrored: 65_536,
        reencoded_batches: 2,
        coalesced_batches: 5,
        last_mirrored_timestamp_ms: NOW_MS - 2_500,
        replication_latency_ms: 12,
        ..PartitionStatus::default()
    };
    let caught_up = PartitionStatus {
        source_high_watermark: 40,
        source_last_stable_offset: 40,
        destination_next_offset: 40,
        records_mirrored: 40,
        bytes_mirrored: 4_000,
        last_mirrored_timestamp_ms: NOW_MS - 60_000,
        replication_latency_ms: 7,
        ..behind.clone()
    };
    let failed = PartitionStatus {
        state: PartitionState::Failed,
        invariant_violations: 1,
        last_error: Some("destination differs".into()),
        ..PartitionStatus::default()
    };
    let filling = PartitionStatus {
        state: PartitionState::Filling,
        source_high_watermark: 1_000_000,
        source_last_stable_offset: 1_000_000,
        destination_next_offset: 500_000,
        filler_records: 500_000,
        stalled_since_ms: NOW_MS - 31_000,
        ..PartitionStatus::default()
    };
    let synced = SyncStatus {
        interval_ms: 10_000,
        runs: 4,
        last_run_ms: 1_700_000_000_123,
        last_success_ms: 1_700_000_000_000,
        synced: 2,
        skipped_active: 1,
        applied_total: 6,
        errors_total: 3,
        last_error: None,
    };
    MirrorSample {
        now_ms: NOW_MS,
        buffer_in_use: 1_024,
        buffer_peak: 4_096,
        buffer_limit: 268_435_456,
        booted: true,
        io: IoCounters {
            fetch_requests: 11,
            fetch_session_resets: 1,
            fetch_second_sent: 2,
            fetch_answers_cut: 3,
            produce_requests: 5,
            produce_batches: 7,
        },
        partitions: vec![
            (("dr".into(), "orders".into(), 0), behind),
            (("dr".into(), "orders".into(), 1), caught_up),
            (("dr".into(), "payments".into(), 0), failed),
            (("eu".into(), "logs".into(), 3), filling),
        ],
        sync: vec![
            (("dr".into(), SyncKind::GroupOffsets), synced),
            (("dr".into(), SyncKind::TopicConfigs), SyncStatus::default()),
        ],
    }
}

/// A follower 2.5 s after its last read, two records behind.
fn follow_progress() -> FollowProgress {
    FollowProgress {
        topic: "__kmp_mirror_state".into(),
        loaded: true,
        position: 10,
        high_watermark: 12,
        last_read_ms: NOW_MS - 2_500,
        error: None,
    }
}

/// A standby with shared work; its instance id has quotes (the old renderer escaped these).
fn election_view() -> ElectionView {
    ElectionView {
        instance_id: "kmp-\"a\"".into(),
        group_id: "g".into(),
        active: false,
        generation: 7,
        active_instance: "kmp-b".into(),
        takeovers: 2,
        problem: None,
        share: Some((1, 3)),
        share_work: true,
        alone: false,
    }
}

/// The three collectors, reading the fixed scrape, in the order `admin::register_collectors` adds them.
fn fixed_collectors() -> [Box<dyn prometheus_client::collector::Collector>; 3] {
    [
        Box::new(Scraped::new("mirror engine", || Some(mirror_sample()), mirror_metrics::encode)),
        Box::new(Scraped::new("state follower", || Some((follow_progress(), NOW_MS)), follower_status::encode)),
        Box::new(Scraped::new("engine election", || Some(election_view()), election_status::encode)),
    ]
}

/// `(name{labels}, value)` of a sample line; `None` for `# HELP`, `# TYPE`, `# EOF`.
fn sample(line: &str) -> Option<(&str, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ').expect("a sample line is `series value`");
    Some((series, value.parse().expect("a sample value is a number")))
}

/// Asserts `new` says what `old` said, line by line: comment lines (help, type) identical, sample
/// lines with the identical series and the same value. The only textual difference allowed is
/// how a float gauge writes a whole number (`0.0` where the old text had `0`); it is returned.
fn assert_same_lines<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    assert_eq!(old.len(), new.len(), "line counts differ:\n{}\n----\n{}", old.join("\n"), new.join("\n"));
    let mut reformatted = Vec::new();
    for (o, n) in old.iter().zip(new) {
        match (sample(o), sample(n)) {
            (None, None) => assert_eq!(o, n),
            (Some((os, ov)), Some((ns, nv))) => {
                assert_eq!(os, ns, "series");
                assert_eq!(ov, nv, "value of {os}");
                if o != n {
                    assert_eq!(format!("{o}.0"), *n, "only a whole number gains `.0`");
                    reformatted.push((*o, *n));
                }
            }
            _ => panic!("a comment line against a sample line:\n{o}\n{n}"),
        }
    }
    reformatted
}

#[test]
fn the_collectors_write_what_the_hand_written_renderers_wrote() {
    let mut registry = Registry::with_prefix("kmp");
    for c in fixed_collectors() {
        registry.register_collector(c);
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode_registry(&mut text, &registry).unwrap();
    let old: Vec<&str> = GOLDEN.lines().collect();
    let new: Vec<&str> = text.lines().collect();
    let reformatted = assert_same_lines(&old, &new);
    // The float gauges (seconds) with a whole value: the encoder writes `0.0`, the old text `0`.
    let series: Vec<&str> = reformatted.iter().map(|(o, _)| sample(o).unwrap().0).collect();
    assert_eq!(
        series,
        [
            r#"kmp_mirror_lag_seconds{mirror="dr",topic="orders",partition="1"}"#,
            r#"kmp_mirror_lag_seconds{mirror="dr",topic="payments",partition="0"}"#,
            r#"kmp_mirror_lag_seconds{mirror="eu",topic="logs",partition="3"}"#,
            r#"kmp_mirror_sync_last_run_timestamp_seconds{mirror="dr",kind="topic_configs"}"#,
            r#"kmp_mirror_sync_last_success_timestamp_seconds{mirror="dr",kind="group_offsets"}"#,
            r#"kmp_mirror_sync_last_success_timestamp_seconds{mirror="dr",kind="topic_configs"}"#,
        ]
    );
}

#[test]
fn metrics_is_one_encode_with_the_engine_families_before_eof() {
    // Before: the proxy's registry encoded, the hand-written text spliced in before `# EOF`.
    let mut before = Metrics::new().encode();
    let at = before.rfind("# EOF").expect("the exposition ends with # EOF");
    before.insert_str(at, GOLDEN);
    // Now: the collectors are on the proxy's registry.
    let metrics = Metrics::new();
    for c in fixed_collectors() {
        metrics.register_collector(c);
    }
    let after = metrics.encode();
    assert!(after.ends_with("# EOF\n"), "{after}");
    // Families of the proxy's own metrics list their labelled samples in hash order: compare
    // sorted, comment lines as they are and samples by series and value.
    let lines = |text: &str| {
        let mut v: Vec<(String, Option<f64>)> = text
            .lines()
            .map(|l| sample(l).map_or((l.to_owned(), None), |(series, value)| (series.to_owned(), Some(value))))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (old, new) = (lines(&before), lines(&after));
    for (o, n) in old.iter().zip(&new) {
        assert_eq!(o, n, "before / after");
    }
    assert_eq!(old.len(), new.len(), "line counts");
}

#[test]
fn label_values_from_the_config_are_escaped() {
    let name = "dr \"eu\"\\west\nline2";
    let mut m = mirror_sample();
    m.partitions.truncate(1);
    m.partitions[0].0.0 = name.into();
    m.sync.truncate(1);
    m.sync[0].0.0 = name.into();
    let text = super::text_of(&m, mirror_metrics::encode);
    let escaped = r#"mirror="dr \"eu\"\\west\nline2""#;
    assert!(
        text.contains(&format!(r#"kmp_mirror_lag_records{{{escaped},topic="orders",partition="0"}} 30"#)),
        "{text}"
    );
    assert!(
        text.contains(&format!(r#"kmp_mirror_sync_runs_total{{{escaped},kind="group_offsets"}} 4"#)),
        "{text}"
    );
    // Every line is a comment or one whole sample: the newline did not split a line.
    for line in text.lines() {
        assert!(
            line.starts_with('#') || line.starts_with("kmp_") && sample(line).is_some(),
            "{line:?} in\n{text}"
        );
    }
    let view = ElectionView {
        instance_id: "kmp\\1\n".into(),
        group_id: "g\"".into(),
        ..election_view()
    };
    let text = super::text_of(&view, election_status::encode);
    assert!(text.contains(r#"kmp_engine_active{engine_instance="kmp\\1\n",group="g\""} 0"#), "{text}");
}
