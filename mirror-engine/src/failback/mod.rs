//! Failback: a mirror started for a topic that already holds data here, because it is the way
//! back after a failover — the topic was copied from this cluster to the source's cluster by the
//! proxy in front of it, which then stopped it (failed over), and now this proxy mirrors it home.
//! KIP-1279 truncates the log to the line the other side copied up to; an unmodified broker
//! cannot, so this folder keeps rather than drops what lies past the line:
//!
//! - `lookup`: asks the source proxy (DescribeClusterMirrors with this cluster's id and the topic's
//!   id) whether it copied this very topic from here, in which state, up to which line; a topic
//!   it is still mirroring from here is a loop and refused;
//! - `plan`: per partition, incremental (this log ends at the line, in the line's epoch) or
//!   restore (anything past or different: quarantined first);
//! - `quarantine`: the records past the line, copied to the quarantine topic;
//! - `restore`: the steps of a restore (record, quarantine, delete, then the topic is created
//!   and filled from the source like any new mirror topic), each resumable after a crash.
//!
//! Called by `mirrors::lifecycle` before it creates or adopts a topic it does not own.

pub(crate) mod lookup;
pub(crate) mod plan;
pub(crate) mod quarantine;
pub(crate) mod restore;

use tracing::info;

use crate::cluster::client::ClusterClient;
use crate::context::TopicContext;
use crate::error::MirrorError;
use crate::state::records::{FAILBACK_PREFIX, FailbackPartition, FailbackRecord, id_to_hex};
use crate::state::status::now_ms;
use lookup::Lookup;
use plan::Path;

/// One partition of a plan: the source proxy's line (offset, epoch; `None` none), this log, and
/// the path.
pub(crate) type PlannedPartition = (Option<(i64, i32)>, plan::Here, Path);

/// A failback's plan for one topic.
#[derive(Debug, Clone)]
pub(crate) struct Failback {
    /// The destination topic's id.
    pub topic_id: [u8; 16],
    /// The mirror on the source proxy that had copied the topic.
    pub source_mirror: String,
    /// Per partition here: the line and the path.
    pub partitions: Vec<PlannedPartition>,
}

impl Failback {
    /// Whether every partition continues at its line (nothing is quarantined or re-created).
    pub fn incremental(&self) -> bool {
        self.partitions.iter().all(|(_, _, p)| matches!(p, Path::Incremental { .. }))
    }

    /// The record of this plan, in `phase`.
    pub(crate) fn record(&self, mirror: &str, phase: &str) -> FailbackRecord {
        FailbackRecord {
            mirror: mirror.to_owned(),
            source_mirror: self.source_mirror.clone(),
            topic_id: id_to_hex(self.topic_id),
            at_ms: now_ms(),
            phase: phase.to_owned(),
            quarantine_topic: String::new(),
            partitions: self
                .partitions
                .iter()
                .enumerate()
                .map(|(p, (line, here, path))| FailbackPartition {
                    partition: p as i32,
                    line: line.map_or(-1, |l| l.0),
                    line_epoch: line.map_or(-1, |l| l.1),
                    end: here.end,
                    quarantined_from: path.quarantined_from(here.end),
                    records: 0,
                    markers: 0,
                    fillers: 0,
                })
                .collect(),
        }
    }
}

/// The state key of `topic`'s failback record.
pub(crate) fn key(topic: &str) -> String {
    format!("{FAILBACK_PREFIX}{topic}")
}

/// What the source proxy recorded for a topic it copied from here and stopped.
#[derive(Debug, Clone)]
pub(crate) struct Lines {
    topic_id: [u8; 16],
    source_mirror: String,
    lines: Vec<Option<lookup::SourcePartition>>,
}

/// Whether starting `topic` (absent from this engine's records) is a failback: `None` when the
/// topic does not exist here, or the source is not a proxy, or the source proxy did not copy
/// this topic from this cluster (then the usual rules for an existing topic apply). Refused when
/// the source proxy is still copying it from here (a loop) or the partition counts cannot
/// match (`source_partitions`: the source topic's count). Asked before the topic is made
/// read-only here: a refused loop must not stop the topic's own writers, even for a moment.
pub(crate) async fn lines(ctx: &TopicContext, topic: &str, source_partitions: usize) -> Result<Option<Lines>, MirrorError> {
    lines_between(&ctx.shared.destination, &ctx.source, topic, source_partitions).await
}

/// [`lines`] of `topic` on `destination`, asked of `source`.
pub(crate) async fn lines_between(
    destination: &ClusterClient,
    source: &ClusterClient,
    topic: &str,
    source_partitions: usize,
) -> Result<Option<Lines>, MirrorError> {
    let here = destination.layout_now(topic).await?;
    if here.error_code != 0 || here.partitions.is_empty() {
        return Ok(None);
    }
    let Some(cluster_id) = destination.cluster_id() else {
        return Err(MirrorError::Broker {
            side: "destination",
            what: format!("the cluster id (for the failback lookup of {topic})"),
            code: kmp_protocol::kafka_protocol::ResponseError::CoordinatorNotAvailable.code(), // retried
        });
    };
    let count = here.partitions.len();
    let (source_mirror, lines) = match lookup::ask(source, &cluster_id, topic, here.topic_id, count).await? {
        Lookup::NotAProxy | Lookup::NotCopiedFromHere => return Ok(None),
        Lookup::Copied { mirror, partitions } => (mirror, partitions),
        Lookup::Loop { mirror, state } => {
            return Err(MirrorError::Failback {
                topic: topic.to_owned(),
                reason: format!(
                    "the source cluster's mirror `{mirror}` copies it from this cluster (a partition is {state}): mirroring it back would make a loop; stop it there first (failover)"
                ),
            });
        }
    };
    if let Some((p, s)) = lines
        .iter()
        .enumerate()
        .find_map(|(p, s)| s.as_ref().filter(|s| s.state != "STOPPED").map(|s| (p, s)))
    {
        // Lines of this topic from here in a mirror not listed as copying from here: still
        // not stopped there, so not a line to fail back from yet.
        return Err(MirrorError::Failback {
            topic: topic.to_owned(),
            reason: format!(
                "the source cluster's mirror `{source_mirror}` holds it as copied from this cluster and partition {p} is {} there, not STOPPED: fail it over there first",
                s.state
            ),
        });
    }
    if source_partitions < count {
        return Err(MirrorError::Failback {
            topic: topic.to_owned(),
            reason: format!("it has {count} partitions here and {source_partitions} on the source; a topic cannot shrink"),
        });
    }
    Ok(Some(Lines {
        topic_id: here.topic_id,
        source_mirror,
        lines,
    }))
}

/// The failback's plan for `topic` (read-only here by now): per partition, this log against the
/// line.
pub(crate) async fn plan(destination: &ClusterClient, topic: &str, lines: Lines) -> Result<Failback, MirrorError> {
    let now = destination.layout_now(topic).await?;
    if now.topic_id != lines.topic_id {
        return Err(MirrorError::Broker {
            side: "destination",
            what: format!("{topic}: the topic changed while its failback was being planned"),
            code: kmp_protocol::kafka_protocol::ResponseError::RequestTimedOut.code(), // retried: planned again
        });
    }
    let Lines {
        topic_id,
        source_mirror,
        lines,
    } = lines;
    let mut partitions = Vec::with_capacity(lines.len());
    for (p, line) in lines.iter().enumerate() {
        let line = line.as_ref().map(|s| (s.offset, s.epoch));
        let here = plan::here(destination, topic, p as i32, line.map_or(-1, |l| l.1)).await?;
        partitions.push((line, here, plan::decide(here, line)));
    }
    let fb = Failback {
        topic_id,
        source_mirror,
        partitions,
    };
    info!(
        source_mirror = %fb.source_mirror,
        incremental = fb.incremental(),
        quarantined = fb.partitions.iter().map(|(_, _, p)| p.quarantined()).sum::<i64>(),
        "a failback: the source proxy copied this topic from here and stopped"
    );
    Ok(fb)
}

/// What starting `topic` would do, for a dry run (`TermCommand::FailbackPlan`): nothing changes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Preview {
    pub topic: String,
    /// `new` (no topic here that the source proxy copied from here: the usual creation or
    /// adoption), `incremental`, `restore`, or `refused` (with `reason`).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The mirror on the source proxy that had copied the topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_mirror: Option<String>,
    pub partitions: Vec<PreviewPartition>,
}

/// One partition of a [`Preview`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct PreviewPartition {
    pub partition: i32,
    /// `incremental` or `restore`.
    pub path: &'static str,
    /// The source proxy's line (first offset not copied; -1 none) and its epoch.
    pub line: i64,
    pub line_epoch: i32,
    /// This cluster's log start and end.
    pub log_start: i64,
    pub end: i64,
    /// Offsets that would be quarantined (`quarantined_from..end`).
    pub quarantined_from: i64,
    pub quarantined_offsets: i64,
}

/// The [`Preview`] of starting `topic`, a mirror from `source` into `destination`.
pub(crate) async fn preview(destination: &ClusterClient, source: &ClusterClient, topic: &str) -> Preview {
    let refused = |reason: String| Preview {
        topic: topic.to_owned(),
        outcome: "refused".into(),
        reason: Some(reason),
        source_mirror: None,
        partitions: Vec::new(),
    };
    let partitions = match source.layout_now(topic).await {
        Ok(l) if l.error_code == 0 => l.partitions.len(),
        Ok(_) => return refused(format!("topic {topic} does not exist on the source cluster")),
        Err(e) => return refused(format!("cannot reach the source cluster: {e}")),
    };
    let lines = match lines_between(destination, source, topic, partitions).await {
        Ok(Some(l)) => l,
        Ok(None) => {
            return Preview {
                topic: topic.to_owned(),
                outcome: "new".into(),
                reason: None,
                source_mirror: None,
                partitions: Vec::new(),
            };
        }
        Err(e) => return refused(e.to_string()),
    };
    match plan(destination, topic, lines).await {
        Ok(fb) => Preview {
            topic: topic.to_owned(),
            outcome: if fb.incremental() { "incremental" } else { "restore" }.into(),
            reason: None,
            source_mirror: Some(fb.source_mirror.clone()),
            partitions: fb
                .partitions
                .iter()
                .enumerate()
                .map(|(p, (line, here, path))| PreviewPartition {
                    partition: p as i32,
                    path: match path {
                        Path::Incremental { .. } => "incremental",
                        Path::Restore { .. } => "restore",
                    },
                    line: line.map_or(-1, |l| l.0),
                    line_epoch: line.map_or(-1, |l| l.1),
                    log_start: here.start,
                    end: here.end,
                    quarantined_from: path.quarantined_from(here.end),
                    quarantined_offsets: path.quarantined(),
                })
                .collect(),
        },
        Err(e) => refused(e.to_string()),
    }
}
