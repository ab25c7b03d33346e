//! Accepting client connections on one listener: connection limits (`limits`), the per-connection
//! span, the TLS handshake (the client listener's `tls`, via `net::tls`), opening the upstream
//! connection (with the proxy's login when the client listener terminates SASL), and handing both
//! to `session`. Accept errors back off in `net::accept`; a failed handshake closes
//! that connection only.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kmp_mirror_engine::Backoff;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, info_span, warn};

use crate::filters::Chain;
use crate::filters::api::Conn;
use crate::net::accept::accept_loop;
use crate::session;
use crate::shared::Shared;
use crate::upstream::connect::Target;

/// A client listener as its accept loops serve it (its bootstrap listener and one per broker).
pub(crate) struct Door {
    /// Index among the configured client listeners (its broker addresses in `cluster`).
    pub(crate) index: usize,
    pub(crate) spec: Arc<kmp_config::ClientListener>,
    /// Its TLS identity, reloadable.
    pub(crate) tls: Option<Arc<crate::net::tls::TlsIdentity>>,
    /// Its filter chain (its authentication mode decides SASL handling).
    pub(crate) chain: Arc<Chain>,
}

impl Door {
    fn terminates(&self) -> bool {
        self.spec.auth.mode == kmp_config::AuthMode::Terminate
    }
}

/// First and longest back-off after a failed accept.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Accepts connections on `listener` until `stop`; every session holds a clone of `drain`.
pub(crate) async fn run(listener: TcpListener, target: Target, shared: Arc<Shared>, door: Arc<Door>, stop: watch::Receiver<bool>, drain: mpsc::Sender<()>) {
    let what = if door.spec.name == "default" {
        target.to_string()
    } else {
        format!("{target} of listener {}", door.spec.name)
    };
    let backoff = Backoff::new(BACKOFF.0, BACKOFF.1);
    accept_loop(listener, &what, backoff, stop.clone(), |client, peer| {
        let slot = match shared.limits.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                shared.metrics.connection_refused(limit);
                warn!(%peer, %target, listener = %door.spec.name, limit, "connection refused: limits.{limit} reached");
                drop(client);
                return;
            }
        };
        let _ = client.set_nodelay(true);
        let id = shared.next_connection_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, %target, listener = %door.spec.name);
        let (shared, door, stop, drain) = (shared.clone(), door.clone(), stop.clone(), drain.clone());
        tokio::spawn(
            async move {
                let _drain = drain;
                let _slot = slot;
                shared.metrics.connections.inc();
                shared.metrics.open_connections.inc();
                let result = serve(client, peer, target, &shared, door, stop).await;
                shared.metrics.open_connections.dec();
                match result {
                    Ok(()) => tracing::debug!("connection closed"),
                    Err(e) => tracing::info!(error = %e, side = ?e.side(), "connection closed with error"),
                }
            }
            .instrument(span),
        );
    })
    .await;
}

/// A client connection after the handshake: plain TCP, or TLS with the certificate subject.
enum Accepted {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>, Option<String>),
}

/// One accepted connection: TLS handshake (if configured), then the upstream connection opened
/// alongside the session.
async fn serve(
    client: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    target: Target,
    shared: &Arc<Shared>,
    door: Arc<Door>,
    stop: watch::Receiver<bool>,
) -> Result<(), crate::error::ProxyError> {
    let client = match &door.tls {
        None => Accepted::Plain(client),
        Some(identity) => {
            // A handshake is a few round trips: bounded by the frame timeout, at most 10 s.
            let timeout = Duration::from_millis(shared.config.limits.frame_read_timeout_ms.min(10_000));
            match crate::net::tls::accept(identity, client, timeout).await {
                Ok((tls, principal)) => Accepted::Tls(Box::new(tls), principal),
                Err(why) => {
                    shared.metrics.connection_closed("tls_handshake");
                    tracing::info!(%why, "client TLS handshake failed");
                    return Ok(());
                }
            }
        }
    };
    // Opened when the session first writes a request (a first ApiVersions may be answered early
    // meanwhile, see `early_versions`): a client that connects and sends nothing, fails its TLS
    // handshake or (termination mode) has not authenticated holds no broker connection.
    let opening = shared.clone();
    let authenticate = door.terminates();
    let upstream: session::Connecting<_> = Box::pin(
        async move {
            match opening.connector.connect(target, &opening.cluster, authenticate).await {
                Ok((opened, addr)) => {
                    tracing::debug!(upstream = %addr, "connected");
                    Ok(opened)
                }
                Err(e) => {
                    opening.metrics.upstream_connect_errors.inc();
                    Err(e)
                }
            }
        }
        .in_current_span(),
    );
    let conn = |principal| Arc::new(Conn::new(shared.clone(), peer, principal, door.spec.clone(), door.index));
    let chain = door.chain.clone();
    match client {
        Accepted::Plain(tcp) => session::run(tcp, upstream, target, conn(None), chain, stop).await,
        Accepted::Tls(tls, principal) => {
            if let Some(p) = &principal {
                tracing::debug!(principal = %p, "client certificate accepted");
            }
            session::run(*tls, upstream, target, conn(principal), chain, stop).await
        }
    }
}
