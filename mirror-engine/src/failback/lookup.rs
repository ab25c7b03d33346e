//! Asking the source for the line: a failback's source is the proxy in front of the cluster the
//! topic was failed over to, and it answers DescribeClusterMirrors with the lines its stops
//! recorded (`control::lookup`). The request names this (destination) cluster's id and the
//! destination topic's id and partitions (KIP-1279's `ClusterId` and `LastMirrorEpochLookups`);
//! the answer's `LookupResults` say whether that proxy copied this very topic from this very
//! cluster, and the topic's partition entries carry their state and the proxy's `LastMirror`
//! (offset and epoch). ListClusterMirrors says which of its mirrors copy from this cluster: one
//! that is still copying the topic from here makes starting it here a loop. A plain broker does
//! not know the RPCs: then there is no line to ask for (and no loop to see).

use kmp_protocol::mirror_api::{self as api, DescribeRequest, DescribeResponse, ListResponse};

use crate::cluster::client::{ClusterClient, ENGINE_CLIENT_ID};
use crate::error::MirrorError;

/// One partition's entry on the source proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourcePartition {
    /// The state the source proxy shows (`STOPPED`, `MIRRORING`, ...).
    pub state: String,
    /// The line: the first offset not copied and the epoch of the record before it (-1 none).
    pub offset: i64,
    pub epoch: i32,
}

/// What the source proxy says of the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The source does not answer DescribeClusterMirrors (a broker, not a proxy).
    NotAProxy,
    /// The source proxy has no record of copying this topic from this cluster.
    NotCopiedFromHere,
    /// The source proxy's mirror `mirror` copies this topic from this cluster now (a partition
    /// in `state`, not stopped).
    Loop { mirror: String, state: String },
    /// The source proxy's mirror `mirror` copied this topic from here; its partitions by index
    /// (a partition the lookup found no line for is `None`).
    Copied { mirror: String, partitions: Vec<Option<SourcePartition>> },
}

/// Whether `source` answers the KIP-1279 mirror RPCs (a proxy, not a broker).
pub(crate) async fn source_is_proxy(source: &ClusterClient) -> Result<bool, MirrorError> {
    let mut conn = source.connect_any().await?;
    let versions = conn.api_versions().await.map_err(|e| source.wrap(e))?;
    Ok(answers_lookups(&versions))
}

fn answers_lookups(versions: &[(i16, i16, i16)]) -> bool {
    [api::DESCRIBE_CLUSTER_MIRRORS, api::LIST_CLUSTER_MIRRORS]
        .iter()
        .all(|key| versions.iter().any(|&(k, min, _)| k == *key && min <= 0))
}

/// Asks `source` about `topic` (this cluster's id `cluster_id`, the topic's id here `topic_id`,
/// `partitions` partitions here).
pub(crate) async fn ask(source: &ClusterClient, cluster_id: &str, topic: &str, topic_id: [u8; 16], partitions: usize) -> Result<Lookup, MirrorError> {
    let mut conn = source.connect_any().await?;
    let versions = conn.api_versions().await.map_err(|e| source.wrap(e))?;
    if !answers_lookups(&versions) {
        return Ok(Lookup::NotAProxy);
    }
    let mut list = api::W::default();
    list.bool(true).tags(); // IncludeTopics
    let listed = call(source, &mut conn, api::LIST_CLUSTER_MIRRORS, list, topic, ListResponse::decode, |l| {
        l.error_code
    })
    .await?;
    let asked: Vec<i32> = (0..partitions as i32).collect();
    let req = DescribeRequest {
        mirror_names: Vec::new(),
        include_authorized_operations: false,
        cluster_id: Some(cluster_id.to_owned()),
        epoch_lookups: vec![(topic_id, asked)],
    };
    let resp = call(
        source,
        &mut conn,
        api::DESCRIBE_CLUSTER_MIRRORS,
        req.encode(),
        topic,
        DescribeResponse::decode,
        |d| d.error_code,
    )
    .await?;
    Ok(read(&listed, &resp, cluster_id, topic, topic_id, partitions))
}

/// One mirror RPC `key` on `conn` (to `source`, looking up `topic`): its answer decoded, or the
/// top-level error it carries.
async fn call<T>(
    source: &ClusterClient,
    conn: &mut kmp_protocol::client::Connection,
    key: i16,
    body: api::W,
    topic: &str,
    decode: fn(&mut api::R<'_>) -> Result<T, kmp_protocol::ProtocolError>,
    error_code: fn(&T) -> i16,
) -> Result<T, MirrorError> {
    // One request of each key per connection: the key tells the answers apart.
    let frame = api::request_frame(key, i32::from(key), ENGINE_CLIENT_ID, body);
    let answer = conn.round_trip_raw(&frame).await.map_err(|e| source.wrap(e))?;
    let (_, mut r) = api::read_response(&answer).map_err(|e| source.wrap(e))?;
    let decoded = decode(&mut r).map_err(|e| source.wrap(e))?;
    match error_code(&decoded) {
        0 => Ok(decoded),
        code => Err(MirrorError::Broker {
            side: "source",
            what: format!("{} (the failback lookup of {topic})", api::api_name(key).unwrap_or("a mirror RPC")),
            code,
        }),
    }
}

/// The [`Lookup`] the answers give.
pub(crate) fn read(listed: &ListResponse, resp: &DescribeResponse, cluster_id: &str, topic: &str, topic_id: [u8; 16], partitions: usize) -> Lookup {
    // A mirror there that copies from here and holds the topic: unless every partition of it
    // is stopped there, mirroring it back makes a loop.
    for m in listed
        .mirrors
        .iter()
        .filter(|m| m.source_cluster_id == cluster_id && m.topic_names.iter().any(|t| t == topic))
    {
        let parts = resp
            .mirrors
            .iter()
            .filter(|d| d.mirror_name == m.mirror_name)
            .flat_map(|d| d.topics.iter().filter(|(t, _)| t == topic).flat_map(|(_, parts)| parts.iter()));
        let mut seen = false;
        for p in parts {
            seen = true;
            if p.state_value != "STOPPED" {
                return Lookup::Loop {
                    mirror: m.mirror_name.clone(),
                    state: p.state_value.clone(),
                };
            }
        }
        if !seen {
            return Lookup::Loop {
                mirror: m.mirror_name.clone(),
                state: "PREPARING".into(),
            };
        }
    }
    let epochs: Vec<(i32, i32)> = resp
        .lookup_results
        .iter()
        .filter(|(id, _)| *id == topic_id)
        .flat_map(|(_, parts)| parts.iter().copied())
        .collect();
    if !epochs.iter().any(|&(_, e)| e >= 0) {
        return Lookup::NotCopiedFromHere;
    }
    // The topic's entries on the source proxy (one mirror holds a destination topic).
    let Some((mirror, parts)) = resp
        .mirrors
        .iter()
        .find_map(|m| m.topics.iter().find(|(t, _)| t == topic).map(|(_, parts)| (m.mirror_name.clone(), parts)))
    else {
        return Lookup::NotCopiedFromHere;
    };
    let mut out = vec![None; partitions];
    for p in parts {
        let (Ok(i), Some(line)) = (usize::try_from(p.partition_index), p.last_mirror.as_ref()) else {
            continue;
        };
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(SourcePartition {
                state: p.state_value.clone(),
                offset: line.offset,
                epoch: line.epoch,
            });
        }
    }
    Lookup::Copied { mirror, partitions: out }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::mirror_api::{DescribedMirror, LastMirror, ListedMirror, PartitionDetail};

    fn answer(epochs: Vec<(i32, i32)>, entries: Vec<(i32, &str, i64, i32)>) -> DescribeResponse {
        DescribeResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "there".into(),
                topics: vec![(
                    "t".into(),
                    entries
                        .into_iter()
                        .map(|(p, state, offset, epoch)| PartitionDetail {
                            partition_index: p,
                            state_value: state.into(),
                            last_mirror: Some(LastMirror { epoch, offset }),
                            ..Default::default()
                        })
                        .collect(),
                )],
                ..Default::default()
            }],
            lookup_results: vec![([7; 16], epochs)],
            ..Default::default()
        }
    }

    fn listed(cluster: &str, topics: &[&str]) -> ListResponse {
        ListResponse {
            mirrors: vec![ListedMirror {
                mirror_name: "there".into(),
                source_cluster_id: cluster.into(),
                topic_names: topics.iter().map(|t| (*t).to_owned()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_topic_copied_from_here_gives_each_partitions_state_and_line() {
        let resp = answer(vec![(0, 3), (1, 5)], vec![(0, "STOPPED", 40, 3), (1, "STOPPED", 12, 5)]);
        let Lookup::Copied { mirror, partitions } = read(&listed("here", &["t"]), &resp, "here", "t", [7; 16], 3) else {
            panic!("copied from here");
        };
        assert_eq!(mirror, "there");
        assert_eq!(partitions[0].as_ref().map(|p| (p.offset, p.epoch)), Some((40, 3)));
        assert_eq!(partitions[1].as_ref().map(|p| p.state.as_str()), Some("STOPPED"));
        assert_eq!(partitions[2], None, "a partition the source never had has no line");
    }

    #[test]
    fn lookups_that_find_nothing_or_another_topic_id_are_not_a_failback() {
        let l = listed("here", &["t"]);
        let none = answer(vec![(0, -1)], vec![(0, "STOPPED", 40, 3)]);
        assert_eq!(read(&l, &none, "here", "t", [7; 16], 1), Lookup::NotCopiedFromHere);
        let found = answer(vec![(0, 3)], vec![(0, "STOPPED", 40, 3)]);
        assert_eq!(read(&l, &found, "here", "t", [8; 16], 1), Lookup::NotCopiedFromHere, "another topic id");
        assert_eq!(
            read(&l, &found, "here", "u", [7; 16], 1),
            Lookup::NotCopiedFromHere,
            "no entry for the topic's name"
        );
    }

    #[test]
    fn a_topic_the_source_still_copies_from_here_is_a_loop_whatever_its_lines_say() {
        let copying = answer(vec![(0, -1)], vec![(0, "STOPPED", 0, -1), (1, "MIRRORING", 0, -1)]);
        let loop_ = Lookup::Loop {
            mirror: "there".into(),
            state: "MIRRORING".into(),
        };
        assert_eq!(read(&listed("here", &["t"]), &copying, "here", "t", [7; 16], 2), loop_);
        let preparing = DescribeResponse::default();
        assert!(
            matches!(read(&listed("here", &["t"]), &preparing, "here", "t", [7; 16], 2), Lookup::Loop { .. }),
            "no entries yet"
        );
        assert_eq!(
            read(&listed("elsewhere", &["t"]), &copying, "here", "t", [7; 16], 2),
            Lookup::NotCopiedFromHere,
            "a mirror copying from another cluster is no loop"
        );
    }
}
