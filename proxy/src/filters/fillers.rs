//! Filler masking: Fetch and ShareFetch responses with the engine's filler batches replaced by
//! transaction-marker batches (`kmp_protocol::fillers`). Filler records exist only in topics the
//! engine wrote (that are or were mirror topics), so only those are looked at. Until the engine
//! has loaded its stored state it does not know them yet: every topic is looked at then, so no
//! filler ever reaches a client.

use bytes::Bytes;
use kmp_protocol::codec::decode_request;
use kmp_protocol::kafka_protocol::messages::{ApiKey, FetchRequest};
use kmp_protocol::{ProtocolError, fillers};

use super::{Conn, Filter};

/// The masking filter (responses only).
pub(crate) struct FillerMasking;

impl Filter for FillerMasking {
    fn wants_response(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        conn.shared.masks_fillers && (api_key == ApiKey::Fetch as i16 || api_key == ApiKey::ShareFetch as i16)
    }

    /// A Fetch that names no topic that may hold fillers cannot get fillers back — unless it is an
    /// incremental fetch (its session's other partitions answer too), or the engine has not loaded
    /// its state yet. Anything undecidable (no request at hand, undecodable, ShareFetch) may.
    fn may_change_response(&self, api_key: i16, api_version: i16, request: Option<&Bytes>, conn: &Conn) -> bool {
        if !self.wants_response(api_key, api_version, conn) {
            return false;
        }
        let registry = &conn.shared.mirrors.topics;
        if !conn.shared.mirrors.control.is_booted() {
            return true;
        }
        if !registry.has_filler_topics() {
            return false;
        }
        let (Some(request), true) = (request, api_key == ApiKey::Fetch as i16) else {
            return true;
        };
        let Ok((_, fetch)) = decode_request::<FetchRequest>(request, ApiKey::Fetch, api_version) else {
            return true;
        };
        // Epoch 0 opens a session and -1 fetches without one: the response answers exactly the
        // partitions asked for. A larger epoch answers the session's partitions too.
        fetch.session_epoch > 0
            || fetch.topics.iter().any(|t| {
                if api_version >= 13 {
                    registry.may_hold_fillers_id(t.topic_id.as_bytes())
                } else {
                    registry.may_hold_fillers(t.topic.as_str())
                }
            })
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
