//! Background metadata refresh: the proxy asks the upstream cluster for its brokers on an
//! interval, so brokers that join get a listener without any client asking, and `/readyz`
//! reflects whether the upstream answers. On the first contact it also compares the broker's
//! ApiVersions with the audited table and warns about anything unaudited (it is clamped away).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::messages::MetadataRequest;
use kmp_protocol::rewrite::{NodeAddresses, UpstreamNode};
use kmp_protocol::{ProtocolError, versions};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::server::Shared;

/// Metadata version used for the proxy's own requests (supported by every Kafka 4.x broker).
const METADATA_VERSION: i16 = 12;

pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let interval = Duration::from_millis(shared.config.upstream.metadata_refresh_interval_ms);
    let mut conn: Option<Connection> = None;
    let mut checked_versions = false;
    loop {
        match refresh_once(&shared, &mut conn, &mut checked_versions).await {
            Ok(n) => {
                shared.ready.store(true, Ordering::Relaxed);
                shared.metrics.metadata_refreshes.inc();
                shared.metrics.known_brokers.set(shared.cluster.known_nodes() as i64);
                debug!(brokers = n, "metadata refreshed");
            }
            Err(e) => {
                conn = None;
                shared.ready.store(false, Ordering::Relaxed);
                shared.metrics.metadata_refresh_errors.inc();
                warn!(error = %e, "metadata refresh failed");
            }
        }
        // Retry sooner while the upstream is not answering.
        let wait = if shared.ready.load(Ordering::Relaxed) { interval } else { interval.min(Duration::from_secs(1)) };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn refresh_once(shared: &Shared, conn: &mut Option<Connection>, checked_versions: &mut bool) -> Result<usize, ProtocolError> {
    if conn.is_none() {
        let timeout = Duration::from_millis(shared.config.upstream.connect_timeout_ms);
        let mut last = None;
        for addr in shared.connector.bootstrap_order() {
            match Connection::connect(&addr, timeout, "kafka-mirror-proxy").await {
                Ok(c) => {
                    *conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if conn.is_none() {
            return Err(last.unwrap_or(ProtocolError::Connect { addr: "(none)".into(), detail: "no bootstrap servers".into() }));
        }
    }
    let Some(c) = conn.as_mut() else { return Ok(0) };
    if !*checked_versions {
        for finding in versions::unaudited(&c.api_versions().await?) {
            warn!(broker = c.addr(), ?finding, "upstream announces an API version the proxy has not audited; it is hidden from clients");
        }
        *checked_versions = true;
    }
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let resp = c.send(&req, METADATA_VERSION).await?;
    for b in &resp.brokers {
        let node = UpstreamNode {
            node_id: b.node_id.0,
            host: b.host.as_str().to_owned(),
            port: b.port,
            rack: b.rack.as_ref().map(|r| r.as_str().to_owned()),
        };
        shared.cluster.observe(node);
        shared.cluster.ensure_listener(b.node_id.0);
    }
    Ok(resp.brokers.len())
}
