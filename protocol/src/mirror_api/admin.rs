//! CreateClusterMirror and DeleteClusterMirror: their request bodies and the plain
//! throttle / error-code / message response both share.
//!
//! Only these two RPCs' wire layouts belong here. Topic-level RPCs are in `topics`, the read-only
//! ones in `list` and `describe`; validating the configs a Create carries is the engine's.

use super::{R, W};
use crate::error::ProtocolError;

/// CreateClusterMirror request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateRequest {
    pub mirror_name: String,
    pub configs: Vec<(String, Option<String>)>,
}

/// DeleteClusterMirror request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    pub mirror_name: String,
    pub state_validation_offset: i64,
}

/// CreateClusterMirror / DeleteClusterMirror response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl CreateRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).array_len(self.configs.len());
        for (k, v) in &self.configs {
            w.str(k).nstr(v.as_deref()).tags();
        }
        w.tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let mirror_name = r.str()?;
        let mut configs = Vec::new();
        for _ in 0..r.array_len()? {
            configs.push((r.str()?, r.nstr()?));
            r.tags()?;
        }
        r.tags()?;
        Ok(Self { mirror_name, configs })
    }
}

impl DeleteRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.str(&self.mirror_name).i64(self.state_validation_offset).tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (mirror_name, state_validation_offset) = (r.str()?, r.i64()?);
        r.tags()?;
        Ok(Self {
            mirror_name,
            state_validation_offset,
        })
    }
}

impl SimpleResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms).i16(self.error_code).nstr(self.error_message.as_deref()).tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let out = Self {
            throttle_time_ms: r.i32()?,
            error_code: r.i16()?,
            error_message: r.nstr()?,
        };
        r.tags()?;
        Ok(out)
    }
}
