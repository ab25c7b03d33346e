//! The Kafka requests group offset sync sends, each against every broker or coordinator it
//! needs: ListGroups on every broker, FindCoordinator (batched), OffsetFetch for many groups
//! per coordinator, OffsetCommit as an admin (no member, no generation) and ListOffsets per
//! partition leader. Deciding what to commit is `sync::groups`' (and `sync::share_groups`'); the
//! election finds its group's coordinator here too.

use std::collections::{BTreeMap, HashMap};

use kmp_protocol::kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kmp_protocol::kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kmp_protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kmp_protocol::kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, GroupId, ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::client::ClusterClient;
use crate::cluster::links::Lane;
use crate::error::MirrorError;

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub id: String,
    /// `classic`, `consumer`, `share`, `streams` (empty from brokers before KIP-848).
    pub group_type: String,
    /// `consumer` for consumer groups, `connect`…, empty for offset-only groups.
    pub protocol_type: String,
    /// `Stable`, `Empty`, `PreparingRebalance`, `Reconciling`, …
    pub state: String,
}

/// A committed offset: `(offset, metadata)`.
pub type Committed = (i64, Option<String>);
/// A group's committed offsets by `(topic, partition)`.
pub type GroupOffsets = BTreeMap<(String, i32), Committed>;
/// Group → its coordinator's `host:port`, or the Kafka error code of the lookup.
pub type Coordinators = HashMap<String, Result<String, i16>>;
/// Groups that could not be handled, with the Kafka error code.
pub type FailedGroups = Vec<(String, i16)>;

/// The engine's shared control connection to broker `addr`: sync passes open no connections of
/// their own, so the engine's connection count per broker stays fixed.
pub(crate) async fn connect(cluster: &ClusterClient, addr: &str) -> Result<SharedConnection, MirrorError> {
    cluster.link(addr, Lane::Control).await
}

/// `node id → host:port` of every broker of the cluster.
pub async fn brokers(cluster: &ClusterClient) -> Result<Vec<(i32, String)>, MirrorError> {
    let conn = cluster.link_any().await?;
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let resp = conn.call(&req, 12).await.map_err(|e| cluster.wrap(e))?;
    Ok(resp.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect())
}

/// Every group of the cluster (ListGroups v5 on every broker: each lists the groups it
/// coordinates).
pub async fn list_groups(cluster: &ClusterClient) -> Result<Vec<ListedGroup>, MirrorError> {
    let mut out = Vec::new();
    for (node, addr) in brokers(cluster).await? {
        let conn = connect(cluster, &addr).await?;
        let resp = conn.call(&ListGroupsRequest::default(), 5).await.map_err(|e| cluster.wrap(e))?;
        if resp.error_code != 0 {
            return Err(MirrorError::Broker {
                side: cluster.side(),
                what: format!("ListGroups on broker {node}"),
                code: resp.error_code,
            });
        }
        out.extend(resp.groups.into_iter().map(|g| ListedGroup {
            id: g.group_id.0.as_str().to_owned(),
            group_type: g.group_type.as_str().to_owned(),
            protocol_type: g.protocol_type.as_str().to_owned(),
            state: g.group_state.as_str().to_owned(),
        }));
    }
    Ok(out)
}

/// Coordinator address of each group, or the Kafka error code for it.
pub async fn coordinators(cluster: &ClusterClient, groups: &[String]) -> Result<Coordinators, MirrorError> {
    if groups.is_empty() {
        return Ok(HashMap::new());
    }
    let mut req = FindCoordinatorRequest::default();
    req.key_type = 0;
    req.coordinator_keys = groups.iter().map(|g| StrBytes::from_string(g.clone())).collect();
    let conn = cluster.link_any().await?;
    let resp = conn.call(&req, 4).await.map_err(|e| cluster.wrap(e))?;
    Ok(resp
        .coordinators
        .into_iter()
        .map(|c| {
            let v = if c.error_code == 0 {
                Ok(format!("{}:{}", c.host.as_str(), c.port))
            } else {
                Err(c.error_code)
            };
            (c.key.as_str().to_owned(), v)
        })
        .collect())
}

/// Groups by coordinator address; groups whose coordinator is unknown come back as errors.
fn by_coordinator(coords: &Coordinators) -> (BTreeMap<String, Vec<String>>, FailedGroups) {
    let (mut by, mut failed) = (BTreeMap::<String, Vec<String>>::new(), Vec::new());
    for (group, c) in coords {
        match c {
            Ok(addr) => by.entry(addr.clone()).or_default().push(group.clone()),
            Err(code) => failed.push((group.clone(), *code)),
        }
    }
    (by, failed)
}

/// Committed offsets of the groups in `coords` (from [`coordinators`]; every topic; OffsetFetch
/// v8, one request per coordinator). Groups that could not be read come back with their Kafka
/// error code.
pub async fn committed_offsets(cluster: &ClusterClient, coords: &Coordinators) -> Result<(HashMap<String, GroupOffsets>, FailedGroups), MirrorError> {
    let (by, mut failed) = by_coordinator(coords);
    let mut out = HashMap::new();
    for (addr, groups) in by {
        let mut req = OffsetFetchRequest::default();
        req.groups = groups
            .iter()
            .map(|g| {
                let mut rg = OffsetFetchRequestGroup::default();
                rg.group_id = GroupId(StrBytes::from_string(g.clone()));
                rg.topics = None; // every topic
                rg
            })
            .collect();
        let conn = connect(cluster, &addr).await?;
        let resp = conn.call(&req, 8).await.map_err(|e| cluster.wrap(e))?;
        for g in resp.groups {
            let id = g.group_id.0.as_str().to_owned();
            if g.error_code != 0 {
                failed.push((id, g.error_code));
                continue;
            }
            let offsets = g
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.as_str(), p)))
                .filter(|(_, p)| p.error_code == 0 && p.committed_offset >= 0)
                .map(|(t, p)| {
                    (
                        (t.to_owned(), p.partition_index),
                        (p.committed_offset, p.metadata.as_ref().map(|m| m.as_str().to_owned())),
                    )
                })
                .collect();
            out.insert(id, offsets);
        }
    }
    Ok((out, failed))
}

/// Commits `offsets` for `group` as an administrator would (generation -1, no member, leader
/// epoch -1 so consumers skip epoch validation against the destination's own epochs). The
/// broker accepts this only while the group has no members. Returns each partition's error code.
pub async fn commit(cluster: &ClusterClient, coordinator: &str, group: &str, offsets: &GroupOffsets) -> Result<Vec<((String, i32), i16)>, MirrorError> {
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), (offset, metadata)) in offsets {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = *partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = -1;
        p.committed_metadata = Some(StrBytes::from_string(metadata.clone().unwrap_or_default()));
        topics.entry(topic.as_str()).or_default().push(p);
    }
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    req.generation_id_or_member_epoch = -1;
    req.member_id = StrBytes::from_static_str("");
    req.topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = TopicName(StrBytes::from_string(name.to_owned()));
            t.partitions = partitions;
            t
        })
        .collect();
    let conn = connect(cluster, coordinator).await?;
    let resp = conn.call(&req, 8).await.map_err(|e| cluster.wrap(e))?;
    Ok(resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| ((t.name.0.as_str().to_owned(), p.partition_index), p.error_code))
        })
        .collect())
}

/// `(log start, high watermark)` of every partition of `topics` (ListOffsets to each leader,
/// all of its partitions in one request per timestamp). Partitions that could not be read are
/// missing from the answer.
pub async fn watermarks(cluster: &ClusterClient, topics: &[String]) -> Result<HashMap<(String, i32), (i64, i64)>, MirrorError> {
    let mut by_leader: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    for t in topics {
        let layout = cluster.layout(t).await?;
        for &(p, leader, _) in &layout.partitions {
            if let Some(addr) = layout.brokers.get(&leader) {
                by_leader.entry(addr.clone()).or_default().push((t.clone(), p));
            }
        }
    }
    let mut out: HashMap<(String, i32), (i64, i64)> = HashMap::new();
    for (addr, parts) in by_leader {
        let conn = connect(cluster, &addr).await?;
        for timestamp in [-2i64, -1] {
            let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
            for (t, p) in &parts {
                let mut lp = ListOffsetsPartition::default();
                lp.partition_index = *p;
                lp.current_leader_epoch = -1;
                lp.timestamp = timestamp;
                topics.entry(t.as_str()).or_default().push(lp);
            }
            let mut req = ListOffsetsRequest::default();
            req.replica_id = BrokerId(-1);
            req.topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    let mut lt = ListOffsetsTopic::default();
                    lt.name = TopicName(StrBytes::from_string(name.to_owned()));
                    lt.partitions = partitions;
                    lt
                })
                .collect();
            let resp = conn.call(&req, 7).await.map_err(|e| cluster.wrap(e))?;
            for t in &resp.topics {
                for p in t.partitions.iter().filter(|p| p.error_code == 0) {
                    let e = out.entry((t.name.0.as_str().to_owned(), p.partition_index)).or_insert((-1, -1));
                    if timestamp == -2 { e.0 = p.offset } else { e.1 = p.offset }
                }
            }
        }
    }
    out.retain(|_, (start, end)| *start >= 0 && *end >= 0);
    Ok(out)
}
