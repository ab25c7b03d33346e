//! Offset shifts: a mirror topic partition whose source log started too far out to fill starts
//! at destination offset 0, and clients see every offset of it plus a constant Δ (its source log
//! start when the mirror created the topic; `kmp_mirror_engine`'s `copy::shift`). Requests that
//! carry offsets of such a partition are rewritten to destination offsets, responses back to the
//! client's (`kmp_protocol::offset_shift` covers every API that carries one). Without a shifted
//! topic in the catalog nothing is decoded here. Until the engine has read its state it does not
//! know which partitions are shifted: requests whose request or response carry offsets wait for
//! it in the start-up gate (`startup`), so no client ever sees an unshifted offset.
//!
//! A Fetch or a Produce is decoded only when it names a shifted topic (or is an incremental
//! fetch, whose response answers the session's other partitions too): the hot path of topics
//! that are not shifted stays raw bytes.

use bytes::Bytes;
use kmp_mirror_engine::Catalog;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::offset_shift::{self, Shifts, TopicKey};
use kmp_protocol::{ProtocolError, peek};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow, fetch_may_answer};
use crate::error::ProxyError;

/// The catalog's shifts as the translation asks for them.
struct CatalogShifts<'a>(&'a Catalog);

impl Shifts for CatalogShifts<'_> {
    fn shift(&self, topic: TopicKey<'_>, partition: i32) -> i64 {
        match topic {
            TopicKey::Name(n) => self.0.shift(n, partition),
            TopicKey::Id(id) => self.0.shift_by_id(&id, partition),
        }
    }
}

/// Whether the catalog shifts any partition of the topic.
fn shifted(catalog: &Catalog, topic: TopicKey<'_>) -> bool {
    match topic {
        TopicKey::Name(n) => catalog.is_shifted(n),
        TopicKey::Id(id) => catalog.is_shifted_id(&id),
    }
}

/// Whether the response to this Fetch request may carry a shifted partition: it names a shifted
/// topic, or it is an incremental fetch, or it cannot be decoded (`api::fetch_may_answer`).
fn fetch_names_shifted(request: &Bytes, api_version: i16, catalog: &Catalog) -> bool {
    fetch_may_answer(request, api_version, |n| catalog.is_shifted(n), |id| catalog.is_shifted_id(id))
}

/// Whether this Produce request names a shifted topic (or cannot be scanned).
fn produce_names_shifted(request: &Bytes, api_version: i16, catalog: &Catalog) -> bool {
    let at = peek::RequestPeek {
        api_key: ApiKey::Produce as i16,
        api_version,
        correlation_id: 0,
    };
    let mut found = false;
    let scanned = peek::produce_names_any(request, &at, |t| {
        found = match t {
            peek::ProduceTopic::Name(n) => std::str::from_utf8(n).is_ok_and(|n| shifted(catalog, TopicKey::Name(n))),
            peek::ProduceTopic::Id(id) => shifted(catalog, TopicKey::Id(*id)),
        };
        found
    });
    scanned.is_err() || found
}

/// The shifting filter (requests and responses).
pub(crate) struct OffsetShift;

impl Filter for OffsetShift {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        offset_shift::request_may_shift(x.api_key) && conn.shared.mirrors.topics().has_shifts()
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let catalog = conn.shared.mirrors.topics();
            if let Some(frame) = offset_shift::shift_request(x.frame(), x.api_key, x.api_version, &CatalogShifts(&catalog))? {
                x.set_frame(frame);
            }
            Ok(Flow::Continue)
        })
    }

    fn wants_response(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        offset_shift::response_may_shift(api_key) && conn.shared.mirrors.topics().has_shifts()
    }

    fn may_change_response(&self, api_key: i16, api_version: i16, request: Option<&Bytes>, conn: &Conn) -> bool {
        if !self.wants_response(api_key, api_version, conn) {
            return false;
        }
        let catalog = conn.shared.mirrors.topics();
        match request {
            Some(r) if api_key == ApiKey::Fetch as i16 => fetch_names_shifted(r, api_version, &catalog),
            Some(r) if api_key == ApiKey::Produce as i16 => produce_names_shifted(r, api_version, &catalog),
            _ => true,
        }
    }

    fn keeps_request(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        (api_key == ApiKey::Fetch as i16 || api_key == ApiKey::Produce as i16) && conn.shared.mirrors.topics().has_shifts()
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        let catalog = conn.shared.mirrors.topics();
        if !catalog.has_shifts() {
            return Ok(frame);
        }
        Ok(offset_shift::shift_response(&frame, api_key, api_version, &CatalogShifts(&catalog))?.unwrap_or(frame))
    }
}
