//! Early ApiVersions (`upstream.api_versions_cache_ms`): a new connection's first ApiVersions is
//! answered from the broker's last (clamped) answer while the proxy opens the connection's
//! upstream. Checked here, as `tests/integration/test_early_api_versions.py` does against Kafka:
//! the early answer is the broker's answer as the audited version table clamps it, field for
//! field but the correlation id; the request still reaches the broker and the broker's own
//! answer is never delivered as well (the next answer on the wire is the next request's); with
//! the setting at 0 every answer is the broker's own; and an upstream that cannot be opened still
//! closes the connection after an early answer.
//!
//! The stand-in puts a finalized-features epoch that grows with every answer into its
//! ApiVersions answers, so which answer a client got tells whether it was answered early: an
//! early answer carries the epoch of the broker's answer to the connection before.

mod support;

use kmp_protocol::codec::decode_response;
use kmp_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::{mirror_api, versions};
use support::{ANNOUNCED, PATIENCE, Proxy, Reply, StandIn, closed_by_peer, correlation_id, read_frame, request};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const EARLY: &str = "kmp_api_versions_answered_early_total";

/// ApiVersions v3 (flexible: request header v2, client software name and version).
fn api_versions_v3(correlation_id: i32, client_id: &str) -> bytes::Bytes {
    let mut req = ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("kmp-test");
    req.client_software_version = StrBytes::from_static_str("1.0");
    request(&req, 3, correlation_id, client_id)
}

/// The (API key, min, max) list a client must see: the stand-in's announcement clamped to the
/// audited table (unknown keys dropped), then the mirror RPCs the proxy answers itself.
fn clamped_announcement() -> Vec<(i16, i16, i16)> {
    let mut want: Vec<_> = ANNOUNCED
        .iter()
        .filter_map(|&(k, min, max)| versions::clamp(k, min, max).map(|(min, max)| (k, min, max)))
        .collect();
    want.extend_from_slice(mirror_api::ANSWERED);
    want
}

/// Asks ApiVersions v3 as the first request of a new connection; the connection and the answer.
async fn first_api_versions(proxy: &Proxy, correlation_id: i32, client_id: &str) -> (TcpStream, ApiVersionsResponse) {
    let mut s = TcpStream::connect(proxy.kafka).await.expect("connect to the proxy");
    s.write_all(&api_versions_v3(correlation_id, client_id)).await.expect("send ApiVersions");
    let frame = read_frame(&mut s, &format!("{client_id}: ApiVersions")).await;
    let (header, resp) = decode_response::<ApiVersionsResponse>(&frame, ApiKey::ApiVersions, 3).expect("an ApiVersions v3 answer");
    assert_eq!(
        header.correlation_id, correlation_id,
        "{client_id}: ApiVersions answered with its own correlation id"
    );
    assert_eq!(resp.error_code, 0, "{client_id}: ApiVersions answered without an error");
    let keys: Vec<_> = resp.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
    assert_eq!(
        keys,
        clamped_announcement(),
        "{client_id}: the broker's versions as the audited table clamps them (Metadata v99 to 13, key 500 dropped), plus the mirror RPCs"
    );
    (s, resp)
}

/// The epoch of the stand-in's own answer to `client_id`'s ApiVersions (waited for: the request
/// reaches the broker also when it was answered early).
async fn brokers_epoch(broker: &StandIn, client_id: &str) -> i64 {
    match broker.wait_for(client_id, ApiKey::ApiVersions as i16).await.reply {
        Reply::ApiVersions { epoch } => epoch,
        other => panic!("{client_id}: the stand-in did not answer ApiVersions: {other:?}"),
    }
}

/// Metadata on `s` after its ApiVersions: the very next answer must be Metadata's.
async fn metadata_comes_next(s: &mut TcpStream, cid: i32, what: &str) {
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    s.write_all(&request(&req, 12, cid, "kmp-early")).await.expect("send Metadata");
    let frame = read_frame(s, &format!("{what}: Metadata")).await;
    assert_eq!(
        correlation_id(&frame),
        cid,
        "{what}: after ApiVersions the next answer must be Metadata's (a second ApiVersions answer was delivered?)"
    );
    let (_, md) = decode_response::<MetadataResponse>(&frame, ApiKey::Metadata, 12).expect("a Metadata v12 answer");
    assert!(!md.brokers.is_empty(), "{what}: a Metadata answer with the broker");
}

#[tokio::test]
async fn a_first_api_versions_is_answered_early_with_the_brokers_clamped_answer_and_the_connection_then_works() {
    let proxy = Proxy::start(|c| c.upstream.api_versions_cache_ms = 60_000).await;

    let (mut first, answer) = first_api_versions(&proxy, 1, "early-0").await;
    let mut previous = brokers_epoch(&proxy.broker, "early-0").await;
    assert_eq!(
        answer.finalized_features_epoch, previous,
        "early-0: with nothing kept yet, the answer is the broker's own"
    );
    assert_eq!(proxy.metric(EARLY).await, 0.0, "nothing is kept before a broker answered once");
    metadata_comes_next(&mut first, 2, "early-0").await;

    for n in 1..=5 {
        let client = format!("early-{n}");
        let (mut s, early) = first_api_versions(&proxy, 1000 + n, &client).await;
        let own = brokers_epoch(&proxy.broker, &client).await;
        assert_ne!(own, previous, "the stand-in gives every answer a new epoch");
        assert_eq!(
            early.finalized_features_epoch, previous,
            "{client}: answered early with the broker's answer to the connection before (epoch {previous}), not with the broker's answer to this request (epoch {own})"
        );
        let mut kept = answer.clone();
        kept.finalized_features_epoch = previous;
        assert_eq!(early, kept, "{client}: the early answer is the broker's (clamped) answer field for field");
        metadata_comes_next(&mut s, 5000 + n, &client).await;
        previous = own;
    }
    assert_eq!(proxy.metric(EARLY).await, 5.0, "{EARLY} counts the 5 early answers");
    proxy.stop().await;
}

#[tokio::test]
async fn with_api_versions_cache_ms_zero_nothing_is_answered_early() {
    let proxy = Proxy::start(|c| c.upstream.api_versions_cache_ms = 0).await;
    for n in 0..5 {
        let client = format!("late-{n}");
        let (mut s, answer) = first_api_versions(&proxy, n, &client).await;
        let own = brokers_epoch(&proxy.broker, &client).await;
        assert_eq!(
            answer.finalized_features_epoch, own,
            "{client}: with upstream.api_versions_cache_ms = 0 the answer is the broker's own to this request"
        );
        metadata_comes_next(&mut s, 100 + n, &client).await;
    }
    assert_eq!(proxy.metric(EARLY).await, 0.0, "{EARLY} with upstream.api_versions_cache_ms = 0");
    proxy.stop().await;
}

#[tokio::test]
async fn an_early_answer_does_not_hide_an_upstream_that_cannot_be_opened() {
    let proxy = Proxy::start(|c| c.upstream.api_versions_cache_ms = 60_000).await;
    let (first, _) = first_api_versions(&proxy, 1, "kept").await;
    brokers_epoch(&proxy.broker, "kept").await;
    drop(first);
    proxy.broker.shut().await;
    let errors_before = proxy.metric("kmp_upstream_connect_errors_total").await;

    let (mut s, _) = first_api_versions(&proxy, 2, "refused-upstream").await;
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    // The proxy may already have closed the connection: a failed write is no failure here.
    let _ = s.write_all(&request(&req, 12, 3, "refused-upstream")).await;
    assert!(
        closed_by_peer(&mut s, PATIENCE).await,
        "with the upstream refused, the connection answered early must close, not hang"
    );
    assert!(
        proxy.metric("kmp_upstream_connect_errors_total").await > errors_before,
        "the refused upstream connect is counted"
    );
    assert_eq!(proxy.metric(EARLY).await, 1.0, "the ApiVersions after the stand-in shut was answered early");
    assert!(proxy.alive(), "serve ended after an upstream connect failed behind an early answer");
    proxy.stop().await;
}
