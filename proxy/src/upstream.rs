//! Opening upstream connections: which broker a client connection maps to (any bootstrap broker
//! for the bootstrap listener, broker N for node listener N) and the TCP connect itself.
//!
//! This is the seam where TLS (tokio-rustls) and SASL toward the brokers plug in: callers get an
//! [`UpstreamStream`] and never see how it was made. Forwarding frames belongs to `session`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::cluster::ClusterView;
use crate::error::ProxyError;

/// The stream type of an upstream connection (plain TCP today).
pub(crate) type UpstreamStream = TcpStream;

/// What a client listener forwards to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Any reachable bootstrap broker.
    Bootstrap,
    /// One specific broker.
    Node(i32),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bootstrap => f.write_str("bootstrap"),
            Self::Node(id) => write!(f, "node-{id}"),
        }
    }
}

pub(crate) struct Connector {
    bootstrap: Vec<String>,
    next: AtomicUsize,
    timeout: Duration,
}

impl Connector {
    pub(crate) fn new(bootstrap: Vec<String>, timeout: Duration) -> Self {
        Self {
            bootstrap,
            next: AtomicUsize::new(0),
            timeout,
        }
    }

    /// Opens a connection for `target`.
    pub(crate) async fn connect(&self, target: Target, cluster: &ClusterView) -> Result<(UpstreamStream, String), ProxyError> {
        match target {
            Target::Node(id) => match cluster.upstream_addr(id) {
                Some(addr) => Ok((self.connect_addr(&addr).await?, addr)),
                None => {
                    warn!(node_id = id, "no known address for broker yet; using a bootstrap broker");
                    self.connect_bootstrap().await
                }
            },
            Target::Bootstrap => self.connect_bootstrap().await,
        }
    }

    /// The bootstrap brokers in the order to try them next (rotating).
    pub(crate) fn bootstrap_order(&self) -> Vec<String> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.bootstrap.len();
        (0..n).map(|i| self.bootstrap[(start + i) % n].clone()).collect()
    }

    async fn connect_bootstrap(&self) -> Result<(UpstreamStream, String), ProxyError> {
        let mut last = None;
        for addr in self.bootstrap_order() {
            match self.connect_addr(&addr).await {
                Ok(s) => return Ok((s, addr)),
                Err(e) => {
                    debug!(%addr, error = %e, "bootstrap broker unreachable, trying the next");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(ProxyError::NoUpstream))
    }

    pub(crate) async fn connect_addr(&self, addr: &str) -> Result<UpstreamStream, ProxyError> {
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ProxyError::UpstreamConnect {
                addr: addr.to_owned(),
                detail: format!("timed out after {:?}", self.timeout),
            })?
            .map_err(|e| ProxyError::UpstreamConnect {
                addr: addr.to_owned(),
                detail: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}
