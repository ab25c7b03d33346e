//! No start-up window: until the mirror engine has read its state topic it does not know which
//! topics are read-only, so a request that could write to or change any topic (Produce and the
//! requests `refuse::topics` polices) waits for it, at most `limits.startup_write_wait_ms`. If the state is
//! still not loaded then, the connection is closed: every Kafka client treats a lost connection
//! as retriable and sends the request again. Reads wait only if their request or response
//! carries offsets (a shifted partition's offsets are not known before the state is, `offset_shift`).

use std::time::Duration;

use kmp_protocol::kafka_protocol::messages::ApiKey;
use tracing::warn;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::refuse::topics;
use crate::error::ProxyError;

/// The start-up gate.
pub(crate) struct StartupGate;

impl Filter for StartupGate {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        let (api_key, api_version) = (x.api_key, x.api_version);
        // Requests carrying offsets (in the request or its response) wait too: until the state
        // is read, which partitions are shifted is not known (`offset_shift`).
        (api_key == ApiKey::Produce as i16
            || topics::is_guarded(api_key, api_version)
            || kmp_protocol::offset_shift::request_may_shift(api_key)
            || kmp_protocol::offset_shift::response_may_shift(api_key))
            && !conn.shared.mirrors.control().is_booted()
    }

    fn on_request<'a>(&'a self, _x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let wait = Duration::from_millis(conn.shared.config.limits.startup_write_wait_ms);
            if conn.shared.mirrors.control().wait_booted_for(wait).await {
                return Ok(Flow::Continue);
            }
            conn.shared.metrics.refused("startup_state_not_loaded", 1);
            warn!(?wait, "closing connection: a write arrived before the mirror state was loaded");
            Err(ProxyError::NotReady)
        })
    }
}
