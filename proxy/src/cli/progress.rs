//! Copy progress as the `mirrors` CLI shows it: per-topic records remaining, ≈bytes remaining,
//! rate and ETA summed from the DescribeClusterMirrors partitions (the lag the KIP carries plus
//! the proxy's progress extension with the engine's 10 s rate window), their text forms, and
//! the progress line of a long wait (one updating line on a terminal, a plain line every few
//! seconds otherwise).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use kmp_protocol::mirror_api::{DescribedMirror, PartitionDetail};
use serde_json::{Value, json};

use super::table::table;

/// Progress of one mirror topic (the sum over its described partitions).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct TopicProgress {
    pub mirror: String,
    pub topic: String,
    pub partitions: usize,
    /// Records the destination is behind the source (sum of the partitions' lag).
    pub remaining: i64,
    /// Partitions whose lag is not known yet (lag -1: source end not read yet).
    pub unknown: usize,
    pub records_mirrored: i64,
    pub bytes_mirrored: i64,
    pub records_per_sec: f64,
    pub bytes_per_sec: f64,
}

impl TopicProgress {
    /// Adds one partition.
    pub fn add(&mut self, p: &PartitionDetail) {
        self.partitions += 1;
        if p.lag < 0 {
            self.unknown += 1;
        } else {
            self.remaining += p.lag;
        }
        if let Some(g) = &p.progress {
            self.records_mirrored += g.records_mirrored;
            self.bytes_mirrored += g.bytes_mirrored;
            if g.window_ms > 0 {
                self.records_per_sec += g.window_records as f64 * 1000.0 / g.window_ms as f64;
                self.bytes_per_sec += g.window_bytes as f64 * 1000.0 / g.window_ms as f64;
            }
        }
    }

    /// Whether the destination has everything the source has (every lag known and 0).
    pub fn caught_up(&self) -> bool {
        self.unknown == 0 && self.remaining == 0
    }

    /// Estimated bytes remaining: the bytes per record mirrored so far times the records
    /// remaining (`None` before anything was mirrored: no size to go by).
    pub fn bytes_remaining(&self) -> Option<f64> {
        if self.remaining == 0 {
            return Some(0.0);
        }
        (self.records_mirrored > 0).then(|| self.bytes_mirrored as f64 / self.records_mirrored as f64 * self.remaining as f64)
    }

    /// Seconds until caught up at the recent rate: 0 when caught up, `None` when nothing is
    /// being copied (rate 0) or the remaining count is unknown.
    pub fn eta_secs(&self) -> Option<f64> {
        if self.caught_up() {
            Some(0.0)
        } else if self.unknown > 0 || self.records_per_sec <= 0.0 {
            None
        } else {
            Some(self.remaining as f64 / self.records_per_sec)
        }
    }

    /// `--output json` form.
    pub fn json(&self) -> Value {
        json!({"mirror": self.mirror, "topic": self.topic, "partitions": self.partitions,
            "records_remaining": if self.unknown > 0 { Value::Null } else { json!(self.remaining) },
            "bytes_remaining_estimate": self.bytes_remaining().map(f64::round),
            "records_mirrored": self.records_mirrored, "bytes_mirrored": self.bytes_mirrored,
            "records_per_sec": round1(self.records_per_sec), "bytes_per_sec": round1(self.bytes_per_sec),
            "eta_seconds": self.eta_secs().map(round1), "caught_up": self.caught_up()})
    }

    /// Table cells: records remaining, ≈bytes remaining, record rate, byte rate, ETA.
    pub fn cells(&self) -> Vec<String> {
        vec![
            if self.unknown > 0 { "?".to_owned() } else { self.remaining.to_string() },
            self.bytes_remaining()
                .map_or_else(|| "?".to_owned(), |b| if b == 0.0 { "0 B".to_owned() } else { format!("≈{}", bytes(b)) }),
            format!("{} rec/s", count_rate(self.records_per_sec)),
            format!("{}/s", bytes(self.bytes_per_sec)),
            eta(self.eta_secs()),
        ]
    }
}

/// Headers of [`TopicProgress::cells`].
pub(super) const HEADERS: [&str; 5] = ["RECORDS-REMAINING", "BYTES-REMAINING", "RATE", "BYTE-RATE", "ETA"];

/// Per-topic progress of `mirrors` (topics in answer order), only topics `keep` accepts.
pub(super) fn per_topic(mirrors: &[DescribedMirror], keep: impl Fn(&str) -> bool) -> Vec<TopicProgress> {
    let mut out = Vec::new();
    for m in mirrors {
        for (topic, parts) in m.topics.iter().filter(|(t, _)| keep(t)) {
            let mut t = TopicProgress {
                mirror: m.mirror_name.clone(),
                topic: topic.clone(),
                ..Default::default()
            };
            parts.iter().for_each(|p| t.add(p));
            out.push(t);
        }
    }
    out
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// `512 B`, `1.5 KiB`, `12.3 MiB`, `2.0 GiB`.
pub(super) fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b.max(0.0);
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{v:.0} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

/// A rate of records: one decimal below 10, whole numbers above.
fn count_rate(r: f64) -> String {
    if r < 10.0 { format!("{r:.1}") } else { format!("{r:.0}") }
}

/// `caught up` (0), `—` (unknown: no rate), `45s`, `3m 05s`, `2h 07m`, `3d 04h`.
pub(super) fn eta(secs: Option<f64>) -> String {
    let Some(s) = secs else {
        return "—".to_owned();
    };
    if s <= 0.0 {
        return "caught up".to_owned();
    }
    let s = s.ceil() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..=86_399 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// The line of a wait for `mirror`'s topics to catch up: remaining records (≈bytes), rate, ETA,
/// and how many partitions are not MIRRORING yet.
pub(super) fn wait_line(mirror: &str, topics: &[TopicProgress], not_mirroring: usize) -> String {
    let mut sum = TopicProgress::default();
    for t in topics {
        sum.partitions += t.partitions;
        sum.remaining += t.remaining;
        sum.unknown += t.unknown;
        sum.records_mirrored += t.records_mirrored;
        sum.bytes_mirrored += t.bytes_mirrored;
        sum.records_per_sec += t.records_per_sec;
        sum.bytes_per_sec += t.bytes_per_sec;
    }
    let c = sum.cells();
    let mut line = format!(
        "mirror {mirror}: waiting to catch up: {} records remaining ({}), {}, ETA {}",
        c[0], c[1], c[2], c[4]
    );
    if not_mirroring > 0 {
        line.push_str(&format!(", {not_mirroring} partition(s) not MIRRORING"));
    }
    line
}

/// Shows a wait's progress on stderr: on a terminal one line redrawn in place (`\r`, at most 4
/// times a second), otherwise a plain line at most every `plain_every` so logs stay short.
pub(super) struct WaitProgress {
    tty: bool,
    plain_every: Duration,
    last: Option<Instant>,
    drawn: bool,
}

impl WaitProgress {
    pub fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            plain_every: Duration::from_secs(5),
            last: None,
            drawn: false,
        }
    }

    /// Shows `line` now if it is time to.
    pub fn show(&mut self, line: &str) {
        let every = if self.tty { Duration::from_millis(250) } else { self.plain_every };
        if self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not fail the command.
        let _ = if self.tty {
            write!(err, "\r{line}\x1b[K").and_then(|()| err.flush())
        } else {
            writeln!(err, "{line}")
        };
        self.drawn = true;
    }

    /// Ends the updating line (a terminal gets its newline, with `last` as the final text).
    pub fn finish(&mut self, last: &str) {
        if self.tty && self.drawn {
            let _ = writeln!(std::io::stderr().lock(), "\r{last}\x1b[K");
        }
        self.drawn = false;
    }
}

/// The per-topic copy progress table under `--describe`.
#[allow(clippy::print_stdout, reason = "CLI output")]
pub(super) fn print_table(mirrors: &[DescribedMirror]) {
    let topics = per_topic(mirrors, |_| true);
    if topics.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = topics
        .iter()
        .map(|t| [vec![t.mirror.clone(), t.topic.clone(), t.partitions.to_string()], t.cells()].concat())
        .collect();
    let headers: Vec<&str> = ["MIRROR", "TOPIC", "PARTITIONS"].into_iter().chain(HEADERS).collect();
    println!();
    print!("{}", table(&headers, &[2, 3, 4, 5, 6, 7], &rows));
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::mirror_api::PartitionProgress;

    fn part(lag: i64, mirrored: i64, bytes: i64, window_ms: i64, window_records: i64) -> PartitionDetail {
        PartitionDetail {
            lag,
            progress: Some(PartitionProgress {
                records_mirrored: mirrored,
                bytes_mirrored: bytes,
                window_ms,
                window_records,
                window_bytes: window_records * 100,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn eta_reads_caught_up_at_zero_a_dash_without_rate_and_coarser_units_when_long() {
        assert_eq!(eta(Some(0.0)), "caught up");
        assert_eq!(eta(None), "—");
        assert_eq!(eta(Some(0.2)), "1s", "rounded up: never 0s while something remains");
        assert_eq!(eta(Some(59.0)), "59s");
        assert_eq!(eta(Some(185.0)), "3m 05s");
        assert_eq!(eta(Some(7_620.0)), "2h 07m");
        assert_eq!(eta(Some(3.0 * 86_400.0 + 4.0 * 3_600.0)), "3d 04h");
    }

    #[test]
    fn byte_and_rate_texts_use_binary_units_and_sensible_precision() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(12.3 * 1024.0 * 1024.0), "12.3 MiB");
        assert_eq!(count_rate(2.25), "2.2");
        assert_eq!(count_rate(1234.6), "1235");
    }

    #[test]
    fn a_topic_sums_its_partitions_and_estimates_bytes_from_the_mirrored_average() {
        let mut t = TopicProgress::default();
        // 1000 records in 10 s on one partition, 500 in 5 s on the other: 200 records/s.
        t.add(&part(3_000, 1_000, 100_000, 10_000, 1_000));
        t.add(&part(1_000, 1_000, 100_000, 5_000, 500));
        assert_eq!((t.partitions, t.remaining, t.unknown), (2, 4_000, 0));
        assert!((t.records_per_sec - 200.0).abs() < 1e-9, "{}", t.records_per_sec);
        assert_eq!(t.bytes_remaining(), Some(400_000.0), "100 bytes per record mirrored × 4000 remaining");
        assert_eq!(t.eta_secs(), Some(20.0));
        assert_eq!(t.cells(), ["4000", "≈390.6 KiB", "200 rec/s", "19.5 KiB/s", "20s"]);
        assert_eq!(t.json()["eta_seconds"], json!(20.0));
    }

    #[test]
    fn no_rate_means_no_eta_nothing_remaining_means_caught_up_and_unknown_lag_is_unknown() {
        let paused = {
            let mut t = TopicProgress::default();
            t.add(&part(500, 0, 0, 10_000, 0));
            t
        };
        assert_eq!(paused.eta_secs(), None);
        assert_eq!(paused.bytes_remaining(), None, "nothing mirrored: no size to estimate from");
        assert_eq!(paused.cells(), ["500", "?", "0.0 rec/s", "0 B/s", "—"]);
        let done = {
            let mut t = TopicProgress::default();
            t.add(&part(0, 10, 1_000, 0, 0));
            t
        };
        assert!(done.caught_up());
        assert_eq!(done.cells()[4], "caught up");
        assert_eq!(done.json()["records_remaining"], json!(0));
        let preparing = {
            let mut t = TopicProgress::default();
            t.add(&part(-1, 0, 0, 0, 0));
            t
        };
        assert!(!preparing.caught_up());
        assert_eq!(preparing.eta_secs(), None);
        assert_eq!(preparing.json()["records_remaining"], Value::Null);
        // An older proxy without the extension: the lag still counts, the rate is unknown.
        let mut old = TopicProgress::default();
        old.add(&PartitionDetail { lag: 7, ..Default::default() });
        assert_eq!((old.remaining, old.eta_secs()), (7, None));
    }

    #[test]
    fn the_wait_line_names_remaining_records_rate_eta_and_stragglers() {
        let mut t = TopicProgress::default();
        t.add(&part(1_000, 1_000, 100_000, 10_000, 1_000));
        let line = wait_line("m", &[t.clone(), t], 1);
        assert_eq!(
            line,
            "mirror m: waiting to catch up: 2000 records remaining (≈195.3 KiB), 200 rec/s, ETA 10s, 1 partition(s) not MIRRORING"
        );
    }
}
