//! The topic-state RPCs, StartMirrorTopics, StopMirrorTopics, PauseMirrorTopics and
//! ResumeMirrorTopics: one request body for all four (the API key picks Start's extra
//! per-topic fields and the tagged pattern lists), and one per-topic result response.
//!
//! Only those layouts belong here. Whether a state change is allowed, and what it does, is the
//! engine's; Create / Delete are in `admin`.

use bytes::BufMut;

use super::{R, START_MIRROR_TOPICS, STOP_MIRROR_TOPICS, W};
use crate::error::{ProtocolError, Side};

/// Start / Stop / Pause / Resume request body (Start's and Stop's tagged patterns included;
/// Start's topic ids and partition counts are left to the proxy, which reads the source).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsRequest {
    pub mirror_name: String,
    pub topics: Vec<String>,
    /// StopMirrorTopics `Patterns` / StartMirrorTopics `IncludePatterns` (tag 0).
    pub patterns: Vec<String>,
    /// StartMirrorTopics `ExcludePatterns` (tag 1).
    pub exclude_patterns: Vec<String>,
    pub state_validation_offset: i64,
}

/// A per-topic result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicResult {
    pub name: String,
    pub error_code: i16,
    pub error_message: Option<String>,
}

/// Stop / Pause / Resume response body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub topics: Vec<TopicResult>,
}

impl TopicsRequest {
    pub fn encode(&self, api_key: i16) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).array_len(self.topics.len());
        for t in &self.topics {
            if api_key == START_MIRROR_TOPICS {
                w.0.put_slice(&[0u8; 16]); // topic id: unknown to the client, the proxy reads the source
            }
            w.str(t);
            if api_key == START_MIRROR_TOPICS {
                w.i32(-1); // partition count: likewise
            }
            w.tags();
        }
        w.i64(self.state_validation_offset);
        let mut tagged: Vec<(u32, &Vec<String>)> = Vec::new();
        if (api_key == STOP_MIRROR_TOPICS || api_key == START_MIRROR_TOPICS) && !self.patterns.is_empty() {
            tagged.push((0, &self.patterns));
        }
        if api_key == START_MIRROR_TOPICS && !self.exclude_patterns.is_empty() {
            tagged.push((1, &self.exclude_patterns));
        }
        w.uvarint(tagged.len() as u32);
        for (tag, list) in tagged {
            let mut inner = W::default();
            inner.strs(list);
            let inner = inner.finish();
            w.uvarint(tag).uvarint(inner.len() as u32);
            w.0.put_slice(&inner);
        }
        w
    }

    pub fn decode(r: &mut R<'_>, api_key: i16) -> Result<Self, ProtocolError> {
        let mirror_name = r.str()?;
        let mut topics = Vec::new();
        for _ in 0..r.array_len()? {
            if api_key == START_MIRROR_TOPICS {
                r.0.skip(16)?; // topic id
            }
            topics.push(r.str()?);
            if api_key == START_MIRROR_TOPICS {
                r.i32()?; // num partitions
            }
            r.tags()?;
        }
        let state_validation_offset = r.i64()?;
        let (mut patterns, mut exclude_patterns) = (Vec::new(), Vec::new());
        for (tag, bytes) in r.tags()? {
            let mut inner = R::new(bytes, 0, Side::Client);
            match (tag, api_key) {
                (0, STOP_MIRROR_TOPICS | START_MIRROR_TOPICS) => patterns = inner.strs()?,
                (1, START_MIRROR_TOPICS) => exclude_patterns = inner.strs()?,
                _ => {}
            }
        }
        Ok(Self {
            mirror_name,
            topics,
            patterns,
            exclude_patterns,
            state_validation_offset,
        })
    }
}

impl TopicsResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.topics.len());
        for t in &self.topics {
            w.str(&t.name).i16(t.error_code).nstr(t.error_message.as_deref()).tags();
        }
        w.tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut topics = Vec::new();
        for _ in 0..r.array_len()? {
            topics.push(TopicResult {
                name: r.str()?,
                error_code: r.i16()?,
                error_message: r.nstr()?,
            });
            r.tags()?;
        }
        r.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            topics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror_api::{Header, PAUSE_MIRROR_TOPICS, read_request, request_frame};
    use bytes::Bytes;

    fn body_of(frame: &Bytes) -> (Header, Vec<u8>) {
        let (h, r) = read_request(frame).unwrap();
        let at = frame.len() - r.0.remaining();
        (h, frame[at..].to_vec())
    }

    #[test]
    fn topics_requests_round_trip_with_stop_patterns_as_a_tagged_field() {
        let req = TopicsRequest {
            mirror_name: "dr".into(),
            topics: vec!["a".into(), "b".into()],
            patterns: vec!["x.*".into()],
            exclude_patterns: vec![],
            state_validation_offset: -1,
        };
        let frame = request_frame(STOP_MIRROR_TOPICS, 9, "cli", req.encode(STOP_MIRROR_TOPICS));
        let (h, _) = body_of(&frame);
        assert_eq!((h.api_key, h.api_version, h.correlation_id, h.client_id.as_deref()), (96, 0, 9, Some("cli")));
        let (_, mut r) = read_request(&frame).unwrap();
        assert_eq!(TopicsRequest::decode(&mut r, STOP_MIRROR_TOPICS).unwrap(), req);
    }

    #[test]
    fn truncated_requests_are_errors_not_panics() {
        let req = TopicsRequest {
            mirror_name: "dr".into(),
            topics: vec!["a".into()],
            ..Default::default()
        };
        let frame = request_frame(PAUSE_MIRROR_TOPICS, 1, "c", req.encode(PAUSE_MIRROR_TOPICS));
        for cut in 0..frame.len() {
            if let Ok((_, mut r)) = read_request(&frame[..cut]) {
                let _ = TopicsRequest::decode(&mut r, PAUSE_MIRROR_TOPICS);
            }
        }
    }
}
