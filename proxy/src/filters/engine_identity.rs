//! The engine's own identities on the destination are refused to clients. Its HA election group
//! (`engine.group_id`, by default `kmp-engine.<state topic>`; every group named `kmp-engine.…`,
//! which is how every instance names its group by default, and every JoinGroup of protocol type
//! `kmp-mirror-engine`) is refused for every group API on the client port: FindCoordinator for
//! it, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, DeleteGroups, OffsetCommit,
//! OffsetFetch, OffsetDelete, AddOffsetsToTxn, TxnOffsetCommit, ConsumerGroupHeartbeat,
//! ConsumerGroupDescribe, ShareGroupHeartbeat, ShareGroupDescribe and the share-group offset
//! APIs get GROUP_AUTHORIZATION_FAILED (30) for it, and ListGroups answers do not list it. A
//! client that could join the group could make itself the active engine, or make the real
//! instances take over from each other, by leaving them from the group, as often as it likes.
//! (ShareFetch and ShareAcknowledge name a share group too, but a share group of that id can only
//! come from ShareGroupHeartbeat, which is refused.)
//!
//! Requests naming several groups (DescribeGroups, DeleteGroups, OffsetFetch v8+,
//! FindCoordinator v4+, the Describe APIs of the new protocols) lose only the engine's groups;
//! the rest goes to the broker and both answers are merged.
//!
//! AlterClientQuotas entries whose entity names the engine's or the proxy's client id
//! (`kafka-mirror-proxy-engine`, `kafka-mirror-proxy-election`, `kafka-mirror-proxy`) or the
//! user the proxy authenticates to the destination as (`upstream.properties` `sasl.username`)
//! get POLICY_VIOLATION (44): a quota there throttles mirroring for everybody. Other entries
//! (and DescribeClientQuotas) go to the broker.
//!
//! Cost: a group request is decoded only when its raw bytes contain an engine group's name (or,
//! for JoinGroup, the protocol type), found by a SIMD substring search after the API key said it
//! is a group API; ordinary group traffic stays raw. ListGroups answers are decoded only when they
//! contain one.

use std::collections::HashSet;
use std::hash::Hash;

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AlterClientQuotasRequest, AlterClientQuotasResponse, AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse, ApiKey, BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, DeleteGroupsRequest, DeleteGroupsResponse, DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestHeader, ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, SyncGroupRequest,
    SyncGroupResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse, alter_client_quotas_response, consumer_group_describe_response, delete_groups_response,
    describe_groups_response, describe_share_group_offsets_response, find_coordinator_response, offset_commit_response, offset_fetch_response,
    share_group_describe_response, txn_offset_commit_response,
};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use memchr::memmem;

use super::guard::Decision;
use super::{BoxFuture, Conn, Exchange, Filter, Flow, Merge};
use crate::error::ProxyError;

/// How every instance names its election group unless `engine.group_id` says otherwise.
const GROUP_PREFIX: &str = "kmp-engine.";
/// The client id of the proxy's own connections to the destination (metadata refreshes).
pub(crate) const PROXY_CLIENT_ID: &str = "kafka-mirror-proxy";
/// Client ids a quota must not name: the engine's, the election's and the proxy's.
const CLIENT_IDS: [&str; 3] = [kmp_mirror_engine::ENGINE_CLIENT_ID, kmp_mirror_engine::ELECTION_CLIENT_ID, PROXY_CLIENT_ID];
/// Key type of a group in FindCoordinator.
const GROUP_KEY: i8 = 0;

fn group_refused() -> i16 {
    ResponseError::GroupAuthorizationFailed.code()
}

fn quota_refused() -> i16 {
    ResponseError::PolicyViolation.code()
}

/// What this proxy protects: the configured election group and the quota users.
pub(crate) struct Protected {
    /// `engine.group_id` as the engine uses it.
    group: String,
    /// The user names the proxy (and engine) authenticate to the destination as.
    users: Vec<String>,
}

impl Protected {
    fn of(conn: &Conn) -> Self {
        let users = conn
            .shared
            .config
            .upstream
            .properties
            .parse(kmp_config::PropsOrigin::ConfigFile)
            .ok()
            .and_then(|p| p.sasl)
            .map(|s| vec![s.username])
            .unwrap_or_default();
        Self {
            group: conn.shared.config.engine.effective_group_id(),
            users,
        }
    }

    fn is_engine_group(&self, group: &str) -> bool {
        group == self.group || group.starts_with(GROUP_PREFIX)
    }

    /// Whether an entity component (`entity_type`, `entity_name`) of a quota names the proxy.
    fn quota_entity(&self, kind: &str, name: &str) -> bool {
        match kind {
            "client-id" => CLIENT_IDS.contains(&name),
            "user" => self.users.iter().any(|u| u == name),
            _ => false,
        }
    }
}

/// The message of every refused group (one static buffer however many groups are refused).
fn group_text() -> StrBytes {
    StrBytes::from_static_str("this group is kafka-mirror-proxy's engine election group; clients may not join, read or change it")
}

/// The message of every refused quota entry.
fn quota_text() -> StrBytes {
    StrBytes::from_static_str(
        "this quota entity names kafka-mirror-proxy's own identity on the destination (its client ids or its user); a quota on it would throttle mirroring, so the proxy refuses it",
    )
}

/// Whether `frame` may name an engine group, `configured` being `engine.group_id` as written
/// (empty: the default, which starts with [`GROUP_PREFIX`]), or (`protocol`) the election's
/// protocol type. Allocation-free.
fn may_name_group(frame: &[u8], configured: &str, protocol: bool) -> bool {
    memmem::find(frame, GROUP_PREFIX.as_bytes()).is_some()
        || (!configured.is_empty() && memmem::find(frame, configured.as_bytes()).is_some())
        || (protocol && memmem::find(frame, kmp_mirror_engine::ELECTION_PROTOCOL_TYPE.as_bytes()).is_some())
}

/// Whether `key` is a request naming groups that this filter looks at.
fn group_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::SyncGroup
            | ApiKey::DescribeGroups
            | ApiKey::AddOffsetsToTxn
            | ApiKey::TxnOffsetCommit
            | ApiKey::DeleteGroups
            | ApiKey::OffsetDelete
            | ApiKey::ConsumerGroupHeartbeat
            | ApiKey::ConsumerGroupDescribe
            | ApiKey::ShareGroupHeartbeat
            | ApiKey::ShareGroupDescribe
            | ApiKey::DescribeShareGroupOffsets
            | ApiKey::AlterShareGroupOffsets
            | ApiKey::DeleteShareGroupOffsets
    )
}

/// The guard of the engine's identities.
pub(crate) struct EngineIdentityGuard;

impl Filter for EngineIdentityGuard {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        match ApiKey::try_from(x.api_key) {
            Ok(ApiKey::AlterClientQuotas) => true,
            Ok(k) if group_api(k) => may_name_group(&x.frame, &conn.shared.config.engine.group_id, k == ApiKey::JoinGroup),
            _ => false,
        }
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let decision = check(&x.frame, x.api_key, x.api_version, &Protected::of(conn))?;
            super::mirror_topics::apply(decision, x, |n| conn.shared.metrics.refused("engine_identity", n))
        })
    }

    fn wants_response(&self, api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        api_key == ApiKey::ListGroups as i16
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        if api_key != ApiKey::ListGroups as i16 {
            return Ok(frame);
        }
        if !may_name_group(&frame, &conn.shared.config.engine.group_id, true) {
            return Ok(frame);
        }
        let protected = Protected {
            group: conn.shared.config.engine.effective_group_id(),
            users: Vec::new(),
        };
        unlisted(frame, api_version, &protected)
    }
}

/// A ListGroups answer without the engine's groups (the frame itself when it lists none).
fn unlisted(frame: Bytes, version: i16, who: &Protected) -> Result<Bytes, ProtocolError> {
    let (h, mut resp) = decode_response::<ListGroupsResponse>(&frame, ApiKey::ListGroups, version)?;
    let before = resp.groups.len();
    resp.groups
        .retain(|g| !who.is_engine_group(g.group_id.as_str()) && g.protocol_type.as_str() != kmp_mirror_engine::ELECTION_PROTOCOL_TYPE);
    if resp.groups.len() == before {
        return Ok(frame);
    }
    encode_response(h.correlation_id, ApiKey::ListGroups, version, &resp)
}

/// Decides one request the predicate let through.
fn check(frame: &Bytes, api_key: i16, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(Decision::Forward);
    };
    let ours = |g: &GroupId| who.is_engine_group(g.as_str());
    let code = group_refused();
    let text = group_text();
    match key {
        ApiKey::AlterClientQuotas => quotas(frame, version, who),
        ApiKey::FindCoordinator => find_coordinator(frame, version, who),
        ApiKey::OffsetFetch if version >= 8 => split_items::<OffsetFetchRequest, OffsetFetchResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.groups, |g| ours(&g.group_id).then(|| g.group_id.clone())),
            |req| req.groups.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = offset_fetch_response::OffsetFetchResponseGroup::default();
                    r.group_id = g;
                    r.error_code = code;
                    resp.groups.push(r);
                }
            },
        ),
        ApiKey::OffsetFetch => refuse_one::<OffsetFetchRequest, OffsetFetchResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |req, resp| {
                if version >= 2 {
                    resp.error_code = code;
                    return;
                }
                // v1 has no top-level error: each partition asked for carries it.
                for t in req.topics.iter().flatten() {
                    let mut rt = offset_fetch_response::OffsetFetchResponseTopic::default();
                    rt.name = t.name.clone();
                    for &p in &t.partition_indexes {
                        let mut rp = offset_fetch_response::OffsetFetchResponsePartition::default();
                        rp.partition_index = p;
                        rp.committed_offset = -1;
                        rp.error_code = code;
                        rt.partitions.push(rp);
                    }
                    resp.topics.push(rt);
                }
            },
        ),
        ApiKey::DescribeGroups => split_items::<DescribeGroupsRequest, DescribeGroupsResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.groups, |g| ours(g).then(|| g.clone())),
            |req| req.groups.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = describe_groups_response::DescribedGroup::default();
                    if version >= 6 {
                        r.error_message = Some(text.clone());
                    }
                    r.group_id = g;
                    r.error_code = code;
                    resp.groups.push(r);
                }
            },
        ),
        ApiKey::DeleteGroups => split_items::<DeleteGroupsRequest, DeleteGroupsResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.groups_names, |g| ours(g).then(|| g.clone())),
            |req| req.groups_names.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = delete_groups_response::DeletableGroupResult::default();
                    r.group_id = g;
                    r.error_code = code;
                    resp.results.push(r);
                }
            },
        ),
        ApiKey::ConsumerGroupDescribe => split_items::<ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.group_ids, |g| ours(g).then(|| g.clone())),
            |req| req.group_ids.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = consumer_group_describe_response::DescribedGroup::default();
                    r.error_message = Some(text.clone());
                    r.group_id = g;
                    r.error_code = code;
                    resp.groups.push(r);
                }
            },
        ),
        ApiKey::ShareGroupDescribe => split_items::<ShareGroupDescribeRequest, ShareGroupDescribeResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.group_ids, |g| ours(g).then(|| g.clone())),
            |req| req.group_ids.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = share_group_describe_response::DescribedGroup::default();
                    r.error_message = Some(text.clone());
                    r.group_id = g;
                    r.error_code = code;
                    resp.groups.push(r);
                }
            },
        ),
        ApiKey::DescribeShareGroupOffsets => split_items::<DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, GroupId>(
            frame,
            key,
            version,
            |req| take_distinct(&mut req.groups, |g| ours(&g.group_id).then(|| g.group_id.clone())),
            |req| req.groups.len(),
            move |resp, refused| {
                for g in refused {
                    let mut r = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default();
                    r.error_message = Some(text.clone());
                    r.group_id = g;
                    r.error_code = code;
                    resp.groups.push(r);
                }
            },
        ),
        ApiKey::JoinGroup => refuse_one::<JoinGroupRequest, JoinGroupResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id) || r.protocol_type.as_str() == kmp_mirror_engine::ELECTION_PROTOCOL_TYPE,
            |_, resp| {
                resp.error_code = code;
                resp.generation_id = -1;
            },
        ),
        ApiKey::SyncGroup => refuse_one::<SyncGroupRequest, SyncGroupResponse>(frame, key, version, |r| ours(&r.group_id), |_, resp| resp.error_code = code),
        ApiKey::Heartbeat => refuse_one::<HeartbeatRequest, HeartbeatResponse>(frame, key, version, |r| ours(&r.group_id), |_, resp| resp.error_code = code),
        ApiKey::LeaveGroup => refuse_one::<LeaveGroupRequest, LeaveGroupResponse>(frame, key, version, |r| ours(&r.group_id), |_, resp| resp.error_code = code),
        ApiKey::OffsetDelete => {
            refuse_one::<OffsetDeleteRequest, OffsetDeleteResponse>(frame, key, version, |r| ours(&r.group_id), |_, resp| resp.error_code = code)
        }
        ApiKey::AddOffsetsToTxn => {
            refuse_one::<AddOffsetsToTxnRequest, AddOffsetsToTxnResponse>(frame, key, version, |r| ours(&r.group_id), |_, resp| resp.error_code = code)
        }
        ApiKey::OffsetCommit => refuse_one::<OffsetCommitRequest, OffsetCommitResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |req, resp| {
                for t in &req.topics {
                    let mut rt = offset_commit_response::OffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.topic_id = t.topic_id;
                    rt.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp = offset_commit_response::OffsetCommitResponsePartition::default();
                            rp.partition_index = p.partition_index;
                            rp.error_code = code;
                            rp
                        })
                        .collect();
                    resp.topics.push(rt);
                }
            },
        ),
        ApiKey::TxnOffsetCommit => refuse_one::<TxnOffsetCommitRequest, TxnOffsetCommitResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |req, resp| {
                for t in &req.topics {
                    let mut rt = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                            rp.partition_index = p.partition_index;
                            rp.error_code = code;
                            rp
                        })
                        .collect();
                    resp.topics.push(rt);
                }
            },
        ),
        ApiKey::ConsumerGroupHeartbeat => refuse_one::<ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |_, resp| {
                resp.error_code = code;
                resp.error_message = Some(group_text());
            },
        ),
        ApiKey::ShareGroupHeartbeat => refuse_one::<ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |_, resp| {
                resp.error_code = code;
                resp.error_message = Some(group_text());
            },
        ),
        ApiKey::AlterShareGroupOffsets => refuse_one::<AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |_, resp| {
                resp.error_code = code;
                resp.error_message = Some(group_text());
            },
        ),
        ApiKey::DeleteShareGroupOffsets => refuse_one::<DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse>(
            frame,
            key,
            version,
            |r| ours(&r.group_id),
            |_, resp| {
                resp.error_code = code;
                resp.error_message = Some(group_text());
            },
        ),
        _ => Ok(Decision::Forward),
    }
}

/// FindCoordinator of an engine group: v0-3 (one key) refused whole, v4+ (several keys) loses
/// the engine's keys and merges their refusal into the broker's answer.
fn find_coordinator(frame: &Bytes, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    let key = ApiKey::FindCoordinator;
    let code = group_refused();
    let text = group_text();
    if version < 4 {
        return refuse_one::<FindCoordinatorRequest, FindCoordinatorResponse>(
            frame,
            key,
            version,
            |r| r.key_type == GROUP_KEY && who.is_engine_group(&r.key),
            |_, resp| {
                resp.error_code = code;
                resp.node_id = BrokerId(-1);
                resp.port = -1;
                if version >= 1 {
                    resp.error_message = Some(group_text());
                }
            },
        );
    }
    split_items::<FindCoordinatorRequest, FindCoordinatorResponse, StrBytes>(
        frame,
        key,
        version,
        |req| {
            if req.key_type != GROUP_KEY {
                return Vec::new();
            }
            take_distinct(&mut req.coordinator_keys, |k| who.is_engine_group(k).then(|| k.clone()))
        },
        |req| req.coordinator_keys.len(),
        move |resp, refused| {
            for k in refused {
                let mut c = find_coordinator_response::Coordinator::default();
                c.error_message = Some(text.clone());
                c.key = k;
                c.node_id = BrokerId(-1);
                c.port = -1;
                c.error_code = code;
                resp.coordinators.push(c);
            }
        },
    )
}

/// AlterClientQuotas: the entries naming the proxy's identities are refused, the others go to
/// the broker.
fn quotas(frame: &Bytes, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    let code = quota_refused();
    let text = quota_text();
    split_items::<AlterClientQuotasRequest, AlterClientQuotasResponse, Vec<alter_client_quotas_response::EntityData>>(
        frame,
        ApiKey::AlterClientQuotas,
        version,
        |req| {
            let mut refused = Vec::new();
            req.entries.retain(|e| {
                let ours = e
                    .entity
                    .iter()
                    .any(|c| who.quota_entity(c.entity_type.as_str(), c.entity_name.as_ref().map_or("", |n| n.as_str())));
                if ours {
                    refused.push(
                        e.entity
                            .iter()
                            .map(|c| {
                                let mut d = alter_client_quotas_response::EntityData::default();
                                d.entity_type = c.entity_type.clone();
                                d.entity_name = c.entity_name.clone();
                                d
                            })
                            .collect(),
                    );
                }
                !ours
            });
            refused
        },
        |req| req.entries.len(),
        move |resp, refused| {
            for entity in refused {
                let mut r = alter_client_quotas_response::EntryData::default();
                r.error_code = code;
                r.error_message = Some(text.clone());
                r.entity = entity;
                resp.entries.push(r);
            }
        },
    )
}

/// Removes the items `ours` picks and returns what it said of each distinct one, once: a request
/// naming one group a million times gets one refusal, so the answer stays smaller than the
/// request.
fn take_distinct<T, K: Eq + Hash + Clone>(items: &mut Vec<T>, ours: impl Fn(&T) -> Option<K>) -> Vec<K> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    items.retain(|i| match ours(i) {
        Some(k) => {
            if seen.insert(k.clone()) {
                out.push(k);
            }
            false
        }
        None => true,
    });
    out
}

/// A request naming one group: refused whole (with the answer `fill` makes) when `ours` says
/// the group is the engine's, else forwarded untouched.
fn refuse_one<Req, Resp>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    ours: impl FnOnce(&Req) -> bool,
    fill: impl FnOnce(&Req, &mut Resp),
) -> Result<Decision, ProtocolError>
where
    Req: Decodable,
    Resp: Encodable + Default,
{
    let (header, req): (RequestHeader, Req) = decode_request(frame, key, version)?;
    if !ours(&req) {
        return Ok(Decision::Forward);
    }
    let mut resp = Resp::default();
    fill(&req, &mut resp);
    Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, 1))
}

/// A request naming several items: `take_ours` removes the engine's (returning what the answer
/// needs of each); none: forwarded untouched; all: answered by `add` alone; some: the rest is
/// forwarded and `add` merges the refusals into the broker's answer.
fn split_items<Req, Resp, R>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    take_ours: impl FnOnce(&mut Req) -> Vec<R>,
    remaining: impl FnOnce(&Req) -> usize,
    add: impl FnOnce(&mut Resp, Vec<R>) + Send + 'static,
) -> Result<Decision, ProtocolError>
where
    Req: Decodable + Encodable,
    Resp: Decodable + Encodable + Default,
    R: Send + 'static,
{
    let (header, mut req): (RequestHeader, Req) = decode_request(frame, key, version)?;
    let refused = take_ours(&mut req);
    if refused.is_empty() {
        return Ok(Decision::Forward);
    }
    let n = refused.len() as u64;
    if remaining(&req) == 0 {
        let mut resp = Resp::default();
        add(&mut resp, refused);
        return Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, n));
    }
    let rest = encode_request(&header, key, &req)?;
    let merge: Merge = Box::new(move |broker: Bytes| {
        let (h, mut resp): (_, Resp) = decode_response(&broker, key, version)?;
        add(&mut resp, refused);
        encode_response(h.correlation_id, key, version, &resp)
    });
    Ok(Decision::Split(rest, merge, n))
}

#[cfg(test)]
#[path = "engine_identity_tests.rs"]
mod tests;
