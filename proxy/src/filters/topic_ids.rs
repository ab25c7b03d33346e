//! Topic-id learning from forwarded Metadata answers: while a topic that is or was a mirror
//! topic has no known destination id (after a restart, or a mirror topic the destination did
//! not have yet and someone just created), the ids in the Metadata answers clients get are
//! recorded in the registry. A client reads a topic by id only after a Metadata answer gave it
//! the id, so an id learned here is known before that client's first Fetch or Produce by id
//! — the engine's own learner (`follow::learn_ids`) polls and may be seconds behind. Observes
//! only: the answer is forwarded unchanged. Deciding what the ids mean stays with the registry.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::decode_response;
use kmp_protocol::kafka_protocol::messages::{ApiKey, MetadataResponse};

use super::api::{Conn, Filter};

/// Metadata answers carry topic ids from version 10 on.
const FIRST_VERSION_WITH_IDS: i16 = 10;

/// The id-learning observer (responses only).
pub(crate) struct TopicIdLearner;

impl Filter for TopicIdLearner {
    /// Decoded only while an id is wanted: otherwise Metadata answers are not looked at here.
    fn wants_response(&self, api_key: i16, api_version: i16, conn: &Conn) -> bool {
        api_key == ApiKey::Metadata as i16 && api_version >= FIRST_VERSION_WITH_IDS && conn.shared.mirrors.topics().wants_ids()
    }

    fn may_change_response(&self, _api_key: i16, _api_version: i16, _request: Option<&Bytes>, _conn: &Conn) -> bool {
        false
    }

    /// An answer that does not decode is left to the address rewrite (which refuses it).
    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        let Ok(key) = ApiKey::try_from(api_key) else {
            return Ok(frame);
        };
        if let Ok((_, metadata)) = decode_response::<MetadataResponse>(&frame, key, api_version) {
            let registry = conn.shared.mirrors.topics();
            for topic in &metadata.topics {
                if topic.error_code != 0 {
                    continue;
                }
                if let Some(name) = &topic.name {
                    registry.learn_topic_id(name.as_str(), *topic.topic_id.as_bytes());
                }
            }
        }
        Ok(frame)
    }
}
