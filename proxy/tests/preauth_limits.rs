//! Before authentication nothing holds memory or time (`listener.auth.mode = "terminate"`, as
//! `tests/security/test_preauth_limits.py` checks against Kafka): a frame larger than
//! `listener.auth.max_receive_bytes` is refused at its length prefix — the connection closes at
//! once and the announced size is never allocated (every byte the process allocates meanwhile is
//! counted by an instrumented allocator); a client that has not authenticated within
//! `listener.auth.timeout_ms` is disconnected, not earlier; and after a real SCRAM login the same
//! oversized request is served. The proxy answers SASL itself here, so the broker stand-in is
//! only asked ApiVersions and Metadata.

mod support;

use std::alloc::System;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kmp_config::{AuthMode, ClientProperties, Config, PropsOrigin, SaslMechanism};
use kmp_protocol::client::Connection;
use kmp_protocol::codec::decode_response;
use kmp_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kmp_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest, SaslHandshakeRequest, SaslHandshakeResponse, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::security::ClientSecurity;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use support::{PATIENCE, Proxy, closed_by_peer, correlation_id, read_frame, request, string};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One test at a time: the allocator's counters are process-wide, so another test's allocations
/// would count in this one's measurement.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const USER: &str = "alice";
const PASSWORD: &str = "alice-secret-pw";
const HUGE: i32 = 90 * 1024 * 1024;
const CONNECTIONS: usize = 8;

/// A credentials file with [`USER`]'s SCRAM-SHA-256 credential, removed when dropped.
struct CredentialsFile(PathBuf);

impl CredentialsFile {
    fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!("kmp-preauth-{}-{test}.toml", std::process::id()));
        let entry = kmp_protocol::security::credentials::entry(USER, SaslMechanism::ScramSha256, PASSWORD, 4096).expect("a SCRAM credential");
        std::fs::write(&path, entry).expect("write the credentials file");
        Self(path)
    }
}

impl Drop for CredentialsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Termination mode with `file`; the authentication timeout long enough not to be what closes a
/// connection unless a test sets it.
fn terminating(c: &mut Config, file: &CredentialsFile) {
    c.listener.auth.mode = AuthMode::Terminate;
    c.listener.auth.credentials_file = Some(file.0.clone());
    c.listener.auth.timeout_ms = 120_000;
}

async fn handshake(s: &mut TcpStream, mechanism: &str, what: &str) {
    let mut req = SaslHandshakeRequest::default();
    req.mechanism = StrBytes::from_string(mechanism.to_owned());
    s.write_all(&request(&req, 1, 1, "kmp-preauth")).await.expect("send SaslHandshake");
    let frame = read_frame(s, &format!("{what}: SaslHandshake")).await;
    let (_, resp) = decode_response::<SaslHandshakeResponse>(&frame, ApiKey::SaslHandshake, 1).expect("a SaslHandshake v1 answer");
    assert_eq!(resp.error_code, 0, "{what}: SaslHandshake for {mechanism} accepted");
}

/// Metadata v12 naming 64 topics of 40 characters: about 3 KiB.
fn big_metadata() -> MetadataRequest {
    let mut req = MetadataRequest::default();
    req.topics = Some(
        (0..64)
            .map(|i| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(format!("preauth-topic-{i:026}"))));
                t
            })
            .collect(),
    );
    req
}

#[tokio::test]
async fn a_90_mib_frame_before_authentication_is_refused_at_its_length_without_being_allocated() {
    let _one_at_a_time = SERIAL.lock().await;
    let file = CredentialsFile::new("huge");
    assert!(
        HUGE as u32 <= Config::default().listener.max_request_frame_bytes,
        "the frame must be refused by the pre-authentication cap, not by listener.max_request_frame_bytes"
    );
    let proxy = Proxy::start(|c| terminating(c, &file)).await;
    let errors_before = proxy.metric("kmp_frame_errors_total{side=\"client\"}").await;

    // SaslAuthenticate v1 announcing a 90 MiB client-first message, and its first 4 KiB.
    let frame = [
        &HUGE.to_be_bytes()[..],
        &36i16.to_be_bytes(),
        &1i16.to_be_bytes(),
        &2i32.to_be_bytes(),
        &string(Some("kmp-sec")),
        &[0u8; 4096],
    ]
    .concat();
    let region = Region::new(GLOBAL);
    let mut socks = Vec::new();
    for i in 0..CONNECTIONS {
        let mut s = TcpStream::connect(proxy.kafka).await.expect("connect to the proxy");
        handshake(&mut s, "SCRAM-SHA-256", &format!("connection {i}")).await;
        // The proxy may close before it has taken every byte.
        let _ = s.write_all(&frame).await;
        socks.push(s);
    }
    let started = Instant::now();
    for (i, s) in socks.iter_mut().enumerate() {
        assert!(
            closed_by_peer(s, Duration::from_secs(5)).await,
            "connection {i}: a 90 MiB frame before authentication was not refused within 5 s of it (the authentication timeout is 120 s)"
        );
    }
    let change = region.change();
    let allocated = change.bytes_allocated + change.bytes_reallocated.max(0) as usize;
    assert!(
        allocated < 16 << 20,
        "{CONNECTIONS} announced 90 MiB frames made the process allocate {} MiB (refused in {:?})",
        allocated >> 20,
        started.elapsed()
    );
    let errors_after = proxy.metric("kmp_frame_errors_total{side=\"client\"}").await;
    assert!(
        errors_after - errors_before >= CONNECTIONS as f64,
        "every refused frame is counted as a client frame error ({errors_before} -> {errors_after})"
    );
    assert!(proxy.alive(), "serve ended after {CONNECTIONS} oversized pre-authentication frames");
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_that_does_not_authenticate_in_time_is_disconnected_not_earlier() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let _one_at_a_time = SERIAL.lock().await;
    let file = CredentialsFile::new("timeout");
    let proxy = Proxy::start(|c| {
        terminating(c, &file);
        c.listener.auth.timeout_ms = TIMEOUT.as_millis() as u64;
    })
    .await;

    let connecting = Instant::now();
    let mut s = TcpStream::connect(proxy.kafka).await.expect("connect to the proxy");
    s.write_all(&request(&ApiVersionsRequest::default(), 0, 7, "kmp-preauth"))
        .await
        .expect("send ApiVersions");
    let answer = read_frame(&mut s, "ApiVersions before authentication").await;
    assert_eq!(correlation_id(&answer), 7, "ApiVersions is answered before authentication");
    handshake(&mut s, "SCRAM-SHA-256", "the client that never authenticates").await;
    assert!(
        closed_by_peer(&mut s, TIMEOUT + PATIENCE).await,
        "a connection that never authenticated was still open {:?} after its handshake",
        TIMEOUT + PATIENCE
    );
    let waited = connecting.elapsed();
    assert!(
        waited >= TIMEOUT,
        "closed {waited:?} after connecting, before listener.auth.timeout_ms ({TIMEOUT:?})"
    );
    assert_eq!(
        proxy.metric("kmp_connections_closed_by_limit_total{reason=\"authentication_timeout\"}").await,
        1.0,
        "the close is counted as an authentication timeout"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_over_the_preauth_cap_is_refused_before_a_scram_login_and_served_after_it() {
    const CAP: u32 = 1024;
    let _one_at_a_time = SERIAL.lock().await;
    let file = CredentialsFile::new("login");
    let proxy = Proxy::start(|c| {
        terminating(c, &file);
        c.listener.auth.max_receive_bytes = CAP;
    })
    .await;
    let big = request(&big_metadata(), 12, 1, "kmp-preauth");
    assert!(big.len() > 2 * CAP as usize, "the request ({} bytes) is over the cap of {CAP}", big.len());

    let mut anonymous = TcpStream::connect(proxy.kafka).await.expect("connect to the proxy");
    let _ = anonymous.write_all(&big).await;
    assert!(
        closed_by_peer(&mut anonymous, PATIENCE).await,
        "a {}-byte request before authentication was not refused (listener.auth.max_receive_bytes = {CAP})",
        big.len()
    );
    assert!(
        !proxy.broker.received().iter().any(|r| r.frame == big),
        "the refused request reached the broker"
    );

    let jaas = format!("org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{USER}\" password=\"{PASSWORD}\";");
    let props = ClientProperties(BTreeMap::from([
        ("security.protocol".to_owned(), "SASL_PLAINTEXT".to_owned()),
        ("sasl.mechanism".to_owned(), "SCRAM-SHA-256".to_owned()),
        ("sasl.jaas.config".to_owned(), jaas),
    ]))
    .parse(PropsOrigin::ConfigFile)
    .expect("SCRAM client properties");
    let security = ClientSecurity::build(&props).expect("a SCRAM client");
    let mut conn = Connection::connect_with(&proxy.kafka.to_string(), PATIENCE, "kmp-preauth", &security)
        .await
        .expect("a SCRAM-SHA-256 login through the proxy");
    let md = tokio::time::timeout(PATIENCE, conn.send(&big_metadata(), 12))
        .await
        .expect("the large Metadata after login is answered within 10 s")
        .expect("an authenticated client's request over the pre-authentication cap is served");
    assert!(!md.brokers.is_empty(), "the Metadata answer lists the broker");
    proxy.stop().await;
}
