//! Address rewriting: responses that carry broker hosts and ports (Metadata, FindCoordinator,
//! DescribeCluster, Produce/Fetch `node_endpoints`, ...) get the proxy's per-broker listeners
//! instead (`kmp_protocol::rewrite`, the broker view in `cluster`). Last on the way back.

use bytes::Bytes;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::{ProtocolError, rewrite};

use super::api::{Conn, Filter};

/// The address-rewrite filter (responses only).
pub(crate) struct AddressRewrite;

impl Filter for AddressRewrite {
    fn wants_response(&self, api_key: i16, api_version: i16, _conn: &Conn) -> bool {
        ApiKey::try_from(api_key).is_ok_and(|k| rewrite::needs_rewrite(k, api_version))
    }

    /// A Fetch response no other filter needs may be streamed: `stream_copy` then neutralises its
    /// `node_endpoints` in place instead of rewriting them (a rewrite would change its length).
    fn may_change_response(&self, api_key: i16, api_version: i16, _request: Option<&Bytes>, conn: &Conn) -> bool {
        api_key != ApiKey::Fetch as i16 && self.wants_response(api_key, api_version, conn)
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        match ApiKey::try_from(api_key) {
            Ok(key) => rewrite::rewrite_response(frame, key, api_version, &conn.shared.cluster.seen_from(conn.exposure)),
            Err(_) => Ok(frame),
        }
    }
}
