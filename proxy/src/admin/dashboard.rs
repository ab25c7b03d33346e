//! The live dashboard on the admin endpoint: the page (`/dashboard/`, its script, style sheet and icon,
//! embedded in the binary, no build step) and the one JSON document it polls
//! (`/dashboard/api/state`: every mirror, its topics and partitions — REST's partition view plus
//! lag in seconds and replication latency, `partition_view` — and metadata-sync status). The page's own files answer
//! anyone (they hold no data); the state document has exactly the REST read rules
//! (`rest::AdminAuth`), and the page's pause / resume / stop buttons call the REST routes under
//! `/v1`, so they go through the same authorization. Every answer carries a Content-Security-Policy
//! that allows only same-origin scripts, styles and fetches.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};
use kmp_mirror_engine::Control;
use serde_json::{Value, json};

use super::partition_view::DashboardPartition;
use super::rest::AdminAuth;

/// The page, its script, its style sheet and its icon (`proxy/src/dashboard/`).
const INDEX_HTML: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const STYLE_CSS: &str = include_str!("dashboard/style.css");
const FAVICON_SVG: &str = include_str!("dashboard/favicon.svg");

/// Same-origin only: no inline script, no external asset, no framing, no form posts elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `path` belongs to the dashboard (the admin router sends those here).
pub(crate) fn owns(path: &str) -> bool {
    path == "/dashboard" || path.starts_with("/dashboard/")
}

/// Answers a dashboard request: the embedded files to anyone, the state document to callers that
/// pass the REST read check.
pub(crate) async fn handle(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    peer: std::net::SocketAddr,
    auth: AdminAuth<'_>,
    control: &Control,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return asset(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "the dashboard only answers GET\n");
    }
    match path {
        "/dashboard" => {
            let mut r = asset(StatusCode::MOVED_PERMANENTLY, "text/plain; charset=utf-8", "see /dashboard/\n");
            r.headers_mut().insert(hyper::header::LOCATION, HeaderValue::from_static("/dashboard/"));
            r
        }
        "/dashboard/" | "/dashboard/index.html" => asset(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML),
        "/dashboard/app.js" => asset(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS),
        "/dashboard/style.css" => asset(StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS),
        "/dashboard/favicon.svg" => asset(StatusCode::OK, "image/svg+xml", FAVICON_SVG),
        "/dashboard/api/state" => {
            if let Some(refused) = auth.refuse_read(headers, peer) {
                return secured(refused);
            }
            if !control.wait_booted().await {
                return json(StatusCode::SERVICE_UNAVAILABLE, json!({ "message": kmp_mirror_engine::LOADING }));
            }
            json(StatusCode::OK, state(control, kmp_mirror_engine::now_ms()))
        }
        _ => asset(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n"),
    }
}

/// The document the page renders: every mirror with its topics (desired state, partitions) and
/// its metadata-sync status, plus whether this proxy is a follower (which refuses changes).
pub(crate) fn state(control: &Control, now_ms: i64) -> Value {
    let mirrors: Vec<Value> = control
        .list()
        .into_iter()
        .map(|m| {
            let described = control.describe(&m.name);
            let mut names = m.topics.clone();
            for (topic, _) in &described {
                if !names.contains(topic) {
                    names.push(topic.clone());
                }
            }
            names.sort();
            let topics: Vec<Value> = names
                .iter()
                .map(|topic| {
                    let mut parts: Vec<DashboardPartition> = described
                        .iter()
                        .filter(|(t, _)| t == topic)
                        .flat_map(|(_, parts)| parts.iter())
                        .map(|p| DashboardPartition::of(p, now_ms))
                        .collect();
                    parts.sort_by_key(|p| p.view.partition);
                    json!({ "topic": topic, "desired": control.desired(topic).map(|d| d.as_str()), "partitions": parts })
                })
                .collect();
            let sync: Vec<Value> = control
                .sync_status(&m.name)
                .into_iter()
                .map(|(kind, s)| {
                    let mut v = super::rest::sync_json(&s);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("kind".into(), Value::from(kind.as_str()));
                    }
                    v
                })
                .collect();
            json!({ "name": m.name, "source_bootstrap": m.source_bootstrap, "topics": topics, "sync": sync })
        })
        .collect();
    json!({ "now_ms": now_ms, "follower": control.is_follower(), "mirrors": mirrors })
}

fn asset(status: StatusCode, content_type: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secured(r)
}

fn json(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    secured(r)
}

/// The headers every dashboard answer carries: the CSP, no MIME sniffing, no caching (the
/// embedded files change with the binary), no framing, no referrer.
fn secured(mut r: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let h = r.headers_mut();
    h.insert(hyper::header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(hyper::header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(hyper::header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(hyper::header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn control() -> Control {
        kmp_mirror_engine::Engine::idle(&kmp_config::EngineConfig::default()).control().clone()
    }

    async fn get(path: &str, peer: &str, bearer: Option<&str>, auth: AdminAuth<'_>) -> (StatusCode, HeaderMap, String) {
        let mut headers = HeaderMap::new();
        if let Some(t) = bearer {
            headers.insert(hyper::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        }
        let r = handle(&Method::GET, path, &headers, peer.parse().unwrap(), auth, &control()).await;
        let (parts, body) = r.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned())
    }

    const TOKEN: AdminAuth<'static> = AdminAuth {
        token: Some("let-me-in"),
        read_open: false,
        loopback: true,
    };
    const REMOTE: &str = "192.0.2.7:4000";

    #[tokio::test]
    async fn the_page_answers_anyone_with_a_same_origin_csp() {
        for (path, kind) in [
            ("/dashboard/", "text/html"),
            ("/dashboard/app.js", "text/javascript"),
            ("/dashboard/style.css", "text/css"),
        ] {
            let (status, headers, body) = get(path, REMOTE, None, TOKEN).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(headers[hyper::header::CONTENT_TYPE].to_str().unwrap().starts_with(kind), "{path}");
            let csp = headers[hyper::header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"), "{path}: {csp}");
            assert!(!body.is_empty());
        }
        let (status, headers, _) = get("/dashboard", REMOTE, None, TOKEN).await;
        assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(headers[hyper::header::LOCATION], "/dashboard/");
    }

    #[test]
    fn the_page_loads_no_external_asset_and_no_inline_script() {
        assert!(!INDEX_HTML.contains("http://") && !INDEX_HTML.contains("https://"), "no external asset");
        assert!(INDEX_HTML.contains("<script src=\"app.js\""), "the script is a file");
        assert!(
            !INDEX_HTML.contains("<script>") && !INDEX_HTML.contains("style="),
            "nothing inline (the CSP forbids it)"
        );
        assert!(
            !APP_JS.contains("innerHTML") && !APP_JS.contains("insertAdjacentHTML"),
            "server strings never parsed as HTML"
        );
    }

    #[tokio::test]
    async fn the_state_document_has_the_rest_read_rules() {
        let (status, headers, _) = get("/dashboard/api/state", REMOTE, None, TOKEN).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "remote without the token");
        assert!(headers.get(hyper::header::WWW_AUTHENTICATE).is_some());
        let (status, _, _) = get("/dashboard/api/state", REMOTE, Some("wrong"), TOKEN).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "remote with a wrong token");
        let none = AdminAuth {
            token: None,
            read_open: false,
            loopback: true,
        };
        let (status, _, _) = get("/dashboard/api/state", REMOTE, None, none).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "no token configured: no way in from remote");
        let (status, _, body) = get("/dashboard/api/state", REMOTE, Some("let-me-in"), TOKEN).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["mirrors"], json!([]), "{v}");
        assert_eq!(v["follower"], json!(false));
        let (status, _, _) = get("/dashboard/api/state", "127.0.0.1:4000", None, TOKEN).await;
        assert_eq!(status, StatusCode::OK, "loopback");
    }

    #[tokio::test]
    async fn only_get_is_answered() {
        let r = handle(
            &Method::POST,
            "/dashboard/api/state",
            &HeaderMap::new(),
            "127.0.0.1:1".parse().unwrap(),
            TOKEN,
            &control(),
        )
        .await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(owns("/dashboard") && owns("/dashboard/x") && !owns("/dashboardx") && !owns("/v1/mirrors"));
    }
}
