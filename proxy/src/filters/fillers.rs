//! Filler masking: Fetch and ShareFetch responses with the engine's filler batches replaced by
//! transaction-marker batches (`kmp_protocol::fillers`). Filler records exist only in topics the
//! engine wrote (that are or were mirror topics), so only those are looked at. Until the engine
//! has loaded its stored state it does not know them yet: every topic is looked at then, so no
//! filler ever reaches a client.

use bytes::Bytes;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::{ProtocolError, fillers};

use super::{Conn, Filter};

/// The masking filter (responses only).
pub(crate) struct FillerMasking;

impl Filter for FillerMasking {
    fn wants_response(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        conn.shared.masks_fillers && (api_key == ApiKey::Fetch as i16 || api_key == ApiKey::ShareFetch as i16)
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        let shared = &conn.shared;
        let registry = &shared.mirrors.topics;
        let booted = shared.mirrors.control.is_booted();
        if booted && !registry.has_filler_topics() {
            return Ok(frame);
        }
        let maskable = |t: fillers::TopicRef<'_>| {
            !booted
                || match t {
                    fillers::TopicRef::Name(n) => std::str::from_utf8(n).is_ok_and(|n| registry.may_hold_fillers(n)),
                    fillers::TopicRef::Id(id) => registry.may_hold_fillers_id(&id),
                }
        };
        let masked = if api_key == ApiKey::Fetch as i16 {
            fillers::fetch_has_fillers(&frame, api_version, &maskable)?
                .then(|| fillers::mask_fetch_response(&frame, api_version, &maskable))
                .transpose()?
        } else {
            fillers::mask_share_fetch_response(&frame, api_version, &maskable)?
        };
        Ok(match masked {
            Some(m) => {
                shared.metrics.masked_fetch_responses.inc();
                m
            }
            None => frame,
        })
    }
}
