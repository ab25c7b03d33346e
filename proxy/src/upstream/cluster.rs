//! The proxy's view of the upstream cluster: which brokers exist at which upstream address, and
//! which per-node listener each is exposed on, per client listener
//! (`advertised_host:(node_port_base + node_id)` of that listener).
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
    /// Which client listener (index into the configured listeners) it belongs to.
    pub(crate) exposure: usize,
    pub(crate) node_id: i32,
    pub(crate) listener: StdTcpListener,
}

/// How one client listener exposes brokers: `advertised_host:(node_port_base + node_id)`, bound
/// on `bind_host`.
pub(crate) struct Exposure {
    /// The client listener's name, for logs.
    pub(crate) name: String,
    pub(crate) advertised_host: String,
    pub(crate) bind_host: String,
    pub(crate) node_port_base: u16,
}

/// An [`Exposure`] and the node listeners bound for it.
struct Exposed {
    spec: Exposure,
    advertised_host: StrBytes,
    bound: DashMap<i32, u16>,
}

pub(crate) struct ClusterView {
    nodes: DashMap<i32, UpstreamNode>,
    /// One per client listener, in configuration order.
    exposures: Vec<Exposed>,
    /// Node listeners that could not be bound (their broker is hidden from that listener's
    /// clients): (exposure, node id) → why. Cleared when a later attempt binds (`/readyz` is not
    /// ready while any is here).
    unbound: DashMap<(usize, i32), String>,
    /// Listen backlog of node listeners.
    backlog: u32,
    new_listeners: mpsc::UnboundedSender<NewListener>,
}

impl ClusterView {
    pub(crate) fn new(exposures: Vec<Exposure>, backlog: u32, new_listeners: mpsc::UnboundedSender<NewListener>) -> Self {
        Self {
            nodes: DashMap::new(),
            exposures: exposures
                .into_iter()
                .map(|spec| Exposed {
                    advertised_host: StrBytes::from_string(spec.advertised_host.clone()),
                    spec,
                    bound: DashMap::new(),
                })
                .collect(),
            unbound: DashMap::new(),
            backlog,
            new_listeners,
        }
    }

    /// Upstream `host:port` of `node_id`, if known.
    pub(crate) fn upstream_addr(&self, node_id: i32) -> Option<String> {
        self.nodes.get(&node_id).map(|n| format!("{}:{}", n.host, n.port))
    }

    /// Brokers hidden from some listener's clients because a node listener could not be bound:
    /// `(node id, why)`, by node id.
    pub(crate) fn unbound(&self) -> Vec<(i32, String)> {
        let mut out: Vec<(i32, String)> = self.unbound.iter().map(|e| (e.key().1, e.value().clone())).collect();
        out.sort();
        out
    }

    /// The broker view as the clients of client listener `exposure` see it.
    pub(crate) fn seen_from(&self, exposure: usize) -> SeenFrom<'_> {
        SeenFrom { cluster: self, exposure }
    }

    /// Binds the node listeners of `node_id` on every client listener where they do not exist.
    pub(crate) fn ensure_listeners(&self, node_id: i32) {
        for i in 0..self.exposures.len() {
            self.ensure_listener(i, node_id);
        }
    }

    /// Binds the listener of `node_id` for client listener `exposure` unless it exists; returns
    /// its port. Every client listener's is bound with it, so a broker named on one listener is
    /// reachable on all.
    fn ensure_listener(&self, exposure: usize, node_id: i32) -> Option<u16> {
        let e = self.exposures.get(exposure)?;
        if let Some(p) = e.bound.get(&node_id) {
            return Some(*p);
        }
        let Some(port) = u16::try_from(i64::from(e.spec.node_port_base) + i64::from(node_id)).ok().filter(|p| *p != 0) else {
            error!(
                node_id,
                listener = %e.spec.name,
                base = e.spec.node_port_base,
                "broker cannot be exposed: node_port_base + node id is not a valid port"
            );
            return None;
        };
        match e.bound.entry(node_id) {
            dashmap::Entry::Occupied(o) => Some(*o.get()),
            dashmap::Entry::Vacant(v) => {
                let addr = format!("{}:{port}", e.spec.bind_host);
                let listener = match crate::net::listen::bind_std(&addr, self.backlog) {
                    Ok(l) => l,
                    Err(err) => {
                        let why = format!("cannot listen on {addr} (listener {}): {err}", e.spec.name);
                        // Logged once per failure cause, not on every response naming the broker.
                        if self.unbound.get(&(exposure, node_id)).is_none_or(|w| *w != why) {
                            error!(node_id, listener = %e.spec.name, %addr, %err, "cannot bind the listener for broker; it is hidden from that listener's clients");
                        }
                        self.unbound.insert((exposure, node_id), why);
                        return None;
                    }
                };
                self.unbound.remove(&(exposure, node_id));
                info!(node_id, listener = %e.spec.name, %addr, "listening for broker");
                if self.new_listeners.send(NewListener { exposure, node_id, listener }).is_err() {
                    return None;
                }
                v.insert(port);
                Some(port)
            }
        }
    }
}

/// The broker view of one client listener: what the address rewrite of its responses uses.
pub(crate) struct SeenFrom<'a> {
    cluster: &'a ClusterView,
    exposure: usize,
}

impl NodeAddresses for SeenFrom<'_> {
    fn observe(&self, node: UpstreamNode) {
        self.cluster.observe(node);
    }

    fn client_address(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        let port = self.cluster.ensure_listener(self.exposure, node_id)?;
        // The other listeners expose the broker too (a client may move between them).
        for i in (0..self.cluster.exposures.len()).filter(|i| *i != self.exposure) {
            self.cluster.ensure_listener(i, node_id);
        }
        let host = self.cluster.exposures.get(self.exposure)?.advertised_host.clone();
        Some((host, i32::from(port)))
    }
}

impl ClusterView {
    /// Records an upstream broker's address (from any response or the proxy's own refresh).
    pub(crate) fn observe(&self, node: UpstreamNode) {
        let changed = self.nodes.get(&node.node_id).is_none_or(|n| *n != node);
        if changed {
            info!(node_id = node.node_id, host = %node.host, port = node.port, "upstream broker discovered");
            self.nodes.insert(node.node_id, node);
        }
    }
}
