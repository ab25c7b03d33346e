//! Share-group offset sync, one pass for one mirror (KIP-932 share groups, KIP-1279 §6): the
//! share-partition start offset of every source share group (picked by the mirror's group
//! patterns) on the given mirror topics is set on the destination with AlterShareGroupOffsets,
//! clamped like consumer offsets, for share groups with no members there (the broker refuses
//! others with GROUP_NOT_EMPTY). Only the start offset travels: records past it that the source
//! group had already acknowledged are delivered again on the destination (share groups are
//! at-least-once). Skipped when the source has no share groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kmp_config::MirrorConfig;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::alter_share_group_offsets_request::{AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic};
use kmp_protocol::kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kmp_protocol::kafka_protocol::messages::{AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, GroupId, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::groups::{GroupReport, clamp, is_active, on_topics, topics_of};
use crate::cluster::client::ClusterClient;
use crate::cluster::groups::{self as wire, Coordinators};
use crate::error::MirrorError;
use crate::topics::select::GroupFilter;

/// A share group's start offsets by `(topic, partition)`.
type StartOffsets = BTreeMap<(String, i32), i64>;

/// AlterShareGroupOffsets errors meaning the group has members on the destination.
const GROUP_NOT_EMPTY: i16 = ResponseError::NonEmptyGroup.code();

/// Start offsets of the share groups in `coords` (DescribeShareGroupOffsets v0 per coordinator,
/// every topic); partitions without a start offset yet are left out.
async fn start_offsets(cluster: &ClusterClient, coords: &Coordinators) -> Result<(HashMap<String, StartOffsets>, Vec<String>), MirrorError> {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (g, c) in coords {
        match c {
            Ok(addr) => by.entry(addr.as_str()).or_default().push(g.as_str()),
            Err(code) => errors.push(format!("share group {g}: {} FindCoordinator error {code}", cluster.side())),
        }
    }
    let mut out = HashMap::new();
    for (addr, groups) in by {
        let mut req = DescribeShareGroupOffsetsRequest::default();
        req.groups = groups
            .iter()
            .map(|g| {
                let mut rg = DescribeShareGroupOffsetsRequestGroup::default();
                rg.group_id = GroupId(StrBytes::from_string((*g).to_owned()));
                rg.topics = None; // every topic
                rg
            })
            .collect();
        let conn = wire::connect(cluster, addr).await?;
        let resp = conn.call(&req, 0).await.map_err(|e| cluster.wrap(e))?;
        for g in resp.groups {
            let id = g.group_id.0.as_str().to_owned();
            if g.error_code != 0 {
                errors.push(format!("share group {id}: {} DescribeShareGroupOffsets error {}", cluster.side(), g.error_code));
                continue;
            }
            let offsets = g
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_name.0.as_str(), p)))
                .filter(|(_, p)| p.error_code == 0 && p.start_offset >= 0)
                .map(|(t, p)| ((t.to_owned(), p.partition_index), p.start_offset))
                .collect();
            out.insert(id, offsets);
        }
    }
    Ok((out, errors))
}

/// AlterShareGroupOffsets v0 for one group; the first non-zero error code, if any.
async fn alter(cluster: &ClusterClient, coordinator: &str, group: &str, offsets: &StartOffsets) -> Result<Option<i16>, MirrorError> {
    let mut topics: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
    for ((t, p), offset) in offsets {
        let mut rp = AlterShareGroupOffsetsRequestPartition::default();
        rp.partition_index = *p;
        rp.start_offset = *offset;
        topics.entry(t.as_str()).or_default().push(rp);
    }
    let mut req = AlterShareGroupOffsetsRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    req.topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            let mut rt = AlterShareGroupOffsetsRequestTopic::default();
            rt.topic_name = TopicName(StrBytes::from_string(name.to_owned()));
            rt.partitions = partitions;
            rt
        })
        .collect();
    let conn = wire::connect(cluster, coordinator).await?;
    let resp = conn.call(&req, 0).await.map_err(|e| cluster.wrap(e))?;
    if resp.error_code != 0 {
        return Ok(Some(resp.error_code));
    }
    Ok(resp.responses.iter().flat_map(|t| t.partitions.iter()).map(|p| p.error_code).find(|c| *c != 0))
}

/// One pass over `topics` of mirror `def` (`shifts`: their offset shifts, as for consumer groups).
pub async fn sync(
    source: &ClusterClient,
    destination: &ClusterClient,
    def: &MirrorConfig,
    topics: &[String],
    shifts: &crate::state::catalog::Catalog,
) -> Result<GroupReport, MirrorError> {
    let mut report = GroupReport::default();
    let filter = GroupFilter::new(&def.groups_include, &def.groups_exclude)?;
    if topics.is_empty() {
        return Ok(report);
    }
    let candidates: Vec<String> = wire::list_groups(source)
        .await?
        .into_iter()
        .filter(|g| g.group_type == "share" && filter.matches(&g.id))
        .map(|g| g.id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if candidates.is_empty() {
        return Ok(report); // no share groups on the source (or share groups not enabled there)
    }
    let (source_offsets, errors) = start_offsets(source, &wire::coordinators(source, &candidates).await?).await?;
    report.errors.extend(errors);
    let mut relevant = on_topics(source_offsets, topics);
    super::groups::shift_to_destination(&mut relevant, shifts, |offset| offset);
    report.groups = relevant.len();
    if relevant.is_empty() {
        return Ok(report);
    }
    let states: HashMap<String, (String, String)> = wire::list_groups(destination)
        .await?
        .into_iter()
        .map(|g| (g.id, (g.group_type, g.state)))
        .collect();
    let names: Vec<String> = relevant.iter().map(|(g, _)| g.clone()).collect();
    let coords = wire::coordinators(destination, &names).await?;
    let (current, _) = start_offsets(destination, &coords).await?;
    let touched = topics_of(&relevant);
    let watermarks = wire::watermarks(destination, &touched).await?;
    for (group, offsets) in relevant {
        match states.get(&group) {
            Some((_, state)) if is_active(state) => {
                report.skipped_active.push(group);
                continue;
            }
            Some((ty, _)) if ty != "share" => {
                report
                    .errors
                    .push(format!("share group {group}: a {ty} group of that name exists on the destination"));
                continue;
            }
            _ => {}
        }
        let have = current.get(&group);
        let plan: StartOffsets = offsets
            .iter()
            .filter_map(|(tp, offset)| {
                let &(log_start, high_watermark) = watermarks.get(tp)?;
                let target = clamp(*offset, log_start, high_watermark);
                (have.and_then(|h| h.get(tp)) != Some(&target)).then(|| (tp.clone(), target))
            })
            .collect();
        if plan.is_empty() {
            report.in_sync += 1;
            continue;
        }
        let Some(Ok(coordinator)) = coords.get(&group) else { continue };
        match alter(destination, coordinator, &group, &plan).await {
            Ok(None) => {
                debug!(%group, partitions = plan.len(), "share group start offsets set on the destination");
                report.offsets_committed += plan.len() as u64;
                report.in_sync += 1;
            }
            Ok(Some(GROUP_NOT_EMPTY)) => report.skipped_active.push(group),
            Ok(Some(code)) => report
                .errors
                .push(format!("share group {group}: destination AlterShareGroupOffsets error {code}")),
            Err(e) => report
                .errors
                .push(format!("share group {group}: {e} (does the destination support share groups?)")),
        }
    }
    Ok(report)
}
