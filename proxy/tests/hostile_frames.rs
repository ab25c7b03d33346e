//! Hostile bytes sent as the first bytes of a fresh connection (no ApiVersions, no SASL: anyone
//! who can reach the port) cost the sender its connection and nothing else: a connection opened
//! beforehand and a new client both still get ApiVersions and Metadata through the proxy, `serve`
//! keeps running and no task of the proxy panics. Covers:
//!
//! * the issue-11 frames of `tests/security/sec_wire.py` `hostile_frames()`: 21-33 bytes whose
//!   array count claims billions of elements. With the engine off no filter decodes these APIs,
//!   so they reach the stand-in, which closes like a broker that cannot parse them; their
//!   decoding under mirroring stays with `tests/security/test_hostile_frames.py` and the decode
//!   budget property test (`protocol/tests/decode_budget.rs`);
//! * the bad frames of `tests/integration/test_proxy_robustness.py`, which the proxy itself must
//!   refuse: length prefixes that are negative or over `listener.max_request_frame_bytes`, a frame
//!   shorter than a request header, an unknown API key, an unsupported version, a Produce whose
//!   body ends before its `acks`, and random garbage. Each is counted in
//!   `kmp_frame_errors_total{side="client"}` and never reaches the broker;
//! * a seeded random-bytes fuzz loop (300 connections; the same bytes on every run).

mod support;

use std::time::Duration;

use support::{PATIENCE, PanicWatch, Proxy, Rng, closed_by_peer, correlation_id, raw_request, read_frame, round_trip, string, uvarint};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const FRAME_ERRORS: &str = "kmp_frame_errors_total{side=\"client\"}";

/// 2^31 - 1 elements.
const HUGE_I32: i32 = i32::MAX;

/// Compact count 2^32 - 1, i.e. 2^32 - 2 elements.
fn huge_compact() -> Vec<u8> {
    uvarint(0xFFFF_FFFF)
}

/// `sec_wire.hostile_frames()`: complete, tiny frames whose array count claims far more elements
/// than bytes follow.
fn array_count_frames() -> Vec<(&'static str, Vec<u8>)> {
    let produce_head = [&string(None)[..], &1i16.to_be_bytes(), &1000i32.to_be_bytes()].concat();
    let compact_produce_head = [&uvarint(0)[..], &1i16.to_be_bytes(), &1000i32.to_be_bytes()].concat();
    vec![
        (
            "DescribeConfigs v1, resource count 2^31-1",
            raw_request(32, 1, 1, None, false, &HUGE_I32.to_be_bytes()),
        ),
        (
            "DescribeConfigs v4, compact resource count 2^32-2",
            raw_request(32, 4, 1, None, true, &huge_compact()),
        ),
        (
            "IncrementalAlterConfigs v1, compact resource count 2^32-2",
            raw_request(44, 1, 1, None, true, &huge_compact()),
        ),
        (
            "Produce v7, topic count 2^31-1",
            raw_request(0, 7, 1, None, false, &[&produce_head[..], &HUGE_I32.to_be_bytes()].concat()),
        ),
        (
            "Produce v9, compact topic count 2^32-2",
            raw_request(0, 9, 1, None, true, &[compact_produce_head, huge_compact()].concat()),
        ),
        (
            "DeleteTopics v4, compact topic count 2^32-2",
            raw_request(20, 4, 1, None, true, &huge_compact()),
        ),
    ]
}

/// `test_proxy_robustness.py`'s `BAD_FRAMES`: frames the proxy must refuse itself.
fn refused_frames() -> Vec<(&'static str, Vec<u8>)> {
    let garbage = Rng::new(7).bytes(4096);
    let announced = i32::from_be_bytes([garbage[0], garbage[1], garbage[2], garbage[3]]);
    let max = kmp_config::Config::default().listener.max_request_frame_bytes;
    assert!(
        u32::try_from(announced).map_or(true, |size| size > max),
        "the garbage's first four bytes must announce a size the proxy refuses (they announce {announced}): pick another seed"
    );
    vec![
        ("random garbage", garbage),
        ("oversized length", [&i32::MAX.to_be_bytes()[..], b"xxxx"].concat()),
        ("negative length", [&(-5i32).to_be_bytes()[..], b"xxxx"].concat()),
        ("frame shorter than a request header", [&3i32.to_be_bytes()[..], b"abc"].concat()),
        ("unknown api key", raw_request(999, 0, 1, Some("kmp-test"), false, b"")),
        ("unsupported version of a known api", raw_request(3, 99, 1, Some("kmp-test"), false, b"")),
        ("truncated produce body", raw_request(0, 9, 1, Some("kmp-test"), false, b"\x05")),
    ]
}

/// ApiVersions v0 (header v1), by hand.
fn api_versions_v0(correlation_id: i32) -> Vec<u8> {
    raw_request(18, 0, correlation_id, Some("kmp-test"), false, b"")
}

/// Sends `frame` as the first bytes of a new connection, with another connection opened just
/// before it: the sender's connection must close within [`PATIENCE`], the other must still be
/// answered, and a new client must still get ApiVersions and Metadata through.
async fn only_its_connection_closes(proxy: &Proxy, name: &str, frame: &[u8], n: i32) {
    let mut alongside = TcpStream::connect(proxy.kafka).await.expect("open the connection alongside");
    let mut bad = TcpStream::connect(proxy.kafka).await.expect("open the attacking connection");
    // The proxy may close before it has taken every byte: a failed write is no failure here.
    let _ = bad.write_all(frame).await;
    assert!(
        closed_by_peer(&mut bad, PATIENCE).await,
        "the connection that sent '{name}' was not closed within {PATIENCE:?}"
    );
    assert!(proxy.alive(), "serve ended after '{name}'");
    let cid = 100 + n;
    alongside.write_all(&api_versions_v0(cid)).await.expect("write on the connection alongside");
    let answer = read_frame(&mut alongside, &format!("the connection opened alongside '{name}'")).await;
    assert_eq!(
        correlation_id(&answer),
        cid,
        "the connection opened alongside '{name}' gets its own ApiVersions answer"
    );
    round_trip(proxy, &format!("after '{name}'")).await;
}

#[tokio::test]
async fn a_tiny_frame_whose_array_count_claims_billions_closes_only_its_connection() {
    let panics = PanicWatch::start();
    let proxy = Proxy::start(|_| {}).await;
    for (n, (name, frame)) in array_count_frames().into_iter().enumerate() {
        assert!(frame.len() <= 40, "the attack frame '{name}' is tiny ({} bytes)", frame.len());
        only_its_connection_closes(&proxy, name, &frame, n as i32).await;
        panics.assert_none(&format!("after '{name}'"));
    }
    proxy.stop().await;
}

#[tokio::test]
async fn bad_lengths_garbage_and_unknown_apis_are_refused_by_the_proxy_and_close_only_their_connection() {
    let panics = PanicWatch::start();
    let proxy = Proxy::start(|_| {}).await;
    for (n, (name, frame)) in refused_frames().into_iter().enumerate() {
        let errors_before = proxy.metric(FRAME_ERRORS).await;
        only_its_connection_closes(&proxy, name, &frame, n as i32).await;
        let errors_after = proxy.metric(FRAME_ERRORS).await;
        assert!(
            errors_after > errors_before,
            "{FRAME_ERRORS} did not count '{name}' ({errors_before} -> {errors_after})"
        );
        let forwarded: Vec<_> = proxy.broker.received().into_iter().filter(|r| frame.starts_with(&r.frame)).collect();
        assert!(
            forwarded.is_empty(),
            "'{name}' was forwarded to the broker instead of refused by the proxy: {forwarded:?}"
        );
        panics.assert_none(&format!("after '{name}'"));
    }
    proxy.stop().await;
}

#[tokio::test]
async fn seeded_random_bytes_on_300_connections_never_take_the_proxy_down() {
    const SEED: u64 = 1234;
    const CONNECTIONS: usize = 300;
    let panics = PanicWatch::start();
    let proxy = Proxy::start(|_| {}).await;
    let errors_before = proxy.metric(FRAME_ERRORS).await;
    let mut rng = Rng::new(SEED);
    for i in 0..CONNECTIONS {
        let size = *rng.pick(&[0usize, 1, 3, 4, 8, 12, 64, 1000]);
        let head = if rng.next_u64().is_multiple_of(2) {
            size as i32
        } else {
            rng.range(-10, 10_000_000) as i32
        };
        let bytes = [&head.to_be_bytes()[..], &rng.bytes(size)].concat();
        let mut s = TcpStream::connect(proxy.kafka)
            .await
            .unwrap_or_else(|e| panic!("fuzz connection {i} (seed {SEED}): the proxy no longer accepts: {e}"));
        // The proxy may close before it has taken every byte.
        let _ = s.write_all(&bytes).await;
        drop(s);
    }
    round_trip(&proxy, &format!("after {CONNECTIONS} fuzzed connections (seed {SEED})")).await;
    assert!(proxy.alive(), "serve ended during the fuzzing (seed {SEED})");
    panics.assert_none(&format!("fuzzing with seed {SEED}"));
    let errors_after = proxy.metric(FRAME_ERRORS).await;
    assert!(
        errors_after > errors_before,
        "{CONNECTIONS} connections of random bytes (seed {SEED}) produced no frame error: the fuzzing reached no frame check ({errors_before} -> {errors_after})"
    );
    support::eventually(
        "every fuzzed connection is closed by the proxy (kmp_open_connections back to 0)",
        Duration::from_secs(30),
        || async { (proxy.metric("kmp_open_connections").await == 0.0).then_some(()) },
    )
    .await;
    proxy.stop().await;
}
