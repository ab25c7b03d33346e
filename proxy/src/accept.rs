//! Accepting client connections on one listener: connection limits (`limits`), the per-connection
//! span, opening the upstream connection, and handing both to `session`. Accept errors (out of
//! file descriptors and the like) back off instead of spinning.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, info_span, warn};

use crate::filters::{Chain, Conn};
use crate::session;
use crate::shared::Shared;
use crate::upstream::Target;

/// First and longest back-off after a failed accept.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Accepts connections on `listener` until `stop`; every session holds a clone of `drain`.
pub(crate) async fn run(
    listener: TcpListener,
    target: Target,
    shared: Arc<Shared>,
    chain: Arc<Chain>,
    mut stop: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let mut backoff = BACKOFF.0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let (client, peer) = match accepted {
            Ok(a) => {
                backoff = BACKOFF.0;
                a
            }
            Err(err) => {
                warn!(%target, %err, ?backoff, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF.1);
                continue;
            }
        };
        let slot = match shared.limits.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                shared.metrics.connection_refused(limit);
                warn!(%peer, %target, limit, "connection refused: limits.{limit} reached");
                drop(client);
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let id = shared.next_connection_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, %target);
        let (shared, chain, stop, drain) = (shared.clone(), chain.clone(), stop.clone(), drain.clone());
        tokio::spawn(
            async move {
                let _drain = drain;
                let _slot = slot;
                shared.metrics.connections.inc();
                shared.metrics.open_connections.inc();
                let result = match shared.connector.connect(target, &shared.cluster).await {
                    Ok((upstream, addr)) => {
                        tracing::debug!(upstream = %addr, "connected");
                        let conn = Arc::new(Conn::new(shared.clone(), peer));
                        session::run(client, upstream, conn, chain, stop).await
                    }
                    Err(e) => {
                        shared.metrics.upstream_connect_errors.inc();
                        Err(e)
                    }
                };
                shared.metrics.open_connections.dec();
                match result {
                    Ok(()) => tracing::debug!("connection closed"),
                    Err(e) => tracing::info!(error = %e, side = ?e.side(), "connection closed with error"),
                }
            }
            .instrument(span),
        );
    }
}
