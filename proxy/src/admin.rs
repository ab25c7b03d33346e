//! The admin HTTP endpoint (hyper): `/healthz` (the process is up), `/readyz` (the upstream
//! cluster answered the last metadata refresh and the mirror engine has loaded its stored state), `/metrics` (Prometheus text format) and the
//! mirror management routes under `/v1` (owned by `rest`). Metrics are owned by `metrics`,
//! readiness by `refresh`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::server::Shared;

pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "admin endpoint listening");
    }
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(err) => {
                    debug!(%err, "admin accept failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move {
                    if req.uri().path().starts_with("/v1/") {
                        let token = shared.config.admin.token.clone();
                        return Ok::<_, Infallible>(crate::rest::handle(req, peer, token.as_deref(), &shared.mirrors.control).await);
                    }
                    Ok::<_, Infallible>(route(&req, &shared))
                }
            });
            if let Err(err) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                debug!(%err, "admin connection error");
            }
        });
    }
}

fn route(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            if !shared.ready.load(Ordering::Relaxed) {
                text(StatusCode::SERVICE_UNAVAILABLE, "upstream cluster not reachable\n".into())
            } else if !shared.mirrors.control.is_booted() {
                text(StatusCode::SERVICE_UNAVAILABLE, "mirror engine still loading its stored state\n".into())
            } else {
                text(StatusCode::OK, "ready\n".into())
            }
        }
        "/metrics" => {
            let mut body = shared.metrics.encode();
            // The mirror gauges go before the closing "# EOF" of the OpenMetrics text.
            let mirrors = crate::mirror_metrics::render(&shared.mirrors);
            match body.rfind("# EOF") {
                Some(at) => body.insert_str(at, &mirrors),
                None => body.push_str(&mirrors),
            }
            let mut r = text(StatusCode::OK, body);
            if let Ok(v) = "application/openmetrics-text; version=1.0.0; charset=utf-8".parse() {
                r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            r
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
