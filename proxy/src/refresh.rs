//! Background upstream probe and metadata refresh, every `metadata_refresh_interval_ms`:
//! * readiness (`/readyz`) is "a bootstrap broker answers ApiVersions", which a broker allows
//!   before authentication, so a SASL-only upstream still reads as reachable;
//! * a Metadata request discovers brokers that joined, so they get a listener without any client
//!   asking. On a listener that requires authentication it fails (the proxy has no credentials of
//!   its own yet): brokers are then learned from clients' Metadata responses only;
//! * on first contact the broker's ApiVersions are compared with the audited table and anything
//!   unaudited is logged (it is clamped away from clients).
//!
//! Failures are logged when the state changes, not on every tick.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::messages::MetadataRequest;
use kmp_protocol::rewrite::UpstreamNode;
use kmp_protocol::{ProtocolError, versions};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::shared::Shared;

/// Metadata version used for the proxy's own requests (supported by every Kafka 4.x broker).
const METADATA_VERSION: i16 = 12;

#[derive(Default)]
struct State {
    audited: bool,
    metadata_ok: Option<bool>,
}

pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let interval = Duration::from_millis(shared.config.upstream.metadata_refresh_interval_ms);
    let mut state = State::default();
    loop {
        let was_ready = shared.ready.load(Ordering::Relaxed);
        match probe(&shared, &mut state).await {
            Ok(mut conn) => {
                shared.ready.store(true, Ordering::Relaxed);
                if !was_ready {
                    info!(broker = conn.addr(), "upstream cluster reachable");
                }
                refresh_metadata(&shared, &mut conn, &mut state).await;
            }
            Err(e) => {
                shared.ready.store(false, Ordering::Relaxed);
                if was_ready || state.metadata_ok.is_none() {
                    warn!(error = %e, "upstream cluster not reachable");
                }
                state.metadata_ok.get_or_insert(false);
            }
        }
        // Retry sooner while the upstream is not answering.
        let wait = if shared.ready.load(Ordering::Relaxed) {
            interval
        } else {
            interval.min(Duration::from_secs(1))
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Connects to a bootstrap broker and exchanges ApiVersions (auditing them the first time).
async fn probe(shared: &Shared, state: &mut State) -> Result<Connection, ProtocolError> {
    let timeout = Duration::from_millis(shared.config.upstream.connect_timeout_ms);
    let mut last = None;
    for addr in shared.connector.bootstrap_order() {
        let attempt = async {
            let mut conn = Connection::connect_with(&addr, timeout, "kafka-mirror-proxy", shared.connector.own_security()).await?;
            let announced = tokio::time::timeout(timeout, conn.api_versions()).await.map_err(|_| ProtocolError::Connect {
                addr: addr.clone(),
                detail: "ApiVersions timed out".into(),
            })??;
            Ok::<_, ProtocolError>((conn, announced))
        };
        match attempt.await {
            Ok((conn, announced)) => {
                if !state.audited {
                    for finding in versions::unaudited(&announced) {
                        warn!(broker = %addr, ?finding, "upstream announces an API version the proxy has not audited; it is hidden from clients");
                    }
                    state.audited = true;
                }
                return Ok(conn);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(ProtocolError::Connect {
        addr: "(none)".into(),
        detail: "no bootstrap servers".into(),
    }))
}

async fn refresh_metadata(shared: &Shared, conn: &mut Connection, state: &mut State) {
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    match conn.send(&req, METADATA_VERSION).await {
        Ok(resp) => {
            for b in &resp.brokers {
                shared.cluster.observe(UpstreamNode {
                    node_id: b.node_id.0,
                    host: b.host.as_str().to_owned(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.as_str().to_owned()),
                });
                shared.cluster.ensure_listeners(b.node_id.0);
            }
            shared.metrics.metadata_refreshes.inc();
            shared.metrics.known_brokers.set(resp.brokers.len() as i64);
            if state.metadata_ok != Some(true) {
                info!(brokers = resp.brokers.len(), "metadata refresh working");
            }
            debug!(brokers = resp.brokers.len(), "metadata refreshed");
            state.metadata_ok = Some(true);
        }
        Err(e) => {
            shared.metrics.metadata_refresh_errors.inc();
            if state.metadata_ok != Some(false) {
                warn!(error = %e, "metadata refresh failed (brokers are still learned from client traffic); upstream listeners that require authentication cannot be refreshed by the proxy yet");
            }
            state.metadata_ok = Some(false);
        }
    }
}
