//! The routes' answers and the admin endpoint's caller rules, through `handle`.

use super::*;
use hyper::header::HeaderMap;

const LOOPBACKS: [&str; 3] = ["127.0.0.1:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000"];
const REMOTE: &str = "[::ffff:192.0.2.7]:5000";

fn control() -> Control {
    kmp_mirror_engine::Engine::idle(&kmp_config::EngineConfig::default()).control().clone()
}

async fn call(method: &str, uri: &str, body: &str, peer: &str, bearer: Option<&str>, auth: AdminAuth<'_>) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = bearer {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = handle(req, peer.parse().unwrap(), auth, BODY_TIMEOUT, &control(), None, None).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned())
}

const WITH_TOKEN: AdminAuth<'static> = AdminAuth {
    token: Some("let-me-in"),
    read_open: false,
    loopback: true,
};
const NO_TOKEN: AdminAuth<'static> = AdminAuth {
    token: None,
    read_open: false,
    loopback: true,
};

/// The body deadline `handle` gets in these tests.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);

/// A request body whose end never comes.
struct Endless;

impl hyper::body::Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

#[tokio::test]
async fn a_body_that_never_ends_is_answered_408_after_the_body_timeout() {
    for (method, uri) in [("POST", "/v1/mirrors"), ("PUT", "/v1/log-level")] {
        let req = Request::builder().method(method).uri(uri).body(Endless).unwrap();
        let started = std::time::Instant::now();
        let answered = tokio::time::timeout(
            Duration::from_secs(5),
            handle(req, "127.0.0.1:5000".parse().unwrap(), NO_TOKEN, BODY_TIMEOUT, &control(), None, None),
        )
        .await;
        let resp = answered.unwrap_or_else(|_| panic!("{method} {uri}: the handler still waits for the body after 5 s"));
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT, "{method} {uri}");
        assert!(started.elapsed() >= BODY_TIMEOUT, "{method} {uri}: {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn with_admin_loopback_off_loopback_callers_need_the_token_like_remote_ones() {
    let untrusted = AdminAuth { loopback: false, ..WITH_TOKEN };
    for peer in LOOPBACKS {
        let (status, _, _) = call("GET", "/v1/mirrors", "", peer, None, untrusted).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{peer}: a read without the token");
        let (status, _, _) = call("POST", "/v1/mirrors/nope/pause", r#"{"topics":[]}"#, peer, None, untrusted).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{peer}: a mutation without the token");
        let (status, _, _) = call("GET", "/v1/mirrors", "", peer, Some("let-me-in"), untrusted).await;
        assert_eq!(status, StatusCode::OK, "{peer}: a read with the token");
    }
}

#[tokio::test]
async fn loopback_callers_ipv4_mapped_included_may_read_and_mutate() {
    for peer in LOOPBACKS {
        let (status, _, _) = call("GET", "/v1/mirrors", "", peer, None, NO_TOKEN).await;
        assert_eq!(status, StatusCode::OK, "{peer}");
        let (status, _, _) = call("POST", "/v1/mirrors/nope/pause", r#"{"topics":[]}"#, peer, None, NO_TOKEN).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{peer}: let in, and the mirror does not exist");
    }
}

#[tokio::test]
async fn remote_reads_need_the_token_401_when_one_is_configured_403_when_none_is() {
    for uri in ["/v1/mirrors", "/v1/mirrors/x", "/v1/openapi.json"] {
        let (status, headers, _) = call("GET", uri, "", REMOTE, None, WITH_TOKEN).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(headers.get(hyper::header::WWW_AUTHENTICATE).is_some());
        let (status, _, _) = call("GET", uri, "", REMOTE, Some("wrong"), WITH_TOKEN).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}: a wrong token");
        let (status, _, body) = call("GET", uri, "", REMOTE, None, NO_TOKEN).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: no token configured");
        assert!(body.contains("admin_read_open"), "{body}");
    }
    let (status, _, body) = call("GET", "/v1/mirrors", "", REMOTE, Some("let-me-in"), WITH_TOKEN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("let-me-in"));
}

#[tokio::test]
async fn admin_read_open_opens_reads_only() {
    let open = AdminAuth {
        token: Some("let-me-in"),
        read_open: true,
        loopback: true,
    };
    let (status, _, _) = call("GET", "/v1/mirrors", "", REMOTE, None, open).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = call("POST", "/v1/mirrors/x/pause", r#"{"topics":[]}"#, REMOTE, None, open).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = call("DELETE", "/v1/mirrors/x", "", REMOTE, Some("wrong"), open).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = call("DELETE", "/v1/mirrors/x", "", REMOTE, Some("let-me-in"), open).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the token lets a mutation in");
}

#[tokio::test]
async fn the_log_level_route_has_the_read_and_mutation_rules_of_the_other_routes() {
    let (status, _, _) = call("GET", "/v1/log-level", "", REMOTE, None, WITH_TOKEN).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a remote read without the token");
    for (bearer, auth) in [(None, WITH_TOKEN), (Some("wrong"), WITH_TOKEN), (None, NO_TOKEN)] {
        let (status, _, body) = call("PUT", "/v1/log-level", r#"{"filter":"debug"}"#, REMOTE, bearer, auth).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a remote change with {bearer:?}: {body}");
    }
    // Let in (loopback, or the token): this test process set up no logging, so 503 says so;
    // an invalid body or filter is the caller's error first.
    let (status, _, body) = call("PUT", "/v1/log-level", r#"{"filter":"debug"}"#, REMOTE, Some("let-me-in"), WITH_TOKEN).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("not set up"), "{body}");
    let (status, _, body) = call("GET", "/v1/log-level", "", "127.0.0.1:1", None, NO_TOKEN).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, _, body) = call("PUT", "/v1/log-level", r#"{"level":"debug"}"#, "127.0.0.1:1", None, NO_TOKEN).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("filter"), "{body}");
    let (status, _, _) = call("PUT", "/v1/mirrors", "{}", "127.0.0.1:1", None, NO_TOKEN).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "PUT is only the log level's");
}

#[tokio::test]
async fn a_loopback_request_a_browser_was_made_to_send_for_another_site_needs_the_token() {
    let send = |headers: &'static [(&'static str, &'static str)], method: &'static str, auth: AdminAuth<'static>| async move {
        let mut req = Request::builder().method(method).uri("/v1/mirrors/nope/pause");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from_static(br#"{"topics":[]}"#))).unwrap();
        let resp = handle(req, "127.0.0.1:5000".parse().unwrap(), auth, BODY_TIMEOUT, &control(), None, None).await;
        let status = resp.status();
        (
            status,
            String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned(),
        )
    };
    let cross = &[("host", "127.0.0.1:9644"), ("origin", "https://evil.example"), ("content-type", "text/plain")];
    let (status, body) = send(cross, "POST", NO_TOKEN).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a cross-site form post: {body}");
    assert!(body.contains("Origin"), "{body}");
    let rebound = &[("host", "evil.example:9644")];
    let (status, body) = send(rebound, "GET", NO_TOKEN).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a read under a rebound DNS name: {body}");
    let with_token = &[("host", "evil.example:9644"), ("authorization", "Bearer let-me-in")];
    let (status, body) = send(with_token, "POST", WITH_TOKEN).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the token still lets it in (and the mirror does not exist): {body}"
    );
    let dashboard = &[("host", "127.0.0.1:9644"), ("origin", "http://127.0.0.1:9644")];
    let (status, body) = send(dashboard, "POST", NO_TOKEN).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the dashboard's own same-origin post is let in: {body}");
}

#[tokio::test]
async fn an_invalid_pattern_in_start_is_a_400_naming_it() {
    for body in [r#"{"include":["orders-("]}"#, r#"{"topics":["t"],"exclude":["[z-a]"]}"#] {
        let (status, _, text) = call("POST", "/v1/mirrors/any/start", body, "127.0.0.1:1", None, NO_TOKEN).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
        assert!(text.contains("pattern"), "{text}");
    }
    assert_eq!(kmp_config::check_request_patterns(&["orders-.*".into()], &["tmp".into()]), Ok(()));
}

#[tokio::test]
async fn patterns_too_expensive_to_compile_are_refused_quickly() {
    let body = format!(r#"{{"include": [{}]}}"#, [r#""\\w{200}""#; 6].join(","));
    let started = std::time::Instant::now();
    let refused = topics_body(body.as_bytes()).await.expect_err("over the regex size limit");
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    assert!(refused.contains("invalid include pattern"), "{refused}");
}

#[tokio::test]
async fn too_many_or_too_long_patterns_are_a_400_naming_the_limit() {
    let many = serde_json::to_string(&json!({ "include": vec!["t"; MAX_PATTERNS + 1] })).unwrap();
    let long = serde_json::to_string(&json!({ "exclude": ["a".repeat(MAX_PATTERN_LEN + 1)] })).unwrap();
    for (body, says) in [
        (many, "257 include patterns, more than the 256 allowed"),
        (long, "exclude pattern of 1025 bytes"),
    ] {
        let (status, _, text) = call("POST", "/v1/mirrors/any/start", &body, "127.0.0.1:1", None, NO_TOKEN).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains(says), "{text}");
    }
    let at_limits = serde_json::to_string(&json!({ "include": vec!["a".repeat(MAX_PATTERN_LEN); MAX_PATTERNS] })).unwrap();
    assert!(topics_body(at_limits.as_bytes()).await.is_ok());
}
