//! ListClusterMirrors: the response listing each mirror with its source and topic names. The
//! request is a single flag that callers write and read by hand, so it has no type here.
//!
//! Only the List wire layout belongs here; per-partition detail is Describe's (`describe`), and
//! what goes in a listing is the engine's.

use super::{R, W};
use crate::error::ProtocolError;

/// ListClusterMirrors response entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedMirror {
    pub mirror_name: String,
    pub source_bootstrap: String,
    pub source_cluster_id: String,
    pub topic_count: i32,
    pub topic_names: Vec<String>,
}

/// ListClusterMirrors response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub mirrors: Vec<ListedMirror>,
}

impl ListResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.mirrors.len());
        for m in &self.mirrors {
            w.str(&m.mirror_name)
                .str(&m.source_bootstrap)
                .str(&m.source_cluster_id)
                .i32(m.topic_count)
                .strs(&m.topic_names)
                .tags();
        }
        w.tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut mirrors = Vec::new();
        for _ in 0..r.array_len()? {
            mirrors.push(ListedMirror {
                mirror_name: r.str()?,
                source_bootstrap: r.str()?,
                source_cluster_id: r.str()?,
                topic_count: r.i32()?,
                topic_names: r.strs()?,
            });
            r.tags()?;
        }
        r.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
        })
    }
}
