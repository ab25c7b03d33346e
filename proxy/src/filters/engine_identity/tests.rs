//! The engine-identity guard's decisions on encoded frames: which requests are refused, which
//! are reduced and merged, and which pass untouched.

use bytes::Bytes;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, RequestHeader, SyncGroupRequest,
    SyncGroupResponse, alter_client_quotas_request, describe_groups_response, list_groups_response, offset_fetch_request,
};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::groups::{group_api, unlisted};
use super::{Decision, Protected, check, may_name_group};

const ENGINE_GROUP: &str = "kmp-engine.__kmp_mirror_state";

fn protected() -> Protected {
    Protected {
        group: ENGINE_GROUP.to_owned(),
        users: vec!["proxy".to_owned()],
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

fn frame<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.correlation_id = 9;
    h.client_id = Some(s("test"));
    encode_request(&h, key, body).expect("encode request")
}

fn refused<Resp: Decodable>(d: Decision, key: ApiKey, version: i16) -> Resp {
    match d {
        Decision::Refuse(answer, _) => {
            let (h, resp) = decode_response::<Resp>(&answer, key, version).expect("decode the refusal");
            assert_eq!(h.correlation_id, 9, "the refusal answers the request's correlation id");
            resp
        }
        Decision::Forward => panic!("{key:?} v{version} naming the engine group was forwarded, not refused"),
        Decision::Split(..) => panic!("{key:?} v{version} naming only the engine group was split, not refused"),
    }
}

fn join(group: &str, protocol_type: &str) -> Bytes {
    let mut r = JoinGroupRequest::default();
    r.group_id = gid(group);
    r.protocol_type = s(protocol_type);
    r.session_timeout_ms = 6000;
    r.rebalance_timeout_ms = 6000;
    frame(ApiKey::JoinGroup, 9, &r)
}

#[test]
fn the_predicate_asks_only_for_group_requests_whose_bytes_name_an_engine_group() {
    assert!(may_name_group(&join(ENGINE_GROUP, "consumer"), "", false), "the default group name");
    assert!(may_name_group(&join("elect-here", "consumer"), "elect-here", false), "a configured group_id");
    assert!(
        may_name_group(&join("other", "kmp-mirror-engine"), "", true),
        "a JoinGroup of the election's protocol type"
    );
    assert!(!may_name_group(&join("orders", "consumer"), "", true), "an ordinary consumer group stays raw");
    assert!(group_api(ApiKey::LeaveGroup) && group_api(ApiKey::OffsetCommit) && !group_api(ApiKey::Produce));
}

#[test]
fn joining_the_engine_group_or_its_protocol_type_is_refused_and_other_groups_pass() {
    let who = protected();
    let resp: JoinGroupResponse = refused(check(&join(ENGINE_GROUP, "kmp-mirror-engine"), 11, 9, &who).unwrap(), ApiKey::JoinGroup, 9);
    assert_eq!(resp.error_code, 30, "JoinGroup of the engine group: GROUP_AUTHORIZATION_FAILED");
    let resp: JoinGroupResponse = refused(check(&join("kmp-engine.other_state", "consumer"), 11, 9, &who).unwrap(), ApiKey::JoinGroup, 9);
    assert_eq!(resp.error_code, 30, "another instance's default engine group");
    let resp: JoinGroupResponse = refused(check(&join("elsewhere", "kmp-mirror-engine"), 11, 9, &who).unwrap(), ApiKey::JoinGroup, 9);
    assert_eq!(resp.error_code, 30, "a group of the engine's protocol type under another name");
    assert!(matches!(check(&join("orders", "consumer"), 11, 9, &who).unwrap(), Decision::Forward));
}

#[test]
fn every_single_group_api_naming_the_engine_group_is_refused() {
    let who = protected();
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = gid(ENGINE_GROUP);
    let r: LeaveGroupResponse = refused(check(&frame(ApiKey::LeaveGroup, 5, &leave), 13, 5, &who).unwrap(), ApiKey::LeaveGroup, 5);
    assert_eq!(r.error_code, 30, "LeaveGroup");
    let mut hb = HeartbeatRequest::default();
    hb.group_id = gid(ENGINE_GROUP);
    let r: HeartbeatResponse = refused(check(&frame(ApiKey::Heartbeat, 4, &hb), 12, 4, &who).unwrap(), ApiKey::Heartbeat, 4);
    assert_eq!(r.error_code, 30, "Heartbeat");
    let mut sync = SyncGroupRequest::default();
    sync.group_id = gid(ENGINE_GROUP);
    let r: SyncGroupResponse = refused(check(&frame(ApiKey::SyncGroup, 5, &sync), 14, 5, &who).unwrap(), ApiKey::SyncGroup, 5);
    assert_eq!(r.error_code, 30, "SyncGroup");
    let mut del = OffsetDeleteRequest::default();
    del.group_id = gid(ENGINE_GROUP);
    let r: OffsetDeleteResponse = refused(check(&frame(ApiKey::OffsetDelete, 0, &del), 47, 0, &who).unwrap(), ApiKey::OffsetDelete, 0);
    assert_eq!(r.error_code, 30, "OffsetDelete");
    let mut cg = ConsumerGroupHeartbeatRequest::default();
    cg.group_id = gid(ENGINE_GROUP);
    let r: ConsumerGroupHeartbeatResponse = refused(
        check(&frame(ApiKey::ConsumerGroupHeartbeat, 0, &cg), 68, 0, &who).unwrap(),
        ApiKey::ConsumerGroupHeartbeat,
        0,
    );
    assert_eq!(r.error_code, 30, "ConsumerGroupHeartbeat");

    let mut commit = OffsetCommitRequest::default();
    commit.group_id = gid(ENGINE_GROUP);
    let mut t = kmp_protocol::kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = kmp_protocol::kafka_protocol::messages::TopicName(s("t"));
    let mut p = kmp_protocol::kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 3;
    t.partitions.push(p);
    commit.topics.push(t);
    let r: OffsetCommitResponse = refused(check(&frame(ApiKey::OffsetCommit, 8, &commit), 8, 8, &who).unwrap(), ApiKey::OffsetCommit, 8);
    let codes: Vec<(i32, i16)> = r.topics[0].partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
    assert_eq!(codes, vec![(3, 30)], "OffsetCommit: every partition refused");

    for version in [1, 7] {
        let mut fetch = OffsetFetchRequest::default();
        fetch.group_id = gid(ENGINE_GROUP);
        let mut ft = offset_fetch_request::OffsetFetchRequestTopic::default();
        ft.name = kmp_protocol::kafka_protocol::messages::TopicName(s("t"));
        ft.partition_indexes = vec![0];
        fetch.topics = Some(vec![ft]);
        let r: OffsetFetchResponse = refused(
            check(&frame(ApiKey::OffsetFetch, version, &fetch), 9, version, &who).unwrap(),
            ApiKey::OffsetFetch,
            version,
        );
        let code = if version >= 2 { r.error_code } else { r.topics[0].partitions[0].error_code };
        assert_eq!(code, 30, "OffsetFetch v{version}");
    }
}

#[test]
fn describe_groups_naming_the_engine_group_among_others_forwards_the_others_and_merges() {
    let who = protected();
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![gid("orders"), gid(ENGINE_GROUP)];
    let Decision::Split(rest, merge, 1) = check(&frame(ApiKey::DescribeGroups, 5, &req), 15, 5, &who).unwrap() else {
        panic!("DescribeGroups of two groups, one the engine's, was not split")
    };
    let (_, fwd) = decode_request::<DescribeGroupsRequest>(&rest, ApiKey::DescribeGroups, 5).unwrap();
    assert_eq!(fwd.groups, vec![gid("orders")], "only the other group reaches the broker");
    let mut broker = DescribeGroupsResponse::default();
    let mut g = describe_groups_response::DescribedGroup::default();
    g.group_id = gid("orders");
    broker.groups.push(g);
    let merged = merge(encode_response(9, ApiKey::DescribeGroups, 5, &broker).unwrap()).unwrap();
    let (_, resp) = decode_response::<DescribeGroupsResponse>(&merged, ApiKey::DescribeGroups, 5).unwrap();
    let got: Vec<(String, i16, usize)> = resp.groups.iter().map(|g| (g.group_id.to_string(), g.error_code, g.members.len())).collect();
    assert_eq!(got, vec![("orders".into(), 0, 0), (ENGINE_GROUP.into(), 30, 0)]);
}

#[test]
fn offset_fetch_v8_and_delete_groups_lose_only_the_engine_group() {
    let who = protected();
    let mut req = OffsetFetchRequest::default();
    for g in ["orders", ENGINE_GROUP] {
        let mut rg = offset_fetch_request::OffsetFetchRequestGroup::default();
        rg.group_id = gid(g);
        req.groups.push(rg);
    }
    let Decision::Split(rest, _, 1) = check(&frame(ApiKey::OffsetFetch, 8, &req), 9, 8, &who).unwrap() else {
        panic!("OffsetFetch v8 of two groups was not split")
    };
    let (_, fwd) = decode_request::<OffsetFetchRequest>(&rest, ApiKey::OffsetFetch, 8).unwrap();
    assert_eq!(fwd.groups.len(), 1);
    let mut del = DeleteGroupsRequest::default();
    del.groups_names = vec![gid(ENGINE_GROUP)];
    let r: DeleteGroupsResponse = refused(check(&frame(ApiKey::DeleteGroups, 2, &del), 42, 2, &who).unwrap(), ApiKey::DeleteGroups, 2);
    assert_eq!(r.results[0].error_code, 30, "DeleteGroups of the engine group");
}

#[test]
fn find_coordinator_for_the_engine_group_is_refused_in_both_shapes() {
    let who = protected();
    let mut old = FindCoordinatorRequest::default();
    old.key = s(ENGINE_GROUP);
    let r: FindCoordinatorResponse = refused(
        check(&frame(ApiKey::FindCoordinator, 3, &old), 10, 3, &who).unwrap(),
        ApiKey::FindCoordinator,
        3,
    );
    assert_eq!((r.error_code, r.node_id.0), (30, -1), "v3: refused, no coordinator");
    let mut txn = FindCoordinatorRequest::default();
    txn.key = s(ENGINE_GROUP);
    txn.key_type = 1;
    assert!(
        matches!(check(&frame(ApiKey::FindCoordinator, 3, &txn), 10, 3, &who).unwrap(), Decision::Forward),
        "a transactional id is not a group"
    );
    let mut new = FindCoordinatorRequest::default();
    new.coordinator_keys = vec![s("orders"), s(ENGINE_GROUP)];
    let Decision::Split(rest, merge, 1) = check(&frame(ApiKey::FindCoordinator, 4, &new), 10, 4, &who).unwrap() else {
        panic!("FindCoordinator v4 of two groups was not split")
    };
    let (_, fwd) = decode_request::<FindCoordinatorRequest>(&rest, ApiKey::FindCoordinator, 4).unwrap();
    assert_eq!(fwd.coordinator_keys, vec![s("orders")]);
    let merged = merge(encode_response(9, ApiKey::FindCoordinator, 4, &FindCoordinatorResponse::default()).unwrap()).unwrap();
    let (_, resp) = decode_response::<FindCoordinatorResponse>(&merged, ApiKey::FindCoordinator, 4).unwrap();
    assert_eq!((resp.coordinators[0].key.as_str(), resp.coordinators[0].error_code), (ENGINE_GROUP, 30));
}

#[test]
fn list_groups_answers_do_not_list_the_engine_group() {
    let mut resp = ListGroupsResponse::default();
    for (g, t) in [("orders", "consumer"), (ENGINE_GROUP, "kmp-mirror-engine"), ("renamed", "kmp-mirror-engine")] {
        let mut l = list_groups_response::ListedGroup::default();
        l.group_id = gid(g);
        l.protocol_type = s(t);
        resp.groups.push(l);
    }
    let answer = encode_response(9, ApiKey::ListGroups, 4, &resp).unwrap();
    let out = unlisted(answer, 4, &protected()).unwrap();
    let (_, listed) = decode_response::<ListGroupsResponse>(&out, ApiKey::ListGroups, 4).unwrap();
    let names: Vec<String> = listed.groups.iter().map(|g| g.group_id.to_string()).collect();
    assert_eq!(names, vec!["orders"], "ListGroups still lists an engine group");
}

#[test]
fn quotas_naming_the_engines_client_id_or_the_proxys_user_are_refused_and_others_pass() {
    let entry = |kind: &str, name: Option<&str>| {
        let mut e = alter_client_quotas_request::EntryData::default();
        let mut d = alter_client_quotas_request::EntityData::default();
        d.entity_type = s(kind);
        d.entity_name = name.map(s);
        e.entity.push(d);
        let mut op = alter_client_quotas_request::OpData::default();
        op.key = s("producer_byte_rate");
        op.value = 1024.0;
        e.ops.push(op);
        e
    };
    let who = protected();
    let mut req = AlterClientQuotasRequest::default();
    req.entries = vec![
        entry("client-id", Some("kafka-mirror-proxy-engine")),
        entry("client-id", Some("app")),
        entry("user", Some("proxy")),
    ];
    let Decision::Split(rest, merge, 2) = check(&frame(ApiKey::AlterClientQuotas, 1, &req), 49, 1, &who).unwrap() else {
        panic!("AlterClientQuotas naming the engine's client id and the proxy's user was not split (2 refused)")
    };
    let (_, fwd) = decode_request::<AlterClientQuotasRequest>(&rest, ApiKey::AlterClientQuotas, 1).unwrap();
    assert_eq!(fwd.entries.len(), 1, "only the app's quota reaches the broker");
    let merged = merge(encode_response(9, ApiKey::AlterClientQuotas, 1, &AlterClientQuotasResponse::default()).unwrap()).unwrap();
    let (_, resp) = decode_response::<AlterClientQuotasResponse>(&merged, ApiKey::AlterClientQuotas, 1).unwrap();
    let got: Vec<(String, i16)> = resp
        .entries
        .iter()
        .map(|e| (e.entity[0].entity_name.as_ref().map(|n| n.to_string()).unwrap_or_default(), e.error_code))
        .collect();
    assert_eq!(got, vec![("kafka-mirror-proxy-engine".into(), 44), ("proxy".into(), 44)]);
    let mut plain = AlterClientQuotasRequest::default();
    plain.entries = vec![entry("client-id", None), entry("user", Some("app"))];
    assert!(
        matches!(check(&frame(ApiKey::AlterClientQuotas, 1, &plain), 49, 1, &who).unwrap(), Decision::Forward),
        "quotas of other entities (and the default) pass"
    );
}

const ENGINE_TXN: &str = "kmp-engine.txn.abababababababababababababababab.0.4711";

fn tid(v: &str) -> kmp_protocol::kafka_protocol::messages::TransactionalId {
    kmp_protocol::kafka_protocol::messages::TransactionalId(s(v))
}

#[test]
fn every_transaction_api_naming_an_engine_transactional_id_is_refused_and_others_pass() {
    use kmp_protocol::kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
        InitProducerIdRequest, InitProducerIdResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse, add_partitions_to_txn_request,
        txn_offset_commit_request,
    };
    let who = protected();
    for (id, ours) in [(ENGINE_TXN, true), ("orders-app-1", false)] {
        let mut init = InitProducerIdRequest::default();
        init.transactional_id = Some(tid(id));
        let d = check(&frame(ApiKey::InitProducerId, 4, &init), ApiKey::InitProducerId as i16, 4, &who).unwrap();
        if !ours {
            assert!(matches!(d, Decision::Forward), "InitProducerId of {id} forwarded");
            continue;
        }
        let r: InitProducerIdResponse = refused(d, ApiKey::InitProducerId, 4);
        assert_eq!(
            (r.error_code, r.producer_id.0),
            (53, -1),
            "InitProducerId: TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        );

        let mut add = AddPartitionsToTxnRequest::default();
        add.v3_and_below_transactional_id = tid(id);
        let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
        t.name = kmp_protocol::kafka_protocol::messages::TopicName(s("mirrored"));
        t.partitions = vec![0, 1];
        add.v3_and_below_topics = vec![t];
        let r: AddPartitionsToTxnResponse = refused(
            check(&frame(ApiKey::AddPartitionsToTxn, 3, &add), 24, 3, &who).unwrap(),
            ApiKey::AddPartitionsToTxn,
            3,
        );
        let codes: Vec<i16> = r.results_by_topic_v3_and_below[0]
            .results_by_partition
            .iter()
            .map(|p| p.partition_error_code)
            .collect();
        assert_eq!(codes, vec![53, 53], "AddPartitionsToTxn: every partition refused");

        let mut end = EndTxnRequest::default();
        end.transactional_id = tid(id);
        let r: EndTxnResponse = refused(check(&frame(ApiKey::EndTxn, 3, &end), 26, 3, &who).unwrap(), ApiKey::EndTxn, 3);
        assert_eq!(r.error_code, 53, "EndTxn");

        let mut offsets = AddOffsetsToTxnRequest::default();
        offsets.transactional_id = tid(id);
        offsets.group_id = gid("app");
        let r: AddOffsetsToTxnResponse = refused(
            check(&frame(ApiKey::AddOffsetsToTxn, 3, &offsets), 25, 3, &who).unwrap(),
            ApiKey::AddOffsetsToTxn,
            3,
        );
        assert_eq!(r.error_code, 53, "AddOffsetsToTxn");

        let mut commit = TxnOffsetCommitRequest::default();
        commit.transactional_id = tid(id);
        commit.group_id = gid("app");
        let mut ct = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
        ct.name = kmp_protocol::kafka_protocol::messages::TopicName(s("other"));
        let mut cp = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
        cp.partition_index = 2;
        ct.partitions = vec![cp];
        commit.topics = vec![ct];
        let r: TxnOffsetCommitResponse = refused(
            check(&frame(ApiKey::TxnOffsetCommit, 3, &commit), 28, 3, &who).unwrap(),
            ApiKey::TxnOffsetCommit,
            3,
        );
        assert_eq!(r.topics[0].partitions[0].error_code, 53, "TxnOffsetCommit");
    }
}

#[test]
fn describe_transactions_and_find_coordinator_lose_only_the_engine_transactional_ids() {
    use kmp_protocol::kafka_protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse};
    let who = protected();
    let mut d = DescribeTransactionsRequest::default();
    d.transactional_ids = vec![tid("app-1"), tid(ENGINE_TXN)];
    let Decision::Split(rest, merge, 1) = check(&frame(ApiKey::DescribeTransactions, 0, &d), 65, 0, &who).unwrap() else {
        panic!("DescribeTransactions of two ids was not split")
    };
    let (_, fwd) = decode_request::<DescribeTransactionsRequest>(&rest, ApiKey::DescribeTransactions, 0).unwrap();
    assert_eq!(fwd.transactional_ids, vec![tid("app-1")]);
    let merged = merge(encode_response(9, ApiKey::DescribeTransactions, 0, &DescribeTransactionsResponse::default()).unwrap()).unwrap();
    let (_, resp) = decode_response::<DescribeTransactionsResponse>(&merged, ApiKey::DescribeTransactions, 0).unwrap();
    assert_eq!(
        (resp.transaction_states[0].transactional_id.as_str(), resp.transaction_states[0].error_code),
        (ENGINE_TXN, 53)
    );

    let mut old = FindCoordinatorRequest::default();
    old.key = s(ENGINE_TXN);
    old.key_type = 1;
    let r: FindCoordinatorResponse = refused(
        check(&frame(ApiKey::FindCoordinator, 3, &old), 10, 3, &who).unwrap(),
        ApiKey::FindCoordinator,
        3,
    );
    assert_eq!((r.error_code, r.node_id.0), (53, -1), "v3: refused, no coordinator");
    let mut new = FindCoordinatorRequest::default();
    new.key_type = 1;
    new.coordinator_keys = vec![s("app-1"), s(ENGINE_TXN)];
    let Decision::Split(rest, _, 1) = check(&frame(ApiKey::FindCoordinator, 4, &new), 10, 4, &who).unwrap() else {
        panic!("FindCoordinator v4 of two transactional ids was not split")
    };
    let (_, fwd) = decode_request::<FindCoordinatorRequest>(&rest, ApiKey::FindCoordinator, 4).unwrap();
    assert_eq!(fwd.coordinator_keys, vec![s("app-1")]);
}
