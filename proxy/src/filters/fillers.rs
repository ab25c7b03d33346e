//! Filler masking: Fetch and ShareFetch responses with the engine's filler batches replaced by
//! transaction-marker batches (`kmp_protocol::fillers`). Filler records exist only in topics the
//! engine wrote (that are or were mirror topics), so only those are looked at. Until the engine
//! has loaded its stored state it does not know them yet: every topic is looked at then, so no
//! filler ever reaches a client.

use bytes::Bytes;
use kmp_mirror_engine::Catalog;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::{ProtocolError, fillers};

use super::api::{Conn, Filter, fetch_may_answer};

/// Whether the response to this Fetch request may carry fillers: it names a topic that may hold
/// them, or it is an incremental fetch, or it cannot be decoded (`api::fetch_may_answer`).
fn fetch_may_get_fillers(request: &Bytes, api_version: i16, registry: &Catalog) -> bool {
    fetch_may_answer(request, api_version, |n| registry.may_hold_fillers(n), |id| registry.may_hold_fillers_id(id))
}

/// The masking filter (responses only).
pub(crate) struct FillerMasking;

impl Filter for FillerMasking {
    fn wants_response(&self, api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        api_key == ApiKey::Fetch as i16 || api_key == ApiKey::ShareFetch as i16
    }

    /// A Fetch that names no topic that may hold fillers cannot get fillers back — unless it is an
    /// incremental fetch (its session's other partitions answer too), or the engine has not loaded
    /// its state yet. Anything undecidable (no request at hand, undecodable, ShareFetch) may.
    fn may_change_response(&self, api_key: i16, api_version: i16, request: Option<&Bytes>, conn: &Conn) -> bool {
        if !self.wants_response(api_key, api_version, conn) {
            return false;
        }
        let registry = &conn.shared.mirrors.topics();
        if !conn.shared.mirrors.control().is_booted() {
            return true;
        }
        if !registry.has_filler_topics() {
            return false;
        }
        match request {
            Some(request) if api_key == ApiKey::Fetch as i16 => fetch_may_get_fillers(request, api_version, registry),
            _ => true,
        }
    }

    /// A Fetch's topics decide whether its response may carry fillers: kept while any topic may
    /// hold them.
    fn keeps_request(&self, api_key: i16, _api_version: i16, conn: &Conn) -> bool {
        api_key == ApiKey::Fetch as i16 && conn.shared.mirrors.topics().has_filler_topics()
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        let shared = &conn.shared;
        let registry = &shared.mirrors.topics();
        let booted = shared.mirrors.control().is_booted();
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

#[cfg(test)]
mod tests {
    use kmp_protocol::codec::encode_request;
    use kmp_protocol::kafka_protocol::messages::FetchRequest;
    use kmp_protocol::kafka_protocol::messages::fetch_request::FetchTopic;
    use kmp_protocol::kafka_protocol::messages::{RequestHeader, TopicName};
    use kmp_protocol::kafka_protocol::protocol::StrBytes;

    use super::*;

    fn fetch(version: i16, epoch: i32, topic: &str, id: [u8; 16]) -> Bytes {
        let mut header = RequestHeader::default();
        header.request_api_key = ApiKey::Fetch as i16;
        header.request_api_version = version;
        let mut r = FetchRequest::default();
        r.session_epoch = epoch;
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_owned()));
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        t.topic_id = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
            .parse()
            .unwrap();
        r.topics.push(t);
        encode_request(&header, ApiKey::Fetch, &r).unwrap()
    }

    #[test]
    fn only_a_full_fetch_of_topics_that_never_were_mirror_topics_is_free_of_fillers() {
        let registry = Catalog::default();
        registry.mark_filler_topic("mirrored", [0; 16]);
        for v in [4, 12] {
            assert!(!fetch_may_get_fillers(&fetch(v, -1, "plain", [0; 16]), v, &registry), "v{v}");
            assert!(fetch_may_get_fillers(&fetch(v, -1, "mirrored", [0; 16]), v, &registry), "v{v}");
        }
        assert!(
            fetch_may_get_fillers(&fetch(12, 3, "plain", [0; 16]), 12, &registry),
            "incremental: the session answers too"
        );
        assert!(
            !fetch_may_get_fillers(&fetch(12, 0, "plain", [0; 16]), 12, &registry),
            "a new session answers what it asks"
        );
        // By id (v13+): while a filler topic's id is unknown, every id may hold fillers.
        assert!(fetch_may_get_fillers(&fetch(13, -1, "", [1; 16]), 13, &registry));
        registry.mark_filler_topic("mirrored", [2; 16]);
        assert!(!fetch_may_get_fillers(&fetch(13, -1, "", [1; 16]), 13, &registry));
        assert!(fetch_may_get_fillers(&fetch(13, -1, "", [2; 16]), 13, &registry));
        assert!(fetch_may_get_fillers(&Bytes::from_static(&[0, 0, 0, 2, 0, 1]), 13, &registry), "undecodable");
    }
}
