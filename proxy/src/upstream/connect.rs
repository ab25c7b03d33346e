//! Opening upstream connections: which broker a client connection maps to (any bootstrap broker
//! for the bootstrap listener, broker N for node listener N) and the TCP connect itself.
//!
//! TLS and SASL toward the brokers (`[upstream.properties]`) happen in the connect: callers get an
//! [`UpstreamStream`] ready for requests and never see how it was made. In pass-through mode client
//! connections get the transport only (clients authenticate themselves); in termination mode and
//! for the proxy's own connections the proxy's SASL login runs too. Forwarding frames belongs to
//! `session`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kmp_protocol::ProtocolError;
use kmp_protocol::security::{BrokerStream, ClientSecurity};
use tracing::{debug, warn};

use crate::error::ProxyError;
use crate::upstream::cluster::ClusterView;

/// The stream type of an upstream connection (TCP or TLS, authenticated when configured).
pub(crate) type UpstreamStream = BrokerStream;

/// An opened upstream connection and, in termination mode, the proxy's SASL session on it (the
/// session renews it before the broker's lifetime ends, `session`).
pub(crate) type Opened = (UpstreamStream, Option<kmp_protocol::security::Session>);

/// What a client listener forwards to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// What client connections of pass-through listeners use upstream: the transport only.
    transport: Arc<ClientSecurity>,
    /// What the proxy's own connections use (metadata refresh, readiness): with its SASL login.
    own: Arc<ClientSecurity>,
}

impl Connector {
    /// `own`: the destination's full client security (client connections of a terminating
    /// listener authenticate upstream with it; others get its transport only).
    pub(crate) fn new(bootstrap: Vec<String>, timeout: Duration, own: Arc<ClientSecurity>) -> Self {
        Self {
            bootstrap,
            next: AtomicUsize::new(0),
            timeout,
            transport: Arc::new(own.transport_only()),
            own,
        }
    }

    /// The security of the proxy's own connections to the destination.
    pub(crate) fn own_security(&self) -> &ClientSecurity {
        &self.own
    }

    /// Opens a client connection's upstream connection for `target`; `authenticate`: with the
    /// proxy's own login (the client's listener terminates SASL), else the transport only.
    pub(crate) async fn connect(&self, target: Target, cluster: &ClusterView, authenticate: bool) -> Result<(Opened, String), ProxyError> {
        let security = if authenticate { &self.own } else { &self.transport };
        match target {
            Target::Node(id) => match cluster.upstream_addr(id) {
                Some(addr) => Ok((self.connect_addr(security, &addr).await?, addr)),
                None => {
                    warn!(node_id = id, "no known address for broker yet; using a bootstrap broker");
                    self.connect_bootstrap(security).await
                }
            },
            Target::Bootstrap => self.connect_bootstrap(security).await,
        }
    }

    /// The bootstrap brokers in the order to try them next (rotating).
    pub(crate) fn bootstrap_order(&self) -> Vec<String> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.bootstrap.len();
        (0..n).map(|i| self.bootstrap[(start + i) % n].clone()).collect()
    }

    async fn connect_bootstrap(&self, security: &ClientSecurity) -> Result<(Opened, String), ProxyError> {
        let mut last = None;
        for addr in self.bootstrap_order() {
            match self.connect_addr(security, &addr).await {
                Ok(s) => return Ok((s, addr)),
                Err(e) => {
                    debug!(%addr, error = %e, "bootstrap broker unreachable, trying the next");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(ProxyError::NoUpstream))
    }

    async fn connect_addr(&self, security: &ClientSecurity, addr: &str) -> Result<Opened, ProxyError> {
        security.connect_session(addr, self.timeout, "kafka-mirror-proxy").await.map_err(|e| match e {
            ProtocolError::Connect { detail, .. } => ProxyError::UpstreamConnect { addr: addr.to_owned(), detail },
            e => ProxyError::Protocol(e),
        })
    }
}
