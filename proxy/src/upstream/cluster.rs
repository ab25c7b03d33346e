//! The proxy's view of the upstream cluster: which brokers exist at which upstream address, and
//! which per-node listener each is exposed on (`advertised_host:(node_port_base + node_id)`).
//!
//! A node listener is bound the moment a node is first named in a response, *before* that
//! response reaches the client, so a client never sees an address nobody listens on. Bound
//! listeners are handed to the listener supervisor (see `server`) to be served. Listeners of
//! brokers that leave stay bound, so a broker that comes back is reachable again at once.
//! Serving connections does not belong here.

use std::net::TcpListener as StdTcpListener;

use dashmap::DashMap;
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::rewrite::{NodeAddresses, UpstreamNode};
use tokio::sync::mpsc;
use tracing::{error, info};

/// A freshly bound node listener waiting to be served.
pub(crate) struct NewListener {
    pub(crate) node_id: i32,
    pub(crate) listener: StdTcpListener,
}

pub(crate) struct ClusterView {
    nodes: DashMap<i32, UpstreamNode>,
    listeners: DashMap<i32, u16>,
    /// Brokers whose listener could not be bound (hidden from clients): node id → why. Cleared
    /// when a later attempt binds (`/readyz` is not ready while any is here).
    unbound: DashMap<i32, String>,
    advertised_host: StrBytes,
    bind_host: String,
    /// Listen backlog of node listeners.
    backlog: u32,
    node_port_base: u16,
    new_listeners: mpsc::UnboundedSender<NewListener>,
}

impl ClusterView {
    pub(crate) fn new(
        advertised_host: String,
        bind_host: String,
        backlog: u32,
        node_port_base: u16,
        new_listeners: mpsc::UnboundedSender<NewListener>,
    ) -> Self {
        Self {
            nodes: DashMap::new(),
            listeners: DashMap::new(),
            unbound: DashMap::new(),
            advertised_host: StrBytes::from_string(advertised_host),
            bind_host,
            backlog,
            node_port_base,
            new_listeners,
        }
    }

    /// Upstream `host:port` of `node_id`, if known.
    pub(crate) fn upstream_addr(&self, node_id: i32) -> Option<String> {
        self.nodes.get(&node_id).map(|n| format!("{}:{}", n.host, n.port))
    }

    /// The port clients use for `node_id`, if it fits in a port number.
    pub(crate) fn node_port(&self, node_id: i32) -> Option<u16> {
        u16::try_from(i64::from(self.node_port_base) + i64::from(node_id)).ok().filter(|p| *p != 0)
    }

    /// Brokers hidden from clients because their listener could not be bound: `(node id, why)`,
    /// by node id.
    pub(crate) fn unbound(&self) -> Vec<(i32, String)> {
        let mut out: Vec<(i32, String)> = self.unbound.iter().map(|e| (*e.key(), e.value().clone())).collect();
        out.sort();
        out
    }

    /// Binds the listener of `node_id` unless it exists; returns its port.
    pub(crate) fn ensure_listener(&self, node_id: i32) -> Option<u16> {
        if let Some(p) = self.listeners.get(&node_id) {
            return Some(*p);
        }
        let Some(port) = self.node_port(node_id) else {
            error!(
                node_id,
                base = self.node_port_base,
                "broker cannot be exposed: node_port_base + node id is not a valid port"
            );
            return None;
        };
        match self.listeners.entry(node_id) {
            dashmap::Entry::Occupied(e) => Some(*e.get()),
            dashmap::Entry::Vacant(e) => {
                let addr = format!("{}:{port}", self.bind_host);
                let listener = match crate::net::listen::bind_std(&addr, self.backlog) {
                    Ok(l) => l,
                    Err(err) => {
                        let why = format!("cannot listen on {addr}: {err}");
                        // Logged once per failure cause, not on every response naming the broker.
                        if self.unbound.get(&node_id).is_none_or(|w| *w != why) {
                            error!(node_id, %addr, %err, "cannot bind the listener for broker; it is hidden from clients");
                        }
                        self.unbound.insert(node_id, why);
                        return None;
                    }
                };
                self.unbound.remove(&node_id);
                info!(node_id, %addr, "listening for broker");
                if self.new_listeners.send(NewListener { node_id, listener }).is_err() {
                    return None;
                }
                e.insert(port);
                Some(port)
            }
        }
    }
}

impl NodeAddresses for ClusterView {
    fn observe(&self, node: UpstreamNode) {
        let changed = self.nodes.get(&node.node_id).is_none_or(|n| *n != node);
        if changed {
            info!(node_id = node.node_id, host = %node.host, port = node.port, "upstream broker discovered");
            self.nodes.insert(node.node_id, node);
        }
    }

    fn client_address(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        let port = self.ensure_listener(node_id)?;
        Some((self.advertised_host.clone(), i32::from(port)))
    }
}
