//! Broker-address rewriting: every host/port a broker hands out is replaced by the proxy's own
//! listener for that node, so clients never bypass the proxy. Covered responses: Metadata,
//! DescribeCluster, FindCoordinator (v0-3 single key, v4+ batched), and the KIP-951
//! `node_endpoints` of Produce (v10+), Fetch (v16+), ShareFetch and ShareAcknowledge.
//!
//! The rewriter also reports every upstream broker address it sees, so the proxy learns brokers
//! that join the cluster. Where the proxy listens and how it binds belongs to the proxy; this
//! module only transforms messages. A response that needs no change is returned as the original
//! bytes (no re-encode).

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FetchResponse, FindCoordinatorResponse, MetadataResponse, ProduceResponse, ShareAcknowledgeResponse, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::codec::{decode_response, encode_response};
use crate::error::ProtocolError;

/// An upstream broker as a broker described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamNode {
    /// Node id.
    pub node_id: i32,
    /// Host the broker advertises.
    pub host: String,
    /// Port the broker advertises.
    pub port: i32,
    /// Rack, if any.
    pub rack: Option<String>,
}

/// The proxy's view of node addresses, as the rewriter needs it.
pub trait NodeAddresses {
    /// Called for every broker address seen in a response, before it is rewritten.
    fn observe(&self, node: UpstreamNode);
    /// The address clients must use for `node_id`, or `None` if the node cannot be exposed
    /// (it is then removed from broker lists where possible).
    fn client_address(&self, node_id: i32) -> Option<(StrBytes, i32)>;
}

/// Whether a response of `key`/`version` can carry broker addresses.
pub fn needs_rewrite(key: ApiKey, version: i16) -> bool {
    match key {
        ApiKey::Metadata | ApiKey::DescribeCluster | ApiKey::FindCoordinator => true,
        ApiKey::Produce => version >= 10,
        ApiKey::Fetch => version >= 16,
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => true,
        _ => false,
    }
}

/// Rewrites the broker addresses in a response frame (prefix included).
pub fn rewrite_response(frame: Bytes, key: ApiKey, version: i16, nodes: &dyn NodeAddresses) -> Result<Bytes, ProtocolError> {
    match key {
        ApiKey::Metadata => apply::<MetadataResponse>(frame, key, version, |r| {
            for b in &r.brokers {
                nodes.observe(node(b.node_id.0, &b.host, b.port, b.rack.as_ref()));
            }
            r.brokers.retain_mut(|b| set(nodes, b.node_id.0, &mut b.host, &mut b.port));
            true
        }),
        ApiKey::DescribeCluster => apply::<DescribeClusterResponse>(frame, key, version, |r| {
            for b in &r.brokers {
                nodes.observe(node(b.broker_id.0, &b.host, b.port, b.rack.as_ref()));
            }
            r.brokers.retain_mut(|b| set(nodes, b.broker_id.0, &mut b.host, &mut b.port));
            true
        }),
        ApiKey::FindCoordinator => apply::<FindCoordinatorResponse>(frame, key, version, |r| {
            if version <= 3 && r.error_code == 0 && !set(nodes, r.node_id.0, &mut r.host, &mut r.port) {
                // No listener for the coordinator: let the client look again later.
                r.error_code = 15; // COORDINATOR_NOT_AVAILABLE
            }
            for c in &mut r.coordinators {
                if c.error_code == 0 && !set(nodes, c.node_id.0, &mut c.host, &mut c.port) {
                    c.error_code = 15;
                }
            }
            true
        }),
        ApiKey::Produce => apply::<ProduceResponse>(frame, key, version, |r| {
            endpoints(nodes, &mut r.node_endpoints, |e| (&mut e.node_id.0, &mut e.host, &mut e.port, &e.rack))
        }),
        // Nearly every Fetch response has no node_endpoints: a scan avoids decoding the records.
        ApiKey::Fetch if !crate::scan::fetch_has_node_endpoints(&frame, version)? => Ok(frame),
        ApiKey::Fetch => apply::<FetchResponse>(frame, key, version, |r| {
            endpoints(nodes, &mut r.node_endpoints, |e| (&mut e.node_id.0, &mut e.host, &mut e.port, &e.rack))
        }),
        ApiKey::ShareFetch => apply::<ShareFetchResponse>(frame, key, version, |r| {
            endpoints(nodes, &mut r.node_endpoints, |e| (&mut e.node_id.0, &mut e.host, &mut e.port, &e.rack))
        }),
        ApiKey::ShareAcknowledge => apply::<ShareAcknowledgeResponse>(frame, key, version, |r| {
            endpoints(nodes, &mut r.node_endpoints, |e| (&mut e.node_id.0, &mut e.host, &mut e.port, &e.rack))
        }),
        _ => Ok(frame),
    }
}

/// Decodes, lets `edit` change the message (it returns whether anything changed) and re-encodes
/// only when something did.
fn apply<T: Decodable + Encodable>(frame: Bytes, key: ApiKey, version: i16, edit: impl FnOnce(&mut T) -> bool) -> Result<Bytes, ProtocolError> {
    let (header, mut msg) = decode_response::<T>(&frame, key, version)?;
    if !edit(&mut msg) {
        return Ok(frame);
    }
    encode_response(header.correlation_id, key, version, &msg)
}

fn node(node_id: i32, host: &StrBytes, port: i32, rack: Option<&StrBytes>) -> UpstreamNode {
    UpstreamNode {
        node_id,
        host: host.as_str().to_owned(),
        port,
        rack: rack.map(|r| r.as_str().to_owned()),
    }
}

fn set(nodes: &dyn NodeAddresses, node_id: i32, host: &mut StrBytes, port: &mut i32) -> bool {
    match nodes.client_address(node_id) {
        Some((h, p)) => {
            *host = h;
            *port = p;
            true
        }
        None => false,
    }
}

/// Rewrites a KIP-951 `node_endpoints` list; `fields` projects one entry of any of the four
/// message-specific NodeEndpoint types onto (node id, host, port, rack).
fn endpoints<E>(nodes: &dyn NodeAddresses, list: &mut Vec<E>, fields: impl Fn(&mut E) -> (&mut i32, &mut StrBytes, &mut i32, &Option<StrBytes>)) -> bool {
    if list.is_empty() {
        return false;
    }
    for e in list.iter_mut() {
        let (id, host, port, rack) = fields(e);
        nodes.observe(node(*id, host, *port, rack.as_ref()));
    }
    list.retain_mut(|e| {
        let (id, host, port, _) = fields(e);
        let id = *id;
        set(nodes, id, host, port)
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::produce_response::NodeEndpoint;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Map(Mutex<Vec<UpstreamNode>>);
    impl NodeAddresses for Map {
        fn observe(&self, node: UpstreamNode) {
            self.0.lock().unwrap().push(node);
        }
        fn client_address(&self, id: i32) -> Option<(StrBytes, i32)> {
            (id < 100).then(|| (StrBytes::from_static_str("proxy.example"), 9000 + id))
        }
    }

    fn s(x: &str) -> StrBytes {
        StrBytes::from_string(x.to_owned())
    }

    #[test]
    fn metadata_brokers_point_at_the_proxy_and_are_learned() {
        let range = ApiKey::Metadata.valid_versions();
        for v in range.min..=range.max {
            let mut r = MetadataResponse::default();
            for id in [1, 2, 300] {
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(id);
                b.host = s("10.0.0.1");
                b.port = 9092 + id;
                r.brokers.push(b);
            }
            let frame = encode_response(5, ApiKey::Metadata, v, &r).unwrap();
            let map = Map::default();
            let out = rewrite_response(frame, ApiKey::Metadata, v, &map).unwrap();
            let (h, got) = decode_response::<MetadataResponse>(&out, ApiKey::Metadata, v).unwrap();
            assert_eq!(h.correlation_id, 5);
            let addrs: Vec<_> = got.brokers.iter().map(|b| (b.node_id.0, b.host.as_str().to_owned(), b.port)).collect();
            assert_eq!(
                addrs,
                vec![(1, "proxy.example".into(), 9001), (2, "proxy.example".into(), 9002)],
                "v{v}: node 300 has no listener and is dropped"
            );
            assert_eq!(map.0.lock().unwrap().len(), 3, "all upstream brokers are observed");
            assert_eq!(map.0.lock().unwrap()[0].port, 9093);
        }
    }

    #[test]
    fn find_coordinator_is_rewritten_in_single_and_batched_forms() {
        for v in 0..=6 {
            let mut r = FindCoordinatorResponse::default();
            if v <= 3 {
                r.node_id = BrokerId(2);
                r.host = s("broker2");
                r.port = 1;
            } else {
                let mut c = Coordinator::default();
                c.key = s("group");
                c.node_id = BrokerId(3);
                c.host = s("broker3");
                c.port = 1;
                r.coordinators.push(c);
            }
            let frame = encode_response(1, ApiKey::FindCoordinator, v, &r).unwrap();
            let out = rewrite_response(frame, ApiKey::FindCoordinator, v, &Map::default()).unwrap();
            let (_, got) = decode_response::<FindCoordinatorResponse>(&out, ApiKey::FindCoordinator, v).unwrap();
            if v <= 3 {
                assert_eq!((got.host.as_str(), got.port), ("proxy.example", 9002), "v{v}");
            } else {
                assert_eq!((got.coordinators[0].host.as_str(), got.coordinators[0].port), ("proxy.example", 9003), "v{v}");
            }
        }
    }

    #[test]
    fn produce_without_node_endpoints_is_returned_untouched() {
        let r = ProduceResponse::default();
        let frame = encode_response(1, ApiKey::Produce, 11, &r).unwrap();
        let out = rewrite_response(frame.clone(), ApiKey::Produce, 11, &Map::default()).unwrap();
        assert_eq!(out.as_ptr(), frame.as_ptr(), "no re-encode when nothing changes");
        let mut r = ProduceResponse::default();
        let mut e = NodeEndpoint::default();
        e.node_id = BrokerId(7);
        e.host = s("b7");
        e.port = 1;
        r.node_endpoints.push(e);
        let frame = encode_response(1, ApiKey::Produce, 11, &r).unwrap();
        let out = rewrite_response(frame, ApiKey::Produce, 11, &Map::default()).unwrap();
        let (_, got) = decode_response::<ProduceResponse>(&out, ApiKey::Produce, 11).unwrap();
        assert_eq!((got.node_endpoints[0].host.as_str(), got.node_endpoints[0].port), ("proxy.example", 9007));
    }

    #[test]
    fn garbage_response_is_an_error_not_a_panic() {
        let frame = Bytes::from_static(&[0, 0, 0, 6, 0, 0, 0, 1, 0xff, 0xff]);
        for key in [ApiKey::Metadata, ApiKey::Fetch, ApiKey::FindCoordinator, ApiKey::DescribeCluster] {
            assert!(rewrite_response(frame.clone(), key, key.valid_versions().max, &Map::default()).is_err());
        }
    }
}
