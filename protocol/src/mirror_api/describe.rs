//! DescribeClusterMirrors: the request (which mirrors) and the response (per mirror, per topic,
//! per partition offsets, lag and state), as the KIP lays them out.
//!
//! The proxy's own additions to the response ride in tagged fields whose types and value layouts
//! are in `extensions`; this file only places them in the entries. What the numbers mean and
//! how they are measured is the engine's.

use super::extensions::{ENGINE_IDENTITY_TAG, EngineIdentity, PARTITION_PROGRESS_TAG, PartitionProgress, SYNC_STATUS_TAG, SyncEntry};
use super::{R, W};
use crate::error::ProtocolError;

/// DescribeClusterMirrors request (tagged ClusterId / epoch lookups are read and ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeRequest {
    /// Empty = all mirrors.
    pub mirror_names: Vec<String>,
    pub include_authorized_operations: bool,
}

/// DescribeClusterMirrors response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub mirrors: Vec<DescribedMirror>,
    /// Proxy extension, tagged field [`ENGINE_IDENTITY_TAG`] of the response: which instance
    /// answered.
    pub engine: Option<EngineIdentity>,
}

/// DescribeClusterMirrors mirror entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedMirror {
    pub error_code: i16,
    pub mirror_name: String,
    pub authorized_operations: i32,
    pub topics: Vec<(String, Vec<PartitionDetail>)>,
    /// Proxy extension, tagged field [`SYNC_STATUS_TAG`] of the mirror entry (readers that do
    /// not know it skip it, as for any tagged field): metadata sync status per kind.
    pub sync: Vec<SyncEntry>,
}

/// DescribeClusterMirrors partition detail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionDetail {
    pub partition_index: i32,
    pub source_offset: i64,
    pub destination_offset: i64,
    pub lag: i64,
    pub state_value: String,
    pub retry_attempt: i16,
    pub error_message: Option<String>,
    /// Proxy extension, tagged field [`PARTITION_PROGRESS_TAG`] of the partition entry (readers
    /// that do not know it skip it): copy counters and the recent rate.
    pub progress: Option<PartitionProgress>,
}

impl DescribeRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.strs(&self.mirror_names).bool(self.include_authorized_operations).tags();
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let mirror_names = r.strs()?;
        let include_authorized_operations = r.bool()?;
        r.tags()?; // ClusterId, LastMirrorEpochLookups: failback lookups a proxy cannot answer
        Ok(Self {
            mirror_names,
            include_authorized_operations,
        })
    }
}

impl DescribeResponse {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.i32(self.throttle_time_ms)
            .i16(self.error_code)
            .nstr(self.error_message.as_deref())
            .array_len(self.mirrors.len());
        for m in &self.mirrors {
            w.i16(m.error_code).str(&m.mirror_name).i32(m.authorized_operations).array_len(m.topics.len());
            for (topic, parts) in &m.topics {
                w.str(topic).array_len(parts.len());
                for p in parts {
                    w.i32(p.partition_index)
                        .i64(p.source_offset)
                        .i64(p.destination_offset)
                        .i64(p.lag)
                        .str(&p.state_value);
                    w.i16(p.retry_attempt).nstr(p.error_message.as_deref());
                    match &p.progress {
                        None => w.tags(),
                        Some(g) => w.tagged(PARTITION_PROGRESS_TAG, g.encode_value()),
                    };
                }
                w.tags();
            }
            if m.sync.is_empty() {
                w.tags();
            } else {
                w.tagged(SYNC_STATUS_TAG, SyncEntry::encode_value(&m.sync));
            }
        }
        match &self.engine {
            None => w.tags(),
            Some(e) => w.tagged(ENGINE_IDENTITY_TAG, e.encode_value()),
        };
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let (throttle_time_ms, error_code, error_message) = (r.i32()?, r.i16()?, r.nstr()?);
        let mut mirrors = Vec::new();
        for _ in 0..r.array_len()? {
            let (error_code, mirror_name, authorized_operations) = (r.i16()?, r.str()?, r.i32()?);
            let mut topics = Vec::new();
            for _ in 0..r.array_len()? {
                let name = r.str()?;
                let mut parts = Vec::new();
                for _ in 0..r.array_len()? {
                    let mut p = PartitionDetail {
                        partition_index: r.i32()?,
                        source_offset: r.i64()?,
                        destination_offset: r.i64()?,
                        lag: r.i64()?,
                        state_value: r.str()?,
                        retry_attempt: r.i16()?,
                        error_message: r.nstr()?,
                        progress: None,
                    };
                    for (tag, bytes) in r.tags()? {
                        if tag == PARTITION_PROGRESS_TAG {
                            p.progress = Some(PartitionProgress::decode_value(bytes)?);
                        }
                    }
                    parts.push(p);
                }
                r.tags()?;
                topics.push((name, parts));
            }
            let mut sync = Vec::new();
            for (tag, bytes) in r.tags()? {
                if tag != SYNC_STATUS_TAG {
                    continue;
                }
                SyncEntry::decode_value_into(bytes, &mut sync)?;
            }
            mirrors.push(DescribedMirror {
                error_code,
                mirror_name,
                authorized_operations,
                topics,
                sync,
            });
        }
        let mut engine = None;
        for (tag, bytes) in r.tags()? {
            if tag == ENGINE_IDENTITY_TAG {
                engine = Some(EngineIdentity::decode_value(bytes)?);
            }
        }
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
            engine,
        })
    }
}
