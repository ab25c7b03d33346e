//! The ApiVersions answers kept to answer a new connection early (`upstream.api_versions_cache_ms`):
//! per listener target and request version, the last clamped answer a broker gave a client of
//! that listener. A connection whose first request is ApiVersions gets a copy with its own
//! correlation id while its upstream connection is still opening; the request is forwarded all
//! the same and the broker's answer replaces the kept one. Only answers without an error are
//! kept, and none older than the configured age is given out. Deciding when a connection may be
//! answered early belongs to `session`; clamping an answer to `filters::api_versions`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kmp_protocol::frame::PREFIX;

use crate::upstream::connect::Target;

/// Offset of the correlation id in a response frame (after the length prefix).
const CORRELATION: usize = PREFIX;

/// Kept answers; bounded by the listener targets times the ApiVersions request versions.
pub(crate) struct EarlyVersions {
    max_age: Duration,
    answers: Mutex<HashMap<(Target, i16), (Bytes, Instant)>>,
}

impl EarlyVersions {
    /// `max_age` zero: nothing is ever answered early.
    pub(crate) fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            answers: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Target, i16), (Bytes, Instant)>> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept answer for `target` and `version`, if one younger than the configured age is
    /// kept, as a frame carrying `correlation_id`.
    pub(crate) fn answer(&self, target: Target, version: i16, correlation_id: i32) -> Option<Bytes> {
        if self.max_age.is_zero() {
            return None;
        }
        let kept = {
            let answers = self.lock();
            let (frame, at) = answers.get(&(target, version))?;
            if at.elapsed() > self.max_age {
                return None;
            }
            frame.clone()
        };
        let mut frame = BytesMut::from(&kept[..]);
        frame[CORRELATION..CORRELATION + 4].copy_from_slice(&correlation_id.to_be_bytes());
        Some(frame.freeze())
    }

    /// Keeps `frame`, a clamped ApiVersions answer to a request of `version` (length prefix
    /// included), unless it carries an error or is too short to be one.
    pub(crate) fn keep(&self, target: Target, version: i16, frame: &Bytes) {
        if self.max_age.is_zero() {
            return;
        }
        // Header v0 (correlation id), then error_code: the first body field in every version.
        let Some(error) = frame.get(CORRELATION + 4..CORRELATION + 6) else {
            return;
        };
        if error != [0, 0] {
            return;
        }
        self.lock().insert((target, version), (frame.clone(), Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::codec::{decode_response, encode_response};
    use kmp_protocol::kafka_protocol::messages::ApiKey;
    use kmp_protocol::kafka_protocol::messages::api_versions_response::ApiVersionsResponse;

    fn answer(correlation_id: i32, error_code: i16, version: i16) -> Bytes {
        let mut resp = ApiVersionsResponse::default();
        resp.error_code = error_code;
        resp.finalized_features_epoch = 7;
        encode_response(correlation_id, ApiKey::ApiVersions, version, &resp).unwrap()
    }

    #[test]
    fn a_kept_answer_is_given_with_the_new_correlation_id_and_only_for_its_target_and_version() {
        let early = EarlyVersions::new(Duration::from_secs(30));
        assert!(early.answer(Target::Bootstrap, 3, 1).is_none(), "nothing kept yet");
        early.keep(Target::Bootstrap, 3, &answer(11, 0, 3));
        let got = early.answer(Target::Bootstrap, 3, 42).expect("the kept answer");
        let (header, resp) = decode_response::<ApiVersionsResponse>(&got, ApiKey::ApiVersions, 3).unwrap();
        assert_eq!(header.correlation_id, 42, "the asking connection's correlation id");
        assert_eq!(resp.finalized_features_epoch, 7, "the broker's answer otherwise unchanged");
        assert!(early.answer(Target::Bootstrap, 2, 1).is_none(), "another request version");
        assert!(early.answer(Target::Node(1), 3, 1).is_none(), "another listener's broker");
    }

    #[test]
    fn error_answers_are_not_kept_and_a_zero_age_keeps_nothing() {
        let early = EarlyVersions::new(Duration::from_secs(30));
        early.keep(Target::Bootstrap, 0, &answer(1, 35, 0));
        assert!(early.answer(Target::Bootstrap, 0, 1).is_none(), "an UNSUPPORTED_VERSION answer is not kept");
        early.keep(Target::Bootstrap, 0, &Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 1]));
        assert!(early.answer(Target::Bootstrap, 0, 1).is_none(), "a frame without an error code is not kept");
        let off = EarlyVersions::new(Duration::ZERO);
        off.keep(Target::Bootstrap, 3, &answer(1, 0, 3));
        assert!(off.answer(Target::Bootstrap, 3, 1).is_none(), "api_versions_cache_ms = 0 answers nothing early");
    }

    #[test]
    fn an_answer_older_than_the_age_is_not_given() {
        let early = EarlyVersions::new(Duration::from_millis(20));
        early.keep(Target::Node(2), 3, &answer(1, 0, 3));
        assert!(early.answer(Target::Node(2), 3, 5).is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(early.answer(Target::Node(2), 3, 5).is_none(), "older than api_versions_cache_ms");
    }
}
