//! The mirror RPC answers: size bounds, refusals named once, patterns checked off the runtime.

use super::*;

fn idle_control() -> Control {
    crate::engine::Engine::idle(&kmp_config::EngineConfig::default()).control().clone()
}

fn topics_answer(resp: &Bytes) -> TopicsResponse {
    let (_, mut r) = api::read_response(resp).unwrap();
    TopicsResponse::decode(&mut r).unwrap()
}

#[tokio::test]
async fn rpc_patterns_have_the_rest_limits_and_are_compiled_off_the_runtime() {
    let many = vec!["t".to_owned(); kmp_config::MAX_REQUEST_PATTERNS + 1];
    let refused = checked_patterns(&many, &[]).await.expect_err("one pattern too many");
    assert!(refused.contains("257 include patterns"), "{refused}");
    let long = vec!["a".repeat(kmp_config::MAX_REQUEST_PATTERN_LEN + 1)];
    assert!(checked_patterns(&[], &long).await.is_err(), "an overlong exclude pattern");
    let costly = vec![r"\w{200}".to_owned(); 6];
    let started = std::time::Instant::now();
    assert!(checked_patterns(&costly, &[]).await.is_err(), "over the regex size limit");
    assert!(started.elapsed() < std::time::Duration::from_millis(500), "took {:?}", started.elapsed());
    assert_eq!(checked_patterns(&["orders-.*".to_owned()], &["tmp".to_owned()]).await, Ok(()));
    assert_eq!(checked_patterns(&[], &[]).await, Ok(()));
}

const TOPIC_KEYS: [i16; 4] = [
    api::PAUSE_MIRROR_TOPICS,
    api::RESUME_MIRROR_TOPICS,
    api::STOP_MIRROR_TOPICS,
    api::START_MIRROR_TOPICS,
];

#[tokio::test]
async fn an_unknown_mirror_name_is_not_copied_into_every_topic_result() {
    let control = idle_control();
    for key in TOPIC_KEYS {
        let req = TopicsRequest {
            mirror_name: "m".repeat(4096),
            topics: vec![String::new(); 4096],
            ..Default::default()
        };
        let frame = api::request_frame(key, 1, "c", req.encode(key));
        let resp = answer(&frame, &control, EngineIdentity::default()).await.unwrap();
        assert!(
            resp.len() <= 64 * frame.len(),
            "api key {key}: a {}-byte request got a {}-byte answer",
            frame.len(),
            resp.len()
        );
    }
}

#[tokio::test]
async fn an_overlong_mirror_name_is_refused_once_at_the_top() {
    let control = idle_control();
    for key in TOPIC_KEYS {
        let req = TopicsRequest {
            mirror_name: "m".repeat(crate::control::definitions::MAX_MIRROR_NAME_LEN + 1),
            topics: vec!["t".to_owned(); 100],
            ..Default::default()
        };
        let frame = api::request_frame(key, 1, "c", req.encode(key));
        let got = topics_answer(&answer(&frame, &control, EngineIdentity::default()).await.unwrap());
        assert_eq!(got.error_code, errors::INVALID_REQUEST, "api key {key}");
        assert!(got.error_message.is_some_and(|m| m.len() < 200), "api key {key}: the name is not echoed");
        assert!(got.topics.is_empty(), "api key {key}: no per-topic results");
    }
}

#[tokio::test]
async fn an_unknown_mirror_is_named_only_in_the_top_level_message() {
    let control = idle_control();
    for key in TOPIC_KEYS {
        let req = TopicsRequest {
            mirror_name: "missing".into(),
            topics: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        let frame = api::request_frame(key, 1, "c", req.encode(key));
        let got = topics_answer(&answer(&frame, &control, EngineIdentity::default()).await.unwrap());
        assert_eq!(got.error_code, errors::UNKNOWN_CLUSTER_MIRROR, "api key {key}");
        assert!(got.error_message.is_some_and(|m| m.contains("missing")), "api key {key}");
        assert_eq!(got.topics.len(), 2, "api key {key}");
        assert!(
            got.topics
                .iter()
                .all(|t| t.error_code == errors::UNKNOWN_CLUSTER_MIRROR && t.error_message.is_none()),
            "api key {key}: {:?}",
            got.topics
        );
    }
}

#[test]
fn per_topic_messages_past_a_few_times_the_request_size_are_left_out() {
    let resp = TopicsResponse {
        topics: (0..100)
            .map(|i| TopicResult {
                name: format!("t{i}"),
                error_code: 1,
                error_message: Some("x".repeat(100)),
            })
            .collect(),
        ..Default::default()
    };
    let got = bounded(resp, 1000);
    let kept: usize = got.topics.iter().filter_map(|t| t.error_message.as_ref()).map(String::len).sum();
    assert_eq!(kept, 1000 * MESSAGE_BUDGET_PER_REQUEST_BYTE);
    assert!(got.topics.iter().all(|t| t.error_code == 1), "codes are kept");
}

#[tokio::test]
async fn describe_answers_a_repeated_mirror_name_once() {
    let control = idle_control();
    let req = DescribeRequest {
        mirror_names: [vec!["x".to_owned(); 1000], vec!["y".to_owned(), "x".to_owned()]].concat(),
        include_authorized_operations: false,
        ..Default::default()
    };
    let frame = api::request_frame(api::DESCRIBE_CLUSTER_MIRRORS, 1, "c", req.encode());
    let resp = answer(&frame, &control, EngineIdentity::default()).await.unwrap();
    let (_, mut r) = api::read_response(&resp).unwrap();
    let got = DescribeResponse::decode(&mut r).unwrap();
    let names: Vec<&str> = got.mirrors.iter().map(|m| m.mirror_name.as_str()).collect();
    assert_eq!(names, ["x", "y"], "each distinct name once, in the order first asked");
}

#[tokio::test]
async fn a_forwarded_frame_is_answered_only_when_it_is_a_version_0_mutating_rpc() {
    let control = idle_control();
    let list = api::request_frame(api::LIST_CLUSTER_MIRRORS, 1, "c", {
        let mut w = api::W::default();
        w.bool(false);
        w
    });
    assert_eq!(
        answer_for_standby(list, control.clone()).await,
        None,
        "List is answered by every instance itself"
    );
    assert_eq!(answer_for_standby(Bytes::from_static(b"garbage"), control.clone()).await, None);
    let delete = api::request_frame(
        api::DELETE_CLUSTER_MIRROR,
        7,
        "c",
        DeleteRequest {
            mirror_name: "m".into(),
            ..Default::default()
        }
        .encode(),
    );
    let got = answer_for_standby(delete, control).await.expect("a delete is answered");
    let (correlation_id, mut r) = api::read_response(&got).unwrap();
    assert_eq!(correlation_id, 7);
    assert_eq!(SimpleResponse::decode(&mut r).unwrap().error_code, errors::UNKNOWN_CLUSTER_MIRROR);
}

#[tokio::test]
async fn a_failback_lookup_needs_the_engine_and_a_follower_refuses_it_rather_than_answer_that_nothing_was_mirrored() {
    use crate::control::{Role, TermParts};
    use crate::state::catalog::Catalog;
    use crate::state::status::StatusBoard;

    let frame = |q: &DescribeRequest| api::request_frame(api::DESCRIBE_CLUSTER_MIRRORS, 1, "c", q.encode());
    let plain = DescribeRequest::default();
    let lookup = DescribeRequest {
        cluster_id: Some("source-cluster".into()),
        epoch_lookups: vec![([1; 16], vec![0, 3])],
        ..Default::default()
    };
    let only_id = DescribeRequest {
        cluster_id: Some("source-cluster".into()),
        ..Default::default()
    };
    assert!(!needs_engine(&frame(&plain)), "a describe answers from any instance's view");
    assert!(!needs_engine(&frame(&only_id)), "a cluster id alone asks for no line");
    assert!(needs_engine(&frame(&lookup)), "a lookup of recorded lines");
    assert!(needs_engine(&api::request_frame(
        api::STOP_MIRROR_TOPICS,
        1,
        "c",
        TopicsRequest::default().encode(api::STOP_MIRROR_TOPICS)
    )));
    assert!(!needs_engine(&Bytes::from_static(b"\x00\x00\x00\x02\x00")), "a frame that does not decode");

    let described = |resp: Bytes| {
        let (_, mut r) = api::read_response(&resp).unwrap();
        DescribeResponse::decode(&mut r).unwrap()
    };
    // The engine answers each asked partition; nothing recorded here, so -1 ("not found").
    let engine = idle_control();
    let got = described(answer(&frame(&lookup), &engine, EngineIdentity::default()).await.unwrap());
    assert_eq!((got.error_code, got.lookup_results), (errors::NONE, vec![([1; 16], vec![(0, -1), (3, -1)])]));

    // A follower has no stored records to answer from: it refuses instead of answering -1.
    let follower = Control::new(StatusBoard::default(), Catalog::default(), Vec::new());
    let term = follower.build(TermParts {
        role: Role::Follower { state_topic: "__state".into() },
        ..TermParts::none(Vec::new())
    });
    follower.publish(term, None);
    follower.mark_booted();
    let refused = described(answer(&frame(&lookup), &follower, EngineIdentity::default()).await.unwrap());
    assert_eq!(refused.error_code, errors::NOT_CONTROLLER, "{refused:?}");
    assert!(refused.lookup_results.is_empty());
    let plain_answer = described(answer(&frame(&plain), &follower, EngineIdentity::default()).await.unwrap());
    assert_eq!(plain_answer.error_code, errors::NONE, "a plain describe still answers on a follower");
}
