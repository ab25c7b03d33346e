//! DescribeClusterMirrors: the request (which mirrors; with the tagged `ClusterId` and
//! `LastMirrorEpochLookups`, a failing-back cluster's lookup of the epochs its topics were
//! mirrored up to) and the response (per mirror, per topic, per partition offsets, lag and state;
//! the tagged `LookupResults`), as the KIP lays them out.
//!
//! The proxy's own additions to the response ride in tagged fields whose types and value layouts
//! are in `extensions`; this file only places them in the entries. What the numbers mean and
//! how they are measured is the engine's.

use super::extensions::{
    ENGINE_IDENTITY_TAG, EngineIdentity, LAST_MIRROR_TAG, LastMirror, PARTITION_PROGRESS_TAG, PartitionProgress, SYNC_STATUS_TAG, SyncEntry,
};
use super::{R, W};
use crate::error::{ProtocolError, Side};

/// Tag of the request's `ClusterId`: the requesting cluster's own id.
const CLUSTER_ID_TAG: u32 = 0;
/// Tag of the request's `LastMirrorEpochLookups`.
const LOOKUPS_TAG: u32 = 1;
/// Tag of the response's `LookupResults`.
const LOOKUP_RESULTS_TAG: u32 = 0;

/// One topic of a failback's lookup: the asking cluster's topic id and the partitions asked.
pub type EpochLookup = ([u8; 16], Vec<i32>);

/// One topic of the answer to a lookup: the topic id and, per partition asked, its last mirror
/// epoch (-1 not found).
pub type LookupResult = ([u8; 16], Vec<(i32, i32)>);

/// DescribeClusterMirrors request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeRequest {
    /// Empty = all mirrors.
    pub mirror_names: Vec<String>,
    pub include_authorized_operations: bool,
    /// Tagged `ClusterId`: the id of the cluster asking (a failback's lookup).
    pub cluster_id: Option<String>,
    /// Tagged `LastMirrorEpochLookups`: per source topic id, the partitions whose last mirror
    /// epoch the asking cluster wants (of mirrors whose source is that cluster).
    pub epoch_lookups: Vec<EpochLookup>,
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
    /// Tagged `LookupResults` (the answer to the request's epoch lookups): per topic id, per
    /// partition, the last mirror epoch (-1 not found).
    pub lookup_results: Vec<LookupResult>,
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
    /// Proxy extension, tagged field [`LAST_MIRROR_TAG`] of the partition entry: the line the
    /// copy reached (recorded at stop).
    pub last_mirror: Option<LastMirror>,
}

impl DescribeRequest {
    pub fn encode(&self) -> W {
        let mut w = W::default();
        w.strs(&self.mirror_names).bool(self.include_authorized_operations);
        let mut tags = Vec::new();
        if let Some(id) = &self.cluster_id {
            let mut v = W::default();
            v.nstr(Some(id));
            tags.push((CLUSTER_ID_TAG, v));
        }
        if !self.epoch_lookups.is_empty() {
            let mut v = W::default();
            v.array_len(self.epoch_lookups.len());
            for (id, partitions) in &self.epoch_lookups {
                v.uuid(id).array_len(partitions.len());
                for p in partitions {
                    v.i32(*p);
                }
                v.tags();
            }
            tags.push((LOOKUPS_TAG, v));
        }
        w.tag_section(tags);
        w
    }

    pub fn decode(r: &mut R<'_>) -> Result<Self, ProtocolError> {
        let mirror_names = r.strs()?;
        let include_authorized_operations = r.bool()?;
        let (mut cluster_id, mut epoch_lookups) = (None, Vec::new());
        for (tag, bytes) in r.tags()? {
            let mut v = R::new(bytes, 0, Side::Client);
            match tag {
                CLUSTER_ID_TAG => cluster_id = v.nstr()?,
                LOOKUPS_TAG => {
                    for _ in 0..v.array_len()? {
                        let id = v.uuid()?;
                        let partitions = (0..v.array_len()?).map(|_| v.i32()).collect::<Result<Vec<_>, _>>()?;
                        v.tags()?;
                        epoch_lookups.push((id, partitions));
                    }
                }
                _ => {}
            }
        }
        Ok(Self {
            mirror_names,
            include_authorized_operations,
            cluster_id,
            epoch_lookups,
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
                    let mut tags = Vec::new();
                    if let Some(g) = &p.progress {
                        tags.push((PARTITION_PROGRESS_TAG, g.encode_value()));
                    }
                    if let Some(l) = &p.last_mirror {
                        tags.push((LAST_MIRROR_TAG, l.encode_value()));
                    }
                    w.tag_section(tags);
                }
                w.tags();
            }
            if m.sync.is_empty() {
                w.tags();
            } else {
                w.tagged(SYNC_STATUS_TAG, SyncEntry::encode_value(&m.sync));
            }
        }
        let mut tags = Vec::new();
        if !self.lookup_results.is_empty() {
            let mut v = W::default();
            v.array_len(self.lookup_results.len());
            for (id, partitions) in &self.lookup_results {
                v.uuid(id).array_len(partitions.len());
                for (p, epoch) in partitions {
                    v.i32(*p).i32(*epoch).tags();
                }
                v.tags();
            }
            tags.push((LOOKUP_RESULTS_TAG, v));
        }
        if let Some(e) = &self.engine {
            tags.push((ENGINE_IDENTITY_TAG, e.encode_value()));
        }
        w.tag_section(tags);
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
                        last_mirror: None,
                    };
                    for (tag, bytes) in r.tags()? {
                        match tag {
                            PARTITION_PROGRESS_TAG => p.progress = Some(PartitionProgress::decode_value(bytes)?),
                            LAST_MIRROR_TAG => p.last_mirror = Some(LastMirror::decode_value(bytes)?),
                            _ => {}
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
        let (mut engine, mut lookup_results) = (None, Vec::new());
        for (tag, bytes) in r.tags()? {
            match tag {
                ENGINE_IDENTITY_TAG => engine = Some(EngineIdentity::decode_value(bytes)?),
                LOOKUP_RESULTS_TAG => {
                    let mut v = R::new(bytes, 0, Side::Broker);
                    for _ in 0..v.array_len()? {
                        let id = v.uuid()?;
                        let mut partitions = Vec::new();
                        for _ in 0..v.array_len()? {
                            partitions.push((v.i32()?, v.i32()?));
                            v.tags()?;
                        }
                        v.tags()?;
                        lookup_results.push((id, partitions));
                    }
                }
                _ => {}
            }
        }
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
            engine,
            lookup_results,
        })
    }
}
