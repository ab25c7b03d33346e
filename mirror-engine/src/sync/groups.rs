//! Consumer-group offset sync, one pass for one mirror (KIP-1279 §6): the committed offsets of
//! the source's consumer groups (picked by the mirror's group include/exclude patterns) for
//! the given mirror topics are committed on the destination, unchanged because offsets are
//! identical on both sides, except clamped into the destination partition's
//! `[log start, high watermark]` so a group never skips data the destination has not copied
//! yet. Groups with members on the destination are left alone (and the broker would refuse an
//! admin commit for them anyway). When passes run is `sync`'s business; the requests are
//! `cluster::groups`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kmp_config::MirrorConfig;
use tracing::{debug, info};

use crate::cluster::client::ClusterClient;
use crate::cluster::groups::{self as wire, GroupOffsets};
use crate::error::MirrorError;
use crate::topics::select::GroupFilter;

/// Destination group states in which the group has members (its own progress wins).
const ACTIVE_STATES: &[&str] = &["Stable", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"];

/// OffsetCommit errors meaning the group gained members between the check and the commit.
const BECAME_ACTIVE: &[i16] = &[
    22,  // ILLEGAL_GENERATION
    25,  // UNKNOWN_MEMBER_ID
    27,  // REBALANCE_IN_PROGRESS
    110, // STALE_MEMBER_EPOCH
];

/// Whether a destination group state means the group has members.
pub fn is_active(state: &str) -> bool {
    ACTIVE_STATES.iter().any(|s| s.eq_ignore_ascii_case(state))
}

/// A source offset (a commit, a share-group start offset) as a destination offset of a
/// partition shifted by `shift` (`copy::shift`); a negative one (no offset) stays as it is, one
/// below the shift becomes 0 (and is then clamped to the destination's log start).
pub(crate) fn to_destination(offset: i64, shift: i64) -> i64 {
    if offset < 0 { offset } else { (offset - shift).max(0) }
}

/// Moves every group's source offsets (`offset` of each value) to destination offsets of the
/// partitions `shifts` shifts ([`to_destination`]).
pub(crate) fn shift_to_destination<V>(groups: &mut [(String, PerPartition<V>)], shifts: &crate::state::catalog::Catalog, offset: impl Fn(&mut V) -> &mut i64) {
    for (_, partitions) in groups.iter_mut() {
        for ((t, p), v) in partitions.iter_mut() {
            let o = offset(v);
            *o = to_destination(*o, shifts.shift(t, *p));
        }
    }
}

/// The offset the destination group gets for a source commit: never past what the destination
/// holds (`high_watermark`), never before its log start.
pub fn clamp(source: i64, log_start: i64, high_watermark: i64) -> i64 {
    source.min(high_watermark).max(log_start)
}

/// What to commit for one group so its destination offsets equal its (clamped) source
/// offsets; empty when they already do. Only partitions in `watermarks` (the mirror topics
/// being synced) are considered.
pub fn plan_group(source: &GroupOffsets, destination: &GroupOffsets, watermarks: &HashMap<(String, i32), (i64, i64)>) -> GroupOffsets {
    source
        .iter()
        .filter_map(|(tp, (offset, metadata))| {
            let &(log_start, high_watermark) = watermarks.get(tp)?;
            let target = clamp(*offset, log_start, high_watermark);
            (destination.get(tp).map(|c| c.0) != Some(target)).then(|| (tp.clone(), (target, metadata.clone())))
        })
        .collect()
}

/// Something per `(topic, partition)` of a group (committed offsets, start offsets).
pub(crate) type PerPartition<V> = BTreeMap<(String, i32), V>;

/// Each group's offsets on `topics` only; groups with none there are dropped.
pub(crate) fn on_topics<V>(groups: HashMap<String, PerPartition<V>>, topics: &[String]) -> Vec<(String, PerPartition<V>)> {
    let wanted: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
    groups
        .into_iter()
        .map(|(g, offsets)| {
            (
                g,
                offsets
                    .into_iter()
                    .filter(|((t, _), _)| wanted.contains(t.as_str()))
                    .collect::<BTreeMap<_, _>>(),
            )
        })
        .filter(|(_, offsets)| !offsets.is_empty())
        .collect()
}

/// The topics any of `groups` has offsets on, sorted.
pub(crate) fn topics_of<V>(groups: &[(String, PerPartition<V>)]) -> Vec<String> {
    groups
        .iter()
        .flat_map(|(_, o)| o.keys().map(|(t, _)| t.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The outcome of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupReport {
    /// Source groups with committed offsets on the synced topics.
    pub groups: usize,
    /// Of those, groups whose destination offsets now equal the clamped source offsets.
    pub in_sync: usize,
    /// Groups left alone because they have members on the destination.
    pub skipped_active: Vec<String>,
    /// Partition offsets written this pass.
    pub offsets_committed: u64,
    /// Per-group problems (the other groups were still synced).
    pub errors: Vec<String>,
}

/// One pass over `topics` of mirror `def`.
/// `shifts`: the mirror topics' offset shifts (`copy::shift`): a source commit at s is committed
/// at destination offset s − Δ (clamped like any other).
pub async fn sync(
    source: &ClusterClient,
    destination: &ClusterClient,
    def: &MirrorConfig,
    topics: &[String],
    shifts: &crate::state::catalog::Catalog,
) -> Result<GroupReport, MirrorError> {
    let mut report = GroupReport::default();
    let filter = GroupFilter::new(&def.groups_include, &def.groups_exclude)?;
    if topics.is_empty() || def.groups_include.is_empty() {
        return Ok(report);
    }
    let candidates: BTreeSet<String> = wire::list_groups(source).await?.into_iter().filter(|g| filter.syncs(g)).map(|g| g.id).collect();
    if candidates.is_empty() {
        return Ok(report);
    }
    let candidates: Vec<String> = candidates.into_iter().collect();
    let coords = wire::coordinators(source, &candidates).await?;
    let (source_offsets, failed) = wire::committed_offsets(source, &coords).await?;
    report
        .errors
        .extend(failed.into_iter().map(|(g, code)| format!("group {g}: source OffsetFetch error {code}")));
    let mut relevant = on_topics(source_offsets, topics);
    shift_to_destination(&mut relevant, shifts, |(offset, _)| offset);
    report.groups = relevant.len();
    if relevant.is_empty() {
        return Ok(report);
    }
    let states: HashMap<String, String> = wire::list_groups(destination).await?.into_iter().map(|g| (g.id, g.state)).collect();
    let (active, idle): (Vec<_>, Vec<_>) = relevant.into_iter().partition(|(g, _)| states.get(g).is_some_and(|s| is_active(s)));
    report.skipped_active = active.into_iter().map(|(g, _)| g).collect();
    if idle.is_empty() {
        return Ok(report);
    }
    let names: Vec<String> = idle.iter().map(|(g, _)| g.clone()).collect();
    let coords = wire::coordinators(destination, &names).await?;
    let (current, failed) = wire::committed_offsets(destination, &coords).await?;
    // A group unknown on the destination has no offsets yet (an error only if not "not found").
    report.errors.extend(
        failed
            .iter()
            .filter(|(_, code)| *code != 69)
            .map(|(g, code)| format!("group {g}: destination OffsetFetch error {code}")),
    );
    let touched = topics_of(&idle);
    let watermarks = wire::watermarks(destination, &touched).await?;
    let empty = GroupOffsets::new();
    for (group, offsets) in idle {
        if failed.iter().any(|(g, code)| *g == group && *code != 69) {
            continue;
        }
        let plan = plan_group(&offsets, current.get(&group).unwrap_or(&empty), &watermarks);
        if plan.is_empty() {
            report.in_sync += usize::from(offsets.keys().all(|tp| watermarks.contains_key(tp)));
            continue;
        }
        let Some(Ok(coordinator)) = coords.get(&group) else { continue };
        let codes = match wire::commit(destination, coordinator, &group, &plan).await {
            Ok(codes) => codes,
            Err(e) => {
                report.errors.push(format!("group {group}: {e}"));
                continue;
            }
        };
        match codes.iter().find(|(_, code)| *code != 0) {
            None => {
                debug!(%group, partitions = plan.len(), "group offsets committed on the destination");
                report.offsets_committed += plan.len() as u64;
                report.in_sync += usize::from(offsets.keys().all(|tp| watermarks.contains_key(tp)));
            }
            Some((_, code)) if BECAME_ACTIVE.contains(code) => {
                info!(%group, "group gained members on the destination during the sync; left alone");
                report.skipped_active.push(group);
            }
            Some(((t, p), code)) => report.errors.push(format!("group {group}: destination OffsetCommit error {code} for {t}-{p}")),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::groups::ListedGroup;

    fn offsets(entries: &[(&str, i32, i64)]) -> GroupOffsets {
        entries.iter().map(|(t, p, o)| (((*t).to_owned(), *p), (*o, Some("m".to_owned())))).collect()
    }

    #[test]
    fn source_commits_of_a_shifted_partition_become_destination_offsets_and_others_stay() {
        let shifts = crate::state::catalog::Catalog::default();
        shifts.set_shifts("t", &[1_000, 0]);
        let mut groups = vec![("g".to_owned(), offsets(&[("t", 0, 1_250), ("t", 1, 40), ("t", 0, 7), ("u", 0, 9)]))];
        groups[0].1.insert(("t".to_owned(), 2), (-1, None));
        shift_to_destination(&mut groups, &shifts, |(o, _)| o);
        let got: Vec<_> = groups[0].1.iter().map(|((t, p), (o, _))| (t.as_str(), *p, *o)).collect();
        // ("t", 0) appears once: the later entry (7) replaced 1,250 in the map — below the shift, it becomes 0.
        assert_eq!(
            got,
            vec![("t", 0, 0), ("t", 1, 40), ("t", 2, -1), ("u", 0, 9)],
            "shifted, unshifted, no offset, other topic"
        );
        let mut one = vec![("g".to_owned(), offsets(&[("t", 0, 1_250)]))];
        shift_to_destination(&mut one, &shifts, |(o, _)| o);
        assert_eq!(one[0].1[&("t".to_owned(), 0)].0, 250, "a commit past the shift moves down by it");
    }

    #[test]
    fn offsets_are_clamped_into_the_destination_log_never_past_its_end() {
        assert_eq!(clamp(50, 0, 100), 50);
        assert_eq!(clamp(150, 0, 100), 100, "not copied yet: the group waits at the destination's end");
        assert_eq!(clamp(5, 20, 100), 20, "below the destination log start");
    }

    #[test]
    fn only_changed_partitions_of_synced_topics_are_planned() {
        let source = offsets(&[("t", 0, 10), ("t", 1, 500), ("other", 0, 3)]);
        let destination = offsets(&[("t", 0, 10)]);
        let wm: HashMap<_, _> = [(("t".to_owned(), 0), (0, 100)), (("t".to_owned(), 1), (0, 100))].into();
        let plan = plan_group(&source, &destination, &wm);
        assert_eq!(
            plan,
            offsets(&[("t", 1, 100)]),
            "t-0 already equal, t-1 clamped to the high watermark, `other` not mirrored"
        );
    }

    #[test]
    fn consumer_groups_are_synced_share_and_connect_groups_are_not() {
        let f = GroupFilter::new(&[".*".into()], &["private-.*".into()]).unwrap();
        let g = |id: &str, ty: &str, proto: &str| ListedGroup {
            id: id.into(),
            group_type: ty.into(),
            protocol_type: proto.into(),
            state: "Empty".into(),
        };
        assert!(f.syncs(&g("app", "classic", "consumer")));
        assert!(f.syncs(&g("app", "consumer", "consumer")));
        assert!(f.syncs(&g("assign-only", "classic", "")));
        assert!(!f.syncs(&g("workers", "classic", "connect")));
        assert!(!f.syncs(&g("sg", "share", "share")));
        assert!(!f.syncs(&g("private-x", "classic", "consumer")), "exclude wins");
        assert!(is_active("Stable") && is_active("reconciling") && !is_active("Empty") && !is_active("Dead"));
    }
}
