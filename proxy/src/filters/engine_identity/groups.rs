//! The engine's election groups in the group APIs: which APIs name groups ([`group_api`]), the
//! refusal of a request naming an engine group ([`check`]: GROUP_AUTHORIZATION_FAILED, the whole
//! request when it names one group, else only the engine's groups, merged into the broker's answer
//! to the others) and ListGroups answers without them ([`unlisted`]).

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_response, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey, BrokerId,
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, SyncGroupRequest, SyncGroupResponse, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse, consumer_group_describe_response, delete_groups_response, describe_groups_response, describe_share_group_offsets_response,
    find_coordinator_response, offset_commit_response, offset_fetch_response, share_group_describe_response, txn_offset_commit_response,
};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::Protected;
use crate::filters::refuse::text::{Shown, take_refused};
use crate::filters::refuse::{Decision, refuse_whole, split_by};

/// Key type of a group in FindCoordinator.
const GROUP_KEY: i8 = 0;

fn group_refused() -> i16 {
    ResponseError::GroupAuthorizationFailed.code()
}

/// The message of every refused group (one static buffer however many groups are refused).
fn group_text() -> StrBytes {
    StrBytes::from_static_str("this group is kafka-mirror-proxy's engine election group; clients may not join, read or change it")
}

/// Whether `key` is a request naming groups that this filter looks at.
pub(super) fn group_api(key: ApiKey) -> bool {
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

/// A ListGroups answer without the engine's groups (the frame itself when it lists none).
pub(super) fn unlisted(frame: Bytes, version: i16, who: &Protected) -> Result<Bytes, ProtocolError> {
    let (h, mut resp) = decode_response::<ListGroupsResponse>(&frame, ApiKey::ListGroups, version)?;
    let before = resp.groups.len();
    resp.groups
        .retain(|g| !who.is_engine_group(g.group_id.as_str()) && g.protocol_type.as_str() != kmp_mirror_engine::ELECTION_PROTOCOL_TYPE);
    if resp.groups.len() == before {
        return Ok(frame);
    }
    encode_response(h.correlation_id, ApiKey::ListGroups, version, &resp)
}

/// One group request to decide.
struct Ask<'a> {
    frame: &'a Bytes,
    key: ApiKey,
    version: i16,
    who: &'a Protected,
}

impl Ask<'_> {
    fn ours(&self, group: &GroupId) -> bool {
        self.who.is_engine_group(group.as_str())
    }
}

/// A request naming one group in `group_id`: refused whole when it is an engine group, the answer
/// carrying GROUP_AUTHORIZATION_FAILED (and the message in the field named last, if any).
macro_rules! one_group {
    ($ask:expr, $req:ty => $resp:ty $(, $message:ident)?) => {
        refuse_one::<$req, $resp>(
            $ask,
            |r| $ask.ours(&r.group_id),
            |_, resp| {
                resp.error_code = group_refused();
                $(resp.$message = Some(group_text());)?
            },
        )
    };
}

/// A request naming several groups in its list `$list` (the group ids, or items with a
/// `group_id`): the engine's groups are taken out and answered once each in the answer's list
/// `$out` ([`GroupRefusal`]); the rest goes to the broker.
macro_rules! many_groups {
    ($ask:expr, $req:ty => $resp:ty, $list:ident $(.$field:ident)? => $out:ident) => {{
        let version = $ask.version;
        split_by::<$req, $resp, GroupId>(
            $ask.frame,
            $ask.key,
            version,
            |req| {
                take_refused(&mut req.$list, |g| {
                    $(let g = &g.$field;)?
                    $ask.ours(g).then(|| (g.clone(), group_text()))
                })
            },
            |req| req.$list.len(),
            move |resp, refused| {
                let mut shown = Shown::default();
                resp.$out.extend(refused.iter().map(|(g, text)| GroupRefusal::refusing(g, text, &mut shown, version)));
            },
        )
    }};
}

/// The answer's partitions `$item` for the request's `$partitions` (items with a
/// `partition_index`), each refused.
macro_rules! refused_partitions {
    ($partitions:expr => $item:ty) => {
        $partitions
            .iter()
            .map(|p| {
                let mut rp = <$item>::default();
                rp.partition_index = p.partition_index;
                rp.error_code = group_refused();
                rp
            })
            .collect()
    };
}

/// Decides one group request the predicate let through (any other request is forwarded).
pub(super) fn check(frame: &Bytes, key: ApiKey, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    let ask = &Ask { frame, key, version, who };
    match key {
        ApiKey::FindCoordinator => find_coordinator(ask),
        ApiKey::OffsetFetch if version >= 8 => many_groups!(ask, OffsetFetchRequest => OffsetFetchResponse, groups.group_id => groups),
        ApiKey::OffsetFetch => offset_fetch(ask),
        ApiKey::DescribeGroups => many_groups!(ask, DescribeGroupsRequest => DescribeGroupsResponse, groups => groups),
        ApiKey::DeleteGroups => many_groups!(ask, DeleteGroupsRequest => DeleteGroupsResponse, groups_names => results),
        ApiKey::ConsumerGroupDescribe => many_groups!(ask, ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse, group_ids => groups),
        ApiKey::ShareGroupDescribe => many_groups!(ask, ShareGroupDescribeRequest => ShareGroupDescribeResponse, group_ids => groups),
        ApiKey::DescribeShareGroupOffsets => {
            many_groups!(ask, DescribeShareGroupOffsetsRequest => DescribeShareGroupOffsetsResponse, groups.group_id => groups)
        }
        ApiKey::JoinGroup => refuse_one::<JoinGroupRequest, JoinGroupResponse>(
            ask,
            |r| ask.ours(&r.group_id) || r.protocol_type.as_str() == kmp_mirror_engine::ELECTION_PROTOCOL_TYPE,
            |_, resp| {
                resp.error_code = group_refused();
                resp.generation_id = -1;
            },
        ),
        ApiKey::SyncGroup => one_group!(ask, SyncGroupRequest => SyncGroupResponse),
        ApiKey::Heartbeat => one_group!(ask, HeartbeatRequest => HeartbeatResponse),
        ApiKey::LeaveGroup => one_group!(ask, LeaveGroupRequest => LeaveGroupResponse),
        ApiKey::OffsetDelete => one_group!(ask, OffsetDeleteRequest => OffsetDeleteResponse),
        ApiKey::AddOffsetsToTxn => one_group!(ask, AddOffsetsToTxnRequest => AddOffsetsToTxnResponse),
        ApiKey::ConsumerGroupHeartbeat => one_group!(ask, ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse, error_message),
        ApiKey::ShareGroupHeartbeat => one_group!(ask, ShareGroupHeartbeatRequest => ShareGroupHeartbeatResponse, error_message),
        ApiKey::AlterShareGroupOffsets => one_group!(ask, AlterShareGroupOffsetsRequest => AlterShareGroupOffsetsResponse, error_message),
        ApiKey::DeleteShareGroupOffsets => one_group!(ask, DeleteShareGroupOffsetsRequest => DeleteShareGroupOffsetsResponse, error_message),
        ApiKey::OffsetCommit => refuse_one::<OffsetCommitRequest, OffsetCommitResponse>(
            ask,
            |r| ask.ours(&r.group_id),
            |req, resp| {
                for t in &req.topics {
                    let mut rt = offset_commit_response::OffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.topic_id = t.topic_id;
                    rt.partitions = refused_partitions!(t.partitions => offset_commit_response::OffsetCommitResponsePartition);
                    resp.topics.push(rt);
                }
            },
        ),
        ApiKey::TxnOffsetCommit => refuse_one::<TxnOffsetCommitRequest, TxnOffsetCommitResponse>(
            ask,
            |r| ask.ours(&r.group_id),
            |req, resp| {
                for t in &req.topics {
                    let mut rt = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.partitions = refused_partitions!(t.partitions => txn_offset_commit_response::TxnOffsetCommitResponsePartition);
                    resp.topics.push(rt);
                }
            },
        ),
        _ => Ok(Decision::Forward),
    }
}

/// OffsetFetch v0-7 (one group): refused whole; v2+ says so at the top level, v1 (which has no
/// top-level error) in each partition asked for.
fn offset_fetch(ask: &Ask<'_>) -> Result<Decision, ProtocolError> {
    let version = ask.version;
    refuse_one::<OffsetFetchRequest, OffsetFetchResponse>(
        ask,
        |r| ask.ours(&r.group_id),
        |req, resp| {
            if version >= 2 {
                resp.error_code = group_refused();
                return;
            }
            for t in req.topics.iter().flatten() {
                let mut rt = offset_fetch_response::OffsetFetchResponseTopic::default();
                rt.name = t.name.clone();
                for &p in &t.partition_indexes {
                    let mut rp = offset_fetch_response::OffsetFetchResponsePartition::default();
                    rp.partition_index = p;
                    rp.committed_offset = -1;
                    rp.error_code = group_refused();
                    rt.partitions.push(rp);
                }
                resp.topics.push(rt);
            }
        },
    )
}

/// FindCoordinator of an engine group: v0-3 (one key) refused whole, v4+ (several keys) loses
/// the engine's keys and merges their refusal into the broker's answer.
fn find_coordinator(ask: &Ask<'_>) -> Result<Decision, ProtocolError> {
    refuse_coordinator_keys(ask.frame, ask.version, GROUP_KEY, |k| ask.who.is_engine_group(k), group_refused(), group_text())
}

/// FindCoordinator for keys of type `key_type` that `ours` protects: v0-3 (one key) refused
/// whole, v4+ (several keys) loses those keys, answered with `code` (and `text`) next to the
/// broker's answer to the rest. Shared by the groups and the transactional ids (`txns`).
pub(super) fn refuse_coordinator_keys(
    frame: &Bytes,
    version: i16,
    key_type: i8,
    ours: impl Fn(&str) -> bool,
    code: i16,
    text: StrBytes,
) -> Result<Decision, ProtocolError> {
    let key = ApiKey::FindCoordinator;
    if version < 4 {
        return refuse_whole::<FindCoordinatorRequest, FindCoordinatorResponse>(
            frame,
            key,
            version,
            |r| r.key_type == key_type && ours(r.key.as_str()),
            |_, resp| {
                resp.error_code = code;
                resp.node_id = BrokerId(-1);
                resp.port = -1;
                if version >= 1 {
                    resp.error_message = Some(text);
                }
            },
        );
    }
    split_by::<FindCoordinatorRequest, FindCoordinatorResponse, StrBytes>(
        frame,
        key,
        version,
        |req| {
            if req.key_type != key_type {
                return Vec::new();
            }
            take_refused(&mut req.coordinator_keys, |k| ours(k.as_str()).then(|| (k.clone(), text.clone())))
        },
        |req| req.coordinator_keys.len(),
        move |resp, refused| {
            let mut shown = Shown::default();
            for (k, t) in refused {
                let mut c = find_coordinator_response::Coordinator::default();
                c.error_message = shown.text(t);
                c.key = k.clone();
                c.node_id = BrokerId(-1);
                c.port = -1;
                c.error_code = code;
                resp.coordinators.push(c);
            }
        },
    )
}

/// A request naming one group: refused whole (with the answer `fill` makes) when `ours` says
/// the group is the engine's, else forwarded untouched.
fn refuse_one<Req, Resp>(ask: &Ask<'_>, ours: impl FnOnce(&Req) -> bool, fill: impl FnOnce(&Req, &mut Resp)) -> Result<Decision, ProtocolError>
where
    Req: Decodable,
    Resp: Encodable + Default,
{
    refuse_whole(ask.frame, ask.key, ask.version, ours, fill)
}

/// An answer's item for one refused group of a request naming several.
trait GroupRefusal: Default {
    /// The item refusing `group` with GROUP_AUTHORIZATION_FAILED, and `text` (while `shown`
    /// has room) where the item has a message in this `version`.
    fn refusing(group: &GroupId, text: &StrBytes, shown: &mut Shown, version: i16) -> Self;
}

/// [`GroupRefusal`] for answer items, with the version from which their `error_message` exists
/// (none: they have no message).
macro_rules! group_refusal {
    ($($item:ty $(: message since $since:literal)?;)*) => {$(
        impl GroupRefusal for $item {
            #[allow(unused_variables)] // the items without a message ignore it
            fn refusing(group: &GroupId, text: &StrBytes, shown: &mut Shown, version: i16) -> Self {
                let mut r = Self::default();
                r.group_id = group.clone();
                r.error_code = group_refused();
                $(if version >= $since {
                    r.error_message = shown.text(text);
                })?
                r
            }
        }
    )*};
}

group_refusal! {
    offset_fetch_response::OffsetFetchResponseGroup;
    delete_groups_response::DeletableGroupResult;
    describe_groups_response::DescribedGroup: message since 6;
    consumer_group_describe_response::DescribedGroup: message since 0;
    share_group_describe_response::DescribedGroup: message since 0;
    describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup: message since 0;
}
