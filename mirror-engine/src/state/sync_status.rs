//! What metadata sync reports per mirror and kind: when it last ran and succeeded, what it
//! synced, its errors. Read by `/metrics`, DescribeClusterMirrors and REST; written only by
//! `sync`. Progress of copied data is `status`' (the partition board), not this.

use std::sync::Arc;

use dashmap::DashMap;

use crate::state::status::now_ms;

/// A kind of metadata sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyncKind {
    GroupOffsets,
    ShareGroupOffsets,
    TopicConfigs,
}

impl SyncKind {
    pub const ALL: [SyncKind; 3] = [SyncKind::GroupOffsets, SyncKind::ShareGroupOffsets, SyncKind::TopicConfigs];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GroupOffsets => "group_offsets",
            Self::ShareGroupOffsets => "share_group_offsets",
            Self::TopicConfigs => "topic_configs",
        }
    }
}

/// One mirror's sync of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncStatus {
    /// The mirror's interval for this kind, milliseconds (0 = periodic sync off).
    pub interval_ms: u64,
    /// Passes run since the proxy started (periodic and at stop).
    pub runs: u64,
    /// Wall-clock milliseconds of the last pass's end (0 = never ran).
    pub last_run_ms: i64,
    /// Wall-clock milliseconds of the last pass without any error (0 = never).
    pub last_success_ms: i64,
    /// Group offsets: groups whose destination offsets equal their (clamped) source offsets
    /// after the last pass. Topic configs: topics compared in the last pass.
    pub synced: u64,
    /// Group offsets: groups left alone in the last pass because they have members on the
    /// destination. Always 0 for topic configs.
    pub skipped_active: u64,
    /// Group offsets: partition offsets committed since start. Topic configs: config changes
    /// applied since start.
    pub applied_total: u64,
    /// Failed passes plus per-group / per-topic errors, since start.
    pub errors_total: u64,
    /// The most recent error, if the last pass had one.
    pub last_error: Option<String>,
}

/// What one pass found.
#[derive(Debug, Clone, Default)]
pub struct PassOutcome {
    pub synced: u64,
    pub skipped_active: u64,
    pub applied: u64,
    pub errors: Vec<String>,
}

/// Sync status of every mirror; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SyncBoard {
    inner: Arc<DashMap<(String, SyncKind), SyncStatus>>,
}

impl SyncBoard {
    /// Records a pass: `Err` when the pass could not run at all (a cluster unreachable).
    pub fn record(&self, mirror: &str, kind: SyncKind, interval_ms: u64, outcome: Result<PassOutcome, String>) {
        let now = now_ms();
        let mut s = self.inner.entry((mirror.to_owned(), kind)).or_default();
        s.interval_ms = interval_ms;
        s.runs += 1;
        s.last_run_ms = now;
        match outcome {
            Ok(o) => {
                s.synced = o.synced;
                s.skipped_active = o.skipped_active;
                s.applied_total += o.applied;
                s.errors_total += o.errors.len() as u64;
                s.last_error = o.errors.into_iter().last();
                if s.last_error.is_none() {
                    s.last_success_ms = now;
                }
            }
            Err(e) => {
                s.errors_total += 1;
                s.last_error = Some(e);
            }
        }
    }

    /// Notes the interval before the first pass, so a mirror shows up at once.
    pub fn announce(&self, mirror: &str, kind: SyncKind, interval_ms: u64) {
        self.inner.entry((mirror.to_owned(), kind)).or_default().interval_ms = interval_ms;
    }

    /// A mirror's sync status, every kind that has been announced.
    pub fn get(&self, mirror: &str) -> Vec<(SyncKind, SyncStatus)> {
        let mut out: Vec<_> = SyncKind::ALL
            .iter()
            .filter_map(|k| self.inner.get(&(mirror.to_owned(), *k)).map(|s| (*k, s.clone())))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out
    }

    /// Every mirror's status, sorted.
    pub fn snapshot(&self) -> Vec<((String, SyncKind), SyncStatus)> {
        let mut out: Vec<_> = self.inner.iter().map(|e| (e.key().clone(), e.value().clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forgets a deleted mirror.
    pub fn remove(&self, mirror: &str) {
        self.inner.retain(|(m, _), _| m != mirror);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_with_errors_counts_them_and_keeps_the_last_success_time() {
        let b = SyncBoard::default();
        b.record(
            "m",
            SyncKind::GroupOffsets,
            10,
            Ok(PassOutcome {
                synced: 2,
                applied: 3,
                ..Default::default()
            }),
        );
        let ok = b.get("m")[0].1.clone();
        assert!(ok.last_success_ms > 0 && ok.errors_total == 0 && ok.applied_total == 3 && ok.synced == 2);
        b.record(
            "m",
            SyncKind::GroupOffsets,
            10,
            Ok(PassOutcome {
                errors: vec!["a".into(), "b".into()],
                ..Default::default()
            }),
        );
        b.record("m", SyncKind::GroupOffsets, 10, Err("source down".into()));
        let s = b.get("m")[0].1.clone();
        assert_eq!(
            (s.runs, s.errors_total, s.applied_total, s.last_error.as_deref()),
            (3, 3, 3, Some("source down"))
        );
        assert_eq!(s.last_success_ms, ok.last_success_ms);
        b.remove("m");
        assert!(b.get("m").is_empty());
    }
}
